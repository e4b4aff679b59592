"""Telemetry: an in-process event bus for docket's lifecycle, storage and worker operations.

Every :class:`~docket.Docket` owns a :class:`Telemetry` bus (``docket.telemetry``), or
shares one given as ``Docket(..., telemetry=bus)``. Handlers attach to it and receive a
:class:`TelemetryEvent` for each operation:

* **spans** — an operation with a duration: ``<name>.start``, then exactly one of
  ``<name>.stop`` or ``<name>.exception``. Durations come from the monotonic clock. A
  span started while another is current (in the same task, or a task created inside it)
  records that span as its parent, so a bridge can rebuild the tree;
* **events** — one-off facts, e.g. ``docket.run.completed`` after the commit that
  completed a run, or ``docket.run.poisoned``.

The catalogue, with measurements and metadata, is in ``docs/telemetry.md``.

Handler rules: handlers are plain callables run inline, in the order they were
attached, on whatever thread emits (the event loop thread for everything docket does) —
keep them fast and hand slow work off. A handler that raises is **detached**: the failure
is logged once (with its traceback) and counted in :attr:`Telemetry.failures`; the run
that emitted the event is never affected.

The bus is per Docket rather than process-global so that two Dockets in one process
(tests, a tenant per Docket, a console next to a worker) can be observed separately;
pass the same bus to several Dockets to observe them together.

Logging: docket's loggers stamp ``run_id``, ``tenant_id``, ``task_id``, ``node_id`` and
``attempt`` on their records from the current operation. Add :class:`LogContextFilter` to
your own handler to get the same attributes on every record — including those your node
code logs — and use them in a format string (``%(run_id)s``).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType, TracebackType
from typing import Any, Final, Literal, TypeAlias, TypedDict, TypeVar, assert_never, cast

import attrs

from docket.contract.grouping import commit_claimed_in_order
from docket.core.outcomes import (
    AwaitingChild,
    Completed,
    Failed,
    Interrupted,
    Receiving,
    Sleeping,
    TaskOutcome,
)
from docket.errors import InvalidOptions
from docket.records import Checkpoint, EventType

__all__ = [
    "DOMAIN_EVENT_NAMES",
    "LOG_FIELDS",
    "NO_SPAN",
    "Attachment",
    "Handler",
    "LogContextFilter",
    "Measurements",
    "Metadata",
    "Phase",
    "Span",
    "Telemetry",
    "TelemetryEvent",
    "current_log_context",
    "instrument_backend",
    "log_context",
    "outcome_metadata",
    "stamp_logger",
    "store_result",
]

log = logging.getLogger("docket.telemetry")

_B = TypeVar("_B")

Phase: TypeAlias = Literal["start", "stop", "exception", "event"]


class Metadata(TypedDict, total=False):
    """What an event is about. Every key is optional; see docs/telemetry.md per event."""

    run_id: str
    tenant_id: str | None
    graph_id: str
    graph_hash: str
    task_id: str
    node_id: str
    channel_id: str
    attempt: int
    step: int
    checkpoint_seq: int
    status: str
    outcome: str
    result: str
    operation: str
    store: str
    worker: str
    reason: str
    kind: str
    error: str
    event_type: str
    payload: Mapping[str, object]
    limiter: str  # docket.node.limited: the queue an attempt waited for


class Measurements(TypedDict, total=False):
    """Numbers: ``duration`` (seconds, on ``.stop`` / ``.exception``), counts, sequence
    numbers."""

    duration: float
    monotonic_time: float
    seq: int
    step: int
    demand: int
    leases: int
    poisoned: int
    commits: int
    events: int
    activations: int
    refusals: int  # docket.node.limited: slots refused before the grant


@attrs.frozen(kw_only=True)
class TelemetryEvent:
    """One emission. ``name`` is the full name (``docket.node.execute.stop``); for span
    phases ``span`` is the span's name (``docket.node.execute``) and ``span_id`` /
    ``parent_id`` identify it and its parent within this process."""

    name: str
    phase: Phase
    measurements: Measurements
    metadata: Metadata
    span: str | None = None
    span_id: int | None = None
    parent_id: int | None = None


#: A handler: called inline with each event it subscribed to.
Handler: TypeAlias = Callable[[TelemetryEvent], object]


@attrs.frozen
class _Subscription:
    id: str
    handler: Handler
    names: frozenset[str] | None
    prefixes: tuple[str, ...]

    def wants(self, name: str) -> bool:
        if self.names is None and not self.prefixes:
            return True
        if self.names is not None and name in self.names:
            return True
        return any(name.startswith(prefix) for prefix in self.prefixes)


class Attachment:
    """The handle :meth:`Telemetry.attach` returns; :meth:`detach` removes the handler."""

    def __init__(self, bus: Telemetry, handler_id: str) -> None:
        self.bus = bus
        self.id = handler_id

    def detach(self) -> bool:
        """Remove the handler; ``False`` if it was already gone."""
        return self.bus.detach(self.id)

    def __repr__(self) -> str:
        return f"Attachment({self.id!r})"


# The span current in this context (task / thread), for parent links.
_current_span: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "docket_current_span", default=None
)
_span_ids = itertools.count(1)


class Telemetry:
    """The bus. Falsy while nobody listens, so hot paths can skip building metadata::

    if telemetry:
        telemetry.emit("docket.something", {...}, {...})
    """

    def __init__(self) -> None:
        self._subscriptions: tuple[_Subscription, ...] = ()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        #: ``(handler id, exception)`` for every handler detached because it raised.
        self.failures: list[tuple[str, BaseException]] = []

    def __bool__(self) -> bool:
        return bool(self._subscriptions)

    def __repr__(self) -> str:
        return f"Telemetry(handlers={[s.id for s in self._subscriptions]})"

    @property
    def handler_ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self._subscriptions)

    def attach(
        self,
        handler: Handler,
        *,
        handler_id: str | None = None,
        names: Iterable[str] | None = None,
        prefixes: Iterable[str] = (),
    ) -> Attachment:
        """Subscribe ``handler`` to every event, or to the full ``names`` given and the
        names starting with one of ``prefixes``. Safe from any thread.

        Raises :class:`~docket.errors.InvalidOptions` for a handler that is not callable
        or an id already attached.
        """
        if not callable(handler):
            raise InvalidOptions(f"a telemetry handler must be callable, got {handler!r}")
        chosen_names = None if names is None else frozenset(names)
        chosen_prefixes = tuple(prefixes)
        for item in (*(chosen_names or ()), *chosen_prefixes):
            if not isinstance(item, str) or not item:
                raise InvalidOptions(f"event names and prefixes are non-empty strings: {item!r}")
        with self._lock:
            chosen = handler_id if handler_id is not None else f"handler-{next(self._ids)}"
            if not isinstance(chosen, str) or not chosen:
                raise InvalidOptions(f"handler_id must be a non-empty string, got {chosen!r}")
            if any(s.id == chosen for s in self._subscriptions):
                raise InvalidOptions(f"a telemetry handler {chosen!r} is already attached")
            subscription = _Subscription(chosen, handler, chosen_names, chosen_prefixes)
            self._subscriptions = (*self._subscriptions, subscription)
        return Attachment(self, chosen)

    def detach(self, handler: str | Attachment) -> bool:
        """Remove a handler by id or handle; ``False`` if it was not attached."""
        handler_id = handler.id if isinstance(handler, Attachment) else handler
        with self._lock:
            kept = tuple(s for s in self._subscriptions if s.id != handler_id)
            removed = len(kept) != len(self._subscriptions)
            self._subscriptions = kept
        return removed

    # -- emitting ----------------------------------------------------------------------

    def emit(
        self,
        name: str,
        measurements: Measurements | None = None,
        metadata: Metadata | None = None,
    ) -> None:
        """Emit a one-off event."""
        if self._subscriptions:
            self._dispatch(
                TelemetryEvent(
                    name=name,
                    phase="event",
                    measurements=measurements or {},
                    metadata=metadata or {},
                )
            )

    def span(self, name: str, metadata: Metadata | None = None) -> Span:
        """Start a span now (emits ``<name>.start``). End it with :meth:`Span.stop` or
        :meth:`Span.fail`, or use it as a context manager (an exception leaving the block
        ends it with ``.exception`` and propagates)."""
        if not self._subscriptions:
            return NO_SPAN
        chosen: Metadata = {}
        if metadata:
            chosen.update(metadata)
        return Span(self, name, chosen)

    def _dispatch(self, event: TelemetryEvent) -> None:
        for subscription in self._subscriptions:
            if not subscription.wants(event.name):
                continue
            try:
                subscription.handler(event)
            except Exception as exc:
                self._drop(subscription, event, exc)

    def _drop(self, subscription: _Subscription, event: TelemetryEvent, exc: Exception) -> None:
        if self.detach(subscription.id):
            self.failures.append((subscription.id, exc))
            log.error(
                "telemetry handler %r raised on %s and was detached",
                subscription.id,
                event.name,
                exc_info=exc,
            )

    # -- domain events -------------------------------------------------------------------

    def committed(
        self,
        checkpoint: Checkpoint,
        *,
        operation: Literal["start", "moment", "signal"],
        tenant_id: str | None,
    ) -> None:
        """Emit one event per stored event of a committed checkpoint (after the commit)."""
        if not self._subscriptions:
            return
        run = checkpoint.run
        for stored in checkpoint.events:
            name = DOMAIN_EVENT_NAMES.get(stored.type)
            if name is None:
                continue
            metadata: Metadata = {
                "run_id": run.id,
                "tenant_id": tenant_id,
                "graph_id": run.graph_id,
                "graph_hash": run.graph_hash,
                "event_type": str(stored.type),
                "operation": operation,
                "status": str(run.status),
                "checkpoint_seq": checkpoint.seq,
                "payload": stored.payload,
            }
            if stored.node_id is not None:
                metadata["node_id"] = stored.node_id
            if stored.channel_id is not None:
                metadata["channel_id"] = stored.channel_id
            if stored.task_id is not None:
                metadata["task_id"] = stored.task_id
            self.emit(name, {"step": stored.step, "seq": stored.seq}, metadata)


#: Stored event type → telemetry event name. Every type has one (``run_cancelled``
#: included, unlike the system this port follows).
DOMAIN_EVENT_NAMES: Final[Mapping[EventType, str]] = {
    EventType.RUN_INITIALIZED: "docket.run.initialized",
    EventType.RUN_COMPLETED: "docket.run.completed",
    EventType.RUN_FAILED: "docket.run.failed",
    EventType.RUN_CANCELLED: "docket.run.cancelled",
    EventType.RUN_RETRIED: "docket.run.retried",
    EventType.CHECKPOINT_COMMITTED: "docket.checkpoint.committed",
    EventType.NODE_COMPLETED: "docket.node.completed",
    EventType.NODE_FAILED: "docket.node.failed",
    EventType.CHANNEL_UPDATED: "docket.channel.updated",
    EventType.EDGE_TRIGGERED: "docket.edge.triggered",
    EventType.INTERRUPT_REQUESTED: "docket.interrupt.requested",
    EventType.INTERRUPT_RESOLVED: "docket.interrupt.resolved",
}


class Span:
    """A running span. :meth:`set` adds metadata reported on its end."""

    __slots__ = ("_bus", "_ended", "_started", "_token", "id", "metadata", "name", "parent_id")

    def __init__(self, bus: Telemetry | None, name: str, metadata: Metadata) -> None:
        self._bus = bus
        self.name = name
        self.metadata = metadata
        self._ended = bus is None
        self._token: contextvars.Token[Span | None] | None = None
        self.id = 0
        self.parent_id: int | None = None
        self._started = 0.0
        if bus is None:
            return
        parent = _current_span.get()
        self.id = next(_span_ids)
        self.parent_id = parent.id if parent is not None else None
        self._token = _current_span.set(self)
        self._started = time.monotonic()
        bus._dispatch(self._event("start", {"monotonic_time": self._started}, metadata))

    def __bool__(self) -> bool:
        return self._bus is not None

    def _event(
        self, phase: Phase, measurements: Measurements, metadata: Metadata
    ) -> TelemetryEvent:
        return TelemetryEvent(
            name=f"{self.name}.{phase}",
            phase=phase,
            measurements=measurements,
            metadata=metadata.copy(),  # later ``set`` calls must not rewrite history
            span=self.name,
            span_id=self.id,
            parent_id=self.parent_id,
        )

    def set(self, metadata: Metadata) -> None:
        """Add (or overwrite) metadata to report when the span ends."""
        if self._bus is not None:
            self.metadata.update(metadata)

    def stop(
        self, metadata: Metadata | None = None, measurements: Measurements | None = None
    ) -> None:
        """End the span successfully (``<name>.stop``). Ending twice does nothing."""
        self._end("stop", metadata, measurements)

    def fail(self, exc: BaseException, metadata: Metadata | None = None) -> None:
        """End the span with ``<name>.exception`` (``kind`` = the exception's type)."""
        extra: Metadata = {"kind": type(exc).__name__, "error": str(exc)[:500]}
        extra.update(metadata or {})
        self._end("exception", extra, None)

    def _end(
        self, phase: Phase, metadata: Metadata | None, measurements: Measurements | None
    ) -> None:
        if self._ended or self._bus is None:
            return
        self._ended = True
        ended = time.monotonic()
        if self._token is not None:
            # ended in another context than it started in: nothing to restore there
            with contextlib.suppress(ValueError):
                _current_span.reset(self._token)
            self._token = None
        if metadata:
            self.metadata.update(metadata)
        numbers: Measurements = {"duration": ended - self._started, "monotonic_time": ended}
        numbers.update(measurements or {})
        self._bus._dispatch(self._event(phase, numbers, self.metadata))

    def __enter__(self) -> Span:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.stop()
        else:
            self.fail(exc)


#: The span handed out while nobody listens: every method is a no-op.
NO_SPAN: Final = Span(None, "", {})


# -- logging context -------------------------------------------------------------------------

#: The attributes :class:`LogContextFilter` stamps on log records.
LOG_FIELDS: Final = ("run_id", "tenant_id", "task_id", "node_id", "attempt")

_log_context: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "docket_log_context", default=MappingProxyType({})
)


