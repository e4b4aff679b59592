"""Stored graphs, fetched by reference and compiled once per process.

A run pins its graph by ``(graph_id, graph_hash)``; the hash is the content hash of the
stored effective document, so one hash always means the same document, whichever tenant
published it. A :class:`GraphCache` therefore keeps one compiled
:class:`~docket.graph.compiler.RuntimeGraph` per ``(graph_id, graph_hash)``: the first
run of a graph in a process fetches and compiles it, every later one reuses it. The
document is fetched in the run's own scope (a run can only start from a graph of its
own scope, so whoever fetched it first was entitled to it).

Stored documents are recompiled *without* materialising node-config defaults again, so
a default added to a node since publication does not change a running graph.

Two flavours:

* an **executing** cache (workers) compiles with the application's node registry
  exactly; a graph naming an implementation this process lacks does not compile here,
  and the run is handed back for a worker that has it;
* a **descriptive** cache (the facade: starting runs, resolving interrupts) only needs
  the graph's fields, edges and schemas, so implementations the registry lacks are
  replaced by placeholders that are never called. A process that only starts runs does
  not need the node code.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

import attrs

from docket.contract.errors import CorruptGraph, NotFound
from docket.contract.protocols import Backend
from docket.graph.compiler import (
    RuntimeGraph,
    compile_effective_document,
    graph_from_effective_document,
)
from docket.graph.nodes import NodeContext, NodeDefinition, NodeRegistry, NodeReturn, NodeState
from docket.graph.wire import GraphLoadError
from docket.records import GraphRef, OwnerScope
from docket.values import JSONDict, JSONValue

__all__ = ["GraphCache", "GraphProblem", "placeholder_registry"]


@attrs.frozen
class GraphProblem:
    """Why a stored graph cannot be used here.

    ``missing`` and ``corrupt`` come from the store; ``invalid`` means the document does
    not compile with this process's registry (``diagnostics``); ``mismatch`` that it
    compiled to another identity than the reference.
    """

    kind: Literal["missing", "corrupt", "invalid", "mismatch"]
    message: str
    diagnostics: tuple[JSONDict, ...] = ()

    @property
    def cacheable(self) -> bool:
        return self.kind in ("invalid", "mismatch")

    def details(self) -> JSONDict:
        diagnostics: list[JSONValue] = list(self.diagnostics)
        return {"problem": self.kind, "diagnostics": diagnostics}


def _placeholder(state: NodeState, ctx: NodeContext) -> NodeReturn:
    raise RuntimeError(f"node {ctx.node_id!r} has no implementation in this process")


def placeholder_registry(names: Iterable[str], nodes: NodeRegistry | None) -> NodeRegistry:
    """``nodes`` plus an uncallable placeholder (config unchecked) for every other name."""
    registry = NodeRegistry()
    if nodes is not None:
        for name in nodes:
            definition = nodes.get(name)
            assert definition is not None
            registry.register(definition)
    for name in sorted(set(names)):
        if name not in registry:
            registry.register(NodeDefinition(name, _placeholder))
    return registry


_LIMIT: Final = 256  # compiled graphs kept per cache (oldest dropped first)


class GraphCache:
    """Compiled graphs by ``(graph_id, graph_hash)`` for one registry and one purpose."""

    def __init__(self, backend: Backend, nodes: NodeRegistry | None, *, executable: bool) -> None:
        self._backend = backend
        self._nodes = nodes if nodes is not None else NodeRegistry()
        self._executable = executable
        self._compiled: dict[tuple[str, str], RuntimeGraph | GraphProblem] = {}
        self.fetches = 0
        self.compiles = 0

    def __len__(self) -> int:
        return len(self._compiled)

    async def get(self, owner: OwnerScope, ref: GraphRef) -> RuntimeGraph | GraphProblem:
        key = (ref.graph_id, ref.graph_hash)
        known = self._compiled.get(key)
        if known is not None:
            return known
        self.fetches += 1
        document = await self._backend.graphs.fetch_graph(owner, ref)
        if isinstance(document, NotFound):
            return GraphProblem(
                "missing", f"graph {ref.graph_id} ({ref.graph_hash[:12]}) is not stored"
            )
        if isinstance(document, CorruptGraph):
            return GraphProblem("corrupt", f"graph {ref.graph_id} is corrupt: {document.reason}")
        compiled = self.compile(document, ref)
        if isinstance(compiled, RuntimeGraph) or compiled.cacheable:
            if len(self._compiled) >= _LIMIT:
                self._compiled.pop(next(iter(self._compiled)))
            self._compiled[key] = compiled
        return compiled

    def compile(self, document: JSONDict, ref: GraphRef) -> RuntimeGraph | GraphProblem:
        """Compile a stored effective document and check it is the graph ``ref`` names."""
        self.compiles += 1
        registry = self._nodes
        if not self._executable:
            try:
                graph = graph_from_effective_document(document)
            except GraphLoadError as exc:
                return GraphProblem(
                    "invalid",
                    "the stored graph document cannot be decoded",
                    tuple(d.to_dict() for d in exc.diagnostics),
                )
            names = [n.implementation for n in graph.nodes.values() if n.implementation]
            registry = placeholder_registry(names, self._nodes)
        result = compile_effective_document(document, registry)
        if not result.ok or result.runtime is None:
            codes = sorted({str(d.code) for d in result.errors})
            return GraphProblem(
                "invalid",
                f"graph {ref.graph_id} does not compile here ({', '.join(codes)})",
                tuple(d.to_dict() for d in result.errors),
            )
        runtime = result.runtime
        if (runtime.graph_id, runtime.graph_hash) != (ref.graph_id, ref.graph_hash):
            return GraphProblem(
                "mismatch",
                f"the document stored as {ref.graph_id} ({ref.graph_hash[:12]}) compiles to "
                f"{runtime.graph_id} ({runtime.graph_hash[:12]})",
            )
        return runtime
