"""Retention: ``prune`` deletes old events (live runs' too: readers see the hole) and
finished runs, in bounded batches, on the backend's clock, one pruner at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from docket_contract_tests.fixtures import (
    event,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)
from docket_postgres import PostgresBackend, PruneResult
from docket_postgres.testing import connect as admin
from docket_postgres.testing import open_backend as opened

from docket.clock import ManualClock
from docket.contract import (
    ClaimBatch,
    ClaimPolicy,
    EventListQuery,
    External,
    Feature,
    NotFound,
    RunListQuery,
    Terminal,
)
from docket.records import (
    SYSTEM,
    TENANTLESS,
    EventPage,
    GraphRef,
    GraphVersion,
    Run,
    RunStatus,
)

Names = Callable[[str], str]
T0 = datetime(2026, 7, 1, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


async def _graph(backend: PostgresBackend) -> GraphRef:
    document = graph_document("g")
    ref = graph_ref(document)
    assert isinstance(await backend.graphs.save_graph(TENANTLESS, ref, document), GraphVersion)
    return ref


async def _run(backend: PostgresBackend, ref: GraphRef, run_id: str, events: int) -> Run:
    now = await backend.now()
    fresh = new_run(run_id, ref, now, event_seq=events)
    evs = events_for(fresh, now, range(1, events + 1))
    assert (
        await backend.transitions.initialize(
            TENANTLESS, init_proposal(fresh, now + HOUR * 100), evs
        )
        == fresh
    )
    return fresh


def test_old_events_are_pruned_and_the_hole_is_visible(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        backend = await opened(pg_url, schema_name("prune"), clock=clock)
        try:
            assert Feature.PRUNE in backend.capabilities().features
            ref = await _graph(backend)
            first = await _run(backend, ref, "live", events=3)
            clock.advance(2 * HOUR)
            later = successor(first, clock(), new_events=2)
            assert (
                await backend.transitions.commit_unclaimed(
                    TENANTLESS, 1, unclaimed(later), events_for(later, clock(), [4, 5])
                )
                == later
            )
            # exactly at the boundary (inserted two hours ago, age two hours): kept
            assert await backend.prune(event_age=2 * HOUR) == PruneResult(True, 0, 0)
            assert await backend.prune(event_age=HOUR) == PruneResult(True, 3, 0)
            page = await backend.events.list_events(TENANTLESS, "live", EventListQuery())
            assert isinstance(page, EventPage)
            assert [e.seq for e in page.events] == [4, 5]
            assert (page.oldest_available_seq, page.latest_available_seq, page.latest_seq) == (
                4,
                5,
                5,
            )
            assert isinstance(await backend.events.fetch_event(TENANTLESS, "live", 1), NotFound)
            # the run itself is live and untouched
            assert await backend.runs.fetch_run(TENANTLESS, "live") == later
            # a commit that re-sends a pruned event is accepted, and it is not re-inserted
            nxt = successor(later, clock(), new_events=1)
            resend = [event("live", 3, first.started_at), *events_for(nxt, clock(), [6])]
            assert (
                await backend.transitions.commit_unclaimed(TENANTLESS, 2, unclaimed(nxt), resend)
                == nxt
            )
            page = await backend.events.list_events(TENANTLESS, "live", EventListQuery())
            assert isinstance(page, EventPage) and [e.seq for e in page.events] == [4, 5, 6]
        finally:
            await backend.close()

    asyncio.run(body())


def test_finished_runs_are_pruned_with_their_events(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        backend = await opened(pg_url, schema_name("prune"), clock=clock)
        try:
            ref = await _graph(backend)
            done = await _run(backend, ref, "done", events=2)
            waiting = await _run(backend, ref, "waiting", events=1)
            await _run(backend, ref, "claimed", events=0)
            finished = successor(done, clock(), status=RunStatus.DONE)
            assert (
                await backend.transitions.commit_unclaimed(
                    TENANTLESS, 1, unclaimed(finished, wake=Terminal()), []
                )
                == finished
            )
            parked = successor(waiting, clock(), status=RunStatus.WAITING)
            assert (
                await backend.transitions.commit_unclaimed(
                    TENANTLESS, 1, unclaimed(parked, wake=External()), []
                )
                == parked
            )
            policy = ClaimPolicy(
                limit=5, orphan_ttl=HOUR, max_claim_attempts=3, now=T0 + 200 * HOUR
            )
            batch = await backend.runs.claim_due(policy)
            assert isinstance(batch, ClaimBatch) and [x.run_id for x in batch.leases] == ["claimed"]
            clock.advance(3 * HOUR)
            assert await backend.prune(run_age=2 * HOUR) == PruneResult(True, 0, 1)
            assert isinstance(await backend.runs.fetch_run(TENANTLESS, "done"), NotFound)
            gone = await backend.events.list_events(TENANTLESS, "done", EventListQuery())
            assert isinstance(gone, NotFound)
            left = await backend.runs.list_runs(SYSTEM, RunListQuery())
            assert sorted(s.id for s in left.runs) == ["claimed", "waiting"]
            assert await backend.prune(run_age=timedelta(0)) == PruneResult(True, 0, 0)
        finally:
            await backend.close()

    asyncio.run(body())


def test_batches_are_bounded(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        backend = await opened(pg_url, schema_name("prune"), clock=clock)
        try:
            ref = await _graph(backend)
            for i in range(5):
                await _run(backend, ref, f"r{i}", events=5)
            clock.advance(HOUR)
            counts = [
                (await backend.prune(event_age=HOUR / 2, batch_size=10)).events for _ in range(4)
            ]
            assert counts == [10, 10, 5, 0]
        finally:
            await backend.close()

    asyncio.run(body())


def test_one_pruner_at_a_time(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("prune")
        backend = await opened(pg_url, schema)
        conn = await admin(pg_url)
        try:
            await conn.set_autocommit(False)
            await conn.execute(  # another pruner is in the middle of a pass
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"docket:prune:{schema}",),
            )
            assert await backend.prune(event_age=HOUR) == PruneResult(False, 0, 0)
            await conn.rollback()
            assert (await backend.prune(event_age=HOUR)).ran
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


@pytest.mark.parametrize(
    "options",
    [{"event_age": -HOUR}, {"run_age": 5}, {"batch_size": 0}, {"batch_size": True}],
)
def test_bad_prune_arguments_raise(options: dict[str, object]) -> None:
    backend = PostgresBackend("postgresql://localhost/db")
    with pytest.raises(ValueError):
        asyncio.run(backend.prune(**options))  # type: ignore[arg-type]
