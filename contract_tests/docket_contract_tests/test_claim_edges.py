"""Claim edges: CLAIM-TTL-SUBMILLISECOND, REFRESH-AFTER-RELEASE, ABANDON-AFTER-RETAINED-COMMIT.

Claim times are microsecond instants: a claim taken at a sub-millisecond ``now`` is
stealable only strictly after ``claimed_at + ttl``, to the microsecond (a store that
keeps milliseconds lets it go early). A holder that released its claim holds nothing:
refreshing it afterwards is ``ClaimLost``. An abandon is fenced on the run's *current*
checkpoint, which the holder's own retained commit moved: the lease's checkpoint is stale.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from docket.contract import (
    AbandonPolicy,
    ClaimBatch,
    ClaimLost,
    ClaimRefreshed,
    Rescheduled,
    StaleAbandon,
)
from docket.records import TENANTLESS
from docket_contract_tests.fixtures import claimed, commit_claimed_ok, seed, successor
from docket_contract_tests.kit import Kit, invariant

US = timedelta(microseconds=1)


@invariant("CLAIM-TTL-SUBMILLISECOND")
@pytest.mark.parametrize("us", [1, 250, 999])
async def test_ttl_boundary_at_sub_millisecond_claim_times(docket_kit: Kit, us: int) -> None:
    k = docket_kit
    ttl = timedelta(seconds=1)
    at = k.at(1, us=us)
    run = await seed(k, TENANTLESS, wake_at=at)
    lease = await k.claim_one(at, run.id, ttl=ttl)
    k.eq(lease.claimed_at, at, "the lease carries the claim's now, to the microsecond")
    info = await k.info(TENANTLESS, run.id)
    k.eq(info.claimed_at, at, "claimed_at is stored to the microsecond")
    before = await k.snapshot(TENANTLESS, run.id)
    boundary = at + ttl
    for when in (boundary - timedelta(microseconds=us), boundary):
        k.eq(await k.claim(when, ttl=ttl), ClaimBatch(), f"at claimed_at + ttl - {boundary - when}")
    await k.unchanged(TENANTLESS, run.id, before, "an unexpired sub-millisecond claim")
    batch = await k.claim(boundary + US, ttl=ttl)
    k.eq([x.run_id for x in batch.leases], [run.id], "1µs after claimed_at + ttl: stolen")


@invariant("REFRESH-AFTER-RELEASE")
async def test_refresh_after_the_holders_own_release_is_lost(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    lease = await k.claim_one(k.t0, run.id)
    await k.b.runs.release_claim(TENANTLESS, run.id, lease.claim_token, k.at(1))
    released = await k.snapshot(TENANTLESS, run.id)
    got = await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, k.at(2))
    k.isa(got, ClaimLost, "refresh after the holder's own release")
    await k.unchanged(TENANTLESS, run.id, released, "a refresh of a released claim")
    again = await k.claim_one(k.at(3), run.id)
    held = await k.snapshot(TENANTLESS, run.id)
    got = await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, k.at(4))
    k.isa(got, ClaimLost, "refresh of a released token after the run was claimed again")
    await k.unchanged(TENANTLESS, run.id, held, "a released token's refresh")
    got = await k.b.runs.refresh_claim(TENANTLESS, run.id, again.claim_token, k.at(4))
    k.eq(got, ClaimRefreshed(k.at(4)), "the new holder refreshes")


@invariant("ABANDON-AFTER-RETAINED-COMMIT")
async def test_abandon_is_fenced_on_the_checkpoint_after_a_retained_commit(
    docket_kit: Kit,
) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    lease = await k.claim_one(k.t0, run.id)
    step = successor(run, k.at(1))
    await commit_claimed_ok(k, TENANTLESS, claimed(step, lease.claim_token))
    before = await k.snapshot(TENANTLESS, run.id)

    def policy(expected: int) -> AbandonPolicy:
        return AbandonPolicy(
            expected_checkpoint_seq=expected,
            retry_at=k.at(60),
            max_claim_abandons=3,
            now=k.at(2),
        )

    got = await k.b.runs.abandon_claim(
        TENANTLESS, run.id, lease.claim_token, policy(lease.checkpoint_seq)
    )
    k.isa(got, StaleAbandon, "abandon at the lease's checkpoint, consumed by its own commit")
    await k.unchanged(TENANTLESS, run.id, before, "a stale abandon")
    got = await k.b.runs.abandon_claim(
        TENANTLESS, run.id, lease.claim_token, policy(step.checkpoint_seq)
    )
    k.eq(got, Rescheduled(k.at(60)), "abandon at the current checkpoint")
    info = await k.info(TENANTLESS, run.id)
    k.eq(
        (info.claimed_at, info.wake_at, info.claim_abandons, info.run),
        (None, k.at(60), 1, step),
        "abandoned: no claim, wake at retry_at, one abandon, the committed document kept",
    )
