"""Reopening a failed run: an operator's retry, as a pure function of the committed run.

A failed run keeps its channels, step, ``changed_channels`` and ``pending_nodes`` exactly
as they were when its superstep failed, and a node failure also keeps the pending writes
of the siblings that finished beside the failing node
(:func:`docket.core.finish.superstep_failure`). Reopening makes it ``running`` again with
an immediate wake and those writes still pending; the worker that claims it plans afresh
the nodes of the failed superstep that have no pending write (:func:`docket.core.plan.plan`),
with the same task ids at attempt 1: each gets a fresh attempt budget. The finished
siblings do not run again; their writes commit at the barrier with the retried nodes'.
Nothing committed in earlier supersteps is touched either (docs/execution.md, "Retrying
a failed run").

The moment reuses checkpoint type ``retry_scheduled`` (the stores' schemas list the
checkpoint types; a retry of the superstep is what it schedules) and records one
``run_retried`` event with the operator's reason and the failure it clears.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import attrs

from docket.core.errors import InvalidInput, NotRetryable, TerminalRun, UnusableRun
from docket.core.moment import Entry, Moment, Park, ParkReason, propose
from docket.proposals import Immediate
from docket.records import CheckpointType, EventType, Run, RunStatus, converter
from docket.values import JSONDict

__all__ = ["MAX_REASON_CHARS", "check_reason", "reopen_failed_run"]

#: The longest reason an operator may record (it is stored in an event payload).
MAX_REASON_CHARS: Final = 2000


def check_reason(reason: object) -> InvalidInput | None:
    """``None`` when ``reason`` is ``None`` or a non-blank string of at most
    :data:`MAX_REASON_CHARS` characters; otherwise why not."""
    if reason is None:
        return None
    if not isinstance(reason, str) or not reason.strip():
        problem = "the retry reason must be a non-blank string"
    elif len(reason) > MAX_REASON_CHARS:
        problem = f"the retry reason is longer than {MAX_REASON_CHARS} characters"
    elif "\x00" in reason or any(0xD800 <= ord(c) <= 0xDFFF for c in reason):
        problem = "the retry reason holds a NUL character or a lone surrogate"
    else:
        return None
    return InvalidInput(problem, phase="retry", details={"reasons": [problem]})


def reopen_failed_run(
    run: Run, *, reason: str | None, now: datetime
) -> Moment | TerminalRun | NotRetryable | UnusableRun | InvalidInput:
    """Reopen the failed ``run`` from its last committed checkpoint.

    Checked in order: the reason (``InvalidInput``), a done or cancelled run
    (``TerminalRun``), a run that is running or waiting (``NotRetryable``: say a second
    operator's retry, after the first already reopened it), never initialized
    (``UnusableRun``).
    """
    bad = check_reason(reason)
    if bad is not None:
        return bad
    if run.status in (RunStatus.DONE, RunStatus.CANCELLED):
        return TerminalRun(
            f"run {run.id!r} is {run.status} and cannot be retried",
            phase="retry",
            details={"status": str(run.status)},
        )
    if run.status is RunStatus.CREATED:
        return UnusableRun(f"run {run.id!r} was never initialized", phase="retry")
    if run.status is not RunStatus.FAILED or run.failure is None:
        return NotRetryable(
            f"run {run.id!r} is {run.status}, not failed: there is nothing to retry "
            "(was it retried already?)",
            phase="retry",
            details={"status": str(run.status)},
        )
    if run.failure.code == "deadline_exceeded":  # it would only fail again at once
        return NotRetryable(
            f"run {run.id!r} passed its deadline; retrying it cannot help — start a new run",
            phase="retry",
            details={"status": str(run.status), "failure": run.failure.code},
        )
    cleared: JSONDict = converter.unstructure(run.failure)
    reopened = attrs.evolve(
        run,
        status=RunStatus.RUNNING,
        failure=None,
        finished_at=None,
        updated_at=now,
        # already empty on a failed run; stated so a reopen never resumes a stale attempt
        # (the kept pending writes stay: they are what spares the finished siblings)
        active_tasks={},
        timers={},
    )
    entry = Entry(
        type=EventType.RUN_RETRIED,
        step=run.step,
        node_id=run.failure.node_id,
        payload={"reason": reason, "failure": cleared},
    )
    return propose(
        reopened,
        CheckpointType.RETRY_SCHEDULED,
        [entry],
        Park(Immediate(), ParkReason.RUN_RETRIED),
        now,
    )
