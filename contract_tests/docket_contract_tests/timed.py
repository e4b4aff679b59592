"""Run documents of durable time and messages, for the ``timers``/``messages`` cases.

The core that parks attempts on timers and messages is built elsewhere; these builders
make the same shapes from the real records (``docket.records``), each checked by
``run_problems`` before a case sends it: a ``sleeping`` task keeps the update it will
write (``metadata.update``) and has a ``sleep`` timer; a ``waiting_message`` task names its
topic (``metadata.topic``) and has a ``message`` timer only when it gives up at some
time; a run whose every parked task waits for a message is ``waiting``. A run's mailbox
and deadline are run metadata (``MAILBOX_KEY``, ``DEADLINE_KEY``).
"""

from __future__ import annotations

from datetime import datetime

import attrs

from docket.records import (
    DEADLINE_KEY,
    MAILBOX_KEY,
    TASK_SLEEPING,
    TASK_WAITING_MESSAGE,
    TIMER_MESSAGE,
    TIMER_SLEEP,
    Run,
    RunStatus,
    TaskState,
    TimerState,
    format_timestamp,
    idempotency_key,
    run_problems,
    task_id,
)
from docket.values import JSONDict

INPUT_HASH = "0" * 64


def _task(run: Run, node: str, status: str, at: datetime, metadata: JSONDict) -> TaskState:
    ident = task_id(run.id, run.step, node)
    return TaskState(
        task_id=ident,
        node_id=node,
        step=run.step,
        attempt=1,
        status=status,
        input_hash=INPUT_HASH,
        idempotency_key=idempotency_key(ident, 1),
        started_at=at,
        metadata=metadata,
    )


def sleeping(run: Run, node: str, at: datetime, until: datetime) -> tuple[TaskState, TimerState]:
    """A first attempt of ``node`` asleep since ``at`` until ``until``."""
    task = _task(run, node, TASK_SLEEPING, at, {"update": {"slept": node}})
    return task, TimerState(kind=TIMER_SLEEP, fires_at=until)


def waiting_message(
    run: Run, node: str, at: datetime, topic: str, timeout_at: datetime | None = None
) -> tuple[TaskState, TimerState | None]:
    """A first attempt of ``node`` waiting since ``at`` for a message on ``topic``
    (giving up at ``timeout_at``, or never)."""
    task = _task(run, node, TASK_WAITING_MESSAGE, at, {"topic": topic})
    timer = None if timeout_at is None else TimerState(kind=TIMER_MESSAGE, fires_at=timeout_at)
    return task, timer


def parked(run: Run, status: RunStatus, *tasks: tuple[TaskState, TimerState | None]) -> Run:
    """``run`` (already its successor) holding exactly ``tasks``, with ``status``; checked."""
    out = attrs.evolve(
        run,
        status=status,
        active_tasks={t.task_id: t for t, _ in tasks},
        timers={t.task_id: timer for t, timer in tasks if timer is not None},
    )
    problems = run_problems(out)
    assert not problems, f"the kit built an invalid run document: {problems}"
    return out


def mailbox(*messages: tuple[str, JSONDict], keys: tuple[str, ...] = ()) -> JSONDict:
    """A run's mailbox metadata: kept messages by topic and the idempotency keys seen."""
    return {
        "messages": [{"topic": topic, "payload": payload} for topic, payload in messages],
        "keys": list(keys),
    }


def with_mailbox(metadata: JSONDict, box: JSONDict) -> JSONDict:
    return {**metadata, MAILBOX_KEY: box}


def with_deadline(metadata: JSONDict, deadline: datetime) -> JSONDict:
    return {**metadata, DEADLINE_KEY: format_timestamp(deadline)}


__all__ = [
    "INPUT_HASH",
    "mailbox",
    "parked",
    "sleeping",
    "waiting_message",
    "with_deadline",
    "with_mailbox",
]
