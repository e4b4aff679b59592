"""Durable time and messages in the core: deadlines, the mailbox, parked waits (pure).

A run's **deadline** is an instant in its metadata (``docket.deadline``). Every park's
wake is capped at it (:func:`cap_wake`, applied by ``propose``), so even a run waiting
for a person is due again when it passes; whoever advances a run at or after its
deadline fails it with ``deadline_exceeded`` (:func:`deadline_moment`).

A run's **mailbox** (``docket.mailbox`` in its metadata) keeps the messages sent to it
that no attempt has taken yet, oldest first, and every idempotency key it has accepted:

    {"next_seq": 3, "messages": [{"seq": 2, "topic": ..., "payload": ..., "sent_at": ...}],
     "keys": ["k1", ...]}

Being part of the run document, the mailbox changes only in fenced commits: a message is
kept, or taken by an attempt, in exactly one committed transition.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Final

import attrs

from docket.core.finish import failure_moment
from docket.core.moment import Moment, cap_wake, deadline_of
from docket.proposals import At, External, Immediate, Wake
from docket.records import (
    DEADLINE_KEY,
    MAILBOX_KEY,
    START_AT_KEY,
    TASK_WAITING_MESSAGE,
    Run,
    RunFailure,
    RunStatus,
    format_timestamp,
    parse_timestamp,
)
from docket.values import JSONDict, JSONValue

__all__ = [
    "DEADLINE_EXCEEDED",
    "MESSAGE_TIMEOUT",
    "Message",
    "accepted_keys",
    "cap_wake",
    "deadline_moment",
    "deadline_of",
    "keep_message",
    "past_deadline",
    "pending_messages",
    "resting_wake",
    "stamp_message",
    "take_message",
    "with_deadline",
]

#: The failure code of a run that passed its deadline.
DEADLINE_EXCEEDED: Final = "deadline_exceeded"
#: The failure reason kind of a message wait that gave up without an ``on_timeout``.
MESSAGE_TIMEOUT: Final = "message_timeout"


def with_deadline(metadata: JSONDict, deadline: datetime) -> JSONDict:
    return {**metadata, DEADLINE_KEY: format_timestamp(deadline)}


def past_deadline(run: Run, now: datetime) -> bool:
    deadline = deadline_of(run)
    return deadline is not None and now >= deadline


def deadline_moment(run: Run, now: datetime) -> Moment:
    """The run fails: its deadline passed (whatever it was doing; children are cancelled by
    the runtime, as for any failure of a parent)."""
    deadline = deadline_of(run)
    when = format_timestamp(deadline) if deadline is not None else None
    failure = RunFailure(
        code=DEADLINE_EXCEEDED,
        message=f"the run passed its deadline ({when})",
        details={"deadline": when},
    )
    return failure_moment(run, failure, now)


def resting_wake(run: Run, now: datetime) -> Wake:
    """When a live run is due, worked out from its document alone: what a commit that does
    not advance it (a message kept for later) proposes, so it stays due as it was."""
    if run.status is RunStatus.WAITING and not run.active_tasks:
        return cap_wake(run, External())
    if not run.active_tasks:
        start = run.metadata.get(START_AT_KEY) if run.step == 0 else None
        if isinstance(start, str) and (begins := _timestamp(start)) is not None and begins > now:
            return At(begins)  # a delayed start stays delayed
        return Immediate()
    timers = {k: t.fires_at for k, t in run.timers.items()}
    due = [
        k
        for k, task in run.active_tasks.items()
        if (k in timers and timers[k] <= now)
        or (k not in timers and task.status != TASK_WAITING_MESSAGE)
    ]
    if due:
        return Immediate()
    if not timers:
        return cap_wake(run, External())
    return cap_wake(run, At(min(timers.values())))


def _timestamp(text: str) -> datetime | None:
    try:
        return parse_timestamp(text)
    except ValueError:
        return None


# -- the mailbox ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Message:
    seq: int
    topic: str
    payload: JSONValue
    sent_at: str
    key: str | None = None

    def as_json(self) -> JSONDict:
        data: JSONDict = {
            "seq": self.seq,
            "topic": self.topic,
            "payload": self.payload,
            "sent_at": self.sent_at,
        }
        if self.key is not None:
            data["key"] = self.key
        return data


def _mailbox(run: Run) -> JSONDict:
    box = run.metadata.get(MAILBOX_KEY)
    return box if isinstance(box, dict) else {}


def _message(data: JSONValue) -> Message | None:
    if not isinstance(data, dict):
        return None
    seq, topic, sent = data.get("seq"), data.get("topic"), data.get("sent_at")
    key = data.get("key")
    if not isinstance(seq, int) or not isinstance(topic, str) or not isinstance(sent, str):
        return None
    return Message(
        seq=seq,
        topic=topic,
        payload=data.get("payload"),
        sent_at=sent,
        key=key if isinstance(key, str) else None,
    )


def pending_messages(run: Run, topic: str | None = None) -> tuple[Message, ...]:
    """Messages kept for the run (of ``topic``, or all), oldest first."""
    raw = _mailbox(run).get("messages")
    found = [m for m in map(_message, raw if isinstance(raw, list) else []) if m is not None]
    return tuple(m for m in found if topic is None or m.topic == topic)


def accepted_keys(run: Run) -> frozenset[str]:
    keys = _mailbox(run).get("keys")
    return (
        frozenset(k for k in keys if isinstance(k, str)) if isinstance(keys, list) else frozenset()
    )


def _with_mailbox(run: Run, messages: Sequence[Message], next_seq: int, keys: list[str]) -> Run:
    box: JSONDict = {"next_seq": next_seq, "messages": [m.as_json() for m in messages]}
    if keys:
        box["keys"] = list(keys)
    return attrs.evolve(run, metadata={**run.metadata, MAILBOX_KEY: box})


def _next_seq(run: Run) -> int:
    value = _mailbox(run).get("next_seq")
    return value if isinstance(value, int) and value > 0 else 1


def _keys(run: Run) -> list[str]:
    keys = _mailbox(run).get("keys")
    return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []


def keep_message(
    run: Run, topic: str, payload: JSONValue, key: str | None, now: datetime
) -> tuple[Run, Message]:
    """``run`` with a new message at the end of its mailbox (and its key remembered)."""
    seq = _next_seq(run)
    message = Message(seq=seq, topic=topic, payload=payload, sent_at=format_timestamp(now), key=key)
    keys = _keys(run) + ([key] if key is not None else [])
    return _with_mailbox(run, [*pending_messages(run), message], seq + 1, keys), message


def stamp_message(
    run: Run, topic: str, payload: JSONValue, key: str | None, now: datetime
) -> tuple[Run, Message]:
    """A message delivered straight to a waiting attempt: numbered and its key remembered,
    never kept."""
    seq = _next_seq(run)
    message = Message(seq=seq, topic=topic, payload=payload, sent_at=format_timestamp(now), key=key)
    keys = _keys(run) + ([key] if key is not None else [])
    return _with_mailbox(run, pending_messages(run), seq + 1, keys), message


def take_message(run: Run, topic: str) -> tuple[Run, Message] | None:
    """The oldest kept message of ``topic`` and the run without it, or ``None``."""
    kept = pending_messages(run)
    for index, message in enumerate(kept):
        if message.topic == topic:
            rest = [*kept[:index], *kept[index + 1 :]]
            return _with_mailbox(run, rest, _next_seq(run), _keys(run)), message
    return None
