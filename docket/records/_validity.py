"""Identity formulas and validity (layer 1): task ids and idempotency keys, and the
checks that inspect arbitrary objects without raising (``run_problems``,
``event_problems``, ``validate_run``)."""

from __future__ import annotations

import reprlib
from datetime import UTC, datetime

import attrs

from docket.records._codec import _SCALARS, _spliced
from docket.records._types import (
    DURABLE_STATUSES,
    MAX_COUNTER,
    TASK_CHILD_RUNNING,
    TASK_RETRY_SCHEDULED,
    TASK_SLEEPING,
    TASK_WAITING_MESSAGE,
    TIMER_CHILD,
    TIMER_MESSAGE,
    TIMER_RETRY,
    TIMER_SLEEP,
    ChannelState,
    Event,
    EventType,
    InterruptState,
    InterruptStatus,
    PendingWrite,
    Run,
    RunFailure,
    RunStatus,
    TaskFailure,
    TaskState,
    TimerState,
    WriteKind,
)
from docket.values import (
    JSONDict,
    canonical_json_as,
    durable_errors,
    encoder_for,
)

# -- identity formulas ---------------------------------------------------------------------


def task_id(run_id: str, step: int, node_id: str) -> str:
    return f"{run_id}:{step}:{node_id}"


def idempotency_key(task: str, attempt: int) -> str:
    return f"{task}:{attempt}"


def item_task_id(task: str, index: int) -> str:
    """The task of item ``index`` of a map node's task ``task``: ``"<run>:<step>:<node>[i]"``
    (node IDs never hold ``[``, so the two forms cannot collide)."""
    return f"{task}[{index}]"


def item_index(task: str) -> int | None:
    """The item index of a map item's task id, ``None`` for a plain task id."""
    if not task.endswith("]"):
        return None
    head, sep, digits = task[:-1].rpartition("[")
    if not sep or not head or not digits.isdigit() or not digits.isascii():
        return None
    if digits != str(int(digits)):  # one spelling per index: no leading zeros
        return None
    return int(digits)


def _is_task_of(run: Run, node_id: object, task: object) -> bool:
    """``task`` is node ``node_id``'s task (or one of its map items') at the run's step."""
    if not isinstance(node_id, str) or not isinstance(task, str):
        return False
    plain = task_id(run.id, run.step, node_id)
    return task == plain or (item_index(task) is not None and task.startswith(plain + "["))


# -- validity (pure, never raises on junk) -------------------------------------------------


@attrs.frozen
class InvalidRunDocument:
    """Why a run document is not durable-valid (every reason, each naming its field)."""

    reasons: tuple[str, ...]


#: Stored counters (sequences, steps, attempts) are signed 64-bit integers in every store.


def _is_int(value: object, minimum: int = 0) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_COUNTER
    )


#: A parked task's status, and the kind of timer it has (a message wait may have none).
_TASK_TIMERS: dict[str, str] = {
    TASK_RETRY_SCHEDULED: TIMER_RETRY,
    TASK_CHILD_RUNNING: TIMER_CHILD,
    TASK_SLEEPING: TIMER_SLEEP,
    TASK_WAITING_MESSAGE: TIMER_MESSAGE,
}
_TIMER_KINDS = tuple(_TASK_TIMERS.values())
_WAITING_TASKS = frozenset({TASK_CHILD_RUNNING, TASK_SLEEPING, TASK_WAITING_MESSAGE})

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = 80


def shown(value: object) -> str:
    """A bounded repr for problem messages: the value may be any (deep, huge) junk."""
    return _REPR.repr(value)


