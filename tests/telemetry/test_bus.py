"""The telemetry bus on its own: ordering, spans and parents, filters, handler isolation,
detaching, and the logging context."""

from __future__ import annotations

import asyncio
import logging

import pytest

from docket.errors import InvalidOptions
from docket.telemetry import (
    NO_SPAN,
    LogContextFilter,
    Telemetry,
    TelemetryEvent,
    current_log_context,
    log_context,
    stamp_logger,
)
from tests.telemetry.helpers import Recorder


def test_handlers_see_events_in_emission_order_and_in_attachment_order() -> None:
    bus = Telemetry()
    calls: list[tuple[str, str]] = []
    bus.attach(lambda e: calls.append(("first", e.name)))
    bus.attach(lambda e: calls.append(("second", e.name)))
    bus.emit("docket.one", {"seq": 1}, {"run_id": "r"})
    bus.emit("docket.two")
    assert calls == [
        ("first", "docket.one"),
        ("second", "docket.one"),
        ("first", "docket.two"),
        ("second", "docket.two"),
    ]


def test_a_span_emits_start_then_stop_with_a_duration_and_merged_metadata() -> None:
    bus = Telemetry()
    recorder = Recorder()
    bus.attach(recorder)
    span = bus.span("docket.thing", {"run_id": "r1"})
    span.set({"status": "done"})
    span.stop({"result": "ok"}, {"commits": 2})
    span.stop()  # a second end does nothing
    start, stop = recorder.events
    assert (start.name, start.phase, start.span) == ("docket.thing.start", "start", "docket.thing")
    assert (stop.name, stop.phase) == ("docket.thing.stop", "stop")
    assert start.span_id == stop.span_id and start.span_id is not None
    assert stop.metadata == {"run_id": "r1", "status": "done", "result": "ok"}
    assert stop.measurements["commits"] == 2
    assert 0 <= stop.measurements["duration"] < 60


def test_nested_spans_record_their_parent_even_across_tasks() -> None:
    bus = Telemetry()
    recorder = Recorder()
    bus.attach(recorder)

    async def child() -> None:
        with bus.span("docket.child"):
            await asyncio.sleep(0)

    async def scenario() -> None:
        with bus.span("docket.parent"):
            await asyncio.gather(child(), asyncio.ensure_future(child()))
        with bus.span("docket.sibling"):
            pass

    asyncio.run(scenario())
    starts = {e.span_id: e for e in recorder.events if e.phase == "start"}
    (parent,) = [e for e in starts.values() if e.span == "docket.parent"]
    children = [e for e in starts.values() if e.span == "docket.child"]
    (sibling,) = [e for e in starts.values() if e.span == "docket.sibling"]
    assert len(children) == 2
    assert all(c.parent_id == parent.span_id for c in children)
    assert parent.parent_id is None and sibling.parent_id is None


def test_an_exception_ends_the_span_with_exception_and_propagates() -> None:
    bus = Telemetry()
    recorder = Recorder()
    bus.attach(recorder)
    with pytest.raises(KeyError), bus.span("docket.boom", {"run_id": "r"}):
        raise KeyError("nope")
    assert [e.name for e in recorder.events] == ["docket.boom.start", "docket.boom.exception"]
    failed = recorder.events[1]
    assert failed.metadata["kind"] == "KeyError" and "nope" in failed.metadata["error"]
    assert failed.measurements["duration"] >= 0


def test_a_raising_handler_is_detached_logged_once_and_isolates_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = Telemetry()
    seen: list[str] = []

    def broken(event: TelemetryEvent) -> None:
        raise RuntimeError(f"cannot handle {event.name}")

    bus.attach(broken, handler_id="broken")
    bus.attach(lambda e: seen.append(e.name), handler_id="fine")
    with caplog.at_level(logging.ERROR, logger="docket.telemetry"):
        bus.emit("docket.a")
        bus.emit("docket.b")
        with bus.span("docket.c"):
            pass
    assert seen == ["docket.a", "docket.b", "docket.c.start", "docket.c.stop"]
    assert bus.handler_ids == ("fine",)
    assert [(hid, str(exc)) for hid, exc in bus.failures] == [("broken", "cannot handle docket.a")]
    assert len([r for r in caplog.records if "broken" in r.getMessage()]) == 1


def test_detach_by_id_or_handle_and_attach_refuses_bad_handlers() -> None:
    bus = Telemetry()
    seen: list[str] = []
    handle = bus.attach(lambda e: seen.append("handle"))
    bus.attach(lambda e: seen.append("named"), handler_id="named")
    with pytest.raises(InvalidOptions):
        bus.attach(lambda e: None, handler_id="named")
    with pytest.raises(InvalidOptions):
        bus.attach("not callable")  # type: ignore[arg-type]
    bus.emit("docket.x")
    assert handle.detach() is True
    assert handle.detach() is False
    bus.emit("docket.y")
    assert bus.detach("named") is True
    assert bus.detach("named") is False
    bus.emit("docket.z")
    assert seen == ["handle", "named", "named"]
    assert not bus


def test_name_and_prefix_filters() -> None:
    bus = Telemetry()
    exact = Recorder()
    prefixed = Recorder()
    bus.attach(exact, names=["docket.run.completed"])
    bus.attach(prefixed, prefixes=["docket.node."])
    bus.emit("docket.run.completed")
    bus.emit("docket.run.failed")
    with bus.span("docket.node.execute"):
        pass
    assert [e.name for e in exact.events] == ["docket.run.completed"]
    assert [e.name for e in prefixed.events] == [
        "docket.node.execute.start",
        "docket.node.execute.stop",
    ]


def test_nobody_listening_costs_nothing_but_a_truth_test() -> None:
    bus = Telemetry()
    assert not bus
    assert bus.span("docket.anything", {"run_id": "r"}) is NO_SPAN
    bus.emit("docket.anything")  # no handler: nothing to do, nothing raised
    handle = bus.attach(lambda e: None)
    assert bus
    assert bus.span("docket.anything") is not NO_SPAN
    handle.detach()
    assert not bus


def test_log_context_stamps_docket_records_and_the_filter_serves_any_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    docket_log = stamp_logger(logging.getLogger("docket.tests.telemetry"))
    other = logging.getLogger("tests.telemetry.other")
    caplog.handler.addFilter(LogContextFilter())
    with caplog.at_level(logging.INFO):
        docket_log.info("outside")
        with log_context(run_id="r1", tenant_id="acme"):
            with log_context(task_id="t1", node_id="n", attempt=2):
                assert current_log_context()["run_id"] == "r1"
                docket_log.info("inside")
                other.info("user code")
                other.info("explicit", extra={"run_id": "given"})
            docket_log.info("after the task")
    by_message = {r.getMessage(): r for r in caplog.records}
    assert by_message["outside"].__dict__["run_id"] is None
    inside = by_message["inside"].__dict__
    assert (inside["run_id"], inside["tenant_id"], inside["task_id"]) == ("r1", "acme", "t1")
    assert (inside["node_id"], inside["attempt"]) == ("n", 2)
    assert by_message["user code"].__dict__["task_id"] == "t1"
    assert by_message["explicit"].__dict__["run_id"] == "given"
    after = by_message["after the task"].__dict__
    assert after["run_id"] == "r1" and after["task_id"] is None
    assert current_log_context() == {}
