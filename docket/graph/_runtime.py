"""The runtime graph (layer 2): what :func:`~docket.graph.compiler.compile_graph` lowers an
effective graph to and the superstep loop executes. Frozen records only; the compiler
builds them (:mod:`docket.graph._lower`) and ``docket.graph.compiler`` is their public path.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

import attrs

from docket.graph.children import ChildSpec
from docket.graph.guards import Guard
from docket.graph.maps import MapSpec
from docket.graph.nodes import NodeDefinition, NodePolicies
from docket.graph.reducers import FieldRule, Reducer
from docket.graph.schema import Schema
from docket.values import JSONDict, JSONValue

__all__ = [
    "ChannelKind",
    "ChannelType",
    "Lowering",
    "RuntimeChannel",
    "RuntimeEdge",
    "RuntimeGraph",
    "RuntimeNode",
    "RuntimeOutput",
]


class ChannelKind(StrEnum):
    INPUT = "input"
    STATE = "state"
    EDGE = "edge"


class ChannelType(StrEnum):
    LAST_VALUE = "last_value"  # input and state channels (state ones fold through a reducer)
    EPHEMERAL = "ephemeral"  # activation of a single-source edge
    BARRIER = "barrier"  # activation of a fan-in edge, fires once all sources completed


@attrs.frozen
class RuntimeChannel:
    """One channel: ``input:<id>``, ``state:<id>`` or ``edge:<id>``.

    ``default`` is the value a never-written channel shows: the input default, or for a
    state field its default when not ``None``, else its reducer's zero.
    ``sources`` lists a barrier's source nodes, sorted.
    """

    id: str
    kind: ChannelKind
    type: ChannelType
    public_id: str
    schema: Schema | None = None
    reducer: Reducer | None = None
    default: JSONValue = None
    required: bool = False
    sources: tuple[str, ...] = ()


@attrs.frozen
class RuntimeNode:
    """An executable node. ``subscribe``: sorted channel IDs of the edges targeting it (the
    only way a node is activated); ``outgoing_edges``: sorted public IDs of the edges it is
    a source of (single or barrier)."""

    id: str
    public_id: str
    implementation: str
    definition: NodeDefinition
    config: JSONDict
    subscribe: tuple[str, ...]
    outgoing_edges: tuple[str, ...]
    policies: NodePolicies
    metadata: JSONDict = attrs.field(factory=dict)
    map: MapSpec | None = None  # one task per item of a list (docket.graph.maps)
    child: ChildSpec | None = None  # runs another graph as a child run (docket.graph.children)


@attrs.frozen
class RuntimeEdge:
    """An edge descriptor. ``sources`` is ``("$start",)``, ``(node,)`` or the barrier's
    sources as authored; ``target`` is a node ID or ``"$finish"`` (which only records an
    event when the edge fires: runs complete by quiescence)."""

    id: str
    channel_id: str
    sources: tuple[str, ...]
    target: str
    guard: Guard | None
    barrier: bool


@attrs.frozen
class RuntimeOutput:
    id: str
    runtime_id: str
    source: str
    source_channel: str
    schema: Schema


@attrs.frozen
class Lowering:
    """Bookkeeping between public and runtime IDs.

    ``public_to_runtime``: kind (``inputs fields nodes edges outputs``) -> public -> runtime.
    ``runtime_to_public``: runtime ID -> ``(kind, public ID)`` with kinds ``input field node
    edge output``. ``generated``: channels the compiler made up (edge activations).
    ``branches``: node -> branch groups, for nodes that declare any (no runtime effect).
    """

    public_to_runtime: Mapping[str, Mapping[str, str]]
    runtime_to_public: Mapping[str, tuple[str, str]]
    generated: Mapping[str, JSONDict]
    branches: Mapping[str, Mapping[str, tuple[str, ...]]]


@attrs.frozen
class RuntimeGraph:
    """The executable form of a compiled graph: derived, cached per process, never stored.

    ``nodes``, ``edges`` and ``outputs`` are keyed by public ID, ``channels`` by channel ID;
    every mapping is in sorted key order. ``max_supersteps`` is the resolved limit (``None``:
    unbounded as far as the graph is concerned).
    """

    id: str
    graph_id: str
    graph_hash: str
    channels: Mapping[str, RuntimeChannel]
    nodes: Mapping[str, RuntimeNode]
    edges: Mapping[str, RuntimeEdge]
    outputs: Mapping[str, RuntimeOutput]
    policies: JSONDict
    max_supersteps: int | None
    start_edges: tuple[str, ...]
    lowering: Lowering
    # Derived once per graph (the core reads them on every superstep); not part of the
    # graph's identity, and rebuilt by __init__ (so attrs.evolve) from the fields above.
    _input_ids: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)
    _field_rules: Mapping[str, FieldRule] = attrs.field(init=False, eq=False, repr=False)
    _visible: tuple[tuple[str, RuntimeChannel], ...] = attrs.field(init=False, eq=False, repr=False)
    _node_order: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)
    _has_children: bool = attrs.field(init=False, eq=False, repr=False)
    _limiters: frozenset[str] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        channels = self.channels.values()
        inputs = tuple(c.public_id for c in channels if c.kind is ChannelKind.INPUT)
        rules = MappingProxyType(
            {
                c.public_id: FieldRule(schema=c.schema, reducer=c.reducer, default=c.default)
                for c in channels
                if c.kind is ChannelKind.STATE
            }
        )
        object.__setattr__(self, "_input_ids", inputs)
        object.__setattr__(self, "_field_rules", rules)
        visible = tuple((k, c) for k, c in self.channels.items() if c.kind is not ChannelKind.EDGE)
        object.__setattr__(self, "_visible", visible)
        object.__setattr__(self, "_node_order", tuple(sorted(self.nodes)))
        object.__setattr__(self, "_has_children", any(n.child for n in self.nodes.values()))
        limiters = frozenset(n.policies.limiter for n in self.nodes.values() if n.policies.limiter)
        object.__setattr__(self, "_limiters", limiters)

    @property
    def input_ids(self) -> tuple[str, ...]:
        return self._input_ids

    @property
    def visible_channels(self) -> tuple[tuple[str, RuntimeChannel], ...]:
        """``(channel id, channel)`` of the input and state channels (what snapshots
        show), in ``channels`` order."""
        return self._visible

    @property
    def node_order(self) -> tuple[str, ...]:
        """Every node id, sorted."""
        return self._node_order

    @property
    def has_children(self) -> bool:
        """Whether any node runs a child graph (docket.graph.children)."""
        return self._has_children

    @property
    def limiters(self) -> frozenset[str]:
        """The queues the nodes' ``limiter`` policies name (docs/queues.md)."""
        return self._limiters

    @property
    def field_rule_map(self) -> Mapping[str, FieldRule]:
        """:meth:`field_rules`, built once per graph and read-only."""
        return self._field_rules

    @property
    def field_ids(self) -> tuple[str, ...]:
        return tuple(c.public_id for c in self.channels.values() if c.kind is ChannelKind.STATE)

    def input_channel(self, input_id: str) -> RuntimeChannel:
        return self.channels[f"input:{input_id}"]

    def state_channel(self, field_id: str) -> RuntimeChannel:
        return self.channels[f"state:{field_id}"]

    def field_rules(self) -> dict[str, FieldRule]:
        """What committing writes needs per state field (``reducers.commit_step``)."""
        return dict(self._field_rules)

    def defaults(self) -> dict[str, JSONValue]:
        """Public ID -> default, for every input and field whose default is not ``None``
        (what a snapshot shows for a never-written channel)."""
        return {
            c.public_id: c.default
            for c in self.channels.values()
            if c.kind is not ChannelKind.EDGE and c.default is not None
        }
