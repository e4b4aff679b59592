"""The compiler's lowering stage (layer 2): an effective graph that validated becomes the
frozen :class:`~docket.graph._runtime.RuntimeGraph`, which ``runtime_diagnostics`` then
self-checks (those checks fire only on a doctored runtime graph).
"""

from __future__ import annotations

from collections import Counter
from typing import cast

from docket.graph._algorithms import _sorted
from docket.graph._policies import _MAX_SUPERSTEPS, _resolve_limit, node_policies
from docket.graph._runtime import (
    ChannelKind,
    ChannelType,
    Lowering,
    RuntimeChannel,
    RuntimeEdge,
    RuntimeGraph,
    RuntimeNode,
    RuntimeOutput,
)
from docket.graph.children import CHILD_IMPLEMENTATION, child_definition, parse_child
from docket.graph.maps import parse_map
from docket.graph.model import FINISH, START, Diagnostic, DiagnosticCode, Graph, Severity
from docket.graph.nodes import NodeDefinition, NodeRegistry
from docket.graph.reducers import R, effective_default
from docket.graph.schema import Schema
from docket.values import JSONDict

__all__ = ["runtime_diagnostics"]

E = Severity.ERROR
C = DiagnosticCode


def _lower(
    g: Graph, graph_hash: str, registry: NodeRegistry, host_limit: int | None
) -> RuntimeGraph:
    channels: dict[str, RuntimeChannel] = {}
    p2r: dict[str, dict[str, str]] = {
        k: {} for k in ("inputs", "fields", "nodes", "edges", "outputs")
    }
    r2p: dict[str, tuple[str, str]] = {}
    for field_id in _sorted(g.inputs):
        f = g.inputs[field_id]
        cid = f"input:{field_id}"
        channels[cid] = RuntimeChannel(
            cid,
            ChannelKind.INPUT,
            ChannelType.LAST_VALUE,
            field_id,
            f.schema,
            None,
            f.default,
            f.required,
        )
        p2r["inputs"][field_id], r2p[cid] = cid, ("input", field_id)
    for field_id in _sorted(g.fields):
        f = g.fields[field_id]
        cid = f"state:{field_id}"
        reducer = f.reducer or R.last_value()
        channels[cid] = RuntimeChannel(
            cid,
            ChannelKind.STATE,
            ChannelType.LAST_VALUE,
            field_id,
            f.schema,
            reducer,
            effective_default(f.default, reducer),
        )
        p2r["fields"][field_id], r2p[cid] = cid, ("field", field_id)
    edges: dict[str, RuntimeEdge] = {}
    generated: dict[str, JSONDict] = {}
    subscribe: dict[str, list[str]] = {n: [] for n in g.nodes}
    outgoing: dict[str, list[str]] = {n: [] for n in g.nodes}
    for edge_id in _sorted(g.edges):
        edge = g.edges[edge_id]
        cid = f"edge:{edge_id}"
        barrier = edge.is_barrier
        channels[cid] = RuntimeChannel(
            cid,
            ChannelKind.EDGE,
            ChannelType.BARRIER if barrier else ChannelType.EPHEMERAL,
            edge_id,
            sources=tuple(sorted(edge.sources)) if barrier else (),
        )
        edges[edge_id] = RuntimeEdge(edge_id, cid, edge.sources, edge.target, edge.guard, barrier)
        generated[cid] = {"kind": "activation_channel", "public_edge_id": edge_id}
        p2r["edges"][edge_id], r2p[cid] = cid, ("edge", edge_id)
        if edge.target in subscribe:
            subscribe[edge.target].append(cid)
        for source in sorted(set(edge.sources)):
            if source in outgoing:
                outgoing[source].append(edge_id)
    nodes: dict[str, RuntimeNode] = {}
    for node_id in _sorted(g.nodes):
        node = g.nodes[node_id]
        rid = f"node:{node_id}"
        child = parse_child(node.child)
        # validated: present and registered, or a child node (which has none)
        implementation = CHILD_IMPLEMENTATION if child else cast(str, node.implementation)
        nodes[node_id] = RuntimeNode(
            rid,
            node_id,
            implementation,
            child_definition() if child else cast(NodeDefinition, registry.get(implementation)),
            dict(node.config),
            tuple(sorted(subscribe[node_id])),
            tuple(sorted(outgoing[node_id])),
            node_policies(node.policies)[0],
            dict(node.metadata),
            parse_map(node.map),
            child,
        )
        p2r["nodes"][node_id], r2p[rid] = rid, ("node", node_id)
    outputs: dict[str, RuntimeOutput] = {}
    for output_id in _sorted(g.outputs):
        output = g.outputs[output_id]
        is_input = output.source in g.inputs
        projected = g.inputs[output.source] if is_input else g.fields[output.source]
        rid = f"output:{output_id}"
        outputs[output_id] = RuntimeOutput(
            output_id,
            rid,
            output.source,
            f"{'input' if is_input else 'state'}:{output.source}",
            cast(Schema, output.schema or projected.schema),
        )
        p2r["outputs"][output_id], r2p[rid] = rid, ("output", output_id)
    limit = _resolve_limit(g.policies.get(_MAX_SUPERSTEPS), host_limit)
    policies = {k: v for k, v in g.policies.items() if k != _MAX_SUPERSTEPS}
    if limit is not None:
        policies[_MAX_SUPERSTEPS] = limit
    return RuntimeGraph(
        id=f"{g.id}@{graph_hash[:12]}",
        graph_id=g.id,
        graph_hash=graph_hash,
        channels=dict(sorted(channels.items())),
        nodes=nodes,
        edges=edges,
        outputs=outputs,
        policies=policies,
        max_supersteps=limit,
        start_edges=tuple(e for e in edges if edges[e].sources == (START,)),
        lowering=Lowering(
            public_to_runtime=p2r,
            runtime_to_public=dict(sorted(r2p.items())),
            generated=generated,
            branches={n: dict(node.branches) for n, node in g.nodes.items() if node.branches},
        ),
    )


