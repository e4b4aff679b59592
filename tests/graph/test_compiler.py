"""The compiler: validation rules, materialisation, hashing, lowering, effective documents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from docket.graph.compiler import (
    ChannelKind,
    ChannelType,
    CompileResult,
    RuntimeGraph,
    compile_effective_document,
    compile_graph,
    effective_document,
    graph_from_effective_document,
    node_policies,
    runtime_diagnostics,
    verify,
)
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
    new_graph,
)
from docket.graph.nodes import NodeDefinition, NodePolicies, NodeRegistry, RetryPolicy
from docket.graph.reducers import R, Reducer
from docket.graph.schema import S, Schema, SchemaType
from docket.graph.wire import GraphLoadError, from_dict, from_json, to_dict
from docket.values import JSONDict, JSONValue, canonical_json, content_hash
from tests.graph.test_wire import graphs, json_values, mutated_documents

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


def test_linear_graph_compiles_cleanly() -> None:
    result = build(linear())
    assert result.ok and result.diagnostics == ()
    assert result.runtime is not None and result.effective is not None


# -- validation rules -----------------------------------------------------------------------------

Edit = Callable[[Graph], Graph]

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


# -- cycles ---------------------------------------------------------------------------------------


def test_unbounded_cycle_warns() -> None:
    result = build(cycle())
    assert result.ok
    assert found(result) == [(C.UNBOUNDED_CYCLE, "/policies/max_supersteps", W)]
    assert result.diagnostics[0].details["nodes"] == ["a", "b"]
    assert result.runtime is not None and result.runtime.max_supersteps is None


def test_bounded_cycle_does_not_warn() -> None:
    result = build(cycle().set_policy("max_supersteps", 10))
    assert result.ok and result.diagnostics == ()


def test_guarded_self_loop_with_bound_is_clean() -> None:
    g = (
        new_graph("loop")
        .put_field("n", S.integer(), reducer=R.sum())
        .put_node("tick", "fixtures.noop")
        .put_edge("start", START, "tick")
        .put_edge("again", "tick", "tick", guard=not_(equals("n", 10)))
        .put_edge("done", "tick", FINISH, guard=equals("n", 10))
        .set_policy("max_supersteps", 10)
    )
    assert build(g).diagnostics == ()


def test_host_ceiling_bounds_but_still_warns() -> None:
    # DECISIONS: the host value is a ceiling; a graph without its own bound is still unbounded.
    result = build(cycle(), max_supersteps=25)
    assert result.ok and [d.code for d in result.diagnostics] == [C.UNBOUNDED_CYCLE]
    assert result.runtime is not None and result.runtime.max_supersteps == 25
    explicit_none = build(cycle().set_policy("max_supersteps", None), max_supersteps=25)
    assert [d.code for d in explicit_none.diagnostics] == [C.UNBOUNDED_CYCLE]


def test_graph_policy_is_capped_by_the_host() -> None:
    result = build(cycle().set_policy("max_supersteps", 50), max_supersteps=25)
    assert found(result) == [(C.MAX_SUPERSTEPS_CAPPED, "/policies/max_supersteps", W)]
    assert result.runtime is not None and result.runtime.max_supersteps == 25
    lower = build(cycle().set_policy("max_supersteps", 10), max_supersteps=25)
    assert lower.runtime is not None and lower.runtime.max_supersteps == 10


def test_invalid_policy_suppresses_cycle_warnings() -> None:
    codes = [d.code for d in build(cycle().set_policy("max_supersteps", "banana")).diagnostics]
    assert codes == [C.INVALID_POLICY]
    assert [d.code for d in build(linear().set_policy("max_supersteps", -1)).diagnostics] == [
        C.INVALID_POLICY
    ]


def test_bounded_cycle_without_guard_warns() -> None:
    result = build(cycle(guarded=False).set_policy("max_supersteps", 5))
    assert found(result) == [(C.UNGUARDED_CYCLE, "/nodes/a", W)]


def test_node_reaching_finish_only_through_a_cycle_is_not_a_dead_end() -> None:
    assert C.DEAD_END_NODE not in {d.code for d in build(cycle()).diagnostics}


def test_empty_graph_and_stranded_node_topology() -> None:
    assert build(new_graph("empty")).diagnostics == ()
    stranded = linear().put_node("lonely", "fixtures.noop")
    codes = [d for d in build(stranded).diagnostics if d.pointer == "/nodes/lonely"]
    assert [d.code for d in codes] == [C.UNREACHABLE_NODE], "not also a dead end"


def test_no_terminal_edge_is_reported_once() -> None:
    g = fan_in().delete_edge("edge_combine_finish")
    assert [d.code for d in build(g).diagnostics] == [C.NO_TERMINAL_EDGE]


def test_fields_named_in_outputs_guards_or_config_values_are_not_orphans() -> None:
    g = (
        linear()
        .put_field("by_guard", S.string())
        .put_field("by_config", S.string())
        .put_field("as_key", S.string())
        .update_edge("edge_copy_finish", {"guard": exists("by_guard")})
        .update_node("copy", {"config": {"from": "by_config", "to": "result"}})
    )
    orphans = [d.pointer for d in build(g).diagnostics if d.code is C.ORPHANED_FIELD]
    assert orphans == ["/fields/as_key"]


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


# -- lowering -------------------------------------------------------------------------------------


def runtime_of(graph: Graph, **options: Any) -> RuntimeGraph:
    result = build(graph, **options)
    assert result.runtime is not None, result.diagnostics
    return result.runtime


def test_linear_lowering() -> None:
    rt = runtime_of(linear())
    value = rt.channels["input:value"]
    assert (value.kind, value.type, value.schema, value.required) == (
        ChannelKind.INPUT,
        ChannelType.LAST_VALUE,
        S.string(),
        True,
    )
    result = rt.channels["state:result"]
    assert result.reducer == R.last_value() and result.default is None
    assert rt.channels["edge:edge_start_copy"].type is ChannelType.EPHEMERAL
    node = rt.nodes["copy"]
    assert node.id == "node:copy" and node.implementation == "fixtures.copy"
    assert node.definition is REGISTRY.get("fixtures.copy")
    assert node.subscribe == ("edge:edge_start_copy",)
    assert node.outgoing_edges == ("edge_copy_finish",)
    assert node.policies == NodePolicies(None, RetryPolicy(1, 0))
    assert rt.edges["edge_start_copy"].sources == (START,)
    assert rt.edges["edge_copy_finish"].target == FINISH
    assert all("edge:edge_copy_finish" not in n.subscribe for n in rt.nodes.values())
    assert rt.start_edges == ("edge_start_copy",)
    assert list(rt.channels) == sorted(rt.channels)
    assert rt.input_ids == ("value",) and rt.field_ids == ("result",)


def test_barrier_lowering() -> None:
    rt = runtime_of(fan_in())
    channel = rt.channels["edge:edge_combine_ready"]
    assert channel.type is ChannelType.BARRIER and channel.sources == ("left", "right")
    edge = rt.edges["edge_combine_ready"]
    assert edge.barrier and edge.sources == ("right", "left")
    assert rt.nodes["combine"].subscribe == ("edge:edge_combine_ready",)
    assert rt.nodes["left"].outgoing_edges == ("edge_combine_ready",)
    assert rt.nodes["right"].outgoing_edges == ("edge_combine_ready",)
    single = runtime_of(fan_in().put_edge("edge_combine_ready", ["left"], "combine"))
    assert single.edges["edge_combine_ready"].barrier


def test_channel_defaults() -> None:
    g = (
        linear()
        .put_field("count", S.float(), reducer=R.sum())
        .put_field("log", S.list(S.string()), reducer=R.append(), default=["seed"])
        .put_field("seen", S.list(S.string()), reducer=R.union())
        .put_field("flags", S.map(), reducer=R.merge())
        .put_field("off", S.boolean(), default=False)
        .update_node(
            "copy", {"config": {"from": "count", "to": "log", "a": ["seen", "flags", "off"]}}
        )
    )
    g = g.update_node("copy", {"config": {"from": "count", "to": "log"}})
    rt = runtime_of(g.put_output("seen").put_output("flags").put_output("off"))
    defaults = {c.public_id: c.default for c in rt.channels.values() if c.kind is ChannelKind.STATE}
    assert defaults == {
        "count": 0,
        "log": ["seed"],
        "seen": [],
        "flags": {},
        "off": False,
        "result": None,
    }
    assert rt.defaults() == {k: v for k, v in defaults.items() if v is not None}
    assert rt.field_rules()["count"].reducer == R.sum()


def test_output_lowering() -> None:
    g = (
        linear()
        .put_output("echo", "value")
        .put_output("typed", "result", schema=S.string(metadata={"ui": "x"}))
    )
    rt = runtime_of(g)
    assert rt.outputs["result"].schema == S.string()
    assert rt.outputs["result"].source_channel == "state:result"
    assert rt.outputs["echo"].source_channel == "input:value"
    assert rt.outputs["typed"].schema.metadata == {"ui": "x"}
    assert rt.outputs["typed"].runtime_id == "output:typed"


def test_config_defaults_are_materialised() -> None:
    graph = linear().put_node("d", "fixtures.defaults", config={"tone": "warm"})
    graph = graph.put_edge("to_d", "copy", "d").put_edge("d_out", "d", FINISH)
    result = build(graph)
    assert result.ok and result.runtime is not None and result.effective is not None
    expected = {"tone": "warm", "temperature": 0.5, "level": "low"}
    assert result.runtime.nodes["d"].config == expected
    assert result.effective.nodes["d"].config == expected
    assert graph.nodes["d"].config == {"tone": "warm"}
    assert result.graph_hash == content_hash(effective_document(result.effective))
    assert result.runtime.graph_hash == result.graph_hash


@pytest.mark.parametrize(
    ("policy", "option", "limit"),
    [
        (50, None, 50),
        ("absent", 25, 25),
        (None, 25, 25),
        (None, None, None),
        ("absent", None, None),
    ],
)
def test_max_supersteps_lowering(policy: JSONValue, option: int | None, limit: int | None) -> None:
    graph = linear() if policy == "absent" else linear().set_policy("max_supersteps", policy)
    result = build(graph.set_policy("other", 1), max_supersteps=option)
    assert result.runtime is not None and result.effective is not None
    assert result.runtime.max_supersteps == limit
    expected = {"other": 1} if limit is None else {"other": 1, "max_supersteps": limit}
    assert result.runtime.policies == expected
    assert result.effective.policies == graph.set_policy("other", 1).policies


def test_lowering_metadata() -> None:
    graph = fan_in().update_node("left", {"branches": {"g": []}})
    rt = runtime_of(graph)
    lowering = rt.lowering
    assert lowering.public_to_runtime["nodes"] == {
        "combine": "node:combine",
        "left": "node:left",
        "right": "node:right",
    }
    assert lowering.public_to_runtime["inputs"] == {"value": "input:value"}
    assert lowering.runtime_to_public["input:value"] == ("input", "value")
    assert lowering.runtime_to_public["edge:edge_combine_ready"] == ("edge", "edge_combine_ready")
    assert lowering.generated["edge:edge_combine_ready"] == {
        "kind": "activation_channel",
        "public_edge_id": "edge_combine_ready",
    }
    assert lowering.branches == {"left": {"g": ()}}


def test_enum_members_become_plain_strings_in_the_runtime_graph() -> None:
    graph = linear().update_edge("edge_copy_finish", {"guard": equals("result", SchemaType.STRING)})
    rt = runtime_of(graph)
    guard = rt.edges["edge_copy_finish"].guard
    assert guard is not None and type(guard.args[1]) is str
    authored = graph.edges["edge_copy_finish"].guard
    assert authored is not None and type(authored.args[1]) is SchemaType  # kept as authored


def test_runtime_self_checks_catch_doctored_graphs() -> None:
    rt = runtime_of(fan_in())
    assert runtime_diagnostics(rt) == []
    combine = attrs.evolve(rt.nodes["combine"], subscribe=("edge:nope",))
    doctored = attrs.evolve(rt, nodes={**rt.nodes, "combine": combine})
    assert [d.code for d in runtime_diagnostics(doctored)] == [C.MISSING_RUNTIME_CHANNEL]
    left = attrs.evolve(rt.nodes["left"], id="edge:edge_start_left")
    doctored = attrs.evolve(rt, nodes={**rt.nodes, "left": left})
    assert C.RUNTIME_ID_COLLISION in {d.code for d in runtime_diagnostics(doctored)}
    left = attrs.evolve(rt.nodes["left"], outgoing_edges=("ghost",))
    doctored = attrs.evolve(rt, nodes={**rt.nodes, "left": left})
    assert [d.code for d in runtime_diagnostics(doctored)] == [C.LOWERING_INVARIANT_FAILED]
    finish = attrs.evolve(rt.nodes["left"], subscribe=("edge:edge_combine_finish",))
    doctored = attrs.evolve(rt, nodes={**rt.nodes, "left": finish})
    assert C.LOWERING_INVARIANT_FAILED in {d.code for d in runtime_diagnostics(doctored)}


# -- hashing --------------------------------------------------------------------------------------


def test_hash_format_and_runtime_id() -> None:
    result = build(linear())
    assert result.graph_hash is not None and result.runtime is not None
    assert len(result.graph_hash) == 64 and set(result.graph_hash) <= set("0123456789abcdef")
    assert result.runtime.id == f"minimal-linear@{result.graph_hash[:12]}"


def test_hash_ignores_insertion_order_diagnostics_and_options() -> None:
    forward = linear()
    backward = (
        new_graph("minimal-linear")
        .put_output("result")
        .put_edge("edge_copy_finish", "copy", FINISH)
        .put_edge("edge_start_copy", START, "copy")
        .put_node("copy", "fixtures.copy", config={"to": "result", "from": "value"})
        .put_field("result", S.string())
        .put_input("value", S.string(), required=True)
    )
    noisy = attrs.evolve(forward, diagnostics=(Diagnostic(C.NO_ENTRYPOINT, E, (), "x"),))
    hashes = {
        build(forward).graph_hash,
        build(backward).graph_hash,
        build(noisy).graph_hash,
        build(forward, max_supersteps=7).graph_hash,
    }
    assert len(hashes) == 1


@pytest.mark.parametrize(
    "edit",
    [
        lambda g: g.update_node("copy", {"label": "Copy"}),
        lambda g: g.update_edge("edge_copy_finish", {"source_handle": "out"}),
        lambda g: g.set_metadata("ui", {"x": 1}),
        lambda g: g.update_field("result", {"description": "the result"}),
        lambda g: g.update_node("copy", {"policies": {"timeout_ms": 1000}}),
        lambda g: g.put_input("value", S.string(), required=False),
        lambda g: g.put_field("result", S.string(default=None)),
        lambda g: attrs.evolve(g, name="Named"),
    ],
)
def test_every_change_changes_the_hash(edit: Edit) -> None:
    assert build(edit(linear())).graph_hash != build(linear()).graph_hash


def test_int_and_float_hash_differently() -> None:
    one = linear().set_metadata("n", 1)
    one_float = linear().set_metadata("n", 1.0)
    assert one == one_float  # Python equality conflates them ...
    assert build(one).graph_hash != build(one_float).graph_hash  # ... the hash does not


GOLDEN_DOCUMENT = (
    b'{"docket":1,"graph":{"edges":{"edge_copy_finish":{"from":"copy","to":"$finish"},'
    b'"edge_start_copy":{"from":"$start","to":"copy"}},"fields":{"result":{"kind":"state",'
    b'"schema":{"type":"string"}}},"id":"minimal-linear","inputs":{"value":{"kind":"input",'
    b'"required":true,"schema":{"type":"string"}}},"nodes":{"copy":{"config":{"from":"value",'
    b'"to":"result"},"implementation":"fixtures.copy"}},"outputs":{"result":{"source":"result"}},'
    b'"schema_version":1},"kind":"graph"}'
)


def test_golden_hash_of_the_minimal_graph() -> None:
    # Pins the durable identity: if this changes, every stored graph hash changes with it.
    result = build(linear())
    assert result.effective is not None
    assert canonical_json(effective_document(result.effective)) == GOLDEN_DOCUMENT
    assert result.graph_hash == "af3392f601292dee8fef95ff6e20e2b9bf53645cc98b9a5c9bbf75cd9f4e4fcc"


# -- effective documents --------------------------------------------------------------------------


def test_effective_document_recompiles_to_the_same_hash_without_rematerialising() -> None:
    graph = linear().put_node("d", "fixtures.defaults", config={"tone": "warm"})
    graph = graph.put_edge("to_d", "copy", "d").put_edge("d_out", "d", FINISH)
    published = build(graph)
    assert published.effective is not None
    stored = json.loads(json.dumps(effective_document(published.effective)))
    assert stored["docket"] == 1 and stored["kind"] == "graph"
    again = compile_effective_document(stored, REGISTRY)
    assert again.ok and again.graph_hash == published.graph_hash
    newer_schema = S.object({**DEFAULTS_SCHEMA.fields, "extra": S.integer(default=3)})
    newer = NodeRegistry(
        [
            NodeDefinition(
                name, d.fn, newer_schema if name == "fixtures.defaults" else d.config_schema
            )
            for name in REGISTRY
            if (d := REGISTRY.get(name)) is not None
        ]
    )
    stored_run = compile_effective_document(stored, newer)
    assert stored_run.graph_hash == published.graph_hash
    assert stored_run.runtime is not None and "extra" not in stored_run.runtime.nodes["d"].config
    assert compile_graph(graph, newer).graph_hash != published.graph_hash


def test_effective_document_validates_against_current_registry() -> None:
    published = build(linear())
    assert published.effective is not None
    stored = effective_document(published.effective)
    result = compile_effective_document(stored, NodeRegistry())
    assert not result.ok and [d.code for d in result.diagnostics] == [C.UNKNOWN_IMPLEMENTATION]


def _doctor(doc: JSONDict, **changes: JSONValue) -> JSONDict:
    out = json.loads(json.dumps(doc))
    out.update(changes)
    return dict(out)


def test_effective_document_must_be_canonical() -> None:
    published = build(linear())
    assert published.effective is not None
    doc = effective_document(published.effective)
    assert graph_from_effective_document(doc) == published.effective
    graph_doc = doc["graph"]
    assert isinstance(graph_doc, dict)
    cases: list[tuple[object, DiagnosticCode]] = [
        (_doctor(doc, graph={**graph_doc, "metadata": {}}), C.NON_CANONICAL_DOCUMENT),
        (
            _doctor(
                doc,
                graph={
                    **graph_doc,
                    "nodes": {
                        "copy": {
                            "implementation": "fixtures.copy",
                            "config": {"from": "value", "to": "result"},
                            "label": None,
                        }
                    },
                },
            ),
            C.WRONG_TYPE,
        ),
        (_doctor(doc, kind="run"), C.INVALID_DOCUMENT),
        (_doctor(doc, docket=2), C.INVALID_DOCUMENT),
        (_doctor(doc, docket=True), C.INVALID_DOCUMENT),
        (_doctor(doc, extra=1), C.INVALID_DOCUMENT),
        (graph_doc, C.INVALID_DOCUMENT),
        ([doc], C.INVALID_DOCUMENT),
    ]
    for bad_doc, code in cases:
        with pytest.raises(GraphLoadError) as err:
            graph_from_effective_document(bad(bad_doc))
        assert err.value.diagnostics[0].code is code
        result = compile_effective_document(bad(bad_doc), REGISTRY)
        assert not result.ok and result.diagnostics[0].code is code


# -- the essay example ----------------------------------------------------------------------------

ESSAY = ROOT / "examples" / "graphs" / "essay.json"
ESSAY_REGISTRY = NodeRegistry(
    [
        NodeDefinition("essay.outline", _noop, S.object({"sections": S.integer(min=1, default=3)})),
        NodeDefinition("essay.research", _noop),
        NodeDefinition(
            "essay.writer",
            _noop,
            S.object(
                {
                    "tone": S.enum(["warm", "formal"], required=True),
                    "sources": S.list(S.string(), default=[]),
                }
            ),
        ),
        NodeDefinition("essay.reviewer", _noop, S.object({"strict": S.boolean(default=False)})),
    ]
)


def test_essay_example_compiles_without_diagnostics() -> None:
    text = ESSAY.read_text(encoding="utf-8")
    result = compile_graph(from_json(text), ESSAY_REGISTRY)
    assert result.ok and result.diagnostics == ()
    assert result.runtime is not None
    assert result.runtime.nodes["reviewer"].config == {"strict": False}
    assert result.runtime.nodes["writer"].policies == NodePolicies(120_000, RetryPolicy(3, 500))
    assert result.runtime.max_supersteps == 12


def _hash_in_subprocess(path: Path, seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "docket.cli", "graph", "hash", str(path), "--allow-unknown-nodes"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    )
    return done.stdout.strip()


def _placeholders(graph: Graph) -> NodeRegistry:
    names = {n.implementation for n in graph.nodes.values() if n.implementation}
    return NodeRegistry(NodeDefinition(name, _noop) for name in sorted(names))


def test_hash_is_the_same_in_other_processes(tmp_path: Path) -> None:
    graph = from_json(ESSAY.read_text(encoding="utf-8"))
    here = compile_graph(graph, _placeholders(graph)).graph_hash
    assert {_hash_in_subprocess(ESSAY, seed) for seed in ("0", "1", "12345")} == {here}
    reordered = tmp_path / "reordered.json"
    reordered.write_text(json.dumps(_reverse(to_dict(graph))), encoding="utf-8")
    assert _hash_in_subprocess(reordered, "7") == here


# -- generated graphs -----------------------------------------------------------------------------


def _reverse(value: JSONValue) -> JSONValue:
    """The same JSON value with every object's insertion order reversed."""
    if isinstance(value, dict):
        return {k: _reverse(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reverse(v) for v in value]
    return value


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_generated_graph_hash_is_stable_and_sensitive(graph: Graph) -> None:
    shuffled = from_dict(_reverse(to_dict(graph)))
    assert shuffled == graph
    digest = content_hash(effective_document(graph))
    assert content_hash(effective_document(shuffled)) == digest
    probe = graph.metadata.get("probe")
    changed_graph = graph.set_metadata("probe", [probe])
    assert content_hash(effective_document(changed_graph)) != digest
    relabelled = attrs.evolve(graph, name=(graph.name or "") + "!")
    assert content_hash(effective_document(relabelled)) != digest


@st.composite
def runnable_graphs(draw: st.DrawFn) -> Graph:
    """Valid graphs: a chain of no-op nodes, optional fan-in, random cosmetics."""
    count = draw(st.integers(1, 6))
    graph = new_graph(
        "gen",
        metadata=draw(st.dictionaries(st.sampled_from(["a", "b", "é"]), json_values, max_size=2)),
    )
    graph = graph.put_field("out", S.string(), default=draw(st.none() | st.text(max_size=3)))
    for i in range(count):
        graph = graph.put_node(
            f"n{i}",
            "fixtures.noop",
            config=draw(st.dictionaries(st.sampled_from("abc"), json_values, max_size=2)),
            label=draw(st.none() | st.text(max_size=4)),
        )
    graph = graph.put_edge("start", START, "n0")
    for i in range(1, count):
        graph = graph.put_edge(f"e{i}", f"n{i - 1}", f"n{i}")
    if count > 2 and draw(st.booleans()):
        graph = graph.put_edge("join", [f"n{count - 1}", "n0"], "n1")
        graph = graph.set_policy("max_supersteps", draw(st.integers(1, 100)))
    graph = graph.put_edge(
        "finish", f"n{count - 1}", FINISH, guard=draw(st.none() | st.just(exists("out")))
    )
    return graph.put_output("out")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runnable_graphs())
