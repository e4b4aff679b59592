"""Durable records (layer 1): runs, events, checkpoints, graph refs, pages and scopes.

Everything here is a frozen attrs value. ``converter`` (cattrs) turns each record into
plain durable data and back; ``run_to_json``/``run_from_json`` and the event twins are
the one storage encoding every backend uses, so a run stored by one backend reads back
identically from any other.

Records are typed, but nothing stops a caller from handing in junk at run time, so the
validity checks (:func:`run_problems`, :func:`event_problems`) are written to inspect
arbitrary objects without raising.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, TypeAlias, TypeVar, assert_never, cast

import attrs
import cattrs
import orjson

from docket.values import (
    JSONDict,
    JSONValue,
    canonical_json,
    canonical_json_as,
    canonical_json_of_checked,
    durable_errors,
    encoder_for,
    from_micros,
    to_micros,
    utc,
)

_R = TypeVar("_R")

# -- enums ---------------------------------------------------------------------------------


class RunStatus(StrEnum):
    CREATED = "created"  # in memory only, between build and the initialising commit
    RUNNING = "running"
    WAITING = "waiting"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL: Final = frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED})
DURABLE_STATUSES: Final = frozenset(RunStatus) - {RunStatus.CREATED}


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


# -- the one storage encoding --------------------------------------------------------------


def format_timestamp(moment: datetime) -> str:
    """UTC, always six fractional digits, ``Z`` suffix: sorts and compares as text.

    ``isoformat`` rather than ``strftime``: ``%Y`` does not pad years before 1000, and
    such text neither sorts nor parses back.
    """
    global _recent_stamps
    if moment.__class__ is datetime and moment.tzinfo is UTC:
        # A commit formats the same few datetime objects again and again (its events all
        # carry one ``now``, which is also the run's updated_at): the last two are kept.
        # An exact UTC datetime is immutable, so the same object always reads the same.
        recent = _recent_stamps  # one read: another thread may swap the tuple meanwhile
        if recent[0] is moment:
            return recent[1]
        if recent[2] is moment:
            return recent[3]
        # Already UTC (every timestamp docket makes): the same text in one call.
        text = moment.isoformat(timespec="microseconds")[:-6] + "Z"
        _recent_stamps = (moment, text, recent[0], recent[1])
        return text
    return utc(moment).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


#: (datetime, text, datetime, text): the two exact UTC datetimes format_timestamp last
#: formatted, newest first.
_recent_stamps: tuple[object, str, object, str] = (None, "", None, "")


def parse_timestamp(text: str) -> datetime:
    if not isinstance(text, str) or not text.endswith("Z"):
        raise ValueError(f"timestamp must be an ISO-8601 UTC string ending in Z, got {text!r}")
    return utc(datetime.fromisoformat(text[:-1] + "+00:00"))


def _is_durable_alias(tp: object) -> bool:
    return tp is JSONValue or tp is JSONDict


def _structure_durable(value: object, tp: object) -> JSONValue:
    errors = durable_errors(value)
    if errors:
        raise ValueError("; ".join(errors))
    if tp is JSONDict and not isinstance(value, dict):
        raise ValueError(f"expected an object, got {type(value).__name__}")
    return cast(JSONValue, value)  # validated as durable just above


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook_func(_is_durable_alias, _structure_durable)
    conv.register_unstructure_hook_func(_is_durable_alias, lambda value: value)
    conv.register_unstructure_hook_func(
        lambda tp: isinstance(tp, type) and issubclass(tp, StrEnum), lambda value: value.value
    )
    conv.register_unstructure_hook(datetime, format_timestamp)
    conv.register_structure_hook(datetime, lambda value, _: parse_timestamp(value))
    conv.register_unstructure_hook_func(
        lambda tp: getattr(tp, "__origin__", None) is frozenset or tp is frozenset,
        lambda value: sorted(value),
    )
    return conv


#: cattrs converter for every record in this module (durable dict form, strict on load).
converter: Final = _make_converter()


class RecordDecodeError(ValueError):
    """Stored data that does not decode to the record it claims to be (every reason)."""

    def __init__(self, record: str, reasons: list[str]) -> None:
        self.reasons = tuple(reasons)
        super().__init__(f"not a valid {record}: " + "; ".join(reasons))


def _structure(data: object, cls: type[_R]) -> _R:
    if not isinstance(data, Mapping):
        raise RecordDecodeError(cls.__name__, [f"expected an object, got {type(data).__name__}"])
    try:
        return converter.structure(dict(data), cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        reasons = (
            cattrs.transform_error(exc)
            if isinstance(exc, cattrs.BaseValidationError)
            else [str(exc)]
        )
        raise RecordDecodeError(cls.__name__, reasons) from exc


def run_to_dict(run: Run) -> JSONDict:
    data: JSONDict = converter.unstructure(run)
    return data


def run_from_dict(data: Mapping[str, object]) -> Run:
    if isinstance(data, Mapping):
        try:
            fast = _plain_run(data)
        except Exception:  # whatever the shortcut trips on, the general decoder words it
            fast = None
        if fast is not None:
            return fast
    return _structure(data, Run)


_RUN_KEYS: Final = frozenset(attrs.fields_dict(Run))
_CHANNEL_KEYS: Final = frozenset(attrs.fields_dict(ChannelState))


# ``Any`` below, not ``cast``: typing.cast is a call, and these run per stored value.
def _plain_str(value: Any) -> str:
    if value.__class__ is not str:
        raise TypeError("not an exact str")
    return value


def _plain_int(value: Any) -> int:
    if value.__class__ is not int:
        raise TypeError("not an exact int")
    return value


def _plain_durable(value: Any) -> Any:
    if durable_errors(value):
        raise ValueError("not a durable value")
    return value


def _plain_object(value: Any) -> JSONDict:
    if value.__class__ is not dict or durable_errors(value):
        raise ValueError("not a durable object")
    return value


def _plain_strs(value: Any) -> list[str]:
    if value.__class__ is not list:
        raise TypeError("not a list")
    for item in value:
        if item.__class__ is not str:
            raise TypeError("not a list of exact str")
    return value


#: Exact types that are durable on their own (floats are checked: NaN is not durable).
_SCALARS: Final = frozenset({str, int, bool, type(None)})


def _plain_empty_list(value: Any) -> tuple[str, ...]:
    if value.__class__ is not list:
        raise TypeError("not a list")
    return ()


def _plain_channels(channels: Any) -> dict[str, ChannelState]:
    if channels.__class__ is not dict:
        raise TypeError("not an object")
    out: dict[str, ChannelState] = {}
    for key, fields in channels.items():
        if fields.__class__ is not dict or fields.keys() != _CHANNEL_KEYS:
            raise TypeError("not a plain channel object")
        value = fields["value"]
        seen = fields["barrier_seen"]
        out[_plain_str(key)] = ChannelState(
            channel_id=_plain_str(fields["channel_id"]),
            value=value if value.__class__ in _SCALARS else _plain_durable(value),
            version=_plain_int(fields["version"]),
            barrier_seen=tuple(_plain_strs(seen)) if seen else _plain_empty_list(seen),
        )
    return out


def _plain_run(data: Mapping[str, Any]) -> Run | None:
    """The run document the common way, or ``None`` to leave it to cattrs.

    A stored run is nearly always the exact shape :func:`run_to_dict` writes: every key,
    exact ``str``/``int``/``list``/``dict`` values. For that shape this builds the same
    :class:`Run` cattrs would (exact values pass cattrs' ``str()``/``int()`` unchanged)
    at a fraction of the cost; anything else (a missing or extra key, a subclass, a bad
    value) raises or answers ``None``, and the caller takes the general decoder, which
    alone words the errors. The rarer collections go through cattrs' own hooks.
    """
    if data.keys() != _RUN_KEYS:
        return None
    output, failure, finished = data["output"], data["failure"], data["finished_at"]
    return Run(
        id=_plain_str(data["id"]),
        graph_id=_plain_str(data["graph_id"]),
        graph_hash=_plain_str(data["graph_hash"]),
        status=RunStatus(_plain_str(data["status"])),
        started_at=parse_timestamp(_plain_str(data["started_at"])),
        updated_at=parse_timestamp(_plain_str(data["updated_at"])),
        input=_plain_object(data["input"]),
        output=None if output is None else _plain_object(output),
        failure=None if failure is None else converter.structure(failure, RunFailure),
        finished_at=None if finished is None else parse_timestamp(_plain_str(finished)),
        step=_plain_int(data["step"]),
        channels=_plain_channels(data["channels"]),
        changed_channels=frozenset(_plain_strs(data["changed_channels"])),
        pending_nodes=frozenset(_plain_strs(data["pending_nodes"])),
        active_tasks=converter.structure(data["active_tasks"], dict[str, TaskState]),
        pending_writes=converter.structure(data["pending_writes"], tuple[PendingWrite, ...]),
        interrupts=converter.structure(data["interrupts"], dict[str, InterruptState]),
        timers=converter.structure(data["timers"], dict[str, TimerState]),
        checkpoint_seq=_plain_int(data["checkpoint_seq"]),
        event_seq=_plain_int(data["event_seq"]),
        metadata=_plain_object(data["metadata"]),
    )


def run_to_json(run: Run) -> bytes:
    document = _plain_run_document(run)
    if document is None:
        return canonical_json(run_to_dict(run))
    data, orjson_ok = document
    if orjson_ok:
        try:
            return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # e.g. a lone surrogate: the json module decides, as canonical_json
            pass
    return canonical_json_of_checked(data)


def _plain_run_document(run: Run) -> tuple[dict[str, Any], bool] | None:
    """``run_to_dict(run)`` for the common shape, with the encoder canonical_json would
    pick for it, or ``None`` to leave the run to the general path.

    canonical_json walks the whole document; here the members this function builds are
    checked by exact type as they are built, and only the durable values (input, output,
    metadata, channel values) are walked, each at the depth it sits at in the document.
    Runs with a superstep in flight, interrupts, a failure or any value of unusual make
    take the general path.
    """
    if (
        run.__class__ is not Run
        or run.active_tasks.__class__ is not dict
        or run.active_tasks
        or run.pending_writes.__class__ is not tuple
        or run.pending_writes
        or run.interrupts.__class__ is not dict
        or run.interrupts
        or run.timers.__class__ is not dict
        or run.timers
        or run.failure is not None
        or run.status.__class__ is not RunStatus
        or run.channels.__class__ is not dict
    ):
        return None
    try:
        verdicts = [
            encoder_for(run.input, 1) if run.input.__class__ is dict else None,
            encoder_for(run.metadata, 1) if run.metadata.__class__ is dict else None,
            True if run.output is None else encoder_for(run.output, 1),
        ]
        if run.output.__class__ not in (dict, type(None)):
            return None
        channels: dict[str, Any] = {}
        for key, channel in run.channels.items():
            if (
                key.__class__ is not str
                or key[:1] == "$"
                or channel.__class__ is not ChannelState
                or channel.channel_id.__class__ is not str
                or channel.barrier_seen.__class__ is not tuple
            ):
                return None
            value = channel.value
            version = channel.version
            if value.__class__ not in _TEXT_LEAVES:  # None, bool and str need no walk
                verdicts.append(encoder_for(value, 3))
            if version.__class__ is not int or not 0 <= version <= MAX_COUNTER:
                return None
            seen = channel.barrier_seen
            channels[key] = {
                "channel_id": channel.channel_id,
                "value": value,
                "version": version,
                "barrier_seen": _plain_list(seen) if seen else [],
            }
        if not (
            run.id.__class__ is str
            and run.graph_id.__class__ is str
            and run.graph_hash.__class__ is str
            and run.changed_channels.__class__ is frozenset
            and run.pending_nodes.__class__ is frozenset
        ):
            return None
        finished = run.finished_at
        data: dict[str, Any] = {
            "id": run.id,
            "graph_id": run.graph_id,
            "graph_hash": run.graph_hash,
            "status": run.status,
            "started_at": format_timestamp(run.started_at),
            "updated_at": format_timestamp(run.updated_at),
            "input": run.input,
            "output": run.output,
            "failure": None,
            "finished_at": None if finished is None else format_timestamp(finished),
            "step": run.step,
            "channels": channels,
            "changed_channels": _plain_list(sorted(run.changed_channels)),
            "pending_nodes": _plain_list(sorted(run.pending_nodes)),
            "active_tasks": {},
            "pending_writes": [],
            "interrupts": {},
            "timers": {},
            "checkpoint_seq": run.checkpoint_seq,
            "event_seq": run.event_seq,
            "metadata": run.metadata,
        }
        verdicts += [_plain_counter(run.step), _plain_counter(run.checkpoint_seq)]
        verdicts.append(_plain_counter(run.event_seq))
    except Exception:  # e.g. a naive timestamp, or junk where a record belongs
        return None
    if None in verdicts:
        return None
    return data, all(verdicts)


_TEXT_LEAVES: Final = frozenset({str, bool, type(None)})


def _plain_counter(value: object) -> bool | None:
    """A counter the document can carry as is: exact int (orjson takes 64-bit ones)."""
    return encoder_for(value) if value.__class__ is int else None


def _plain_list(texts: Sequence[object]) -> list[str]:
    """``list(texts)``, refusing anything but exact ``str`` items (raises TypeError)."""
    out = list(texts)
    for text in out:
        if text.__class__ is not str:
            raise TypeError("not an exact str")
    return cast(list[str], out)


def run_from_json(data: bytes | str) -> Run:
    return run_from_dict(json.loads(data))


def event_to_dict(event: Event) -> JSONDict:
    data: JSONDict = converter.unstructure(event)
    return data


def event_from_dict(data: Mapping[str, object]) -> Event:
    return _structure(data, Event)


def event_to_json(event: Event) -> bytes:
    return canonical_json(event_to_dict(event))


def event_from_json(data: bytes | str) -> Event:
    return event_from_dict(json.loads(data))


def event_content(event: Event) -> bytes:
    """Canonical bytes that define event equality (``run_id``/``seq`` are the key)."""
    return canonical_json(
        {
            "type": str(event.type),
            "step": event.step,
            "node_id": event.node_id,
            "channel_id": event.channel_id,
            "task_id": event.task_id,
            "payload": event.payload,
            "metadata": event.metadata,
            "timestamp_us": to_micros(event.timestamp),
        }
    )


def _text_json(value: Any) -> bytes:
    """Canonical JSON of an exact ``str`` or ``None``; anything else raises TypeError."""
    if value is None:
        return b"null"
    if value.__class__ is not str:
        raise TypeError("not an exact str")
    return orjson.dumps(value)  # TypeError on a lone surrogate, like any odd text


_EVENT_TYPE_JSON: Final = {t: orjson.dumps(t.value) for t in EventType}


def event_encodings(event: Event) -> tuple[bytes, bytes, int]:
    """``(event_to_json(event), event_content(event), size)`` in one pass, where ``size``
    is ``len(canonical_json(payload)) + len(canonical_json(metadata))``.

    Canonical JSON of an object is its sorted members' canonical pieces joined, so the
    payload and metadata are encoded once and spliced into both documents. Events of
    unusual make (subclassed values, text no encoder takes) take the general functions,
    which also raise exactly as they always have.
    """
    try:
        return _spliced(event, canonical_json(event.payload), canonical_json(event.metadata))
    except Exception:  # the general encoders raise (or not) exactly as they always have
        content = event_content(event)
        size = len(canonical_json(event.payload)) + len(canonical_json(event.metadata))
        return event_to_json(event), content, size


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


def _spliced(event: Event, payload: bytes, metadata: bytes) -> tuple[bytes, bytes, int]:
    """The stored JSON and the content of ``event`` around its encoded payload and
    metadata; raises (TypeError, ValueError, ...) for anything but the usual make."""
    moment = event.timestamp
    kind = _EVENT_TYPE_JSON[event.type]
    if event.type.__class__ is not EventType or moment.__class__ is not datetime:
        raise TypeError("not an exact event type or datetime")
    head = b"".join(
        (
            b'{"channel_id":',
            _text_json(event.channel_id),
            b',"metadata":',
            metadata,
            b',"node_id":',
            _text_json(event.node_id),
            b',"payload":',
            payload,
        )
    )
    step = b',"step":%d,"task_id":' % _plain_int(event.step) + _text_json(event.task_id)
    document = b"".join(
        (
            head,
            b',"run_id":',
            _text_json(event.run_id),
            b',"seq":%d' % _plain_int(event.seq),
            step,
            b',"timestamp":"',
            format_timestamp(moment).encode(),
            b'","type":',
            kind,
            b"}",
        )
    )
    content = b"".join((head, step, b',"timestamp_us":%d,"type":' % to_micros(moment), kind, b"}"))
    return document, content, len(payload) + len(metadata)


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
MAX_COUNTER: Final = 2**63 - 1


def _is_int(value: object, minimum: int = 0) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and minimum <= value <= MAX_COUNTER
    )


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
    if task.status != TASK_RETRY_SCHEDULED:
        out.append(f"{where}: status must be {TASK_RETRY_SCHEDULED!r}")
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
    if not attempts or attempts != list(range(1, len(attempts) + 1)):
        out.append(f"{where}: failures must record attempts 1..n in order")
    if task.attempt != len(attempts) + 1:
        out.append(f"{where}: attempt must be one more than the recorded failures")
    if task.idempotency_key != idempotency_key(task.task_id, task.attempt):
        out.append(f"{where}: idempotency_key must be '<task_id>:<attempt>'")
    if task.started_at is not None or task.deadline_at is not None:
        out.append(f"{where}: a parked task has no started_at/deadline_at")
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
        if not isinstance(timer, TimerState) or timer.kind != TIMER_RETRY:
            out.append(f"timers.{key}: must be a retry TimerState")
        elif not _is_utc(timer.fires_at):
            out.append(f"timers.{key}: fires_at must be an aware UTC datetime")
    if not isinstance(run.timers, dict) or not isinstance(run.active_tasks, dict):
        out.append("timers/active_tasks: must be dicts")
        return
    for key, task in run.active_tasks.items():
        _add_task_problems(key, task, run, out)
    if set(run.active_tasks) != set(run.timers):
        out.append("timers: keys must equal the active task ids")
    writes = run.pending_writes
    if not isinstance(writes, tuple) or not all(isinstance(w, PendingWrite) for w in writes):
        out.append("pending_writes: must be a tuple of PendingWrite")
        return
    if (run.active_tasks or run.timers) and run.status is not RunStatus.RUNNING:
        out.append("active superstep: only a running run may have tasks or timers")
    # A node failure keeps its finished siblings' writes for a retry; reopened, the run
    # holds them with no task until the unfinished nodes are planned again.
    kept = run.status is RunStatus.FAILED and _kept_by(run.failure)
    if writes and run.status is not RunStatus.RUNNING and not kept:
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


__all__ = [
    "DURABLE_STATUSES",
    "SYSTEM",
    "TENANTLESS",
    "ChannelState",
    "Checkpoint",
    "CheckpointType",
    "Event",
    "EventPage",
    "EventType",
    "GraphRef",
    "GraphVersion",
    "GraphVersionCursor",
    "GraphVersionPage",
    "InterruptState",
    "InterruptStatus",
    "InvalidRunDocument",
    "OwnerScope",
    "PendingWrite",
    "RecordDecodeError",
    "Run",
    "RunCursor",
    "RunFailure",
    "RunInfo",
    "RunPage",
    "RunStatus",
    "RunSummary",
    "Scope",
    "System",
    "TaskFailure",
    "TaskState",
    "Tenant",
    "Tenantless",
    "TimerState",
    "WriteKind",
    "checked_event_encodings",
    "converter",
    "event_content",
    "event_encodings",
    "event_from_dict",
    "event_from_json",
    "event_problems",
    "event_to_dict",
    "event_to_json",
    "format_timestamp",
    "from_micros",
    "idempotency_key",
    "item_index",
    "item_task_id",
    "owner_scope",
    "parse_timestamp",
    "require_owner",
    "require_scope",
    "run_before",
    "run_from_dict",
    "run_from_json",
    "run_order_key",
    "run_problems",
    "run_to_dict",
    "run_to_json",
    "scope_admits",
    "task_id",
    "tenant_id_of",
    "validate_run",
    "version_before",
    "version_order_key",
]