def runtime_diagnostics(runtime: RuntimeGraph) -> list[Diagnostic]:
    """Self-checks of a lowered graph; they only fire on a doctored ``RuntimeGraph``."""
    out: list[Diagnostic] = []

    def fail(code: DiagnosticCode, runtime_id: str, message: str) -> None:
        out.append(
            Diagnostic(code, E, ("runtime", runtime_id), message, {"runtime_id": runtime_id})
        )

    ids = Counter(
        [
            *runtime.channels,
            *(n.id for n in runtime.nodes.values()),
            *(o.runtime_id for o in runtime.outputs.values()),
        ]
    )
    for rid in sorted(i for i, n in ids.items() if n > 1):
        fail(C.RUNTIME_ID_COLLISION, rid, f"runtime ID {rid!r} is used more than once")
    for key, channel in runtime.channels.items():
        if channel.id != key:
            fail(C.RUNTIME_ID_COLLISION, key, f"channel filed under {key!r} has ID {channel.id!r}")
    for rid in sorted({*runtime.channels, *(n.id for n in runtime.nodes.values())}):
        if rid not in runtime.lowering.runtime_to_public:
            fail(C.LOWERING_INVARIANT_FAILED, rid, f"{rid!r} has no public counterpart")
    for node in runtime.nodes.values():
        for channel_id in node.subscribe:
            if channel_id not in runtime.channels:
                fail(
                    C.MISSING_RUNTIME_CHANNEL,
                    channel_id,
                    f"node {node.public_id!r} subscribes to a missing channel",
                )
        for edge_id in node.outgoing_edges:
            edge = runtime.edges.get(edge_id)
            if edge is None or edge.channel_id not in runtime.channels:
                fail(
                    C.LOWERING_INVARIANT_FAILED,
                    f"edge:{edge_id}",
                    f"outgoing edge {edge_id!r} of {node.public_id!r} is not lowered",
                )
    for output in runtime.outputs.values():
        if output.source_channel not in runtime.channels:
            fail(
                C.MISSING_RUNTIME_CHANNEL,
                output.source_channel,
                f"output {output.id!r} projects a missing channel",
            )
    subscribed = {c for n in runtime.nodes.values() for c in n.subscribe}
    for edge in runtime.edges.values():
        if edge.sources == (START,) and edge.target != FINISH and edge.target not in runtime.nodes:
            fail(
                C.LOWERING_INVARIANT_FAILED,
                edge.channel_id,
                f"start edge {edge.id!r} targets a missing node",
            )
        if edge.target == FINISH and edge.channel_id in subscribed:
            fail(
                C.LOWERING_INVARIANT_FAILED,
                edge.channel_id,
                f"{FINISH} edge {edge.id!r} has a subscriber",
            )
    return out
