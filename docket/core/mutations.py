"""Run mutations: the two outside signals, as pure functions of the committed run.

Both take an explicit ``now`` and are deterministic, so a signal loop may evaluate them
again after losing a race. :func:`resolve_interrupt` writes the answer through the resume
field's reducer (the interrupted node is its writer) and makes the run runnable again;
the node itself re-runs at the next fresh plan, with the answer in its snapshot.
:func:`cancel_run` ends the run; node code already in flight is not stopped, its commit
simply loses the checkpoint fence.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import attrs

from docket.core.errors import (
    AlreadyResolved,
    GraphMismatch,
    InterruptNotFound,
    InvalidInput,
    TerminalRun,
    UnusableRun,
)
from docket.core.init import check_graph
from docket.core.interrupts import resume_field_problem
from docket.core.moment import Entry, Moment, Park, ParkReason, Unchanged, propose
from docket.core.state import committed_fields
from docket.graph.compiler import RuntimeGraph
from docket.graph.reducers import StepRejected, commit_step
from docket.graph.schema import schema_from_json, validate
from docket.proposals import At, Immediate, Terminal
from docket.records import (
    ChannelState,
    CheckpointType,
    EventType,
    InterruptStatus,
    Run,
    RunStatus,
)
from docket.values import JSONValue, NonDurableValue, coerce_durable

__all__ = ["cancel_run", "resolve_interrupt"]


def _inactive(run: Run, action: str) -> TerminalRun:
    return TerminalRun(
        f"run {run.id!r} is {run.status} and cannot be {action}",
        phase="resolve" if action == "resumed" else "cancel",
        details={"status": str(run.status)},
    )


def _uninitialized(run: Run) -> UnusableRun:
    return UnusableRun(f"run {run.id!r} was never initialized", details={"status": str(run.status)})


def resolve_interrupt(
    rtg: RuntimeGraph, run: Run, interrupt_id: str, value: object, *, now: datetime
) -> (
    Moment
    | TerminalRun
    | UnusableRun
    | GraphMismatch
    | AlreadyResolved
    | InterruptNotFound
    | InvalidInput
):
    """Answer the open interrupt ``interrupt_id`` of ``run`` with ``value``.

    Checked in order: terminal run (``TerminalRun``), never initialized (``UnusableRun``),
    other graph (``GraphMismatch``), already resolved (``AlreadyResolved``), unknown id
    (``InterruptNotFound``), then the value: durable, valid for the interrupt's schema, and a valid
    write of the resume field (``InvalidInput`` with ``details["reasons"]``).
    """
    if run.status.terminal:
        return _inactive(run, "resumed")
    if run.status is RunStatus.CREATED:
        return _uninitialized(run)
    mismatch = check_graph(rtg, run)
    if mismatch is not None:
        return mismatch
    interrupt = run.interrupts.get(interrupt_id)
    if interrupt is not None and interrupt.status is InterruptStatus.RESOLVED:
        return AlreadyResolved(
            f"interrupt {interrupt_id!r} is already resolved",
            phase="resolve",
            node_id=interrupt.node_id,
            details={"interrupt_id": interrupt_id},
        )
    if interrupt is None:
        return InterruptNotFound(
            f"run {run.id!r} has no interrupt {interrupt_id!r}",
            phase="resolve",
            details={"interrupt_id": interrupt_id},
        )
    try:
        answer = coerce_durable(value, "value")
    except NonDurableValue as exc:
        return InvalidInput(
            "the resolution value is not durable",
            phase="resolve",
            details={"reasons": list(exc.reasons)},
        )
    reasons: list[JSONValue] = []
    if interrupt.schema is not None:
        try:
            reasons.extend(validate(schema_from_json(interrupt.schema), answer))
        except ValueError as exc:
            return UnusableRun(
                f"interrupt {interrupt_id!r} carries a malformed schema: {exc}", phase="resolve"
            )
    if reasons:
        return InvalidInput(
            "the resolution value is invalid",
            phase="resolve",
            node_id=interrupt.node_id,
            details={"reasons": reasons},
        )
    field = interrupt.resume_channel
    problem = resume_field_problem(rtg, field)
    if problem is not None:
        return UnusableRun(problem, phase="resolve", node_id=interrupt.node_id)
    written = commit_step(
        rtg.field_rule_map,
        rtg.input_ids,
        committed_fields(rtg, run.channels),
        {interrupt.node_id: {field: answer}},
    )
    if isinstance(written, StepRejected):
        return InvalidInput(
            "the resolution value is not a valid write of the resume field",
            phase="resolve",
            node_id=interrupt.node_id,
            details={"reasons": [r for rs in written.errors.values() for r in rs]},
        )

    channel_id = f"state:{field}"
    previous = run.channels.get(channel_id)
    channels = dict(run.channels)
    channels[channel_id] = ChannelState(
        channel_id=channel_id,
        value=written.values[field],
        version=1 if previous is None else previous.version + 1,
    )
    interrupts = dict(run.interrupts)
    interrupts[interrupt_id] = attrs.evolve(
        interrupt, status=InterruptStatus.RESOLVED, resolved_at=now
    )
    resolved = attrs.evolve(
        run,
        status=RunStatus.RUNNING,
        interrupts=interrupts,
        changed_channels=run.changed_channels | {channel_id},
        updated_at=now,
    )
    entries = [
        Entry(
            type=EventType.INTERRUPT_RESOLVED,
            step=run.step,
            node_id=interrupt.node_id,
            payload={"interrupt_id": interrupt_id, "resume_channel": field},
        ),
        Entry(
            type=EventType.CHANNEL_UPDATED,
            step=run.step,
            channel_id=channel_id,
            payload={"writers": [interrupt.node_id]},
        ),
    ]
    timers: Mapping[str, datetime] = {
        k: t.fires_at for k, t in run.timers.items() if k in run.active_tasks
    }
    due_now = not run.active_tasks or any(
        k not in timers or timers[k] <= now for k in run.active_tasks
    )
    wake = Immediate() if due_now else At(min(timers.values()))
    return propose(
        resolved,
        CheckpointType.INTERRUPT_RESOLVED,
        entries,
        Park(wake, ParkReason.INTERRUPT_RESOLVED),
        now,
        changes={"channels": channels},  # the history entry diffs them against run's
    )


def cancel_run(run: Run, *, now: datetime) -> Moment | Unchanged | TerminalRun | UnusableRun:
    """Cancel ``run``: a cancelled run is returned unchanged (no sequence consumed); a done
    or failed one is ``TerminalRun``; the active superstep, if any, is discarded."""
    if run.status is RunStatus.CANCELLED:
        return Unchanged(run)
    if run.status.terminal:
        return _inactive(run, "cancelled")
    if run.status is RunStatus.CREATED:
        return _uninitialized(run)
    cancelled = attrs.evolve(
        run,
        status=RunStatus.CANCELLED,
        finished_at=now,
        updated_at=now,
        active_tasks={},
        pending_writes=(),
        timers={},
    )
    entry = Entry(type=EventType.RUN_CANCELLED, step=run.step)
    return propose(
        cancelled,
        CheckpointType.RUN_CANCELLED,
        [entry],
        Park(Terminal(), ParkReason.RUN_CANCELLED),
        now,
    )
