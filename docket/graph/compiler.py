"""The compiler: authored graph -> effective graph (hashed) -> runtime graph.

Pipeline (``compile_graph``):

1. **Ingest** -- write the graph to its wire form and read it back. This canonicalises
   open content (str-valued enum members become strings, sequences become lists/tuples)
   and proves every attribute is representable. A failure gives one diagnostic and stops.
2. **Materialise** -- each node's config gets the top-level defaults of its registered
   config schema for keys it does not set. Skipped for stored effective documents.
3. **Validate** -- every rule, as diagnostics with stable codes and paths. Passes run in a
   fixed order (document, fields, outputs, nodes, edges, branches, guards, topology,
   cycles, exits, references) and visit records in ID order, so the list is deterministic.
   Warnings do not block; any error stops here.
4. **Hash** -- ``graph_hash = content_hash(effective_document(effective))``: SHA-256 over
   the canonical JSON of the whole effective document (labels and metadata included).
5. **Lower** -- build the frozen :class:`RuntimeGraph` the superstep loop executes, then
   self-check it.

``compile_graph`` never raises for an invalid graph; it raises ``TypeError`` /
``ValueError`` only when called wrongly. Node implementations are looked up in the
registry by name; a name the registry lacks is the error ``unknown_implementation``.

Public API
----------
- ``compile_graph(graph, registry, *, max_supersteps=None) -> CompileResult``.
- ``compile_effective_document(doc, registry, *, max_supersteps=None) -> CompileResult``:
  recompile a stored effective document without re-materialising defaults.
- ``verify(graph, registry, *, max_supersteps=None) -> Graph``: the graph with its
  ``diagnostics`` filled in.
- ``effective_document(graph) -> JSONDict`` / ``graph_from_effective_document(doc) -> Graph``:
  the durable, hashed form and its canonical decoder.
- ``node_policies(policies) -> (NodePolicies, problems)``: node policy resolution.
- ``queue_policies(policies) -> (queue, priority, problems)``: a graph's run queue defaults.
- ``runtime_diagnostics(runtime) -> list[Diagnostic]``: the lowering self-checks.
- ``CompileResult``, ``RuntimeGraph``, ``RuntimeChannel``, ``RuntimeNode``, ``RuntimeEdge``,
  ``RuntimeOutput``, ``Lowering``, ``ChannelKind``, ``ChannelType``.

Layout
------
This module runs the pipeline (ingest, materialise, hash) and is the public path of
every name above; the stages live beside it, one concern each: the runtime graph
records in :mod:`docket.graph._runtime`, policy resolution in
:mod:`docket.graph._policies`, validation in :mod:`docket.graph._validate` (its graph
walks in :mod:`docket.graph._algorithms`), lowering and its self-checks in
:mod:`docket.graph._lower`.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import Final

import attrs

from docket.graph._lower import _lower, runtime_diagnostics
from docket.graph._policies import _positive_int, node_policies, queue_policies
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
from docket.graph._validate import _Contract, _contracts, _Validator
from docket.graph.model import (
    Diagnostic,
    DiagnosticCode,
    Graph,
    GraphError,
    GraphErrorCode,
    Severity,
)
from docket.graph.nodes import NodeRegistry
from docket.graph.schema import NO_DEFAULT
from docket.graph.wire import GraphLoadError, from_dict, to_dict
from docket.values import JSONDict, NonDurableValue, canonical_json, coerce_durable
from docket.values import content_hash as _content_hash

__all__ = [
    "EFFECTIVE_FORMAT",
    "ChannelKind",
    "ChannelType",
    "CompileResult",
    "Lowering",
    "RuntimeChannel",
    "RuntimeEdge",
    "RuntimeGraph",
    "RuntimeNode",
    "RuntimeOutput",
    "compile_effective_document",
    "compile_graph",
    "effective_document",
    "graph_from_effective_document",
    "node_policies",
    "queue_policies",
    "runtime_diagnostics",
    "verify",
]

#: Version of the effective-document envelope ``{"docket": 1, "kind": "graph", "graph": ...}``.
EFFECTIVE_FORMAT: Final = 1

E = Severity.ERROR
W = Severity.WARNING
C = DiagnosticCode


@attrs.frozen
class CompileResult:
    """``ok`` when no diagnostic is an error. ``effective``, ``graph_hash`` and ``runtime``
    are set only when ``ok``."""

    ok: bool
    diagnostics: tuple[Diagnostic, ...]
    effective: Graph | None = None
    graph_hash: str | None = None
    runtime: RuntimeGraph | None = None

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is E)

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity is W)


# -- entry points -------------------------------------------------------------------------------


def compile_graph(
    graph: Graph, registry: NodeRegistry, *, max_supersteps: int | None = None
) -> CompileResult:
    """Compile an authored graph against ``registry``.

    ``max_supersteps`` is the host ceiling: the runtime limit is the graph policy capped
    by it, or it alone when the graph sets none. It is not part of the hash.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"compile_graph expects a Graph, got {type(graph).__name__}")
    return _compile(graph, registry, max_supersteps, materialise=True)


def compile_effective_document(
    doc: Mapping[str, object], registry: NodeRegistry, *, max_supersteps: int | None = None
) -> CompileResult:
    """Recompile a stored effective document (defaults are *not* materialised again, so
    the hash is the document's own). The document must be canonical."""
    _require_options(registry, max_supersteps)
    try:
        graph = graph_from_effective_document(doc)
    except GraphLoadError as exc:
        return CompileResult(False, exc.diagnostics)
    return _compile(graph, registry, max_supersteps, materialise=False)


