"""Raw proposals and graph documents sent straight to every backend's stores.

A valid proposal is built the way the contract kit builds them, then mutated (sequence
numbers, tokens, transition ids, schedules, run fields, events) by hypothesis. The
property, on memory, SQLite, PostgreSQL and Redis alike:

* the store *answers* — a stored value or a member of the closed error algebra — and
  never raises;
* bad input gets a typed refusal, not an infrastructure answer (``Retryable`` or
  ``Permanent`` would tell the caller to retry or page someone over a malformed call);
* after a refusal everything observable reads back exactly as before (the run, its
  operational state, its events, the list of runs, the graph versions).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import attrs
from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from hypothesis import given
from hypothesis import strategies as st

from docket.contract import (
    ClaimBatch,
    ClaimedProposal,
    ClaimPolicy,
    EventListQuery,
    External,
    GraphContentConflict,
    GraphListQuery,
    InitProposal,
    InvalidGraph,
    Permanent,
    ReleaseClaim,
    RetainClaim,
    Retryable,
    RunListQuery,
    Terminal,
    TooLarge,
)
from docket.contract.errors import TRANSITION_ERRORS
from docket.records import (
    SYSTEM,
    TENANTLESS,
    CheckpointType,
    Event,
    GraphRef,
    GraphVersion,
    OwnerScope,
    Run,
    RunStatus,
    Tenant,
)
from docket.values import content_hash
from tests.fuzz.backends import OpenStore
from tests.fuzz.support import FUZZ, any_maps, any_values, ids, text

Mutation = Callable[[st.DataObject, Any, list[Any]], tuple[Any, list[Any]]]

datetimes = st.one_of(
    st.datetimes(),  # naive
    st.datetimes(timezones=st.just(dt.UTC)),
    st.datetimes(timezones=st.just(dt.timezone(dt.timedelta(hours=-5)))),
)
integers = st.one_of(
    st.integers(min_value=-3, max_value=12), st.integers(), st.sampled_from([2**63, 10**30])
)
anything = st.one_of(
    any_values, integers, datetimes, st.sampled_from(list(RunStatus)), st.sampled_from(["done"])
)


# -- observation --------------------------------------------------------------------------------


async def observe(store: OpenStore, owner: OwnerScope, run_id: object) -> tuple[object, ...]:
    """Everything a refusal must leave untouched (the run, its events, the run list)."""
    b = store.backend
    listed = await b.runs.list_runs(SYSTEM, RunListQuery(limit=1000))
    everything = tuple(sorted((s.id, s.checkpoint_seq, s.status) for s in listed.runs))
    if not isinstance(run_id, str):
        return (everything,)
    return (
        everything,
        await b.runs.inspect_run(owner, run_id),
        await b.events.list_events(owner, run_id, EventListQuery(limit=1000)),
        await b.events.fetch_latest_event(owner, run_id),
    )


def refusal(result: object, what: str) -> None:
    """A typed refusal of bad input (not an infrastructure answer)."""
    assert isinstance(result, TRANSITION_ERRORS), f"{what}: not a contract answer: {result!r}"
    assert not isinstance(result, Retryable | Permanent), f"{what}: bad input got {result!r}"


def encodable(value: object) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# -- mutations ----------------------------------------------------------------------------------


def _set(name: str, values: st.SearchStrategy[Any]) -> Mutation:
    def mutate(data: st.DataObject, proposal: Any, events: list[Any]) -> tuple[Any, list[Any]]:
        return attrs.evolve(proposal, **{name: data.draw(values, label=name)}), events

    return mutate


def _run_field(data: st.DataObject, proposal: Any, events: list[Any]) -> tuple[Any, list[Any]]:
    if not isinstance(proposal.run, Run):  # an earlier mutation replaced the run
        return proposal, events
    name = data.draw(st.sampled_from([f.name for f in attrs.fields(Run)]), label="run field")
    value: Any = data.draw(anything, label=f"run.{name}")
    return attrs.evolve(proposal, run=attrs.evolve(proposal.run, **{name: value})), events


def _run_junk(data: st.DataObject, proposal: Any, events: list[Any]) -> tuple[Any, list[Any]]:
    plain = {"id": proposal.run.id} if isinstance(proposal.run, Run) else None
    junk = data.draw(st.one_of(any_values, st.just(plain)), label="run")
    return attrs.evolve(proposal, run=junk), events


def _event_field(data: st.DataObject, proposal: Any, events: list[Any]) -> tuple[Any, list[Any]]:
    if not isinstance(events, list) or not events:
        return proposal, events
    index = data.draw(st.integers(0, len(events) - 1), label="event")
    if not isinstance(events[index], Event):
        return proposal, events
    name = data.draw(st.sampled_from([f.name for f in attrs.fields(Event)]), label="event field")
    changed = list(events)
    changed[index] = attrs.evolve(events[index], **{name: data.draw(anything, label=name)})
    return proposal, changed


def _event_list(data: st.DataObject, proposal: Any, events: list[Any]) -> tuple[Any, list[Any]]:
    how = data.draw(st.sampled_from(["drop", "duplicate", "reverse", "extra", "junk"]))
    if not isinstance(events, list):  # an earlier mutation already replaced the list
        return proposal, events
    if how == "drop" and events:
        return proposal, events[1:]
    if how == "duplicate" and events:
        return proposal, [*events, events[-1]]
    if how == "reverse":
        return proposal, list(reversed(events))
    if how == "extra" and events and isinstance(events[-1], Event):
        last = events[-1]
        return proposal, [*events, attrs.evolve(last, seq=last.seq + 1)]
    return proposal, data.draw(st.one_of(any_values, st.just([None])), label="events")


COMMON: list[Mutation] = [
    _set("transition_id", st.one_of(ids, any_values)),
    _set("checkpoint_type", st.one_of(st.sampled_from(list(CheckpointType)), text, any_values)),
    _run_field,
    _run_field,
    _run_junk,
    _event_field,
    _event_field,
    _event_list,
]
CLAIMED: list[Mutation] = [
    *COMMON,
    _set("expected_checkpoint_seq", st.one_of(integers, any_values)),
    _set("claim_token", st.one_of(ids, any_values)),
    _set(
        "schedule",
        st.one_of(
            st.sampled_from(
                [RetainClaim(), ReleaseClaim(Terminal()), ReleaseClaim(External()), None]
            ),
            st.builds(ReleaseClaim, any_values),
            any_values,
        ),
    ),
]
INIT: list[Mutation] = [*COMMON, _set("wake_at", st.one_of(datetimes, any_values))]


def mutate(data: st.DataObject, choices: list[Mutation], proposal: Any, events: list[Any]) -> Any:
    for change in data.draw(st.lists(st.sampled_from(choices), min_size=1, max_size=3)):
        proposal, events = change(data, proposal, events)
    return proposal, events


# -- the fuzzers --------------------------------------------------------------------------------


class _Names:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.n = 0

    def __call__(self, label: str) -> str:
        self.n += 1
        return f"{self.prefix}-{label}{self.n}"


async def _graph(store: OpenStore, owner: OwnerScope, graph_id: str) -> GraphRef:
    document = graph_document(graph_id)
    ref = graph_ref(document)
    saved = await store.backend.graphs.save_graph(owner, ref, document)
    assert isinstance(saved, GraphVersion), saved
    return ref


def test_graph_saves(store: OpenStore) -> None:
    """``save_graph`` with corrupted documents and references."""
    names = _Names("g")

    @FUZZ
    @given(data=st.data())
    def example(data: st.DataObject) -> None:
        graph_id = names("graph")
        document: Any = graph_document(graph_id)
        how = data.draw(st.sampled_from(["insert", "graph-id", "kind", "replace", "none"]))
        if how == "insert":
            target = data.draw(st.sampled_from([document, document["graph"]]))
            target[data.draw(text, label="key")] = data.draw(any_values, label="value")
        elif how == "graph-id":
            document["graph"]["id"] = data.draw(st.one_of(ids, any_values))
        elif how == "kind":
            document["kind"] = data.draw(any_values)
        elif how == "replace":
            document = data.draw(any_maps)
        try:
            good_hash = content_hash(document)
        except Exception:  # not durable: no hash can match
            good_hash = "0" * 64
        ref: Any = data.draw(
            st.one_of(
                st.just(GraphRef(graph_id, good_hash)),
                st.builds(GraphRef, st.one_of(ids, st.just(graph_id)), st.just(good_hash)),
                st.builds(GraphRef, st.just(graph_id), st.one_of(ids, any_values)),
                any_values,
            ),
            label="ref",
        )
        owners: list[OwnerScope] = [TENANTLESS, Tenant("fuzz-tenant")]
        owner = data.draw(st.sampled_from(owners))
        # Reads take well-typed references: a junk-typed one, or text no store can encode
        # (a lone surrogate), is a caller bug that may raise TypeError/ValueError there.
        probe = (
            ref
            if isinstance(ref, GraphRef) and encodable(ref.graph_id) and encodable(ref.graph_hash)
            else None
        )
        b = store.backend

        async def look() -> tuple[object, ...]:
            if probe is None:
                return ()
            return (
                await b.graphs.fetch_graph(owner, probe),
                await b.graphs.list_graph_versions(owner, probe.graph_id, GraphListQuery()),
            )

        async def scenario() -> None:
            before = await look()
            result = await b.graphs.save_graph(owner, ref, document)
            if isinstance(result, GraphVersion):
                assert result.ref == ref
                assert await b.graphs.fetch_graph(owner, ref) == document
                return
            assert isinstance(result, InvalidGraph | TooLarge | GraphContentConflict), result
            assert await look() == before, "a refused save changed what is stored"

        store.runner.run(scenario())

    example()


def test_initialize_proposals(store: OpenStore) -> None:
    """``initialize`` with mutated proposals and events."""
    names = _Names("i")
    ref = store.runner.run(_graph(store, TENANTLESS, "init-graph"))

    @FUZZ
    @given(data=st.data())
    def example(data: st.DataObject) -> None:
        async def scenario() -> None:
            b = store.backend
            now = await b.now()
            run = new_run(names("run"), ref, now, event_seq=2)
            good = init_proposal(run, now)
            proposal, events = mutate(data, INIT, good, events_for(run, now, [1, 2]))
            target = getattr(getattr(proposal, "run", None), "id", None)
            before = await observe(store, TENANTLESS, target)
            result = await b.transitions.initialize(TENANTLESS, proposal, events)
            if isinstance(result, Run):
                assert isinstance(proposal, InitProposal) and result == proposal.run
                return
            refusal(result, "initialize")
            assert await observe(store, TENANTLESS, target) == before, "a refusal changed state"

        store.runner.run(scenario())

    example()


def test_claimed_proposals(store: OpenStore) -> None:
    """``commit_claimed`` with mutated proposals and events, on a claimed run."""
    names = _Names("c")
    b = store.backend
    ref = store.runner.run(_graph(store, TENANTLESS, "claim-graph"))
    held: dict[str, Any] = {}

    async def fresh_claim() -> None:
        now = await b.now()
        run = new_run(names("run"), ref, now - dt.timedelta(hours=1))
        started = await b.transitions.initialize(TENANTLESS, init_proposal(run, run.started_at), [])
        assert started == run, started
        policy = ClaimPolicy(limit=1, orphan_ttl=dt.timedelta(days=1), max_claim_attempts=100)
        batch = await b.runs.claim_due(policy)
        assert isinstance(batch, ClaimBatch) and [x.run_id for x in batch.leases] == [run.id]
        held.update(run=run, token=batch.leases[0].claim_token)

    store.runner.run(fresh_claim())

    @FUZZ
    @given(data=st.data())
    def example(data: st.DataObject) -> None:
        async def scenario() -> None:
            run: Run = held["run"]
            nxt = successor(run, await b.now(), new_events=2)
            good = claimed(nxt, held["token"])
            events = events_for(nxt, nxt.updated_at, [run.event_seq + 1, run.event_seq + 2])
            proposal, events = mutate(data, CLAIMED, good, events)
            before = await observe(store, TENANTLESS, run.id)
            result = await b.transitions.commit_claimed(TENANTLESS, proposal, events)
            if isinstance(result, Run):
                assert isinstance(proposal, ClaimedProposal) and result == proposal.run
                # The mutation was harmless and the run moved on: fuzz a fresh one.
                await fresh_claim()
                return
            refusal(result, "commit_claimed")
            assert await observe(store, TENANTLESS, run.id) == before, "a refusal changed state"

        store.runner.run(scenario())

    example()
