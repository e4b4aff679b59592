"""Reopening a failed run (the optional ``reopen_failed`` feature): T-REOPEN-1, T-REOPEN-2.

An operator's retry of a failed run is a ``commit_unclaimed`` whose proposed run is
``running`` again (failure and ``finished_at`` cleared) with an immediate wake. A backend
that declares ``Feature.REOPEN_FAILED`` gives the reopened run the operational state of
any running run: due at once, claimable, listed as running, no trace of having finished.
The commit is fenced like every signal: of two reopens of the same checkpoint exactly one
lands, and a worker holding a lease from before the failure can neither commit nor
refresh. Without the feature the cases are skipped, by name.
"""

from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

from docket.contract import (
    ClaimLost,
    Feature,
    Immediate,
    ReleaseClaim,
    RunListQuery,
    StaleCheckpoint,
    Terminal,
)
from docket.records import (
    SYSTEM,
    TENANTLESS,
    CheckpointType,
    EventType,
    OwnerScope,
    Run,
    RunStatus,
    Tenant,
)
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    commit_unclaimed_ok,
    events_for,
    seed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant

LATER = timedelta(hours=1)  # past any immediate wake, whoever's clock set it


def _reopens(k: Kit) -> None:
    if not k.declares(Feature.REOPEN_FAILED):
        pytest.skip("the backend does not declare the optional reopen_failed feature")


async def _failed(k: Kit, owner: OwnerScope, at: timedelta = timedelta(0)) -> Run:
    """A run that was claimed and committed ``failed`` (released, terminal)."""
    run = await seed(k, owner, wake_at=k.t0 + at, events=1)
    lease = await k.claim_one(k.t0 + at, run.id)
    failed = successor(run, k.t0 + at, status=RunStatus.FAILED, new_events=1)
    return await commit_claimed_ok(
        k,
        owner,
        claimed(
            failed,
            lease.claim_token,
            schedule=ReleaseClaim(Terminal()),
            checkpoint_type=CheckpointType.RUN_FAILED,
        ),
        events_for(failed, k.t0 + at, [2], type=EventType.RUN_FAILED),
    )


def _reopened(failed: Run, k: Kit) -> Run:
    return successor(failed, k.at(2), status=RunStatus.RUNNING, new_events=1, failure=None)


async def _listed(k: Kit, run_id: str, status: RunStatus) -> list[str]:
    page = await k.b.runs.list_runs(SYSTEM, RunListQuery(limit=200, statuses=frozenset({status})))
    return [s.id for s in page.runs if s.id == run_id]


