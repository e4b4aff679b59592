"""A fluent builder for authoring graphs in code.

Example::

    graph = (
        GraphBuilder("essay")
        .input("topic", S.string(), required=True)
        .field("draft", S.string())
        .node("writer", "essay.writer", config={"tone": "warm"}, timeout_ms=30_000)
        .edge("start", START, "writer")
        .edge("done", "writer", FINISH)
        .output("draft")
        .build()
    )

Every method applies one edit of :class:`~docket.graph.model.Graph` and raises its typed
``GraphError`` at once. On top of those, the builder refuses to declare the same ID twice
(``duplicate_id``): in a builder, a repeated ID is almost always a slip. ``build()`` returns
the authored graph; compile it (``compile_graph``) to learn whether it can run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Self

from docket.graph.children import ChildSpec
from docket.graph.guards import Guard
from docket.graph.maps import MapSpec
from docket.graph.model import Graph, GraphError, GraphErrorCode, new_graph
from docket.graph.nodes import RetryPolicy
from docket.values import JSONDict, JSONValue

__all__ = ["GraphBuilder"]


class GraphBuilder:
    """Builds a :class:`Graph` step by step; each method returns the builder."""

    def __init__(
        self,
        graph_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        schema_version: int = 1,
        policies: Mapping[str, JSONValue] | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
    ) -> None:
        self._graph = new_graph(
            graph_id,
            name=name,
            description=description,
            schema_version=schema_version,
            policies=policies,
            metadata=metadata,
        )

    @property
    def graph(self) -> Graph:
        """The graph built so far."""
        return self._graph

    def build(self) -> Graph:
        return self._graph

    def _fresh(self, kind: str, record_id: str, taken: bool) -> None:
        if taken:
            raise GraphError(
                GraphErrorCode.DUPLICATE_ID,
                f"{kind} {record_id!r} is already declared",
                details={"label": kind, "id": record_id},
            )

    # -- fields ------------------------------------------------------------------------------

    def input(
        self,
        field_id: str,
        schema: object,
        *,
        required: bool = False,
        default: JSONValue = None,
        label: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
    ) -> Self:
        """Declare an input: run data given at start, read-only to nodes."""
        self._fresh("field", field_id, self._graph.field(field_id) is not None)
        self._graph = self._graph.put_input(
            field_id,
            schema,
            required=required,
            default=default,
            label=label,
            description=description,
            metadata=metadata,
        )
        return self

    def field(
        self,
        field_id: str,
        schema: object,
        *,
        reducer: object = None,
        default: JSONValue = None,
        label: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
    ) -> Self:
        """Declare a state field, written by nodes through ``reducer`` (default: last value)."""
        self._fresh("field", field_id, self._graph.field(field_id) is not None)
        self._graph = self._graph.put_field(
            field_id,
            schema,
            reducer=reducer,
            default=default,
            label=label,
            description=description,
            metadata=metadata,
        )
        return self

    # -- nodes ---------------------------------------------------------------------------------

    def node(
        self,
        node_id: str,
        implementation: str | None = None,
        *,
        config: Mapping[str, JSONValue] | None = None,
        retry: RetryPolicy | None = None,
        timeout_ms: int | None = None,
        policies: Mapping[str, JSONValue] | None = None,
        max_concurrency: int | None = None,
        limiter: str | None = None,
        branches: Mapping[str, Sequence[str]] | None = None,
        label: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
        inputs: Mapping[str, object] | None = None,
        fields: Mapping[str, object] | None = None,
        map: MapSpec | Mapping[str, JSONValue] | None = None,
        child: ChildSpec | Mapping[str, JSONValue] | None = None,
    ) -> Self:
        """Declare a node running the registered ``implementation``, or, with ``child``
        and no implementation, a node running another graph as a child run (a
        :class:`ChildSpec` or its document form; see :mod:`docket.graph.children`).

        ``retry``, ``timeout_ms``, ``max_concurrency`` and ``limiter`` (a queue whose
        limits apply to the node's attempts across every worker, docs/queues.md) are
        stored as node policies;
        giving them in ``policies`` as well is an error. ``inputs``/``fields`` declare
        fields inline. ``map`` runs the node once per item of a list (a :class:`MapSpec` or its
        document form, ``{"over": ..., "as": ...}``; see :mod:`docket.graph.maps`).
        """
        self._fresh("node", node_id, node_id in self._graph.nodes)
        if policies is not None and not isinstance(policies, Mapping):
            raise GraphError(
                GraphErrorCode.INVALID_ATTRS, f"node {node_id!r}: policies must be a mapping"
            )
        merged: JSONDict = dict(policies or {})
        for key, value in (
            ("retry", None if retry is None else _retry(retry)),
            ("timeout_ms", timeout_ms),
            ("max_concurrency", max_concurrency),
            ("limiter", limiter),
        ):
            if value is None:
                continue
            if key in merged:
                raise GraphError(
                    GraphErrorCode.INVALID_ATTRS,
                    f"node {node_id!r}: {key} is given both as an argument and in policies",
                )
            merged[key] = value
        self._graph = self._graph.put_node(
            node_id,
            implementation,
            config=config,
            policies=merged,
            branches=branches,
            label=label,
            description=description,
            metadata=metadata,
            inputs=inputs,
            fields=fields,
            map=map.to_json() if isinstance(map, MapSpec) else map,
            child=child.to_json() if isinstance(child, ChildSpec) else child,
        )
        return self

    def branch(self, node_id: str, group: str, edge_ids: Sequence[str]) -> Self:
        """Name a group of ``node_id``'s outgoing (guarded) edges, for editors and rendering."""
        node = self._graph.nodes.get(node_id)
        if node is None:
            raise GraphError(
                GraphErrorCode.UNKNOWN_RECORD,
                f"declare node {node_id!r} before its branch groups",
                details={"label": "node", "id": node_id},
            )
        self._fresh("branch group", group, group in node.branches)
        groups = {**node.branches, group: tuple(edge_ids)}
        self._graph = self._graph.update_node(node_id, {"branches": groups})
        return self

    # -- edges ---------------------------------------------------------------------------------

    def edge(
        self,
        edge_id: str,
        source: str | Sequence[str],
        target: str,
        *,
        guard: Guard | None = None,
        label: str | None = None,
        description: str | None = None,
        source_handle: str | None = None,
        target_handle: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
    ) -> Self:
        """Declare an edge from ``START``/a node (or a list of nodes: a barrier) to a node or
        ``FINISH``, firing only when ``guard`` holds."""
        self._fresh("edge", edge_id, edge_id in self._graph.edges)
        self._graph = self._graph.put_edge(
            edge_id,
            source,
            target,
            guard=guard,
            label=label,
            description=description,
            source_handle=source_handle,
            target_handle=target_handle,
            metadata=metadata,
        )
        return self

    def fan_in(
        self,
        edge_id: str,
        sources: Sequence[str],
        target: str,
        *,
        guard: Guard | None = None,
        label: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
    ) -> Self:
        """A barrier edge: fires once every node in ``sources`` has completed since it last
        fired."""
        if isinstance(sources, str) or not sources:
            raise GraphError(
                GraphErrorCode.INVALID_ATTRS,
                f"fan_in {edge_id!r} needs a non-empty list of source nodes",
            )
        return self.edge(
            edge_id,
            list(sources),
            target,
            guard=guard,
            label=label,
            description=description,
            metadata=metadata,
        )

    # -- outputs and graph-level settings --------------------------------------------------------

    def output(
        self,
        output_id: str,
        source: str | None = None,
        *,
        schema: object = None,
        label: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
    ) -> Self:
        """Project the input or field ``source`` (default: ``output_id``) into the output."""
        self._fresh("output", output_id, output_id in self._graph.outputs)
        self._graph = self._graph.put_output(
            output_id,
            source,
            schema=schema,
            label=label,
            description=description,
            metadata=metadata,
        )
        return self

    def max_supersteps(self, limit: int) -> Self:
        """Bound every run of the graph to ``limit`` supersteps (needed to bound cycles)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise GraphError(
                GraphErrorCode.INVALID_ATTRS,
                f"max_supersteps must be a positive integer, got {limit!r}",
            )
        return self.policy("max_supersteps", limit)

    def policy(self, key: str, value: JSONValue) -> Self:
        self._graph = self._graph.set_policy(key, value)
        return self

    def metadata(self, key: str, value: JSONValue) -> Self:
        self._graph = self._graph.set_metadata(key, value)
        return self


def _retry(retry: RetryPolicy) -> JSONDict:
    if not isinstance(retry, RetryPolicy):
        raise GraphError(
            GraphErrorCode.INVALID_ATTRS,
            f"retry must be a RetryPolicy, got {type(retry).__name__}",
        )
    return retry.to_json()
