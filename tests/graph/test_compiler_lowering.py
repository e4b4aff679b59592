"""The compiler: lowering to the runtime graph and its self-checks."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from docket.graph.compiler import (
    ChannelKind,
    ChannelType,
    RuntimeGraph,
    effective_document,
    runtime_diagnostics,
)
from docket.graph.guards import equals
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodePolicies, RetryPolicy
from docket.graph.reducers import R
from docket.graph.schema import S, SchemaType
from docket.values import JSONValue, content_hash
from tests.graph.compiler_fixtures import REGISTRY, C, build, fan_in, linear


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
