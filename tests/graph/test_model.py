"""The authored graph records and the functional editing API."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from docket.graph.guards import changed
from docket.graph.model import (
    FINISH,
    START,
    Diagnostic,
    DiagnosticCode,
    Edge,
    Field,
    FieldKind,
    Graph,
    GraphError,
    GraphErrorCode,
    Node,
    Severity,
    id_problem,
    new_graph,
    pointer,
)
from docket.graph.nodes import (
    Failure,
    Interrupt,
    NodeContext,
    NodeRegistry,
    NodeReturn,
    NodeState,
    Update,
    as_result,
    idempotency_key,
    node,
    task_id,
)
from docket.graph.reducers import R, Reducer, ReducerType
from docket.graph.schema import S, Schema, SchemaType

NOT_A_STRING: Any = 42


def base() -> Graph:
    return (
        new_graph("essay", name="Essay")
        .put_input("topic", S.string(), required=True)
        .put_field("draft", S.string())
        .put_node("writer", "essay.writer")
        .put_edge("e1", START, "writer")
        .put_edge("e2", "writer", FINISH)
        .put_output("draft")
    )


def test_basic_graph_records() -> None:
    g = base()
    assert g.inputs["topic"] == Field(
        "topic", kind=FieldKind.INPUT, schema=S.string(), required=True
    )
    assert g.fields["draft"].kind is FieldKind.STATE
    assert g.nodes["writer"].implementation == "essay.writer"
    assert g.outputs["draft"].source == "draft"
    assert g.edges["e1"].source == START and g.edges["e2"].target == FINISH
    assert g.diagnostics == ()


def test_edits_return_new_graphs_and_leave_the_original_alone() -> None:
    g = base()
    g2 = g.put_node("critic", "essay.critic")
    assert "critic" in g2.nodes and "critic" not in g.nodes


def test_schema_and_reducer_shorthand_is_normalised() -> None:
    g = new_graph("g").put_field("tags", ("list", "string"), reducer="append")
    assert g.fields["tags"].schema == Schema(SchemaType.LIST, item=Schema(SchemaType.STRING))
    assert g.fields["tags"].reducer == Reducer(ReducerType.APPEND)


def test_inline_field_declarations_become_graph_fields() -> None:
    g = new_graph("g").put_node(
        "n",
        "impl",
        inputs={"topic": S.string()},
        fields={"notes": {"schema": S.list(S.map()), "reducer": "append"}, "count": "integer"},
    )
    assert g.inputs["topic"].kind is FieldKind.INPUT
    assert g.fields["notes"].reducer == R.append()
    assert g.fields["notes"].schema == S.list(S.map())
    assert g.fields["count"].schema == S.integer()
    assert not hasattr(g.nodes["n"], "fields")


def test_identical_inline_redeclaration_is_a_no_op() -> None:
    g = new_graph("g").put_node("a", "x", fields={"shared": S.string()})
    g2 = g.put_node("b", "x", fields={"shared": S.string()})
    assert g2.fields == g.fields


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"fields": {"shared": S.string()}}, {"fields": {"shared": S.integer()}}),
        ({"inputs": {"shared": S.string()}}, {"fields": {"shared": S.string()}}),
    ],
)
def test_conflicting_inline_declaration(first: dict[str, Any], second: dict[str, Any]) -> None:
    g = new_graph("g").put_node("a", "x", **first)
    with pytest.raises(GraphError) as err:
        g.put_node("b", "x", **second)
    assert err.value.code is GraphErrorCode.CONFLICTING_FIELD
    assert err.value.details == {"node_id": "b", "field_id": "shared"}


def test_put_field_after_inline_declaration_overrides_and_delete_node_keeps_fields() -> None:
    g = new_graph("g").put_node("a", "x", fields={"shared": S.string()})
    g = g.put_field("shared", S.integer())
    assert g.fields["shared"].schema == S.integer()
    g = g.delete_node("a")
    assert "shared" in g.fields and "a" not in g.nodes


def test_put_input_moves_a_state_field_and_back() -> None:
    g = new_graph("g").put_field("x", S.string())
    g = g.put_input("x", S.string())
    assert "x" in g.inputs and "x" not in g.fields
    g = g.update_field("x", {"kind": FieldKind.STATE})
    assert "x" in g.fields and "x" not in g.inputs
    assert g.delete_field("x").field("x") is None


@pytest.mark.parametrize("kind", ["node", "edge"])
def test_update_with_a_function_cannot_change_the_id(kind: str) -> None:
    g = base()
    if kind == "node":
        g = g.update_node("writer", lambda n: Node("other", implementation="v2"))
        assert set(g.nodes) == {"writer"}
        assert g.nodes["writer"].id == "writer"
        assert g.nodes["writer"].implementation == "v2"
    else:
        g = g.update_edge("e1", lambda e: Edge("zzz", START, "writer", guard=changed("topic")))
        assert set(g.edges) == {"e1", "e2"}
        assert g.edges["e1"].id == "e1"
        assert g.edges["e1"].guard == changed("topic")


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        (lambda g: new_graph(NOT_A_STRING), GraphErrorCode.INVALID_PUBLIC_ID),
        (lambda g: new_graph("has spaces"), GraphErrorCode.INVALID_PUBLIC_ID),
        (lambda g: g.put_node(START, "x"), GraphErrorCode.RESERVED_ID),
        (lambda g: g.put_edge(FINISH, START, "writer"), GraphErrorCode.RESERVED_ID),
        (lambda g: g.put_field("-leading", S.string()), GraphErrorCode.INVALID_PUBLIC_ID),
        (lambda g: g.put_node("n", "bad name!"), GraphErrorCode.INVALID_IMPLEMENTATION),
        (lambda g: g.put_node("n", 42), GraphErrorCode.INVALID_IMPLEMENTATION),
        (lambda g: g.put_node("n", "x", config=[1]), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.put_node("n", "x", config={"t": (1, 2)}), GraphErrorCode.NON_DURABLE_VALUE),
        (lambda g: g.put_node("n", "x", metadata={"$tag": 1}), GraphErrorCode.NON_DURABLE_VALUE),
        (lambda g: g.put_node("n", "x", branches={"g": "e1"}), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.put_node("n", "x", fields=["a"]), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.put_field("f", "no-such-type"), GraphErrorCode.INVALID_SCHEMA),
        (lambda g: g.put_field("f", S.string(), reducer="concat"), GraphErrorCode.INVALID_REDUCER),
        (
            lambda g: g.put_field("f", S.string(), default=float("nan")),
            GraphErrorCode.NON_DURABLE_VALUE,
        ),
        (lambda g: g.put_input("f", S.string(), required="yes"), GraphErrorCode.INVALID_ATTRS),
        (
            lambda g: g.put_edge("e", START, "writer", guard={"op": "x"}),
            GraphErrorCode.INVALID_GUARD,
        ),
        (lambda g: g.put_edge("e", 3, "writer"), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.put_edge("e", START, None), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.put_edge("e", START, "writer", label=5), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.put_output("o", 5), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.update_node("ghost", {"label": "x"}), GraphErrorCode.UNKNOWN_RECORD),
        (lambda g: g.update_node("writer", {"colour": "red"}), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.update_node("writer", lambda n: "nope"), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.update_node("writer", 42), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.update_field("topic", {"kind": "output"}), GraphErrorCode.INVALID_ATTRS),
        (lambda g: g.set_metadata("k", {1, 2}), GraphErrorCode.NON_DURABLE_VALUE),
    ],
)
def test_editing_mistakes_raise_precise_codes(
    edit: Callable[[Graph], object], code: GraphErrorCode
) -> None:
    with pytest.raises(GraphError) as err:
        edit(base())
    assert err.value.code is code


def test_id_errors_carry_label_and_id() -> None:
    with pytest.raises(GraphError) as err:
        base().put_node("$finish", "x")
    assert err.value.details == {"label": "node", "id": "$finish"}


def test_successful_edit_clears_diagnostics() -> None:
    diag = Diagnostic(DiagnosticCode.NO_ENTRYPOINT, Severity.ERROR, ("edges",), "none")
    g = Graph(id="g", diagnostics=(diag,))
    assert g.diagnostics == (diag,)
    assert g.put_field("x", S.string()).diagnostics == ()
    assert g.set_policy("max_supersteps", 3).diagnostics == ()


def test_diagnostics_do_not_affect_equality() -> None:
    diag = Diagnostic(DiagnosticCode.NO_ENTRYPOINT, Severity.ERROR, ("edges",), "none")
    assert Graph(id="g", diagnostics=(diag,)) == Graph(id="g")


def test_enum_values_in_open_content_become_strings() -> None:
    g = new_graph("g").put_node("n", "x", config={"kind": SchemaType.STRING})
    assert type(g.nodes["n"].config["kind"]) is str


def test_edge_sources_normalise_to_tuples() -> None:
    edge = Edge("e", ["a", "b"], "c")
    assert edge.source == ("a", "b") and edge.is_barrier and edge.sources == ("a", "b")
    single = Edge("e", ["a"], "c")
    assert single.is_barrier, "a one-element list is still a barrier"
    assert not Edge("e", "a", "c").is_barrier


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("ok_id-1", None),
        ("9lives", None),
        ("$start", DiagnosticCode.RESERVED_ID),
        ("$finish", DiagnosticCode.RESERVED_ID),
        ("", DiagnosticCode.INVALID_PUBLIC_ID),
        ("_x", DiagnosticCode.INVALID_PUBLIC_ID),
        ("x\n", DiagnosticCode.INVALID_PUBLIC_ID),
        ("é", DiagnosticCode.INVALID_PUBLIC_ID),
        (3, DiagnosticCode.INVALID_PUBLIC_ID),
    ],
)
def test_id_rule(value: object, problem: DiagnosticCode | None) -> None:
    assert id_problem(value) is problem


def test_diagnostic_pointer_and_dict() -> None:
    diag = Diagnostic(
        DiagnosticCode.INVALID_POLICY,
        Severity.ERROR,
        ["nodes", "a/b", "policies", "t~x", 0],
        "bad",
        {"k": 1},
    )
    assert diag.path == ("nodes", "a/b", "policies", "t~x", 0)
    assert diag.pointer == "/nodes/a~1b/policies/t~0x/0"
    assert pointer(()) == ""
    assert diag.to_dict() == {
        "code": "invalid_policy",
        "severity": "error",
        "path": "/nodes/a~1b/policies/t~0x/0",
        "message": "bad",
        "details": {"k": 1},
    }
    assert str(diag).startswith("error invalid_policy /nodes/a~1b")


# -- the node contract -------------------------------------------------------------------------


def test_node_decorator_and_registry() -> None:
    registry = NodeRegistry()

    @registry.node("essay.writer", config=S.object({"tone": S.string()}))
    def writer(state: NodeState, ctx: NodeContext) -> NodeReturn:
        return {"draft": f"{state['topic']} ({ctx.config['tone']})"}

    @node("essay.reviewer")
    async def reviewer(state: NodeState, ctx: NodeContext) -> NodeReturn:
        return Update({"approved": True})

    registry.register(reviewer)
    assert list(registry) == ["essay.reviewer", "essay.writer"] and len(registry) == 2
    assert "essay.writer" in registry and registry.get("nope") is None
    assert writer.config_schema == S.object({"tone": S.string()})
    assert not writer.is_async and reviewer.is_async
    ctx = NodeContext("run1", "writer", step=3, attempt=2, config={"tone": "warm"})
    assert writer({"topic": "owls"}, ctx) == {"draft": "owls (warm)"}
    registry.register(writer)  # the same definition again is fine


def test_class_nodes() -> None:
    class Counter:
        config_schema = S.object({"step": S.integer(default=1)})

        async def call(self, state: NodeState, ctx: NodeContext) -> NodeReturn:
            return {"n": ctx.config["step"]}

    definition = node("count")(Counter)
    assert definition.config_schema == Counter.config_schema
    assert definition.is_async


def test_node_context_identity() -> None:
    ctx = NodeContext("run-7", "writer", step=4, attempt=2)
    assert ctx.task_id == "run-7:4:writer" == task_id("run-7", 4, "writer")
    assert ctx.idempotency_key == "run-7:4:writer:2" == idempotency_key(ctx.task_id, 2)


def test_results() -> None:
    assert as_result({"a": 1}) == Update({"a": 1})
    interrupt = Interrupt("answer", schema=S.string())
    assert as_result(interrupt) is interrupt
    failure = as_result(42)
    assert isinstance(failure, Failure) and not failure.retryable
    assert failure.details == {"code": "invalid_node_return"}
    assert Failure("flaky").retryable


@pytest.mark.parametrize(
    "register",
    [
        lambda r: r.add("$evil", lambda s, c: {}),
        lambda r: r.add("has space", lambda s, c: {}),
        lambda r: r.add("ok", 42),
        lambda r: r.add("ok", lambda s, c: {}, config=NOT_A_STRING),
        lambda r: r.register(NOT_A_STRING),
        lambda r: (r.add("dup", lambda s, c: {}), r.add("dup", lambda s, c: {"x": 1})),
    ],
)
def test_registry_mistakes(register: Callable[[NodeRegistry], object]) -> None:
    with pytest.raises(GraphError) as err:
        register(NodeRegistry())
    assert err.value.code is GraphErrorCode.INVALID_REGISTRY
