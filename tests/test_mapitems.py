"""``docket.mapitems.map_progress`` on hand-built run documents and events: each state an
item can be in, which superstep is shown, and what is known without the graph; then the
same view of runs the engine wrote on a SQLite file (a failed map, an interrupt)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from docket import Docket
from docket.graph.builder import GraphBuilder
from docket.graph.maps import MapSpec
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import Interrupt, NodeContext, NodeRegistry, NodeState, RetryPolicy
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.mapitems import ItemState, MapItem, MapProgress, map_progress, read_map_progress
from docket.records import (
    TASK_RETRY_SCHEDULED,
    TIMER_RETRY,
    ChannelState,
    Event,
    EventType,
    InterruptState,
    InterruptStatus,
    PendingWrite,
    Run,
    RunFailure,
    RunStatus,
    TaskFailure,
    TaskState,
    TimerState,
    WriteKind,
)
from docket.values import JSONDict, JSONValue

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DUE = T0 + timedelta(minutes=5)


def graph() -> Graph:
    return (
        GraphBuilder("g")
        .input("count", S.integer(), required=True)
        .field("items", S.list(S.integer()))
        .field("out", S.list(S.integer()), reducer=R.append())
        .field("answer", S.string())
        .node("split", "split")
        .node("work", "work", map=MapSpec(over="items", item="n"))
        .node("spare", "work", map=MapSpec(over="items", item="m"))
        .edge("a", START, "split")
        .edge("b", "split", "work")
        .edge("c", "work", FINISH)
        .edge("d", "split", "spare")
        .edge("e", "spare", FINISH)
        .build()
    )


def run(status: RunStatus = RunStatus.RUNNING, step: int = 1, items: int = 5, **kw: Any) -> Run:
    listed: list[JSONValue] = list(range(items))
    base = Run(
        id="r",
        graph_id="g",
        graph_hash="h",
        status=status,
        started_at=T0,
        updated_at=T0,
        step=step,
        channels={"state:items": ChannelState(channel_id="state:items", value=listed, version=1)},
    )
    return attrs.evolve(base, **kw)


class Timeline:
    """Events with increasing ``seq``, as a run's timeline has them."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(
        self,
        kind: EventType,
        step: int,
        task: str | None = None,
        node: str | None = "work",
        **p: JSONValue,
    ) -> Timeline:
        payload: JSONDict = dict(p)
        self.events.append(
            Event(
                run_id="r",
                seq=len(self.events) + 1,
                type=kind,
                step=step,
                timestamp=T0,
                node_id=node,
                task_id=task,
                payload=payload,
            )
        )
        return self


def write(index: int, attempt: int = 1, kind: WriteKind = WriteKind.UPDATE) -> PendingWrite:
    value: JSONDict = {"out": index} if kind is WriteKind.UPDATE else {"id": f"q{index}"}
    return PendingWrite(
        task_id=f"r:1:work[{index}]", node_id="work", attempt=attempt, kind=kind, value=value
    )


def parked(index: int, attempt: int, reason: str) -> TaskState:
    task = f"r:1:work[{index}]"
    return TaskState(
        task_id=task,
        node_id="work",
        step=1,
        attempt=attempt,
        status=TASK_RETRY_SCHEDULED,
        input_hash="x",
        idempotency_key=f"{task}:{attempt}",
        failures=(TaskFailure(attempt=attempt - 1, reason=reason),),
    )


def work(progress: tuple[MapProgress, ...]) -> MapProgress:
    found = {p.node_id: p for p in progress}
    assert sorted(found) == ["spare", "work"]
    assert found["spare"] == MapProgress(node_id="spare", over="items", step=None, total=None)
    return found["work"]


def states(progress: MapProgress) -> list[str]:
    return [str(i.state) for i in progress.items]


