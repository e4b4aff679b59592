"""The pure core, moment by moment (runtime-spec §12, cases 39-43, 45, 46 and 52)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest

from docket.clock import ManualClock
from docket.contract.proposals import (
    At,
    External,
    Immediate,
    ReleaseClaim,
    RetainClaim,
    Terminal,
)
from docket.core import (
    AlreadyResolved,
    Continue,
    Dispatch,
    GraphMismatch,
    HostLimits,
    InterruptNotFound,
    InvalidInput,
    MalformedMoment,
    Moment,
    NotContinue,
    NotDue,
    Park,
    ParkReason,
    TerminalRun,
    Terminated,
    Unchanged,
    UnusableRun,
    Wait,
    advance,
    build_initial_run,
    cancel_run,
    claimed_proposal,
    init_proposal,
    initialize,
    resolve_interrupt,
    schedule_for,
    settle,
    unclaimed_proposal,
    yield_moment,
)
from docket.graph.compiler import RuntimeGraph
from docket.records import CheckpointType, EventType, Run, RunStatus, run_to_json
from docket.runtime.execute import execute
from docket.testing import DEFAULT_START, SequentialIds, run_inline
from tests.core import fixtures as fx
from tests.core.helpers import check_history

T0 = DEFAULT_START


def start(rtg: RuntimeGraph, given: dict[str, Any] | None = None, now: datetime = T0) -> Moment:
    moment = initialize(rtg, build_initial_run(rtg, given or {}, run_id="r", now=now), now=now)
    assert isinstance(moment, Moment)
    return moment


def next_moment(
    rtg: RuntimeGraph, run: Run, now: datetime = T0, floor: datetime | None = None
) -> Any:
    """advance, and when node work is needed, run it and settle (one boundary)."""
    step = advance(rtg, run, now=now, resume_floor=floor)
    if isinstance(step, Dispatch):
        outcomes = asyncio.run(execute(rtg, step.activations, clock=lambda: now))
        return settle(rtg, step, outcomes, now=now, ids=SequentialIds())
    return step


def test_initialize_proposes_the_first_moment() -> None:
    rtg = fx.runtime(fx.minimal_linear())
    moment = start(rtg, {"value": "x"})
    assert isinstance(moment.disposition, Continue)
    assert moment.run.checkpoint_seq == 1
    assert moment.proposed_at == T0
    assert [e.seq for e in moment.events] == [1, 2, 3, 4]
    assert moment.metadata["graph_step"] == 0
    assert moment.metadata["park_reason"] is None
    assert moment.metadata["wake_disposition"] == "continue"
    assert moment.metadata["active_superstep"] is None
    assert moment.metadata["node_attempts"] == []
    checkpoint = moment.checkpoint()
    assert (checkpoint.seq, checkpoint.created_at) == (1, T0)


def test_terminal_runs_have_nothing_to_propose() -> None:
    rtg = fx.runtime(fx.minimal_linear())
    done = run_inline(rtg, {"value": "x"}).run
    assert initialize(rtg, done, now=T0) == Terminated(done)
    assert advance(rtg, done, now=T0) == Terminated(done)


def test_advance_refuses_a_created_run_and_another_graph() -> None:
    rtg = fx.runtime(fx.minimal_linear())
    created = build_initial_run(rtg, {"value": "x"}, run_id="r", now=T0)
    assert isinstance(advance(rtg, created, now=T0), UnusableRun)
    running = start(rtg, {"value": "x"}).run
    other = fx.runtime(fx.simple_edge())
    assert isinstance(advance(other, running, now=T0), GraphMismatch)
    assert isinstance(initialize(other, running, now=T0), GraphMismatch)


def test_yield_rewrites_only_the_disposition() -> None:
    rtg = fx.runtime(fx.interrupt_with_parallel_work())
    barrier = next_moment(rtg, start(rtg).run)
    assert barrier.checkpoint_type is CheckpointType.INTERRUPT_REQUESTED
    assert isinstance(barrier.disposition, Continue)
    yielded = yield_moment(barrier)
    assert isinstance(yielded, Moment)
    assert yielded.disposition == Park(Immediate(), ParkReason.DRAIN_BUDGET)
    assert yielded.metadata["wake_disposition"] == "immediate"
    assert yielded.metadata["park_reason"] == "drain_budget"
    assert yielded.events[-1].metadata == yielded.metadata
    assert yielded.run == barrier.run
    assert yielded.checkpoint_type == barrier.checkpoint_type
    assert yielded.proposed_at == barrier.proposed_at
    assert yielded.events[:-1] == barrier.events[:-1]
    assert yielded.events[-1].seq == barrier.events[-1].seq
    assert {
        k: v for k, v in yielded.metadata.items() if k not in ("wake_disposition", "park_reason")
    } == {k: v for k, v in barrier.metadata.items() if k not in ("wake_disposition", "park_reason")}


def test_yield_refuses_parks_and_malformed_moments() -> None:
    rtg = fx.runtime(fx.retry_then_continue(backoff_ms=10))
    park = next_moment(rtg, start(rtg).run)
    assert isinstance(yield_moment(park), NotContinue)
    done_rtg = fx.runtime(fx.minimal_linear())
    completed = run_inline(done_rtg, {"value": "x"})
    terminal = next_moment(done_rtg, completed.checkpoints[1].run)
    assert isinstance(terminal.disposition, Park)
    assert isinstance(yield_moment(terminal), NotContinue)
    fresh = start(done_rtg, {"value": "x"})
    assert isinstance(yield_moment(attrs.evolve(fresh, events=fresh.events[:-1])), MalformedMoment)
    doubled = attrs.evolve(fresh, events=(*fresh.events, fresh.events[-1]))
    assert isinstance(yield_moment(doubled), MalformedMoment)
    other_envelope = attrs.evolve(fresh, metadata={**fresh.metadata, "graph_step": 7})
    assert isinstance(yield_moment(other_envelope), MalformedMoment)


@pytest.mark.parametrize("name", sorted(fx.FIXTURES))
def test_driving_moment_by_moment_equals_run_inline(name: str) -> None:
    factory, given, _ = fx.FIXTURES[name]
    rtg = fx.runtime(factory())
    expected = run_inline(rtg, given, max_supersteps=30, run_id="r")
    moment = start(rtg, given)
    moments = [moment]
    limits = HostLimits(max_supersteps=30)
    ids = SequentialIds()
    floor: datetime | None = None
    now = T0
    while isinstance(moment.disposition, Continue) or isinstance(moment.disposition.wake, At):
        if isinstance(moment.disposition, Park):
            assert isinstance(moment.disposition.wake, At)
            now = floor = moment.disposition.wake.wake_at
        step = advance(rtg, moment.run, now=now, resume_floor=floor, limits=limits)
        if isinstance(step, Dispatch):
            frozen = ManualClock(now)
            outcomes = asyncio.run(execute(rtg, step.activations, clock=frozen))
            step = settle(rtg, step, outcomes, now=now, ids=ids)
        if isinstance(step, Terminated | Wait):
            break
        assert isinstance(step, Moment), step
        moment = step
        moments.append(moment)
    checkpoints = [m.checkpoint() for m in moments]
    check_history(checkpoints)
    assert [c.type for c in checkpoints] == [c.type for c in expected.checkpoints]
    assert run_to_json(moments[-1].run) == run_to_json(expected.run)


def test_retry_moment_and_its_deadline() -> None:
    rtg = fx.runtime(fx.retry_then_continue(backoff_ms=60_000))
    park = next_moment(rtg, start(rtg).run)
    assert park.checkpoint_type is CheckpointType.RETRY_SCHEDULED
    assert park.run.status is RunStatus.RUNNING and park.run.step == 0
    deadline = T0 + timedelta(minutes=1)
    assert park.disposition == Park(At(deadline), ParkReason.RETRY_BACKOFF)
    task = "r:0:flaky"
    assert park.metadata["active_superstep"]["tasks"] == [
        {
            "task_id": task,
            "node_id": "flaky",
            "scheduled_attempt": 2,
            "idempotency_key": f"{task}:2",
        }
    ]
    assert park.metadata["node_attempts"] == [
        {
            "task_id": task,
            "node_id": "flaky",
            "attempted": 1,
            "outcome": "failed",
            "next_scheduled_attempt": 2,
        }
    ]
    early = advance(rtg, park.run, now=T0)
    assert early == NotDue(park.run, deadline, 60_000)
    assert advance(rtg, park.run, now=T0 + timedelta(seconds=59.9995)) == NotDue(
        park.run, deadline, 1
    )
    second = next_moment(rtg, park.run, now=T0, floor=deadline)
    assert second.checkpoint_type is CheckpointType.RETRY_SCHEDULED
    third = next_moment(rtg, second.run, now=T0, floor=deadline + timedelta(minutes=1))
    assert third.checkpoint_type is CheckpointType.STEP_COMMITTED
    assert isinstance(third.disposition, Continue)
    assert third.run.active_tasks == {} and third.run.timers == {}
    assert third.proposed_at == deadline + timedelta(minutes=1)


def test_waiting_barrier_then_wait() -> None:
    rtg = fx.runtime(fx.interrupt_review())
    barrier = next_moment(rtg, start(rtg).run)
    assert barrier.checkpoint_type is CheckpointType.INTERRUPT_REQUESTED
    assert barrier.run.status is RunStatus.WAITING
    assert barrier.disposition == Park(External(), ParkReason.AWAITING_INTERRUPTS)
    event = barrier.events[0]
    assert event.type is EventType.INTERRUPT_REQUESTED
    assert (event.task_id, event.payload["attempt"]) == ("r:0:gate", 1)
    assert advance(rtg, barrier.run, now=T0) == Wait(barrier.run, ("interrupt_0000000000000001",))


def _waiting() -> tuple[RuntimeGraph, Run]:
    rtg = fx.runtime(fx.interrupt_review())
    return rtg, next_moment(rtg, start(rtg).run).run


def test_resolve_interrupt_is_a_deterministic_moment() -> None:
    rtg, run = _waiting()
    (iid,) = run.interrupts
    first = resolve_interrupt(rtg, run, iid, "yes", now=T0)
    second = resolve_interrupt(rtg, run, iid, "yes", now=T0)
    assert isinstance(first, Moment)
    assert first == second
    assert first.disposition == Park(Immediate(), ParkReason.INTERRUPT_RESOLVED)
    assert [e.type for e in first.events] == [
        EventType.INTERRUPT_RESOLVED,
        EventType.CHANNEL_UPDATED,
        EventType.CHECKPOINT_COMMITTED,
    ]
    assert first.run.checkpoint_seq == run.checkpoint_seq + 1
    assert first.run.event_seq == run.event_seq + 3
    assert first.run.status is RunStatus.RUNNING
    assert "state:decision" in first.run.changed_channels
    assert first.run.changed_channels >= run.changed_channels


def test_resolve_interrupt_errors_in_order() -> None:
    rtg, run = _waiting()
    (iid,) = run.interrupts
    resolved = resolve_interrupt(rtg, run, iid, "yes", now=T0)
    assert isinstance(resolved, Moment)
    again = resolve_interrupt(rtg, resolved.run, iid, "yes", now=T0)
    missing = resolve_interrupt(rtg, resolved.run, "nope", "yes", now=T0)
    assert isinstance(again, AlreadyResolved) and isinstance(missing, InterruptNotFound)
    assert again.code != missing.code
    cancelled = cancel_run(run, now=T0)
    assert isinstance(cancelled, Moment)
    assert isinstance(resolve_interrupt(rtg, cancelled.run, "nope", "x", now=T0), TerminalRun)
    created = attrs.evolve(run, status=RunStatus.CREATED)
    assert isinstance(resolve_interrupt(rtg, created, iid, "x", now=T0), UnusableRun)
    assert isinstance(resolve_interrupt(rtg, run, iid, 42, now=T0), InvalidInput)
    assert isinstance(resolve_interrupt(rtg, run, iid, object(), now=T0), InvalidInput)
    assert isinstance(resolve_interrupt(rtg, run, iid, float("nan"), now=T0), InvalidInput)


def _parked_with_open_interrupt(backoff_ms: int) -> tuple[RuntimeGraph, Run]:
    from tests.core.test_retries import _gate_and_flaky

    rtg = fx.runtime(_gate_and_flaky())
    barrier = next_moment(rtg, start(rtg).run)
    park = next_moment(rtg, barrier.run)
    assert park.checkpoint_type is CheckpointType.RETRY_SCHEDULED
    assert backoff_ms == 1_000
    return rtg, park.run


def test_resolution_wake_follows_the_parked_timers() -> None:
    rtg, run = _parked_with_open_interrupt(1_000)
    (iid,) = run.interrupts
    (timer,) = run.timers.values()
    later = resolve_interrupt(rtg, run, iid, "ok", now=T0)
    assert isinstance(later, Moment)
    assert later.disposition == Park(At(timer.fires_at), ParkReason.INTERRUPT_RESOLVED)
    due = resolve_interrupt(rtg, run, iid, "ok", now=timer.fires_at)
    assert isinstance(due, Moment)
    assert due.disposition == Park(Immediate(), ParkReason.INTERRUPT_RESOLVED)
    untimed = attrs.evolve(run, timers={})
    no_timer = resolve_interrupt(rtg, untimed, iid, "ok", now=T0)
    assert isinstance(no_timer, Moment)
    assert isinstance(no_timer.disposition, Park)
    assert no_timer.disposition.wake == Immediate()


def test_cancel_run() -> None:
    _, waiting = _waiting()
    first = cancel_run(waiting, now=T0)
    assert first == cancel_run(waiting, now=T0)
    assert isinstance(first, Moment)
    assert first.run.status is RunStatus.CANCELLED
    assert first.run.finished_at == T0
    assert [e.type for e in first.events] == [
        EventType.RUN_CANCELLED,
        EventType.CHECKPOINT_COMMITTED,
    ]
    assert first.events[0].payload == {}
    assert first.disposition == Park(Terminal(), ParkReason.RUN_CANCELLED)
    assert cancel_run(first.run, now=T0) == Unchanged(first.run)
    _, parked = _parked_with_open_interrupt(1_000)
    absorbed = cancel_run(parked, now=T0)
    assert isinstance(absorbed, Moment)
    assert (absorbed.run.active_tasks, absorbed.run.pending_writes, absorbed.run.timers) == (
        {},
        (),
        {},
    )
    done = run_inline(fx.runtime(fx.minimal_linear()), {"value": "x"}).run
    assert isinstance(cancel_run(done, now=T0), TerminalRun)
    failed = run_inline(fx.runtime(fx.parallel_failure()), {}).run
    assert isinstance(cancel_run(failed, now=T0), TerminalRun)
    created = attrs.evolve(waiting, status=RunStatus.CREATED)
    assert isinstance(cancel_run(created, now=T0), UnusableRun)


@pytest.mark.parametrize(
    ("disposition", "claimed", "schedule"),
    [
        (Continue(), True, RetainClaim()),
        (Continue(), False, ReleaseClaim(Immediate())),
        (Park(Immediate(), ParkReason.DRAIN_BUDGET), True, ReleaseClaim(Immediate())),
        (Park(Immediate(), ParkReason.INTERRUPT_RESOLVED), False, ReleaseClaim(Immediate())),
        (Park(External(), ParkReason.AWAITING_INTERRUPTS), True, ReleaseClaim(External())),
        (Park(External(), ParkReason.AWAITING_INTERRUPTS), False, ReleaseClaim(External())),
        (Park(At(T0), ParkReason.RETRY_BACKOFF), True, ReleaseClaim(At(T0))),
        (Park(At(T0), ParkReason.RETRY_BACKOFF), False, ReleaseClaim(At(T0))),
        (Park(Terminal(), ParkReason.RUN_COMPLETED), True, ReleaseClaim(Terminal())),
        (Park(Terminal(), ParkReason.RUN_CANCELLED), False, ReleaseClaim(Terminal())),
    ],
)
def test_schedule_mapping(disposition: Any, claimed: bool, schedule: Any) -> None:
    assert schedule_for(disposition, claimed=claimed) == schedule


def test_proposals_carry_the_callers_transition_id() -> None:
    rtg = fx.runtime(fx.minimal_linear())
    init = start(rtg, {"value": "x"})
    proposal = init_proposal(init, transition_id="t-1")
    assert (proposal.transition_id, proposal.wake_at, proposal.run) == ("t-1", T0, init.run)
    barrier = next_moment(rtg, init.run)
    one = claimed_proposal(barrier, 1, "tok", transition_id="t-2")
    other = claimed_proposal(barrier, 1, "tok", transition_id="t-3")
    assert one.expected_checkpoint_seq == 1 and one.schedule == RetainClaim()
    assert one.transition_id != other.transition_id
    cancelled = cancel_run(barrier.run, now=T0)
    assert isinstance(cancelled, Moment)
    signal = unclaimed_proposal(cancelled, transition_id="t-4")
    assert signal.schedule == ReleaseClaim(Terminal())
    with pytest.raises(ValueError):
        init_proposal(cancelled, transition_id="t-5")
