"""OpenTelemetry bridge: docket's telemetry bus as OTel traces and metrics.

Needs the ``otel`` extra (``pip install 'docket[otel]'``, which brings
``opentelemetry-api``); configure an SDK (exporters, sampling) as for any OTel app::

    import docket.otel

    instrumentation = docket.otel.instrument(my_docket)   # global providers by default
    ...
    instrumentation.uninstrument()

Traces: every docket span becomes an OTel span with the same parent/child links —
``docket.run.start``, ``docket.run.resolve_interrupt``, ``docket.run.cancel``,
``docket.run.retry_poisoned``, ``docket.worker.claim``, ``docket.run.drain`` (one claimed
lease) > ``docket.run.step`` (one superstep) > ``docket.node.execute`` (one attempt) and
``docket.store.<operation>`` (one store call, e.g. ``docket.store.commit_claimed``).
Attributes are the metadata, prefixed ``docket.``; a span that ended with an exception
has status ERROR and an ``exception`` event. Docket's spans are made current while they
run, so spans your node code opens nest under ``docket.node.execute``.

Metrics (attributes are bounded: never run, tenant or graph ids):

=============================  =========  ============================================
instrument                     kind       attributes
=============================  =========  ============================================
``docket.runs.started``        counter    —
``docket.runs.finished``       counter    ``status`` (done, failed, cancelled)
``docket.runs.poisoned``       counter    ``operation`` (claim_due, abandon_claim)
``docket.transitions``         counter    ``operation`` (start, moment, signal)
``docket.claim.duration``      histogram  ``result`` (seconds per ``claim_due``)
``docket.commit.duration``     histogram  ``operation``, ``result`` (seconds per commit)
``docket.node.duration``       histogram  ``node_id``, ``outcome`` (seconds per attempt)
``docket.store.duration``      histogram  ``operation``, ``result`` (every store call)
=============================  =========  ============================================

Transitions per second is the rate of ``docket.transitions``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from docket.errors import DocketError
from docket.telemetry import Attachment, Telemetry, TelemetryEvent

if TYPE_CHECKING:
    from docket.facade import Docket

__all__ = ["Instrumentation", "OpenTelemetryUnavailable", "instrument"]

_COMMITS: Final = frozenset({"initialize", "commit_claimed", "commit_unclaimed"})
_FINISHED: Final = {
    "docket.run.completed": "done",
    "docket.run.failed": "failed",
    "docket.run.cancelled": "cancelled",
}


class OpenTelemetryUnavailable(DocketError, ImportError):
    """``opentelemetry-api`` is not installed: install the ``docket[otel]`` extra."""

    code = "otel_unavailable"


def _import_api() -> Any:
    try:
        import opentelemetry.context
        import opentelemetry.metrics
        import opentelemetry.trace
    except ImportError as exc:
        raise OpenTelemetryUnavailable(
            "the OpenTelemetry bridge needs opentelemetry-api: pip install 'docket[otel]'",
            details={"missing": str(exc.name or exc)},
        ) from None
    return opentelemetry


class Instrumentation:
    """A live bridge from one bus to OpenTelemetry; :meth:`uninstrument` ends it."""

    def __init__(self, bus: Telemetry, tracer_provider: Any, meter_provider: Any) -> None:
        otel = _import_api()
        self._trace = otel.trace
        self._context = otel.context
        self.bus = bus
        self._tracer = otel.trace.get_tracer("docket", tracer_provider=tracer_provider)
        meter = otel.metrics.get_meter("docket", meter_provider=meter_provider)
        self._runs_started = meter.create_counter(
            "docket.runs.started", unit="{run}", description="Runs initialized"
        )
        self._runs_finished = meter.create_counter(
            "docket.runs.finished", unit="{run}", description="Runs that reached a final status"
        )
        self._runs_poisoned = meter.create_counter(
            "docket.runs.poisoned", unit="{run}", description="Runs set aside as poisoned"
        )
        self._transitions = meter.create_counter(
            "docket.transitions", unit="{transition}", description="Committed checkpoints"
        )
        self._claim_duration = meter.create_histogram(
            "docket.claim.duration", unit="s", description="Latency of one claim_due"
        )
        self._commit_duration = meter.create_histogram(
            "docket.commit.duration", unit="s", description="Latency of one transition commit"
        )
        self._node_duration = meter.create_histogram(
            "docket.node.duration", unit="s", description="Duration of one node attempt"
        )
        self._store_duration = meter.create_histogram(
            "docket.store.duration", unit="s", description="Latency of one store call"
        )
        # span id → (OTel span, context token); touched only from the emitting thread(s).
        self._open: dict[int, tuple[Any, object]] = {}
        self._lock = threading.Lock()
        self._attachment: Attachment | None = bus.attach(self._handle, handler_id=_handler_id())

    @property
    def active(self) -> bool:
        return self._attachment is not None

    def uninstrument(self) -> None:
        """Detach from the bus and end spans still open (idempotent)."""
        attachment, self._attachment = self._attachment, None
        if attachment is not None:
            attachment.detach()
        with self._lock:
            still_open, self._open = self._open, {}
        for span, _ in still_open.values():
            span.end()

    # -- the handler ---------------------------------------------------------------------

    def _handle(self, event: TelemetryEvent) -> None:
        if event.phase == "start":
            self._start(event)
        elif event.phase in ("stop", "exception"):
            self._end(event)
        self._measure(event)

    def _start(self, event: TelemetryEvent) -> None:
        assert event.span is not None and event.span_id is not None
        parent_context = None
        with self._lock:
            parent = self._open.get(event.parent_id) if event.parent_id is not None else None
        if parent is not None:
            parent_context = self._trace.set_span_in_context(parent[0])
        span = self._tracer.start_span(
            _span_name(event), context=parent_context, attributes=_attributes(event.metadata)
        )
        token = self._context.attach(self._trace.set_span_in_context(span))
        with self._lock:
            self._open[event.span_id] = (span, token)

    def _end(self, event: TelemetryEvent) -> None:
        if event.span_id is None:
            return
        with self._lock:
            entry = self._open.pop(event.span_id, None)
        if entry is None:  # started before the bridge was attached
            return
        span, token = entry
        self._detach(token)
        span.set_attributes(_attributes(event.metadata))
        if event.phase == "exception":
            span.add_event(
                "exception",
                {
                    "exception.type": str(event.metadata.get("kind", "")),
                    "exception.message": str(event.metadata.get("error", "")),
                },
            )
            span.set_status(
                self._trace.Status(self._trace.StatusCode.ERROR, event.metadata.get("kind"))
            )
        span.end()

    def _detach(self, token: object) -> None:
        # Docket ends every span in the context that started it, so the token restores
        # the context as it was (OTel logs, never raises, on a mismatch).
        self._context.detach(token)

    def _measure(self, event: TelemetryEvent) -> None:
        name, md = event.name, event.metadata
        duration = event.measurements.get("duration")
        if name == "docket.run.initialized":
            self._runs_started.add(1)
        elif name in _FINISHED:
            self._runs_finished.add(1, {"status": _FINISHED[name]})
        elif name == "docket.checkpoint.committed":
            self._transitions.add(1, {"operation": md.get("operation", "")})
        elif name == "docket.run.poisoned":
            self._runs_poisoned.add(1, {"operation": md.get("operation", "")})
        elif duration is None:
            return
        elif event.span == "docket.worker.claim":
            self._claim_duration.record(duration, {"result": _result(event)})
        elif event.span == "docket.node.execute":
            outcome = md.get("outcome", "cancelled") if event.phase == "stop" else "cancelled"
            self._node_duration.record(
                duration, {"node_id": md.get("node_id", ""), "outcome": outcome}
            )
        elif event.span == "docket.store.operation":
            labels = {"operation": md.get("operation", ""), "result": _result(event)}
            self._store_duration.record(duration, labels)
            if md.get("operation") in _COMMITS:
                self._commit_duration.record(duration, labels)


def instrument(
    target: Docket | Telemetry,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> Instrumentation:
    """Bridge ``target``'s telemetry (a :class:`~docket.Docket` or a bus) to OpenTelemetry.

    ``None`` providers mean OTel's global ones. Raises :class:`OpenTelemetryUnavailable`
    when the ``otel`` extra is missing.
    """
    bus = target if isinstance(target, Telemetry) else getattr(target, "telemetry", None)
    if not isinstance(bus, Telemetry):
        raise TypeError(f"instrument() takes a Docket or a Telemetry bus, got {target!r}")
    return Instrumentation(bus, tracer_provider, meter_provider)


_instances = itertools.count(1)


def _handler_id() -> str:
    return f"docket.otel-{next(_instances)}"


def _span_name(event: TelemetryEvent) -> str:
    if event.span == "docket.store.operation":
        return f"docket.store.{event.metadata.get('operation', 'operation')}"
    return event.span or event.name


def _result(event: TelemetryEvent) -> str:
    if event.phase == "exception":
        return "exception"
    return str(event.metadata.get("result", "ok"))


def _attributes(metadata: Mapping[str, object]) -> dict[str, str | int | float | bool]:
    """OTel attributes: scalars only, ``docket.`` prefixed; payloads are left out (they
    are user data of any size)."""
    out: dict[str, str | int | float | bool] = {}
    for key, value in metadata.items():
        if value is None or key == "payload":
            continue
        if isinstance(value, str | int | float | bool):
            out[f"docket.{key}"] = value
        else:
            out[f"docket.{key}"] = str(value)
    return out