def _is_str(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _is_utc(value: object) -> bool:
    return (
        isinstance(value, datetime)
        and value.tzinfo is not None
        and value.utcoffset() is not None
        and value.utcoffset().total_seconds() == 0  # type: ignore[union-attr]  # checked above
    )


def _durable_dict(value: object, path: str, out: list[str]) -> None:
    if not isinstance(value, dict):
        out.append(f"{path}: expected an object, got {type(value).__name__}")
    else:
        out.extend(durable_errors(value, path))


def _add_task_problems(key: str, task: object, run: Run, out: list[str]) -> None:
    where = f"active_tasks.{key}"
    if not isinstance(task, TaskState):
        out.append(f"{where}: not a TaskState")
        return
    if task.task_id != key:
        out.append(f"{where}: task_id {shown(task.task_id)} differs from its key")
    status = task.status
    timer_kind = _TASK_TIMERS.get(status) if isinstance(status, str) else None
    if timer_kind is None:
        out.append(f"{where}: status must be one of {', '.join(map(repr, _TASK_TIMERS))}")
    # a task that waits on something (a child, a timer, a message) started waiting at a
    # known time; only a retry is parked without having begun
    waits = status in _WAITING_TASKS
    if not _is_str(task.node_id) or not _is_task_of(run, task.node_id, task.task_id):
        out.append(f"{where}: task_id must be '<run>:<step>:<node>[item]' for the current step")
    if task.step != run.step:
        out.append(f"{where}: step {shown(task.step)} is not the run's step")
    if not isinstance(task.failures, tuple) or not all(
        isinstance(f, TaskFailure) for f in task.failures
    ):
        out.append(f"{where}: failures must be a tuple of TaskFailure")
        return
    attempts = [f.attempt for f in task.failures]
    # a retry follows a failure; a waiting task may be a first attempt
    if (not attempts and not waits) or attempts != list(range(1, len(attempts) + 1)):
        out.append(f"{where}: failures must record attempts 1..n in order")
    if task.attempt != len(attempts) + 1:
        out.append(f"{where}: attempt must be one more than the recorded failures")
    if task.idempotency_key != idempotency_key(task.task_id, task.attempt):
        out.append(f"{where}: idempotency_key must be '<task_id>:<attempt>'")
    if task.deadline_at is not None or (task.started_at is not None and not waits):
        out.append(f"{where}: a parked task has no started_at/deadline_at")
    if waits and not _is_utc(task.started_at):
        out.append(f"{where}: a waiting task has started_at (when it began to wait)")
    meta = task.metadata if isinstance(task.metadata, dict) else {}
    if status == TASK_CHILD_RUNNING and not _is_str(meta.get("child_run_id")):
        out.append(f"{where}: a task waiting for a child names it (metadata.child_run_id)")
    if status == TASK_SLEEPING and not isinstance(meta.get("update"), dict):
        out.append(f"{where}: a sleeping task keeps the update it will write (metadata.update)")
    if status == TASK_WAITING_MESSAGE and not _is_str(meta.get("topic")):
        out.append(f"{where}: a task waiting for a message names its topic (metadata.topic)")
    timer = run.timers.get(key) if isinstance(run.timers, dict) else None
    if isinstance(timer, TimerState) and timer.kind != timer_kind:
        out.append(f"{where}: its timer kind does not match its status")
    if timer is None and status != TASK_WAITING_MESSAGE:
        out.append(f"{where}: only a task waiting for a message may have no timer")
    if not _is_str(task.input_hash):
        out.append(f"{where}: input_hash must be a non-empty string")
    _durable_dict(task.snapshot, f"{where}.snapshot", out)
    _durable_dict(task.metadata, f"{where}.metadata", out)


def _add_interrupt_request_problems(
    path: str, value: JSONDict, node_id: str, out: list[str]
) -> None:
    ident = value.get("id")
    if ident is not None and not _is_str(ident):
        out.append(f"{path}.id: must be a non-empty string when present")
    owner = value.get("node_id")
    if owner is not None and owner != node_id:
        out.append(f"{path}.node_id: must be the writing node")
    if not _is_str(value.get("resume_channel")):
        out.append(f"{path}.resume_channel: must be a non-empty string")
    schema = value.get("schema")
    if schema is not None and not isinstance(schema, dict):
        out.append(f"{path}.schema: must be an object or null")
    metadata = value.get("metadata", {})
    if not isinstance(metadata, dict):
        out.append(f"{path}.metadata: must be an object")


def run_problems(run: object) -> list[str]:
    """Every reason ``run`` is not durable-valid (runtime-spec §1.6); empty when valid."""
    if not isinstance(run, Run):
        return [f"run: expected a Run, got {type(run).__name__}"]
    out: list[str] = []
    if not isinstance(run.status, RunStatus) or run.status not in DURABLE_STATUSES:
        out.append(f"status: {shown(run.status)} is not a durable status")
    for name in ("id", "graph_id", "graph_hash"):
        if not _is_str(getattr(run, name)):
            out.append(f"{name}: must be a non-empty string")
    for name in ("step", "checkpoint_seq", "event_seq"):
        if not _is_int(getattr(run, name)):
            out.append(f"{name}: must be a non-negative integer")
    _durable_dict(run.input, "input", out)
    _durable_dict(run.metadata, "metadata", out)
    status = run.status if isinstance(run.status, RunStatus) else None
    if run.output is not None:
        _durable_dict(run.output, "output", out)
        if status is not RunStatus.DONE:
            out.append("output: present only on done runs")
    for name in ("started_at", "updated_at"):
        if not _is_utc(getattr(run, name)):
            out.append(f"{name}: must be an aware UTC datetime")
    terminal = status is not None and status.terminal
    if run.finished_at is None:
        if terminal:
            out.append("finished_at: required for a terminal run")
    elif not _is_utc(run.finished_at):
        out.append("finished_at: must be an aware UTC datetime")
    elif not terminal:
        out.append("finished_at: present only on terminal runs")
    if (run.failure is not None) != (status is RunStatus.FAILED):
        out.append("failure: present exactly when the run failed")
    if run.failure is not None:
        failure = run.failure
        if not isinstance(failure, RunFailure):
            out.append("failure: not a RunFailure")
        else:
            if not _is_str(failure.code) or not _is_str(failure.message):
                out.append("failure: code and message must be non-empty strings")
            if failure.node_id is not None and not _is_str(failure.node_id):
                out.append("failure.node_id: must be a non-empty string or null")
            _durable_dict(failure.details, "failure.details", out)
    if out:
        return out  # structure is broken: the detailed checks below would only echo it
    _add_collection_problems(run, out)
    return out


def _add_collection_problems(run: Run, out: list[str]) -> None:
    if not isinstance(run.channels, dict):
        out.append("channels: must be a dict")
    else:
        for key, channel in run.channels.items():
            if not isinstance(channel, ChannelState) or channel.channel_id != key:
                out.append(f"channels.{key}: must be a ChannelState keyed by its channel_id")
            elif not _is_int(channel.version):
                out.append(f"channels.{key}: version must be a non-negative integer")
            else:
                if channel.value.__class__ not in _SCALARS:  # exact scalars are durable
                    out.extend(durable_errors(channel.value, f"channels.{key}.value"))
                seen = channel.barrier_seen
                # An exact empty tuple is trivially sorted and unique: skip the copies.
                if not isinstance(seen, tuple) or (
                    (seen.__class__ is not tuple or seen) and list(seen) != sorted(set(seen))
                ):
                    out.append(f"channels.{key}: barrier_seen must be sorted and unique")
    for name in ("changed_channels", "pending_nodes"):
        value = getattr(run, name)
        if not isinstance(value, frozenset) or not all(_is_str(v) for v in value):
            out.append(f"{name}: must be a frozenset of non-empty strings")
    for key, timer in run.timers.items() if isinstance(run.timers, dict) else ():
        if not isinstance(timer, TimerState) or timer.kind not in _TIMER_KINDS:
            out.append(f"timers.{key}: must be a TimerState of kind {', '.join(_TIMER_KINDS)}")
        elif not _is_utc(timer.fires_at):
            out.append(f"timers.{key}: fires_at must be an aware UTC datetime")
    if not isinstance(run.timers, dict) or not isinstance(run.active_tasks, dict):
        out.append("timers/active_tasks: must be dicts")
        return
    for key, task in run.active_tasks.items():
        _add_task_problems(key, task, run, out)
    if not set(run.timers) <= set(run.active_tasks):
        out.append("timers: every timer belongs to an active task")
    writes = run.pending_writes
    if not isinstance(writes, tuple) or not all(isinstance(w, PendingWrite) for w in writes):
        out.append("pending_writes: must be a tuple of PendingWrite")
        return
    # a run whose every parked task waits for a message waits (for outside input)
    waiting_for_messages = (
        run.status is RunStatus.WAITING
        and bool(run.active_tasks)
        and all(
            isinstance(t, TaskState) and t.status == TASK_WAITING_MESSAGE
            for t in run.active_tasks.values()
        )
    )
    if (
        (run.active_tasks or run.timers)
        and run.status is not RunStatus.RUNNING
        and not waiting_for_messages
    ):
        out.append(
            "active superstep: only a running run may have tasks or timers "
            "(a waiting one: only tasks waiting for messages)"
        )
    # A node failure keeps its finished siblings' writes for a retry; reopened, the run
    # holds them with no task until the unfinished nodes are planned again.
    kept = run.status is RunStatus.FAILED and _kept_by(run.failure)
    if writes and run.status is not RunStatus.RUNNING and not kept and not waiting_for_messages:
        out.append(
            "active superstep: only a running run, or one a node failure failed, "
            "may have pending writes"
        )
    # A map node has one task per item; any other node one task.
    tasks = [t.task_id for t in run.active_tasks.values() if isinstance(t, TaskState)]
    tasks += [w.task_id for w in writes]
    if len(tasks) != len(set(tasks)):
        out.append("active superstep: a task appears more than once across tasks and writes")
    for index, write in enumerate(writes):
        path = f"pending_writes[{index}]"
        if not _is_task_of(run, write.node_id, write.task_id):
            out.append(f"{path}: task_id must be '<run>:<step>:<node>[item]' for the current step")
        if not _is_int(write.attempt, 1):
            out.append(f"{path}: attempt must be a positive integer")
        if not isinstance(write.kind, WriteKind):
            out.append(f"{path}: kind must be update or interrupt")
        _durable_dict(write.value, f"{path}.value", out)
        if write.kind is WriteKind.INTERRUPT and isinstance(write.value, dict):
            _add_interrupt_request_problems(f"{path}.value", write.value, write.node_id, out)
    if not isinstance(run.interrupts, dict):
        out.append("interrupts: must be a dict")
        return
    for key, intr in run.interrupts.items():
        where = f"interrupts.{key}"
        if not isinstance(intr, InterruptState) or intr.id != key:
            out.append(f"{where}: must be an InterruptState keyed by its id")
            continue
        if not _is_str(intr.node_id) or not _is_str(intr.resume_channel):
            out.append(f"{where}: node_id and resume_channel must be non-empty strings")
        if not _is_utc(intr.created_at):
            out.append(f"{where}: created_at must be an aware UTC datetime")
        if (intr.resolved_at is None) != (intr.status is InterruptStatus.OPEN):
            out.append(f"{where}: resolved_at is set exactly when resolved")
        if intr.schema is not None:
            _durable_dict(intr.schema, f"{where}.schema", out)
        _durable_dict(intr.metadata, f"{where}.metadata", out)


def _kept_by(failure: object) -> bool:
    """True when ``failure`` is a node failure, the one failure that keeps pending writes."""
    return isinstance(failure, RunFailure) and failure.code == "node_failed"


def validate_run(run: object) -> InvalidRunDocument | None:
    """Durable validity of a run document as one typed answer (``None`` when valid)."""
    problems = run_problems(run)
    return InvalidRunDocument(tuple(problems)) if problems else None


def event_problems(event: object, run_id: str | None = None) -> list[str]:
    """Shape of one event; with ``run_id``, also that it belongs to that run."""
    if not isinstance(event, Event):
        return [f"event: expected an Event, got {type(event).__name__}"]
    out: list[str] = []
    seq = event.seq
    # shown() is reprlib, slow per event; an ordinary int reads the same either way.
    where = (
        f"event[{seq}]"
        if seq.__class__ is int and -MAX_COUNTER <= seq <= MAX_COUNTER
        else (f"event[{shown(seq)}]")
    )
    if not _is_str(event.run_id):
        out.append(f"{where}.run_id: must be a non-empty string")
    elif run_id is not None and event.run_id != run_id:
        out.append(f"{where}.run_id: {shown(event.run_id)} is not the proposal's run {run_id!r}")
    if not _is_int(event.seq, 1):
        out.append(f"{where}.seq: must be a positive integer")
    if not isinstance(event.type, EventType):
        out.append(f"{where}.type: {shown(event.type)} is not an event type")
    if not _is_int(event.step):
        out.append(f"{where}.step: must be a non-negative integer")
    if not _is_utc(event.timestamp):
        out.append(f"{where}.timestamp: must be an aware UTC datetime")
    for name in ("node_id", "channel_id", "task_id"):
        value = getattr(event, name)
        if value is not None and not _is_str(value):
            out.append(f"{where}.{name}: must be a non-empty string or null")
    _durable_dict(event.payload, f"{where}.payload", out)
    _durable_dict(event.metadata, f"{where}.metadata", out)
    return out


def checked_event_encodings(
    event: object, run_id: str
) -> list[str] | tuple[bytes, bytes, int] | None:
    """``event_problems(event, run_id)`` when there are any; else ``event_encodings(event)``
    or, when that could fail (odd text), ``None``: the caller encodes, and words the error.

    For the usual event (exact types, a UTC timestamp, plainly durable payload and
    metadata) one walk of the payload and the metadata both proves them durable and picks
    their encoder; anything else goes through event_problems.
    """
    if isinstance(event, Event) and event.__class__ is Event and run_id.__class__ is str:
        item = event
        seq, step = item.seq, item.step
        if (
            run_id
            and item.run_id == run_id
            and item.run_id.__class__ is str
            and seq.__class__ is int
            and 1 <= seq <= MAX_COUNTER
            and step.__class__ is int
            and 0 <= step <= MAX_COUNTER
            and item.type.__class__ is EventType
            and item.timestamp.__class__ is datetime
            and item.timestamp.tzinfo is UTC
            and _plain_optional_id(item.node_id)
            and _plain_optional_id(item.channel_id)
            and _plain_optional_id(item.task_id)
            and item.payload.__class__ is dict
            and item.metadata.__class__ is dict
        ):
            # Strictly durable (no $guard), exactly as event_problems requires.
            payload_ok = encoder_for(item.payload, allow_guard_tag=False)
            metadata_ok = encoder_for(item.metadata, allow_guard_tag=False)
            if payload_ok is not None and metadata_ok is not None:
                try:
                    return _spliced(
                        item,
                        canonical_json_as(item.payload, payload_ok),
                        canonical_json_as(item.metadata, metadata_ok),
                    )
                except Exception:
                    return None  # odd text: event_encodings raises as it always has
    return event_problems(event, run_id) or None


def _plain_optional_id(value: object) -> bool:
    return value is None or (value.__class__ is str and value != "")
