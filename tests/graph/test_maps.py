"""The ``map`` node option as data: wire round trip, hash, builder, compiler checks, drawing."""

from __future__ import annotations

from typing import Any

import pytest

from docket.graph.builder import GraphBuilder
from docket.graph.compiler import compile_effective_document, compile_graph, effective_document
from docket.graph.maps import MapSpec
from docket.graph.model import FINISH, START, DiagnosticCode, Graph
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.reducers import R
from docket.graph.render import to_dot, to_mermaid
from docket.graph.schema import S
from docket.graph.wire import from_dict, from_json, to_dict, to_json
from docket.values import JSONDict

NODES = NodeRegistry()


@NODES.node("ask")
def ask(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"answers": str(ctx.item)}


def graph(spec: MapSpec | dict[str, Any] | None) -> Graph:
    return (
        GraphBuilder("maps")
        .input("questions", S.list(S.string()), required=True)
        .input("title", S.string())
        .field("answers", S.list(S.string()), reducer=R.append())
        .node("ask", "ask", map=spec)
        .edge("go", START, "ask")
        .edge("end", "ask", FINISH)
        .output("answers")
        .build()
    )


SPEC = MapSpec(over="questions", item="question", max_items=10, max_parallel=2)


def test_the_option_round_trips_through_json() -> None:
    g = graph(SPEC)
    doc: Any = to_dict(g)
    assert doc["nodes"]["ask"]["map"] == {
        "over": "questions",
        "as": "question",
        "max_items": 10,
        "max_parallel": 2,
    }
    assert from_json(to_json(g)) == g and from_dict(doc) == g
    # the dict form and the record are the same document; no option writes no key
    assert graph(SPEC.to_json()) == g
    plain: Any = to_dict(graph(None))
    assert "map" not in plain["nodes"]["ask"]


def test_the_option_is_covered_by_the_hash() -> None:
    hashes = {
        compile_graph(graph(spec), NODES).graph_hash
        for spec in (None, SPEC, MapSpec(over="questions", item="question", max_parallel=3))
    }
    assert len(hashes) == 3 and None not in hashes
    compiled = compile_graph(graph(SPEC), NODES)
    assert compiled.ok and compiled.effective is not None and compiled.runtime is not None
    again = compile_effective_document(effective_document(compiled.effective), NODES)
    assert again.graph_hash == compiled.graph_hash
    assert compiled.runtime.nodes["ask"].map == SPEC


@pytest.mark.parametrize(
    ("spec", "key", "words"),
    [
        ({"as": "question"}, "over", "list-typed"),
        ({"over": "nope", "as": "question"}, "over", "no input or field"),
        ({"over": "title", "as": "question"}, "over", "not a list"),
        ({"over": "questions"}, "as", "valid ID"),
        ({"over": "questions", "as": "bad id!"}, "as", "valid ID"),
        ({"over": "questions", "as": "answers"}, "as", "clashes"),
        ({"over": "questions", "as": "q", "max_items": 0}, "max_items", "positive"),
        ({"over": "questions", "as": "q", "max_parallel": True}, "max_parallel", "positive"),
        ({"over": "questions", "as": "q", "fan": 1}, "fan", "unknown map key"),
    ],
)
def test_the_compiler_rejects_a_bad_option(spec: dict[str, Any], key: str, words: str) -> None:
    result = compile_graph(graph(spec), NODES)
    assert not result.ok
    (found,) = [d for d in result.diagnostics if d.code is DiagnosticCode.INVALID_MAP]
    assert found.pointer == f"/nodes/ask/map/{key}"
    assert words in found.message


def test_a_field_named_only_by_a_map_is_not_orphaned() -> None:
    g = (
        GraphBuilder("orphan")
        .field("questions", S.list(S.string()), default=["a"])
        .field("answers", S.list(S.string()), reducer=R.append())
        .node("ask", "ask", map={"over": "questions", "as": "q"})
        .edge("go", START, "ask")
        .edge("end", "ask", FINISH)
        .output("answers")
        .build()
    )
    codes = [d.code for d in compile_graph(g, NODES).diagnostics]
    assert DiagnosticCode.ORPHANED_FIELD not in codes


def test_maps_are_drawn() -> None:
    g = graph(SPEC)
    text = "map: each question in questions (max_items 10, max_parallel 2)"
    assert text in to_mermaid(g)
    assert text in to_dot(g)
    assert "map:" not in to_mermaid(graph(None))