def test_generated_runnable_graphs_compile_deterministically(graph: Graph) -> None:
    first = build(graph)
    assert first.ok, first.diagnostics
    assert first.effective is not None
    assert first.graph_hash == content_hash(effective_document(first.effective))
    shuffled = from_dict(_reverse(to_dict(graph)))
    assert build(shuffled) == first
    relabelled = graph.update_node("n0", {"label": "changed label!"})
    assert build(relabelled).graph_hash != first.graph_hash


# -- fuzzing the compiler -------------------------------------------------------------------------

junk = json_values | st.sampled_from(
    [
        (1, 2),
        {1, 2},
        b"x",
        float("nan"),
        object(),
        Node("x"),
        S.string(),
        Guard("changed", ("x",)),
        Reducer("sum"),
    ]
)


@st.composite
def junk_graphs(draw: st.DrawFn) -> Graph:
    """A generated graph with one attribute of the root or of a record replaced by junk."""
    graph = draw(graphs())
    collections = [
        c for c in ("inputs", "fields", "outputs", "nodes", "edges") if getattr(graph, c)
    ]
    value = draw(junk)
    copy = attrs.evolve(graph)
    target: Any = copy
    names = [a.name for a in attrs.fields(Graph) if a.name != "diagnostics"]
    into_record = draw(st.booleans())
    if collections and into_record:
        coll = draw(st.sampled_from(collections))
        records = dict(getattr(graph, coll))
        object.__setattr__(copy, coll, records)
        key = draw(st.sampled_from(sorted(records)))
        if draw(st.booleans()):
            records[key] = value
            return copy
        target = records[key] = attrs.evolve(records[key])
        names = [a.name for a in attrs.fields(type(target))]
    object.__setattr__(target, draw(st.sampled_from(names)), value)
    return copy


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(junk_graphs() | graphs())
def test_compiler_fuzz_only_reports_diagnostics(graph: Graph) -> None:
    result = build(graph)
    assert isinstance(result, CompileResult)
    assert all(isinstance(d.code, DiagnosticCode) for d in result.diagnostics)
    assert result.ok is not any(d.is_error for d in result.diagnostics)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_documents())
def test_loader_and_compiler_fuzz_on_documents(doc: object) -> None:
    envelope = {"docket": 1, "kind": "graph", "graph": doc}
    result = compile_effective_document(bad(envelope), REGISTRY)
    assert isinstance(result, CompileResult)
    try:
        graph = from_dict(doc)
    except GraphLoadError:
        return
    assert isinstance(build(graph), CompileResult)