def test_an_item_parked_for_its_retry_waits_beside_the_finished_ones() -> None:
    parked_run = run(
        pending_writes=tuple(write(i) for i in (0, 2, 3, 4)),
        active_tasks={"r:1:work[1]": parked(1, 2, "exception: RuntimeError: flaky")},
        timers={"r:1:work[1]": TimerState(kind=TIMER_RETRY, fires_at=DUE)},
    )
    events = Timeline().add(
        EventType.NODE_FAILED, 1, "r:1:work[1]", attempt=1, permanent=False, reason="x"
    )
    progress = work(map_progress(parked_run, events.events, graph()))
    assert (progress.step, progress.total, progress.over) == (1, 5, "items")
    assert states(progress) == ["done", "retrying", "done", "done", "done"]
    assert progress.counts() == {"done": 4, "retrying": 1}
    assert progress.items[1] == MapItem(
        index=1,
        task_id="r:1:work[1]",
        state=ItemState.RETRYING,
        attempt=2,
        reason="exception: RuntimeError: flaky",
        retry_at=DUE,
    )
    assert progress.items[0].attempt == 1
    assert progress.unfinished() == (progress.items[1],)
    assert progress.to_json()["counts"] == {"done": 4, "retrying": 1}
    item = progress.items[1].to_json()
    assert item["retry_at"] == "2026-03-01T12:05:00.000000Z" and item["state"] == "retrying"


def test_a_failed_run_names_its_failed_items_and_the_dropped_ones() -> None:
    failure = RunFailure(
        code="node_failed",
        message="node work failed permanently",
        node_id="work",
        details={"items": {"work": [1, 3]}, "errors": {"work": "exception: boom 1"}},
    )
    failed_run = run(
        RunStatus.FAILED, failure=failure, pending_writes=(write(0), write(2, attempt=2))
    )
    events = (
        Timeline()
        .add(EventType.NODE_FAILED, 1, "r:1:work[4]", attempt=1, permanent=False, reason="slow")
        .add(EventType.NODE_FAILED, 1, "r:1:work[1]", attempt=3, permanent=True, reason="boom 1")
        .add(EventType.NODE_FAILED, 1, "r:1:work[3]", attempt=3, permanent=True, reason="boom 3")
    )
    progress = work(map_progress(failed_run, events.events, graph()))
    assert states(progress) == ["done", "failed", "done", "failed", "pending"]
    assert progress.items[2].attempt == 2
    assert (progress.items[3].attempt, progress.items[3].reason) == (3, "boom 3")
    # parked for a retry when its sibling failed: dropped, runs again when the run is retried
    assert (progress.items[4].attempt, progress.items[4].reason) == (1, "slow")
    # without its events (retention), the failure still names the items
    bare = work(map_progress(failed_run, [], graph()))
    assert states(bare) == ["done", "failed", "done", "failed", "pending"]
    assert bare.items[3].reason == "exception: boom 1"


def test_after_an_operators_retry_the_old_failures_are_history() -> None:
    retried = run(pending_writes=(write(0), write(2)))
    events = (
        Timeline()
        .add(EventType.NODE_FAILED, 1, "r:1:work[1]", attempt=1, permanent=True, reason="boom")
        .add(EventType.RUN_FAILED, 1, None)
        .add(EventType.RUN_RETRIED, 1, None, reason="fixed")
    )
    progress = work(map_progress(retried, events.events, graph()))
    assert states(progress) == ["done", "pending", "done", "pending", "pending"]
    assert progress.items[1].reason is None


