"""Wake-ups: WAKE-NOTIFY.

A backend that declares ``Feature.NOTIFY`` wakes a ``wait_for_work`` caller promptly
when work becomes due: on ``release_claim``, a rescheduling abandon, an ``initialize``
whose wake is due, a commit that releases with an immediate (or already due) wake, and
``retry_poisoned_run``. Without the feature, ``wait_for_work`` must still return by its
timeout (polling is the fallback).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from docket.contract import (
    AbandonPolicy,
    At,
    Feature,
    Immediate,
    ReleaseClaim,
)
from docket.records import TENANTLESS
from docket_contract_tests.fixtures import (
    claimed,
    init_proposal,
    new_run,
    save_graph,
    seed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant

WAIT = 3.0  # the waiter's timeout
PROMPT = 1.0  # "well before the timeout"


async def _release(k: Kit) -> Callable[[], Awaitable[object]]:
    run = await seed(k, TENANTLESS)
    lease = await k.claim_one(k.t0, run.id)
    return lambda: k.b.runs.release_claim(TENANTLESS, run.id, lease.claim_token, k.t0)


async def _abandon(k: Kit) -> Callable[[], Awaitable[object]]:
    run = await seed(k, TENANTLESS)
    lease = await k.claim_one(k.t0, run.id)
    policy = AbandonPolicy(expected_checkpoint_seq=1, retry_at=k.t0, max_claim_abandons=3, now=k.t0)
    return lambda: k.b.runs.abandon_claim(TENANTLESS, run.id, lease.claim_token, policy)


async def _initialize(k: Kit) -> Callable[[], Awaitable[object]]:
    ref = await save_graph(k, TENANTLESS)
    run = new_run(k.name("r"), ref, k.t0)
    due = (await k.b.now()) - timedelta(seconds=1)
    return lambda: k.b.transitions.initialize(TENANTLESS, init_proposal(run, due), [])


async def _commit_immediate(k: Kit) -> Callable[[], Awaitable[object]]:
    run = await seed(k, TENANTLESS)
    lease = await k.claim_one(k.t0, run.id)
    proposal = claimed(
        successor(run, k.at(1)), lease.claim_token, schedule=ReleaseClaim(Immediate())
    )
    return lambda: k.b.transitions.commit_claimed(TENANTLESS, proposal, [])


async def _signal_due(k: Kit) -> Callable[[], Awaitable[object]]:
    run = await seed(k, TENANTLESS, wake_at=k.at(3600))
    due = (await k.b.now()) - timedelta(seconds=1)
    proposal = unclaimed(successor(run, k.at(1)), wake=At(due))
    return lambda: k.b.transitions.commit_unclaimed(TENANTLESS, 1, proposal, [])


async def _retry_poisoned(k: Kit) -> Callable[[], Awaitable[object]]:
    run = await seed(k, TENANTLESS)
    await k.claim_one(k.t0, run.id, ttl=timedelta(0), max_attempts=1)
    batch = await k.claim(k.at(1), ttl=timedelta(0), max_attempts=1)
    k.eq(len(batch.poisoned), 1, "poisoned")
    return lambda: k.b.runs.retry_poisoned_run(TENANTLESS, run.id, k.at(2))


async def _settle_announcements(k: Kit) -> None:
    """Let announcements made while setting up land before the waiter starts.

    Over pub/sub or NOTIFY a wake published by the setup (say, a due initialize) may be
    delivered a little later; it is a true wake, but not the one this case is about.
    """
    for _ in range(50):
        if not await k.b.wait_for_work(0.1):
            return
    k.fail("wait_for_work never went quiet: something keeps announcing work")


TRIGGERS: dict[str, Callable[[Kit], Awaitable[Callable[[], Awaitable[object]]]]] = {
    "release-claim": _release,
    "abandon": _abandon,
    "initialize-due": _initialize,
    "commit-release-immediate": _commit_immediate,
    "signal-due": _signal_due,
    "retry-poisoned": _retry_poisoned,
}


@invariant("WAKE-NOTIFY")
@pytest.mark.parametrize("trigger", list(TRIGGERS))
async def test_waiters_are_woken(docket_kit: Kit, trigger: str) -> None:
    k = docket_kit
    act = await TRIGGERS[trigger](k)
    notify = k.declares(Feature.NOTIFY)
    if notify:
        await _settle_announcements(k)
    started = time.monotonic()
    waiter = asyncio.create_task(k.b.wait_for_work(WAIT if notify else 0.05))
    await asyncio.sleep(0.02)  # the waiter is waiting before the work appears
    k.check(not waiter.done(), "wait_for_work returned before anything happened")
    await act()
    woken = await asyncio.wait_for(waiter, WAIT + 2)
    elapsed = time.monotonic() - started
    if not notify:
        k.isa(woken, bool, "wait_for_work answers a bool")
        return
    k.eq(woken, True, f"{trigger} wakes a waiter (after {elapsed:.2f}s)")
    k.check(elapsed < PROMPT, f"{trigger} woke the waiter only after {elapsed:.2f}s")


@invariant("WAKE-NOTIFY")
async def test_no_work_no_wake(docket_kit: Kit) -> None:
    k = docket_kit
    await seed(k, TENANTLESS, wake_at=k.at(3600))
    started = time.monotonic()
    woken = await k.b.wait_for_work(0.05)
    elapsed = time.monotonic() - started
    k.eq(woken, False, "nothing announced: wait_for_work times out")
    k.check(0.04 <= elapsed < 1.0, f"it waits about its timeout (took {elapsed:.3f}s)")
