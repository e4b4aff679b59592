"""Regressions for what the fuzzers found, pinned as plain examples on every backend.

* a lone surrogate (``"\\ud800"``) in an id, a graph document or an event payload raised
  ``UnicodeEncodeError`` out of the shared validator (and, through the facade, out of the
  SQLite, PostgreSQL and Redis drivers);
* values nested thousands of levels deep raised ``RecursionError`` (durability checks,
  canonical JSON, and the ``repr`` in error messages);
* a timestamp before year 1000 was written without a four-digit year: the commit was
  stored and the run could never be read back;
* a counter of 2**63 or more passed validation and overflowed SQLite's INTEGER;
* a NUL character in an id was answered ``Permanent`` by PostgreSQL instead of being
  refused as invalid everywhere;
* a tenant id with a NUL or a lone surrogate passed the shared validator (issue 18,
  item 10): ``Tenant("a\\x00b")`` could save a graph and start a run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import attrs
import pytest
from docket_contract_tests.fixtures import (
    claimed,
    event,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)

from docket import Docket
from docket.contract import (
    ClaimBatch,
    ClaimPolicy,
    EventListQuery,
    InvalidGraph,
    InvalidTransition,
    NotFound,
    RunListQuery,
)
from docket.errors import InvalidInput, InvalidOptions, InvalidTenant
from docket.graph.compiler import graph_from_effective_document
from docket.graph.wire import GraphLoadError
from docket.records import (
    SYSTEM,
    TENANTLESS,
    EventPage,
    GraphRef,
    GraphVersion,
    Run,
    Tenant,
    format_timestamp,
)
from docket.values import MAX_DEPTH, NonDurableValue, canonical_json, coerce_durable
from docket.values import durable_errors as durable_problems
from tests.fuzz.backends import OpenStore
from tests.fuzz.test_facade_fuzz import NODES, fuzz_graph

SURROGATE = "\ud800"


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def test_depth_is_bounded_without_recursion_errors() -> None:
    assert durable_problems(nested(MAX_DEPTH)) == []
    assert durable_problems(nested(MAX_DEPTH + 1))
    for depth in (MAX_DEPTH + 1, 5000):
        assert durable_problems({"deep": nested(depth)})
        with pytest.raises(NonDurableValue):
            canonical_json(nested(depth))
        with pytest.raises(NonDurableValue):
            coerce_durable({"deep": nested(depth)})
    with pytest.raises(GraphLoadError):
        graph_from_effective_document({"docket": nested(5000), "kind": "graph", "graph": {}})


def test_old_timestamps_keep_four_digit_years() -> None:
    moment = dt.datetime(1, 1, 1, tzinfo=dt.UTC)
    assert format_timestamp(moment) == "0001-01-01T00:00:00.000000Z"


async def _claimed_run(store: OpenStore, ref: GraphRef, run_id: str) -> tuple[Run, str]:
    b = store.backend
    run = new_run(run_id, ref, await b.now() - dt.timedelta(hours=1))
    assert await b.transitions.initialize(TENANTLESS, init_proposal(run, run.started_at), []) == run
    policy = ClaimPolicy(limit=1, orphan_ttl=dt.timedelta(days=1), max_claim_attempts=9)
    batch = await b.runs.claim_due(policy)
    assert isinstance(batch, ClaimBatch) and [x.run_id for x in batch.leases] == [run_id]
    return run, batch.leases[0].claim_token


def test_bad_text_and_huge_counters_are_refused_by_every_store(store: OpenStore) -> None:
    async def scenario() -> None:
        b = store.backend
        document = graph_document("regressions")
        ref = graph_ref(document)
        assert isinstance(await b.graphs.save_graph(TENANTLESS, ref, document), GraphVersion)

        # Graphs: a surrogate in the id or in the document is an invalid graph.
        bad_ref = GraphRef(SURROGATE, ref.graph_hash)
        assert isinstance(await b.graphs.save_graph(TENANTLESS, bad_ref, document), InvalidGraph)
        odd = graph_document("odd", pad=SURROGATE)
        odd_ref = GraphRef("odd", "0" * 64)
        assert isinstance(await b.graphs.save_graph(TENANTLESS, odd_ref, odd), InvalidGraph)

        # initialize: surrogate or NUL ids, a surrogate payload, a huge counter.
        now = await b.now()
        base = new_run("reg-run", ref, now, event_seq=1)
        cases: dict[str, tuple[Run, str, Any]] = {
            "surrogate run id": (attrs.evolve(base, id=SURROGATE), "t1", None),
            "NUL run id": (attrs.evolve(base, id="a\x00b"), "t2", None),
            "surrogate transition id": (base, SURROGATE, None),
            "NUL transition id": (base, "t\x00", None),
            "surrogate payload": (base, "t3", {"text": SURROGATE}),
            "huge step": (attrs.evolve(base, step=2**63), "t4", None),
        }
        for what, (run, transition_id, payload) in cases.items():
            events = [event(run.id, 1, now, payload=payload)]
            proposal = init_proposal(run, now, transition_id=transition_id)
            result = await b.transitions.initialize(TENANTLESS, proposal, events)
            assert isinstance(result, InvalidTransition), (what, result)
        assert isinstance(await b.runs.fetch_run(TENANTLESS, "reg-run"), NotFound)

        # commit_claimed: an ancient timestamp round-trips; a huge event seq is refused.
        run, token = await _claimed_run(store, ref, "reg-claimed")
        ancient = attrs.evolve(successor(run, now), updated_at=dt.datetime(1, 1, 1, tzinfo=dt.UTC))
        assert (
            await b.transitions.commit_claimed(TENANTLESS, claimed(ancient, token), []) == ancient
        )
        assert await b.runs.fetch_run(TENANTLESS, run.id) == ancient
        huge = attrs.evolve(successor(ancient, now), event_seq=2**63)
        result = await b.transitions.commit_claimed(TENANTLESS, claimed(huge, token), [])
        assert isinstance(result, InvalidTransition), result
        page = await b.events.list_events(TENANTLESS, run.id, EventListQuery())
        assert isinstance(page, EventPage) and page.events == ()

    store.runner.run(scenario())


def test_the_facade_refuses_bad_text_and_deep_values(store: OpenStore) -> None:
    async def scenario() -> None:
        async with Docket(store.backend, nodes=NODES) as docket:
            ref = await docket.save_graph(fuzz_graph())
            for call in (
                lambda: docket.fetch_run(SURROGATE),
                lambda: docket.inspect_run(SURROGATE),
                lambda: docket.history(SURROGATE),
                lambda: docket.cancel_run(SURROGATE),
                lambda: docket.fetch_graph(GraphRef(SURROGATE, ref.graph_hash)),
                lambda: docket.start_run(ref, {"name": "n"}, run_id=SURROGATE),
                lambda: docket.fetch_run(nested(5000)),
            ):
                with pytest.raises(InvalidOptions):
                    await call()
            for metadata in ({"deep": nested(5000)}, {"deep": nested(MAX_DEPTH + 1)}):
                with pytest.raises(InvalidInput):
                    await docket.start_run(ref, {"name": "n"}, metadata=metadata)
            assert (await docket.list_runs()).runs == ()

    store.runner.run(scenario())


def test_tenant_ids_with_bad_text_are_refused_and_store_nothing(store: OpenStore) -> None:
    async def scenario() -> None:
        b = store.backend
        document = graph_document("tenant-text")
        ref = graph_ref(document)
        now = await b.now()
        run = new_run("tenant-text-run", ref, now, event_seq=1)
        for bad in (Tenant("a\x00b"), Tenant(SURROGATE), Tenant("ok" + SURROGATE)):
            saved = await b.graphs.save_graph(bad, ref, document)
            assert isinstance(saved, InvalidGraph), (bad, saved)
            assert any(r.startswith("tenant_id:") for r in saved.reasons), saved.reasons
            proposal = init_proposal(run, now)
            started = await b.transitions.initialize(bad, proposal, [event(run.id, 1, now)])
            assert isinstance(started, InvalidTransition), (bad, started)
            assert any(r.startswith("tenant_id:") for r in started.reasons), started.reasons
            # refused before any lookup (there is no such run to find)
            later = successor(run, now)
            result = await b.transitions.commit_claimed(bad, claimed(later, "t" * 8), [])
            assert isinstance(result, InvalidTransition), (bad, result)
            result = await b.transitions.commit_unclaimed(bad, 1, unclaimed(later), [])
            assert isinstance(result, InvalidTransition), (bad, result)
        page = await b.runs.list_runs(SYSTEM, RunListQuery())
        assert page.runs == ()

    store.runner.run(scenario())


def test_the_facade_refuses_tenant_ids_with_bad_text(tmp_path: Path) -> None:
    async def scenario() -> None:
        url = f"sqlite:///{tmp_path / 'app.db'}"
        async with Docket(url, nodes=NODES, tenant_mode="required") as docket:
            for bad in ("a\x00b", SURROGATE):
                with pytest.raises(InvalidTenant, match="tenant_id"):
                    await docket.save_graph(fuzz_graph(), tenant_id=bad)
                with pytest.raises(InvalidTenant, match="tenant_id"):
                    await docket.fetch_run("r", tenant_id=bad)
                with pytest.raises(InvalidTenant, match="tenant_id"):
                    await docket.list_runs(tenant_id=bad)
            assert (await docket.list_runs(all_tenants=True)).runs == ()

    asyncio.run(scenario())
