"""Moments: one commit boundary as data, and the other answers the core can give.

A :class:`Moment` is everything one durable transition needs: the proposed :class:`Run`
(with ``checkpoint_seq`` and ``event_seq`` already advanced), its events (runtime events
with consecutive sequences, then exactly one ``checkpoint_committed``), the checkpoint type,
the checkpoint metadata envelope (runtime-spec §2.4), the disposition (what happens after
the commit) and ``proposed_at`` (the one timestamp every event of the moment carries).
Computing a moment writes nothing and calls nothing.

:func:`propose` is the only place sequences are assigned and the envelope is built;
:func:`yield_moment` is the only sanctioned rewrite of a finished moment.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final, TypeAlias, assert_never

import attrs

from docket.core.errors import MalformedMoment, NotContinue
from docket.core.history import history_payload, wants_base
from docket.proposals import At, External, Immediate, Terminal, Wake
from docket.records import (
    DEADLINE_KEY,
    Checkpoint,
    CheckpointType,
    Event,
    EventType,
    PendingWrite,
    Run,
    idempotency_key,
    parse_timestamp,
)
from docket.values import JSONDict, JSONValue

__all__ = [
    "Continue",
    "Disposition",
    "Entry",
    "Moment",
    "NotDue",
    "Park",
    "ParkReason",
    "Terminated",
    "Unchanged",
    "Wait",
    "cap_wake",
    "ceil_ms",
    "deadline_of",
    "due_wake",
    "envelope",
    "propose",
    "wake_name",
    "yield_moment",
]


class ParkReason(StrEnum):
    RETRY_BACKOFF = "retry_backoff"
    CHILD_RUNNING = "child_running"  # only child runs are awaited (no retry backoff)
    SLEEPING = "sleeping"  # a sleep is the earliest thing the parked superstep waits for
    AWAITING_MESSAGES = "awaiting_messages"  # only messages are awaited
    MESSAGE_KEPT = "message_kept"  # a message was kept in the mailbox; the run waits as it did
    AWAITING_INTERRUPTS = "awaiting_interrupts"
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"
    INTERRUPT_RESOLVED = "interrupt_resolved"
    RUN_RETRIED = "run_retried"
    STATE_EDITED = "state_edited"  # an operator changed state fields; due as it was
    DRAIN_BUDGET = "drain_budget"


@attrs.frozen
class Continue:
    """The run can advance right away: compute the next moment after committing this one."""


@attrs.frozen
class Park:
    """Stop after committing; ``wake`` says when the run is due again."""

    wake: Wake
    reason: ParkReason


Disposition: TypeAlias = Continue | Park


def due_wake(disposition: Disposition) -> Wake:
    """When the run is due again: at once (``Immediate``) after a ``Continue``, else the
    park's own wake. Match on this rather than on ``Park(wake=...)`` patterns: mypy does
    not narrow nested patterns, so only a flat match over ``Wake`` is checked exhaustive."""
    return Immediate() if isinstance(disposition, Continue) else disposition.wake


def wake_name(disposition: Disposition) -> str:
    """``continue``, ``immediate``, ``external``, ``at`` or ``terminal``."""
    if isinstance(disposition, Continue):
        return "continue"
    wake = disposition.wake
    match wake:
        case Immediate():
            return "immediate"
        case External():
            return "external"
        case At():
            return "at"
        case Terminal():
            return "terminal"
        case _:
            assert_never(wake)


@attrs.frozen(kw_only=True)
class Entry:
    """A runtime event before :func:`propose` gives it a sequence and the timestamp."""

    type: EventType
    step: int
    node_id: str | None = None
    channel_id: str | None = None
    task_id: str | None = None
    payload: JSONDict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Moment:
    """One commit boundary, complete and data-only."""

    run: Run
    events: tuple[Event, ...]
    checkpoint_type: CheckpointType
    metadata: JSONDict
    disposition: Disposition
    proposed_at: datetime
    pending_attempts: tuple[PendingWrite, ...] = ()

    def checkpoint(self) -> Checkpoint:
        """The checkpoint this moment becomes once committed."""
        return Checkpoint(
            type=self.checkpoint_type,
            seq=self.run.checkpoint_seq,
            run=self.run,
            events=self.events,
            created_at=self.proposed_at,
            metadata=self.metadata,
        )


@attrs.frozen
class Wait:
    """Nothing can run until an interrupt is resolved (the run is already ``waiting``)."""

    run: Run
    interrupt_ids: tuple[str, ...]


@attrs.frozen
class NotDue:
    """A parked superstep with no attempt due yet: nothing to commit before ``resume_at``."""

    run: Run
    resume_at: datetime
    wait_ms: int


@attrs.frozen
class Terminated:
    """The run is terminal; there is nothing to compute."""

    run: Run


@attrs.frozen
class Unchanged:
    """A mutation that needs no commit (cancelling a cancelled run)."""

    run: Run


def ceil_ms(delta: timedelta) -> int:
    """A wait in whole milliseconds, rounded up (never negative): waking early is useless."""
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return max(-(-micros // 1000), 0)


# -- the envelope --------------------------------------------------------------------------

_OUTCOMES = {
    EventType.NODE_COMPLETED: "completed",
    EventType.NODE_FAILED: "failed",
    EventType.INTERRUPT_REQUESTED: "interrupted",
}


def _active_superstep(run: Run) -> JSONValue:
    if not run.active_tasks and not run.pending_writes:
        return None
    tasks: list[JSONValue] = [
        {
            "task_id": t.task_id,
            "node_id": t.node_id,
            "scheduled_attempt": t.attempt,
            "idempotency_key": t.idempotency_key,
        }
        for t in sorted(run.active_tasks.values(), key=lambda t: (t.node_id, t.task_id))
    ]
    pending: list[JSONValue] = [
        {
            "task_id": w.task_id,
            "node_id": w.node_id,
            "attempted": w.attempt,
            "kind": str(w.kind),
            "idempotency_key": idempotency_key(w.task_id, w.attempt),
        }
        for w in sorted(run.pending_writes, key=lambda w: (w.node_id, w.task_id))
    ]
    return {"graph_step": run.step, "tasks": tasks, "pending_attempts": pending}


def _node_attempts(
    run: Run, events: Sequence[Event], new_writes: Sequence[PendingWrite]
) -> list[JSONValue]:
    out: list[JSONValue] = []
    listed: set[str] = set()
    for event in events:
        outcome = _OUTCOMES.get(event.type)
        if outcome is None or event.task_id is None:
            continue
        task = run.active_tasks.get(event.task_id)
        out.append(
            {
                "task_id": event.task_id,
                "node_id": event.node_id,
                "attempted": event.payload.get("attempt"),
                "outcome": outcome,
                "next_scheduled_attempt": None if task is None else task.attempt,
            }
        )
        listed.add(event.task_id)
    for write in new_writes:
        if write.task_id in listed:
            continue
        out.append(
            {
                "task_id": write.task_id,
                "node_id": write.node_id,
                "attempted": write.attempt,
                "outcome": f"pending_{write.kind}",
                "next_scheduled_attempt": None,
            }
        )
    return out


def envelope(
    run: Run,
    checkpoint_type: CheckpointType,
    disposition: Disposition,
    events: Sequence[Event],
    new_writes: Sequence[PendingWrite],
) -> JSONDict:
    """The checkpoint metadata envelope of runtime-spec §2.4, from the *proposed* run.

    ``events`` are the moment's runtime events (without ``checkpoint_committed``);
    ``new_writes`` the pending writes this moment created.
    """
    return {
        "checkpoint_seq": run.checkpoint_seq,
        "checkpoint_type": str(checkpoint_type),
        "graph_step": run.step,
        "wake_disposition": wake_name(disposition),
        "park_reason": None if isinstance(disposition, Continue) else str(disposition.reason),
        "active_superstep": _active_superstep(run),
        "node_attempts": _node_attempts(run, events, new_writes),
    }


def deadline_of(run: Run) -> datetime | None:
    """The run's deadline, or ``None`` (a malformed one counts as none: it was checked when
    the run started, and a run must never become unadvanceable over its metadata)."""
    text = run.metadata.get(DEADLINE_KEY)
    if not isinstance(text, str):
        return None
    try:
        return parse_timestamp(text)
    except ValueError:
        return None


def cap_wake(run: Run, wake: Wake) -> Wake:
    """``wake`` no later than the run's deadline (an ``External`` wake becomes it)."""
    if DEADLINE_KEY not in run.metadata:
        return wake
    deadline = deadline_of(run)
    if deadline is None:
        return wake
    match wake:
        case External():
            return At(deadline)
        case At(wake_at=moment) if moment > deadline:
            return At(deadline)
        case _:
            return wake


