"""Durable time (the optional ``timers`` feature): TIMER-WAITING-DUE, TIMER-DELAYED-START,
TIMER-TASKS-ROUNDTRIP.

A run waiting for outside input may have a wake: a deadline, or the timeout of a message
wait (``At`` with status ``waiting``). ``claim_due`` takes such a run exactly as it takes a
running one: not before its wake, at its wake by exactly one of racing claimers, and again
once that claim expires; a waiting run with ``External`` has no wake and is never claimed.
``initialize`` with a wake in the future is a delayed start. Sleeping and message-waiting
tasks, their timers and the run's mailbox and deadline read back exactly. The documents
are built from the real records (:mod:`docket_contract_tests.timed`). Without the feature
the cases check nothing (a store that does not declare it need not claim waiting runs).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import attrs
import pytest

from docket.contract import (
    At,
    ClaimBatch,
    ClaimLost,
    External,
    Immediate,
    ReleaseClaim,
    RunListQuery,
    StaleCheckpoint,
    Terminal,
)
from docket.contract.capabilities import Feature
from docket.records import (
    SYSTEM,
    TENANTLESS,
    CheckpointType,
    OwnerScope,
    Run,
    RunStatus,
    Tenant,
    run_to_json,
)
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    commit_unclaimed_ok,
    init_proposal,
    new_run,
    save_graph,
    seed,
    seed_claimed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant
from docket_contract_tests.timed import (
    mailbox,
    parked,
    sleeping,
    waiting_message,
    with_deadline,
    with_mailbox,
)

OWNERS = pytest.mark.parametrize(
    "owner", [TENANTLESS, Tenant("acme")], ids=["tenantless", "tenant"]
)
US = timedelta(microseconds=1)
TIMEOUT = timedelta(seconds=30)  # a message wait's timeout after the park
FAR = timedelta(days=1)


def _timers(k: Kit) -> bool:
    return k.declares(Feature.TIMERS)


async def _waiting(k: Kit, owner: OwnerScope, *, timeout: bool) -> tuple[Run, datetime | None]:
    """A run claimed at t0 and parked ``waiting`` on a message (with a timeout or none),
    released to ``At(timeout)`` or ``External``; returns it and its wake."""
    run, lease = await seed_claimed(k, owner)
    base = successor(run, k.at(1))
    due = k.at(1) + TIMEOUT if timeout else None
    waiting = parked(base, RunStatus.WAITING, waiting_message(base, "inbox", k.at(1), "reply", due))
    wake = At(due) if due is not None else External()
    await commit_claimed_ok(
        k,
        owner,
        claimed(
            waiting,
            lease.claim_token,
            schedule=ReleaseClaim(wake),
            checkpoint_type=CheckpointType.RETRY_SCHEDULED,
        ),
    )
    info = await k.info(owner, run.id)
    k.eq((info.run.status, info.wake_at, info.claimed_at), (RunStatus.WAITING, due, None), "parked")
    return waiting, due


def _racer(k: Kit, at: datetime) -> Callable[[], Awaitable[ClaimBatch]]:
    async def claim() -> ClaimBatch:
        return await k.claim(at, limit=4)

    return claim


@invariant("TIMER-WAITING-DUE")
@OWNERS
async def test_a_waiting_run_is_claimed_at_its_wake_once_among_racing_claimers(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    if not _timers(k):
        return
    for round_ in range(max(k.rounds // 10, 3)):
        run, due = await _waiting(k, owner, timeout=True)
        assert due is not None
        early = await k.claim(due - US, limit=4)
        k.eq(early.leases, (), f"round {round_}: claimed a microsecond before its wake")
        batches = await k.gather_barrier(*([_racer(k, due)] * 4))
        leases = [lease for batch in batches for lease in batch.leases]
        k.eq([lease.run_id for lease in leases], [run.id], f"round {round_}: racing claims at t")
        lease = leases[0]
        k.eq(lease.checkpoint_seq, run.checkpoint_seq, "leased at the parked checkpoint")
        info = await k.info(owner, run.id)
        k.eq((info.run.status, info.wake_at), (RunStatus.WAITING, None), "claimed, still waiting")
        k.check(info.claimed_at is not None, "the claimed waiting run shows its claim")
        # the holder settles the timeout: the run goes on running, then is finished
        gave_up = successor(run, due, active_tasks={}, timers={}, status=RunStatus.RUNNING)
        await commit_claimed_ok(
            k, owner, claimed(gave_up, lease.claim_token, schedule=ReleaseClaim(Immediate()))
        )
        lease2 = await k.claim_one(max(await k.b.now(), due), run.id)
        done = successor(gave_up, due, status=RunStatus.DONE)
        await commit_claimed_ok(
            k, owner, claimed(done, lease2.claim_token, schedule=ReleaseClaim(Terminal()))
        )
        k.eq((await k.claim(due + FAR)).leases, (), "nothing left to claim")


@invariant("TIMER-WAITING-DUE")
@OWNERS
async def test_a_waiting_run_on_external_is_never_claimed(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    if not _timers(k):
        return
    run, due = await _waiting(k, owner, timeout=False)
    k.eq(due, None, "a message wait without a timeout has no wake")
    for later in (k.at(0), k.at(60), k.at(0) + FAR):
        k.eq((await k.claim(later, limit=5)).leases, (), f"claimed a waiting run at {later}")
    info = await k.info(owner, run.id)
    k.eq((info.run, info.wake_at, info.claimed_at), (run, None, None), "untouched")
    page = await k.b.runs.list_runs(SYSTEM, RunListQuery(limit=200))
    k.eq(
        [(s.id, s.status) for s in page.runs if s.id == run.id],
        [(run.id, RunStatus.WAITING)],
        "listed as waiting",
    )


@invariant("TIMER-WAITING-DUE")
@OWNERS
async def test_an_expired_claim_on_a_waiting_run_is_reclaimable(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    if not _timers(k):
        return
    run, due = await _waiting(k, owner, timeout=True)
    assert due is not None
    ttl = timedelta(seconds=10)
    first = await k.claim_one(due, run.id, ttl=ttl)
    k.eq((await k.claim(due + ttl, ttl=ttl)).leases, (), "stolen at the TTL boundary")
    second = await k.claim_one(due + ttl + US, run.id, ttl=ttl)
    k.check(second.claim_token != first.claim_token, "the reclaim has a new token")
    k.eq(second.checkpoint_seq, run.checkpoint_seq, "reclaimed at the parked checkpoint")
    info = await k.info(owner, run.id)
    k.eq((info.run.status, info.wake_at), (RunStatus.WAITING, None), "reclaimed, still waiting")
    stale = successor(run, due + ttl, active_tasks={}, timers={}, status=RunStatus.RUNNING)
    result = await k.b.transitions.commit_claimed(
        owner, claimed(stale, first.claim_token, schedule=ReleaseClaim(Immediate())), ()
    )
    k.isa(result, StaleCheckpoint, "the expired holder's commit")
    refreshed = await k.b.runs.refresh_claim(owner, run.id, first.claim_token, due + ttl)
    k.isa(refreshed, ClaimLost, "the expired holder's refresh")
    await commit_claimed_ok(
        k, owner, claimed(stale, second.claim_token, schedule=ReleaseClaim(Immediate()))
    )


@invariant("TIMER-DELAYED-START")
@OWNERS
async def test_a_run_initialized_with_a_future_wake_is_not_claimable_before_it(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    if not _timers(k):
        return
    start_at = k.at(3600)
    run = await seed(k, owner, wake_at=start_at)
    info = await k.info(owner, run.id)
    k.eq((info.run, info.wake_at, info.claimed_at), (run, start_at, None), "a delayed start")
    for early in (k.t0, k.at(60), start_at - US):
        k.eq((await k.claim(early, limit=3)).leases, (), f"claimed at {early}, before its start")
    lease = await k.claim_one(start_at, run.id)
    k.eq(lease.checkpoint_seq, 1, "the first claim of a delayed start")


@invariant("TIMER-TASKS-ROUNDTRIP")
@OWNERS
async def test_sleeping_and_message_tasks_round_trip_through_every_write(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    if not _timers(k) or not k.declares(Feature.MESSAGES):
        return

    async def reads_back(run: Run, what: str) -> None:
        fetched = k.isa(await k.b.runs.fetch_run(owner, run.id), Run, f"{what}: fetch_run")
        k.eq(fetched, run, f"{what}: fetch_run")
        k.eq(run_to_json(fetched), run_to_json(run), f"{what}: the same bytes")
        k.eq((await k.info(owner, run.id)).run, run, f"{what}: inspect_run")

    # initialize: a delayed start with a deadline and a message already in its mailbox
    ref = await save_graph(k, owner)
    meta = with_mailbox(with_deadline({}, k.at(7200)), mailbox(("go", {"n": 1}), keys=("k1",)))
    first = new_run(k.fresh("run"), ref, k.t0, metadata=meta)
    k.isa(
        await k.b.transitions.initialize(owner, init_proposal(first, k.at(5)), ()),
        Run,
        "initialize",
    )
    await reads_back(first, "initialize")

    # commit_claimed: a running run with a sleeping task and a message wait with a timeout
    lease = await k.claim_one(k.at(5), first.id)
    base = successor(first, k.at(6))
    nap = sleeping(base, "nap", k.at(6), k.at(66))
    inbox = waiting_message(base, "inbox", k.at(6), "reply", k.at(96))
    running = parked(base, RunStatus.RUNNING, nap, inbox)
    await commit_claimed_ok(
        k,
        owner,
        claimed(
            running,
            lease.claim_token,
            schedule=ReleaseClaim(At(k.at(66))),
            checkpoint_type=CheckpointType.RETRY_SCHEDULED,
        ),
    )
    await reads_back(running, "commit_claimed (sleeping + message wait)")
    info = await k.info(owner, first.id)
    k.eq((info.wake_at, info.claimed_at), (k.at(66), None), "due at the sleep timer")

    # commit_claimed: the sleep fired; now waiting on two messages, one without a timeout
    lease = await k.claim_one(k.at(66), first.id)
    base = successor(running, k.at(66))
    inbox2 = waiting_message(base, "inbox", k.at(6), "reply", k.at(96))
    other = waiting_message(base, "other", k.at(66), "ping")
    waiting = parked(base, RunStatus.WAITING, inbox2, other)
    await commit_claimed_ok(
        k,
        owner,
        claimed(
            waiting,
            lease.claim_token,
            schedule=ReleaseClaim(At(k.at(96))),
            checkpoint_type=CheckpointType.RETRY_SCHEDULED,
        ),
    )
    await reads_back(waiting, "commit_claimed (waiting on messages)")

    # commit_unclaimed: a message kept in the mailbox, the run still waiting on both
    box = mailbox(("go", {"n": 1}), ("x", {}), keys=("k1", "k2"))
    kept = attrs.evolve(
        waiting,
        checkpoint_seq=waiting.checkpoint_seq + 1,
        updated_at=k.at(70),
        metadata=with_mailbox(waiting.metadata, box),
    )
    await commit_unclaimed_ok(
        k, owner, unclaimed(kept, wake=At(k.at(96)), checkpoint_type=CheckpointType.RETRY_SCHEDULED)
    )
    await reads_back(kept, "commit_unclaimed (a message kept)")
    info = await k.info(owner, first.id)
    k.eq((info.run.status, info.wake_at), (RunStatus.WAITING, k.at(96)), "still due at timeout")
