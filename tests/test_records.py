"""Records: the storage encoding, durable validity (runtime-spec §1.6), pages, scopes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import attrs
import pytest

from docket.records import (
    SYSTEM,
    TENANTLESS,
    ChannelState,
    Event,
    EventPage,
    EventType,
    GraphRef,
    GraphVersion,
    GraphVersionCursor,
    GraphVersionPage,
    InterruptState,
    InterruptStatus,
    PendingWrite,
    RecordDecodeError,
    Run,
    RunCursor,
    RunFailure,
    RunPage,
    RunStatus,
    RunSummary,
    TaskFailure,
    TaskState,
    Tenant,
    TimerState,
    WriteKind,
    event_from_json,
    event_problems,
    event_to_json,
    idempotency_key,
    require_owner,
    run_from_json,
    run_problems,
    run_to_json,
    scope_admits,
    task_id,
    validate_run,
)

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)


def running(**changes: Any) -> Run:
    base = Run(
        id="run_1",
        graph_id="g",
        graph_hash="h",
        status=RunStatus.RUNNING,
        started_at=T0,
        updated_at=T0,
        checkpoint_seq=1,
    )
    return attrs.evolve(base, **changes)


def parked_task(node: str = "n", attempt: int = 2) -> TaskState:
    tid = task_id("run_1", 0, node)
    return TaskState(
        task_id=tid,
        node_id=node,
        step=0,
        attempt=attempt,
        status="retry_scheduled",
        input_hash="abc",
        idempotency_key=idempotency_key(tid, attempt),
        failures=tuple(TaskFailure(attempt=i, reason="boom") for i in range(1, attempt)),
    )


def rich_run() -> Run:
    tid = task_id("run_1", 0, "n")
    return running(
        input={"topic": "owls", "n": 1.0},
        channels={"state:x": ChannelState(channel_id="state:x", value=[1, 2], version=2)},
        changed_channels=frozenset({"state:x"}),
        pending_nodes=frozenset({"m"}),
        active_tasks={tid: parked_task()},
        timers={tid: TimerState(kind="retry", fires_at=T0 + timedelta(seconds=5))},
        pending_writes=(
            PendingWrite(
                task_id=task_id("run_1", 0, "w"),
                node_id="w",
                attempt=1,
                kind=WriteKind.INTERRUPT,
                value={"resume_channel": "answer", "schema": None},
            ),
        ),
        interrupts={
            "i1": InterruptState(
                id="i1",
                node_id="m",
                status=InterruptStatus.OPEN,
                resume_channel="answer",
                schema={"type": "string"},
                created_at=T0,
            )
        },
        event_seq=7,
        metadata={"who": "me"},
    )


def test_a_rich_run_round_trips_through_its_storage_encoding() -> None:
    run = rich_run()
    assert run_problems(run) == []
    data = run_to_json(run)
    assert run_from_json(data) == run
    assert run_to_json(run_from_json(data)) == data  # canonical: byte-stable


def test_loading_refuses_unknown_keys_and_non_durable_values() -> None:
    data = run_to_json(running()).replace(b'"step":0', b'"step":0,"surprise":1')
    with pytest.raises(RecordDecodeError, match="surprise"):
        run_from_json(data)


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"status": RunStatus.CREATED}, "durable status"),
        ({"id": ""}, "id: must be"),
        ({"step": -1}, "step"),
        ({"checkpoint_seq": True}, "checkpoint_seq"),
        ({"input": {"x": float("nan")}}, "input.x"),
        ({"output": {"a": 1}}, "output: present only on done"),
        ({"status": RunStatus.DONE}, "finished_at: required"),
        ({"finished_at": T0}, "finished_at: present only on terminal"),
        ({"status": RunStatus.FAILED, "finished_at": T0}, "failure: present exactly"),
        ({"failure": RunFailure(code="x", message="y")}, "failure: present exactly"),
        ({"started_at": datetime(2026, 1, 1)}, "started_at"),
        ({"updated_at": T0.astimezone(timezone(timedelta(hours=1)))}, "updated_at"),
        ({"channels": {"a": ChannelState(channel_id="b")}}, "channels.a"),
        ({"active_tasks": {task_id("run_1", 0, "n"): parked_task()}}, "may have no timer"),
        (
            {
                "pending_writes": (
                    PendingWrite(
                        task_id="x", node_id="n", attempt=1, kind=WriteKind.UPDATE, value={}
                    ),
                )
            },
            "pending_writes[0]: task_id",
        ),
        ({"active_tasks": {"k": attrs.evolve(parked_task(), attempt=3)}}, "attempt must be one"),
    ],
)
def test_durable_validity_reports_each_defect(changes: dict[str, Any], fragment: str) -> None:
    problems = run_problems(running(**changes))
    assert any(fragment in p for p in problems), problems
    invalid = validate_run(running(**changes))
    assert invalid is not None and invalid.reasons == tuple(problems)


def test_active_superstep_requires_a_running_run() -> None:
    run = attrs.evolve(rich_run(), status=RunStatus.WAITING)
    assert any("only a running run" in p for p in run_problems(run))


def _failed(code: str, **changes: Any) -> Run:
    failure = RunFailure(code=code, message="m")
    return running(status=RunStatus.FAILED, failure=failure, finished_at=T0, **changes)


def test_only_a_node_failure_keeps_pending_writes_and_never_tasks_or_timers() -> None:
    kept = rich_run().pending_writes
    assert run_problems(_failed("node_failed", pending_writes=kept)) == []
    limit = run_problems(_failed("max_supersteps_exceeded", pending_writes=kept))
    assert any("one a node failure failed" in p for p in limit), limit
    tid = task_id("run_1", 0, "n")
    parked = {
        "active_tasks": {tid: parked_task()},
        "timers": {tid: TimerState(kind="retry", fires_at=T0)},
    }
    assert any("only a running run" in p for p in run_problems(_failed("node_failed", **parked)))
    # reopened: the kept writes wait, with no task, for the unfinished nodes to be planned
    assert run_problems(running(pending_writes=kept)) == []


def test_validity_never_raises_on_junk() -> None:
    assert run_problems("not a run") == ["run: expected a Run, got str"]
    junk = running(channels=["x"], timers=None, interrupts=3)
    assert run_problems(junk)


def test_event_shape_and_encoding() -> None:
    event = Event(
        run_id="run_1",
        seq=1,
        type=EventType.RUN_INITIALIZED,
        step=0,
        timestamp=T0,
        payload={"inputs": ["topic"]},
    )
    assert event_problems(event, "run_1") == []
    assert event_from_json(event_to_json(event)) == event
    assert any("not the proposal's run" in p for p in event_problems(event, "other"))
    bad = attrs.evolve(event, seq=0, type=cast(EventType, "nope"), payload={"$x": 1})
    assert len(event_problems(bad)) == 3


def summary(run_id: str, at: datetime) -> RunSummary:
    return RunSummary.of(running(id=run_id, started_at=at, updated_at=at), None)


def test_run_page_trims_and_echoes_the_cursor_when_empty() -> None:
    rows = [summary("b", T0), summary("a", T0), summary("c", T0 - timedelta(1))]
    page = RunPage.from_candidates(rows, 2, None)
    assert [r.id for r in page.runs] == ["b", "a"]
    assert page.has_more and page.next_before == RunCursor(T0, "a")
    cursor = RunCursor(T0, "zzz")
    empty = RunPage.from_candidates([], 2, cursor)
    assert empty.runs == () and not empty.has_more and empty.next_before == cursor


def test_graph_version_and_event_pages() -> None:
    versions = [GraphVersion(ref=GraphRef("g", h), published_at=T0) for h in ("b", "a")]
    page = GraphVersionPage.from_candidates(versions, 1, None)
    assert page.has_more and page.next_before == GraphVersionCursor(T0, "b")
    events = [
        Event(run_id="r", seq=s, type=EventType.NODE_COMPLETED, step=0, timestamp=T0)
        for s in (3, 4)
    ]
    ep = EventPage.from_candidates(
        events, limit=1, after_seq=2, oldest_available_seq=1, latest_available_seq=4, latest_seq=4
    )
    assert ep.next_after_seq == 3 and ep.has_more
    done = EventPage.from_candidates(
        [], limit=5, after_seq=4, oldest_available_seq=None, latest_available_seq=None, latest_seq=4
    )
    assert done.next_after_seq == 4 and not done.has_more


def test_scopes() -> None:
    assert scope_admits(SYSTEM, "a") and scope_admits(SYSTEM, None)
    assert scope_admits(TENANTLESS, None) and not scope_admits(TENANTLESS, "a")
    assert scope_admits(Tenant("a"), "a") and not scope_admits(Tenant("a"), "b")
    assert not scope_admits(Tenant("a"), None)
    with pytest.raises(ValueError):
        Tenant("")
    with pytest.raises(ValueError, match="not an owner scope"):
        require_owner(SYSTEM)
