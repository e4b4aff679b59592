"""What one node attempt did, as data the core can settle.

The executor (runtime layer) runs a node and reports exactly one :data:`TaskOutcome` per
activation. Turning a node's return value into an outcome is pure, so it lives here
(:func:`classify_return`); the executor only adds what it alone can know (exceptions,
timeouts, cancellation), each phrased with :func:`format_reason`, the one rendering of a
failure used in events, parked task failures and ``Failure.details["errors"]``. A failure
also keeps what went wrong: the exception an attempt raised (``error``) and the details a
node's ``Failure`` carried (``details``), both bounded (:mod:`docket.core.captured`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TypeAlias

import attrs

from docket.core.captured import (
    MAX_MESSAGE_CHARS,
    ErrorInfo,
    clip_head,
    durable_details,
    exception_message,
)
from docket.graph.nodes import Failure, Interrupt, Receive, Sleep, Update
from docket.values import JSONDict

__all__ = [
    "AwaitingChild",
    "Completed",
    "Failed",
    "Interrupted",
    "Receiving",
    "Sleeping",
    "TaskOutcome",
    "classify_return",
    "describe_exception",
    "format_reason",
]


@attrs.frozen(kw_only=True)
class Completed:
    """The node returned writes (validated later, at settle)."""

    task_id: str
    node_id: str
    attempt: int
    update: object


@attrs.frozen(kw_only=True)
class Interrupted:
    """The node asked to pause for an outside answer (validated later, at settle)."""

    task_id: str
    node_id: str
    attempt: int
    interrupt: Interrupt


@attrs.frozen(kw_only=True)
class Failed:
    """The attempt failed. ``retryable`` failures are retried while the budget lasts.

    ``error``: the exception the attempt raised; ``details``: what the node's ``Failure``
    said beyond its reason (``None`` when it said nothing)."""

    task_id: str
    node_id: str
    attempt: int
    reason: str
    retryable: bool
    error: ErrorInfo | None = None
    details: JSONDict | None = None


@attrs.frozen(kw_only=True)
class AwaitingChild:
    """A child node's attempt is waiting for its child run (``child_run_id``, derived by
    the runtime); the parent parks it and looks again at ``check_at`` at the latest."""

    task_id: str
    node_id: str
    attempt: int
    child_run_id: str
    check_at: datetime


@attrs.frozen(kw_only=True)
class Sleeping:
    """The node asked the run to sleep (validated and timed at settle)."""

    task_id: str
    node_id: str
    attempt: int
    sleep: Sleep


@attrs.frozen(kw_only=True)
class Receiving:
    """The node waits for a message on a topic (taken from the mailbox at settle, or parked)."""

    task_id: str
    node_id: str
    attempt: int
    receive: Receive


TaskOutcome: TypeAlias = Completed | Interrupted | Failed | AwaitingChild | Sleeping | Receiving


def format_reason(kind: str, detail: str | None = None) -> str:
    """``"<kind>: <detail>"`` (or just ``kind``): the one textual form of a failure.

    Kinds used by docket: ``error`` (a node's own ``Failure``), ``exception``,
    ``timeout``, ``killed``, ``exited``, ``lost``, ``invalid_node_return``,
    ``invalid_state_update``, ``invalid_interrupt``. ``detail`` is cut to
    ``MAX_MESSAGE_CHARS`` characters (see :mod:`docket.core.captured`).
    """
    if not detail:
        return kind
    # a reason is stored in events, parked tasks and the run's failure: bounded like a
    # message, so a huge one cannot make the commit too large for the store
    return f"{kind}: {clip_head(detail, MAX_MESSAGE_CHARS)}"


def describe_exception(exc: BaseException) -> str:
    """``"ValueError: bad thing"`` (the type name alone when the message is empty)."""
    text = exception_message(exc)
    return type(exc).__name__ if not text else f"{type(exc).__name__}: {text}"


def classify_return(task_id: str, node_id: str, attempt: int, value: object) -> TaskOutcome:
    """Classify what a node returned (after awaiting it).

    A mapping or ``Update`` is a completion; an ``Interrupt`` a pause; a ``Failure`` a
    failure (retryable unless it says otherwise); anything else is the permanent failure
    ``invalid_node_return``.
    """
    if isinstance(value, Update | Mapping):
        update = value.values if isinstance(value, Update) else value
        return Completed(task_id=task_id, node_id=node_id, attempt=attempt, update=update)
    if isinstance(value, Interrupt):
        return Interrupted(task_id=task_id, node_id=node_id, attempt=attempt, interrupt=value)
    if isinstance(value, Sleep):
        return Sleeping(task_id=task_id, node_id=node_id, attempt=attempt, sleep=value)
    if isinstance(value, Receive):
        return Receiving(task_id=task_id, node_id=node_id, attempt=attempt, receive=value)
    details: JSONDict | None = None
    if isinstance(value, Failure):
        reason = format_reason("error", str(value.reason))
        retryable = value.retryable is not False
        details = durable_details(value.details) if value.details else None
    else:
        reason = format_reason(
            "invalid_node_return",
            "a node must return a dict, Update, Interrupt, Failure, Sleep or Receive, "
            f"got {type(value).__name__}",
        )
        retryable = False
    return Failed(
        task_id=task_id,
        node_id=node_id,
        attempt=attempt,
        reason=reason,
        retryable=retryable,
        details=details,
    )
