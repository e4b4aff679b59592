"""Claims: RUN-CLAIM-LIVENESS-RECOVERY, CLAIM-READY-EXPIRED-CLASSES, CLAIM-DEMAND1-PREFERENCE,
CLAIM-TTL-BOUNDARY, CLAIM-MAX-ATTEMPTS-POISON, CLAIM-FUTURE-WAKE, CLAIM-DOES-NOT-TOUCH-DOCUMENT,
CLAIM-POLICY-VALIDATION, ABANDON-POLICY-VALIDATION, ABANDON-NON-POISONING-BACKOFF,
ABANDON-ESCALATION, RETRY-POISONED-TERMINAL-FIRST, SIGNAL-CLEARS-POISON, COMMIT-RESETS-HEALTH."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from docket.contract import (
    POISON_MAX_ABANDONS,
    POISON_MAX_ATTEMPTS,
    AbandonPolicy,
    At,
    Backoff,
    ClaimBatch,
    ClaimClass,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    External,
    Immediate,
    InactiveRun,
    NotFound,
    Poisoned,
    PoisonedClaim,
    Rescheduled,
    StaleAbandon,
    StaleCheckpoint,
    Terminal,
)
from docket.contract.validate import token_problem
from docket.records import TENANTLESS, CheckpointType, OwnerScope, Run, RunStatus
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    commit_unclaimed_ok,
    event,
    junk,
    seed,
    seed_claimed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant

MINUTE = timedelta(seconds=60)
US = timedelta(microseconds=1)


def _abandon(
    now: datetime,
    retry_at: datetime,
    *,
    expected: int = 1,
    max_abandons: int = 3,
    non_poisoning: bool = False,
    backoff: Backoff | None = None,
) -> AbandonPolicy:
    return AbandonPolicy(
        expected_checkpoint_seq=expected,
        retry_at=retry_at,
        max_claim_abandons=max_abandons,
        non_poisoning=non_poisoning,
        backoff=backoff,
        now=now,
    )


async def _poison_by_attempts(k: Kit, owner: OwnerScope, run: Run, start: datetime) -> datetime:
    """Launch ``run`` once (max 1), then let the second launch poison it; returns when."""
    await k.claim_one(start, run.id, ttl=timedelta(0), max_attempts=1)
    when = start + timedelta(seconds=1)
    batch = await k.claim(when, ttl=timedelta(0), max_attempts=1)
    k.eq([p.run_id for p in batch.poisoned], [run.id], "the second launch poisons")
    return when


# -- liveness and recovery ----------------------------------------------------------------------


@invariant("RUN-CLAIM-LIVENESS-RECOVERY")
async def test_refresh_moves_forward_only(docket_kit: Kit) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS)
    k.eq(lease.claimed_at, k.t0, "claimed_at is the policy's now")
    before = await k.snapshot(TENANTLESS, run.id)
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run.id, "wrong-token", k.at(5)),
        ClaimLost,
        "refresh with a wrong token",
    )
    await k.unchanged(TENANTLESS, run.id, before, "after a wrong-token refresh")
    got = await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, k.at(10))
    k.eq(got, ClaimRefreshed(k.at(10)), "refresh at t0+10s")
    k.eq((await k.info(TENANTLESS, run.id)).claimed_at, k.at(10), "claimed_at moved forward")
    got = await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, k.at(5))
    k.eq(got, ClaimRefreshed(k.at(10)), "an earlier refresh answers the kept claimed_at")
    info = await k.info(TENANTLESS, run.id)
    k.eq(info.claimed_at, k.at(10), "claimed_at never moves backward")
    k.eq(info.run, run, "refresh never touches the document")
    # a refresh keeps a claim alive past its original TTL
    k.eq((await k.claim(k.at(65))).leases, (), "refreshed at +10s: not expired at +65s")
    k.eq(len((await k.claim(k.at(70) + US)).leases), 1, "expired just after +70s")


@invariant("RUN-CLAIM-LIVENESS-RECOVERY")
async def test_steal_replaces_the_token(docket_kit: Kit) -> None:
    k = docket_kit
    run, first = await seed_claimed(k, TENANTLESS)
    batch = await k.claim(k.t0 + US, ttl=timedelta(0))
    k.eq(len(batch.leases), 1, "a TTL-0 claim is stealable a microsecond later")
    second = batch.leases[0]
    k.check(second.claim_token != first.claim_token, "a steal mints a new token")
    k.eq(second.claim_attempt, 2, "the steal is the second launch")
    k.eq(second.claimed_at, k.t0 + US, "claimed_at is the stealer's now")
    before = await k.snapshot(TENANTLESS, run.id)
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run.id, first.claim_token, k.at(1)),
        ClaimLost,
        "the old holder's refresh",
    )
    await k.b.runs.release_claim(TENANTLESS, run.id, first.claim_token, k.at(1))
    k.isa(
        await k.b.runs.abandon_claim(
            TENANTLESS, run.id, first.claim_token, _abandon(k.at(1), k.at(60))
        ),
        StaleAbandon,
        "the old holder's abandon",
    )
    k.isa(
        await k.b.transitions.commit_claimed(
            TENANTLESS, claimed(successor(run, k.at(1)), first.claim_token), []
        ),
        StaleCheckpoint,
        "the old holder's commit",
    )
    await k.unchanged(TENANTLESS, run.id, before, "the old holder changed nothing")
    await commit_claimed_ok(k, TENANTLESS, claimed(successor(run, k.at(1)), second.claim_token))


@invariant("RUN-CLAIM-LIVENESS-RECOVERY")
async def test_release_sets_wake_and_keeps_counters(docket_kit: Kit) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS)
    before = await k.snapshot(TENANTLESS, run.id)
    await k.b.runs.release_claim(TENANTLESS, run.id, "stale-token", k.at(3))
    await k.unchanged(TENANTLESS, run.id, before, "a stale release")
    await k.b.runs.release_claim(TENANTLESS, run.id, lease.claim_token, k.at(3))
    info = await k.info(TENANTLESS, run.id)
    k.eq(
        (info.claimed_at, info.wake_at, info.claim_attempts, info.run),
        (None, k.at(3), 1, run),
        "release: no claim, wake exactly at the release's now, attempts and document kept",
    )
    k.eq(info.latest_checkpoint_type, CheckpointType.RUN_INITIALIZED, "checkpoint type kept")
    released = await k.snapshot(TENANTLESS, run.id)
    await k.b.runs.release_claim(TENANTLESS, run.id, lease.claim_token, k.at(4))
    await k.unchanged(TENANTLESS, run.id, released, "a second release is a no-op")
    again = await k.claim_one(k.at(3), run.id)
    k.eq(again.claim_attempt, 2, "the re-claim counts a second attempt")
    await commit_claimed_ok(k, TENANTLESS, claimed(successor(run, k.at(4)), again.claim_token))


@invariant("RUN-CLAIM-LIVENESS-RECOVERY")
async def test_abandon_then_poison_then_retry(docket_kit: Kit) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS)
    before = await k.snapshot(TENANTLESS, run.id)
    for what, token, policy in (
        ("wrong token", "nope", _abandon(k.at(1), k.at(60), max_abandons=1)),
        (
            "wrong checkpoint",
            lease.claim_token,
            _abandon(k.at(1), k.at(60), expected=2, max_abandons=1),
        ),
    ):
        got = await k.b.runs.abandon_claim(TENANTLESS, run.id, token, policy)
        k.isa(got, StaleAbandon, f"abandon with a {what}")
        await k.unchanged(TENANTLESS, run.id, before, f"after an abandon with a {what}")
    got = await k.b.runs.abandon_claim(
        TENANTLESS, run.id, lease.claim_token, _abandon(k.at(1), k.at(60), max_abandons=1)
    )
    k.eq(got, Rescheduled(k.at(60)), "the first abandon reschedules at retry_at")
    info = await k.info(TENANTLESS, run.id)
    k.eq(
        (info.wake_at, info.claimed_at, info.claim_attempts, info.claim_abandons),
        (k.at(60), None, 0, 1),
        "after the abandon: wake=retry_at, no claim, attempts 0, abandons 1",
    )
    k.eq((info.poisoned_at, info.run), (None, run), "not poisoned, document untouched")
    again = await k.claim_one(k.at(60), run.id)
    got = await k.b.runs.abandon_claim(
        TENANTLESS, run.id, again.claim_token, _abandon(k.at(61), k.at(120), max_abandons=1)
    )
    k.eq(got, Poisoned(k.at(61), POISON_MAX_ABANDONS), "the second abandon at max 1 poisons")
    info = await k.info(TENANTLESS, run.id)
    k.eq(
        (info.claim_attempts, info.claim_abandons, info.poisoned_at, info.poison_reason),
        (0, 1, k.at(61), POISON_MAX_ABANDONS),
        "poisoned: attempts decremented, abandons unchanged, poison at now",
    )
    k.eq((info.wake_at, info.claimed_at), (None, None), "poisoned: no wake, no claim")
    k.eq((await k.claim(k.at(3600), limit=5)).leases, (), "a poisoned run is never claimed")
    retried = await k.b.runs.retry_poisoned_run(TENANTLESS, run.id, k.at(200))
    k.eq(retried, run, "retry_poisoned_run answers the run")
    info = await k.info(TENANTLESS, run.id)
    k.eq(
        (info.wake_at, info.claim_attempts, info.claim_abandons, info.poisoned_at),
        (k.at(200), 0, 0, None),
        "recovered: due at the retry's now, counters reset",
    )
    k.eq(info.run.checkpoint_seq, 1, "recovery consumes no checkpoint")


# -- classes, order, preference -----------------------------------------------------------------


@invariant("CLAIM-READY-EXPIRED-CLASSES")
async def test_batch_mixes_ready_and_expired(docket_kit: Kit) -> None:
    k = docket_kit
    a = k.tenant("a")
    stale = await seed(k, a, k.name("e"), wake_at=k.at(-200))
    old = await k.claim_one(k.at(-120), stale.id)
    ready = await seed(k, TENANTLESS, k.name("r"), wake_at=k.at(-10))
    batch = await k.claim(k.t0, limit=2)
    by_id = {lease.run_id: lease for lease in batch.leases}
    k.eq(set(by_id), {stale.id, ready.id}, "one ready and one expired run leased")
    k.eq(batch.poisoned, (), "nothing poisoned")
    steal, fresh = by_id[stale.id], by_id[ready.id]
    k.eq((steal.claim_attempt, fresh.claim_attempt), (2, 1), "claim_attempt: steal 2, fresh 1")
    k.check(steal.claim_token != old.claim_token, "the steal has a new token")
    for lease, run, owner in ((steal, stale, a), (fresh, ready, TENANTLESS)):
        k.eq(
            (
                lease.owner,
                lease.graph_id,
                lease.graph_hash,
                lease.checkpoint_seq,
                lease.claimed_at,
                lease.orphan_ttl,
            ),
            (owner, run.graph_id, run.graph_hash, 1, k.t0, MINUTE),
            f"lease fields of {run.id}",
        )
        k.eq(token_problem(lease.claim_token), None, "the token is 1..128 printable ASCII")
        info = await k.info(owner, run.id)
        k.eq(
            (info.claimed_at, info.wake_at, info.claim_attempts),
            (k.t0, None, lease.claim_attempt),
            f"RunInfo of {run.id} after the claim",
        )


@invariant("CLAIM-READY-EXPIRED-CLASSES")
@pytest.mark.parametrize("limit", [2, 3])
async def test_each_class_is_reserved_an_outcome(docket_kit: Kit, limit: int) -> None:
    k = docket_kit
    stale = await seed(k, TENANTLESS, k.name("e"), wake_at=k.at(-400))
    await k.claim_one(k.at(-100), stale.id)  # expired at t0 (eligible at -100s)
    ready = [
        await seed(k, TENANTLESS, k.name(f"r{i}"), wake_at=k.at(-300 + 10 * i)) for i in range(3)
    ]
    batch = await k.claim(k.t0, limit=limit)
    want = {stale.id, ready[0].id} | ({ready[1].id} if limit == 3 else set())
    k.eq(
        {lease.run_id for lease in batch.leases},
        want,
        f"demand {limit}: the oldest ready run, the expired run, then oldest first",
    )


@invariant("CLAIM-READY-EXPIRED-CLASSES")
async def test_tie_break_by_eligible_time_then_run_id(docket_kit: Kit) -> None:
    k = docket_kit
    names = ["c", "a", "b"]
    for name in names:
        await seed(k, TENANTLESS, k.name(name), wake_at=k.at(-50))
    order = [(await k.claim(k.t0)).leases[0].run_id for _ in names]
    k.eq(order, [k.name(n) for n in sorted(names)], "equal wakes are claimed by run id")
    # expired eligibility is claimed_at (not claimed_at + ttl)
    await seed(k, TENANTLESS, k.name("ready"), wake_at=k.at(60))
    batch = await k.claim(k.at(180), ttl=timedelta(seconds=90))
    k.eq(
        [lease.run_id for lease in batch.leases],
        [k.name("a")],
        "an expired claim is eligible from its claimed_at (t0), not claimed_at + ttl "
        "(+90s): it goes before a ready run due at +60s",
    )


@invariant("CLAIM-READY-EXPIRED-CLASSES")
async def test_oldest_first_within_the_limit(docket_kit: Kit) -> None:
    k = docket_kit
    wakes = [-10, -50, -30, -40, -20]
    runs = [
        await seed(k, TENANTLESS, k.name(f"r{i}"), wake_at=k.at(w)) for i, w in enumerate(wakes)
    ]
    batch = await k.claim(k.t0, limit=3)
    oldest = [r.id for _, r in sorted(zip(wakes, runs, strict=True), key=lambda p: p[0])][:3]
    k.eq({lease.run_id for lease in batch.leases}, set(oldest), "the three oldest wakes")
    rest = await k.claim(k.t0, limit=10)
    k.eq(len(rest.leases), 2, "the two others remain due")


async def _both_classes(k: Kit, expired_older: bool) -> tuple[Run, Run]:
    """One expired claim and one ready run; ``expired_older`` picks which is older at t0."""
    stale = await seed(k, TENANTLESS, k.name("e"), wake_at=k.at(-500))
    await k.claim_one(k.at(-300 if expired_older else -100), stale.id)
    ready = await seed(k, TENANTLESS, k.name("r"), wake_at=k.at(-200 if expired_older else -250))
    return stale, ready


@invariant("CLAIM-DEMAND1-PREFERENCE")
@pytest.mark.parametrize("preference", ["ready", "expired", "none"])
@pytest.mark.parametrize("expired_older", [True, False], ids=["expired-older", "ready-older"])
async def test_demand_one_preference(docket_kit: Kit, preference: str, expired_older: bool) -> None:
    k = docket_kit
    stale, ready = await _both_classes(k, expired_older)
    choice = {"ready": ClaimClass.READY, "expired": ClaimClass.EXPIRED, "none": None}[preference]
    batch = await k.claim(k.t0, preference=choice)
    if choice is ClaimClass.READY:
        want = ready.id
    elif choice is ClaimClass.EXPIRED:
        want = stale.id
    else:
        want = stale.id if expired_older else ready.id
    k.eq([lease.run_id for lease in batch.leases], [want], f"demand 1, preference {preference}")


@invariant("CLAIM-DEMAND1-PREFERENCE")
@pytest.mark.parametrize("present", ["ready", "expired"])
async def test_demand_one_falls_through(docket_kit: Kit, present: str) -> None:
    k = docket_kit
    if present == "ready":
        run = await seed(k, TENANTLESS, wake_at=k.at(-5))
    else:
        run = await seed(k, TENANTLESS, wake_at=k.at(-500))
        await k.claim_one(k.at(-300), run.id)
    other = ClaimClass.EXPIRED if present == "ready" else ClaimClass.READY
    batch = await k.claim(k.t0, preference=other)
    k.eq(
        [lease.run_id for lease in batch.leases],
        [run.id],
        f"preferring {other} with only a {present} run never wastes the demand",
    )


# -- TTL boundary, attempts, future wakes -------------------------------------------------------


@invariant("CLAIM-TTL-BOUNDARY")
@pytest.mark.parametrize("ttl_s", [0, 1, 60])
async def test_stealable_only_after_the_ttl(docket_kit: Kit, ttl_s: int) -> None:
    k = docket_kit
    ttl = timedelta(seconds=ttl_s)
    run, lease = await seed_claimed(k, TENANTLESS, ttl=ttl)
    before = await k.snapshot(TENANTLESS, run.id)
    boundary = lease.claimed_at + ttl
    k.eq(await k.claim(boundary, ttl=ttl), ClaimBatch(), f"at claimed_at + {ttl_s}s: not yet")
    await k.unchanged(TENANTLESS, run.id, before, "an unexpired claim is untouched")
    batch = await k.claim(boundary + US, ttl=ttl)
    k.eq([x.run_id for x in batch.leases], [run.id], f"1µs after claimed_at + {ttl_s}s: stolen")


@invariant("CLAIM-MAX-ATTEMPTS-POISON")
@pytest.mark.parametrize("path", ["steal", "release"])
@pytest.mark.parametrize("max_attempts", [1, 3])
async def test_n_launches_then_poison(docket_kit: Kit, max_attempts: int, path: str) -> None:
    k = docket_kit
    owner = k.tenant("a")
    run = await seed(k, owner, events=1)
    committed = successor(run, k.at(0.5), new_events=1)
    await commit_unclaimed_ok(
        k, owner, unclaimed(committed, wake=At(k.t0)), [event(run.id, 2, k.t0)]
    )
    events_before = await k.events(owner, run.id)
    zero = timedelta(0)
    for attempt in range(1, max_attempts + 1):
        now = k.at(attempt)
        lease = await k.claim_one(now, run.id, ttl=zero, max_attempts=max_attempts)
        k.eq(lease.claim_attempt, attempt, f"launch {attempt}")
        if path == "release":
            await k.b.runs.release_claim(owner, run.id, lease.claim_token, now)
    poison_at = k.at(max_attempts + 1)
    batch = await k.claim(poison_at, ttl=zero, max_attempts=max_attempts)
    k.eq(batch.leases, (), f"no launch {max_attempts + 1}")
    k.eq(
        batch.poisoned,
        (
            PoisonedClaim(
                run_id=run.id, owner=owner, poisoned_at=poison_at, poison_reason=POISON_MAX_ATTEMPTS
            ),
        ),
        "the next launch poisons instead",
    )
    info = await k.info(owner, run.id)
    k.eq(
        (info.poisoned_at, info.poison_reason, info.claimed_at, info.wake_at),
        (poison_at, POISON_MAX_ATTEMPTS, None, None),
        "poisoned at the policy's now, no claim, no wake",
    )
    k.eq(info.claim_attempts, max_attempts, "attempts unchanged by the poison")
    k.eq(
        (info.run, info.latest_checkpoint_type),
        (committed, CheckpointType.STEP_COMMITTED),
        "the document and the checkpoint type are untouched",
    )
    k.eq(await k.events(owner, run.id), events_before, "events untouched")
    k.eq(await k.claim(k.at(7200), limit=5, ttl=zero), ClaimBatch(), "nothing claimable after")


@invariant("CLAIM-FUTURE-WAKE")
async def test_future_wakes_wait_until_due(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS, wake_at=k.at(10))
    waiting = await seed(k, TENANTLESS, k.name("w"), wake_at=k.t0)
    await commit_unclaimed_ok(
        k,
        TENANTLESS,
        unclaimed(successor(waiting, k.at(1), status=RunStatus.WAITING), wake=External()),
    )
    done = await seed(k, TENANTLESS, k.name("d"), wake_at=k.t0)
    await commit_unclaimed_ok(
        k, TENANTLESS, unclaimed(successor(done, k.at(1), status=RunStatus.DONE), wake=Terminal())
    )
    empty = await k.claim(k.t0, limit=5)
    k.eq(empty, ClaimBatch((), ()), "nothing due at t0: an empty batch")
    k.eq(await k.claim(k.at(10) - US, limit=5), ClaimBatch(), "1µs before the wake")
    batch = await k.claim(k.at(10), limit=5)
    k.eq([lease.run_id for lease in batch.leases], [run.id], "due exactly at wake_at")
    later = await k.claim(k.at(10_000), limit=5, ttl=timedelta(days=1))
    k.eq(later, ClaimBatch(), "waiting and terminal runs are never due")


@invariant("CLAIM-FUTURE-WAKE")
async def test_claim_without_now_uses_the_backend_clock(docket_kit: Kit) -> None:
    k = docket_kit
    now = await k.b.now()
    due = await seed(k, TENANTLESS, k.name("due"), wake_at=now - timedelta(seconds=1))
    await seed(k, TENANTLESS, k.name("later"), wake_at=now + timedelta(days=1))
    batch = await k.b.runs.claim_due(ClaimPolicy(limit=5, orphan_ttl=MINUTE, max_claim_attempts=3))
    batch = k.isa(batch, ClaimBatch, "claim_due(now=None)")
    after = await k.b.now()
    k.eq([lease.run_id for lease in batch.leases], [due.id], "only the run due by its clock")
    k.check(
        now <= batch.leases[0].claimed_at <= after,
        "claimed_at is the backend's clock when no now is given",
    )


@invariant("CLAIM-DOES-NOT-TOUCH-DOCUMENT")
async def test_claim_operations_never_touch_the_document(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS, events=1)
    doc = successor(run, k.at(1), new_events=1)
    await commit_unclaimed_ok(
        k, TENANTLESS, unclaimed(doc, wake=At(k.t0)), [event(run.id, 2, k.t0)]
    )
    events = await k.events(TENANTLESS, run.id)

    async def same(what: str) -> None:
        info = await k.info(TENANTLESS, run.id)
        k.eq(info.run, doc, f"{what}: the document is untouched")
        k.eq(info.latest_checkpoint_type, CheckpointType.STEP_COMMITTED, f"{what}: type kept")
        k.eq(await k.b.runs.fetch_run(TENANTLESS, run.id), doc, f"{what}: fetch_run")
        k.eq(await k.events(TENANTLESS, run.id), events, f"{what}: events")

    zero = timedelta(0)
    lease = await k.claim_one(k.at(1), run.id, ttl=zero)
    await same("claim")
    await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, k.at(2))
    await same("refresh")
    lease = await k.claim_one(k.at(3), run.id, ttl=zero)
    await same("steal")
    await k.b.runs.release_claim(TENANTLESS, run.id, lease.claim_token, k.at(4))
    await same("release")
    lease = await k.claim_one(k.at(4), run.id, ttl=zero)
    got = await k.b.runs.abandon_claim(
        TENANTLESS, run.id, lease.claim_token, _abandon(k.at(5), k.at(5), expected=2)
    )
    k.eq(got, Rescheduled(k.at(5)), "abandon")
    await same("abandon")
    poisoned = await k.claim(k.at(6), ttl=zero, max_attempts=1)
    k.eq([p.run_id for p in poisoned.poisoned], [run.id], "poisoned")
    await same("poison")
    await k.b.runs.retry_poisoned_run(TENANTLESS, run.id, k.at(7))
    await same("retry_poisoned_run")


# -- policy validation ---------------------------------------------------------------------------

BAD_CLAIM_POLICIES: dict[str, Callable[[Kit], ClaimPolicy]] = {
    "limit-zero": lambda k: ClaimPolicy(limit=0, orphan_ttl=MINUTE, max_claim_attempts=3, now=k.t0),
    "limit-negative": lambda k: ClaimPolicy(
        limit=-1, orphan_ttl=MINUTE, max_claim_attempts=3, now=k.t0
    ),
    "limit-bool": lambda k: ClaimPolicy(
        limit=True, orphan_ttl=MINUTE, max_claim_attempts=3, now=k.t0
    ),
    "ttl-negative": lambda k: ClaimPolicy(limit=1, orphan_ttl=-US, max_claim_attempts=3, now=k.t0),
    "max-attempts-zero": lambda k: ClaimPolicy(
        limit=1, orphan_ttl=MINUTE, max_claim_attempts=0, now=k.t0
    ),
    "max-attempts-negative": lambda k: ClaimPolicy(
        limit=1, orphan_ttl=MINUTE, max_claim_attempts=-2, now=k.t0
    ),
    "now-naive": lambda k: ClaimPolicy(
        limit=1, orphan_ttl=MINUTE, max_claim_attempts=3, now=k.t0.replace(tzinfo=None)
    ),
    "preference-string": lambda k: ClaimPolicy(
        limit=1,
        orphan_ttl=MINUTE,
        max_claim_attempts=3,
        preference=junk("ready"),
        now=k.t0,
    ),
}


@invariant("CLAIM-POLICY-VALIDATION")
@pytest.mark.parametrize("case", sorted(BAD_CLAIM_POLICIES))
async def test_bad_claim_policy_raises(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    before = await k.snapshot(TENANTLESS, run.id)
    policy = BAD_CLAIM_POLICIES[case](k)
    await k.raises_async(ValueError, lambda: k.b.runs.claim_due(policy), case)
    await k.unchanged(TENANTLESS, run.id, before, f"after a claim with {case}")


BAD_ABANDONS: dict[str, Callable[[Kit], AbandonPolicy]] = {
    "retry-before-now": lambda k: _abandon(k.at(10), k.at(10) - US),
    "max-abandons-zero": lambda k: _abandon(k.at(1), k.at(60), max_abandons=0),
    "max-abandons-negative": lambda k: _abandon(k.at(1), k.at(60), max_abandons=-1),
    "expected-negative": lambda k: _abandon(k.at(1), k.at(60), expected=-1),
    "retry-naive": lambda k: _abandon(k.at(1), k.at(60).replace(tzinfo=None)),
    "backoff-base-zero": lambda k: _abandon(
        k.at(1), k.at(60), non_poisoning=True, backoff=Backoff(base=timedelta(0), cap=MINUTE)
    ),
    "backoff-cap-below-base": lambda k: _abandon(
        k.at(1),
        k.at(60),
        non_poisoning=True,
        backoff=Backoff(base=MINUTE, cap=timedelta(seconds=1)),
    ),
}


@invariant("ABANDON-POLICY-VALIDATION")
@pytest.mark.parametrize("case", sorted(BAD_ABANDONS))
async def test_bad_abandon_policy_raises(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS)
    before = await k.snapshot(TENANTLESS, run.id)
    policy = BAD_ABANDONS[case](k)
    await k.raises_async(
        ValueError,
        lambda: k.b.runs.abandon_claim(TENANTLESS, run.id, lease.claim_token, policy),
        case,
    )
    await k.unchanged(TENANTLESS, run.id, before, f"after an abandon with {case}")
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, k.at(1)),
        ClaimRefreshed,
        "the claim still holds",
    )


@invariant("ABANDON-POLICY-VALIDATION")
async def test_abandon_retry_at_equal_to_now_is_allowed(docket_kit: Kit) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS)
    got = await k.b.runs.abandon_claim(
        TENANTLESS, run.id, lease.claim_token, _abandon(k.at(10), k.at(10))
    )
    k.eq(got, Rescheduled(k.at(10)), "retry_at == now reschedules at now")


# -- abandon escalation and backoff ---------------------------------------------------------------


@invariant("ABANDON-NON-POISONING-BACKOFF")
async def test_non_poisoning_backoff(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    backoff = Backoff(base=timedelta(seconds=1), cap=timedelta(seconds=5))
    now = k.t0
    delays = []
    for round_ in range(6):
        lease = await k.claim_one(now, run.id)
        k.eq(lease.claim_attempt, 1, f"round {round_}: an abandon hands the attempt back")
        got = await k.b.runs.abandon_claim(
            TENANTLESS,
            run.id,
            lease.claim_token,
            _abandon(
                now, now + timedelta(hours=1), max_abandons=1, non_poisoning=True, backoff=backoff
            ),
        )
        rescheduled = k.isa(got, Rescheduled, f"round {round_}: non-poisoning never poisons")
        delays.append((rescheduled.wake_at - now).total_seconds())
        info = await k.info(TENANTLESS, run.id)
        k.eq(
            (info.claim_abandons, info.claim_attempts, info.wake_at, info.poisoned_at),
            (round_ + 1, 0, rescheduled.wake_at, None),
            f"round {round_}: abandons count up, attempts back to 0",
        )
        now = rescheduled.wake_at
    k.eq(delays, [1, 2, 4, 5, 5, 5], "wake = now + min(base * 2^abandons, cap); retry_at ignored")


@invariant("ABANDON-NON-POISONING-BACKOFF")
async def test_non_poisoning_without_backoff_uses_retry_at(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    now = k.t0
    for round_ in range(3):
        lease = await k.claim_one(now, run.id)
        retry = now + timedelta(seconds=7)
        got = await k.b.runs.abandon_claim(
            TENANTLESS,
            run.id,
            lease.claim_token,
            _abandon(now, retry, max_abandons=1, non_poisoning=True),
        )
        k.eq(got, Rescheduled(retry), f"round {round_}: wake at retry_at, past the max")
        now = retry
    k.eq((await k.info(TENANTLESS, run.id)).claim_abandons, 3, "three abandons counted")


@invariant("ABANDON-ESCALATION")
@pytest.mark.parametrize("max_abandons", [1, 3])
async def test_n_abandons_then_poison(docket_kit: Kit, max_abandons: int) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    now = k.t0
    for round_ in range(max_abandons):
        lease = await k.claim_one(now, run.id)
        retry = now + timedelta(seconds=3)
        got = await k.b.runs.abandon_claim(
            TENANTLESS, run.id, lease.claim_token, _abandon(now, retry, max_abandons=max_abandons)
        )
        k.eq(got, Rescheduled(retry), f"abandon {round_ + 1} of {max_abandons} reschedules")
        now = retry
    lease = await k.claim_one(now, run.id)
    got = await k.b.runs.abandon_claim(
        TENANTLESS, run.id, lease.claim_token, _abandon(now, now, max_abandons=max_abandons)
    )
    k.eq(got, Poisoned(now, POISON_MAX_ABANDONS), f"abandon {max_abandons + 1} poisons")
    info = await k.info(TENANTLESS, run.id)
    k.eq(
        (info.claim_abandons, info.claim_attempts, info.poisoned_at, info.wake_at),
        (max_abandons, 0, now, None),
        "abandons unchanged by the poison, attempts handed back",
    )


# -- retry of poisoned runs, signals, commits -----------------------------------------------


async def _in_state(k: Kit, state: str) -> Run | None:
    if state == "ghost":
        return None
    run = await seed(k, TENANTLESS)
    if state in ("done", "failed", "cancelled"):
        status = RunStatus(state)
        await commit_unclaimed_ok(
            k, TENANTLESS, unclaimed(successor(run, k.at(1), status=status), wake=Terminal())
        )
    elif state == "waiting":
        await commit_unclaimed_ok(
            k,
            TENANTLESS,
            unclaimed(successor(run, k.at(1), status=RunStatus.WAITING), wake=External()),
        )
    elif state == "claimed":
        await k.claim_one(k.t0, run.id)
    elif state == "scheduled":
        await commit_unclaimed_ok(
            k, TENANTLESS, unclaimed(successor(run, k.at(1)), wake=At(k.at(90)))
        )
    elif state == "poisoned":
        await _poison_by_attempts(k, TENANTLESS, run, k.t0)
    return run


RETRY_OUTCOMES: dict[str, type] = {
    "ghost": NotFound,
    "done": InactiveRun,
    "failed": InactiveRun,
    "cancelled": InactiveRun,
    "waiting": Run,
    "claimed": Run,
    "scheduled": Run,
    "poisoned": Run,
}


@invariant("RETRY-POISONED-TERMINAL-FIRST")
@pytest.mark.parametrize("state", list(RETRY_OUTCOMES))
async def test_retry_poisoned_order(docket_kit: Kit, state: str) -> None:
    k = docket_kit
    run = await _in_state(k, state)
    run_id = run.id if run is not None else k.name("ghost")
    if run is not None:
        before = await k.snapshot(TENANTLESS, run_id)
    got = await k.b.runs.retry_poisoned_run(TENANTLESS, run_id, k.at(500))
    k.isa(got, RETRY_OUTCOMES[state], f"retry_poisoned_run on a {state} run")
    if run is None:
        await k.absent(TENANTLESS, run_id, "retry never creates a run")
        return
    if state != "poisoned":
        await k.unchanged(TENANTLESS, run_id, before, f"retry on a {state} run is a no-op")
        if isinstance(got, Run):
            k.eq(got, (await k.info(TENANTLESS, run_id)).run, "the answer is the stored run")
        return
    info = await k.info(TENANTLESS, run_id)
    k.eq(
        (info.poisoned_at, info.wake_at, info.claimed_at, info.claim_attempts),
        (None, k.at(500), None, 0),
        "a poisoned run is recovered: due at now, counters reset",
    )
    k.eq(got, info.run, "the answer is the stored run")


@invariant("SIGNAL-CLEARS-POISON")
@pytest.mark.parametrize("poison", ["attempts", "abandons"])
@pytest.mark.parametrize("wake", ["immediate", "at", "external"])
async def test_signal_clears_poison(docket_kit: Kit, poison: str, wake: str) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    if poison == "attempts":
        await _poison_by_attempts(k, TENANTLESS, run, k.t0)
    else:
        lease = await k.claim_one(k.t0, run.id)
        got = await k.b.runs.abandon_claim(
            TENANTLESS, run.id, lease.claim_token, _abandon(k.at(1), k.at(1), max_abandons=1)
        )
        k.isa(got, Rescheduled, "first abandon")
        lease = await k.claim_one(k.at(1), run.id)
        got = await k.b.runs.abandon_claim(
            TENANTLESS, run.id, lease.claim_token, _abandon(k.at(2), k.at(2), max_abandons=1)
        )
        k.isa(got, Poisoned, "second abandon poisons")
    k.check((await k.info(TENANTLESS, run.id)).poisoned, "poisoned before the signal")
    status = RunStatus.WAITING if wake == "external" else RunStatus.RUNNING
    schedule: Any = {"immediate": Immediate(), "at": At(k.at(40)), "external": External()}[wake]
    before = await k.b.now()
    await commit_unclaimed_ok(
        k, TENANTLESS, unclaimed(successor(run, k.at(3), status=status), wake=schedule)
    )
    after = await k.b.now()
    info = await k.info(TENANTLESS, run.id)
    k.eq(
        (info.poisoned_at, info.poison_reason, info.claim_attempts, info.claim_abandons),
        (None, None, 0, 0),
        "a signal clears the poison and the counters",
    )
    if wake == "immediate":
        k.check(
            info.wake_at is not None and before <= info.wake_at <= after,
            "due at the backend's clock",
        )
        k.eq(len((await k.claim(after, max_attempts=1)).leases), 1, "claimable again")
    elif wake == "at":
        k.eq(info.wake_at, k.at(40), "due at the signal's wake")
    else:
        k.eq(info.wake_at, None, "parked")


@invariant("COMMIT-RESETS-HEALTH")
async def test_commit_resets_attempts_and_abandons(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    lease = await k.claim_one(k.t0, run.id)
    await k.b.runs.abandon_claim(TENANTLESS, run.id, lease.claim_token, _abandon(k.t0, k.t0))
    lease = await k.claim_one(k.t0, run.id, ttl=timedelta(0))
    lease = await k.claim_one(k.t0 + US, run.id, ttl=timedelta(0))
    info = await k.info(TENANTLESS, run.id)
    k.eq((info.claim_attempts, info.claim_abandons), (2, 1), "before the commit")
    await commit_claimed_ok(k, TENANTLESS, claimed(successor(run, k.at(1)), lease.claim_token))
    info = await k.info(TENANTLESS, run.id)
    k.eq((info.claim_attempts, info.claim_abandons), (0, 0), "a committed step resets both")


@invariant("CLAIM-BACKEND-CLOCK")
async def test_now_none_means_the_backend_clock(docket_kit: Kit) -> None:
    """Every claim operation without ``now`` stamps and compares with the backend's clock."""
    k = docket_kit

    async def window() -> tuple[datetime, datetime]:
        if k.subject.clock is not None:
            k.subject.clock.advance(timedelta(seconds=1))
        return await k.b.now(), await k.b.now()

    start, _ = await window()
    run = await seed(k, TENANTLESS, wake_at=start)
    lease = await k.claim_one(start, run.id)
    low, _ = await window()
    refreshed = k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token),
        ClaimRefreshed,
        "refresh_claim(now=None)",
    )
    high = await k.b.now()
    k.check(low <= refreshed.claimed_at <= high, "refresh without now: the backend's time")
    low, _ = await window()
    await k.b.runs.release_claim(TENANTLESS, run.id, lease.claim_token)
    high = await k.b.now()
    wake = (await k.info(TENANTLESS, run.id)).wake_at
    k.check(wake is not None and low <= wake <= high, f"release without now: wake {wake}")
    lease = await k.claim_one(high, run.id)
    low, _ = await window()
    policy = AbandonPolicy(
        expected_checkpoint_seq=1, retry_at=low + timedelta(hours=1), max_claim_abandons=1
    )
    got = await k.b.runs.abandon_claim(TENANTLESS, run.id, lease.claim_token, policy)
    k.eq(got, Rescheduled(low + timedelta(hours=1)), "abandon without now")
    past = AbandonPolicy(
        expected_checkpoint_seq=1, retry_at=low - timedelta(hours=1), max_claim_abandons=1
    )
    lease = await k.claim_one(low + timedelta(hours=1), run.id)
    await k.raises_async(
        ValueError,
        lambda: k.b.runs.abandon_claim(TENANTLESS, run.id, lease.claim_token, past),
        "retry_at before the backend's now",
    )
    batch = await k.claim(low + timedelta(hours=2), ttl=timedelta(0), max_attempts=1)
    k.eq([p.run_id for p in batch.poisoned], [run.id], "poisoned (attempts exhausted)")
    low, _ = await window()
    k.isa(await k.b.runs.retry_poisoned_run(TENANTLESS, run.id), Run, "retry without now")
    high = await k.b.now()
    wake = (await k.info(TENANTLESS, run.id)).wake_at
    k.check(wake is not None and low <= wake <= high, f"retry without now: wake {wake}")


