"""The operational tuple after every step: OPERATIONAL-TUPLE-AUDIT."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import pytest

from docket.contract import AbandonPolicy, At, External, Immediate, ReleaseClaim, Terminal
from docket.records import CheckpointType, GraphRef, RunInfo, RunStatus
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    commit_unclaimed_ok,
    new_run,
    seed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, audit_problems, invariant


@invariant("OPERATIONAL-TUPLE-AUDIT")
async def test_every_state_keeps_the_tuple(docket_kit: Kit) -> None:
    """Walk one run through every operational view, auditing after each step."""
    k = docket_kit
    owner = k.tenant("a")
    zero = timedelta(0)
    views: list[str] = []

    async def look(view: str) -> RunInfo:
        info = await k.info(owner, run.id)  # audits
        views.append(view)
        return info

    run = await seed(k, owner, wake_at=k.at(5))
    await look("scheduled")
    lease = await k.claim_one(k.at(5), run.id, ttl=zero)
    await look("claimed")
    lease = await k.claim_one(k.at(6), run.id, ttl=zero)
    await look("stolen")
    run = await commit_claimed_ok(k, owner, claimed(successor(run, k.at(7)), lease.claim_token))
    await look("retained")
    run = await commit_claimed_ok(
        k,
        owner,
        claimed(successor(run, k.at(8)), lease.claim_token, schedule=ReleaseClaim(At(k.at(9)))),
    )
    await look("released-at")
    lease = await k.claim_one(k.at(9), run.id, ttl=zero)
    await k.b.runs.release_claim(owner, run.id, lease.claim_token, k.at(10))
    await look("released")
    lease = await k.claim_one(k.at(10), run.id, ttl=zero)
    await k.b.runs.abandon_claim(
        owner,
        run.id,
        lease.claim_token,
        AbandonPolicy(
            expected_checkpoint_seq=run.checkpoint_seq,
            retry_at=k.at(11),
            max_claim_abandons=1,
            now=k.at(10),
        ),
    )
    await look("abandoned")
    poisoned = await k.claim(k.at(11), ttl=zero, max_attempts=1)  # 1 attempt already used
    k.eq(len(poisoned.poisoned), 1, "poisoned")
    info = await look("poisoned")
    k.check(info.poisoned, "the run is poisoned")
    await k.b.runs.retry_poisoned_run(owner, run.id, k.at(13))
    await look("recovered")
    run = await commit_unclaimed_ok(
        k, owner, unclaimed(successor(run, k.at(14), status=RunStatus.WAITING), wake=External())
    )
    await look("waiting")
    run = await commit_unclaimed_ok(
        k, owner, unclaimed(successor(run, k.at(15), status=RunStatus.RUNNING), wake=Immediate())
    )
    await look("signalled")
    lease = await k.claim_one(k.at(16), run.id, ttl=zero)
    run = await commit_claimed_ok(
        k,
        owner,
        claimed(
            successor(run, k.at(17), status=RunStatus.FAILED),
            lease.claim_token,
            schedule=ReleaseClaim(Terminal()),
        ),
    )
    info = await look("failed")
    k.eq((info.wake_at, info.claimed_at, info.poisoned_at), (None, None, None), "terminal: idle")
    k.eq(len(views), 12, "every step was audited")


def _sound(k: Kit) -> RunInfo:
    return RunInfo(
        run=new_run(k.name("r"), GraphRef(k.name("g"), "0" * 64), k.t0),
        tenant_id=None,
        wake_at=k.t0,
        claimed_at=None,
        claim_attempts=0,
        claim_abandons=0,
        poisoned_at=None,
        poison_reason=None,
        latest_checkpoint_type=CheckpointType.RUN_INITIALIZED,
    )


BROKEN: dict[str, Any] = {
    "wake-and-claim": lambda i, k: attrs.evolve(i, claimed_at=k.t0),
    "neither-wake-nor-claim": lambda i, k: attrs.evolve(i, wake_at=None),
    "poison-without-reason": lambda i, k: attrs.evolve(i, wake_at=None, poisoned_at=k.t0),
    "poisoned-with-wake": lambda i, k: attrs.evolve(
        i, poisoned_at=k.t0, poison_reason="max_claim_attempts_exceeded"
    ),
    "waiting-with-wake-and-claim": lambda i, k: attrs.evolve(
        i, claimed_at=k.t0, run=attrs.evolve(i.run, status=RunStatus.WAITING)
    ),
    "done-with-wake": lambda i, k: attrs.evolve(
        i, run=attrs.evolve(i.run, status=RunStatus.DONE, finished_at=k.t0)
    ),
    "terminal-without-finished-at": lambda i, k: attrs.evolve(
        i, wake_at=None, run=attrs.evolve(i.run, status=RunStatus.CANCELLED)
    ),
    "negative-attempts": lambda i, k: attrs.evolve(i, claim_attempts=-1),
    "empty-tenant": lambda i, k: attrs.evolve(i, tenant_id=""),
}


@invariant("OPERATIONAL-TUPLE-AUDIT")
@pytest.mark.parametrize("defect", sorted(BROKEN))
async def test_the_audit_catches_broken_tuples(docket_kit: Kit, defect: str) -> None:
    """The auditor itself: a sound tuple passes, each broken one is reported."""
    k = docket_kit
    sound = _sound(k)
    k.eq(audit_problems(sound), [], "a sound tuple")
    broken = BROKEN[defect](sound, k)
    k.check(audit_problems(broken), f"the audit misses {defect}")
