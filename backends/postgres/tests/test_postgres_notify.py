"""LISTEN/NOTIFY: another instance's writes wake a waiter promptly, other schemas'
announcements do not, a refused write announces nothing, and a lost listener
connection reconnects; without the listener, polling is the fallback."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

from docket_contract_tests.fixtures import (
    claimed,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_postgres import PostgresBackend
from docket_postgres.testing import connect as admin
from docket_postgres.testing import open_backend as opened

from docket.contract import (
    AbandonPolicy,
    ClaimBatch,
    ClaimPolicy,
    Feature,
    Immediate,
    ReleaseClaim,
    StaleCheckpoint,
)
from docket.records import TENANTLESS, GraphRef, GraphVersion, Run

Names = Callable[[str], str]
CLAIM = ClaimPolicy(limit=1, orphan_ttl=timedelta(hours=1), max_claim_attempts=5)


async def _graph(backend: PostgresBackend) -> GraphRef:
    document = graph_document("g")
    ref = graph_ref(document)
    assert isinstance(await backend.graphs.save_graph(TENANTLESS, ref, document), GraphVersion)
    return ref


async def _due(backend: PostgresBackend, ref: GraphRef, run_id: str) -> Run:
    now = await backend.now()
    fresh = new_run(run_id, ref, now)
    assert await backend.transitions.initialize(TENANTLESS, init_proposal(fresh, now), []) == fresh
    return fresh


async def _woken_by(
    waiter: PostgresBackend, act: Callable[[], Awaitable[object]], timeout: float = 3.0
) -> tuple[bool, float]:
    """Whether ``act`` wakes ``waiter`` (and how long it took)."""
    task = asyncio.create_task(waiter.wait_for_work(timeout))
    await asyncio.sleep(0.02)  # the waiter waits before the work appears
    assert not task.done()
    started = time.monotonic()
    await act()
    woken = await task
    return woken, time.monotonic() - started


def test_another_instance_wakes_a_waiter_promptly(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("wake")
        waiter, writer = await opened(pg_url, schema), await opened(pg_url, schema)
        try:
            assert Feature.NOTIFY in waiter.capabilities().features
            ref = await _graph(writer)
            latencies = []
            for i in range(10):
                woken, took = await _woken_by(waiter, lambda: _due(writer, ref, f"r{i}"))  # noqa: B023
                assert woken, f"initialize #{i} did not wake the other instance"
                latencies.append(took)
            assert max(latencies) < 1.0, latencies
            assert statistics.median(latencies) < 0.2, latencies
            # release and abandon announce too (backend-spec §16.19)
            batch = await writer.runs.claim_due(CLAIM)
            assert isinstance(batch, ClaimBatch) and batch.leases
            lease = batch.leases[0]
            woken, _ = await _woken_by(
                waiter,
                lambda: writer.runs.release_claim(TENANTLESS, lease.run_id, lease.claim_token),
            )
            assert woken, "release wakes"
            batch = await writer.runs.claim_due(CLAIM)
            assert isinstance(batch, ClaimBatch) and batch.leases
            lease = batch.leases[0]
            now = await writer.now()
            policy = AbandonPolicy(
                expected_checkpoint_seq=1, retry_at=now, max_claim_abandons=3, now=now
            )
            woken, _ = await _woken_by(
                waiter,
                lambda: writer.runs.abandon_claim(
                    TENANTLESS, lease.run_id, lease.claim_token, policy
                ),
            )
            assert woken, "abandon wakes"
        finally:
            await waiter.close()
            await writer.close()

    asyncio.run(body())


def test_silence_for_other_schemas_future_work_and_refusals(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("quiet")
        waiter = await opened(pg_url, schema)
        writer = await opened(pg_url, schema)
        elsewhere = await opened(pg_url, schema_name("other"))
        try:
            other_ref = await _graph(elsewhere)
            woken, _ = await _woken_by(waiter, lambda: _due(elsewhere, other_ref, "x"), 0.4)
            assert not woken, "another schema's work is not ours"
            ref = await _graph(writer)
            now = await writer.now()
            later = new_run("later", ref, now)
            woken, _ = await _woken_by(
                waiter,
                lambda: writer.transitions.initialize(
                    TENANTLESS, init_proposal(later, now + timedelta(hours=1)), []
                ),
                0.4,
            )
            assert not woken, "a future wake is found by polling, not announced"
            fresh = await _due(writer, ref, "due")
            batch = await writer.runs.claim_due(CLAIM)
            assert isinstance(batch, ClaimBatch) and batch.leases
            stale = claimed(
                successor(fresh, now), "not-the-token", schedule=ReleaseClaim(Immediate())
            )

            async def refused() -> None:
                got = await writer.transitions.commit_claimed(TENANTLESS, stale, [])
                assert isinstance(got, StaleCheckpoint), got

            woken, _ = await _woken_by(waiter, refused, 0.4)
            assert not woken, "a refused commit announces nothing"
        finally:
            for backend in (waiter, writer, elsewhere):
                await backend.close()

    asyncio.run(body())


def test_a_lost_listener_connection_reconnects(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("reconnect")
        waiter, writer = await opened(pg_url, schema), await opened(pg_url, schema)
        conn = await admin(pg_url)
        try:
            ref = await _graph(writer)
            listener = waiter.listener
            assert listener is not None and listener.connected
            pid = listener.backend_pid
            assert pid is not None

            async def kill() -> None:
                await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

            # the reconnection itself wakes waiters: announcements may have been missed
            woken, took = await _woken_by(waiter, kill)
            assert woken and took < 2.0, took
            assert await listener.wait_connected(5.0)
            assert listener.connections == 2 and listener.backend_pid != pid
            woken, took = await _woken_by(waiter, lambda: _due(writer, ref, "after"))
            assert woken and took < 1.0, "announcements are heard again after reconnecting"
        finally:
            await conn.close()
            await waiter.close()
            await writer.close()

    asyncio.run(body())


def test_without_the_listener_polling_is_the_fallback(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("poll")
        quiet = await opened(pg_url, schema, notify=False)
        other = await opened(pg_url, schema, notify=False)
        try:
            assert Feature.NOTIFY not in quiet.capabilities().features
            assert quiet.listener is None
            ref = await _graph(quiet)
            woken, _ = await _woken_by(quiet, lambda: _due(quiet, ref, "own"))
            assert woken, "its own writes still wake its own waiters"
            started = time.monotonic()
            woken, _ = await _woken_by(other, lambda: _due(quiet, ref, "theirs"), 0.3)
            assert not woken and time.monotonic() - started >= 0.25, "others poll"
            batch = await other.runs.claim_due(
                ClaimPolicy(limit=5, orphan_ttl=timedelta(hours=1), max_claim_attempts=5)
            )
            assert isinstance(batch, ClaimBatch) and len(batch.leases) == 2, "polling finds it"
        finally:
            await quiet.close()
            await other.close()

    asyncio.run(body())