@invariant("TIMESTAMPS-UTC")
async def test_operational_stamps_are_utc_instants(docket_kit: Kit) -> None:
    """Aware times in any offset are the same instants; what is stored reads back in UTC."""
    k = docket_kit
    plus2 = timezone(timedelta(hours=2))
    run = await seed(k, TENANTLESS, wake_at=k.at(5).astimezone(plus2))
    info = await k.info(TENANTLESS, run.id)
    k.eq(info.wake_at, k.at(5), "initialize: the same instant")
    k.eq(info.wake_at.utcoffset() if info.wake_at else None, timedelta(0), "read back in UTC")
    lease = await k.claim_one(k.at(5).astimezone(plus2), run.id)
    k.eq(lease.claimed_at, k.at(5), "claim: the same instant")
    info = await k.info(TENANTLESS, run.id)
    k.eq(info.claimed_at.utcoffset() if info.claimed_at else None, timedelta(0), "in UTC")
    await k.b.runs.release_claim(TENANTLESS, run.id, lease.claim_token, k.at(6).astimezone(plus2))
    info = await k.info(TENANTLESS, run.id)
    k.eq(info.wake_at, k.at(6), "release: the same instant")
    k.eq(info.wake_at.utcoffset() if info.wake_at else None, timedelta(0), "in UTC")
    await k.raises_async(
        ValueError,
        lambda: k.b.runs.release_claim(
            TENANTLESS, run.id, lease.claim_token, k.at(7).replace(tzinfo=None)
        ),
        "a naive now is ambiguous",
    )
