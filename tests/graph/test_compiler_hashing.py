"""The compiler: graph hashes, effective documents, and the essay example across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from docket.graph.compiler import (
    compile_effective_document,
    compile_graph,
    effective_document,
    graph_from_effective_document,
)
from docket.graph.model import FINISH, START, Diagnostic, DiagnosticCode, Graph, new_graph
from docket.graph.nodes import NodeDefinition, NodePolicies, NodeRegistry, RetryPolicy
from docket.graph.schema import S
from docket.graph.wire import GraphLoadError, from_json, to_dict
from docket.values import JSONDict, JSONValue, canonical_json
from tests.graph.compiler_fixtures import (
    DEFAULTS_SCHEMA,
    REGISTRY,
    ROOT,
    C,
    E,
    Edit,
    _noop,
    _reverse,
    bad,
    build,
    linear,
)

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