def test_an_item_that_asked_an_interrupt_holds_its_map() -> None:
    asked = InterruptState(
        id="q2",
        node_id="work",
        status=InterruptStatus.OPEN,
        resume_channel="answer",
        schema=None,
        created_at=T0,
    )
    waiting = run(RunStatus.WAITING, step=2, interrupts={"q2": asked})
    events = Timeline().add(
        EventType.INTERRUPT_REQUESTED, 1, "r:1:work[2]", attempt=1, interrupt_id="q2"
    )
    progress = work(map_progress(waiting, events.events, graph()))
    # the finished siblings' work was dropped: every item runs again after the answer
    assert (progress.step, progress.total) == (1, 5)
    assert states(progress) == ["pending", "pending", "interrupt", "pending", "pending"]
    assert progress.items[2].interrupt_id == "q2"
    resolved = {"q2": attrs.evolve(asked, status=InterruptStatus.RESOLVED)}
    answered = attrs.evolve(waiting, status=RunStatus.RUNNING, interrupts=resolved)
    assert states(work(map_progress(answered, events.events, graph()))) == ["pending"] * 5
    # the answer queued the node to run again: its new superstep, every item to run
    queued = attrs.evolve(answered, pending_nodes=frozenset({"work"}))
    progress = work(map_progress(queued, events.events, graph()))
    assert (progress.step, progress.total, states(progress)) == (2, 5, ["pending"] * 5)
    # an interrupt request still waiting at the barrier (a sibling parked for a retry)
    at_barrier = run(pending_writes=(write(0), write(1, kind=WriteKind.INTERRUPT)))
    progress = work(map_progress(at_barrier, [], graph()))
    assert states(progress)[:2] == ["done", "interrupt"]
    assert progress.items[1].interrupt_id == "q1"


def test_the_latest_superstep_is_shown_and_a_committed_one_is_all_done() -> None:
    events = Timeline()
    for step, count in ((1, 4), (3, 2)):  # a map inside a loop: it ran at steps 1 and 3
        for i in range(count):
            events.add(EventType.NODE_COMPLETED, step, f"r:{step}:work[{i}]", attempt=1, item=i)
    events.add(EventType.NODE_FAILED, 3, "r:3:work[1]", attempt=1, permanent=False, reason="x")
    events.add(EventType.NODE_COMPLETED, 3, "r:3:work[1]", attempt=2, item=1)
    events.add(EventType.NODE_COMPLETED, 3, "r:3:spare", node="spare", attempt=1, items=0)
    # the list has changed since (9 items now): the committed step had 2
    done = run(RunStatus.DONE, step=5, items=9)
    progress = {p.node_id: p for p in map_progress(done, events.events, graph())}
    work_ = progress["work"]
    assert (work_.step, work_.total) == (3, 2)
    assert [(i.state, i.attempt) for i in work_.items] == [
        (ItemState.DONE, 1),
        (ItemState.DONE, 2),
    ]
    assert work_.items[1].task_id == "r:3:work[1]"
    # a map over an empty list: completed with no items
    assert (progress["spare"].step, progress["spare"].total, progress["spare"].items) == (3, 0, ())
    assert progress["spare"].counts() == {}


def test_without_the_graph_the_events_name_the_maps() -> None:
    parked_run = run(
        pending_writes=(write(0),),
        active_tasks={"r:1:work[2]": parked(2, 2, "flaky")},
        timers={"r:1:work[2]": TimerState(kind=TIMER_RETRY, fires_at=DUE)},
    )
    events = Timeline().add(EventType.NODE_COMPLETED, 0, "r:0:split", node="split", attempt=1)
    (progress,) = map_progress(parked_run, events.events, None)
    # no graph: neither the field nor the list length is known, only the items on record
    assert (progress.node_id, progress.over, progress.total) == ("work", None, None)
    assert [(i.index, str(i.state)) for i in progress.items] == [(0, "done"), (2, "retrying")]
    assert map_progress(run(), events.events, None) == ()


def test_a_map_the_running_run_has_activated_shows_its_items_before_any_finish() -> None:
    # the edge into "work" fired at the last barrier; nothing of step 1 is on record yet
    events = Timeline().add(EventType.NODE_COMPLETED, 0, "r:0:split", node="split", attempt=1)
    activated = run(changed_channels=frozenset({"edge:b", "state:items"}))
    progress = work(map_progress(activated, events.events, graph()))
    assert (progress.step, progress.total, states(progress)) == (1, 5, ["pending"] * 5)
    # the same document once the run stopped running: nothing is queued any more
    cancelled = attrs.evolve(activated, status=RunStatus.CANCELLED)
    assert work(map_progress(cancelled, events.events, graph())).step is None


