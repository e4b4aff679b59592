"""Fixture graphs of runtime-spec §12 (and a few more), with one node registry.

Node implementations are generic and configured per node (``config``), so the graphs
read like their descriptions. When the application context holds a ``"calls"`` list,
every node appends ``(node_id, attempt)`` to it, which lets tests count executions.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Callable, Mapping
from typing import cast

from docket.graph.builder import GraphBuilder
from docket.graph.compiler import CompileResult, RuntimeGraph, compile_graph
from docket.graph.guards import equals, not_, path
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import (
    Failure,
    Interrupt,
    NodeContext,
    NodeRegistry,
    NodeState,
    RetryPolicy,
)
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.values import JSONDict, JSONValue

NODES = NodeRegistry()


def _record(ctx: NodeContext) -> None:
    calls = ctx.application.get("calls")
    if isinstance(calls, list):
        calls.append((ctx.node_id, ctx.attempt))


def _config_dict(ctx: NodeContext, key: str) -> JSONDict:
    value = ctx.config.get(key, {})
    assert isinstance(value, dict)
    return value


@NODES.node("noop")
def noop(state: NodeState, ctx: NodeContext) -> JSONDict:
    _record(ctx)
    return {}


@NODES.node("write")
def write(state: NodeState, ctx: NodeContext) -> JSONDict:
    """Writes ``config["values"]``."""
    _record(ctx)
    return dict(_config_dict(ctx, "values"))


@NODES.node("copy")
def copy(state: NodeState, ctx: NodeContext) -> JSONDict:
    """Copies ``config["from"]`` to ``config["to"]`` (writes None when it is missing)."""
    _record(ctx)
    source, target = str(ctx.config["from"]), str(ctx.config["to"])
    return {target: state.get(source)}


@NODES.node("increment")
def increment(state: NodeState, ctx: NodeContext) -> JSONDict:
    _record(ctx)
    count = state.get("count", 0.0)
    assert isinstance(count, float)
    return {"count": count + 1.0}


@NODES.node("gate")
def gate(state: NodeState, ctx: NodeContext) -> JSONDict | Interrupt:
    """Pauses until ``decision`` is set, then copies it to ``applied``."""
    _record(ctx)
    if state.get("decision") is None:
        return Interrupt(
            "decision",
            schema=S.string(),
            id=cast("str | None", ctx.config.get("interrupt_id")),
            metadata={"question": "approve?"},
        )
    return {"applied": state["decision"]}


@NODES.node("pause")
def pause(state: NodeState, ctx: NodeContext) -> Interrupt:
    """Always asks for ``config["resume"]`` (id ``config["interrupt_id"]`` if given)."""
    _record(ctx)
    return Interrupt(
        str(ctx.config["resume"]), id=cast("str | None", ctx.config.get("interrupt_id"))
    )


@NODES.node("flaky")
def flaky(state: NodeState, ctx: NodeContext) -> JSONDict | Failure:
    """Fails its first ``config["fail_times"]`` attempts (default 2), then writes."""
    _record(ctx)
    snapshots = ctx.application.get("snapshots")
    if isinstance(snapshots, list):
        snapshots.append((ctx.node_id, ctx.attempt, dict(state)))
    fail_times = ctx.config.get("fail_times", 2)
    assert isinstance(fail_times, int)
    if ctx.attempt <= fail_times:
        return Failure(f"flaky attempt {ctx.attempt} failed")
    return dict(_config_dict(ctx, "values")) or {"out": "ok"}


@NODES.node("always_fails")
def always_fails(state: NodeState, ctx: NodeContext) -> Failure:
    _record(ctx)
    return Failure("always_fails")


@NODES.node("fails_permanently")
def fails_permanently(state: NodeState, ctx: NodeContext) -> Failure:
    _record(ctx)
    return Failure("not_worth_retrying", retryable=False)


@NODES.node("raises")
def raises(state: NodeState, ctx: NodeContext) -> JSONDict:
    _record(ctx)
    raise RuntimeError("boom from a node")


@NODES.node("exits")
def exits(state: NodeState, ctx: NodeContext) -> JSONDict:
    _record(ctx)
    raise SystemExit(3)


@NODES.node("bad_return")  # type: ignore[arg-type]  # returns what no node may, on purpose
def bad_return(state: NodeState, ctx: NodeContext) -> object:
    _record(ctx)
    return ["not", "a", "map"]


@NODES.node("async_write")
async def async_write(state: NodeState, ctx: NodeContext) -> JSONDict:
    _record(ctx)
    await asyncio.sleep(0)
    return dict(_config_dict(ctx, "values"))


@NODES.node("async_sleep")
async def async_sleep(state: NodeState, ctx: NodeContext) -> JSONDict:
    """Sleeps ``config["seconds"]``; records cancellation in ``ctx.application["events"]``."""
    _record(ctx)
    seconds = ctx.config.get("seconds", 1.0)
    assert isinstance(seconds, float | int)
    events = ctx.application.get("events")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        if isinstance(events, list):
            events.append(("cancelled", ctx.node_id))
        raise
    return {}


@NODES.node("sync_sleep")
def sync_sleep(state: NodeState, ctx: NodeContext) -> JSONDict:
    _record(ctx)
    seconds = ctx.config.get("seconds", 1.0)
    assert isinstance(seconds, float | int)
    time.sleep(seconds)
    return {}


@NODES.node("kills_itself")
async def kills_itself(state: NodeState, ctx: NodeContext) -> JSONDict:
    _record(ctx)
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    await asyncio.sleep(1)
    return {}


@NODES.node("rendezvous")
async def rendezvous(state: NodeState, ctx: NodeContext) -> JSONDict:
    """Waits (bounded) until every node sharing ``ctx.application["barrier"]`` arrives."""
    _record(ctx)
    barrier = ctx.application["barrier"]
    assert isinstance(barrier, asyncio.Barrier)
    async with asyncio.timeout(5):
        await barrier.wait()
    seen = ctx.application["seen"]
    assert isinstance(seen, dict)
    seen[ctx.node_id] = dict(state)
    return {}


@NODES.node("thread_rendezvous")
def thread_rendezvous(state: NodeState, ctx: NodeContext) -> JSONDict:
    _record(ctx)
    barrier = ctx.application["thread_barrier"]
    assert isinstance(barrier, threading.Barrier)
    barrier.wait(timeout=5)
    return {}


class Status(enum.StrEnum):
    OK = "ok"


@NODES.node("enum_writer")
def enum_writer(state: NodeState, ctx: NodeContext) -> Mapping[str, object]:
    _record(ctx)
    return {"status": Status.OK}


@NODES.node("mutates_state")
def mutates_state(state: NodeState, ctx: NodeContext) -> JSONDict:
    """Mutates the snapshot it was given (which must not affect the run)."""
    _record(ctx)
    items = state.get("items")
    if isinstance(items, list):
        items.append("mutated")
    cast(dict[str, JSONValue], state)["items"] = ["replaced"]
    return {}


# -- graphs -----------------------------------------------------------------------------------


def minimal_linear() -> Graph:
    return (
        GraphBuilder("minimal_linear")
        .input("value", S.string(), required=True)
        .field("result", S.string())
        .node("copy", "copy", config={"from": "value", "to": "result"})
        .edge("start", START, "copy")
        .edge("done", "copy", FINISH)
        .output("result")
        .build()
    )


def simple_edge() -> Graph:
    return (
        GraphBuilder("simple_edge")
        .input("topic", S.string())
        .field("draft", S.string())
        .node("writer", "noop")
        .node("reviewer", "noop")
        .edge("start", START, "writer")
        .edge("review", "writer", "reviewer")
        .edge("done", "reviewer", FINISH)
        .output("draft")
        .build()
    )


def _fanout(builder: GraphBuilder) -> GraphBuilder:
    return (
        builder.input("topic", S.string())
        .node("source", "noop")
        .node("left", "noop")
        .node("right", "noop")
        .edge("start", START, "source")
        .edge("to_left", "source", "left")
        .edge("to_right", "source", "right")
    )


def fanout() -> Graph:
    return (
        _fanout(GraphBuilder("fanout"))
        .edge("left_done", "left", FINISH)
        .edge("right_done", "right", FINISH)
        .build()
    )


def multi_source_edge() -> Graph:
    return (
        _fanout(GraphBuilder("multi_source_edge"))
        .node("combine", "noop")
        .fan_in("join", ["left", "right"], "combine")
        .edge("done", "combine", FINISH)
        .build()
    )


def sticky_barrier() -> Graph:
    """``a`` completes at step 0, ``b`` only at step 1 (after ``pre_b``): the join still
    fires once both have completed."""
    return (
        GraphBuilder("sticky_barrier")
        .node("a", "noop")
        .node("pre_b", "noop")
        .node("b", "noop")
        .node("joined", "noop")
        .edge("to_a", START, "a")
        .edge("to_pre_b", START, "pre_b")
        .edge("to_b", "pre_b", "b")
        .fan_in("join", ["a", "b"], "joined")
        .edge("done", "joined", FINISH)
        .build()
    )


def guarded_edge() -> Graph:
    premium = equals(path("user", ["premium_user"]), True)
    return (
        GraphBuilder("guarded_edge")
        .input("user", S.map(), required=True)
        .field("route", S.string())
        .node("fetch", "noop")
        .node("premium_step", "write", config={"values": {"route": "premium"}})
        .node("standard_step", "write", config={"values": {"route": "standard"}})
        .edge("start", START, "fetch")
        .edge("premium", "fetch", "premium_step", guard=premium)
        .edge("standard", "fetch", "standard_step", guard=not_(premium))
        .edge("premium_done", "premium_step", FINISH)
        .edge("standard_done", "standard_step", FINISH)
        .output("route")
        .build()
    )


def _counter(graph_id: str, *, finish_at: float, limit: int | None) -> Graph:
    builder = (
        GraphBuilder(graph_id)
        .field("count", S.float(), default=0.0)
        .node("increment", "increment")
        .node("decide", "noop")
        .edge("start", START, "increment")
        .edge("check", "increment", "decide")
        .edge("again", "decide", "increment", guard=not_(equals("count", finish_at)))
        .edge("done", "decide", FINISH, guard=equals("count", finish_at))
        .output("count")
    )
    if limit is not None:
        builder.max_supersteps(limit)
    return builder.build()


def cycle_counter(limit: int | None = 50) -> Graph:
    return _counter("cycle_counter", finish_at=10.0, limit=limit)


def endless_cycle() -> Graph:
    return _counter("endless_cycle", finish_at=-1.0, limit=None)


def interrupt_review(interrupt_id: str | None = None) -> Graph:
    config: JSONDict = {} if interrupt_id is None else {"interrupt_id": interrupt_id}
    return (
        GraphBuilder("interrupt_review")
        .field("decision", S.string())
        .field("applied", S.string())
        .node("gate", "gate", config=config)
        .edge("start", START, "gate")
        .edge("done", "gate", FINISH)
        .output("applied")
        .build()
    )


def interrupt_with_parallel_work() -> Graph:
    return (
        GraphBuilder("interrupt_with_parallel_work")
        .field("decision", S.string())
        .field("applied", S.string())
        .field("worked", S.string())
        .node("gate", "gate")
        .node("worker", "write", config={"values": {"worked": "yes"}})
        .node("after_worker", "noop")
        .edge("to_gate", START, "gate")
        .edge("to_worker", START, "worker")
        .edge("follow", "worker", "after_worker")
        .edge("gate_done", "gate", FINISH)
        .edge("after_done", "after_worker", FINISH)
        .output("applied")
        .output("worked")
        .build()
    )


def activation_while_paused() -> Graph:
    """``worker`` activates ``gate`` in the same barrier in which ``gate`` pauses; the
    activation must survive the next barrier (``after_worker``'s) and ``gate`` must run
    once after the resolution."""
    return (
        GraphBuilder("activation_while_paused")
        .field("decision", S.string())
        .field("applied", S.string())
        .node("gate", "gate")
        .node("worker", "noop")
        .node("after_worker", "noop")
        .edge("to_gate", START, "gate")
        .edge("to_worker", START, "worker")
        .edge("poke", "worker", "gate")
        .edge("follow", "worker", "after_worker")
        .edge("gate_done", "gate", FINISH)
        .edge("after_done", "after_worker", FINISH)
        .output("applied")
        .build()
    )


def retry_then_continue(*, max_attempts: int = 3, backoff_ms: int = 0) -> Graph:
    return (
        GraphBuilder("retry_then_continue")
        .field("out", S.string())
        .node(
            "flaky",
            "flaky",
            config={"values": {"out": "ok"}},
            retry=RetryPolicy(max_attempts, backoff_ms),
        )
        .edge("start", START, "flaky")
        .edge("done", "flaky", FINISH)
        .output("out")
        .build()
    )


def parallel_retry(*, backoff_ms: int = 0, fail_times: int = 1, max_attempts: int = 3) -> Graph:
    """``flaky`` (fails ``fail_times`` times) and ``steady`` run in the same superstep."""
    return (
        GraphBuilder("parallel_retry")
        .field("out", S.string())
        .field("steady_out", S.string())
        .node(
            "flaky",
            "flaky",
            config={"fail_times": fail_times, "values": {"out": "ok"}},
            retry=RetryPolicy(max_attempts, backoff_ms),
        )
        .node("steady", "write", config={"values": {"steady_out": "steady"}})
        .edge("to_flaky", START, "flaky")
        .edge("to_steady", START, "steady")
        .edge("flaky_done", "flaky", FINISH)
        .edge("steady_done", "steady", FINISH)
        .output("out")
        .build()
    )


def parallel_failure() -> Graph:
    return (
        GraphBuilder("parallel_failure")
        .field("ok_out", S.string())
        .node("ok_node", "write", config={"values": {"ok_out": "ok"}})
        .node("failing_node", "always_fails")
        .node("should_not_run", "noop")
        .edge("to_ok", START, "ok_node")
        .edge("to_failing", START, "failing_node")
        .fan_in("join", ["failing_node", "ok_node"], "should_not_run")
        .edge("done", "should_not_run", FINISH)
        .output("ok_out")
        .build()
    )


def same_step_isolation() -> Graph:
    return (
        GraphBuilder("same_step_isolation")
        .field("x", S.string(), default="old")
        .field("y", S.string())
        .node("writer", "write", config={"values": {"x": "new"}})
        .node("reader", "copy", config={"from": "x", "to": "y"})
        .edge("to_writer", START, "writer")
        .edge("to_reader", START, "reader")
        .edge("writer_done", "writer", FINISH)
        .edge("reader_done", "reader", FINISH)
        .output("x")
        .output("y")
        .build()
    )


def write_conflict() -> Graph:
    return (
        GraphBuilder("write_conflict")
        .field("out", S.string())
        .node("a_writer", "write", config={"values": {"out": "from_a"}})
        .node("b_writer", "write", config={"values": {"out": "from_b"}})
        .edge("to_a", START, "a_writer")
        .edge("to_b", START, "b_writer")
        .edge("a_done", "a_writer", FINISH)
        .edge("b_done", "b_writer", FINISH)
        .output("out")
        .build()
    )


def single_node(implementation: str, **node: object) -> Graph:
    """One node running ``implementation`` (extra keyword args go to ``builder.node``)."""
    builder = GraphBuilder(f"single_{implementation}").field("out", S.string())
    builder.node("only", implementation, **node)  # type: ignore[arg-type]  # test plumbing
    return builder.edge("start", START, "only").edge("done", "only", FINISH).output("out").build()


def reducers() -> Graph:
    """Three supersteps of appends (``a`` -> ``b`` -> ``c``) plus same-step folds."""
    return (
        GraphBuilder("reducers")
        .field("log", S.list(S.string()), reducer=R.append())
        .field("seeded", S.list(S.string()), reducer=R.append(), default=["seed"])
        .field("total", S.integer(), reducer=R.sum())
        .field("info", S.map(), reducer=R.merge())
        .field("first", S.string(), reducer=R.first_value())
        .node("a", "write", config={"values": {"log": "one", "seeded": "from_a", "total": 2}})
        .node(
            "a2",
            "write",
            config={"values": {"seeded": ["from_b"], "total": 3, "info": {"a": 1}}},
        )
        .node("b", "write", config={"values": {"log": "two", "info": {"b": 2}, "first": "x"}})
        .node("c", "write", config={"values": {"log": ["three"], "first": "y"}})
        .edge("to_a", START, "a")
        .edge("to_a2", START, "a2")
        .edge("ab", "a", "b")
        .edge("bc", "b", "c")
        .edge("done", "c", FINISH)
        .output("log")
        .output("seeded")
        .output("total")
        .output("info")
        .output("first")
        .build()
    )


def append_resolution() -> Graph:
    """An interrupt whose resume field is an append list."""
    return (
        GraphBuilder("append_resolution")
        .field("answers", S.list(S.string()), reducer=R.append())
        .node("asker", "asker")
        .edge("start", START, "asker")
        .edge("done", "asker", FINISH)
        .output("answers")
        .build()
    )


@NODES.node("asker")
def asker(state: NodeState, ctx: NodeContext) -> JSONDict | Interrupt:
    _record(ctx)
    answers = state.get("answers")
    if not answers:
        return Interrupt("answers", schema=S.string())
    return {}


# -- the table used by the whole-suite tests ----------------------------------------------------

Factory = Callable[[], Graph]

#: name -> (graph factory, run input, interrupt answer or None)
FIXTURES: dict[str, tuple[Factory, JSONDict, JSONValue]] = {
    "minimal_linear": (minimal_linear, {"value": "hello"}, None),
    "simple_edge": (simple_edge, {"topic": "otters"}, None),
    "fanout": (fanout, {}, None),
    "multi_source_edge": (multi_source_edge, {}, None),
    "sticky_barrier": (sticky_barrier, {}, None),
    "guarded_edge": (guarded_edge, {"user": {"premium_user": True}}, None),
    "cycle_counter": (cycle_counter, {}, None),
    "endless_cycle": (endless_cycle, {}, None),
    "interrupt_review": (interrupt_review, {}, "approved"),
    "interrupt_with_parallel_work": (interrupt_with_parallel_work, {}, "approved"),
    "activation_while_paused": (activation_while_paused, {}, "approved"),
    "retry_then_continue": (retry_then_continue, {}, None),
    "parallel_retry": (parallel_retry, {}, None),
    "parallel_failure": (parallel_failure, {}, None),
    "same_step_isolation": (same_step_isolation, {}, None),
    "write_conflict": (write_conflict, {}, None),
    "reducers": (reducers, {}, None),
    "append_resolution": (append_resolution, {}, "yes"),
}


def compiled(graph: Graph) -> CompileResult:
    result = compile_graph(graph, NODES)
    assert result.ok, result.errors
    return result


def runtime(graph: Graph) -> RuntimeGraph:
    rtg = compiled(graph).runtime
    assert rtg is not None
    return rtg
