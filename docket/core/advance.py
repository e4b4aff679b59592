"""The decision table: what happens next to a committed run.

:func:`advance` answers with exactly one of

- a :class:`~docket.core.moment.Moment` to commit (completion, or a failure found while
  planning: superstep limit, invalid policy, a parked task whose node is gone);
- a :class:`~docket.core.plan.Dispatch`: node work to run, whose outcomes go to
  :func:`~docket.core.settle.settle`, which returns the moment;
- :class:`~docket.core.moment.Wait` (only an interrupt resolution can help),
  :class:`~docket.core.moment.NotDue` (a parked superstep with nothing due yet) or
  :class:`~docket.core.moment.Terminated` (nothing to do, ever);
- a typed error for a run that cannot be advanced (``created``, or pinned to another graph).

One boundary at a time: commit the moment before asking again.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypeAlias, assert_never

from docket.core.errors import GraphMismatch, InvalidPolicy, MapFailed, UnusableRun
from docket.core.finish import completion_moment, error_failure, failure_moment
from docket.core.init import check_graph
from docket.core.moment import Moment, NotDue, Terminated, Wait, ceil_ms
from docket.core.outcomes import Completed, Failed, TaskOutcome, format_reason
from docket.core.plan import (
    Blocked,
    Dispatch,
    HostLimits,
    OverLimit,
    Quiescent,
    Runnable,
    plan,
    planned_work,
    resumed_activations,
)
from docket.core.waits import MESSAGE_TIMEOUT, deadline_moment, deadline_of, past_deadline
from docket.graph.compiler import RuntimeGraph
from docket.records import (
    DEADLINE_KEY,
    TASK_SLEEPING,
    TASK_WAITING_MESSAGE,
    Run,
    RunFailure,
    RunStatus,
    TaskState,
)
from docket.values import JSONDict

__all__ = ["Step", "advance"]

Step: TypeAlias = Moment | Dispatch | Wait | NotDue | Terminated

_DEFAULT_LIMITS = HostLimits()


def advance(
    rtg: RuntimeGraph,
    run: Run,
    *,
    now: datetime,
    limits: HostLimits = _DEFAULT_LIMITS,
    resume_floor: datetime | None = None,
) -> Step | UnusableRun | GraphMismatch:
    """Decide the next boundary of ``run`` at ``now`` (floored by ``resume_floor``: a driver
    passes the timer deadline it already waited for, so it counts as due)."""
    if resume_floor is not None and resume_floor > now:
        now = resume_floor
    if run.status is RunStatus.CREATED:
        return UnusableRun("the run must be initialized before it can advance", phase="plan")
    mismatch = check_graph(rtg, run)
    if mismatch is not None:
        return mismatch
    if run.status.terminal:
        return Terminated(run)
    if DEADLINE_KEY in run.metadata and past_deadline(run, now):
        return deadline_moment(run, now)

    if run.active_tasks:
        return _resume(rtg, run, now, limits)

    planned = plan(rtg, run, limits)
    match planned:
        case UnusableRun() as invalid:
            return failure_moment(run, error_failure(invalid), now)
        case Quiescent():
            return completion_moment(rtg, run, now)
        case Blocked(interrupt_ids=waiting):
            return Wait(run, waiting)
        case OverLimit(limit=limit):
            failure = RunFailure(
                code="max_supersteps_exceeded",
                message=f"run exceeded the superstep limit of {limit}",
                details={"limit": limit},
            )
            return failure_moment(run, failure, now)
        case Runnable(node_ids=node_ids):
            fresh = planned_work(rtg, run, node_ids, limits)
            if isinstance(fresh, InvalidPolicy | MapFailed):
                return failure_moment(run, error_failure(fresh), now)
            activations, settled = fresh
            return Dispatch(
                run=run, activations=activations, now=now, resumed=False, settled=settled
            )
        case _:
            assert_never(planned)


def _resume(
    rtg: RuntimeGraph, run: Run, now: datetime, limits: HostLimits
) -> Step | UnusableRun | GraphMismatch:
    """The parked superstep: attempts due to run again, and those the core settles itself
    (a sleep that ended, a message wait that gave up)."""
    due: list[TaskState] = []
    known: list[tuple[TaskState, TaskOutcome]] = []
    for key, task in run.active_tasks.items():
        timer = run.timers.get(key)
        fired = timer is None or timer.fires_at <= now
        if task.status == TASK_SLEEPING:
            if fired:
                update = task.metadata.get("update")
                known.append((task, _completed(task, update if isinstance(update, dict) else {})))
        elif task.status == TASK_WAITING_MESSAGE:
            if timer is not None and fired:
                known.append((task, _gave_up(task)))
        elif fired:
            due.append(task)
    if not due and not known:
        if run.timers:
            resume_at = min(t.fires_at for t in run.timers.values())
        else:  # only messages are awaited: a delivery makes the run due, not a time
            resume_at = deadline_of(run) or now + _IDLE_RECHECK
        return NotDue(run, resume_at, ceil_ms(resume_at - now))
    resumed = resumed_activations(rtg, run, due, limits)
    if isinstance(resumed, UnusableRun | InvalidPolicy):
        return failure_moment(run, error_failure(resumed), now)
    settled = resumed_activations(rtg, run, [t for t, _ in known], limits)
    if isinstance(settled, UnusableRun | InvalidPolicy):
        return failure_moment(run, error_failure(settled), now)
    decided = tuple(zip(settled, (o for _, o in known), strict=True))
    return Dispatch(run=run, activations=resumed, now=now, resumed=True, decided=decided)


#: When a run claimed while it only waits for messages (a race with a delivery) is looked
#: at again: a delivery makes it due at once anyway, so this is only a safety net.
_IDLE_RECHECK = timedelta(hours=1)


def _completed(task: TaskState, update: JSONDict) -> Completed:
    return Completed(
        task_id=task.task_id, node_id=task.node_id, attempt=task.attempt, update=update
    )


def _gave_up(task: TaskState) -> TaskOutcome:
    """A message wait's timeout: its ``on_timeout`` update, else a permanent failure."""
    late = task.metadata.get("on_timeout")
    if isinstance(late, dict):
        return _completed(task, late)
    topic = task.metadata.get("topic")
    return Failed(
        task_id=task.task_id,
        node_id=task.node_id,
        attempt=task.attempt,
        reason=format_reason(MESSAGE_TIMEOUT, f"no message on topic {topic!r} in time"),
        retryable=False,
    )