def test_a_completion_without_item_payloads_still_counts() -> None:
    # defensive: a map's plain completion that does not say ``items: 0``
    events = Timeline().add(EventType.NODE_COMPLETED, 1, "r:1:work", attempt=1)
    progress = work(map_progress(run(RunStatus.DONE, step=2), events.events, graph()))
    assert (progress.step, progress.total, progress.items) == (1, 0, ())


# -- the same view of documents the engine wrote, on a SQLite file --------------------------

NODES = NodeRegistry()


@NODES.node("split")
def split(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"items": list(range(int(str(state["count"]))))}


@NODES.node("work")
def work_node(state: NodeState, ctx: NodeContext) -> JSONDict | Interrupt:
    mode, index = ctx.application["mode"], ctx.item_index
    if mode == "broken" and index in (1, 3):
        raise RuntimeError(f"item {index} is broken")
    if mode == "ask" and index == 2 and "answer" not in state:
        return Interrupt("answer", schema=S.string(), id=f"q{index}")
    assert isinstance(index, int)
    return {"out": index * 10}


def engine_graph() -> Graph:
    return (
        GraphBuilder("g")
        .input("count", S.integer(), required=True)
        .field("items", S.list(S.integer()))
        .field("out", S.list(S.integer()), reducer=R.append())
        .field("answer", S.string())
        .node("split", "split")
        .node(
            "work",
            "work",
            map=MapSpec(over="items", item="n"),
            retry=RetryPolicy(max_attempts=2, backoff_ms=0),
        )
        .edge("a", START, "split")
        .edge("b", "split", "work")
        .edge("c", "work", FINISH)
        .build()
    )


async def _settle(docket: Docket, run_id: str) -> Run:
    for _ in range(10):  # each drain takes what is due; the retries are due at once
        await docket.drain_due()
        current = await docket.fetch_run(run_id)
        if current.status is not RunStatus.RUNNING:
            return current
    raise AssertionError(f"run {run_id} did not settle: {current.status}")


def test_the_view_of_runs_the_engine_wrote(tmp_path: Path) -> None:
    async def scenario(mode: str) -> list[tuple[MapProgress, ...]]:
        seen = []
        url = f"sqlite:///{tmp_path / f'{mode}.db'}"
        async with Docket(url, nodes=NODES, context={"mode": mode}) as docket:
            ref = await docket.save_graph(engine_graph())
            await docket.start_run(ref, {"count": 5}, run_id="r")
            current = await _settle(docket, "r")
            seen.append(await read_map_progress(docket, current))
            if mode == "ask":
                await docket.resolve_interrupt("r", "q2", "yes")
                current = await _settle(docket, "r")
                assert current.status is RunStatus.DONE, current.failure
                seen.append(await read_map_progress(docket, current))
        return seen

    (failed,) = asyncio.run(scenario("broken"))
    (progress,) = failed
    assert states(progress) == ["done", "failed", "done", "failed", "done"]
    assert [(i.attempt, i.reason) for i in progress.items if i.state is ItemState.FAILED] == [
        (2, "exception: RuntimeError: item 1 is broken"),
        (2, "exception: RuntimeError: item 3 is broken"),
    ]

    waiting, done = asyncio.run(scenario("ask"))
    (progress,) = waiting
    assert (progress.step, progress.total) == (1, 5)
    assert states(progress) == ["pending", "pending", "interrupt", "pending", "pending"]
    assert progress.items[2].interrupt_id == "q2"
    (progress,) = done  # every item ran again, one superstep later, and finished
    assert (progress.step, states(progress)) == (2, ["done"] * 5)
