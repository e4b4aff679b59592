"""Durable time on PostgreSQL (``Feature.TIMERS``, schema version 7): a waiting run whose
wake is due, or whose claim expired, is claimed as a running one is; a waiting run with
no wake never; a delayed start waits for its time; racing claimers take each run once;
and a message's unclaimed commit takes a claimed run exactly as the memory backend does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from docket_contract_tests.fixtures import (
    claimed,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)
from docket_postgres import PostgresBackend
from docket_postgres.testing import connect as admin
from docket_postgres.testing import open_backend as opened

from docket.clock import ManualClock
from docket.contract import (
    At,
    ClaimBatch,
    ClaimPolicy,
    External,
    Feature,
    ReleaseClaim,
    Terminal,
)
from docket.contract.memory import MemoryBackend
from docket.records import (
    MAILBOX_KEY,
    TENANTLESS,
    GraphRef,
    GraphVersion,
    OwnerScope,
    Run,
    RunInfo,
    RunStatus,
    Tenant,
)

Names = Callable[[str], str]
T0 = datetime(2026, 7, 1, 12, tzinfo=UTC)
US = timedelta(microseconds=1)
TTL = timedelta(minutes=5)


async def _graph(backend: Any, owner: OwnerScope) -> GraphRef:
    document = graph_document("g")
    ref = graph_ref(document)
    assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
    return ref


def _policy(now: datetime, limit: int = 5, attempts: int = 5) -> ClaimPolicy:
    return ClaimPolicy(limit=limit, orphan_ttl=TTL, max_claim_attempts=attempts, now=now)


async def _claim(backend: Any, now: datetime, limit: int = 5, attempts: int = 5) -> ClaimBatch:
    batch = await backend.runs.claim_due(_policy(now, limit, attempts))
    assert isinstance(batch, ClaimBatch), batch
    return batch


async def _info(backend: Any, owner: OwnerScope, run_id: str) -> RunInfo:
    info = await backend.runs.inspect_run(owner, run_id)
    assert isinstance(info, RunInfo), info
    return info


async def _parked(
    backend: Any, owner: OwnerScope, ref: GraphRef, run_id: str, wake: At | External
) -> Run:
    """A run started at T0, claimed, and parked as ``waiting`` with ``wake`` by its holder
    (what a worker does when every task waits for a message or a person)."""
    fresh = new_run(run_id, ref, T0)
    assert await backend.transitions.initialize(owner, init_proposal(fresh, T0), []) == fresh
    batch = await _claim(backend, T0, limit=1)
    (lease,) = batch.leases
    assert lease.run_id == run_id
    waiting = successor(fresh, T0, status=RunStatus.WAITING)
    proposal = claimed(waiting, lease.claim_token, schedule=ReleaseClaim(wake))
    assert await backend.transitions.commit_claimed(owner, proposal, []) == waiting
    return waiting


def test_the_backend_declares_durable_time_messages_and_schedules(pg_url: str) -> None:
    features = PostgresBackend(pg_url).capabilities().features
    assert {Feature.TIMERS, Feature.MESSAGES, Feature.SCHEDULES} <= features


@pytest.mark.parametrize("policy", ["blind", "fair"])
def test_a_waiting_run_is_claimed_when_its_wake_is_due_and_not_before(
    pg_url: str, schema_name: Names, policy: str
) -> None:
    async def body() -> None:
        backend = await opened(
            pg_url, schema_name("wake"), clock=ManualClock(T0), claim_policy=policy
        )
        try:
            owner = Tenant("a")
            ref = await _graph(backend, owner)
            due = T0 + timedelta(seconds=10)
            await _parked(backend, owner, ref, "deadline", At(due))
            await _parked(backend, owner, ref, "person", External())
            info = await _info(backend, owner, "deadline")
            assert (info.run.status, info.wake_at, info.claimed_at) == (
                RunStatus.WAITING,
                due,
                None,
            )
            assert await _claim(backend, due - US) == ClaimBatch(), "1µs before its wake"
            batch = await _claim(backend, due)
            assert [(lease.owner, lease.run_id) for lease in batch.leases] == [(owner, "deadline")]
            info = await _info(backend, owner, "deadline")
            assert (info.run.status, info.wake_at, info.claimed_at) == (
                RunStatus.WAITING,
                None,
                due,
            ), "claimed, still waiting (the worker decides what the wake means)"
            assert await _claim(backend, due + TTL) == ClaimBatch(), "held, and External never"
            # the holder dies: once its claim expires the run is claimed again
            again = await _claim(backend, due + TTL + US)
            assert [lease.run_id for lease in again.leases] == ["deadline"]
            assert again.leases[0].claim_attempt == 2
            # its new holder parks it again, waiting for a person with no deadline
            run = (await _info(backend, owner, "deadline")).run
            parked = successor(run, due, status=RunStatus.WAITING)
            proposal = claimed(
                parked, again.leases[0].claim_token, schedule=ReleaseClaim(External())
            )
            assert await backend.transitions.commit_claimed(owner, proposal, []) == parked
            assert await _claim(backend, due + timedelta(days=365)) == ClaimBatch()
        finally:
            await backend.close()

    asyncio.run(body())


def test_a_delayed_start_is_claimed_at_its_time_not_before(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        backend = await opened(pg_url, schema_name("delay"), clock=ManualClock(T0))
        try:
            ref = await _graph(backend, TENANTLESS)
            start_at = T0 + timedelta(hours=1)
            fresh = new_run("later", ref, T0)
            got = await backend.transitions.initialize(
                TENANTLESS, init_proposal(fresh, start_at), []
            )
            assert got == fresh
            assert await _claim(backend, T0) == ClaimBatch()
            assert await _claim(backend, start_at - US) == ClaimBatch()
            batch = await _claim(backend, start_at)
            assert [lease.run_id for lease in batch.leases] == ["later"]
        finally:
            await backend.close()

    asyncio.run(body())


def test_a_waiting_run_past_its_claim_attempts_is_poisoned_and_can_be_retried(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        backend = await opened(pg_url, schema_name("poison"), clock=ManualClock(T0))
        try:
            ref = await _graph(backend, TENANTLESS)
            due = T0 + timedelta(seconds=1)
            await _parked(backend, TENANTLESS, ref, "w", At(due))
            first = await _claim(backend, due, attempts=1)
            assert [lease.run_id for lease in first.leases] == ["w"]
            poisoned = await _claim(backend, due + TTL + US, attempts=1)
            assert poisoned.leases == ()
            assert [p.run_id for p in poisoned.poisoned] == ["w"]
            info = await _info(backend, TENANTLESS, "w")
            assert info.poisoned and info.run.status is RunStatus.WAITING
            assert info.wake_at is None and info.claimed_at is None
            assert await _claim(backend, due + timedelta(days=1)) == ClaimBatch()
            retried = await backend.runs.retry_poisoned_run(TENANTLESS, "w", due + 2 * TTL)
            assert isinstance(retried, Run)
            batch = await _claim(backend, due + 2 * TTL)
            assert [lease.run_id for lease in batch.leases] == ["w"]
        finally:
            await backend.close()

    asyncio.run(body())


def test_racing_claimers_take_each_due_waiting_run_once(pg_url: str, schema_name: Names) -> None:
    """Two backends (two pools), six concurrent claims per round: every due waiting run is
    leased exactly once, and the External ones never."""

    async def body() -> None:
        schema = schema_name("race")
        clock = ManualClock(T0)
        left = await opened(pg_url, schema, clock=clock, pool_max_size=4)
        right = await opened(pg_url, schema, clock=clock, pool_max_size=4)
        try:
            owners: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b")]
            refs = {owner: await _graph(left, owner) for owner in owners}
            due = T0 + timedelta(minutes=1)
            seeded: set[tuple[OwnerScope, str]] = set()
            for i in range(15):
                owner = owners[i % 3]
                wake: At | External = External() if i % 5 == 0 else At(due + i * US)
                await _parked(left, owner, refs[owner], f"w{i}", wake)
                if isinstance(wake, At):
                    seeded.add((owner, f"w{i}"))
            moment = due + timedelta(seconds=1)
            barrier = asyncio.Barrier(6)

            async def grab(backend: PostgresBackend, limit: int) -> ClaimBatch:
                await barrier.wait()
                return await _claim(backend, moment, limit=limit)

            batches = await asyncio.gather(*(grab(b, n) for b in (left, right) for n in (1, 2, 3)))
            leased = [(lease.owner, lease.run_id) for b in batches for lease in b.leases]
            assert len(leased) == len(set(leased)), "a run leased twice"
            rest = await _claim(left, moment, limit=20)
            leased += [(lease.owner, lease.run_id) for lease in rest.leases]
            assert sorted(leased, key=repr) == sorted(seeded, key=repr)
            assert len(leased) == len(set(leased))
        finally:
            await left.close()
            await right.close()

    asyncio.run(body())


async def _message_then_holder(backend: Any) -> tuple[str, Run]:
    """A claimed running run takes a message by an unclaimed commit fenced on its
    checkpoint; then its holder commits. What the holder gets, and the stored run."""
    ref = await _graph(backend, TENANTLESS)
    fresh = new_run("m", ref, T0)
    assert await backend.transitions.initialize(TENANTLESS, init_proposal(fresh, T0), []) == fresh
    (lease,) = (await _claim(backend, T0, limit=1)).leases
    mailbox = {MAILBOX_KEY: {"messages": [{"topic": "go", "payload": {"n": 1}}]}}
    kept = successor(fresh, T0, metadata=mailbox)
    got = await backend.transitions.commit_unclaimed(
        TENANTLESS, fresh.checkpoint_seq, unclaimed(kept), []
    )
    assert got == kept, got
    late = successor(fresh, T0, status=RunStatus.DONE)
    answer = await backend.transitions.commit_claimed(
        TENANTLESS, claimed(late, lease.claim_token, schedule=ReleaseClaim(Terminal())), []
    )
    stored = await backend.runs.fetch_run(TENANTLESS, "m")
    assert isinstance(stored, Run)
    return type(answer).__name__, stored


def test_a_message_commit_takes_a_claimed_running_run_as_memory_does(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        memory = MemoryBackend(clock=ManualClock(T0))
        expected = await _message_then_holder(memory)
        backend = await opened(pg_url, schema_name("msg"), clock=ManualClock(T0))
        try:
            got = await _message_then_holder(backend)
            assert got == expected
            assert got[1].metadata[MAILBOX_KEY]
            assert expected[0] == "StaleCheckpoint", "the holder's fence no longer holds"
            due = await _claim(backend, T0)
            assert [lease.run_id for lease in due.leases] == ["m"], "due again, at once"
        finally:
            await backend.close()

    asyncio.run(body())


def test_live_holds_a_waiting_runs_wake_but_never_a_wake_and_a_claim(
    pg_url: str, schema_name: Names
) -> None:
    """The CHECK constraints of version 7, written by hand: a waiting run may have a wake
    or a claim (or poison), never a wake and a claim together."""

    async def body() -> None:
        schema = schema_name("checks")
        backend = await opened(pg_url, schema, clock=ManualClock(T0))
        conn = await admin(pg_url)
        try:
            ref = await _graph(backend, TENANTLESS)
            await _parked(backend, TENANTLESS, ref, "w", External())
            where = "WHERE tenant = '' AND run_id = 'w'"
            now = "'2026-07-01T12:00:00+00'"
            for legal in (
                f"wake_at = {now}",
                f"wake_at = NULL, claim_token = 'x', claimed_at = {now}",
                f"claim_token = NULL, claimed_at = NULL, poisoned_at = {now}, poison_reason = 'p'",
            ):
                await conn.execute(f'UPDATE "{schema}".live SET {legal} {where}'.encode())
            await conn.execute(
                f'UPDATE "{schema}".live SET poisoned_at = NULL, poison_reason = NULL, '
                f"wake_at = {now} {where}".encode()
            )
            with pytest.raises(psycopg.errors.IntegrityError):
                await conn.execute(
                    f"UPDATE \"{schema}\".live SET claim_token = 'x', claimed_at = {now} "
                    f"{where}".encode()
                )
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())
