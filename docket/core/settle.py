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

from collections.abc import Callable, Mapping, Sequence
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
    Receiving,
    Sleeping,
    TaskOutcome,
    format_reason,
)
from docket.core.plan import Activation, Dispatch, work_order
from docket.core.waits import deadline_moment, past_deadline, take_message
from docket.graph.compiler import RuntimeGraph
from docket.graph.nodes import Receive, Sleep
from docket.graph.reducers import FieldRule, RejectedUpdate, validate_update
from docket.proposals import At, External, Wake
from docket.records import (
    TASK_CHILD_RUNNING,
    TASK_RETRY_SCHEDULED,
    TASK_SLEEPING,
    TASK_WAITING_MESSAGE,
    TIMER_CHILD,
    TIMER_MESSAGE,
    TIMER_RETRY,
    TIMER_SLEEP,
    CheckpointType,
    EventType,
    PendingWrite,
    Run,
    RunStatus,
    TaskFailure,
    TaskState,
    TimerState,
    WriteKind,
    format_timestamp,
    idempotency_key,
)
from docket.values import JSONDict, utc

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
    if past_deadline(run, now):  # what the attempts did is too late to count
        return deadline_moment(run, now)
    by_task = {o.task_id: o for o in outcomes}
    for decided, known in dispatch.decided:
        by_task[decided.task_id] = known
    fields = rtg.field_rule_map
    inputs = rtg.input_ids

    writes: list[PendingWrite] = []
    retried: list[tuple[Activation, AttemptFailure]] = []
    permanent: list[AttemptFailure] = []
    awaiting: list[tuple[Activation, AwaitingChild]] = []
    sleeping: list[_Sleep] = []
    receiving: list[_Receive] = []
    extra: list[Entry] = []

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
    activations = sorted(
        [*dispatch.activations, *(a for a, _ in dispatch.decided)],
        key=lambda a: work_order(a.node_id, a.task_id),
    )
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
            case Sleeping(sleep=sleep):
                checked = validate_update(activation.node_id, sleep.update, fields, inputs)
                if isinstance(checked, RejectedUpdate):
                    reason = format_reason("invalid_state_update", "; ".join(checked.reasons))
                    permanent.append(failure(activation, reason))
                    continue
                until = _sleep_until(sleep, now)
                if until <= now:  # a sleep that is already over ends at once
                    writes.append(write(activation, WriteKind.UPDATE, dict(checked.values)))
                else:
                    sleeping.append(_Sleep(activation, until, dict(checked.values)))
            case Receiving(receive=receive):
                asked = _receive_problems(activation.node_id, receive, fields, inputs)
                if isinstance(asked, str):
                    permanent.append(failure(activation, asked))
                    continue
                update, on_timeout = asked
                taken = take_message(run, receive.topic)
                if taken is None:
                    receiving.append(_Receive(activation, receive, update, on_timeout))
                    continue
                after, message = taken
                value = dict(update)
                if receive.into is not None:
                    value[receive.into] = message.payload
                got = validate_update(activation.node_id, value, fields, inputs)
                if isinstance(got, RejectedUpdate):  # the message stays for another taker
                    reason = format_reason("invalid_state_update", "; ".join(got.reasons))
                    permanent.append(failure(activation, reason))
                    continue
                run = after
                writes.append(write(activation, WriteKind.UPDATE, dict(got.values)))
                extra.append(
                    Entry(
                        type=EventType.MESSAGE_CONSUMED,
                        step=activation.step,
                        node_id=activation.node_id,
                        task_id=activation.task_id,
                        payload={
                            "topic": message.topic,
                            "message_seq": message.seq,
                            "attempt": activation.attempt,
                            **({"key": message.key} if message.key is not None else {}),
                        },
                    )
                )
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
    waits = _Waits(awaiting, sleeping, receiving)
    if retried or waits or any(t not in dispatched for t in run.active_tasks):
        return _retry_park(run, dispatched, writes, retried, waits, now, extra)
    return commit_barrier(
        rtg,
        run,
        [*run.pending_writes, *writes],
        now,
        ids,
        fields=fields,
        inputs=inputs,
        extra=extra,
    )


def _sleep_until(sleep: Sleep, now: datetime) -> datetime:
    if sleep.until is not None:
        return utc(sleep.until)
    return now + (sleep.for_ or timedelta(0))


@attrs.frozen
class _Sleep:
    activation: Activation
    until: datetime
    update: JSONDict


@attrs.frozen
class _Receive:
    activation: Activation
    receive: Receive
    update: JSONDict
    on_timeout: JSONDict | None


@attrs.frozen
class _Waits:
    """The attempts of a dispatch that park waiting for something other than a retry."""

    children: Sequence[tuple[Activation, AwaitingChild]]
    sleeps: Sequence[_Sleep]
    receives: Sequence[_Receive]

    def __bool__(self) -> bool:
        return bool(self.children or self.sleeps or self.receives)