def verify(graph: Graph, registry: NodeRegistry, *, max_supersteps: int | None = None) -> Graph:
    """``graph`` with ``diagnostics`` set to what ``compile_graph`` reports."""
    result = compile_graph(graph, registry, max_supersteps=max_supersteps)
    return attrs.evolve(graph, diagnostics=result.diagnostics)


def effective_document(graph: Graph) -> JSONDict:
    """The durable form of ``graph`` as stored and hashed: an envelope around its wire
    document. Pass the ``effective`` graph of a ``CompileResult`` to get the published
    bytes (``content_hash`` of this value is the graph hash)."""
    return {"docket": EFFECTIVE_FORMAT, "kind": "graph", "graph": to_dict(graph)}


def graph_from_effective_document(doc: Mapping[str, object]) -> Graph:
    """Decode an effective document; raise ``GraphLoadError`` unless it is exactly the
    canonical encoding of the graph it holds (envelope included)."""
    if not isinstance(doc, Mapping) or set(doc) != {"docket", "kind", "graph"}:
        raise _load_error("an effective document is {docket, kind, graph}")
    if doc["docket"] != EFFECTIVE_FORMAT or type(doc["docket"]) is not int:
        raise _load_error(f"unsupported effective document format {reprlib.repr(doc['docket'])}")
    if doc["kind"] != "graph":
        raise _load_error(f"expected a graph document, got kind {reprlib.repr(doc['kind'])}")
    try:
        graph = from_dict(doc["graph"])
    except GraphLoadError as exc:
        located = [attrs.evolve(d, path=("graph", *d.path)) for d in exc.diagnostics]
        raise GraphLoadError(located) from None
    try:
        canonical = canonical_json(effective_document(graph)) == canonical_json(dict(doc))
    except (GraphError, NonDurableValue):
        canonical = False
    if not canonical:
        raise GraphLoadError(
            [
                Diagnostic(
                    C.NON_CANONICAL_DOCUMENT,
                    E,
                    ("graph",),
                    "the document is not in canonical form (re-encoding it gives other bytes)",
                )
            ]
        )
    return graph


def _load_error(message: str) -> GraphLoadError:
    return GraphLoadError([Diagnostic(C.INVALID_DOCUMENT, E, (), message)])


def _require_options(registry: object, max_supersteps: object) -> None:
    if not isinstance(registry, NodeRegistry):
        raise TypeError(f"registry must be a NodeRegistry, got {type(registry).__name__}")
    if max_supersteps is not None and not _positive_int(max_supersteps):
        raise ValueError(f"max_supersteps must be a positive integer, got {max_supersteps!r}")


def _compile(
    graph: Graph, registry: NodeRegistry, max_supersteps: int | None, *, materialise: bool
) -> CompileResult:
    _require_options(registry, max_supersteps)
    ingested = _ingest(graph)
    if not isinstance(ingested, Graph):
        return CompileResult(False, tuple(ingested))
    contracts = _contracts(ingested, registry)
    effective = _materialise(ingested, contracts) if materialise else ingested
    diagnostics = _Validator(effective, contracts, max_supersteps).run()
    if any(d.severity is E for d in diagnostics):
        return CompileResult(False, tuple(diagnostics))
    graph_hash = _content_hash(effective_document(effective))
    runtime = _lower(effective, graph_hash, registry, max_supersteps)
    diagnostics += runtime_diagnostics(runtime)
    if any(d.severity is E for d in diagnostics):
        return CompileResult(False, tuple(diagnostics))
    return CompileResult(True, tuple(diagnostics), effective, graph_hash, runtime)


# -- ingest and materialisation ---------------------------------------------------------------

_INGEST_CODES: Final = {
    GraphErrorCode.NON_DURABLE_VALUE: C.NON_DURABLE_GRAPH_VALUE,
    GraphErrorCode.INVALID_SCHEMA: C.INVALID_SCHEMA,
    GraphErrorCode.INVALID_REDUCER: C.INVALID_REDUCER,
    GraphErrorCode.INVALID_GUARD: C.INVALID_GUARD,
    GraphErrorCode.INVALID_IMPLEMENTATION: C.UNKNOWN_IMPLEMENTATION,
}


def _ingest(graph: Graph) -> Graph | list[Diagnostic]:
    """Canonicalise through the wire form; on failure, the diagnostics that stop compiling."""
    try:
        return from_dict(to_dict(graph), strict=False)
    except GraphLoadError as exc:
        return list(exc.diagnostics)
    except GraphError as exc:
        code = _INGEST_CODES.get(exc.code)
        if code is None:
            where = exc.path[0] if exc.path else None
            code = (
                C.INVALID_FIELD
                if where in ("inputs", "fields")
                else C.INVALID_RECORD
                if where in ("outputs", "nodes", "edges")
                else C.INVALID_DOCUMENT
            )
        return [Diagnostic(code, E, exc.path, exc.message, exc.details)]


def _materialise(graph: Graph, contracts: Mapping[str, _Contract]) -> Graph:
    """Fill in the top-level config defaults of each node's config schema."""
    nodes = {}
    for node_id, node in graph.nodes.items():
        contract = contracts.get(node.implementation or "")
        schema = None if contract is None else contract.schema
        config = dict(node.config)
        if schema is not None:
            for key, child in schema.fields.items():
                if key not in config and child.default is not NO_DEFAULT:
                    config[key] = coerce_durable(child.default)
        nodes[node_id] = attrs.evolve(node, config=config)
    return attrs.evolve(graph, nodes=nodes)
