"""A node's ``max_concurrency`` through real workers: at most k of its attempts run at
once in the process — across the items of a map and across runs — while the worker
allows more; a node without it is not held back; a sync node that timed out keeps its
place until its thread returns.

Every attempt counts itself into a live meter and then waits until all the attempts of
the scenario are either running or waiting at the node's gate, so the highest count is
exactly the limit when the gate holds, and every attempt at once when there is none:
the assertions fail both ways.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from docket import Docket
from docket.contract.memory import MemoryBackend
from docket.graph.builder import GraphBuilder
from docket.graph.compiler import compile_graph
from docket.graph.maps import MapSpec
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.records import RunStatus
from docket.runtime.gates import NodeGate, node_gate
from docket.testing import run_inline_async
from docket.values import JSONDict

NODES = NodeRegistry()
PATIENCE = 30.0  # seconds an attempt waits for the others (below the 60 s attempt timeout)


class Meter:
    """Attempts running now and the most seen at once; shared by loops and threads."""

    def __init__(self, total: int, gate: NodeGate | None) -> None:
        self.total = total
        self.gate = gate
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.gathered = threading.Event()  # every attempt was running or waiting at once
        self.gave_up = False

    def enter(self) -> None:
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)

    def leave(self) -> None:
        with self.lock:
            self.running -= 1

    def check(self) -> bool:
        waiting = self.gate.waiting if self.gate is not None else 0
        with self.lock:
            if self.running + waiting >= self.total:
                self.gathered.set()
        return self.gathered.is_set()

    def timed_out(self, started: float) -> bool:
        if time.monotonic() - started < PATIENCE:
            return False
        self.gave_up = True
        return True


def _meter(ctx: NodeContext) -> Meter:
    meter = ctx.application["meter"]
    assert isinstance(meter, Meter)
    return meter


@NODES.node("conc.split")
def split(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"items": list(range(int(str(state["count"]))))}


@NODES.node("conc.async_work")
async def async_work(state: NodeState, ctx: NodeContext) -> JSONDict:
    meter, started = _meter(ctx), time.monotonic()
    meter.enter()
    try:
        while not meter.check() and not meter.timed_out(started):
            await asyncio.sleep(0.005)  # polls the condition; the bound is PATIENCE
    finally:
        meter.leave()
    return {"done": [ctx.item_index]}


@NODES.node("conc.sync_work")
def sync_work(state: NodeState, ctx: NodeContext) -> JSONDict:
    meter, started = _meter(ctx), time.monotonic()
    meter.enter()
    try:
        while not meter.check() and not meter.timed_out(started):
            time.sleep(0.005)  # polls the condition; the bound is PATIENCE
    finally:
        meter.leave()
    return {"done": [ctx.item_index]}


def graph(implementation: str, limit: int | None) -> Graph:
    return (
        GraphBuilder("conc")
        .input("count", S.integer(min=0), required=True)
        .field("items", S.list(S.integer()))
        .field("done", S.list(S.integer()), reducer=R.append())
        .node("split", "conc.split")
        .node("work", implementation, map=MapSpec(over="items", item="n"), max_concurrency=limit)
        .edge("a", START, "split")
        .edge("b", "split", "work")
        .edge("c", "work", FINISH)
        .output("done")
        .build()
    )


def _gate(g: Graph, limit: int | None) -> NodeGate | None:
    runtime = compile_graph(g, NODES).runtime
    assert runtime is not None
    return None if limit is None else node_gate(runtime.id, "work", limit)


async def _run_all(docket: Docket, g: Graph, counts: list[int]) -> None:
    ref = await docket.save_graph(g)
    async with docket.worker(concurrency=8):
        runs = [await docket.start_run(ref, {"count": n}) for n in counts]
        for run in runs:
            done = await docket.await_run(run.id, timeout=PATIENCE * 2)
            assert done.status is RunStatus.DONE, done.failure
            assert done.output is not None
            items = done.output["done"]
            assert isinstance(items, list) and sorted(map(str, items)) == sorted(
                map(str, range(len(items)))
            )


def _scenario(url: str | None, implementation: str, limit: int | None, counts: list[int]) -> Meter:
    g = graph(implementation, limit)
    gate = _gate(g, limit)  # held here, so the workers use this very gate
    meter = Meter(sum(counts), gate)

    async def scenario() -> None:
        target: str | MemoryBackend = url if url is not None else MemoryBackend()
        async with Docket(target, nodes=NODES, context={"meter": meter}) as docket:
            await _run_all(docket, g, counts)

    asyncio.run(scenario())
    assert not meter.gave_up, "the attempts never all ran or waited at once"
    assert gate is None or (gate.held, gate.waiting) == (0, 0)
    return meter


@pytest.mark.parametrize("implementation", ["conc.async_work", "conc.sync_work"])
def test_a_maps_items_run_at_most_max_concurrency_at_once(implementation: str) -> None:
    assert _scenario(None, implementation, 3, [12]).most == 3
    # the same map without the policy runs all of its items at once
    assert _scenario(None, implementation, None, [12]).most == 12


def test_the_limit_holds_across_runs_in_one_process() -> None:
    # four runs of three items, drained at once by one worker: a per-run limit would let
    # all twelve run together
    assert _scenario(None, "conc.async_work", 3, [3, 3, 3, 3]).most == 3
    assert _scenario(None, "conc.async_work", None, [3, 3, 3, 3]).most == 12


def test_the_limit_holds_on_sqlite_through_a_real_worker(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'conc.db'}"
    assert _scenario(url, "conc.sync_work", 3, [6, 6]).most == 3


# -- a sync node that timed out keeps its place ----------------------------------------------

BLOCKING = NodeRegistry()


@BLOCKING.node("conc.block")
def block(state: NodeState, ctx: NodeContext) -> JSONDict:
    log = ctx.application["log"]
    release = ctx.application["release"]
    assert isinstance(log, list) and isinstance(release, threading.Event)
    log.append(("start", ctx.run_id))
    release.wait(PATIENCE)
    log.append(("end", ctx.run_id))
    return {}


def test_a_timed_out_sync_node_keeps_its_place_until_its_thread_returns() -> None:
    g = (
        GraphBuilder("blocking")
        .node("only", "conc.block", timeout_ms=500, max_concurrency=1)  # ample to start
        .edge("a", START, "only")
        .edge("b", "only", FINISH)
        .build()
    )
    runtime = compile_graph(g, BLOCKING).runtime
    assert runtime is not None
    gate = node_gate(runtime.id, "only", 1)
    log: list[Any] = []
    release = threading.Event()
    context = {"log": log, "release": release}

    async def scenario() -> None:
        first = await run_inline_async(runtime, {}, nodes=BLOCKING, run_id="r1", context=context)
        assert first.run.status is RunStatus.FAILED  # timed out; its thread still blocks
        assert log == [("start", "r1")] and gate.held == 1
        second = asyncio.create_task(
            run_inline_async(runtime, {}, nodes=BLOCKING, run_id="r2", context=context)
        )
        started = time.monotonic()
        while gate.waiting == 0:  # the second attempt reaches the gate and waits there
            assert time.monotonic() - started < PATIENCE, log
            await asyncio.sleep(0.005)
        assert log == [("start", "r1")]
        release.set()
        done = await second
        assert done.run.status is RunStatus.DONE
        assert log[:2] == [("start", "r1"), ("end", "r1")]
        assert log[2:] == [("start", "r2"), ("end", "r2")]

    try:
        asyncio.run(scenario())
    finally:
        release.set()  # never leave a pool thread blocked behind a failed assertion
