"""The ``child`` node option as data: wire round trip, hash, builder, compiler checks,
drawing, and the compiled stand-in that is never called."""

from __future__ import annotations

from typing import Any

import pytest

from docket.graph.builder import GraphBuilder
from docket.graph.children import CHILD_IMPLEMENTATION, ChildSpec
from docket.graph.compiler import compile_graph
from docket.graph.maps import MapSpec
from docket.graph.model import FINISH, START, DiagnosticCode, Graph
from docket.graph.nodes import NodeContext, NodeRegistry
from docket.graph.reducers import R
from docket.graph.render import to_dot, to_mermaid
from docket.graph.schema import S
from docket.graph.wire import from_dict, from_json, to_dict, to_json

NODES = NodeRegistry()
SPEC = ChildSpec(graph="summary", input={"text": "draft"}, output={"short": "summary"})


def graph(child: ChildSpec | dict[str, Any], **node: Any) -> Graph:
    return (
        GraphBuilder("parent")
        .input("draft", S.string())
        .field("short", S.string())
        .field("many", S.list(S.string()), reducer=R.append())
        .node("sum", child=child, **node)
        .edge("go", START, "sum")
        .edge("end", "sum", FINISH)
        .output("short")
        .output("many")
        .build()
    )


def _problems(g: Graph) -> list[tuple[str, str]]:
    return [
        (str(d.code), "/" + "/".join(str(p) for p in d.path))
        for d in compile_graph(g, NODES).diagnostics
        if d.code is DiagnosticCode.INVALID_CHILD
    ]


def test_the_option_round_trips_and_is_hashed() -> None:
    g = graph(SPEC)
    doc: Any = to_dict(g)
    assert doc["nodes"]["sum"] == {
        "child": {"graph": "summary", "input": {"text": "draft"}, "output": {"short": "summary"}}
    }
    assert from_json(to_json(g)) == g and from_dict(doc) == g
    assert graph(SPEC.to_json()) == g
    pinned = graph(ChildSpec(graph="summary", graph_hash="abc", input=SPEC.input))
    one, two = compile_graph(g, NODES), compile_graph(pinned, NODES)
    assert one.ok and two.ok and one.graph_hash != two.graph_hash


def test_a_child_node_compiles_to_a_stand_in_that_is_never_called() -> None:
    result = compile_graph(graph(SPEC), NODES)
    assert result.ok and result.runtime is not None
    node = result.runtime.nodes["sum"]
    assert node.child == SPEC and node.implementation == CHILD_IMPLEMENTATION
    assert result.runtime.has_children
    with pytest.raises(RuntimeError, match="no function to call"):
        node.definition({}, NodeContext(run_id="r", node_id="sum", step=0, attempt=1))


def test_the_compiler_checks_the_option() -> None:
    bad = {
        "graph": "not a valid id!",
        "hash": "",
        "input": {"x": "nowhere"},
        "output": {"draft": "y"},
        "extra": 1,
    }
    found = _problems(graph(bad))
    paths = sorted(p for _, p in found)
    assert paths == sorted(
        [
            "/nodes/sum/child/extra",
            "/nodes/sum/child/graph",
            "/nodes/sum/child/hash",
            "/nodes/sum/child/input",
            "/nodes/sum/child/output",  # an input is not a state field
        ]
    ), found
    both = _problems(graph(SPEC, implementation="x", config={"a": 1}))
    assert sorted(p for _, p in both) == ["/nodes/sum/config", "/nodes/sum/implementation"]


def test_a_map_item_can_be_a_child_input() -> None:
    g = graph(
        ChildSpec(graph="summary", input={"text": "item"}, output={"many": "summary"}),
        map=MapSpec(over="many", item="item"),
    )
    assert _problems(g) == []
    assert compile_graph(g, NODES).ok


def test_children_are_drawn() -> None:
    assert "child run: summary" in to_mermaid(graph(SPEC))
    assert "child run: summary" in to_dot(graph(SPEC))
