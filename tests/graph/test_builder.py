"""The fluent builder, checked against the editing API and the essay example."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from docket.graph.builder import GraphBuilder
from docket.graph.guards import equals, not_, path
from docket.graph.model import FINISH, START, FieldKind, GraphError, GraphErrorCode, new_graph
from docket.graph.nodes import RetryPolicy
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.graph.wire import from_json, to_json

ESSAY = Path(__file__).resolve().parents[2] / "examples" / "graphs" / "essay.json"


def essay() -> GraphBuilder:
    """The graph of ``examples/graphs/essay.json`` and ``docs/graphs.md``."""
    approved = equals(path("review", ["approved"]), True)
    return (
        GraphBuilder("essay", name="Essay writer", description="Outline, research, write, review.")
        .input("topic", S.string(min_length=3), required=True)
        .input("audience", S.enum(["general", "expert"]), default="general")
        .field("outline", S.string())
        .field("notes", S.list(S.string()), reducer=R.append())
        .field("draft", S.string())
        .field(
            "review",
            S.object({"approved": S.boolean(required=True), "comments": S.list(S.string())}),
        )
        .field("revisions", S.integer(min=0), reducer=R.sum(), default=0)
        .node("outline", "essay.outline", config={"sections": 4})
        .node("research", "essay.research")
        .node(
            "writer",
            "essay.writer",
            config={"tone": "warm", "sources": ["outline", "notes"]},
            retry=RetryPolicy(max_attempts=3, backoff_ms=500),
            timeout_ms=120_000,
        )
        .node("reviewer", "essay.reviewer")
        .edge("plan", START, "outline")
        .edge("dig", START, "research")
        .fan_in("gather", ["outline", "research"], "writer")
        .edge("submit", "writer", "reviewer")
        .edge("approve", "reviewer", FINISH, guard=approved)
        .edge("revise", "reviewer", "writer", guard=not_(approved), label="needs work")
        .branch("reviewer", "verdict", ["approve", "revise"])
        .max_supersteps(12)
        .output("essay", "draft", label="Final essay")
        .output("revisions")
    )


def test_builder_matches_the_example_file() -> None:
    text = ESSAY.read_text(encoding="utf-8")
    assert essay().build() == from_json(text)
    assert to_json(essay().build()) == text, "the example file is the canonical JSON text"


def test_builder_is_the_editing_api() -> None:
    built = (
        GraphBuilder("g")
        .input("topic", S.string(), required=True)
        .field("draft", "string")
        .node("writer", "essay.writer", config={"tone": "warm"})
        .edge("e1", START, "writer")
        .edge("e2", "writer", FINISH)
        .output("draft")
        .build()
    )
    edited = (
        new_graph("g")
        .put_input("topic", S.string(), required=True)
        .put_field("draft", S.string())
        .put_node("writer", "essay.writer", config={"tone": "warm"})
        .put_edge("e1", START, "writer")
        .put_edge("e2", "writer", FINISH)
        .put_output("draft")
    )
    assert built == edited
    assert built.inputs["topic"].kind is FieldKind.INPUT and built.diagnostics == ()


def test_policies_from_arguments() -> None:
    graph = essay().build()
    assert graph.nodes["writer"].policies == {
        "retry": {"max_attempts": 3, "backoff_ms": 500},
        "timeout_ms": 120_000,
    }
    assert graph.policies == {"max_supersteps": 12}
    assert graph.edges["gather"].is_barrier
    assert graph.nodes["reviewer"].branches == {"verdict": ("approve", "revise")}


def test_inline_fields_and_graph_settings() -> None:
    graph = (
        GraphBuilder("g", metadata={"owner": "team"})
        .node("a", "impl", inputs={"q": S.string()}, fields={"out": S.string()})
        .node("b", "impl", fields={"out": S.string()})
        .policy("region", "eu")
        .metadata("version", 2)
        .build()
    )
    assert set(graph.inputs) == {"q"} and set(graph.fields) == {"out"}
    assert graph.policies == {"region": "eu"}
    assert graph.metadata == {"owner": "team", "version": 2}


def bad(value: object) -> Any:
    return value


@pytest.mark.parametrize(
    ("step", "code"),
    [
        (lambda b: b.input("topic", S.string()), GraphErrorCode.DUPLICATE_ID),
        (lambda b: b.field("topic", S.string()), GraphErrorCode.DUPLICATE_ID),
        (lambda b: b.node("writer", "x"), GraphErrorCode.DUPLICATE_ID),
        (lambda b: b.edge("submit", "writer", FINISH), GraphErrorCode.DUPLICATE_ID),
        (lambda b: b.output("essay"), GraphErrorCode.DUPLICATE_ID),
        (lambda b: b.branch("reviewer", "verdict", []), GraphErrorCode.DUPLICATE_ID),
        (lambda b: b.branch("ghost", "g", []), GraphErrorCode.UNKNOWN_RECORD),
        (lambda b: b.fan_in("j", [], "writer"), GraphErrorCode.INVALID_ATTRS),
        (lambda b: b.fan_in("j", "writer", "writer"), GraphErrorCode.INVALID_ATTRS),
        (lambda b: b.max_supersteps(0), GraphErrorCode.INVALID_ATTRS),
        (lambda b: b.max_supersteps(bad(True)), GraphErrorCode.INVALID_ATTRS),
        (lambda b: b.node("n", "x", retry=bad({"max_attempts": 2})), GraphErrorCode.INVALID_ATTRS),
        (
            lambda b: b.node("n", "x", timeout_ms=5, policies={"timeout_ms": 6}),
            GraphErrorCode.INVALID_ATTRS,
        ),
        (lambda b: b.node("n", "not valid"), GraphErrorCode.INVALID_IMPLEMENTATION),
        (lambda b: b.edge("$finish", START, "writer"), GraphErrorCode.RESERVED_ID),
        (lambda b: b.input("bad id", S.string()), GraphErrorCode.INVALID_PUBLIC_ID),
    ],
)
def test_builder_mistakes_raise_typed_errors(step: Any, code: GraphErrorCode) -> None:
    builder = essay()
    before = builder.graph
    with pytest.raises(GraphError) as err:
        step(builder)
    assert err.value.code is code
    assert builder.graph == before, "a failed step leaves the builder unchanged"


def test_builder_rejects_bad_graph_ids() -> None:
    with pytest.raises(GraphError) as err:
        GraphBuilder("$start")
    assert err.value.code is GraphErrorCode.RESERVED_ID


def test_docs_worked_example_builds_the_example_file() -> None:
    docs = (ESSAY.parents[2] / "docs" / "graphs.md").read_text(encoding="utf-8")
    blocks = docs.split("```python\n")[1:]
    example = next(b.split("```")[0] for b in blocks if 'GraphBuilder("essay"' in b)
    namespace: dict[str, Any] = {}
    exec(compile(example, "docs/graphs.md", "exec"), namespace)
    assert namespace["graph"] == from_json(ESSAY.read_text(encoding="utf-8"))
