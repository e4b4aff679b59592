"""Inline runner vs LangGraph: median wall time per run on three small graph shapes.

    python bench/inline.py [--batches 15] [--batch-size 40] [--warmup 30]

Shapes (all nodes are sync no-ops returning an empty update):

- ``single_node``: one node;
- ``chain_10``: ten nodes in a line;
- ``fanout_8``: eight nodes started together.

Contenders, timed in the same process, interleaved batch by batch so machine noise hits
them alike:

- ``docket inline``: ``docket.testing.run_inline`` on a precompiled runtime graph. Every run
  builds its full run document and all of its events and checkpoints (the contract
  validator and the backend commit are off, as in a unit test);
- ``langgraph``: the compiled ``StateGraph`` without a checkpointer;
- ``langgraph+inmemorysaver``: the same with ``InMemorySaver`` (a fresh thread per run).

Prints a table of medians and, per shape, ``ratio <shape> inline
docket/langgraph_inmemorysaver=<x>`` (below 1 means docket is faster). LangGraph is only
imported here; docket does not depend on it. Install it with ``pip install langgraph``.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import operator
import statistics
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from docket.graph.builder import GraphBuilder
from docket.graph.compiler import RuntimeGraph, compile_graph
from docket.graph.model import FINISH, START
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.schema import S
from docket.records import RunStatus
from docket.testing import run_inline
from docket.values import JSONDict

SHAPES = ("single_node", "chain_10", "fanout_8")

# -- docket ---------------------------------------------------------------------------------

REGISTRY = NodeRegistry()


@REGISTRY.node("noop")
def noop(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {}


def docket_graph(shape: str) -> RuntimeGraph:
    builder = GraphBuilder(shape).input("value", S.integer())
    if shape == "single_node":
        builder.node("n0", "noop").edge("start", START, "n0").edge("done", "n0", FINISH)
    elif shape == "chain_10":
        for i in range(10):
            builder.node(f"n{i}", "noop")
        builder.edge("start", START, "n0").edge("done", "n9", FINISH)
        for i in range(9):
            builder.edge(f"e{i}", f"n{i}", f"n{i + 1}")
    elif shape == "fanout_8":
        for i in range(8):
            builder.node(f"n{i}", "noop")
            builder.edge(f"s{i}", START, f"n{i}").edge(f"f{i}", f"n{i}", FINISH)
    else:
        raise ValueError(shape)
    result = compile_graph(builder.build(), REGISTRY)
    assert result.ok and result.runtime is not None, result.errors
    return result.runtime


def docket_runner(shape: str) -> Callable[[], None]:
    rtg = docket_graph(shape)
    expected_checkpoints = {"single_node": 3, "chain_10": 12, "fanout_8": 3}[shape]

    def run() -> None:
        result = run_inline(rtg, {"value": 1})
        if result.run.status is not RunStatus.DONE:
            raise AssertionError(f"{shape}: run ended {result.run.status}")
        if len(result.checkpoints) != expected_checkpoints:
            raise AssertionError(f"{shape}: {len(result.checkpoints)} checkpoints")

    return run


# -- langgraph ------------------------------------------------------------------------------


class LGState(TypedDict, total=False):
    value: int
    out: Annotated[list[str], operator.add]


def _lg_noop(state: LGState) -> dict[str, Any]:
    return {}


def langgraph_runner(shape: str, *, saver: bool) -> Callable[[], None] | None:
    try:
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.graph import END, StateGraph
        from langgraph.graph import START as LG_START
    except ImportError:
        return None
    graph: Any = StateGraph(LGState)
    if shape == "single_node":
        graph.add_node("n0", _lg_noop)
        graph.add_edge(LG_START, "n0")
        graph.add_edge("n0", END)
    elif shape == "chain_10":
        for i in range(10):
            graph.add_node(f"n{i}", _lg_noop)
        graph.add_edge(LG_START, "n0")
        for i in range(9):
            graph.add_edge(f"n{i}", f"n{i + 1}")
        graph.add_edge("n9", END)
    else:
        for i in range(8):
            graph.add_node(f"n{i}", _lg_noop)
            graph.add_edge(LG_START, f"n{i}")
            graph.add_edge(f"n{i}", END)
    app: Any = graph.compile(checkpointer=InMemorySaver() if saver else None)
    threads = itertools.count()

    def run() -> None:
        config = {"configurable": {"thread_id": f"t{next(threads)}"}} if saver else None
        app.invoke({"value": 1}, config)

    return run


# -- timing ---------------------------------------------------------------------------------


def per_run_seconds(fn: Callable[[], None], batch_size: int) -> float:
    started = time.perf_counter()
    for _ in range(batch_size):
        fn()
    return (time.perf_counter() - started) / batch_size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args(argv)

    contenders: dict[str, dict[str, Callable[[], None]]] = {}
    missing_langgraph = False
    for shape in SHAPES:
        row: dict[str, Callable[[], None]] = {"docket inline": docket_runner(shape)}
        plain = langgraph_runner(shape, saver=False)
        saved = langgraph_runner(shape, saver=True)
        if plain is None or saved is None:
            missing_langgraph = True
        else:
            row["langgraph"] = plain
            row["langgraph+inmemorysaver"] = saved
        contenders[shape] = row
    if missing_langgraph:
        print("langgraph is not installed (pip install langgraph): timing docket alone")

    medians: dict[str, dict[str, float]] = {}
    for shape, row in contenders.items():
        for fn in row.values():
            for _ in range(args.warmup):
                fn()
        samples: dict[str, list[float]] = {name: [] for name in row}
        gc.collect()
        for _ in range(args.batches):
            for name, fn in row.items():
                samples[name].append(per_run_seconds(fn, args.batch_size))
        medians[shape] = {name: statistics.median(s) for name, s in samples.items()}

    names = list(next(iter(contenders.values())))
    width = max(len(n) for n in names) + 2
    print(f"median time per run ({args.batches} batches of {args.batch_size}, µs)")
    print(f"{'shape':<12}" + "".join(f"{n:>{width}}" for n in names))
    for shape in SHAPES:
        cells = "".join(f"{medians[shape][n] * 1e6:>{width}.0f}" for n in names)
        print(f"{shape:<12}{cells}")
    for shape in SHAPES:
        saver_time = medians[shape].get("langgraph+inmemorysaver")
        if saver_time:
            ratio = medians[shape]["docket inline"] / saver_time
            print(f"ratio {shape} inline docket/langgraph_inmemorysaver={ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
