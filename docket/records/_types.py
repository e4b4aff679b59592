"""The record types (layer 1): enums, scopes, runs and their parts, events, graph
references, operational views, and pages with the one implementation of the cursor rules."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Final, TypeAlias, TypeVar, assert_never

import attrs

from docket.values import (
    JSONDict,
    JSONValue,
    to_micros,
)

_R = TypeVar("_R")

# the largest counter (seq, step, version) any backend must hold: a signed 64-bit integer
MAX_COUNTER: Final = 2**63 - 1

# -- enums ---------------------------------------------------------------------------------


class RunStatus(StrEnum):
    CREATED = "created"  # in memory only, between build and the initialising commit
    RUNNING = "running"
    WAITING = "waiting"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # reported by the facade only, never stored: a start an admission limit holds
    # (Feature.ADMISSION; docs/queues.md#admission-limits), not initialised yet
    QUEUED = "queued"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL: Final = frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED})
DURABLE_STATUSES: Final = frozenset(RunStatus) - {RunStatus.CREATED, RunStatus.QUEUED}


class EventType(StrEnum):
    RUN_INITIALIZED = "run_initialized"
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"
    RUN_RETRIED = "run_retried"  # an operator reopened a failed run (docs/execution.md)
    CHECKPOINT_COMMITTED = "checkpoint_committed"
    NODE_COMPLETED = "node_completed"
    NODE_FAILED = "node_failed"
    CHANNEL_UPDATED = "channel_updated"
    EDGE_TRIGGERED = "edge_triggered"
    INTERRUPT_REQUESTED = "interrupt_requested"
    INTERRUPT_RESOLVED = "interrupt_resolved"
    CHILD_STARTED = "child_started"  # a child node's attempt asked for its child run
    SLEEP_STARTED = "sleep_started"  # a node's attempt asked the run to sleep (a timer)
    MESSAGE_WAITING = "message_waiting"  # a node's attempt waits for a message on a topic
    MESSAGE_RECEIVED = "message_received"  # a message was sent to the run (and kept)
    MESSAGE_CONSUMED = "message_consumed"  # a waiting attempt took a message (exactly once)
    STATE_EDITED = "state_edited"  # an operator changed state fields (update_state)


class CheckpointType(StrEnum):
    RUN_INITIALIZED = "run_initialized"
    STEP_COMMITTED = "step_committed"
    RETRY_SCHEDULED = "retry_scheduled"
    INTERRUPT_REQUESTED = "interrupt_requested"
    INTERRUPT_RESOLVED = "interrupt_resolved"
    RUN_COMPLETED = "run_completed"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"


class InterruptStatus(StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"


class WriteKind(StrEnum):
    UPDATE = "update"
    INTERRUPT = "interrupt"


TASK_RETRY_SCHEDULED: Final = "retry_scheduled"
TIMER_RETRY: Final = "retry"
# A child node's attempt waiting for its child run (docs/execution.md, child runs): the
# task's metadata names the child (``child_run_id``), its timer is when the parent looks
# at the child again should the child's hand-off be lost.
TASK_CHILD_RUNNING: Final = "child_running"
TIMER_CHILD: Final = "child"
#: Where a child run keeps the link to its parent (``Run.metadata``).
PARENT_KEY: Final = "docket.parent"
# Durable time and messages (docs/execution.md, durable time): a sleeping attempt keeps the
# update it will write when its ``sleep`` timer fires (``metadata.update``); an attempt
# waiting for a message names its topic (``metadata.topic``) and has a ``message`` timer
# only when it gives up at some time.
TASK_SLEEPING: Final = "sleeping"
TIMER_SLEEP: Final = "sleep"
TASK_WAITING_MESSAGE: Final = "waiting_message"
TIMER_MESSAGE: Final = "message"
#: A run's deadline (``Run.metadata``, an ISO-8601 UTC timestamp): past it, the run fails.
DEADLINE_KEY: Final = "docket.deadline"
#: A run started later than it was created: when (``Run.metadata``, ISO-8601 UTC).
START_AT_KEY: Final = "docket.start_at"
#: Messages sent to a run and not consumed yet, and the idempotency keys it has seen.
MAILBOX_KEY: Final = "docket.mailbox"
#: On a run a schedule started: the schedule and the tick (``Run.metadata``).
SCHEDULE_KEY: Final = "docket.schedule"

# -- scopes --------------------------------------------------------------------------------


@attrs.frozen
class System:
    """Every tenant's rows; reserved for dispatchers and recovery (``claim_due``, listing)."""


@attrs.frozen
class Tenantless:
    """Only rows that have no tenant. Not an unscoped read."""


