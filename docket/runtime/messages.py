"""Sending a message to a run (runtime layer): the commit of ``Docket.send``.

The mutation is pure (:func:`docket.core.messages.deliver_message`); this module adds the
I/O: it waits a little for a worker that holds the run to let go — committing under it
would revoke its claim and make it run its attempts again —, then commits the mutation
unclaimed through :func:`~docket.runtime.lifecycle.signal` (re-evaluated on a lost race).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import attrs

from docket.contract.capabilities import Feature
from docket.contract.errors import NotFound
from docket.contract.protocols import RunStore
from docket.core.outcomes import Failed, Receiving, Sleeping, TaskOutcome, format_reason
from docket.records import EventType, OwnerScope, Run

__all__ = ["SendResult", "sent", "supported_waits", "unsupported_wait", "wait_for_holder"]


def supported_waits(
    outcomes: tuple[TaskOutcome, ...], features: frozenset[str]
) -> tuple[TaskOutcome, ...]:
    """``outcomes``, with each sleep or message wait the backend cannot keep (it lacks
    ``timers`` / ``messages``) made a permanent failure that says so."""
    timers, messages = Feature.TIMERS in features, Feature.MESSAGES in features
    if timers and messages:
        return outcomes
    return tuple(
        unsupported_wait(o, Feature.TIMERS)
        if isinstance(o, Sleeping) and not timers
        else unsupported_wait(o, Feature.MESSAGES)
        if isinstance(o, Receiving) and not messages
        else o
        for o in outcomes
    )


def unsupported_wait(outcome: Sleeping | Receiving, feature: Feature) -> Failed:
    """A sleep or message wait on a backend that does not declare ``feature``: the attempt
    fails permanently, saying why (a graph cannot declare what its node code returns, so
    this is found when the node returns, not when the run starts)."""
    return Failed(
        task_id=outcome.task_id,
        node_id=outcome.node_id,
        attempt=outcome.attempt,
        reason=format_reason(
            "unsupported", f"this backend does not declare {feature.value!r}, which it needs"
        ),
        retryable=False,
    )


@attrs.frozen(kw_only=True)
class SendResult:
    """What ``Docket.send`` did: ``delivered`` — an attempt waiting on the topic took the
    message in the same commit; ``duplicate`` — the idempotency key was accepted before,
    so nothing changed; otherwise the message was kept for the next attempt that asks.
    ``message_seq``: the message's number in the run's mailbox (``None`` for a duplicate)."""

    run: Run
    delivered: bool
    duplicate: bool
    message_seq: int | None


def sent(run: Run, events: tuple[object, ...] | None) -> SendResult:
    """The result of a committed send (``events``: the checkpoint's; ``None``: nothing
    was committed, a duplicate)."""
    if events is None:
        return SendResult(run=run, delivered=False, duplicate=True, message_seq=None)
    seq: int | None = None
    delivered = False
    for event in events:
        kind = getattr(event, "type", None)
        payload = getattr(event, "payload", {})
        if kind in (EventType.MESSAGE_RECEIVED, EventType.MESSAGE_CONSUMED):
            value = payload.get("message_seq")
            seq = value if isinstance(value, int) else seq
            delivered = delivered or kind is EventType.MESSAGE_CONSUMED
    return SendResult(run=run, delivered=delivered, duplicate=False, message_seq=seq)


async def wait_for_holder(
    runs: RunStore, owner: OwnerScope, run_id: str, patience: float, pause: Callable[[], float]
) -> None:
    """Return once no worker holds the run, or after ``patience`` seconds (then the send
    commits anyway: a node that runs for minutes must not hold a message back)."""
    waited, step = 0.0, pause()
    while waited < patience:
        info = await runs.inspect_run(owner, run_id)
        if isinstance(info, NotFound) or info.claimed_at is None or info.run.status.terminal:
            return
        await asyncio.sleep(step)
        waited, step = waited + step, min(step * 2, 0.5)
