"""Settle: turn one dispatch's node outcomes into the next moment.

Each outcome is classified (by node id): a completion whose update is valid and an
interrupt whose request is valid become pending writes; a retryable failure with attempts
left becomes a retry; anything else is a permanent failure. Then the first rule that
applies picks the boundary:

1. a permanent failure fails the run, and nothing of the superstep commits (the finished
   results stay on the failed run as pending writes, for an operator's retry);
2. a retry parks the superstep: finished results wait as pending writes, each retrying task
   is parked with its next attempt and a backoff timer, the step does not advance;
3. parked attempts that were not due this time also park the superstep (no new failure);
4. otherwise the barrier commits the whole superstep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import assert_never

import attrs

from docket.core.barrier import commit_barrier
from docket.core.finish import AttemptFailure, node_failed_entry, superstep_failure
from docket.core.interrupts import duplicate_ids, request_from_interrupt
from docket.core.moment import Entry, Moment, Park, ParkReason, propose
from docket.core.outcomes import (
    AwaitingChild,
    Completed,
    Failed,
    Interrupted,
    TaskOutcome,
    format_reason,
)
from docket.core.plan import Activation, Dispatch, work_order
from docket.graph.compiler import RuntimeGraph
from docket.graph.reducers import RejectedUpdate, validate_update
from docket.proposals import At
from docket.records import (
    TASK_CHILD_RUNNING,
    TASK_RETRY_SCHEDULED,
    TIMER_CHILD,
    TIMER_RETRY,
    CheckpointType,
    EventType,
    PendingWrite,
    Run,
    TaskFailure,
    TaskState,
    TimerState,
    WriteKind,
    idempotency_key,
)
from docket.values import JSONDict

__all__ = ["settle"]


def _lost(activation: Activation) -> Failed:
    return Failed(
        task_id=activation.task_id,
        node_id=activation.node_id,
        attempt=activation.attempt,
        reason=format_reason("lost", "the executor reported no outcome for this attempt"),
        retryable=True,
    )


def settle(
    rtg: RuntimeGraph,
    dispatch: Dispatch,
    outcomes: Sequence[TaskOutcome],
    *,
    now: datetime,
    ids: Callable[[str], str],
) -> Moment:
    """The moment that follows running ``dispatch`` (one outcome per activation).

    ``now`` is the time after the nodes ran (never before ``dispatch.now``); ``ids``
    generates the ids of interrupts that do not name one.
    """
    run = dispatch.run
    now = max(now, dispatch.now)
    by_task = {o.task_id: o for o in outcomes}
    fields = rtg.field_rule_map
    inputs = rtg.input_ids

    writes: list[PendingWrite] = []
    retried: list[tuple[Activation, AttemptFailure]] = []
    permanent: list[AttemptFailure] = []
    awaiting: list[tuple[Activation, AwaitingChild]] = []

    def failure(
        activation: Activation, reason: str, failed: Failed | None = None
    ) -> AttemptFailure:
        return AttemptFailure(
            node_id=activation.node_id,
            task_id=activation.task_id,
            attempt=activation.attempt,
            reason=reason,
            error=None if failed is None else failed.error,
            details=None if failed is None else failed.details,
        )

    def write(activation: Activation, kind: WriteKind, value: JSONDict) -> PendingWrite:
        return PendingWrite(
            task_id=activation.task_id,
            node_id=activation.node_id,
            attempt=activation.attempt,
            kind=kind,
            value=value,
        )

    writes.extend(dispatch.settled)
    activations = sorted(dispatch.activations, key=lambda a: work_order(a.node_id, a.task_id))
    for activation in activations:
        outcome = by_task.get(activation.task_id) or _lost(activation)
        match outcome:
            case Completed(update=update):
                checked = validate_update(activation.node_id, update, fields, inputs)
                if isinstance(checked, RejectedUpdate):
                    reason = format_reason("invalid_state_update", "; ".join(checked.reasons))
                    permanent.append(failure(activation, reason))
                else:
                    writes.append(write(activation, WriteKind.UPDATE, dict(checked.values)))
            case Interrupted(interrupt=interrupt):
                request = request_from_interrupt(rtg, run, activation.node_id, interrupt)
                if isinstance(request, list):
                    reason = format_reason("invalid_interrupt", "; ".join(request))
                    permanent.append(failure(activation, reason))
                else:
                    writes.append(write(activation, WriteKind.INTERRUPT, dict(request)))
            case Failed(reason=reason, retryable=retryable):
                if retryable and activation.attempt < activation.retry.max_attempts:
                    retried.append((activation, failure(activation, reason, outcome)))
                else:
                    permanent.append(failure(activation, reason, outcome))
            case AwaitingChild():
                awaiting.append((activation, outcome))
            case _:
                assert_never(outcome)

    requests = [w for w in (*run.pending_writes, *writes) if w.kind is WriteKind.INTERRUPT]
    twice = duplicate_ids([w.value for w in requests])
    if twice:
        for pending in [w for w in writes if w.kind is WriteKind.INTERRUPT]:
            ident = pending.value.get("id")
            if isinstance(ident, str) and ident in twice:
                writes.remove(pending)
                reason = format_reason(
                    "invalid_interrupt", f"interrupt id {ident!r} is requested twice in one step"
                )
                permanent.append(
                    AttemptFailure(
                        node_id=pending.node_id,
                        task_id=pending.task_id,
                        attempt=pending.attempt,
                        reason=reason,
                    )
                )

    if permanent:
        permanent.sort(key=lambda f: work_order(f.node_id, f.task_id))
        return superstep_failure(run, [f for _, f in retried], permanent, now, writes)
    dispatched = {a.task_id for a in activations}
    if retried or awaiting or any(t not in dispatched for t in run.active_tasks):
        return _retry_park(run, dispatched, writes, retried, awaiting, now)
    return commit_barrier(
        rtg, run, [*run.pending_writes, *writes], now, ids, fields=fields, inputs=inputs
    )


def _write_order(write: PendingWrite) -> tuple[str, int]:
    return work_order(write.node_id, write.task_id)


def _retry_park(
    run: Run,
    dispatched: set[str],
    writes: Sequence[PendingWrite],
    retried: Sequence[tuple[Activation, AttemptFailure]],
    awaiting: Sequence[tuple[Activation, AwaitingChild]],
    now: datetime,
) -> Moment:
    tasks = {k: t for k, t in run.active_tasks.items() if k not in dispatched}
    timers = {k: t for k, t in run.timers.items() if k not in dispatched}
    started: list[Entry] = []
    for activation, waiting in awaiting:
        before = run.active_tasks.get(activation.task_id)
        known = before is not None and before.metadata.get("child_run_id") == waiting.child_run_id
        tasks[activation.task_id] = TaskState(
            task_id=activation.task_id,
            node_id=activation.node_id,
            step=activation.step,
            attempt=activation.attempt,
            status=TASK_CHILD_RUNNING,
            input_hash=activation.input_hash,
            idempotency_key=activation.idempotency_key,
            snapshot=activation.snapshot,
            source_versions=dict(activation.source_versions),
            started_at=before.started_at if known and before is not None else now,
            failures=activation.failures,
            metadata={"child_run_id": waiting.child_run_id},
        )
        timers[activation.task_id] = TimerState(kind=TIMER_CHILD, fires_at=waiting.check_at)
        if not known:
            started.append(
                Entry(
                    type=EventType.CHILD_STARTED,
                    step=activation.step,
                    node_id=activation.node_id,
                    task_id=activation.task_id,
                    payload={"child_run_id": waiting.child_run_id, "attempt": activation.attempt},
                )
            )
    for activation, failed in retried:
        attempt = activation.attempt + 1
        tasks[activation.task_id] = TaskState(
            task_id=activation.task_id,
            node_id=activation.node_id,
            step=activation.step,
            attempt=attempt,
            status=TASK_RETRY_SCHEDULED,
            input_hash=activation.input_hash,
            idempotency_key=idempotency_key(activation.task_id, attempt),
            snapshot=activation.snapshot,
            source_versions=dict(activation.source_versions),
            failures=(
                *activation.failures,
                TaskFailure(attempt=activation.attempt, reason=failed.reason),
            ),
        )
        fires_at = now + timedelta(milliseconds=activation.retry.backoff_ms)
        timers[activation.task_id] = TimerState(kind=TIMER_RETRY, fires_at=fires_at)
    new_writes = sorted(writes, key=_write_order)
    parked = attrs.evolve(
        run,
        active_tasks=dict(sorted(tasks.items())),
        timers=dict(sorted(timers.items())),
        pending_writes=tuple(sorted((*run.pending_writes, *new_writes), key=_write_order)),
        updated_at=now,
    )
    entries = [node_failed_entry(f, run.step, permanent=False) for _, f in retried]
    entries.extend(started)
    wake = At(min(t.fires_at for t in parked.timers.values()))
    retrying = any(t.kind == TIMER_RETRY for t in parked.timers.values())
    return propose(
        parked,
        CheckpointType.RETRY_SCHEDULED,
        entries,
        Park(wake, ParkReason.RETRY_BACKOFF if retrying else ParkReason.CHILD_RUNNING),
        now,
        new_writes=new_writes,
    )
