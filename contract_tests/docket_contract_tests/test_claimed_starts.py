"""Claimed starts (the optional ``ClaimedStarts`` member): CLAIMED-START.

A run written by ``initialize_claimed`` is ``initialize``'s run, held by the given token
as if one ``claim_due`` had handed it out at ``proposal.wake_at``. A backend that does not
declare the member has no such cases to pass (they are reported as skipped, by name).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from docket.contract import (
    ClaimLost,
    ClaimRefreshed,
    Conflict,
    InvalidTransition,
    ReleaseClaim,
    RetainClaim,
    StaleCheckpoint,
    Terminal,
)
from docket.contract.protocols import ClaimedStarts
from docket.records import TENANTLESS, CheckpointType, OwnerScope, Run, RunStatus, Tenant
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    events_for,
    init_proposal,
    junk,
    new_run,
    save_graph,
    successor,
)
from docket_contract_tests.kit import Kit, invariant

US = timedelta(microseconds=1)
TTL = timedelta(seconds=60)


def _starts(k: Kit) -> ClaimedStarts:
    store = k.b.transitions
    if not isinstance(store, ClaimedStarts):
        pytest.skip("the backend does not declare the optional ClaimedStarts member")
    return store


async def _start(
    k: Kit, owner: OwnerScope, token: str, *, events: int = 1, transition_id: str | None = None
) -> tuple[Run, object]:
    """A claimed start at ``t0``; the answer and the proposed run."""
    ref = await save_graph(k, owner)
    run = new_run(k.fresh("run"), ref, k.t0, event_seq=events)
    proposal = init_proposal(run, k.t0, transition_id)
    answer = await _starts(k).initialize_claimed(
        owner, proposal, events_for(run, k.t0, range(1, events + 1)), token
    )
    return run, answer


@invariant("CLAIMED-START")
@pytest.mark.parametrize("owner", [TENANTLESS, Tenant("acme")], ids=["tenantless", "tenant"])
async def test_a_claimed_start_is_held_by_its_token(docket_kit: Kit, owner: OwnerScope) -> None:
    k = docket_kit
    run, answer = await _start(k, owner, "tok-start")
    k.eq(answer, run, "initialize_claimed returns the proposed run")
    info = await k.info(owner, run.id)
    k.eq(info.run, run, "the stored run")
    k.eq(info.claimed_at, k.t0, "claimed at the proposal's wake_at")
    k.eq(info.wake_at, None, "a claimed run has no wake")
    k.eq(info.claim_attempts, 1, "the start is the first claim attempt")
    k.eq(len(await k.events(owner, run.id)), 1, "its events are stored")
    k.eq((await k.claim(k.at(30), limit=5, ttl=TTL)).leases, (), "held: not claimable")
    k.isa(
        await k.b.runs.refresh_claim(owner, run.id, "tok-other", k.at(5)),
        ClaimLost,
        "another token does not hold it",
    )
    k.eq(
        await k.b.runs.refresh_claim(owner, run.id, "tok-start", k.at(5)),
        ClaimRefreshed(k.at(5)),
        "its token refreshes it",
    )
    step = successor(run, k.at(6), new_events=1)
    await commit_claimed_ok(k, owner, claimed(step, "tok-start"), events_for(step, k.at(6), [2]))
    done = successor(step, k.at(7), status=RunStatus.DONE)
    await commit_claimed_ok(
        k,
        owner,
        claimed(
            done,
            "tok-start",
            schedule=ReleaseClaim(Terminal()),
            checkpoint_type=CheckpointType.RUN_COMPLETED,
        ),
    )
    info = await k.info(owner, done.id)
    k.eq((info.run.status, info.claimed_at), (RunStatus.DONE, None), "finished by its holder")


@invariant("CLAIMED-START")
async def test_a_claimed_start_expires_like_any_claim(docket_kit: Kit) -> None:
    k = docket_kit
    run, answer = await _start(k, TENANTLESS, "tok-lost")
    k.eq(answer, run, "initialize_claimed returns the proposed run")
    k.eq((await k.claim(k.t0 + TTL, ttl=TTL)).leases, (), "not expired at exactly the TTL")
    lease = await k.claim_one(k.t0 + TTL + US, run.id, ttl=TTL)
    k.check(lease.claim_token != "tok-lost", "taking it over mints a new token")
    k.eq(lease.claim_attempt, 2, "the takeover is the second launch")
    k.eq(lease.checkpoint_seq, run.checkpoint_seq, "the lease's checkpoint")
    before = await k.snapshot(TENANTLESS, run.id)
    k.isa(
        await k.b.transitions.commit_claimed(
            TENANTLESS, claimed(successor(run, k.at(61)), "tok-lost"), []
        ),
        StaleCheckpoint,
        "a commit under the taken-over token",
    )
    await k.unchanged(TENANTLESS, run.id, before, "the old holder changed nothing")
    await commit_claimed_ok(
        k, TENANTLESS, claimed(successor(run, k.at(62)), lease.claim_token, schedule=RetainClaim())
    )


@invariant("CLAIMED-START")
async def test_a_released_claimed_start_is_ready(docket_kit: Kit) -> None:
    k = docket_kit
    run, _ = await _start(k, TENANTLESS, "tok-release")
    await k.b.runs.release_claim(TENANTLESS, run.id, "tok-release", k.at(2))
    info = await k.info(TENANTLESS, run.id)
    k.eq((info.claimed_at, info.wake_at), (None, k.at(2)), "released: due at the release")
    lease = await k.claim_one(k.at(3), run.id, ttl=TTL)
    k.eq(lease.claim_attempt, 2, "claimed again: the second launch")


@invariant("CLAIMED-START")
async def test_claimed_start_replays_and_conflicts(docket_kit: Kit) -> None:
    k = docket_kit
    run, answer = await _start(k, TENANTLESS, "tok-a", transition_id="tr-start")
    k.eq(answer, run, "the first write")
    before = await k.snapshot(TENANTLESS, run.id)
    starts = _starts(k)
    proposal = init_proposal(run, k.t0, "tr-start")
    events = events_for(run, k.t0, [1])
    k.eq(
        await starts.initialize_claimed(TENANTLESS, proposal, events, "tok-a"),
        run,
        "the same write again answers as a replay",
    )
    k.isa(
        await starts.initialize_claimed(TENANTLESS, proposal, events, "tok-b"),
        Conflict,
        "the same transition id with another token",
    )
    k.isa(
        await k.b.transitions.initialize(TENANTLESS, proposal, events),
        Conflict,
        "the same transition id as a plain start",
    )
    k.isa(
        await starts.initialize_claimed(
            TENANTLESS, init_proposal(run, k.t0, "tr-other"), events, "tok-c"
        ),
        Conflict,
        "another start of the same run id",
    )
    await k.unchanged(TENANTLESS, run.id, before, "after replays and conflicts")


@invariant("CLAIMED-START")
@pytest.mark.parametrize(
    "token",
    ["", "x" * 129, "tab\there", "é", None, 7],
    ids=["empty", "long", "control", "non-ascii", "none", "int"],
)
async def test_a_bad_token_is_refused_and_nothing_is_stored(docket_kit: Kit, token: object) -> None:
    k = docket_kit
    starts = _starts(k)
    ref = await save_graph(k, TENANTLESS)
    run = new_run(k.fresh("run"), ref, k.t0, event_seq=1)
    answer = await starts.initialize_claimed(
        TENANTLESS, init_proposal(run, k.t0), events_for(run, k.t0, [1]), junk(token)
    )
    found = k.isa(answer, InvalidTransition, f"initialize_claimed with token {token!r}")
    k.check(
        any("claim_token" in reason for reason in found.reasons),
        f"the refusal names the token: {found.reasons}",
    )
    await k.absent(TENANTLESS, run.id, "after a refused claimed start")
