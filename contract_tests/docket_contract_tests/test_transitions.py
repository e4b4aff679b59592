"""Transitions: TRANSITION-INITIALIZE-TENANCY, TRANSITION-INITIALIZE-REJECTIONS,
TRANSITION-CLAIMED-FENCES, TRANSITION-UNCLAIMED-CAS, TRANSITION-CLAIMED-TENANCY-IDENTITY,
TRANSITION-CLAIMED-SCHEDULES, TRANSITION-ID-REPLAY, BAD-INPUT-CHANGES-NOTHING (malformed
proposals, oversized batches, owners whose tenant id no store can hold)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest

from docket.contract import (
    At,
    ClaimedProposal,
    ClaimLost,
    ClaimRefreshed,
    Conflict,
    EventConflict,
    External,
    Immediate,
    InitProposal,
    InvalidGraph,
    InvalidTransition,
    NotFound,
    ReleaseClaim,
    RetainClaim,
    StaleCheckpoint,
    Terminal,
    TooLarge,
    UnclaimedProposal,
)
from docket.records import (
    TENANTLESS,
    CheckpointType,
    GraphRef,
    Run,
    RunFailure,
    RunStatus,
    Tenant,
)
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    commit_unclaimed_ok,
    event,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    junk,
    new_run,
    save_graph,
    seed,
    seed_claimed,
    successor,
    tid,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant

# -- initialize ---------------------------------------------------------------------------------


@invariant("TRANSITION-INITIALIZE-TENANCY")
async def test_initialize_stores_run_wake_and_events(docket_kit: Kit) -> None:
    k = docket_kit
    a, b = k.tenant("a"), k.tenant("b")
    ref = await save_graph(k, a)
    run = new_run(k.name("r"), ref, k.t0, event_seq=2)
    evs = events_for(run, k.t0, [1, 2])
    got = await k.b.transitions.initialize(a, init_proposal(run, k.at(5)), evs)
    k.eq(got, run, "initialize returns the proposed run")
    info = await k.info(a, run.id)
    k.eq(info.run, run, "stored document")
    k.eq(
        (info.wake_at, info.claimed_at, info.claim_attempts, info.claim_abandons),
        (k.at(5), None, 0, 0),
        "operational state: wake at the proposal's wake_at, no claim, counters 0",
    )
    k.eq((info.poisoned_at, info.poison_reason), (None, None), "not poisoned")
    k.eq(info.latest_checkpoint_type, CheckpointType.RUN_INITIALIZED, "latest checkpoint type")
    k.eq(info.tenant_id, a.id, "owner")
    k.eq(list(await k.events(a, run.id)), evs, "events 1..2 stored")
    # a different run under the same id: Conflict, nothing changes
    before = await k.snapshot(a, run.id)
    other = attrs.evolve(run, input={"different": True})
    got = await k.b.transitions.initialize(a, init_proposal(other, k.t0), evs)
    k.isa(got, Conflict, "same run id, different content")
    await k.unchanged(a, run.id, before, "after a conflicting initialize")
    # a graph version the owner never published: NotFound, nothing stored
    ghost_ref = GraphRef(ref.graph_id, "f" * 64)
    ghost = new_run(k.name("r2"), ghost_ref, k.t0)
    k.isa(
        await k.b.transitions.initialize(a, init_proposal(ghost, k.t0), []),
        NotFound,
        "initialize against a missing graph hash",
    )
    await k.absent(a, ghost.id, "after initialize against a missing graph")
    # the same id in tenant B is a different run (no cross-tenant oracle)
    await save_graph(k, b)
    got = await k.b.transitions.initialize(b, init_proposal(other, k.t0), evs)
    k.eq(got, other, "the same run id initializes in tenant B")
    await k.unchanged(a, run.id, before, "A's run after B's initialize")


def _status_run(run: Run, status: RunStatus) -> Run:
    """``run`` with ``status``, otherwise durable-valid (so the status rule decides)."""
    terminal = status.terminal
    return attrs.evolve(
        run,
        status=status,
        finished_at=run.started_at if terminal else None,
        output={"ok": True} if status is RunStatus.DONE else None,
        failure=RunFailure(code="x", message="y") if status is RunStatus.FAILED else None,
    )


INIT_REJECTIONS: dict[str, Callable[[InitProposal], Any]] = {
    "status-created": lambda p: attrs.evolve(p, run=_status_run(p.run, RunStatus.CREATED)),
    "status-waiting": lambda p: attrs.evolve(p, run=_status_run(p.run, RunStatus.WAITING)),
    "status-done": lambda p: attrs.evolve(p, run=_status_run(p.run, RunStatus.DONE)),
    "status-failed": lambda p: attrs.evolve(p, run=_status_run(p.run, RunStatus.FAILED)),
    "status-cancelled": lambda p: attrs.evolve(p, run=_status_run(p.run, RunStatus.CANCELLED)),
    "checkpoint-seq-0": lambda p: attrs.evolve(p, run=attrs.evolve(p.run, checkpoint_seq=0)),
    "checkpoint-type-step": lambda p: attrs.evolve(
        p, checkpoint_type=CheckpointType.STEP_COMMITTED
    ),
    "checkpoint-type-none": lambda p: attrs.evolve(p, checkpoint_type=junk(None)),
    "wake-at-none": lambda p: attrs.evolve(p, wake_at=junk(None)),
    "wake-at-naive": lambda p: attrs.evolve(p, wake_at=p.wake_at.replace(tzinfo=None)),
    "updated-at-none": lambda p: attrs.evolve(p, run=attrs.evolve(p.run, updated_at=junk(None))),
    "started-at-naive": lambda p: attrs.evolve(
        p, run=attrs.evolve(p.run, started_at=p.run.started_at.replace(tzinfo=None))
    ),
    "empty-run-id": lambda p: attrs.evolve(p, run=attrs.evolve(p.run, id="")),
    "non-durable-input": lambda p: attrs.evolve(
        p, run=attrs.evolve(p.run, input=junk({"s": {1, 2}}))
    ),
    "output-on-running": lambda p: attrs.evolve(p, run=attrs.evolve(p.run, output={"x": 1})),
    "transition-id-empty": lambda p: attrs.evolve(p, transition_id=""),
    "transition-id-none": lambda p: attrs.evolve(p, transition_id=junk(None)),
    "not-an-init-proposal": lambda p: claimed(p.run, "token"),
    "run-is-a-dict": lambda p: attrs.evolve(p, run=junk({"id": p.run.id})),
}


@invariant("TRANSITION-INITIALIZE-REJECTIONS")
@pytest.mark.parametrize("case", sorted(INIT_REJECTIONS))
async def test_initialize_rejections_store_nothing(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    run = new_run(k.name("r"), ref, k.t0)
    bad = INIT_REJECTIONS[case](init_proposal(run, k.t0))
    got = await k.b.transitions.initialize(TENANTLESS, bad, [])
    k.isa(got, InvalidTransition, f"initialize with {case}")
    await k.absent(TENANTLESS, run.id, f"after initialize with {case}")
    k.eq(await k.all_runs(), [], "no run at all")


@invariant("TRANSITION-INITIALIZE-REJECTIONS")
@pytest.mark.parametrize("events", ["none", "string", "generator", "dict"])
async def test_initialize_rejects_non_sequence_events(docket_kit: Kit, events: str) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    run = new_run(k.name("r"), ref, k.t0, event_seq=1)
    one = event(run.id, 1, k.t0)
    bogus: Any = {
        "none": None,
        "string": "e1",
        "generator": (e for e in [one]),
        "dict": {1: one},
    }[events]
    got = await k.b.transitions.initialize(TENANTLESS, init_proposal(run, k.t0), bogus)
    k.isa(got, InvalidTransition, f"initialize with events as {events}")
    await k.absent(TENANTLESS, run.id, f"after events as {events}")


# -- claimed commits ----------------------------------------------------------------------------


@invariant("TRANSITION-CLAIMED-FENCES")
async def test_claimed_fences(docket_kit: Kit) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS, events=1)
    e1 = event(run.id, 1, k.t0)
    nxt = successor(run, k.at(1), new_events=1)
    e2 = event(run.id, 2, k.at(1))
    before = await k.snapshot(TENANTLESS, run.id)
    # wrong token at the right sequence: stale, nothing stored
    got = await k.b.transitions.commit_claimed(TENANTLESS, claimed(nxt, "not-the-token"), [e2])
    k.isa(got, StaleCheckpoint, "wrong token at the right sequence")
    await k.unchanged(TENANTLESS, run.id, before, "after a wrong-token commit")
    # the fence is decided before events are compared: a stale commit whose re-sent
    # event 1 conflicts is StaleCheckpoint, not EventConflict
    clash = event(run.id, 1, k.t0, payload={"clash": True})
    got = await k.b.transitions.commit_claimed(
        TENANTLESS, claimed(nxt, "not-the-token"), [clash, e2]
    )
    k.isa(got, StaleCheckpoint, "a stale commit with a conflicting re-sent event")
    await k.unchanged(TENANTLESS, run.id, before, "after a stale, conflicting commit")
    k.isa(await k.b.events.fetch_event(TENANTLESS, run.id, 2), NotFound, "event 2 not stored")
    # immutable identity is checked before the fences
    rebound = attrs.evolve(nxt, graph_hash="e" * 64)
    got = await k.b.transitions.commit_claimed(TENANTLESS, claimed(rebound, "stale"), [e2])
    k.isa(got, InvalidTransition, "identity mismatch with a stale token")
    # a sequence skip is malformed, whatever is stored
    skip = attrs.evolve(nxt, checkpoint_seq=3)
    got = await k.b.transitions.commit_claimed(
        TENANTLESS, claimed(skip, lease.claim_token, expected=1), [e2]
    )
    k.isa(got, InvalidTransition, "checkpoint_seq != expected + 1")
    # a stale expected sequence with the right token
    behind = attrs.evolve(successor(run, k.at(1)), checkpoint_seq=1)
    got = await k.b.transitions.commit_claimed(
        TENANTLESS, claimed(behind, lease.claim_token, expected=0), []
    )
    k.isa(got, StaleCheckpoint, "expected checkpoint 0 while 1 is stored")
    await k.unchanged(TENANTLESS, run.id, before, "after the rejected commits")
    # the correct commit, re-sending the identical stored event 1
    await commit_claimed_ok(k, TENANTLESS, claimed(nxt, lease.claim_token), [e1, e2])
    k.eq(await k.b.events.fetch_latest_event(TENANTLESS, run.id), e2, "event 2 is the latest")
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run.id), nxt, "the committed run is stored")
    # another proposal for the fence that just moved on
    alternative = attrs.evolve(nxt, input={"other": 1})
    got = await k.b.transitions.commit_claimed(
        TENANTLESS, claimed(alternative, lease.claim_token), [e1, e2]
    )
    k.isa(got, StaleCheckpoint, "a different proposal at the consumed fence")
    info = await k.info(TENANTLESS, run.id)
    k.eq((info.run, info.run.checkpoint_seq), (nxt, 2), "the winner stays")


@invariant("TRANSITION-CLAIMED-TENANCY-IDENTITY")
async def test_claimed_lookup_and_identity(docket_kit: Kit) -> None:
    k = docket_kit
    a, b = k.tenant("a"), k.tenant("b")
    run = await seed(k, a)
    lease = await k.claim_one(k.t0, run.id)
    before = await k.snapshot(a, run.id)
    nxt = successor(run, k.at(1))
    ghost = attrs.evolve(nxt, id=k.name("ghost"))
    k.isa(
        await k.b.transitions.commit_claimed(a, claimed(ghost, lease.claim_token), []),
        NotFound,
        "well-formed commit for a ghost run",
    )
    k.isa(
        await k.b.transitions.commit_claimed(a, claimed(ghost, ""), []),
        InvalidTransition,
        "a malformed proposal (no token) is invalid before any lookup",
    )
    k.isa(
        await k.b.transitions.commit_claimed(b, claimed(nxt, lease.claim_token), []),
        NotFound,
        "commit in another tenant",
    )
    for field, value in (
        ("graph_id", k.name("other-graph")),
        ("graph_hash", "a" * 64),
        ("started_at", k.at(-1)),
    ):
        changed = attrs.evolve(nxt, **junk({field: value}))
        for token in ("wrong-token", lease.claim_token):
            got = await k.b.transitions.commit_claimed(a, claimed(changed, token), [])
            k.isa(got, InvalidTransition, f"{field} changed (token {token!r})")
    await k.unchanged(a, run.id, before, "after identity violations")
    await commit_claimed_ok(k, a, claimed(nxt, lease.claim_token))


SCHEDULES: dict[str, tuple[Any, RunStatus]] = {
    "retain": (RetainClaim(), RunStatus.RUNNING),
    "immediate": (ReleaseClaim(Immediate()), RunStatus.RUNNING),
    "at": (None, RunStatus.RUNNING),  # At(t0 + 1h), built per case
    "external": (ReleaseClaim(External()), RunStatus.WAITING),
    "terminal-done": (ReleaseClaim(Terminal()), RunStatus.DONE),
    "terminal-failed": (ReleaseClaim(Terminal()), RunStatus.FAILED),
    "terminal-cancelled": (ReleaseClaim(Terminal()), RunStatus.CANCELLED),
}


@invariant("TRANSITION-CLAIMED-SCHEDULES")
@pytest.mark.parametrize("name", list(SCHEDULES))
async def test_claimed_schedules(docket_kit: Kit, name: str) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS)
    schedule, status = SCHEDULES[name]
    if schedule is None:
        schedule = ReleaseClaim(At(k.at(3600)))
    if k.subject.clock is not None:
        k.subject.clock.advance(timedelta(seconds=5))
    nxt = successor(run, k.at(2), status=status, new_events=1)
    checkpoint = CheckpointType.RUN_COMPLETED if status.terminal else CheckpointType.STEP_COMMITTED
    before = await k.b.now()
    await commit_claimed_ok(
        k,
        TENANTLESS,
        claimed(nxt, lease.claim_token, schedule=schedule, checkpoint_type=checkpoint),
        [event(run.id, 1, k.at(2))],
    )
    after = await k.b.now()
    info = await k.info(TENANTLESS, run.id)
    k.eq((info.run.status, info.run.checkpoint_seq), (status, 2), "stored status and sequence")
    k.eq(info.latest_checkpoint_type, checkpoint, "latest checkpoint type")
    k.eq((info.claim_attempts, info.claim_abandons), (0, 0), "a commit resets the counters")
    refreshed = await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, after)
    if name == "retain":
        k.eq(info.wake_at, None, "retain: no wake")
        claimed_at = info.claimed_at
        k.check(
            claimed_at is not None and before <= claimed_at <= after,
            f"retain: claimed_at {claimed_at} is the backend's commit time ({before}..{after})",
        )
        k.check(
            claimed_at is not None and claimed_at >= lease.claimed_at,
            "retain: claimed_at moves forward",
        )
        k.isa(refreshed, ClaimRefreshed, "retain: the lease token still holds")
        return
    k.eq(info.claimed_at, None, f"{name}: the claim is released")
    k.isa(refreshed, ClaimLost, f"{name}: the lease token no longer holds")
    if name == "immediate":
        wake = info.wake_at
        k.check(
            wake is not None and before <= wake <= after,
            f"immediate: wake_at {wake} is the backend's commit time ({before}..{after})",
        )
    elif name == "at":
        k.eq(info.wake_at, k.at(3600), "at: wake_at is the scheduled time")
    else:
        k.eq(info.wake_at, None, f"{name}: no wake")
    if status.terminal:
        k.eq(info.run.finished_at, k.at(2), "terminal: finished_at stored")


@invariant("TRANSITION-CLAIMED-SCHEDULES")
@pytest.mark.parametrize("name", ["immediate", "at", "external", "terminal-done"])
async def test_unclaimed_schedules_revoke_the_claim(docket_kit: Kit, name: str) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS)
    schedule, status = SCHEDULES[name]
    wake = At(k.at(3600)) if schedule is None else schedule.wake
    before = await k.b.now()
    await commit_unclaimed_ok(
        k, TENANTLESS, unclaimed(successor(run, k.at(2), status=status), wake=wake)
    )
    after = await k.b.now()
    info = await k.info(TENANTLESS, run.id)
    k.eq(info.claimed_at, None, "a signal revokes the claim")
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, k.at(3)),
        ClaimLost,
        "the old holder lost the claim",
    )
    if name == "immediate":
        k.check(
            info.wake_at is not None and before <= info.wake_at <= after,
            f"immediate: wake_at {info.wake_at} is the backend clock",
        )
    elif name == "at":
        k.eq(info.wake_at, k.at(3600), "at: wake_at")
    else:
        k.eq(info.wake_at, None, f"{name}: no wake")


MISMATCHES: dict[str, tuple[str, Any, RunStatus]] = {
    "retain-waiting": ("claimed", RetainClaim(), RunStatus.WAITING),
    "retain-done": ("claimed", RetainClaim(), RunStatus.DONE),
    "immediate-waiting": ("claimed", ReleaseClaim(Immediate()), RunStatus.WAITING),
    "at-done": ("claimed", None, RunStatus.DONE),
    "external-running": ("claimed", ReleaseClaim(External()), RunStatus.RUNNING),
    "terminal-running": ("claimed", ReleaseClaim(Terminal()), RunStatus.RUNNING),
    "terminal-waiting": ("unclaimed", Terminal(), RunStatus.WAITING),
    "unclaimed-retain": ("unclaimed", RetainClaim(), RunStatus.RUNNING),
    "unclaimed-external-running": ("unclaimed", External(), RunStatus.RUNNING),
    "at-naive": ("claimed", "naive", RunStatus.RUNNING),
    "schedule-none": ("claimed", "none", RunStatus.RUNNING),
}


@invariant("TRANSITION-CLAIMED-SCHEDULES")
@pytest.mark.parametrize("case", sorted(MISMATCHES))
async def test_schedule_must_fit_status(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS)
    kind, schedule, status = MISMATCHES[case]
    if schedule is None:
        schedule = ReleaseClaim(At(k.at(60)))
    elif schedule == "naive":
        schedule = ReleaseClaim(At(k.at(60).replace(tzinfo=None)))
    elif schedule == "none":
        schedule = None
    nxt = successor(run, k.at(1), status=status)
    before = await k.snapshot(TENANTLESS, run.id)
    if kind == "claimed":
        proposal: Any = attrs.evolve(claimed(nxt, lease.claim_token), schedule=schedule)
        got = await k.b.transitions.commit_claimed(TENANTLESS, proposal, [])
    else:
        proposal = UnclaimedProposal(
            transition_id=tid(),
            run=nxt,
            checkpoint_type=CheckpointType.STEP_COMMITTED,
            schedule=junk(
                schedule if isinstance(schedule, RetainClaim) else ReleaseClaim(schedule)
            ),
        )
        got = await k.b.transitions.commit_unclaimed(TENANTLESS, 1, proposal, [])
    k.isa(got, InvalidTransition, f"{kind} commit with {case}")
    await k.unchanged(TENANTLESS, run.id, before, f"after {case}")


# -- unclaimed commits --------------------------------------------------------------------------


@invariant("TRANSITION-UNCLAIMED-CAS")
async def test_unclaimed_compare_and_set(docket_kit: Kit) -> None:
    k = docket_kit
    a, b = k.tenant("a"), k.tenant("b")
    run = await seed(k, a)
    lease = await k.claim_one(k.t0, run.id)
    # a signal on a claimed run succeeds and revokes the claim
    second = successor(run, k.at(1))
    await commit_unclaimed_ok(k, a, unclaimed(second))
    k.isa(
        await k.b.runs.refresh_claim(a, run.id, lease.claim_token, k.at(2)),
        ClaimLost,
        "the revoked holder cannot refresh",
    )
    holder = successor(run, k.at(1), input={"holder": True})
    k.isa(
        await k.b.transitions.commit_claimed(a, claimed(holder, lease.claim_token), []),
        StaleCheckpoint,
        "the revoked holder cannot commit",
    )
    before = await k.snapshot(a, run.id)
    # a stale alternative at the consumed sequence
    alternative = successor(run, k.at(1), input={"alt": True})
    k.isa(
        await k.b.transitions.commit_unclaimed(a, 1, unclaimed(alternative), []),
        StaleCheckpoint,
        "a different signal at the consumed sequence",
    )
    await k.unchanged(a, run.id, before, "after the stale alternative")
    # the next commit with event 1
    third = successor(second, k.at(2), new_events=1)
    e1 = event(run.id, 1, k.at(2))
    await commit_unclaimed_ok(k, a, unclaimed(third), [e1])
    before = await k.snapshot(a, run.id)
    fourth = successor(third, k.at(3), new_events=1)
    e2 = event(run.id, 2, k.at(3))
    k.isa(
        await k.b.transitions.commit_unclaimed(b, 3, unclaimed(fourth), [e2]),
        NotFound,
        "a signal from another tenant",
    )
    k.isa(await k.b.events.fetch_event(a, run.id, 2), NotFound, "its event is not stored")
    rebound = attrs.evolve(fourth, graph_hash="b" * 64)
    k.isa(
        await k.b.transitions.commit_unclaimed(a, 3, unclaimed(rebound), [e2]),
        InvalidTransition,
        "a rebound graph hash",
    )
    conflicting = event(run.id, 1, k.at(2), payload={"other": True})
    k.eq(
        await k.b.transitions.commit_unclaimed(a, 3, unclaimed(fourth), [conflicting, e2]),
        EventConflict(1),
        "a conflicting event 1 at the right sequence",
    )
    await k.unchanged(a, run.id, before, "the run stays at checkpoint 3")
    info = await k.info(a, run.id)
    k.eq(info.run.checkpoint_seq, 3, "checkpoint 3")
    k.eq(await k.b.events.fetch_latest_event(a, run.id), e1, "latest event unchanged")


@invariant("TRANSITION-UNCLAIMED-CAS")
@pytest.mark.parametrize("expected", ["negative", "string", "bool", "none"])
async def test_unclaimed_expected_sequence_must_be_a_count(docket_kit: Kit, expected: str) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    before = await k.snapshot(TENANTLESS, run.id)
    bogus: Any = {"negative": -1, "string": "1", "bool": True, "none": None}[expected]
    got = await k.b.transitions.commit_unclaimed(
        TENANTLESS, bogus, unclaimed(successor(run, k.at(1))), []
    )
    k.isa(got, InvalidTransition, f"expected_checkpoint_seq {bogus!r}")
    await k.unchanged(TENANTLESS, run.id, before, f"after expected {bogus!r}")


# -- transition ids -----------------------------------------------------------------------------


@invariant("TRANSITION-ID-REPLAY")
async def test_claimed_replay_returns_the_stored_run(docket_kit: Kit) -> None:
    k = docket_kit
    a = k.tenant("a")
    run = await seed(k, a, events=1)
    lease = await k.claim_one(k.t0, run.id)
    nxt = successor(run, k.at(1), new_events=2)
    evs = [event(run.id, 1, k.t0), event(run.id, 2, k.at(1)), event(run.id, 3, k.at(1))]
    proposal = claimed(nxt, lease.claim_token, schedule=ReleaseClaim(Immediate()))
    await commit_claimed_ok(k, a, proposal, evs)
    after_commit = await k.snapshot(a, run.id)
    # an identical replay (as after an ambiguous commit): the stored run, nothing changes,
    # even though the claim is gone now (replay is recognised before the fences)
    got = await k.b.transitions.commit_claimed(a, proposal, evs)
    k.eq(got, nxt, "identical replay answers the stored run")
    got = await k.b.transitions.commit_claimed(a, proposal, [evs[2], evs[1], evs[0], evs[1]])
    k.eq(got, nxt, "replay with the same events in another order / duplicated")
    await k.unchanged(a, run.id, after_commit, "after identical replays")
    # the same transition id with other content: Conflict
    for what, other, other_events in (
        ("run", attrs.evolve(proposal, run=attrs.evolve(nxt, input={"x": 2})), evs),
        ("events", proposal, [*evs[:2], event(run.id, 3, k.at(1), payload={"x": 3})]),
        ("schedule", attrs.evolve(proposal, schedule=ReleaseClaim(At(k.at(99)))), evs),
        ("token", attrs.evolve(proposal, claim_token="other-token"), evs),
    ):
        got = await k.b.transitions.commit_claimed(a, other, other_events)
        k.isa(got, Conflict, f"the transition id reused with different {what}")
        await k.unchanged(a, run.id, after_commit, f"after reusing the id with other {what}")
    # another tenant cannot use the id to learn anything
    k.isa(
        await k.b.transitions.commit_claimed(k.tenant("b"), proposal, evs),
        NotFound,
        "replay in another tenant",
    )
    # replay still answers after later commits
    later = successor(nxt, k.at(2))
    await commit_unclaimed_ok(k, a, unclaimed(later))
    got = await k.b.transitions.commit_claimed(a, proposal, evs)
    k.eq(got, await k.b.runs.fetch_run(a, run.id), "a replay after later commits")
    k.eq((await k.info(a, run.id)).run, later, "the later commit stays")


@invariant("TRANSITION-ID-REPLAY")
async def test_unclaimed_replay_returns_the_stored_run(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    nxt = successor(run, k.at(1), new_events=1)
    evs = [event(run.id, 1, k.at(1))]
    proposal = unclaimed(nxt, wake=At(k.at(30)))
    await commit_unclaimed_ok(k, TENANTLESS, proposal, evs)
    after_commit = await k.snapshot(TENANTLESS, run.id)
    got = await k.b.transitions.commit_unclaimed(TENANTLESS, 1, proposal, evs)
    k.eq(got, nxt, "identical unclaimed replay answers the stored run")
    await k.unchanged(TENANTLESS, run.id, after_commit, "after the replay")
    other = attrs.evolve(proposal, run=attrs.evolve(nxt, metadata={"m": 1}))
    k.isa(
        await k.b.transitions.commit_unclaimed(TENANTLESS, 1, other, evs),
        Conflict,
        "the same transition id with another run",
    )
    moved = attrs.evolve(proposal, schedule=ReleaseClaim(At(k.at(31))))
    k.isa(
        await k.b.transitions.commit_unclaimed(TENANTLESS, 1, moved, evs),
        Conflict,
        "the same transition id with another wake",
    )
    await k.unchanged(TENANTLESS, run.id, after_commit, "after the conflicting reuses")


@invariant("TRANSITION-ID-REPLAY")
async def test_initialize_replay(docket_kit: Kit) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    run = new_run(k.name("r"), ref, k.t0, event_seq=1)
    evs = [event(run.id, 1, k.t0)]
    proposal = init_proposal(run, k.at(10))
    k.eq(await k.b.transitions.initialize(TENANTLESS, proposal, evs), run, "first initialize")
    stored = await k.snapshot(TENANTLESS, run.id)
    k.eq(
        await k.b.transitions.initialize(TENANTLESS, proposal, evs),
        run,
        "an identical initialize replay answers the stored run",
    )
    for what, other, other_events in (
        ("same id, other content", attrs.evolve(proposal, run=attrs.evolve(run, input={})), evs),
        ("same content, other transition id", attrs.evolve(proposal, transition_id=tid()), evs),
        ("same id, other wake", attrs.evolve(proposal, wake_at=k.at(11)), evs),
        ("same id, other events", proposal, [event(run.id, 1, k.t0, payload={"x": 1})]),
    ):
        k.isa(await k.b.transitions.initialize(TENANTLESS, other, other_events), Conflict, what)
        await k.unchanged(TENANTLESS, run.id, stored, f"after {what}")


@invariant("TRANSITION-ID-REPLAY")
async def test_replay_of_a_rejected_proposal_is_not_a_replay(docket_kit: Kit) -> None:
    """Only committed transitions are remembered: a rejected one may be retried later."""
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS)
    nxt = successor(run, k.at(1))
    proposal = claimed(nxt, lease.claim_token)
    wrong = attrs.evolve(proposal, claim_token="nope")
    k.isa(
        await k.b.transitions.commit_claimed(TENANTLESS, wrong, []),
        StaleCheckpoint,
        "a wrong-token commit",
    )
    await commit_claimed_ok(k, TENANTLESS, attrs.evolve(wrong, claim_token=lease.claim_token))


# -- bad input ----------------------------------------------------------------------------------

BAD_CLAIMED: dict[str, Callable[[ClaimedProposal, list[Any]], tuple[Any, Any]]] = {
    "proposal-is-a-dict": lambda p, e: ({"run": p.run}, e),
    "proposal-is-unclaimed": lambda p, e: (unclaimed(p.run), e),
    "run-is-a-dict": lambda p, e: (attrs.evolve(p, run=junk({"id": p.run.id})), e),
    "events-is-a-string": lambda p, e: (p, "events"),
    "events-is-none": lambda p, e: (p, None),
    "events-holds-a-dict": lambda p, e: (p, [{"seq": 1}]),
    "event-of-another-run": lambda p, e: (p, [attrs.evolve(x, run_id=x.run_id + "-x") for x in e]),
    "event-seq-past-run": lambda p, e: (p, [*e, attrs.evolve(e[0], seq=e[0].seq + 1)]),
    "expected-negative": lambda p, e: (attrs.evolve(p, expected_checkpoint_seq=-1), e),
    "expected-string": lambda p, e: (attrs.evolve(p, expected_checkpoint_seq=junk("1")), e),
    "expected-bool": lambda p, e: (attrs.evolve(p, expected_checkpoint_seq=True), e),
    "token-empty": lambda p, e: (attrs.evolve(p, claim_token=""), e),
    "token-none": lambda p, e: (attrs.evolve(p, claim_token=junk(None)), e),
    "token-non-ascii": lambda p, e: (attrs.evolve(p, claim_token="jeton-\u00e9"), e),
    "token-too-long": lambda p, e: (attrs.evolve(p, claim_token="t" * 129), e),
    "checkpoint-type-string": lambda p, e: (
        attrs.evolve(p, checkpoint_type=junk("step_committed")),
        e,
    ),
    "transition-id-empty": lambda p, e: (attrs.evolve(p, transition_id=""), e),
    "transition-id-int": lambda p, e: (attrs.evolve(p, transition_id=junk(7)), e),
    "input-non-durable": lambda p, e: (
        attrs.evolve(p, run=attrs.evolve(p.run, input=junk({"t": (1, 2)}))),
        e,
    ),
    "updated-at-naive": lambda p, e: (
        attrs.evolve(p, run=attrs.evolve(p.run, updated_at=p.run.updated_at.replace(tzinfo=None))),
        e,
    ),
    "finished-at-on-running": lambda p, e: (
        attrs.evolve(p, run=attrs.evolve(p.run, finished_at=p.run.updated_at)),
        e,
    ),
}


@invariant("BAD-INPUT-CHANGES-NOTHING")
@pytest.mark.parametrize("case", sorted(BAD_CLAIMED))
async def test_bad_claimed_commit_changes_nothing(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS, events=1)
    nxt = successor(run, k.at(1), new_events=1)
    good = claimed(nxt, lease.claim_token)
    good_events = [event(run.id, 2, k.at(1))]
    proposal, evs = BAD_CLAIMED[case](good, good_events)
    before = await k.snapshot(TENANTLESS, run.id)
    got = await k.b.transitions.commit_claimed(TENANTLESS, proposal, evs)
    k.isa(got, InvalidTransition, f"commit_claimed with {case}")
    await k.unchanged(TENANTLESS, run.id, before, f"after {case}")
    k.eq(len(await k.all_runs()), 1, "no run appeared")
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, k.at(1)),
        ClaimRefreshed,
        "the claim still holds",
    )
    await commit_claimed_ok(k, TENANTLESS, good, good_events)


@invariant("BAD-INPUT-CHANGES-NOTHING")
async def test_oversized_batch_changes_nothing(docket_kit: Kit) -> None:
    k = docket_kit
    run, lease = await seed_claimed(k, TENANTLESS)
    limit = k.b.capabilities().limits.max_events_per_transition
    nxt = successor(run, k.at(1), new_events=limit + 1)
    before = await k.snapshot(TENANTLESS, run.id)
    evs = events_for(nxt, k.at(1), range(1, limit + 2), payload={})
    got = await k.b.transitions.commit_claimed(TENANTLESS, claimed(nxt, lease.claim_token), evs)
    k.isa(got, TooLarge, f"{limit + 1} events in one transition")
    await k.unchanged(TENANTLESS, run.id, before, "after an oversized batch")


@invariant("BAD-INPUT-CHANGES-NOTHING")
async def test_malformed_ghost_proposals_are_invalid_not_missing(docket_kit: Kit) -> None:
    """Validation precedes lookup: a malformed proposal for a ghost run is invalid."""
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    ghost = new_run(k.name("ghost"), ref, k.t0, checkpoint_seq=2)
    bad_claimed = claimed(ghost, "", expected=1)
    k.isa(
        await k.b.transitions.commit_claimed(TENANTLESS, bad_claimed, []),
        InvalidTransition,
        "claimed, no token, ghost run",
    )
    bad_unclaimed = unclaimed(attrs.evolve(ghost, status=RunStatus.WAITING), wake=Immediate())
    k.isa(
        await k.b.transitions.commit_unclaimed(TENANTLESS, 1, bad_unclaimed, []),
        InvalidTransition,
        "unclaimed, immediate wake on a waiting run, ghost run",
    )
    k.isa(
        await k.b.transitions.commit_unclaimed(TENANTLESS, 1, unclaimed(ghost), []),
        NotFound,
        "a well-formed signal for a ghost run",
    )
    await k.absent(TENANTLESS, ghost.id, "no ghost appears")


@invariant("BAD-INPUT-CHANGES-NOTHING")
@pytest.mark.parametrize("tenant", ["nul", "surrogate"])
async def test_tenant_ids_must_be_text_every_store_holds(docket_kit: Kit, tenant: str) -> None:
    """A tenant id is an id: no NUL, no lone surrogate. Every write refuses such an owner
    before any lookup, and stores nothing."""
    k = docket_kit
    owner = Tenant({"nul": "a\x00b", "surrogate": "t\ud800"}[tenant])
    document = graph_document(k.name("g"))
    k.isa(
        await k.b.graphs.save_graph(owner, graph_ref(document), document),
        InvalidGraph,
        f"save_graph as a {tenant} tenant",
    )
    ref = await save_graph(k, TENANTLESS)
    run = new_run(k.name("r"), ref, k.t0, event_seq=1)
    k.isa(
        await k.b.transitions.initialize(owner, init_proposal(run, k.t0), [event(run.id, 1, k.t0)]),
        InvalidTransition,
        f"initialize as a {tenant} tenant",
    )
    later = successor(run, k.at(1))
    k.isa(
        await k.b.transitions.commit_claimed(owner, claimed(later, "token-1"), []),
        InvalidTransition,
        f"commit_claimed as a {tenant} tenant",
    )
    k.isa(
        await k.b.transitions.commit_unclaimed(owner, 1, unclaimed(later), []),
        InvalidTransition,
        f"commit_unclaimed as a {tenant} tenant",
    )
    k.eq(await k.all_runs(), [], "no run appeared")
