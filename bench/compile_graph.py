"""Time ``compile_graph`` on a 1,000-node graph.

The graph is a chain of nodes with a guarded side branch every 10 nodes, a fan-in
barrier joining each branch back, 50 state fields read by guards, a bounded cycle and
config defaults to materialise. Usage::

    python bench/compile_graph.py [--nodes 1000] [--runs 20]

Prints the median, best and worst wall time in milliseconds. Not a test.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

from docket.graph.builder import GraphBuilder
from docket.graph.compiler import compile_graph
from docket.graph.guards import changed, equals, not_, path
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodeContext, NodeDefinition, NodeRegistry, NodeReturn, NodeState
from docket.graph.reducers import R
from docket.graph.schema import S


def _step(state: NodeState, ctx: NodeContext) -> NodeReturn:
    return {}


REGISTRY = NodeRegistry(
    [
        NodeDefinition(
            "bench.step",
            _step,
            S.object({"field": S.string(required=True), "weight": S.float(default=1.0)}),
        )
    ]
)


def build(nodes: int) -> Graph:
    fields = 50
    b = GraphBuilder("bench", name="compile benchmark").input("seed", S.string(), required=True)
    for f in range(fields):
        b = b.field(f"f{f}", S.object({"ok": S.boolean(), "n": S.integer()}, open=True))
    b = b.field("log", S.list(S.string()), reducer=R.append())
    chain = [i for i in range(nodes) if i % 10 != 5]
    for i in range(nodes):
        b = b.node(f"n{i}", "bench.step", config={"field": f"f{i % fields}"}, label=f"step {i}")
    b = b.edge("start", START, f"n{chain[0]}")
    for prev, cur in itertools.pairwise(chain):
        b = b.edge(f"e{cur}", f"n{prev}", f"n{cur}", guard=changed(f"f{prev % fields}"))
    for i in range(5, nodes, 10):  # side branch i-1 -> i, joined back at i+1 by a barrier
        b = b.edge(
            f"side{i}", f"n{i - 1}", f"n{i}", guard=equals(path(f"f{i % fields}", ["ok"]), True)
        )
        if i + 1 < nodes:
            b = b.fan_in(f"join{i}", [f"n{i}", f"n{i - 1}"], f"n{i + 1}")
    last = f"n{chain[-1]}"
    b = b.edge("loop", last, f"n{chain[0]}", guard=not_(equals(path("f0", ["ok"]), True)))
    b = b.edge("finish", last, FINISH, guard=equals(path("f0", ["ok"]), True))
    return b.max_supersteps(5_000).output("log").build()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    graph = build(args.nodes)
    first = compile_graph(graph, REGISTRY)
    assert first.ok, [str(d) for d in first.errors]
    assert first.runtime is not None and first.graph_hash is not None
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        compile_graph(graph, REGISTRY)
        times.append((time.perf_counter() - start) * 1000)
    print(
        f"compile_graph: {len(graph.nodes)} nodes, {len(graph.edges)} edges, "
        f"{len(graph.fields)} fields, {len(first.diagnostics)} warnings"
    )
    print(
        f"median {statistics.median(times):.1f} ms over {args.runs} runs "
        f"(best {min(times):.1f} ms, worst {max(times):.1f} ms); hash {first.graph_hash[:12]}"
    )


if __name__ == "__main__":
    main()
