"""The compiler on generated graphs: stable hashes, determinism, and fuzzing."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from docket.graph.compiler import CompileResult, compile_effective_document, effective_document
from docket.graph.guards import Guard, exists
from docket.graph.model import FINISH, START, DiagnosticCode, Graph, Node, new_graph
from docket.graph.reducers import Reducer
from docket.graph.schema import S
from docket.graph.wire import GraphLoadError, from_dict, to_dict
from docket.values import content_hash
from tests.graph.compiler_fixtures import REGISTRY, _reverse, bad, build
from tests.graph.test_wire import graphs, json_values, mutated_documents

# -- generated graphs -----------------------------------------------------------------------------


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