def current_log_context() -> Mapping[str, object]:
    """The structured context of the current operation (run id, task id, …)."""
    return _log_context.get()


@contextlib.contextmanager
def log_context(**fields: object) -> Iterator[Mapping[str, object]]:
    """Add fields to the logging context for the duration of the block (``None`` values
    are ignored)."""
    merged = {**_log_context.get(), **{k: v for k, v in fields.items() if v is not None}}
    token = _log_context.set(merged)
    try:
        yield merged
    finally:
        with contextlib.suppress(ValueError):  # left in another context than entered
            _log_context.reset(token)


class LogContextFilter(logging.Filter):
    """Stamps :data:`LOG_FIELDS` on each record from the current docket context (``None``
    outside one), keeping values a caller passed with ``extra=``. Attach it to a handler
    so a format string can always use ``%(run_id)s``."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _log_context.get()
        for field in LOG_FIELDS:
            if field not in record.__dict__:
                setattr(record, field, context.get(field))
        return True


_FILTER: Final = LogContextFilter()


def stamp_logger(logger: logging.Logger) -> logging.Logger:
    """Give one of docket's loggers the context filter (idempotent)."""
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


stamp_logger(log)


def outcome_metadata(outcome: TaskOutcome) -> Metadata:
    """``outcome`` (``completed``, ``interrupted``, ``failed``; ``failed_permanently``
    for a failure that will not be retried) and, for failures, the reason."""
    match outcome:
        case Completed():
            return {"outcome": "completed"}
        case Interrupted():
            return {"outcome": "interrupted"}
        case Failed(retryable=retryable, reason=reason):
            return {"outcome": "failed" if retryable else "failed_permanently", "reason": reason}
        case AwaitingChild(child_run_id=child_run_id):
            return {"outcome": "awaiting_child", "reason": f"child run {child_run_id}"}
        case Sleeping():
            return {"outcome": "sleeping"}
        case Receiving(receive=receive):
            return {"outcome": "receiving", "reason": f"topic {receive.topic}"}
        case _:
            assert_never(outcome)


