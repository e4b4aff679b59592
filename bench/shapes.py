"""The benchmark's graph shapes, built once for docket and once for LangGraph.

Every node of the three comparison shapes is an ``async def`` no-op returning an empty
update, on both sides, so the engines' own costs (scheduling, state handling,
persistence) are what gets timed. (A sync node would cost docket a hop to a worker thread,
about 100 µs, and LangGraph a hop to its executor: neither is what is being compared.)

- ``single_node``: one node;
- ``chain_10``: ten nodes in a line (ten supersteps);
- ``fanout_8``: eight nodes started together (one superstep);
- ``map_32``: a node writes a list of 32 items, a map runs one task per item (docket's
  ``map`` option; LangGraph's ``Send``), then a join node (three supersteps);
- ``child_run``: a parent whose one node runs a one-node child graph (docket: a ``child``
  node, the child a durable run of its own; LangGraph: the compiled child ``StateGraph``
  added as the parent's node, its checkpoints under the parent's thread). The child
  graph's id is :data:`CHILD_GRAPH`; :func:`docket_children` gives the graphs to save
  before a shape's own.

``long_chat`` is docket only: one node looping on itself, each superstep appending a
1 KB message to a list field, until ``turns`` supersteps have run.

LangGraph is imported inside the functions that need it, so this module (and mypy)
works without it.
"""

from __future__ import annotations

from typing import Any, TypedDict

from docket import FINISH, START, GraphBuilder, NodeRegistry
from docket.graph.children import ChildSpec
from docket.graph.guards import equals, not_
from docket.graph.maps import MapSpec
from docket.graph.model import Graph
from docket.graph.nodes import NodeContext, NodeState
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.values import JSONDict

SHAPES = ("single_node", "chain_10", "fanout_8", "map_32", "child_run")
MAP_ITEMS = 32
CHILD_GRAPH = "child_run_child"
# Node layers executed per run: the superstep count used for supersteps/s on both sides
# (``child_run``: the parent's calling node and the child's node).
SUPERSTEPS = {"single_node": 1, "chain_10": 10, "fanout_8": 1, "map_32": 3, "child_run": 2}
# The nodes of each layer, in order: what every engine's record of a run is checked against
# (``child_run``: the parent's own layer; its child's are in CHILD_LAYERS).
LAYERS = {
    "single_node": (1,),
    "chain_10": (1,) * 10,
    "fanout_8": (8,),
    "map_32": (1, MAP_ITEMS, 1),
    "child_run": (1,),
}
# The layers of the one child run a run of the shape makes.
CHILD_LAYERS = {"child_run": (1,)}
# docket: a finished run's ``checkpoint_seq`` (the start, one per superstep, the finish;
# ``child_run``'s parent one more: its superstep parks on the child, and the child's end
# is handed over in a commit of its own before the finish).
DOCKET_CHECKPOINTS = {shape: len(layers) + 2 for shape, layers in LAYERS.items()} | {"child_run": 4}
# docket: the child run's ``checkpoint_seq``.
DOCKET_CHILD_CHECKPOINTS = {shape: len(layers) + 2 for shape, layers in CHILD_LAYERS.items()}
# LangGraph: writes beyond one per task (a ``Send`` is one more write of the task sending it).
LANGGRAPH_SEND_WRITES = {"map_32": MAP_ITEMS}
MESSAGE = "m" * 1024

NODES = NodeRegistry()


@NODES.node("noop")
async def noop(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {}


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) else default


@NODES.node("split")
async def split(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"items": list(range(MAP_ITEMS))}


@NODES.node("chat_turn")
async def chat_turn(state: NodeState, ctx: NodeContext) -> JSONDict:
    turn = _int(state.get("turn"), 0) + 1
    limit = _int(state.get("turns"), 200)
    return {"messages": [MESSAGE], "turn": turn, "finished": turn >= limit}


