"""Copy isolation: COPY-ISOLATION.

Nothing a caller passes in or gets back is shared with the store: mutating a run's
dicts, an event's payload or a graph document afterwards changes nothing stored.
"""

from __future__ import annotations

import copy
from typing import Any

from docket.contract import EventListQuery
from docket.records import TENANTLESS, Event, EventPage, GraphVersion, Run
from docket_contract_tests.fixtures import (
    claimed,
    event,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    save_graph,
    seed,
    successor,
)
from docket_contract_tests.kit import Kit, invariant


def _scribble(run: Any) -> None:
    """Mutate every mutable part of a run value in place."""
    run.input["question"] = "scribbled"
    run.input["extra"] = [1, 2, 3]
    run.metadata["scribbled"] = True


@invariant("COPY-ISOLATION")
async def test_the_initialized_run_is_not_shared(docket_kit: Kit) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    run = new_run(k.name("r"), ref, k.t0, input={"question": "why?", "nested": {"a": [1]}})
    pristine = copy.deepcopy(run)
    answer = await k.b.transitions.initialize(TENANTLESS, init_proposal(run, k.t0), [])
    k.eq(answer, pristine, "initialize")
    _scribble(run)
    nested: Any = run.input["nested"]
    nested["a"].append(2)
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run.id), pristine, "after mutating the argument")
    _scribble(answer)
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run.id), pristine, "after mutating the answer")


@invariant("COPY-ISOLATION")
async def test_fetched_runs_are_not_shared(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS, input={"question": "why?", "nested": {"a": [1]}})
    pristine = copy.deepcopy(run)
    fetched = k.isa(await k.b.runs.fetch_run(TENANTLESS, run.id), Run, "fetch_run")
    _scribble(fetched)
    inner: Any = fetched.input["nested"]
    inner["a"].append(9)
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run.id), pristine, "after mutating fetch_run")
    info = await k.info(TENANTLESS, run.id)
    _scribble(info.run)
    k.eq((await k.info(TENANTLESS, run.id)).run, pristine, "after mutating inspect_run().run")
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run.id), pristine, "fetch_run after both")


@invariant("COPY-ISOLATION")
async def test_committed_runs_are_not_shared(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    lease = await k.claim_one(k.t0, run.id)
    nxt = successor(run, k.at(1), input={"step": 1})
    pristine = copy.deepcopy(nxt)
    answer = await k.b.transitions.commit_claimed(TENANTLESS, claimed(nxt, lease.claim_token), [])
    k.eq(answer, pristine, "commit_claimed")
    _scribble(nxt)
    _scribble(answer)
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run.id), pristine, "after mutating the commit")


@invariant("COPY-ISOLATION")
async def test_events_are_not_shared(docket_kit: Kit) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    run = new_run(k.name("r"), ref, k.t0, event_seq=2)
    sent = [
        event(run.id, 1, k.t0, payload={"items": [1, 2]}, metadata={"m": {"k": 1}}),
        event(run.id, 2, k.t0, payload={"items": []}),
    ]
    pristine = copy.deepcopy(sent)
    batch = list(sent)
    await k.b.transitions.initialize(TENANTLESS, init_proposal(run, k.t0), batch)
    items: Any = sent[0].payload["items"]
    items.append(3)
    meta: Any = sent[0].metadata["m"]
    meta["k"] = 2
    sent[1].payload["new"] = True
    batch.append(event(run.id, 3, k.t0))
    k.eq(list(await k.events(TENANTLESS, run.id)), pristine, "after mutating the arguments")
    fetched = await k.b.events.fetch_event(TENANTLESS, run.id, 1)
    k.isa(fetched, Event, "fetch_event").payload["items"] = "scribbled"
    latest = k.isa(await k.b.events.fetch_latest_event(TENANTLESS, run.id), Event, "latest")
    latest.payload["new"] = "scribbled"
    page = k.isa(
        await k.b.events.list_events(TENANTLESS, run.id, EventListQuery()), EventPage, "page"
    )
    for item in page.events:
        item.payload.clear()
    k.eq(list(await k.events(TENANTLESS, run.id)), pristine, "after mutating what was read")


@invariant("COPY-ISOLATION")
async def test_graph_documents_are_not_shared(docket_kit: Kit) -> None:
    k = docket_kit
    document = graph_document(k.name("g"))
    ref = graph_ref(document)
    pristine = copy.deepcopy(document)
    k.isa(await k.b.graphs.save_graph(TENANTLESS, ref, document), GraphVersion, "save")
    inner: Any = document["graph"]
    inner["id"] = "scribbled"
    inner["nodes"].append({"id": "evil"})
    k.eq(await k.b.graphs.fetch_graph(TENANTLESS, ref), pristine, "after mutating the argument")
    fetched = await k.b.graphs.fetch_graph(TENANTLESS, ref)
    assert isinstance(fetched, dict)
    fetched_inner: Any = fetched["graph"]
    fetched_inner["id"] = "scribbled"
    fetched_inner["nodes"].clear()
    k.eq(await k.b.graphs.fetch_graph(TENANTLESS, ref), pristine, "after mutating the answer")


@invariant("COPY-ISOLATION")
async def test_a_replay_answer_is_not_shared(docket_kit: Kit) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    run = new_run(k.name("r"), ref, k.t0)
    pristine = copy.deepcopy(run)
    proposal = init_proposal(run, k.t0)
    await k.b.transitions.initialize(TENANTLESS, proposal, [])
    replay = await k.b.transitions.initialize(TENANTLESS, proposal, [])
    stored = k.isa(replay, Run, "replay")
    _scribble(stored)
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run.id), pristine, "after mutating a replay answer")