def _receive_problems(
    node_id: str,
    receive: Receive,
    fields: Mapping[str, FieldRule],
    inputs: tuple[str, ...],
) -> tuple[JSONDict, JSONDict | None] | str:
    """The checked ``update`` and ``on_timeout`` of a message wait, or why it is invalid."""
    if receive.into is not None and receive.into not in fields:
        return format_reason(
            "invalid_receive", f"into names {receive.into!r}, which is not a state field"
        )
    update = validate_update(node_id, receive.update, fields, inputs)
    if isinstance(update, RejectedUpdate):
        return format_reason("invalid_state_update", "; ".join(update.reasons))
    if receive.on_timeout is None:
        return dict(update.values), None
    if receive.timeout is None:
        return format_reason("invalid_receive", "on_timeout is given without a timeout")
    late = validate_update(node_id, receive.on_timeout, fields, inputs)
    if isinstance(late, RejectedUpdate):
        return format_reason("invalid_state_update", "; ".join(late.reasons))
    return dict(update.values), dict(late.values)


def _write_order(write: PendingWrite) -> tuple[str, int]:
    return work_order(write.node_id, write.task_id)


def _retry_park(
    run: Run,
    dispatched: set[str],
    writes: Sequence[PendingWrite],
    retried: Sequence[tuple[Activation, AttemptFailure]],
    waits: _Waits,
    now: datetime,
    extra: Sequence[Entry] = (),
) -> Moment:
    tasks = {k: t for k, t in run.active_tasks.items() if k not in dispatched}
    timers = {k: t for k, t in run.timers.items() if k not in dispatched}
    started: list[Entry] = list(extra)
    for activation, waiting in waits.children:
        before = run.active_tasks.get(activation.task_id)
        known = before is not None and before.metadata.get("child_run_id") == waiting.child_run_id
        tasks[activation.task_id] = _parked(
            activation,
            TASK_CHILD_RUNNING,
            started_at=before.started_at if known and before is not None else now,
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
    for sleep in waits.sleeps:
        activation, until = sleep.activation, sleep.until
        tasks[activation.task_id] = _parked(
            activation,
            TASK_SLEEPING,
            started_at=now,
            metadata={"update": sleep.update, "until": format_timestamp(until)},
        )
        timers[activation.task_id] = TimerState(kind=TIMER_SLEEP, fires_at=until)
        started.append(
            Entry(
                type=EventType.SLEEP_STARTED,
                step=activation.step,
                node_id=activation.node_id,
                task_id=activation.task_id,
                payload={"attempt": activation.attempt, "until": format_timestamp(until)},
            )
        )
    for wait in waits.receives:
        activation, receive = wait.activation, wait.receive
        meta: JSONDict = {"topic": receive.topic, "update": wait.update}
        if receive.into is not None:
            meta["into"] = receive.into
        if wait.on_timeout is not None:
            meta["on_timeout"] = wait.on_timeout
        payload: JSONDict = {"attempt": activation.attempt, "topic": receive.topic}
        if receive.timeout is not None:
            gives_up = now + receive.timeout
            timers[activation.task_id] = TimerState(kind=TIMER_MESSAGE, fires_at=gives_up)
            meta["timeout_at"] = payload["timeout_at"] = format_timestamp(gives_up)
        tasks[activation.task_id] = _parked(
            activation, TASK_WAITING_MESSAGE, started_at=now, metadata=meta
        )
        started.append(
            Entry(
                type=EventType.MESSAGE_WAITING,
                step=activation.step,
                node_id=activation.node_id,
                task_id=activation.task_id,
                payload=payload,
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
    # a run whose every parked attempt waits for a message waits for outside input
    only_messages = all(t.status == TASK_WAITING_MESSAGE for t in tasks.values())
    parked = attrs.evolve(
        run,
        active_tasks=dict(sorted(tasks.items())),
        timers=dict(sorted(timers.items())),
        pending_writes=tuple(sorted((*run.pending_writes, *new_writes), key=_write_order)),
        updated_at=now,
        status=RunStatus.WAITING if only_messages else RunStatus.RUNNING,
    )
    entries = [node_failed_entry(f, run.step, permanent=False) for _, f in retried]
    entries.extend(started)
    wake: Wake = (
        At(min(t.fires_at for t in parked.timers.values())) if parked.timers else External()
    )
    return propose(
        parked,
        CheckpointType.RETRY_SCHEDULED,
        entries,
        Park(wake, _park_reason(parked)),
        now,
        new_writes=new_writes,
    )


def _park_reason(parked: Run) -> ParkReason:
    kinds = {t.kind for t in parked.timers.values()}
    if TIMER_RETRY in kinds:
        return ParkReason.RETRY_BACKOFF
    if TIMER_CHILD in kinds:
        return ParkReason.CHILD_RUNNING
    if TIMER_SLEEP in kinds:
        return ParkReason.SLEEPING
    return ParkReason.AWAITING_MESSAGES


def _parked(
    activation: Activation, status: str, *, started_at: datetime | None, metadata: JSONDict
) -> TaskState:
    """The parked task of an attempt that waits (for a child, a time, a message)."""
    return TaskState(
        task_id=activation.task_id,
        node_id=activation.node_id,
        step=activation.step,
        attempt=activation.attempt,
        status=status,
        input_hash=activation.input_hash,
        idempotency_key=activation.idempotency_key,
        snapshot=activation.snapshot,
        source_versions=dict(activation.source_versions),
        started_at=started_at,
        failures=activation.failures,
        metadata=metadata,
    )
