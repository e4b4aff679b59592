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

from datetime import datetime
from typing import TypeAlias, assert_never

from docket.core.errors import GraphMismatch, InvalidPolicy, MapFailed, UnusableRun
from docket.core.finish import completion_moment, error_failure, failure_moment
from docket.core.init import check_graph
from docket.core.moment import Moment, NotDue, Terminated, Wait, ceil_ms
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
from docket.graph.compiler import RuntimeGraph
from docket.records import Run, RunFailure, RunStatus

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

    if run.active_tasks:
        due = [
            task
            for key, task in run.active_tasks.items()
            if (timer := run.timers.get(key)) is None or timer.fires_at <= now
        ]
        if not due:
            resume_at = min(t.fires_at for t in run.timers.values())
            return NotDue(run, resume_at, ceil_ms(resume_at - now))
        resumed = resumed_activations(rtg, run, due, limits)
        if isinstance(resumed, UnusableRun | InvalidPolicy):
            return failure_moment(run, error_failure(resumed), now)
        return Dispatch(run=run, activations=resumed, now=now, resumed=True)

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
