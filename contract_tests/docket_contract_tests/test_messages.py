"""Messages (the optional ``messages`` feature): MESSAGE-UNCLAIMED-ANY.

``Docket.send`` commits with ``commit_unclaimed`` fenced on the run's checkpoint, whatever
the run is doing: held by a worker, parked on a timer, due, or waiting for the message.
The commit lands (the message delivered to a waiting attempt, or kept in the run's
mailbox), takes the wake it names and revokes any claim — the holder's commit is then
``StaleCheckpoint`` and its refresh ``ClaimLost`` — and a send fenced on a checkpoint
that moved on changes nothing (the sender re-reads and tries again). Of two sends from
one checkpoint exactly one lands. Without the feature the cases check nothing.
"""

from __future__ import annotations

import attrs
import pytest

from docket.contract import (
    At,
    ClaimLost,
    External,
    Immediate,
    Lease,
    ReleaseClaim,
    StaleCheckpoint,
    Wake,
)
from docket.contract.capabilities import Feature
from docket.records import (
    TENANTLESS,
    CheckpointType,
    OwnerScope,
    Run,
    RunInfo,
    RunStatus,
    Tenant,
)
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    seed,
    seed_claimed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant
from docket_contract_tests.timed import mailbox, parked, sleeping, waiting_message, with_mailbox

OWNERS = pytest.mark.parametrize(
    "owner", [TENANTLESS, Tenant("acme")], ids=["tenantless", "tenant"]
)
STATES = ("claimed", "parked", "due", "waiting")


def _messages(k: Kit) -> bool:
    return k.declares(Feature.MESSAGES)


async def _in_state(k: Kit, owner: OwnerScope, state: str) -> tuple[Run, Lease | None]:
    """A run in ``state``; the lease of the worker holding it (``claimed``) or ``None``."""
    if state == "due":
        return await seed(k, owner, wake_at=k.t0), None
    run, lease = await seed_claimed(k, owner)
    if state == "claimed":
        return run, lease
    base = successor(run, k.at(1))
    if state == "parked":  # asleep until t0 + 60
        now = parked(base, RunStatus.RUNNING, sleeping(base, "nap", k.at(1), k.at(60)))
        wake: Wake = At(k.at(60))
    else:  # waiting for the message, with no timeout
        now = parked(base, RunStatus.WAITING, waiting_message(base, "inbox", k.at(1), "reply"))
        wake = External()
    await commit_claimed_ok(
        k,
        owner,
        claimed(
            now,
            lease.claim_token,
            schedule=ReleaseClaim(wake),
            checkpoint_type=CheckpointType.RETRY_SCHEDULED,
        ),
    )
    return now, None


def _send(k: Kit, run: Run, state: str) -> tuple[Run, Wake]:
    """The document a send commits over ``run`` and the wake it names: a waiting attempt
    takes the message (the run runs on, due at once); otherwise it is kept."""
    if state == "waiting":  # delivered: consumed at once, only its key is kept
        seen = with_mailbox(run.metadata, mailbox(keys=("send-1",)))
        delivered = successor(
            run, k.at(2), status=RunStatus.RUNNING, active_tasks={}, timers={}, metadata=seen
        )
        return delivered, Immediate()
    box = with_mailbox(run.metadata, mailbox(("reply", {"ok": True}), keys=("send-1",)))
    kept = attrs.evolve(
        run, checkpoint_seq=run.checkpoint_seq + 1, updated_at=k.at(2), metadata=box
    )
    return kept, At(k.at(60)) if state == "parked" else Immediate()


@invariant("MESSAGE-UNCLAIMED-ANY")
@OWNERS
@pytest.mark.parametrize("state", STATES)
async def test_a_send_lands_fenced_whatever_the_run_is_doing_and_revokes_a_claim(
    docket_kit: Kit, owner: OwnerScope, state: str
) -> None:
    k = docket_kit
    if not _messages(k):
        return
    run, holder = await _in_state(k, owner, state)
    sent, wake = _send(k, run, state)
    result = await k.b.transitions.commit_unclaimed(
        owner,
        run.checkpoint_seq,
        unclaimed(sent, wake=wake, checkpoint_type=CheckpointType.STEP_COMMITTED),
        (),
    )
    k.eq(k.isa(result, Run, f"send to a {state} run"), sent, "the committed run")
    info = await k.info(owner, run.id)
    want_wake = wake.wake_at if isinstance(wake, At) else None
    k.eq(info.run, sent, "inspect_run after the send")
    k.eq(info.claimed_at, None, "a send revokes any claim")
    if isinstance(wake, Immediate):
        k.check(info.wake_at is not None, "due at once after the send")
    else:
        k.eq(info.wake_at, want_wake, "the send's wake")
    if holder is not None:
        late = successor(run, k.at(3))
        stale = await k.b.transitions.commit_claimed(owner, claimed(late, holder.claim_token), ())
        k.isa(stale, StaleCheckpoint, "the revoked holder's commit")
        lost = await k.b.runs.refresh_claim(owner, run.id, holder.claim_token, k.at(3))
        k.isa(lost, ClaimLost, "the revoked holder's refresh")


@invariant("MESSAGE-UNCLAIMED-ANY")
@OWNERS
@pytest.mark.parametrize("state", STATES)
async def test_of_two_sends_from_one_checkpoint_one_lands_and_a_stale_one_changes_nothing(
    docket_kit: Kit, owner: OwnerScope, state: str
) -> None:
    k = docket_kit
    if not _messages(k):
        return
    run, _ = await _in_state(k, owner, state)
    sent, wake = _send(k, run, state)
    other = attrs.evolve(sent, metadata={**sent.metadata, "other": True})

    async def send(doc: Run) -> object:
        return await k.b.transitions.commit_unclaimed(
            owner, run.checkpoint_seq, unclaimed(doc, wake=wake), ()
        )

    results = await k.gather_barrier(lambda: send(sent), lambda: send(other))
    landed = [r for r in results if isinstance(r, Run)]
    k.eq(len(landed), 1, f"exactly one of two racing sends lands: {results}")
    k.eq(
        sorted(type(r).__name__ for r in results),
        ["Run", "StaleCheckpoint"],
        "the other is fenced out",
    )
    before = await k.snapshot(owner, run.id)
    k.eq(k.isa(before.info, RunInfo, "inspect_run").run, landed[0], "the one that landed")
    again = await k.b.transitions.commit_unclaimed(
        owner, run.checkpoint_seq, unclaimed(other, wake=wake), ()
    )
    k.isa(again, StaleCheckpoint, "a send fenced on a checkpoint that moved on")
    await k.unchanged(owner, run.id, before, "a stale send")