# -- storage operations ----------------------------------------------------------------------

# Answers from the error module that report success, not a refusal.
_SUCCESS_ANSWERS: Final = frozenset({"ClaimRefreshed", "Rescheduled"})


def store_result(answer: object) -> str:
    """A bounded label for a store answer: ``ok``, ``stale_fence`` or the snake-cased
    name of the typed refusal (``not_found``, ``retryable``, ``claim_lost`` …)."""
    kind = type(answer)
    if kind.__module__ != "docket.contract.errors" or kind.__name__ in _SUCCESS_ANSWERS:
        return "ok"
    if kind.__name__ == "StaleCheckpoint":
        return "stale_fence"
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in kind.__name__).lstrip("_")


class _InstrumentedStore:
    """Wraps one sub-store: each coroutine method runs inside a ``docket.store.operation``
    span. Handed out only while the bus listens."""

    def __init__(self, store: object, store_name: str, bus: Telemetry) -> None:
        self._store = store
        self._store_name = store_name
        self._bus = bus

    def __getattr__(self, name: str) -> object:
        target = getattr(self._store, name)
        if name.startswith("_") or not callable(target):
            return target
        if name == "commit_claimed_chain":
            # Each commit of a chain is its own operation, as when sent alone: chained
            # through this view, so every one of them has its span.
            view = self

            async def chain(owner: Any, commits: Any) -> object:
                return await commit_claimed_in_order(cast(Any, view), owner, commits)

            return chain
        bus, store_name = self._bus, self._store_name

        async def operation(*args: object, **kwargs: object) -> object:
            context = _log_context.get()
            metadata: Metadata = {"operation": name, "store": store_name}
            run_id = context.get("run_id")
            if isinstance(run_id, str):
                metadata["run_id"] = run_id
            if "tenant_id" in context:
                tenant = context["tenant_id"]
                metadata["tenant_id"] = tenant if isinstance(tenant, str) else None
            with bus.span("docket.store.operation", metadata) as span:
                answer = await target(*args, **kwargs)
                span.set({"result": store_result(answer)})
            return answer

        return operation


