"""The compiler: validation rules, caller errors and deterministic diagnostics."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from docket.graph.compiler import compile_graph, node_policies, verify
from docket.graph.guards import Guard, all_, changed, equals, exists, not_, path
from docket.graph.model import (
    FINISH,
    START,
    Diagnostic,
    DiagnosticCode,
    Field,
    FieldKind,
    Graph,
    Node,
    Severity,
)
from docket.graph.nodes import NodePolicies, RetryPolicy
from docket.graph.reducers import R, Reducer
from docket.graph.schema import S, Schema, SchemaType
from docket.graph.wire import to_dict
from docket.values import JSONDict
from tests.graph.compiler_fixtures import REGISTRY, C, E, Edit, W, bad, build, fan_in, found, linear


def test_linear_graph_compiles_cleanly() -> None:
    result = build(linear())
    assert result.ok and result.diagnostics == ()
    assert result.runtime is not None and result.effective is not None


# -- validation rules -----------------------------------------------------------------------------

RULES: list[tuple[str, Edit, DiagnosticCode, str, Severity]] = [
    (
        "version",
        lambda g: attrs.evolve(g, schema_version=99),
        C.UNSUPPORTED_SCHEMA_VERSION,
        "/schema_version",
        E,
    ),
    ("graph id", lambda g: attrs.evolve(g, id="has spaces"), C.INVALID_PUBLIC_ID, "/id", E),
    (
        "record id",
        lambda g: attrs.evolve(g, nodes={**g.nodes, "$start": Node("$start", "fixtures.noop")}),
        C.RESERVED_ID,
        "/nodes/$start",
        E,
    ),
    (
        "duplicate state id",
        lambda g: attrs.evolve(g, fields={**g.fields, "value": Field("value", schema=S.string())}),
        C.DUPLICATE_STATE_ID,
        "/fields/value",
        E,
    ),
    (
        "policy",
        lambda g: g.set_policy("max_supersteps", "banana"),
        C.INVALID_POLICY,
        "/policies/max_supersteps",
        E,
    ),
    (
        "policy zero",
        lambda g: g.set_policy("max_supersteps", 0),
        C.INVALID_POLICY,
        "/policies/max_supersteps",
        E,
    ),
    (
        "kind mismatch",
        lambda g: attrs.evolve(g, inputs={"value": Field("value", FieldKind.STATE, S.string())}),
        C.INVALID_FIELD,
        "/inputs/value",
        E,
    ),
    (
        "no schema",
        lambda g: g.put_field("result", None),
        C.MISSING_FIELD_SCHEMA,
        "/fields/result/schema",
        E,
    ),
    (
        "no input schema",
        lambda g: g.put_input("value", None),
        C.MISSING_FIELD_SCHEMA,
        "/inputs/value/schema",
        E,
    ),
    (
        "bad schema",
        lambda g: g.put_field("result", Schema(SchemaType.LIST)),
        C.INVALID_SCHEMA,
        "/fields/result/schema",
        E,
    ),
    (
        "unknown schema type",
        lambda g: g.put_field("result", Schema("text")),
        C.INVALID_SCHEMA,
        "/fields/result/schema/type",
        E,
    ),
    (
        "unknown reducer",
        lambda g: g.put_field("result", S.string(), reducer=Reducer("concat")),
        C.INVALID_REDUCER,
        "/fields/result/reducer/type",
        E,
    ),
    (
        "append string",
        lambda g: g.put_field("result", S.string(), reducer=R.append()),
        C.REDUCER_SCHEMA_MISMATCH,
        "/fields/result/reducer",
        E,
    ),
    (
        "sum string",
        lambda g: g.put_field("result", S.string(), reducer=R.sum()),
        C.REDUCER_SCHEMA_MISMATCH,
        "/fields/result/reducer",
        E,
    ),
    (
        "merge list",
        lambda g: g.put_field("result", S.list(S.string()), reducer=R.merge()),
        C.REDUCER_SCHEMA_MISMATCH,
        "/fields/result/reducer",
        E,
    ),
    (
        "max_length",
        lambda g: g.put_field(
            "result", S.list(S.string()), reducer=Reducer("append", {"max_length": -1})
        ),
        C.INVALID_REDUCER,
        "/fields/result/reducer",
        E,
    ),
    (
        "union by",
        lambda g: g.put_field("result", S.list(S.map()), reducer=Reducer("union", {"by": 42})),
        C.INVALID_REDUCER,
        "/fields/result/reducer",
        E,
    ),
    (
        "list of lists",
        lambda g: g.put_field("result", S.list(S.list(S.float())), reducer=R.append()),
        C.AMBIGUOUS_LIST_WRITE,
        "/fields/result/reducer",
        W,
    ),
    (
        "float default",
        lambda g: g.put_field("result", S.float(), default="ten"),
        C.INVALID_FIELD_DEFAULT,
        "/fields/result/default",
        E,
    ),
    (
        "min default",
        lambda g: g.put_field("result", S.integer(min=0), default=-1),
        C.INVALID_FIELD_DEFAULT,
        "/fields/result/default",
        E,
    ),
    (
        "output source",
        lambda g: g.put_output("report", "missing"),
        C.UNKNOWN_OUTPUT_SOURCE,
        "/outputs/report/source",
        E,
    ),
    (
        "output schema",
        lambda g: g.put_output("result", schema=S.float()),
        C.INCOMPATIBLE_OUTPUT_SCHEMA,
        "/outputs/result/schema",
        E,
    ),
    (
        "bad output schema",
        lambda g: g.put_output("result", schema=Schema(SchemaType.LIST)),
        C.INVALID_SCHEMA,
        "/outputs/result/schema",
        E,
    ),
    (
        "no implementation",
        lambda g: g.put_node("copy", None),
        C.MISSING_NODE_IMPLEMENTATION,
        "/nodes/copy/implementation",
        E,
    ),
    (
        "unknown implementation",
        lambda g: g.put_node("copy", "os.system"),
        C.UNKNOWN_IMPLEMENTATION,
        "/nodes/copy/implementation",
        E,
    ),
    (
        "list config schema",
        lambda g: g.put_node("copy", "fixtures.list_config"),
        C.INVALID_NODE_CONFIG_SCHEMA,
        "/nodes/copy/implementation",
        E,
    ),
    (
        "broken config schema",
        lambda g: g.put_node("copy", "fixtures.broken_config"),
        C.INVALID_NODE_CONFIG_SCHEMA,
        "/nodes/copy/implementation",
        E,
    ),
    (
        "unknown config key",
        lambda g: g.update_node("copy", {"config": {"from": "value", "to": "result", "x": 1}}),
        C.INVALID_NODE_CONFIG,
        "/nodes/copy/config",
        E,
    ),
    (
        "missing config key",
        lambda g: g.update_node("copy", {"config": {"from": "value"}}),
        C.INVALID_NODE_CONFIG,
        "/nodes/copy/config",
        E,
    ),
    (
        "config type",
        lambda g: g.update_node("copy", {"config": {"from": 1, "to": "result"}}),
        C.INVALID_NODE_CONFIG,
        "/nodes/copy/config",
        E,
    ),
    (
        "unknown source",
        lambda g: g.put_edge("e", "ghost", FINISH),
        C.UNKNOWN_EDGE_SOURCE,
        "/edges/e/from",
        E,
    ),
    (
        "unknown target",
        lambda g: g.put_edge("e", "copy", "ghost"),
        C.UNKNOWN_EDGE_TARGET,
        "/edges/e/to",
        E,
    ),
    (
        "empty sources",
        lambda g: g.put_edge("e", [], "copy"),
        C.EMPTY_EDGE_SOURCES,
        "/edges/e/from",
        E,
    ),
    (
        "duplicate source",
        lambda g: g.put_edge("e", ["copy", "copy"], FINISH),
        C.DUPLICATE_EDGE_SOURCE,
        "/edges/e/from",
        E,
    ),
    (
        "to start",
        lambda g: g.put_edge("e", "copy", START),
        C.INVALID_START_ENDPOINT,
        "/edges/e/to",
        E,
    ),
    (
        "from finish",
        lambda g: g.put_edge("e", FINISH, "copy"),
        C.INVALID_FINISH_ENDPOINT,
        "/edges/e/from",
        E,
    ),
    (
        "start in list",
        lambda g: g.put_edge("e", [START, "copy"], FINISH),
        C.INVALID_START_ENDPOINT,
        "/edges/e/from",
        E,
    ),
    (
        "finish in list",
        lambda g: g.put_edge("e", [FINISH, "copy"], FINISH),
        C.INVALID_FINISH_ENDPOINT,
        "/edges/e/from",
        E,
    ),
    (
        "regex guard",
        lambda g: g.update_edge("edge_copy_finish", {"guard": Guard("regex", ("x",))}),
        C.INVALID_GUARD,
        "/edges/edge_copy_finish/guard/op",
        E,
    ),
    (
        "arity",
        lambda g: g.update_edge("edge_copy_finish", {"guard": Guard("changed", ())}),
        C.INVALID_GUARD,
        "/edges/edge_copy_finish/guard",
        E,
    ),
    (
        "bare path",
        lambda g: g.update_edge("edge_copy_finish", {"guard": path("result")}),
        C.INVALID_GUARD,
        "/edges/edge_copy_finish/guard",
        E,
    ),
    (
        "nested ref guard",
        lambda g: g.update_edge("edge_copy_finish", {"guard": exists(bad(changed("result")))}),
        C.INVALID_GUARD,
        "/edges/edge_copy_finish/guard",
        E,
    ),
    (
        "expected path to unknown field",
        lambda g: g.update_edge("edge_copy_finish", {"guard": equals("result", path("ghost"))}),
        C.UNKNOWN_GUARD_FIELD,
        "/edges/edge_copy_finish/guard",
        E,
    ),
    (
        "unknown guard field",
        lambda g: g.update_edge("edge_copy_finish", {"guard": changed("ghost")}),
        C.UNKNOWN_GUARD_FIELD,
        "/edges/edge_copy_finish/guard",
        E,
    ),
    (
        "nested unknown field",
        lambda g: g.update_edge("edge_copy_finish", {"guard": all_(not_(exists("ghost")))}),
        C.UNKNOWN_GUARD_FIELD,
        "/edges/edge_copy_finish/guard",
        E,
    ),
    (
        "path segment",
        lambda g: g.update_edge("edge_copy_finish", {"guard": exists(path("result", [bad(1.5)]))}),
        C.INVALID_GUARD_PATH,
        "/edges/edge_copy_finish/guard",
        E,
    ),
    (
        "bool path segment",
        lambda g: g.update_edge("edge_copy_finish", {"guard": exists(path("result", [bad(True)]))}),
        C.INVALID_GUARD_PATH,
        "/edges/edge_copy_finish/guard",
        E,
    ),
    ("no entrypoint", lambda g: g.delete_edge("edge_start_copy"), C.NO_ENTRYPOINT, "/edges", E),
    (
        "stranded node",
        lambda g: g.put_node("lonely", "fixtures.noop").put_edge("lf", "lonely", FINISH),
        C.UNREACHABLE_NODE,
        "/nodes/lonely",
        E,
    ),
    ("no finish", lambda g: g.delete_edge("edge_copy_finish"), C.NO_TERMINAL_EDGE, "/edges", W),
    (
        "dead end",
        lambda g: g.put_node("trap", "fixtures.noop").put_edge("to_trap", "copy", "trap"),
        C.DEAD_END_NODE,
        "/nodes/trap",
        W,
    ),
    (
        "orphan",
        lambda g: g.put_field("scratch", S.string()),
        C.ORPHANED_FIELD,
        "/fields/scratch",
        W,
    ),
]


@pytest.mark.parametrize(
    ("edit", "code", "where", "severity"),
    [pytest.param(edit, code, where, sev, id=name) for name, edit, code, where, sev in RULES],
)
def test_rule(edit: Edit, code: DiagnosticCode, where: str, severity: Severity) -> None:
    result = build(edit(linear()))
    assert (code, where, severity) in found(result)
    assert result.ok is (severity is W)
    if not result.ok:
        assert result.runtime is None and result.graph_hash is None and result.effective is None


def test_non_durable_value_stops_compiling_with_one_diagnostic() -> None:
    graph = attrs.evolve(
        linear(), nodes={"copy": Node("copy", "fixtures.copy", config={"t": bad((1, 2))})}
    )
    result = build(graph)
    assert found(result) == [(C.NON_DURABLE_GRAPH_VALUE, "/nodes/copy/config", E)]


def test_wrong_record_type_is_an_ingest_diagnostic() -> None:
    graph = attrs.evolve(linear(), nodes={"copy": bad({"implementation": "fixtures.copy"})})
    assert [d.code for d in build(graph).diagnostics] == [C.INVALID_RECORD]


def test_compatible_output_schemas() -> None:
    g = (
        linear()
        .put_field("n", S.integer())
        .put_field("choice", S.enum(["a", "b"]))
        .put_field("items", S.list(S.string()))
        .put_output("as_float", "n", schema=S.float())
        .put_output("wider", "choice", schema=S.enum(["a", "b", "c"]))
        .put_output("any_items", "items", schema=Schema(SchemaType.LIST))
        .update_node("copy", {"config": {"from": "n", "to": "choice", "x": "items"}})
    )
    g = g.update_node("copy", {"config": {"from": "n", "to": "choice"}})
    assert C.INCOMPATIBLE_OUTPUT_SCHEMA not in {d.code for d in build(g).diagnostics}
    narrower = g.put_output("narrower", "choice", schema=S.enum(["a"]))
    assert (C.INCOMPATIBLE_OUTPUT_SCHEMA, "/outputs/narrower/schema", E) in found(build(narrower))


def test_barrier_leg_removed_flags_leg_and_join() -> None:
    g = fan_in().delete_edge("edge_start_right")
    unreachable = {d.pointer for d in build(g).diagnostics if d.code is C.UNREACHABLE_NODE}
    assert unreachable == {"/nodes/right", "/nodes/combine"}


@pytest.mark.parametrize(
    ("policies", "ok", "problems"),
    [
        ({"timeout_ms": 5000, "retry": {"max_attempts": 3, "backoff_ms": 10}}, True, []),
        ({}, True, []),
        ({"retry": {}}, True, []),
        ({"retry": None, "timeout_ms": None, "other": 1}, True, []),
        ({"timeout_ms": 0}, False, ["timeout_ms"]),
        ({"timeout_ms": -5}, False, ["timeout_ms"]),
        ({"timeout_ms": "fast"}, False, ["timeout_ms"]),
        ({"timeout_ms": True}, False, ["timeout_ms"]),
        ({"retry": 3}, False, ["retry"]),
        ({"retry": {"max_attempts": 0}}, False, ["retry"]),
        ({"retry": {"max_attempts": "three"}}, False, ["retry"]),
        ({"retry": {"backoff_ms": -1}}, False, ["retry"]),
        ({"retry": {"jitter": 1}}, False, ["retry"]),
        ({"on_error": None}, False, ["on_error"]),
        (
            {"timeout_ms": 0, "retry": 3, "on_error": "x"},
            False,
            ["on_error", "retry", "timeout_ms"],
        ),
    ],
)
def test_node_policies(policies: JSONDict, ok: bool, problems: list[str]) -> None:
    result = build(linear().update_node("copy", {"policies": policies}))
    assert result.ok is ok
    pointers = sorted(d.pointer for d in result.diagnostics if d.code is C.INVALID_POLICY)
    assert pointers == sorted(f"/nodes/copy/policies/{key}" for key in problems)


def test_retry_message_names_unknown_keys_and_policies_resolve() -> None:
    _, problems = node_policies({"retry": {"jitter": 1}})
    assert "jitter" in problems[0][1]
    resolved, problems = node_policies({"timeout_ms": 5000, "retry": {"max_attempts": 3}})
    assert problems == [] and resolved == NodePolicies(5000, RetryPolicy(3, 0))
    assert node_policies({})[0] == NodePolicies(None, RetryPolicy(1, 0))


def test_branch_rules() -> None:
    g = (
        linear()
        .put_node("other", "fixtures.noop")
        .put_edge("to_other", "copy", "other", guard=changed("result"))
        .put_edge("other_out", "other", FINISH)
        .put_edge("plain", "copy", FINISH)
        .update_node(
            "copy",
            {
                "branches": {
                    "a": ["ghost", "to_other", "to_other"],
                    "b": ["other_out", "plain", "to_other"],
                }
            },
        )
    )
    result = build(g)
    assert (C.UNKNOWN_BRANCH_EDGE, "/nodes/copy/branches/a", E) in found(result)
    assert (C.BRANCH_EDGE_SOURCE_MISMATCH, "/nodes/copy/branches/b", E) in found(result)
    unguarded = [d for d in result.diagnostics if d.code is C.UNGUARDED_BRANCH_EDGE]
    assert [(d.severity, d.details["edge_id"]) for d in unguarded] == [(W, "plain")]
    duplicates = [d for d in result.diagnostics if d.code is C.DUPLICATE_BRANCH_EDGE]
    assert [(d.pointer, d.details["edge_id"]) for d in duplicates] == [
        ("/nodes/copy/branches", "to_other")
    ]


def test_unguarded_grouped_edge_is_only_a_warning() -> None:
    g = linear().update_node("copy", {"branches": {"done": ["edge_copy_finish"]}})
    result = build(g)
    assert result.ok
    assert found(result) == [(C.UNGUARDED_BRANCH_EDGE, "/nodes/copy/branches/done", W)]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"max_supersteps": 0}, ValueError),
        ({"max_supersteps": -3}, ValueError),
        ({"max_supersteps": True}, ValueError),
        ({"max_supersteps": "10"}, ValueError),
    ],
)
def test_caller_errors_raise(options: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        build(linear(), **options)


def test_non_graph_and_non_registry_arguments_raise_type_error() -> None:
    with pytest.raises(TypeError):
        compile_graph(bad(to_dict(linear())), REGISTRY)
    with pytest.raises(TypeError):
        compile_graph(linear(), bad({}))


# -- determinism ----------------------------------------------------------------------------------


def messy() -> Graph:
    return (
        linear()
        .put_node("lonely", "ghost.impl")
        .put_edge("bad", "copy", "nowhere")
        .put_field("scratch", S.string())
        .set_policy("max_supersteps", "x")
    )


def test_verify_and_compile_agree_and_replace_stale_diagnostics() -> None:
    stale = Diagnostic(C.NO_ENTRYPOINT, E, ("edges",), "stale")
    graph = attrs.evolve(messy(), diagnostics=(stale,))
    verified = verify(graph, REGISTRY)
    assert stale not in verified.diagnostics
    assert verified.diagnostics == build(graph).diagnostics
    assert [(d.code, d.path) for d in verified.diagnostics] == [
        (d.code, d.path) for d in build(messy()).diagnostics
    ]
    assert verified.put_field("x", S.string()).diagnostics == ()


def test_compiling_is_deterministic_and_pure() -> None:
    graph = linear().put_node("d", "fixtures.defaults", config={"tone": "warm"})
    before = to_dict(graph)
    first, second = build(graph), build(graph)
    assert first == second
    assert to_dict(graph) == before, "the authored graph is not changed"
    assert graph.nodes["d"].config == {"tone": "warm"}


def test_diagnostic_order_follows_passes() -> None:
    codes = [d.code for d in build(messy()).diagnostics]
    assert codes == [
        C.INVALID_POLICY,
        C.UNKNOWN_IMPLEMENTATION,
        C.UNKNOWN_EDGE_TARGET,
        C.UNREACHABLE_NODE,
        C.ORPHANED_FIELD,
    ]
