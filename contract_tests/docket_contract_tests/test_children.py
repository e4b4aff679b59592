"""Child runs (the optional ``child_runs`` feature): CHILD-PARK-ROUNDTRIP,
CHILD-HANDOFF-UNCLAIMED, CHILD-HANDOFF-RACE, CHILD-START-IDEMPOTENT.

A parent whose child node asks for a child run parks: its task is ``child_running``
(``metadata.child_run_id``, ``started_at``) with a ``child`` timer, committed claimed and
released to the timer. The child's end is handed to the parent with ``commit_unclaimed``
fenced on the parent's checkpoint, whatever moment it makes: a re-park while another
child runs, the superstep's barrier, or the parent's failure. The child itself is an
``initialize`` (or, where the store has ``ClaimedStarts``, ``initialize_claimed`` by the
worker that parked the parent) of a derived id in the parent's owner scope, which two
workers may send.
The documents are built by the real core (:mod:`docket_contract_tests.children`), so the
cases check the shapes the runtime sends. Without the feature the cases are skipped.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from docket.contract import (
    ClaimLost,
    Conflict,
    NotFound,
    RunListQuery,
    StaleCheckpoint,
)
from docket.contract.capabilities import Feature
from docket.contract.protocols import ClaimedRuns, ClaimedStarts
from docket.core.advance import advance
from docket.core.children import ParentLink
from docket.core.moment import Moment
from docket.core.outcomes import AwaitingChild
from docket.core.plan import Dispatch
from docket.core.proposals import claimed_proposal
from docket.core.settle import settle
from docket.records import (
    SYSTEM,
    TASK_CHILD_RUNNING,
    TENANTLESS,
    TIMER_CHILD,
    CheckpointType,
    EventType,
    OwnerScope,
    Run,
    RunStatus,
    Scope,
    Tenant,
    run_to_json,
)
from docket_contract_tests.children import (
    LEFT_CHECK,
    RIGHT_CHECK,
    Family,
    Parked,
    child_start,
    completion,
    family,
    hand_off,
    park,
    signal,
)
from docket_contract_tests.fixtures import tid
from docket_contract_tests.kit import Kit, invariant

OWNERS = pytest.mark.parametrize(
    "owner", [TENANTLESS, Tenant("acme")], ids=["tenantless", "tenant"]
)
US = timedelta(microseconds=1)
FAR = timedelta(days=1)  # past every timer and wake of a case


def _children(k: Kit) -> None:
    if not k.declares(Feature.CHILD_RUNS):
        pytest.skip("the backend does not declare the optional child_runs feature")


async def _listed(k: Kit, scope: Scope, run_id: str) -> list[tuple[str, RunStatus]]:
    page = await k.b.runs.list_runs(scope, RunListQuery(limit=200))
    return [(s.id, s.status) for s in page.runs if s.id == run_id]


async def _commit_hand_off(k: Kit, fam: Family, expected: int, moment: Moment) -> Run:
    result = await k.b.transitions.commit_unclaimed(
        fam.owner, expected, signal(moment), moment.events
    )
    k.eq(k.isa(result, Run, f"hand-off ({moment.checkpoint_type})"), moment.run, "hand-off")
    return moment.run


async def _finish(k: Kit, fam: Family, barrier: Run) -> None:
    """Claim the parent due after its barrier and commit its completion (both results)."""
    now = max(await k.b.now(), k.at(1))  # the store stamped the immediate wake itself
    lease = await k.claim_one(now, barrier.id)
    k.eq(lease.checkpoint_seq, barrier.checkpoint_seq, "leased at the barrier's checkpoint")
    proposal, done = completion(fam, barrier, now, lease.claim_token)
    result = await k.b.transitions.commit_claimed(fam.owner, proposal, done.events)
    k.eq(k.isa(result, Run, "the parent's completion"), done.run, "the completed parent")
    k.eq((done.run.status, done.run.output), (RunStatus.DONE, {"left": 42, "right": 42}), "done")


@invariant("CHILD-PARK-ROUNDTRIP")
@OWNERS
async def test_a_parent_parked_on_children_reads_back_whole_and_wakes_at_the_child_timer(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    _children(k)
    fam = await family(k, owner)
    parked = await park(k, fam, k.t0)
    run_id = parked.run.id
    waiting = {
        side: (task.status, task.metadata, task.started_at)
        for side, task in ((s, parked.task(s)) for s in ("left", "right"))
    }
    k.eq(
        waiting,
        {s: (TASK_CHILD_RUNNING, {"child_run_id": parked.child_id(s)}, k.t0) for s in waiting},
        "the core parks both tasks on their children",
    )

    fetched = k.isa(await k.b.runs.fetch_run(owner, run_id), Run, "fetch_run of the parent")
    k.eq(fetched, parked.run, "fetch_run: the parked parent")
    k.eq(run_to_json(fetched), run_to_json(parked.run), "fetch_run: the same bytes")
    info = await k.info(owner, run_id)
    k.eq(info.run, parked.run, "inspect_run: the parked parent")
    k.eq(info.latest_checkpoint_type, CheckpointType.RETRY_SCHEDULED, "latest checkpoint type")
    k.eq((info.wake_at, info.claimed_at), (k.t0 + LEFT_CHECK, None), "released to the timer")
    k.eq(
        {key: (t.kind, t.fires_at) for key, t in info.run.timers.items()},
        {
            parked.task("left").task_id: (TIMER_CHILD, k.t0 + LEFT_CHECK),
            parked.task("right").task_id: (TIMER_CHILD, k.t0 + RIGHT_CHECK),
        },
        "the child timers",
    )
    for scope in (owner, SYSTEM):
        k.eq(await _listed(k, scope, run_id), [(run_id, RunStatus.RUNNING)], f"listed ({scope})")
    events = await k.events(owner, run_id)
    k.eq(events, parked.events, "the parent's events")
    started = [(e.node_id, e.payload) for e in events if e.type is EventType.CHILD_STARTED]
    k.eq(
        started,
        [(s, {"child_run_id": parked.child_id(s), "attempt": 1}) for s in ("left", "right")],
        "child_started events",
    )

    batch = await k.claim(k.t0 + LEFT_CHECK - US, limit=10)
    k.eq(batch.leases, (), "not due before the first child timer")
    lease = await k.claim_one(k.t0 + LEFT_CHECK, run_id)
    k.eq(lease.checkpoint_seq, parked.run.checkpoint_seq, "leased at the park's checkpoint")
    if isinstance(k.b.runs, ClaimedRuns):
        handed = await k.b.runs.claimed_run(owner, run_id, lease.claim_token)
        k.check(handed is None or handed == parked.run, f"claimed_run: the parked parent, {handed}")
    again = k.isa(await k.b.runs.fetch_run(owner, run_id), Run, "fetch_run after the claim")
    k.eq(run_to_json(again), run_to_json(parked.run), "fetch_run after the claim: same bytes")


@invariant("CHILD-HANDOFF-UNCLAIMED")
@OWNERS
async def test_a_hand_off_reparks_then_commits_the_barrier(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    _children(k)
    fam = await family(k, owner)
    parked = await park(k, fam, k.t0)
    run_id = parked.run.id

    reparked = hand_off(fam, parked.run, parked, "left", RunStatus.DONE, k.at(1))
    k.eq(reparked.checkpoint_type, CheckpointType.RETRY_SCHEDULED, "the core re-parks")
    await _commit_hand_off(k, fam, parked.run.checkpoint_seq, reparked)
    info = await k.info(owner, run_id)
    k.eq(info.run, reparked.run, "the re-parked parent")
    k.eq(info.latest_checkpoint_type, CheckpointType.RETRY_SCHEDULED, "latest checkpoint type")
    k.eq((info.wake_at, info.claimed_at), (k.t0 + RIGHT_CHECK, None), "due at the other timer")
    k.eq(
        [t.status for t in info.run.active_tasks.values()],
        [TASK_CHILD_RUNNING],
        "the other child still runs",
    )
    batch = await k.claim(k.t0 + RIGHT_CHECK - US, limit=10)
    k.eq(batch.leases, (), "a re-parked parent is not due before its remaining timer")

    barrier = hand_off(fam, reparked.run, parked, "right", RunStatus.DONE, k.at(2))
    k.eq(barrier.checkpoint_type, CheckpointType.STEP_COMMITTED, "the core commits the barrier")
    await _commit_hand_off(k, fam, reparked.run.checkpoint_seq, barrier)
    info = await k.info(owner, run_id)
    k.eq(info.run, barrier.run, "the parent after its barrier")
    k.eq(info.latest_checkpoint_type, CheckpointType.STEP_COMMITTED, "latest checkpoint type")
    now = await k.b.now()
    k.check(
        info.wake_at is not None and info.wake_at <= now,
        f"after the barrier the parent is due at once: wake_at {info.wake_at}, now {now}",
    )
    k.eq(len(await k.events(owner, run_id)), barrier.run.event_seq, "every event, once")
    await _finish(k, fam, barrier.run)


@invariant("CHILD-HANDOFF-UNCLAIMED")
async def test_a_hand_off_that_fails_the_parent_leaves_it_terminal(docket_kit: Kit) -> None:
    k = docket_kit
    _children(k)
    fam = await family(k, TENANTLESS)
    parked = await park(k, fam, k.t0)
    failed = hand_off(fam, parked.run, parked, "left", RunStatus.CANCELLED, k.at(1))
    k.eq(
        (failed.checkpoint_type, failed.run.status),
        (CheckpointType.RUN_FAILED, RunStatus.FAILED),
        "a cancelled child fails the parent",
    )
    await _commit_hand_off(k, fam, parked.run.checkpoint_seq, failed)
    info = await k.info(TENANTLESS, parked.run.id)
    k.eq(info.run, failed.run, "the failed parent")
    k.eq(info.latest_checkpoint_type, CheckpointType.RUN_FAILED, "latest checkpoint type")
    k.eq((info.wake_at, info.claimed_at), (None, None), "a failed parent is never due")
    batch = await k.claim(k.t0 + FAR, limit=10)
    k.eq(batch.leases, (), "a failed parent is never claimed, not even past its timers")
    k.eq(await _listed(k, SYSTEM, failed.run.id), [(failed.run.id, RunStatus.FAILED)], "listed")


@invariant("CHILD-HANDOFF-UNCLAIMED")
async def test_a_hand_off_revokes_the_claim_of_a_worker_rechecking_the_parent(
    docket_kit: Kit,
) -> None:
    k = docket_kit
    _children(k)
    fam = await family(k, TENANTLESS)
    parked = await park(k, fam, k.t0)
    run_id = parked.run.id
    recheck_at = k.t0 + LEFT_CHECK
    lease = await k.claim_one(recheck_at, run_id)  # a worker rechecking the left child
    # what it will commit: the left child still runs, look again later
    dispatch = advance(fam.parent, parked.run, now=recheck_at)
    assert isinstance(dispatch, Dispatch), dispatch
    again = [
        AwaitingChild(
            task_id=a.task_id,
            node_id=a.node_id,
            attempt=a.attempt,
            child_run_id=parked.child_id(a.node_id),
            check_at=recheck_at + LEFT_CHECK,
        )
        for a in dispatch.activations
    ]
    k.eq([a.node_id for a in again], ["left"], "only the left child's timer is due")
    recheck = settle(fam.parent, dispatch, again, now=recheck_at, ids=lambda kind: kind)

    reparked = hand_off(fam, parked.run, parked, "left", RunStatus.DONE, recheck_at)
    await _commit_hand_off(k, fam, parked.run.checkpoint_seq, reparked)
    info = await k.info(TENANTLESS, run_id)
    k.eq((info.claimed_at, info.wake_at), (None, k.t0 + RIGHT_CHECK), "the claim is revoked")
    before = await k.snapshot(TENANTLESS, run_id)
    late = claimed_proposal(
        recheck, parked.run.checkpoint_seq, lease.claim_token, transition_id=tid()
    )
    k.isa(
        await k.b.transitions.commit_claimed(TENANTLESS, late, recheck.events),
        StaleCheckpoint,
        "the revoked worker's recheck commit",
    )
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run_id, lease.claim_token, recheck_at + US),
        ClaimLost,
        "the revoked worker's refresh",
    )
    await k.unchanged(TENANTLESS, run_id, before, "after the revoked worker's calls")


@invariant("CHILD-HANDOFF-RACE")
async def test_two_children_ending_together_hand_off_once_each(docket_kit: Kit) -> None:
    k = docket_kit
    _children(k)
    fam = await family(k, TENANTLESS)
    for round_ in range(max(k.rounds // 10, 3)):
        at = k.at(100 * round_)
        parked = await park(k, fam, at)
        seq = parked.run.checkpoint_seq
        moments = {
            side: hand_off(fam, parked.run, parked, side, RunStatus.DONE, at + US)
            for side in ("left", "right")
        }
        answers = await k.gather_barrier(
            *(
                lambda m=m, seq=seq: k.b.transitions.commit_unclaimed(
                    TENANTLESS, seq, signal(m), m.events
                )
                for m in moments.values()
            )
        )
        landed = {s: a for s, a in zip(moments, answers, strict=True) if isinstance(a, Run)}
        k.eq(len(landed), 1, f"round {round_}: exactly one hand-off lands, got {answers}")
        k.check(
            any(isinstance(a, StaleCheckpoint) for a in answers),
            f"round {round_}: the other hand-off is StaleCheckpoint, got {answers}",
        )
        (won,) = landed
        lost = "right" if won == "left" else "left"
        k.eq(landed[won], moments[won].run, f"round {round_}: the winner's run")
        info = await k.info(TENANTLESS, parked.run.id)
        k.eq(info.run, moments[won].run, f"round {round_}: the winner is stored")

        # the loser reads the parent again and delivers again: now it is the barrier
        latest = k.isa(await k.b.runs.fetch_run(TENANTLESS, parked.run.id), Run, "re-read")
        barrier = hand_off(fam, latest, parked, lost, RunStatus.DONE, at + 2 * US)
        k.eq(barrier.checkpoint_type, CheckpointType.STEP_COMMITTED, "the second is the barrier")
        await _commit_hand_off(k, fam, latest.checkpoint_seq, barrier)
        final = await k.info(TENANTLESS, parked.run.id)
        values = {s: final.run.channels[f"state:{s}"].value for s in ("left", "right")}
        k.eq(values, {"left": 42, "right": 42}, f"round {round_}: both results")
        k.eq(
            (final.run.active_tasks, final.run.pending_writes, final.run.timers),
            ({}, (), {}),
            f"round {round_}: nothing waits any more",
        )
        events = await k.events(TENANTLESS, parked.run.id)
        k.eq([e.seq for e in events], list(range(1, final.run.event_seq + 1)), "event seqs")
        completed = sorted(e.node_id or "" for e in events if e.type is EventType.NODE_COMPLETED)
        k.eq(completed, ["left", "right"], f"round {round_}: each child's result once")
        await _finish(k, fam, barrier.run)


@invariant("CHILD-START-IDEMPOTENT")
@OWNERS
async def test_a_child_starts_once_in_its_parents_scope(docket_kit: Kit, owner: OwnerScope) -> None:
    k = docket_kit
    _children(k)
    fam = await family(k, owner)
    parked: Parked = await park(k, fam, k.t0)
    ident = parked.child_id("left")
    first, started = child_start(fam, parked, "left", k.at(1))
    result = await k.b.transitions.initialize(owner, first, started.events)
    k.eq(k.isa(result, Run, "the child's start"), started.run, "the started child")
    link = ParentLink.of(k.isa(await k.b.runs.fetch_run(owner, ident), Run, "fetch the child"))
    k.eq(
        (link.run_id, link.task_id) if link else None,
        (parked.run.id, parked.task("left").task_id),
        "the child names its parent",
    )
    before = await k.snapshot(owner, ident)

    # a second worker starts the same child a moment later, under its own transition id
    second, other = child_start(fam, parked, "left", k.at(2))
    k.check(second.transition_id != first.transition_id, "two workers, two transition ids")
    k.isa(
        await k.b.transitions.initialize(owner, second, other.events),
        Conflict,
        "a second start of the child",
    )
    await k.unchanged(owner, ident, before, "after the second start")
    replay = await k.b.transitions.initialize(owner, first, started.events)
    k.eq(k.isa(replay, Run, "the first start re-sent"), started.run, "a re-sent start")
    await k.unchanged(owner, ident, before, "after the re-sent start")

    k.eq(await _listed(k, owner, ident), [(ident, RunStatus.RUNNING)], "listed in its scope")
    others = [Tenant(k.name("other"))] + ([TENANTLESS] if owner != TENANTLESS else [])
    for other_scope in others:
        k.isa(await k.b.runs.fetch_run(other_scope, ident), NotFound, f"fetch ({other_scope})")
        k.isa(await k.b.runs.inspect_run(other_scope, ident), NotFound, f"inspect ({other_scope})")
        k.isa(
            await k.b.events.fetch_latest_event(other_scope, ident),
            NotFound,
            f"latest event ({other_scope})",
        )
        k.eq(await _listed(k, other_scope, ident), [], f"not listed ({other_scope})")


@invariant("CHILD-START-IDEMPOTENT")
async def test_a_child_started_claimed_is_held_by_its_starter_and_starts_once(
    docket_kit: Kit,
) -> None:
    k = docket_kit
    _children(k)
    starts = k.b.transitions
    if not isinstance(starts, ClaimedStarts):  # the runtime then starts children unclaimed
        pytest.skip("the backend does not declare the optional ClaimedStarts member")
    fam = await family(k, TENANTLESS)
    parked = await park(k, fam, k.t0)
    ident = parked.child_id("right")
    # the worker that parked the parent starts the child in the slot it freed, claimed
    first, started = child_start(fam, parked, "right", k.at(1))
    result = await starts.initialize_claimed(TENANTLESS, first, started.events, "tok-starter")
    k.eq(k.isa(result, Run, "the child's claimed start"), started.run, "the started child")
    info = await k.info(TENANTLESS, ident)
    k.eq((info.claimed_at, info.wake_at), (first.wake_at, None), "held by its starter")
    before = await k.snapshot(TENANTLESS, ident)

    second, other = child_start(fam, parked, "right", k.at(2))
    k.isa(
        await starts.initialize_claimed(TENANTLESS, second, other.events, "tok-second"),
        Conflict,
        "a second worker's claimed start",
    )
    k.isa(
        await k.b.transitions.initialize(TENANTLESS, second, other.events),
        Conflict,
        "a second worker's plain start",
    )
    await k.unchanged(TENANTLESS, ident, before, "after the second starts")
    replay = await starts.initialize_claimed(TENANTLESS, first, started.events, "tok-starter")
    k.eq(k.isa(replay, Run, "the claimed start re-sent"), started.run, "a re-sent start")
    await k.unchanged(TENANTLESS, ident, before, "after the re-sent start")
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, ident, "tok-second", k.at(3)),
        ClaimLost,
        "the second worker holds nothing",
    )