def docket_graph(shape: str) -> Graph:
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
    elif shape == "map_32":
        builder.field("items", S.list(S.integer()))
        builder.node("split", "split").node("join", "noop")
        builder.node("work", "noop", map=MapSpec(over="items", item="item"))
        builder.edge("start", START, "split").edge("fan", "split", "work")
        builder.edge("gather", "work", "join").edge("done", "join", FINISH)
    elif shape == "child_run":
        # The child's output lands in a field (a child node writes state fields only), and
        # the parent's output is that field: what the read-back checks came back.
        builder.field("result", S.integer())
        child = ChildSpec(graph=CHILD_GRAPH, input={"value": "value"}, output={"result": "value"})
        builder.node("call", child=child).output("result")
        builder.edge("start", START, "call").edge("done", "call", FINISH)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return builder.build()


def docket_children(shape: str) -> tuple[Graph, ...]:
    """The graphs a shape's graph runs as child runs: saved before it, so that saving it
    pins each child node to the child's saved version."""
    if shape != "child_run":
        return ()
    child = (
        GraphBuilder(CHILD_GRAPH)
        .input("value", S.integer())
        .node("n0", "noop")
        .edge("start", START, "n0")
        .edge("done", "n0", FINISH)
        .output("value")
        .build()
    )
    return (child,)


def long_chat_graph(turns: int) -> Graph:
    return (
        GraphBuilder("long_chat")
        .input("turns", S.integer())
        .field("turn", S.integer())
        .field("finished", S.boolean())
        .field("messages", S.list(S.string()), reducer=R.append())
        .node("chat", "chat_turn")
        .edge("start", START, "chat")
        .edge("again", "chat", "chat", guard=not_(equals("finished", True)))
        .edge("done", "chat", FINISH, guard=equals("finished", True))
        .max_supersteps(turns + 10)
        .build()
    )


# -- LangGraph ------------------------------------------------------------------------------


class LGState(TypedDict, total=False):
    value: int
    items: list[int]


async def _lg_split(state: LGState) -> dict[str, Any]:
    return {"items": list(range(MAP_ITEMS))}


async def _lg_noop_async(state: LGState) -> dict[str, Any]:
    return {}


def _lg_noop_sync(state: LGState) -> dict[str, Any]:
    return {}


def langgraph_app(shape: str, checkpointer: Any, *, use_async: bool = True) -> Any:
    """The compiled ``StateGraph`` of ``shape``; ``async def`` nodes unless told otherwise."""
    from langgraph.graph import END, StateGraph
    from langgraph.graph import START as LG_START

    fn: Any = _lg_noop_async if use_async else _lg_noop_sync
    graph: Any = StateGraph(LGState)
    if shape == "single_node":
        graph.add_node("n0", fn)
        graph.add_edge(LG_START, "n0")
        graph.add_edge("n0", END)
    elif shape == "chain_10":
        for i in range(10):
            graph.add_node(f"n{i}", fn)
        graph.add_edge(LG_START, "n0")
        for i in range(9):
            graph.add_edge(f"n{i}", f"n{i + 1}")
        graph.add_edge("n9", END)
    elif shape == "fanout_8":
        for i in range(8):
            graph.add_node(f"n{i}", fn)
            graph.add_edge(LG_START, f"n{i}")
            graph.add_edge(f"n{i}", END)
    elif shape == "child_run":
        # Compiled without a checkpointer, the subgraph inherits the parent's (and its
        # ``durability``): its checkpoints go to the same saver under the namespace
        # ``call:<task id>`` of the parent's thread.
        graph.add_node("call", langgraph_app("single_node", None, use_async=use_async))
        graph.add_edge(LG_START, "call")
        graph.add_edge("call", END)
    elif shape == "map_32":
        from langgraph.types import Send

        def fan(state: LGState) -> list[Any]:
            return [Send("work", {"value": item}) for item in state.get("items", [])]

        graph.add_node("split", _lg_split)
        graph.add_node("work", fn)
        graph.add_node("join", fn)
        graph.add_edge(LG_START, "split")
        graph.add_conditional_edges("split", fan, ["work"])
        graph.add_edge("work", "join")
        graph.add_edge("join", END)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return graph.compile(checkpointer=checkpointer)