class _InstrumentedBackend:
    """The backend seen through the bus. Explicit properties keep the idle path cheap:
    while nobody listens, a store property hands out the backend's own store."""

    def __init__(self, backend: Any, bus: Telemetry) -> None:
        self._backend = backend
        self._bus = bus
        self._views: dict[str, _InstrumentedStore] = {}

    def _view(self, name: str, store: object) -> object:
        # The backend's store is re-read on every access (it may hand out fresh
        # objects); its view is reused while the store object stays the same.
        view = self._views.get(name)
        if view is None or view._store is not store:
            view = _InstrumentedStore(store, name, self._bus)
            self._views[name] = view
        return view

    @property
    def graphs(self) -> object:
        store = self._backend.graphs
        return self._view("graphs", store) if self._bus._subscriptions else store

    @property
    def runs(self) -> object:
        store = self._backend.runs
        return self._view("runs", store) if self._bus._subscriptions else store

    @property
    def events(self) -> object:
        store = self._backend.events
        return self._view("events", store) if self._bus._subscriptions else store

    @property
    def transitions(self) -> object:
        store = self._backend.transitions
        return self._view("transitions", store) if self._bus._subscriptions else store

    @property
    def now(self) -> object:
        return self._backend.now

    @property
    def wait_for_work(self) -> object:
        return self._backend.wait_for_work

    def __getattr__(self, name: str) -> object:
        return getattr(self._backend, name)

    def __repr__(self) -> str:
        return f"instrumented({self._backend!r})"


def instrument_backend(backend: _B, bus: Telemetry) -> _B:
    """A view of ``backend`` whose store calls (``graphs``, ``runs``, ``events``,
    ``transitions``) emit ``docket.store.operation`` spans on ``bus`` while it has
    handlers. ``now``, ``wait_for_work``, ``open`` and ``close`` pass through silently."""
    return cast(_B, _InstrumentedBackend(backend, bus))
