"""Durable time and messages on Redis (``Feature.TIMERS``, ``Feature.MESSAGES``).

A waiting run enters the ready zset when a commit gives it a wake (``At``: a deadline, a
message wait's timeout) and leaves it when claimed or committed without one; so
``claim_due`` takes it when due — ready, or its claim expired — exactly as a running one,
and never a waiting run without a wake. Run on a single server and on the Cluster.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import datetime, timedelta

import pytest
from docket_contract_tests.fixtures import claimed, successor, unclaimed
from docket_redis import RedisBackend
from docket_redis.keys import Namespace
from docket_redis.testing import (
    T0,
    RedisCluster,
    RedisServer,
    claim_one,
    opened,
    publish_graph,
    start_run,
)

from docket.clock import ManualClock
from docket.contract import (
    At,
    ClaimBatch,
    ClaimLost,
    ClaimPolicy,
    External,
    Feature,
    Immediate,
    Lease,
    ReleaseClaim,
    StaleCheckpoint,
    Terminal,
    negotiate,
)
from docket.records import MAILBOX_KEY, TENANTLESS, OwnerScope, Run, RunStatus, Tenant

TTL = timedelta(seconds=30)
US = timedelta(microseconds=1)


@pytest.fixture(params=["single", "cluster"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "single":
        server: RedisServer = request.getfixturevalue("redis_single")
        return server.url
    cluster: RedisCluster = request.getfixturevalue("redis_cluster_nodes")
    return cluster.url


def _policy(now: datetime, limit: int = 10) -> ClaimPolicy:
    return ClaimPolicy(limit=limit, orphan_ttl=TTL, max_claim_attempts=5, now=now)


async def _claims(backend: RedisBackend, now: datetime) -> list[Lease]:
    batch = await backend.runs.claim_due(_policy(now))
    assert isinstance(batch, ClaimBatch), batch
    assert not batch.poisoned, batch
    return list(batch.leases)


async def _waiting(
    backend: RedisBackend, owner: OwnerScope, run_id: str, wake: At | External
) -> tuple[Run, datetime]:
    """A run claimed at T0 whose holder parked it ``waiting`` with ``wake``."""
    ref = await publish_graph(backend, owner)
    run = await start_run(backend, owner, run_id, ref)
    lease = await claim_one(backend, T0, orphan_ttl=TTL)
    parked = successor(run, T0, status=RunStatus.WAITING)
    proposal = claimed(parked, lease.claim_token, schedule=ReleaseClaim(wake))
    assert await backend.transitions.commit_claimed(owner, proposal, []) == parked
    return parked, lease.claimed_at


def test_the_backend_declares_timers_messages_and_schedules(url: str, prefix: str) -> None:
    async def body() -> None:
        async with opened(url, prefix) as backend:
            features = negotiate(backend).features
            assert {Feature.TIMERS, Feature.MESSAGES, Feature.SCHEDULES} <= features

    asyncio.run(body())


@pytest.mark.parametrize("owner", [TENANTLESS, Tenant("acme")])
def test_a_waiting_run_is_claimed_when_its_wake_is_due_and_not_before(
    url: str, prefix: str, owner: OwnerScope
) -> None:
    deadline = T0 + timedelta(minutes=5)

    async def body() -> None:
        async with opened(url, prefix, clock=ManualClock(T0)) as backend:
            parked, _ = await _waiting(backend, owner, "r1", At(deadline))
            assert await _claims(backend, deadline - US) == []
            [lease] = await _claims(backend, deadline)
            assert (lease.run_id, lease.owner, lease.checkpoint_seq) == (
                "r1",
                owner,
                parked.checkpoint_seq,
            )
            assert lease.claim_attempt == 1
            # the holder sees the waiting run, and may commit it (here: it gives up)
            run = await backend.runs.claimed_run(owner, "r1", lease.claim_token)
            assert run == parked
            assert await _claims(backend, deadline + TTL - US) == []  # held
            failed = successor(parked, deadline, status=RunStatus.FAILED)
            proposal = claimed(failed, lease.claim_token, schedule=ReleaseClaim(Terminal()))
            assert await backend.transitions.commit_claimed(owner, proposal, []) == failed
            assert await _claims(backend, deadline + timedelta(days=1)) == []

    asyncio.run(body())


def test_a_claimed_waiting_run_whose_claim_expired_is_claimed_again(url: str, prefix: str) -> None:
    deadline = T0 + timedelta(minutes=5)

    async def body() -> None:
        async with opened(url, prefix, clock=ManualClock(T0)) as backend:
            await _waiting(backend, TENANTLESS, "r1", At(deadline))
            [first] = await _claims(backend, deadline)
            assert await _claims(backend, deadline + TTL) == []  # at the TTL: not expired
            [second] = await _claims(backend, deadline + TTL + US)
            assert second.run_id == "r1" and second.claim_attempt == 2
            assert second.claim_token != first.claim_token
            lost = await backend.runs.refresh_claim(TENANTLESS, "r1", first.claim_token)
            assert isinstance(lost, ClaimLost)

    asyncio.run(body())


def test_a_waiting_run_without_a_wake_is_never_claimed(url: str, prefix: str) -> None:
    async def body() -> None:
        async with opened(url, prefix, clock=ManualClock(T0)) as backend:
            await _waiting(backend, TENANTLESS, "r1", External())
            far = T0 + timedelta(days=3650)
            assert await _claims(backend, far) == []
            keys = Namespace(prefix).scope(TENANTLESS)
            for zset in (keys.ready, keys.claimed):
                answer = await backend._engine.transport.command(zset, "ZSCORE", zset, "r1")
                assert answer is None, zset

    asyncio.run(body())


def test_racing_claimers_take_a_due_waiting_run_once(url: str, prefix: str) -> None:
    deadline = T0 + timedelta(seconds=1)

    async def body() -> None:
        async with AsyncExitStack() as stack:
            backends = [
                await stack.enter_async_context(opened(url, prefix, clock=ManualClock(T0)))
                for _ in range(6)
            ]
            for index in range(5):
                await _waiting(backends[0], TENANTLESS, f"r{index}", At(deadline))
            # every run is due to all six at once; each must be leased exactly once
            batches = await asyncio.gather(
                *(_claims(backend, deadline) for backend in backends for _ in range(3))
            )
            leased = sorted(lease.run_id for batch in batches for lease in batch)
            assert leased == [f"r{index}" for index in range(5)]

    asyncio.run(body())


def test_a_delayed_start_is_not_claimable_before_its_wake(url: str, prefix: str) -> None:
    start_at = T0 + timedelta(hours=1)

    async def body() -> None:
        async with opened(url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            await start_run(backend, TENANTLESS, "later", ref, wake_at=start_at)
            assert await _claims(backend, start_at - US) == []
            [lease] = await _claims(backend, start_at)
            assert lease.run_id == "later"

    asyncio.run(body())


def test_a_message_commit_takes_a_claimed_running_run_as_memory_does(url: str, prefix: str) -> None:
    """``commit_unclaimed`` on a claimed run: fenced on the checkpoint only; it releases
    the claim (the holder's next commit is stale) and schedules the run's wake."""

    async def body() -> None:
        async with opened(url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            run = await start_run(backend, TENANTLESS, "r1", ref)
            lease = await claim_one(backend, T0, orphan_ttl=TTL)
            kept = successor(run, T0, metadata={MAILBOX_KEY: {"messages": [{"topic": "go"}]}})
            answer = await backend.transitions.commit_unclaimed(
                TENANTLESS, run.checkpoint_seq, unclaimed(kept, wake=Immediate()), []
            )
            assert answer == kept
            late = successor(run, T0)
            stale = await backend.transitions.commit_claimed(
                TENANTLESS, claimed(late, lease.claim_token), []
            )
            assert isinstance(stale, StaleCheckpoint)
            assert isinstance(
                await backend.runs.refresh_claim(TENANTLESS, "r1", lease.claim_token), ClaimLost
            )
            [again] = await _claims(backend, T0)
            assert again.checkpoint_seq == kept.checkpoint_seq
            assert await backend.runs.claimed_run(TENANTLESS, "r1", again.claim_token) == kept

    asyncio.run(body())


def test_a_message_wakes_a_waiting_run_without_a_wake(url: str, prefix: str) -> None:
    async def body() -> None:
        async with opened(url, prefix, clock=ManualClock(T0)) as backend:
            parked, _ = await _waiting(backend, TENANTLESS, "r1", External())
            delivered = successor(parked, T0, status=RunStatus.RUNNING)
            answer = await backend.transitions.commit_unclaimed(
                TENANTLESS, parked.checkpoint_seq, unclaimed(delivered, wake=Immediate()), []
            )
            assert answer == delivered
            [lease] = await _claims(backend, T0)
            assert lease.run_id == "r1" and lease.checkpoint_seq == delivered.checkpoint_seq

    asyncio.run(body())
