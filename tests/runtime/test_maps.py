"""Maps through the runtime: ``max_parallel`` measured from what the items recorded, an
operator's retry running only the failed item, and a whole run on a SQLite file through a
real in-process worker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from docket import Docket
from docket.graph.builder import GraphBuilder
from docket.graph.maps import MapSpec
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.records import EventType, Run, RunStatus
from docket.testing import run_inline
from docket.values import JSONDict
from tests.runtime.helpers import check_events, memory_docket

NODES = NodeRegistry()


def _log(ctx: NodeContext) -> list[Any]:
    log = ctx.application["log"]
    assert isinstance(log, list)
    return log


@NODES.node("maps.split")
def split(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"items": list(range(int(str(state["count"]))))}


@NODES.node("maps.square")
async def square(state: NodeState, ctx: NodeContext) -> JSONDict:
    log = _log(ctx)
    log.append(("start", ctx.item_index, ctx.attempt))
    for _ in range(5):  # hand the loop to the other items a few times while "working"
        await asyncio.sleep(0)
    log.append(("end", ctx.item_index, ctx.attempt))
    broken = ctx.application.get("broken", set())
    assert isinstance(broken, set)
    if ctx.item_index in broken:
        raise RuntimeError(f"item {ctx.item_index} is broken")
    item = ctx.item
    assert isinstance(item, int) and item == state["n"]
    return {"squares": item * item}


@NODES.node("maps.total")
def total(state: NodeState, ctx: NodeContext) -> JSONDict:
    squares = state["squares"]
    assert isinstance(squares, list)
    return {"total": ",".join(str(s) for s in squares)}


def graph(max_parallel: int | None = None) -> Graph:
    return (
        GraphBuilder("squares")
        .input("count", S.integer(min=0), required=True)
        .field("items", S.list(S.integer()))
        .field("squares", S.list(S.integer()), reducer=R.append())
        .field("total", S.string())
        .node("split", "maps.split")
        .node(
            "square", "maps.square", map=MapSpec(over="items", item="n", max_parallel=max_parallel)
        )
        .node("total", "maps.total")
        .edge("a", START, "split")
        .edge("b", "split", "square")
        .edge("c", "square", "total")
        .edge("d", "total", FINISH)
        .output("total")
        .build()
    )


def _most_at_once(log: list[Any]) -> int:
    running = most = 0
    for kind, *_ in log:
        running += 1 if kind == "start" else -1
        most = max(most, running)
    return most


def test_max_parallel_bounds_the_items_running_at_once() -> None:
    for limit, expected in ((2, 2), (1, 1), (None, 6)):
        log: list[Any] = []
        result = run_inline(graph(limit), {"count": 6}, nodes=NODES, context={"log": log})
        assert result.run.output == {"total": "0,1,4,9,16,25"}
        assert _most_at_once(log) == expected, (limit, log)
        # the waiting items start in item order
        assert [i for kind, i, _ in log if kind == "start"] == list(range(6))


def test_retry_run_reruns_only_the_failed_item() -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {"log": [], "broken": {2}}
        docket, _, _ = memory_docket(nodes=NODES, context=app)
        async with docket:
            ref = await docket.save_graph(graph())
            await docket.start_run(ref, {"count": 4}, run_id="m")
            failed = await _settle(docket, "m")
            assert failed.status is RunStatus.FAILED and failed.failure is not None
            assert failed.failure.details["items"] == {"square": [2]}
            kept = [w.task_id for w in failed.pending_writes]
            assert kept == [f"m:1:square[{i}]" for i in (0, 1, 3)]
            app["broken"].clear()  # the Docket holds a copy of the context mapping
            app["log"].clear()
            await docket.retry_run("m", reason="fixed item 2")
            done = await _settle(docket, "m")
            assert done.status is RunStatus.DONE
            assert done.output == {"total": "0,1,4,9"}
            assert [e for e in app["log"] if e[0] == "start"] == [("start", 2, 1)]
            events = [e async for e in _events(docket, "m")]
            check_events(done, events)
            completed = [e.task_id for e in events if e.type is EventType.NODE_COMPLETED]
            assert sorted(t for t in completed if t and "square" in t) == [
                f"m:1:square[{i}]" for i in range(4)
            ]

    asyncio.run(scenario())


async def _settle(docket: Docket, run_id: str) -> Run:
    for _ in range(20):
        await docket.drain_due()
        run = await docket.fetch_run(run_id)
        if run.status is not RunStatus.RUNNING:
            return run
    raise AssertionError(f"run {run_id} never settled")


async def _events(docket: Docket, run_id: str) -> Any:
    after = 0
    while True:
        page = await docket.list_events(run_id, after_seq=after, limit=100)
        for event in page.events:
            yield event
        if not page.has_more:
            return
        after = page.next_after_seq


def test_a_map_runs_on_sqlite_through_a_real_worker(tmp_path: Path) -> None:
    async def scenario() -> Run:
        log: list[Any] = []
        url = f"sqlite:///{tmp_path / 'maps.db'}"
        async with Docket(url, nodes=NODES, context={"log": log}) as docket:
            ref = await docket.save_graph(graph(max_parallel=3))
            async with docket.worker():
                run = await docket.start_run(ref, {"count": 9})
                done = await docket.await_run(run.id, timeout=60)
            assert _most_at_once(log) <= 3
            events = [e async for e in _events(docket, run.id)]
            check_events(done, events)
            return done

    done = asyncio.run(scenario())
    assert done.status is RunStatus.DONE, done.failure
    assert done.output == {"total": ",".join(str(i * i) for i in range(9))}


def test_the_workers_max_map_items_setting_is_the_host_ceiling() -> None:
    async def scenario() -> Run:
        docket, _, _ = memory_docket(nodes=NODES, context={"log": []}, max_map_items=3)
        async with docket:
            ref = await docket.save_graph(graph())
            await docket.start_run(ref, {"count": 4}, run_id="big")
            return await _settle(docket, "big")

    run = asyncio.run(scenario())
    assert run.status is RunStatus.FAILED and run.failure is not None
    assert run.failure.code == "map_too_large"
    assert run.failure.details == {"over": "items", "items": 4, "limit": 3}
