"""The public JSON wire format: exact round trips, omission rules, strict loading."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from docket.graph.guards import Guard, all_, any_, changed, equals, exists, not_, path
from docket.graph.guards import version_at_least as version
from docket.graph.model import (
    FINISH,
    START,
    DiagnosticCode,
    Edge,
    Field,
    FieldKind,
    Graph,
    GraphError,
    GraphErrorCode,
    Node,
    Output,
    new_graph,
)
from docket.graph.reducers import R, Reducer
from docket.graph.schema import NO_DEFAULT, S, Schema
from docket.graph.wire import GraphLoadError, from_dict, from_json, to_dict, to_json
from docket.values import JSONDict, JSONValue


def bad(value: object) -> Any:
    """Pass a deliberately ill-typed value past the type checker."""
    return value


def dig(doc: object, *keys: str | int) -> Any:
    """Walk into a JSON document without type narrowing at every step."""
    node: Any = doc
    for key in keys:
        node = node[key]
    return node


MINIMAL: JSONDict = {
    "schema_version": 1,
    "id": "minimal-linear",
    "inputs": {"value": {"kind": "input", "required": True, "schema": {"type": "string"}}},
    "fields": {
        "result": {
            "kind": "state",
            "schema": {"type": "string"},
            "reducer": {"type": "last_value"},
        }
    },
    "nodes": {
        "copy": {"implementation": "fixtures.copy", "config": {"from": "value", "to": "result"}}
    },
    "edges": {
        "edge_start_copy": {"from": "$start", "to": "copy"},
        "edge_copy_finish": {"from": "copy", "to": "$finish"},
    },
    "outputs": {"result": {"source": "result"}},
}


def rich_graph() -> Graph:
    review_ok = equals(path("review", ["status"]), "approved")
    return (
        new_graph("rich", name="Rich", description="every feature", metadata={"team": "core"})
        .put_input("topic", S.string(min_length=1), required=True, label="Topic")
        .put_input("tier", S.enum(["low", "medium", "high"], default="medium"), default="low")
        .put_field(
            "review",
            S.object({"status": S.string(required=True), "score": S.float(min=0, max=1)}),
            metadata={"ui": {"color": "red"}},
        )
        .put_field("maybe", S.string(default=None))
        .put_field("log", S.list(S.string()), reducer=R.append(unique=True, max_length=5))
        .put_field("seen", S.list(S.map()), reducer=R.union(by=["meta", "id"]))
        .put_field("total", S.float(), reducer=R.sum(), default=0.5)
        .put_field("flags", S.map(), reducer=R.merge(deep=True), default={})
        .put_field("done", S.boolean(), default=False)
        .put_node("writer", "essay.writer", config={"tone": "warm", "n": 1.0})
        .put_node(
            "reviewer",
            "essay.reviewer",
            branches={"route": ["ok", "again"]},
            policies={"retry": {"max_attempts": 3}},
        )
        .put_node("draft-only")
        .put_edge("start", START, "writer", source_handle="out", target_handle="in")
        .put_edge("ok", "reviewer", FINISH, guard=all_(not_(review_ok), changed("review")))
        .put_edge("again", "reviewer", "writer", guard=any_(exists("maybe"), version("log", 2)))
        .put_edge("join", ["writer", "draft-only"], "reviewer", label="both", description="b")
        .put_edge("lit", "writer", FINISH, guard=equals("flags", {"status": "x"}))
        .put_output("report", "review", label="Report", schema=S.object({}, open=True))
        .set_policy("max_supersteps", 50)
    )


# -- round trips ---------------------------------------------------------------------------------


def test_minimal_document_loads_and_dumps_identically() -> None:
    graph = from_dict(MINIMAL)
    assert graph.nodes["copy"].implementation == "fixtures.copy"
    assert graph.edges["edge_start_copy"].source == START
    assert to_dict(graph) == MINIMAL


def test_rich_graph_round_trips_both_ways() -> None:
    graph = rich_graph()
    doc = to_dict(graph)
    assert from_dict(doc) == graph
    assert to_dict(from_dict(doc)) == doc
    assert from_json(to_json(graph)) == graph
    assert from_json(to_json(graph, indent=None)) == graph
    assert "diagnostics" not in doc
    assert doc["schema_version"] == 1


def test_wire_names_and_encodings() -> None:
    doc = to_dict(rich_graph())
    edges = doc["edges"]
    assert isinstance(edges, dict)
    assert edges["ok"] == {
        "from": "reviewer",
        "to": "$finish",
        "guard": {
            "op": "all",
            "args": [
                {
                    "op": "not",
                    "args": [
                        {
                            "op": "equals",
                            "args": [
                                {"$guard": {"op": "path", "args": ["review", ["status"]]}},
                                "approved",
                            ],
                        }
                    ],
                },
                {"op": "changed", "args": ["review"]},
            ],
        },
    }
    assert dig(edges, "lit", "guard") == {"op": "equals", "args": ["flags", {"status": "x"}]}
    assert edges["join"] == {
        "from": ["writer", "draft-only"],
        "to": "reviewer",
        "label": "both",
        "description": "b",
    }
    fields = doc["fields"]
    assert isinstance(fields, dict)
    assert fields["log"] == {
        "kind": "state",
        "schema": {"type": "list", "item": {"type": "string"}},
        "reducer": {"type": "append", "opts": {"unique": True, "max_length": 5}},
    }
    assert dig(fields, "done", "default") is False
    nodes = doc["nodes"]
    assert isinstance(nodes, dict)
    assert nodes["draft-only"] == {}, "no implementation: the key is omitted"


def test_absent_schema_default_differs_from_explicit_null() -> None:
    with_null = new_graph("g").put_field("x", S.string(default=None))
    without = new_graph("g").put_field("x", S.string())
    assert with_null != without
    assert to_dict(with_null)["fields"] == {
        "x": {"kind": "state", "schema": {"type": "string", "default": None}}
    }
    assert to_dict(without)["fields"] == {"x": {"kind": "state", "schema": {"type": "string"}}}
    assert dig(to_dict(from_json(to_json(with_null))), "fields", "x", "schema")["default"] is None
    loaded = from_json(to_json(without)).fields["x"].schema
    assert loaded is not None and loaded.default is NO_DEFAULT


def test_empty_collections_and_maps_are_omitted() -> None:
    assert to_dict(new_graph("g")) == {"schema_version": 1, "id": "g"}


def test_schema_version_is_kept_as_written() -> None:
    graph = Graph(id="g", schema_version=2)
    assert to_dict(graph)["schema_version"] == 2
    assert from_dict(to_dict(graph), strict=False) == graph
    with pytest.raises(GraphLoadError) as err:
        from_dict(to_dict(graph))
    assert [d.code for d in err.value.diagnostics] == [DiagnosticCode.UNSUPPORTED_SCHEMA_VERSION]


def test_kind_mismatch_loads_for_the_compiler_to_report() -> None:
    doc = copy.deepcopy(MINIMAL)
    dig(doc, "inputs", "value")["kind"] = "state"
    graph = from_dict(doc)
    assert graph.inputs["value"].kind is FieldKind.STATE
    assert to_dict(graph) == doc


def test_enum_members_in_open_content_dump_as_strings() -> None:
    graph = Graph(id="g", metadata={"kind": FieldKind.INPUT, FieldKind.STATE: 1})
    assert to_dict(graph)["metadata"] == {"kind": "input", "state": 1}
    assert json.loads(to_json(graph))["metadata"] == {"kind": "input", "state": 1}


def test_to_json_is_deterministic_for_equal_graphs() -> None:
    a = new_graph("g").put_field("a", S.string()).put_field("b", S.integer())
    b = new_graph("g").put_field("b", S.integer()).put_field("a", S.string())
    assert a == b
    assert to_json(a) == to_json(b)
    assert to_json(a, indent=None) == to_json(b, indent=None)


# -- dump errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("graph", "code"),
    [
        (Graph(id="g", metadata={"$tag": 1}), GraphErrorCode.NON_DURABLE_VALUE),
        (Graph(id="g", metadata={"t": bad((1, 2))}), GraphErrorCode.NON_DURABLE_VALUE),
        (Graph(id="g", policies={"x": float("inf")}), GraphErrorCode.NON_DURABLE_VALUE),
        (Graph(id="g", nodes={"a": Node("b")}), GraphErrorCode.INVALID_ATTRS),
        (Graph(id="g", nodes={"a": bad(Output("a", "x"))}), GraphErrorCode.INVALID_ATTRS),
        (Graph(id="g", nodes={"a": Node("a", "bad name")}), GraphErrorCode.INVALID_IMPLEMENTATION),
        (
            Graph(id="g", fields={"a": Field("a", schema=Schema("text"))}),
            GraphErrorCode.INVALID_SCHEMA,
        ),
        (
            Graph(id="g", fields={"a": Field("a", reducer=Reducer("concat"))}),
            GraphErrorCode.INVALID_REDUCER,
        ),
        (
            Graph(id="g", edges={"e": Edge("e", START, "a", guard=Guard("regex", ("x",)))}),
            GraphErrorCode.INVALID_GUARD,
        ),
        (
            Graph(id="g", edges={"e": Edge("e", START, "a", guard=all_(bad("x")))}),
            GraphErrorCode.INVALID_GUARD,
        ),
        (Graph(id="g", name=bad(5)), GraphErrorCode.INVALID_ATTRS),
        (Graph(id=bad(5)), GraphErrorCode.INVALID_ATTRS),
        (
            Graph(id="g", fields={"a": Field("a", required=bad("no"))}),
            GraphErrorCode.INVALID_ATTRS,
        ),
    ],
)
def test_unwritable_content_raises_graph_error(graph: Graph, code: GraphErrorCode) -> None:
    with pytest.raises(GraphError) as err:
        to_dict(graph)
    assert err.value.code is code


def test_to_dict_rejects_non_graphs() -> None:
    with pytest.raises(TypeError):
        to_dict(bad({"id": "g"}))


# -- strict loading ------------------------------------------------------------------------------


def _set(doc: JSONDict, where: tuple[str, ...], value: object) -> JSONDict:
    out = copy.deepcopy(doc)
    target: Any = out
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    return out


def _drop(doc: JSONDict, where: tuple[str, ...]) -> JSONDict:
    out = copy.deepcopy(doc)
    target: Any = out
    for key in where[:-1]:
        target = target[key]
    del target[where[-1]]
    return out


BAD_DOCUMENTS: list[tuple[str, object, DiagnosticCode, str]] = [
    ("root list", [MINIMAL], DiagnosticCode.WRONG_TYPE, ""),
    (
        "no version",
        _drop(MINIMAL, ("schema_version",)),
        DiagnosticCode.MISSING_KEY,
        "/schema_version",
    ),
    (
        "string version",
        _set(MINIMAL, ("schema_version",), "1"),
        DiagnosticCode.WRONG_TYPE,
        "/schema_version",
    ),
    (
        "bool version",
        _set(MINIMAL, ("schema_version",), True),
        DiagnosticCode.WRONG_TYPE,
        "/schema_version",
    ),
    (
        "zero version",
        _set(MINIMAL, ("schema_version",), 0),
        DiagnosticCode.INVALID_VALUE,
        "/schema_version",
    ),
    (
        "future version",
        _set(MINIMAL, ("schema_version",), 99),
        DiagnosticCode.UNSUPPORTED_SCHEMA_VERSION,
        "/schema_version",
    ),
    ("unknown root key", _set(MINIMAL, ("extra",), 1), DiagnosticCode.UNKNOWN_KEY, "/extra"),
    ("no id", _drop(MINIMAL, ("id",)), DiagnosticCode.MISSING_KEY, "/id"),
    ("bad id", _set(MINIMAL, ("id",), "has spaces"), DiagnosticCode.INVALID_PUBLIC_ID, "/id"),
    ("reserved id", _set(MINIMAL, ("id",), "$start"), DiagnosticCode.RESERVED_ID, "/id"),
    ("nodes list", _set(MINIMAL, ("nodes",), []), DiagnosticCode.WRONG_TYPE, "/nodes"),
    (
        "bad node key",
        _set(MINIMAL, ("nodes", "a b"), {}),
        DiagnosticCode.INVALID_PUBLIC_ID,
        "/nodes/a b",
    ),
    (
        "node $finish",
        _set(MINIMAL, ("nodes", "$finish"), {}),
        DiagnosticCode.RESERVED_ID,
        "/nodes/$finish",
    ),
    (
        "node not object",
        _set(MINIMAL, ("nodes", "copy"), "x"),
        DiagnosticCode.WRONG_TYPE,
        "/nodes/copy",
    ),
    (
        "node id key",
        _set(MINIMAL, ("nodes", "copy", "id"), "copy"),
        DiagnosticCode.UNKNOWN_KEY,
        "/nodes/copy/id",
    ),
    (
        "module implementation",
        _set(MINIMAL, ("nodes", "copy", "implementation"), {"type": "module", "module": "os"}),
        DiagnosticCode.WRONG_TYPE,
        "/nodes/copy/implementation",
    ),
    (
        "path-like implementation",
        _set(MINIMAL, ("nodes", "copy", "implementation"), "../evil"),
        DiagnosticCode.INVALID_VALUE,
        "/nodes/copy/implementation",
    ),
    (
        "$ key in config",
        _set(MINIMAL, ("nodes", "copy", "config", "$tag"), 1),
        DiagnosticCode.NON_DURABLE_VALUE,
        "/nodes/copy/config",
    ),
    (
        "tuple in config",
        _set(MINIMAL, ("nodes", "copy", "config", "t"), (1, 2)),
        DiagnosticCode.NON_DURABLE_VALUE,
        "/nodes/copy/config",
    ),
    (
        "branch group $b",
        _set(MINIMAL, ("nodes", "copy", "branches"), {"$b": []}),
        DiagnosticCode.NON_DURABLE_VALUE,
        "/nodes/copy/branches",
    ),
    (
        "branch group map",
        _set(MINIMAL, ("nodes", "copy", "branches"), {"b": {"x": 1}}),
        DiagnosticCode.WRONG_TYPE,
        "/nodes/copy/branches/b",
    ),
    (
        "unknown kind",
        _set(MINIMAL, ("inputs", "value", "kind"), "output"),
        DiagnosticCode.INVALID_VALUE,
        "/inputs/value/kind",
    ),
    (
        "required str",
        _set(MINIMAL, ("inputs", "value", "required"), "yes"),
        DiagnosticCode.WRONG_TYPE,
        "/inputs/value/required",
    ),
    (
        "nan default",
        _set(MINIMAL, ("inputs", "value", "default"), float("nan")),
        DiagnosticCode.NON_DURABLE_VALUE,
        "/inputs/value/default",
    ),
    (
        "unknown schema type",
        _set(MINIMAL, ("inputs", "value", "schema", "type"), "text"),
        DiagnosticCode.INVALID_SCHEMA,
        "/inputs/value/schema/type",
    ),
    (
        "$ schema field",
        _set(
            MINIMAL,
            ("inputs", "value", "schema"),
            {"type": "object", "fields": {"$x": {"type": "string"}}},
        ),
        DiagnosticCode.INVALID_SCHEMA,
        "/inputs/value/schema/fields/$x",
    ),
    (
        "unknown reducer",
        _set(MINIMAL, ("fields", "result", "reducer", "type"), "concat"),
        DiagnosticCode.INVALID_REDUCER,
        "/fields/result/reducer/type",
    ),
    (
        "unknown guard op",
        _set(MINIMAL, ("edges", "edge_copy_finish", "guard"), {"op": "regex", "args": []}),
        DiagnosticCode.INVALID_GUARD,
        "/edges/edge_copy_finish/guard/op",
    ),
    (
        "bad $guard wrapper",
        _set(
            MINIMAL,
            ("edges", "edge_copy_finish", "guard"),
            {"op": "exists", "args": [{"$guard": {"op": "path", "args": ["v", []]}, "extra": 1}]},
        ),
        DiagnosticCode.INVALID_GUARD,
        "/edges/edge_copy_finish/guard/args/0",
    ),
    (
        "edge from int",
        _set(MINIMAL, ("edges", "edge_copy_finish", "from"), 3),
        DiagnosticCode.WRONG_TYPE,
        "/edges/edge_copy_finish/from",
    ),
    (
        "edge no to",
        _drop(MINIMAL, ("edges", "edge_copy_finish", "to")),
        DiagnosticCode.MISSING_KEY,
        "/edges/edge_copy_finish/to",
    ),
    (
        "edge label int",
        _set(MINIMAL, ("edges", "edge_copy_finish", "label"), 5),
        DiagnosticCode.WRONG_TYPE,
        "/edges/edge_copy_finish/label",
    ),
    (
        "output source int",
        _set(MINIMAL, ("outputs", "result", "source"), 5),
        DiagnosticCode.WRONG_TYPE,
        "/outputs/result/source",
    ),
    ("metadata list", _set(MINIMAL, ("metadata",), [1]), DiagnosticCode.WRONG_TYPE, "/metadata"),
    ("name int", _set(MINIMAL, ("name",), 1), DiagnosticCode.WRONG_TYPE, "/name"),
]


@pytest.mark.parametrize(
    ("doc", "code", "where"),
    [pytest.param(doc, code, where, id=name) for name, doc, code, where in BAD_DOCUMENTS],
)
def test_strict_loading_reports_typed_diagnostics(
    doc: object, code: DiagnosticCode, where: str
) -> None:
    with pytest.raises(GraphLoadError) as err:
        from_dict(doc)
    found = [(d.code, d.pointer) for d in err.value.diagnostics]
    assert (code, where) in found
    assert err.value.code is GraphErrorCode.INVALID_DOCUMENT
    assert all(d.is_error for d in err.value.diagnostics)


def test_loader_collects_every_problem() -> None:
    doc = _set(_set(MINIMAL, ("extra",), 1), ("nodes", "copy", "label"), 5)
    doc = _drop(doc, ("edges", "edge_copy_finish", "to"))
    with pytest.raises(GraphLoadError) as err:
        from_dict(doc)
    assert {d.code for d in err.value.diagnostics} == {
        DiagnosticCode.UNKNOWN_KEY,
        DiagnosticCode.WRONG_TYPE,
        DiagnosticCode.MISSING_KEY,
    }
    assert dig(err.value.details, "diagnostics", 0, "path") == "/extra"


def test_output_source_defaults_to_its_id() -> None:
    graph = from_dict(_set(MINIMAL, ("outputs", "result"), {}))
    assert graph.outputs["result"].source == "result"


def test_plain_dict_literal_is_not_a_guard() -> None:
    doc = _set(
        MINIMAL,
        ("edges", "edge_copy_finish", "guard"),
        {"op": "equals", "args": ["value", {"status": "x"}]},
    )
    guard = from_dict(doc).edges["edge_copy_finish"].guard
    assert guard == equals("value", {"status": "x"})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{", "not a valid JSON"),
        ('{"id": "a", "id": "b"}', "duplicate key"),
        ('{"schema_version": NaN}', "NaN"),
        ('{"schema_version": 1, "id": "g", "metadata": {"x": Infinity}}', "Infinity"),
        (b"\xff\xfe", "not a valid JSON"),
    ],
)
def test_from_json_rejects_non_json(text: str | bytes, fragment: str) -> None:
    with pytest.raises(GraphLoadError) as err:
        from_json(text)
    assert err.value.diagnostics[0].code is DiagnosticCode.INVALID_JSON
    assert fragment in err.value.diagnostics[0].message


def test_from_json_rejects_overflowing_numbers() -> None:
    with pytest.raises(GraphLoadError) as err:
        from_json('{"schema_version": 1, "id": "g", "metadata": {"x": 1e999}}')
    assert err.value.diagnostics[0].code is DiagnosticCode.NON_DURABLE_VALUE


def test_deep_nesting_is_a_typed_error() -> None:
    deep: JSONValue = 1
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(GraphLoadError):
        from_dict({"schema_version": 1, "id": "g", "metadata": {"x": deep}})
    with pytest.raises(GraphLoadError):
        from_json(
            '{"schema_version": 1, "id": "g", "metadata": {"x": '
            + "[" * 100_000
            + "]" * 100_000
            + "}}"
        )


# -- generated graphs ----------------------------------------------------------------------------

ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,6}", fullmatch=True)
keys = st.text(max_size=5).filter(lambda k: not k.startswith("$"))
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values: st.SearchStrategy[JSONValue] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=6,
)
open_maps = st.dictionaries(keys, json_values, max_size=3)
labels = st.none() | st.text(max_size=8)
leaf_schemas = st.sampled_from(
    [
        S.string(),
        S.string(min_length=1, pattern="^[a-z]"),
        S.string(default=None),
        S.integer(min=0),
        S.float(default=0.5),
        S.boolean(required=True),
        S.map(),
        S.enum(["a", "b", 1, True]),
    ]
)
schemas: st.SearchStrategy[Schema] = st.recursive(
    leaf_schemas,
    lambda inner: inner.map(S.list) | st.dictionaries(ids, inner, max_size=3).map(S.object),
    max_leaves=4,
)
reducers = st.sampled_from(
    [
        None,
        R.last_value(),
        R.first_value(),
        R.append(unique=True),
        R.union(by="id"),
        R.merge(deep=True),
        R.sum(),
    ]
)


def guards(fields: list[str]) -> st.SearchStrategy[Guard]:
    field = st.sampled_from(fields) if fields else ids
    ref = field | st.builds(
        path, field, st.lists(st.text(max_size=3) | st.integers(-3, 3), max_size=3)
    )
    leaves = (
        st.builds(changed, field)
        | st.builds(exists, ref)
        | st.builds(equals, ref, json_values)
        | st.builds(version, field, st.integers(0, 5))
    )
    return st.recursive(
        leaves,
        lambda inner: (
            st.builds(not_, inner)
            | st.lists(inner, max_size=3).map(lambda gs: all_(*gs))
            | st.lists(inner, max_size=3).map(lambda gs: any_(*gs))
        ),
        max_leaves=5,
    )


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    graph = new_graph(
        draw(ids),
        name=draw(labels),
        description=draw(labels),
        metadata=draw(open_maps),
        policies=draw(st.dictionaries(st.just("max_supersteps"), st.integers(1, 50)) | open_maps),
    )
    field_ids = draw(st.lists(ids, unique=True, max_size=5))
    split = draw(st.integers(0, len(field_ids)))
    for field_id in field_ids[:split]:
        graph = graph.put_input(
            field_id,
            draw(schemas),
            required=draw(st.booleans()),
            default=draw(json_values),
            label=draw(labels),
            metadata=draw(open_maps),
        )
    for field_id in field_ids[split:]:
        graph = graph.put_field(
            field_id, draw(schemas), reducer=draw(reducers), default=draw(json_values)
        )
    node_ids = draw(st.lists(ids, unique=True, max_size=5))
    for node_id in node_ids:
        graph = graph.put_node(
            node_id,
            draw(st.none() | st.from_regex(r"[a-z][a-z0-9_.:-]{0,8}", fullmatch=True)),
            config=draw(open_maps),
            policies=draw(open_maps),
            label=draw(labels),
        )
    endpoints = st.sampled_from(node_ids) if node_ids else ids
    for edge_id in draw(st.lists(ids, unique=True, max_size=6)):
        source = draw(
            st.just(START) | endpoints | st.lists(endpoints, min_size=1, max_size=3, unique=True)
        )
        graph = graph.put_edge(
            edge_id,
            source,
            draw(endpoints | st.just(FINISH)),
            guard=draw(st.none() | guards(field_ids)),
            label=draw(labels),
            source_handle=draw(labels),
            metadata=draw(open_maps),
        )
    if node_ids and graph.edges:
        groups = st.lists(st.sampled_from(sorted(graph.edges)), max_size=3)
        graph = graph.update_node(
            node_ids[0], {"branches": draw(st.dictionaries(keys, groups, max_size=2))}
        )
    for output_id in draw(st.lists(ids, unique=True, max_size=3)):
        graph = graph.put_output(
            output_id, draw(st.sampled_from(field_ids) if field_ids else ids), label=draw(labels)
        )
    return graph


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_every_generated_graph_round_trips(graph: Graph) -> None:
    text = to_json(graph)
    assert from_json(text) == graph
    assert to_json(from_json(text)) == text
    doc = to_dict(graph)
    assert to_dict(from_dict(doc)) == doc


# -- fuzzing the loader -------------------------------------------------------------------------


@st.composite
def mutated_documents(draw: st.DrawFn) -> object:
    """A valid document with a few random subtrees replaced, added or removed."""
    doc: Any = to_dict(draw(graphs()))
    for _ in range(draw(st.integers(1, 4))):
        containers = [doc]
        stack = [doc]
        while stack:
            item = stack.pop()
            children = (
                item.values() if isinstance(item, dict) else item if isinstance(item, list) else []
            )
            for child in children:
                if isinstance(child, dict | list):
                    containers.append(child)
                    stack.append(child)
        target = draw(st.sampled_from(containers))
        junk = draw(json_values | st.sampled_from([(1,), {1, 2}, b"x", float("nan"), object()]))
        if isinstance(target, dict):
            key = draw(st.sampled_from([*target, "$x", "extra", "from", "op", "type"]))
            if draw(st.booleans()) and key in target:
                del target[key]
            else:
                target[key] = junk
        elif target:
            target[draw(st.integers(0, len(target) - 1))] = junk
        else:
            target.append(junk)
    return doc


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_documents() | json_values)
def test_loader_fuzz_only_raises_graph_load_error(doc: object) -> None:
    try:
        graph = from_dict(doc)
    except GraphLoadError as exc:
        assert exc.diagnostics
        assert all(isinstance(d.code, DiagnosticCode) for d in exc.diagnostics)
        return
    assert from_dict(to_dict(graph)) == graph


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60) | st.binary(max_size=40))
def test_from_json_fuzz_only_raises_graph_load_error(text: str | bytes) -> None:
    try:
        from_json(text)
    except GraphLoadError as exc:
        assert exc.diagnostics