@invariant("T-REOPEN-1")
@pytest.mark.parametrize("owner", [TENANTLESS, Tenant("acme")], ids=["tenantless", "tenant"])
async def test_a_reopened_failed_run_is_running_due_and_claimable(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    _reopens(k)
    failed = await _failed(k, owner)
    info = await k.info(owner, failed.id)
    k.eq((info.wake_at, info.claimed_at), (None, None), "a failed run is never due")
    k.eq(await _listed(k, failed.id, RunStatus.FAILED), [failed.id], "listed as failed")

    reopened = _reopened(failed, k)
    await commit_unclaimed_ok(
        k,
        owner,
        unclaimed(reopened, wake=Immediate(), checkpoint_type=CheckpointType.RETRY_SCHEDULED),
        events_for(reopened, k.at(2), [3], type=EventType.RUN_RETRIED),
    )
    info = await k.info(owner, failed.id)  # audited: a healthy running run has a wake
    k.eq(info.run, reopened, "the stored run is the reopened one")
    k.eq(info.latest_checkpoint_type, CheckpointType.RETRY_SCHEDULED, "latest checkpoint type")
    k.check(info.wake_at is not None, "the reopened run is due")
    k.eq((info.claim_attempts, info.poisoned_at), (0, None), "claim health reset")
    k.eq(await _listed(k, failed.id, RunStatus.RUNNING), [failed.id], "listed as running")
    k.eq(await _listed(k, failed.id, RunStatus.FAILED), [], "no longer listed as failed")
    summaries = [s for s in await k.all_runs() if s.id == failed.id]
    k.eq([(s.status, s.finished_at) for s in summaries], [(RunStatus.RUNNING, None)], "summary")
    k.eq(len(await k.events(owner, failed.id)), 3, "its events, the reopen's included")

    lease = await k.claim_one(k.t0 + LATER, failed.id)
    k.eq(lease.checkpoint_seq, reopened.checkpoint_seq, "leased at the reopen's checkpoint")
    done = successor(reopened, k.t0 + LATER, status=RunStatus.DONE)
    await commit_claimed_ok(
        k,
        owner,
        claimed(
            done,
            lease.claim_token,
            schedule=ReleaseClaim(Terminal()),
            checkpoint_type=CheckpointType.RUN_COMPLETED,
        ),
    )
    info = await k.info(owner, done.id)
    k.eq((info.run.status, info.wake_at, info.claimed_at), (RunStatus.DONE, None, None), "done")
    k.eq(await _listed(k, failed.id, RunStatus.RUNNING), [], "finished: not running any more")


@invariant("T-REOPEN-2")
async def test_a_run_reopens_once_per_failure_and_may_fail_again(docket_kit: Kit) -> None:
    k = docket_kit
    _reopens(k)
    for round_ in range(max(k.rounds // 10, 3)):
        failed = await _failed(k, TENANTLESS, timedelta(seconds=10 * round_))
        before = await k.snapshot(TENANTLESS, failed.id)
        first = _reopened(failed, k)
        second = attrs.evolve(first, metadata={"operator": "second"})
        answers = await k.gather_barrier(
            *(
                lambda run=run, seq=failed.checkpoint_seq: k.b.transitions.commit_unclaimed(
                    TENANTLESS,
                    seq,
                    unclaimed(run, checkpoint_type=CheckpointType.RETRY_SCHEDULED),
                    events_for(run, k.at(2), [3], type=EventType.RUN_RETRIED),
                )
                for run in (first, second)
            )
        )
        won = [a for a in answers if isinstance(a, Run)]
        k.eq(len(won), 1, f"round {round_}: exactly one reopen lands, got {answers}")
        k.check(
            any(isinstance(a, StaleCheckpoint) for a in answers),
            f"round {round_}: the other reopen is StaleCheckpoint, got {answers}",
        )
        info = await k.info(TENANTLESS, failed.id)
        k.eq(info.run, won[0], f"round {round_}: the winner is stored")
        k.eq(len(await k.events(TENANTLESS, failed.id)), 3, "one reopen's events, once")
        k.check(before.info != info, "the reopen changed the run")

        # the reopened run fails again and is reopened again
        lease = await k.claim_one(k.t0 + LATER + timedelta(seconds=round_), failed.id)
        again = successor(won[0], k.at(3), status=RunStatus.FAILED, new_events=1)
        await commit_claimed_ok(
            k,
            TENANTLESS,
            claimed(
                again,
                lease.claim_token,
                schedule=ReleaseClaim(Terminal()),
                checkpoint_type=CheckpointType.RUN_FAILED,
            ),
            events_for(again, k.at(3), [4], type=EventType.RUN_FAILED),
        )
        k.eq(await _listed(k, failed.id, RunStatus.RUNNING), [], "failed again: not running")
        reopened = successor(again, k.at(4), status=RunStatus.RUNNING, new_events=1, failure=None)
        await commit_unclaimed_ok(
            k,
            TENANTLESS,
            unclaimed(reopened, checkpoint_type=CheckpointType.RETRY_SCHEDULED),
            events_for(reopened, k.at(4), [5], type=EventType.RUN_RETRIED),
        )
        info = await k.info(TENANTLESS, failed.id)
        k.eq(info.run, reopened, "reopened a second time")
        k.check(info.wake_at is not None, "due again")
        # leave nothing due for the next round's claim
        lease = await k.claim_one(k.t0 + LATER * 2 + timedelta(seconds=round_), failed.id)
        await commit_claimed_ok(
            k,
            TENANTLESS,
            claimed(
                successor(reopened, k.at(5), status=RunStatus.CANCELLED),
                lease.claim_token,
                schedule=ReleaseClaim(Terminal()),
                checkpoint_type=CheckpointType.RUN_CANCELLED,
            ),
        )


@invariant("T-REOPEN-2")
async def test_a_worker_from_before_the_failure_is_fenced_out_of_the_reopened_run(
    docket_kit: Kit,
) -> None:
    k = docket_kit
    _reopens(k)
    ttl = timedelta(seconds=60)
    run = await seed(k, TENANTLESS, events=1)
    stale = await k.claim_one(k.t0, run.id, ttl=ttl)  # a worker that stalls past its TTL
    taker = await k.claim_one(k.t0 + ttl + timedelta(seconds=1), run.id, ttl=ttl)
    failed = successor(run, k.at(62), status=RunStatus.FAILED, new_events=1)
    await commit_claimed_ok(
        k,
        TENANTLESS,
        claimed(
            failed,
            taker.claim_token,
            schedule=ReleaseClaim(Terminal()),
            checkpoint_type=CheckpointType.RUN_FAILED,
        ),
        events_for(failed, k.at(62), [2], type=EventType.RUN_FAILED),
    )
    reopened = successor(failed, k.at(63), status=RunStatus.RUNNING, new_events=1, failure=None)
    await commit_unclaimed_ok(
        k,
        TENANTLESS,
        unclaimed(reopened, checkpoint_type=CheckpointType.RETRY_SCHEDULED),
        events_for(reopened, k.at(63), [3], type=EventType.RUN_RETRIED),
    )
    before = await k.snapshot(TENANTLESS, run.id)
    # the stalled worker wakes up and commits what it computed from the first checkpoint
    late = successor(run, k.at(64), new_events=1)
    for token in (stale.claim_token, taker.claim_token):
        k.isa(
            await k.b.transitions.commit_claimed(
                TENANTLESS, claimed(late, token), events_for(late, k.at(64), [2])
            ),
            StaleCheckpoint,
            "a commit under a lease from before the failure",
        )
        k.isa(
            await k.b.runs.refresh_claim(TENANTLESS, run.id, token, k.at(64)),
            ClaimLost,
            "a refresh under a lease from before the failure",
        )
    await k.unchanged(TENANTLESS, run.id, before, "the reopened run")
