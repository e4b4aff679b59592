"""Shared by the compiler's tests (tests/graph/test_compiler*.py): a registry of fixture
nodes, a few small graphs, and compiling them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from docket.graph.compiler import CompileResult, compile_graph
from docket.graph.guards import equals, not_
from docket.graph.model import FINISH, START, DiagnosticCode, Graph, Severity, new_graph
from docket.graph.nodes import NodeDefinition, NodeRegistry
from docket.graph.schema import S, Schema, SchemaType
from docket.values import JSONDict, JSONValue

C = DiagnosticCode
E, W = Severity.ERROR, Severity.WARNING
ROOT = Path(__file__).resolve().parents[2]


def bad(value: object) -> Any:
    """Pass a deliberately ill-typed value past the type checker."""
    return value


def _noop(state: object, ctx: object) -> JSONDict:
    return {}


DEFAULTS_SCHEMA = S.object(
    {
        "tone": S.string(required=True),
        "temperature": S.float(default=0.5),
        "level": S.enum(["low", "high"], default="low"),
    }
)
REGISTRY = NodeRegistry(
    [
        NodeDefinition(
            "fixtures.copy",
            _noop,
            S.object({"from": S.string(required=True), "to": S.string(required=True)}),
        ),
        NodeDefinition("fixtures.noop", _noop),
        NodeDefinition("fixtures.defaults", _noop, DEFAULTS_SCHEMA),
        NodeDefinition("fixtures.list_config", _noop, S.list(S.string())),
        NodeDefinition("fixtures.broken_config", _noop, Schema(SchemaType.LIST)),
    ]
)


def linear() -> Graph:
    return (
        new_graph("minimal-linear")
        .put_input("value", S.string(), required=True)
        .put_field("result", S.string())
        .put_node("copy", "fixtures.copy", config={"from": "value", "to": "result"})
        .put_edge("edge_start_copy", START, "copy")
        .put_edge("edge_copy_finish", "copy", FINISH)
        .put_output("result")
    )


def fan_in() -> Graph:
    return (
        new_graph("multi-source")
        .put_input("value", S.string())
        .put_node("left", "fixtures.noop")
        .put_node("right", "fixtures.noop")
        .put_node("combine", "fixtures.noop")
        .put_edge("edge_start_left", START, "left")
        .put_edge("edge_start_right", START, "right")
        .put_edge("edge_combine_ready", ["right", "left"], "combine")
        .put_edge("edge_combine_finish", "combine", FINISH)
    )


def cycle(guarded: bool = True) -> Graph:
    again = not_(equals("done", True)) if guarded else None
    return (
        new_graph("cycle-counter")
        .put_field("done", S.boolean(), default=False)
        .put_node("a", "fixtures.noop")
        .put_node("b", "fixtures.noop")
        .put_edge("start", START, "a")
        .put_edge("ab", "a", "b")
        .put_edge("ba", "b", "a", guard=again)
        .put_edge("out", "b", FINISH, guard=equals("done", True))
    )


def build(graph: Graph, **options: Any) -> CompileResult:
    return compile_graph(graph, REGISTRY, **options)


def found(result: CompileResult) -> list[tuple[DiagnosticCode, str, Severity]]:
    return [(d.code, d.pointer, d.severity) for d in result.diagnostics]


Edit = Callable[[Graph], Graph]


def _reverse(value: JSONValue) -> JSONValue:
    """The same JSON value with every object's insertion order reversed."""
    if isinstance(value, dict):
        return {k: _reverse(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse(v) for v in value]
    return value