def propose(
    run: Run,
    checkpoint_type: CheckpointType,
    entries: Sequence[Entry],
    disposition: Disposition,
    now: datetime,
    *,
    new_writes: Sequence[PendingWrite] = (),
    changes: Mapping[str, Any] | None = None,
) -> Moment:
    """Seal a proposed run into a moment.

    Advances ``checkpoint_seq`` by one, gives the runtime entries the sequences after the
    run's ``event_seq`` (all stamped ``now``), builds the envelope, appends the one
    ``checkpoint_committed`` event (step = the proposed step, metadata = the envelope) and
    sets ``event_seq`` to its sequence. ``changes`` are further fields of the proposed run
    (as ``attrs.evolve`` takes them), for a caller that would otherwise copy the run twice;
    they may not touch ``id``, ``checkpoint_seq`` or ``event_seq``. A moment that changes
    the run's channels must pass them in ``changes`` (``run`` being the committed run), so
    the checkpoint's history entry sees both sides (:mod:`docket.core.history`).
    """
    if changes and not changes.keys().isdisjoint(("id", "checkpoint_seq", "event_seq")):
        raise ValueError("propose assigns the sequences itself; changes may not set them")
    if isinstance(disposition, Park) and DEADLINE_KEY in run.metadata:
        # every park is due again by the run's deadline at the latest (docket.core.waits)
        capped = cap_wake(run, disposition.wake)
        if capped != disposition.wake:
            disposition = Park(capped, disposition.reason)
    first = run.event_seq + 1
    events = [
        Event(
            run_id=run.id,
            seq=first + index,
            type=entry.type,
            step=entry.step,
            timestamp=now,
            node_id=entry.node_id,
            channel_id=entry.channel_id,
            task_id=entry.task_id,
            payload=entry.payload,
        )
        for index, entry in enumerate(entries)
    ]
    last = first + len(events)
    sealed = _evolve_run(
        run, {**(changes or {}), "checkpoint_seq": run.checkpoint_seq + 1, "event_seq": last}
    )
    metadata = envelope(sealed, checkpoint_type, disposition, events, new_writes)
    events.append(
        Event(
            run_id=run.id,
            seq=last,
            type=EventType.CHECKPOINT_COMMITTED,
            step=sealed.step,
            timestamp=now,
            payload=history_payload(run, sealed, base=wants_base(run, sealed)),
            metadata=metadata,
        )
    )
    return Moment(
        run=sealed,
        events=tuple(events),
        checkpoint_type=checkpoint_type,
        metadata=metadata,
        disposition=disposition,
        proposed_at=now,
        pending_attempts=tuple(new_writes),
    )