def _non_empty_str(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty string, got {value!r}")


@attrs.frozen
class Tenant:
    """Only the rows of tenant ``id``."""

    id: str = attrs.field(validator=_non_empty_str)


OwnerScope: TypeAlias = Tenantless | Tenant
Scope: TypeAlias = System | Tenantless | Tenant

SYSTEM: Final = System()
TENANTLESS: Final = Tenantless()


def tenant_id_of(owner: OwnerScope) -> str | None:
    return owner.id if isinstance(owner, Tenant) else None


def owner_scope(tenant_id: str | None) -> OwnerScope:
    return TENANTLESS if tenant_id is None else Tenant(tenant_id)


def scope_admits(scope: Scope, tenant_id: str | None) -> bool:
    """Whether a row owned by ``tenant_id`` is visible to ``scope``."""
    match scope:
        case System():
            return True
        case Tenantless():
            return tenant_id is None
        case Tenant(id=wanted):
            return tenant_id == wanted
        case _:
            assert_never(scope)


def require_scope(scope: object) -> Scope:
    if not isinstance(scope, System | Tenantless | Tenant):
        raise TypeError(f"expected System, Tenantless or Tenant, got {scope!r}")
    return scope


def require_owner(scope: object) -> OwnerScope:
    if isinstance(scope, System):
        raise ValueError("System is not an owner scope; name the tenant (or Tenantless)")
    if not isinstance(scope, Tenantless | Tenant):
        raise TypeError(f"expected Tenantless or Tenant, got {scope!r}")
    return scope


# -- run sub-records -----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ChannelState:
    channel_id: str
    value: JSONValue = None
    version: int = 0
    barrier_seen: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class TaskFailure:
    attempt: int
    reason: str


@attrs.frozen(kw_only=True)
class TaskState:
    task_id: str
    node_id: str
    step: int
    attempt: int
    status: str
    input_hash: str
    idempotency_key: str
    snapshot: JSONDict = attrs.field(factory=dict)
    source_versions: dict[str, int] = attrs.field(factory=dict)
    started_at: datetime | None = None
    deadline_at: datetime | None = None
    failures: tuple[TaskFailure, ...] = ()
    metadata: JSONDict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class PendingWrite:
    """A completed sibling result held back until its superstep's barrier commits."""

    task_id: str
    node_id: str
    attempt: int
    kind: WriteKind
    value: JSONDict


@attrs.frozen(kw_only=True)
class InterruptState:
    id: str
    node_id: str
    status: InterruptStatus
    resume_channel: str
    schema: JSONDict | None
    created_at: datetime
    resolved_at: datetime | None = None
    metadata: JSONDict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class TimerState:
    kind: str
    fires_at: datetime


@attrs.frozen(kw_only=True)
class RunFailure:
    code: str
    message: str
    node_id: str | None = None
    details: JSONDict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Run:
    """The run document: everything the graph execution has committed, nothing operational."""

    id: str
    graph_id: str
    graph_hash: str
    status: RunStatus
    started_at: datetime
    updated_at: datetime
    input: JSONDict = attrs.field(factory=dict)
    output: JSONDict | None = None
    failure: RunFailure | None = None
    finished_at: datetime | None = None
    step: int = 0
    channels: dict[str, ChannelState] = attrs.field(factory=dict)
    changed_channels: frozenset[str] = frozenset()
    pending_nodes: frozenset[str] = frozenset()
    active_tasks: dict[str, TaskState] = attrs.field(factory=dict)
    pending_writes: tuple[PendingWrite, ...] = ()
    interrupts: dict[str, InterruptState] = attrs.field(factory=dict)
    timers: dict[str, TimerState] = attrs.field(factory=dict)
    checkpoint_seq: int = 0
    event_seq: int = 0
    metadata: JSONDict = attrs.field(factory=dict)

    @property
    def immutable_identity(self) -> tuple[str, str, str, datetime]:
        return (self.id, self.graph_id, self.graph_hash, self.started_at)

    @property
    def open_interrupts(self) -> dict[str, InterruptState]:
        """The interrupts still waiting for an answer, by id (``interrupts`` also keeps the
        resolved ones, so a run that paused twice has more there than it waits for)."""
        return {k: i for k, i in self.interrupts.items() if i.status is InterruptStatus.OPEN}


# -- events and checkpoints ----------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Event:
    run_id: str
    seq: int
    type: EventType
    step: int
    timestamp: datetime
    node_id: str | None = None
    channel_id: str | None = None
    task_id: str | None = None
    payload: JSONDict = attrs.field(factory=dict)
    metadata: JSONDict = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Checkpoint:
    """What one durable commit produced; exists only after the commit succeeded."""

    type: CheckpointType
    seq: int
    run: Run
    events: tuple[Event, ...]
    created_at: datetime
    metadata: JSONDict = attrs.field(factory=dict)


# -- graph references ----------------------------------------------------------------------


@attrs.frozen
class GraphRef:
    """A scope-relative address of one immutable graph version (not a credential)."""

    graph_id: str
    graph_hash: str


@attrs.frozen(kw_only=True)
class GraphVersion:
    ref: GraphRef
    published_at: datetime


# -- operational views ---------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RunInfo:
    """The run document plus the backend's operational facts. Never carries the token."""

    run: Run
    tenant_id: str | None
    wake_at: datetime | None
    claimed_at: datetime | None
    claim_attempts: int
    claim_abandons: int
    poisoned_at: datetime | None
    poison_reason: str | None
    latest_checkpoint_type: CheckpointType
    # flow control (Feature.QUEUES): where the run waits for a worker, set at initialize;
    # a backend without queues reports the defaults
    queue: str = "default"
    priority: int = 0

    @property
    def poisoned(self) -> bool:
        return self.poisoned_at is not None

    @property
    def claimed(self) -> bool:
        return self.claimed_at is not None


@attrs.frozen(kw_only=True)
class RunSummary:
    """What a collection read returns: index columns only, never the decoded state."""

    id: str
    tenant_id: str | None
    graph_id: str
    graph_hash: str
    status: RunStatus
    step: int
    checkpoint_seq: int
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @classmethod
    def of(cls, run: Run, tenant_id: str | None) -> RunSummary:
        return cls(
            id=run.id,
            tenant_id=tenant_id,
            graph_id=run.graph_id,
            graph_hash=run.graph_hash,
            status=run.status,
            step=run.step,
            checkpoint_seq=run.checkpoint_seq,
            started_at=run.started_at,
            updated_at=run.updated_at,
            finished_at=run.finished_at,
        )


# -- pages and cursors (one implementation of the cursor rules for every backend) ----------


@attrs.frozen
class RunCursor:
    """Exclusive keyset position in newest-first run order ``(started_at, id)``."""

    started_at: datetime
    run_id: str


@attrs.frozen
class GraphVersionCursor:
    """Exclusive keyset position in newest-first version order ``(published_at, hash)``."""

    published_at: datetime
    graph_hash: str


def run_order_key(summary: RunSummary) -> tuple[int, str]:
    """Sort key for newest-first run listing (use with ``reverse=True``)."""
    return (to_micros(summary.started_at), summary.id)


def run_before(summary: RunSummary, cursor: RunCursor | None) -> bool:
    """Whether ``summary`` lies strictly after ``cursor`` in newest-first order."""
    if cursor is None:
        return True
    return run_order_key(summary) < (to_micros(cursor.started_at), cursor.run_id)


def version_order_key(version: GraphVersion) -> tuple[int, str]:
    return (to_micros(version.published_at), version.ref.graph_hash)


def version_before(version: GraphVersion, cursor: GraphVersionCursor | None) -> bool:
    if cursor is None:
        return True
    return version_order_key(version) < (to_micros(cursor.published_at), cursor.graph_hash)


@attrs.frozen(kw_only=True)
class RunPage:
    runs: tuple[RunSummary, ...]
    next_before: RunCursor | None
    has_more: bool

    @classmethod
    def from_candidates(
        cls, candidates: Sequence[RunSummary], limit: int, before: RunCursor | None
    ) -> RunPage:
        """Build a page from up to ``limit + 1`` candidates already in newest-first order."""
        runs = tuple(candidates[:limit])
        cursor = RunCursor(runs[-1].started_at, runs[-1].id) if runs else before
        return cls(runs=runs, next_before=cursor, has_more=len(candidates) > limit)


@attrs.frozen(kw_only=True)
class GraphVersionPage:
    versions: tuple[GraphVersion, ...]
    next_before: GraphVersionCursor | None
    has_more: bool

    @classmethod
    def from_candidates(
        cls, candidates: Sequence[GraphVersion], limit: int, before: GraphVersionCursor | None
    ) -> GraphVersionPage:
        versions = tuple(candidates[:limit])
        cursor = (
            GraphVersionCursor(versions[-1].published_at, versions[-1].ref.graph_hash)
            if versions
            else before
        )
        return cls(versions=versions, next_before=cursor, has_more=len(candidates) > limit)


@attrs.frozen(kw_only=True)
class EventPage:
    """Ascending events after a cursor, with the retained bounds read in the same snapshot.

    ``latest_seq`` is the run document's ``event_seq``; ``latest_seq > 0`` with
    ``latest_available_seq is None`` means every event was pruned.
    """

    events: tuple[Event, ...]
    next_after_seq: int
    has_more: bool
    oldest_available_seq: int | None
    latest_available_seq: int | None
    latest_seq: int

    @classmethod
    def from_candidates(
        cls,
        candidates: Sequence[Event],
        *,
        limit: int,
        after_seq: int,
        oldest_available_seq: int | None,
        latest_available_seq: int | None,
        latest_seq: int,
    ) -> EventPage:
        events = tuple(candidates[:limit])
        next_after = events[-1].seq if events else after_seq
        has_more = latest_available_seq is not None and latest_available_seq > next_after
        return cls(
            events=events,
            next_after_seq=next_after,
            has_more=has_more,
            oldest_available_seq=oldest_available_seq,
            latest_available_seq=latest_available_seq,
            latest_seq=latest_seq,
        )
