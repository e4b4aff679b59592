"""The OpenTelemetry bridge with the real SDK and in-memory exporters: the spans and
metrics of runs from start to finish on a SQLite file."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import docket.otel
from docket import FINISH, START, Graph, GraphBuilder, S
from docket.contract.proposals import ClaimPolicy, PoisonedClaim
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.records import RunStatus
from docket.telemetry import Telemetry
from tests.telemetry.helpers import asking, sqlite, two_steps, wait_for

Points = dict[tuple[str, tuple[tuple[str, object], ...]], float]


class Otel:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def finished(self) -> tuple[ReadableSpan, ...]:
        return tuple(self.spans.get_finished_spans())

    def points(self) -> Points:
        """``(instrument, sorted attributes) -> value`` (sum, or count for histograms)."""
        out: Points = {}
        data = self.reader.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        key = (metric.name, tuple(sorted((point.attributes or {}).items())))
                        if isinstance(point, HistogramDataPoint):
                            out[key] = point.count
                        else:
                            assert isinstance(point, NumberDataPoint)
                            out[key] = point.value
        return out


@pytest.fixture
def otel() -> Iterator[Otel]:
    bridge = Otel()
    yield bridge
    bridge.tracer_provider.shutdown()
    bridge.meter_provider.shutdown()


TRACED = NodeRegistry()


@TRACED.node("traced")
def traced(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    """Opens a span of its own with the tracer the test hands it."""
    tracer = ctx.application["tracer"]
    assert isinstance(tracer, trace.Tracer)
    with tracer.start_as_current_span("user.work"):
        return {"text": "traced"}


def traced_graph() -> Graph:
    return (
        GraphBuilder("traced")
        .field("text", S.string())
        .node("t", "traced")
        .edge("begin", START, "t")
        .edge("end", "t", FINISH)
        .output("text")
        .build()
    )


def total(points: Points, name: str) -> float:
    return sum(value for (metric, _), value in points.items() if metric == name)


def test_a_run_from_start_to_finish_as_spans_and_metrics(tmp_path: Path, otel: Otel) -> None:
    async def scenario() -> tuple[int, int]:
        async with sqlite(tmp_path, poll_interval=0.05) as app:
            ref = await app.save_graph(two_steps())
            waiting_ref = await app.save_graph(asking())
            instrumentation = docket.otel.instrument(
                app,
                tracer_provider=otel.tracer_provider,
                meter_provider=otel.meter_provider,
            )
            run = await app.start_run(ref, {"prefix": ""}, run_id="r1")
            asked = await app.start_run(waiting_ref, run_id="r2")
            async with app.worker():
                done = await app.await_run(run.id, timeout=30)
                await app.await_run(asked.id, timeout=30)
                cancelled = await app.cancel_run(asked.id)
            assert done.status is RunStatus.DONE
            assert cancelled.status is RunStatus.CANCELLED
            instrumentation.uninstrument()
            assert not instrumentation.active and not app.telemetry
            await app.start_run(ref, {"prefix": ""}, run_id="after")  # not observed
            return done.checkpoint_seq, cancelled.checkpoint_seq

    done_seq, cancelled_seq = asyncio.run(scenario())
    spans = otel.finished()
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    for name in (
        "docket.run.start",
        "docket.store.initialize",
        "docket.worker.claim",
        "docket.store.claim_due",
        "docket.run.drain",
        "docket.run.step",
        "docket.node.execute",
        "docket.store.commit_claimed",
        "docket.run.cancel",
        "docket.store.commit_unclaimed",
    ):
        assert name in by_name, (name, sorted(by_name))

    # The run spans: two starts observed, the one after uninstrument() not.
    starts = by_name["docket.run.start"]
    assert sorted(str((s.attributes or {})["docket.run_id"]) for s in starts) == ["r1", "r2"]
    for start in starts:
        (init,) = [
            s
            for s in by_name["docket.store.initialize"]
            if s.parent is not None and s.parent.span_id == start.context.span_id
        ]
        assert init.context.trace_id == start.context.trace_id

    # r1's drain > steps > node attempts and commits, all in one trace.
    (drain,) = [
        s
        for s in by_name["docket.run.drain"]
        if s.attributes and s.attributes["docket.run_id"] == "r1"
    ]
    assert drain.attributes is not None and drain.attributes["docket.outcome"] == "parked"
    steps = [
        s
        for s in by_name["docket.run.step"]
        if s.parent and s.parent.span_id == drain.context.span_id
    ]
    assert len(steps) == done_seq - 1
    step_ids = {s.context.span_id for s in steps}
    nodes = [
        s
        for s in by_name["docket.node.execute"]
        if s.attributes and s.attributes["docket.run_id"] == "r1"
    ]
    assert sorted(str((s.attributes or {})["docket.node_id"]) for s in nodes) == ["a", "b"]
    for node in nodes:
        assert node.parent is not None and node.parent.span_id in step_ids
        assert node.context.trace_id == drain.context.trace_id
        assert (node.attributes or {})["docket.outcome"] == "completed"
        assert (node.attributes or {})["docket.attempt"] == 1
        assert node.status.is_ok
    commits = [
        s
        for s in by_name["docket.store.commit_claimed"]
        if s.parent is not None and s.parent.span_id in step_ids
    ]
    assert len(commits) == done_seq - 1
    assert all((s.attributes or {})["docket.result"] == "ok" for s in commits)

    (cancel,) = by_name["docket.run.cancel"]
    assert (cancel.attributes or {})["docket.status"] == "cancelled"
    (signal_commit,) = by_name["docket.store.commit_unclaimed"]
    assert signal_commit.parent is not None
    assert signal_commit.parent.span_id == cancel.context.span_id

    # Metrics match what happened: 2 runs started, one done, one cancelled; every
    # checkpoint is one transition and one commit; 3 node attempts (a, b, ask).
    points = otel.points()
    assert total(points, "docket.runs.started") == 2
    assert points[("docket.runs.finished", (("status", "done"),))] == 1
    assert points[("docket.runs.finished", (("status", "cancelled"),))] == 1
    assert total(points, "docket.runs.finished") == 2
    assert total(points, "docket.transitions") == done_seq + cancelled_seq
    assert points[("docket.transitions", (("operation", "signal"),))] == 1
    assert points[("docket.transitions", (("operation", "start"),))] == 2
    assert total(points, "docket.commit.duration") == done_seq + cancelled_seq
    node_points = {k: v for k, v in points.items() if k[0] == "docket.node.duration"}
    assert node_points == {
        ("docket.node.duration", (("node_id", "a"), ("outcome", "completed"))): 1,
        ("docket.node.duration", (("node_id", "b"), ("outcome", "completed"))): 1,
        ("docket.node.duration", (("node_id", "ask"), ("outcome", "interrupted"))): 1,
    }
    assert total(points, "docket.claim.duration") >= 1
    assert total(points, "docket.runs.poisoned") == 0
    # Labels stay bounded: no run ids anywhere in the metrics.
    assert not any("r1" in str(attrs) or "r2" in str(attrs) for _, attrs in points)


def test_a_poisoned_run_is_counted_and_node_code_spans_nest(tmp_path: Path, otel: Otel) -> None:
    poisoned: list[PoisonedClaim] = []
    tracer = otel.tracer_provider.get_tracer("tests")

    async def scenario() -> None:
        async with sqlite(
            tmp_path,
            nodes=TRACED,
            claim_ttl=0.2,
            poll_interval=0.05,
            max_claim_attempts=1,
            on_poisoned=poisoned.append,
            context={"tracer": tracer},
        ) as app:
            docket.otel.instrument(
                app, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider
            )
            ref = await app.save_graph(traced_graph())
            await app.start_run(ref, run_id="doomed")
            policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=0.2), max_claim_attempts=1)
            batch = await app.backend.runs.claim_due(policy)  # a worker that then dies
            assert len(getattr(batch, "leases", ())) == 1
            await app.start_run(ref, run_id="fine")
            async with app.worker():
                await wait_for(lambda: poisoned)
                await app.await_run("fine", timeout=30)

    asyncio.run(scenario())
    assert [p.run_id for p in poisoned] == ["doomed"]
    points = otel.points()
    assert points[("docket.runs.poisoned", (("operation", "claim_due"),))] == 1
    spans = otel.finished()
    (user,) = [s for s in spans if s.name == "user.work"]
    (node,) = [s for s in spans if s.name == "docket.node.execute"]
    assert user.parent is not None and user.parent.span_id == node.context.span_id


def test_a_missing_otel_extra_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with pytest.raises(docket.otel.OpenTelemetryUnavailable) as raised:
        docket.otel.instrument(Telemetry())
    assert isinstance(raised.value, ImportError)
    assert "docket[otel]" in str(raised.value)


def test_instrument_refuses_what_is_not_a_docket() -> None:
    with pytest.raises(TypeError):
        docket.otel.instrument(object())  # type: ignore[arg-type]


def test_global_providers_are_the_default() -> None:
    bus = Telemetry()
    instrumentation = docket.otel.instrument(bus)
    assert bus.handler_ids and instrumentation.active
    with bus.span("docket.run.step", {"run_id": "r"}):
        assert trace.get_current_span() is not None
    instrumentation.uninstrument()
    instrumentation.uninstrument()
    assert not bus