#: Run's init arguments and a getter of the matching attributes, for _evolve_run.
_RUN_ALIASES: Final = tuple(str(a.alias) for a in attrs.fields(Run) if a.init)
_RUN_VALUES: Final = operator.attrgetter(*(a.name for a in attrs.fields(Run) if a.init))


def _evolve_run(run: Run, changes: dict[str, Any]) -> Run:
    """``attrs.evolve(run, **changes)``: the same new Run, copied field by field in C
    rather than by attrs' generic loop (once per moment)."""
    if run.__class__ is not Run:
        return attrs.evolve(run, **changes)
    kwargs: dict[str, Any] = dict(zip(_RUN_ALIASES, _RUN_VALUES(run), strict=True))
    kwargs.update(changes)
    return Run(**kwargs)


def yield_moment(
    moment: Moment, reason: ParkReason = ParkReason.DRAIN_BUDGET
) -> Moment | NotContinue | MalformedMoment:
    """Turn a ``Continue`` moment into ``Park(Immediate, reason)`` (a drain-budget yield).

    Only the disposition, the envelope and the trailing event's metadata change; the run,
    sequences, timestamps, payloads and checkpoint type stay as they were.
    """
    if not isinstance(moment.disposition, Continue):
        name = wake_name(moment.disposition)
        return NotContinue(
            f"only a continue moment can yield, this one is {name}",
            details={"disposition": name},
        )
    events = moment.events
    marks = [i for i, e in enumerate(events) if e.type is EventType.CHECKPOINT_COMMITTED]
    if marks != [len(events) - 1]:
        return MalformedMoment("a moment ends with exactly one checkpoint_committed event")
    if events[-1].metadata != moment.metadata:
        return MalformedMoment("the checkpoint event's metadata is not the moment's envelope")
    disposition = Park(Immediate(), reason)
    metadata = envelope(
        moment.run, moment.checkpoint_type, disposition, events[:-1], moment.pending_attempts
    )
    last = attrs.evolve(events[-1], metadata=metadata)
    return attrs.evolve(
        moment, events=(*events[:-1], last), metadata=metadata, disposition=disposition
    )
