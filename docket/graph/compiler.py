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
- ``runtime_diagnostics(runtime) -> list[Diagnostic]``: the lowering self-checks.
- ``CompileResult``, ``RuntimeGraph``, ``RuntimeChannel``, ``RuntimeNode``, ``RuntimeEdge``,
  ``RuntimeOutput``, ``Lowering``, ``ChannelKind``, ``ChannelType``.
"""

from __future__ import annotations

import reprlib
from collections import Counter
from collections.abc import Iterable, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final, cast

import attrs

from docket.graph.children import (
    CHILD_IMPLEMENTATION,
    ChildSpec,
    child_definition,
    child_problems,
    parse_child,
)
from docket.graph.guards import Guard, GuardProblemCode, guard_problems, guard_strings
from docket.graph.maps import MapSpec, map_problems, parse_map
from docket.graph.model import (
    FINISH,
    START,
    Diagnostic,
    DiagnosticCode,
    Edge,
    Field,
    FieldKind,
    Graph,
    GraphError,
    GraphErrorCode,
    Path,
    Severity,
    id_problem,
)
from docket.graph.nodes import NodeDefinition, NodePolicies, NodeRegistry, RetryPolicy
from docket.graph.reducers import (
    FieldRule,
    R,
    Reducer,
    effective_default,
    is_ambiguous_list_write,
    reducer_problems,
    reducer_schema_mismatch,
)
from docket.graph.schema import (
    NO_DEFAULT,
    Schema,
    SchemaType,
    schema_problems,
    strict_key,
    validate,
)
from docket.graph.wire import SUPPORTED_SCHEMA_VERSION, GraphLoadError, from_dict, to_dict
from docket.values import JSONDict, JSONValue, NonDurableValue, canonical_json, coerce_durable
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
    "runtime_diagnostics",
    "verify",
]

#: Version of the effective-document envelope ``{"docket": 1, "kind": "graph", "graph": ...}``.
EFFECTIVE_FORMAT: Final = 1
_MAX_SUPERSTEPS: Final = "max_supersteps"

E = Severity.ERROR
W = Severity.WARNING
C = DiagnosticCode


# -- runtime graph ------------------------------------------------------------------------------


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


@attrs.frozen
class _Contract:
    """A registered implementation as one compile sees it (looked up once per compile)."""

    definition: NodeDefinition
    schema: Schema | None  # the usable config schema; None when unchecked or unusable
    problems: tuple[str, ...]  # why the declared config schema is unusable


def _contracts(graph: Graph, registry: NodeRegistry) -> dict[str, _Contract]:
    out: dict[str, _Contract] = {}
    for name in sorted({n.implementation for n in graph.nodes.values() if n.implementation}):
        definition = registry.get(name)
        if definition is None:
            continue
        declared = definition.config_schema
        problems = [] if declared is None else schema_problems(declared, "config_schema")
        if declared is not None and not problems and declared.type not in _CONFIG_TYPES:
            problems = ["a config schema must be an object or a map schema"]
        out[name] = _Contract(definition, None if problems else declared, tuple(problems))
    return out


_CONFIG_TYPES: Final = (SchemaType.OBJECT, SchemaType.MAP)


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


# -- policies -------------------------------------------------------------------------------------


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_RETRY_KEYS: Final = frozenset({"max_attempts", "backoff_ms"})


def node_policies(policies: Mapping[str, JSONValue]) -> tuple[NodePolicies, list[tuple[str, str]]]:
    """Resolve a node's policies; every problem is a ``(policy key, message)`` pair.

    ``timeout_ms``: a positive integer or absent/``None`` (the host default applies).
    ``retry``: absent/``None`` or ``{"max_attempts": int >= 1, "backoff_ms": int >= 0}``
    (defaults 1 and 0). ``on_error`` is reserved. Other keys are ignored.
    """
    problems: list[tuple[str, str]] = []
    if "on_error" in policies:
        problems.append(("on_error", "the on_error policy is reserved and not supported"))
    raw_timeout, timeout = policies.get("timeout_ms"), None
    if _positive_int(raw_timeout):
        timeout = cast(int, raw_timeout)
    elif raw_timeout is not None:
        problems.append(
            ("timeout_ms", f"timeout_ms must be a positive integer, got {raw_timeout!r}")
        )
    retry, raw = RetryPolicy(), policies.get("retry")
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - _RETRY_KEYS)
        if unknown:
            problems.append(("retry", f"retry policy has unknown keys {unknown}"))
        values: dict[str, int] = {}
        for key, low in (("max_attempts", 1), ("backoff_ms", 0)):
            value = raw.get(key, low)
            if not _int(value):
                problems.append(("retry", f"retry {key} must be an integer, got {value!r}"))
            elif cast(int, value) < low:
                problems.append(("retry", f"retry {key} must be at least {low}, got {value!r}"))
            else:
                values[key] = cast(int, value)
        retry = RetryPolicy(**values)
    elif raw is not None:
        problems.append(("retry", f"retry must be a map of max_attempts/backoff_ms, got {raw!r}"))
    return NodePolicies(timeout, retry), problems


def _resolve_limit(policy: JSONValue, host: int | None) -> int | None:
    own = cast(int, policy) if _positive_int(policy) else None
    if own is None:
        return host
    return own if host is None else min(own, host)


# -- validation ------------------------------------------------------------------------------------


def _sorted(mapping: Mapping[str, object]) -> list[str]:
    return sorted(mapping)


class _Validator:
    """Runs every rule over a canonical (ingested) graph; collects diagnostics in order."""

    def __init__(
        self, graph: Graph, contracts: Mapping[str, _Contract], host_limit: int | None
    ) -> None:
        self.g = graph
        self.contracts = contracts
        self.host_limit = host_limit
        self.out: list[Diagnostic] = []
        self.known_fields = frozenset(graph.inputs) | frozenset(graph.fields)
        self.reachable: set[str] = set()

    def add(
        self,
        code: DiagnosticCode,
        path: Path,
        message: str,
        severity: Severity = E,
        **details: JSONValue,
    ) -> None:
        self.out.append(Diagnostic(code, severity, path, message, details))

    def run(self) -> list[Diagnostic]:
        for check in (
            self.document,
            self.fields,
            self.outputs,
            self.nodes,
            self.edges,
            self.branches,
            self.guards,
            self.topology,
            self.cycles,
            self.exits,
            self.references,
        ):
            check()
        return self.out

    # D -----------------------------------------------------------------------------------------

    def document(self) -> None:
        g = self.g
        if g.schema_version != SUPPORTED_SCHEMA_VERSION:
            self.add(
                C.UNSUPPORTED_SCHEMA_VERSION,
                ("schema_version",),
                f"schema_version {g.schema_version} is not supported "
                f"(expected {SUPPORTED_SCHEMA_VERSION})",
            )
        self.add_id_problems(g.id, ("id",), "graph")
        for coll in ("inputs", "fields", "outputs", "nodes", "edges"):
            for record_id in _sorted(getattr(g, coll)):
                self.add_id_problems(record_id, (coll, record_id), coll[:-1])
        for field_id in sorted(set(g.inputs) & set(g.fields)):
            self.add(
                C.DUPLICATE_STATE_ID,
                ("fields", field_id),
                f"{field_id!r} is declared both as an input and as a state field",
            )
        limit = g.policies.get(_MAX_SUPERSTEPS)
        path = ("policies", _MAX_SUPERSTEPS)
        if limit is not None and not _positive_int(limit):
            self.add(
                C.INVALID_POLICY, path, f"max_supersteps must be a positive integer, got {limit!r}"
            )
        elif (
            limit is not None and self.host_limit is not None and cast(int, limit) > self.host_limit
        ):
            self.add(
                C.MAX_SUPERSTEPS_CAPPED,
                path,
                f"max_supersteps {limit} exceeds the host ceiling; runs stop at {self.host_limit}",
                W,
                limit=self.host_limit,
            )

    def add_id_problems(self, value: str, path: Path, label: str) -> None:
        problem = id_problem(value)
        if problem is C.RESERVED_ID:
            self.add(problem, path, f"{label} ID {value!r} is reserved")
        elif problem is not None:
            self.add(problem, path, f"{label} ID {value!r} is not a valid ID")

    # F -----------------------------------------------------------------------------------------

    def fields(self) -> None:
        for coll, kind in (("inputs", FieldKind.INPUT), ("fields", FieldKind.STATE)):
            records: Mapping[str, Field] = getattr(self.g, coll)
            for field_id in _sorted(records):
                self.field(records[field_id], (coll, field_id), kind)

    def field(self, field: Field, path: Path, kind: FieldKind) -> None:
        if field.kind is not kind:
            self.add(
                C.INVALID_FIELD,
                path,
                f"a {field.kind.value} field cannot be declared under {path[0]}",
            )
        schema_ok = self.schema(field.schema, (*path, "schema"), required=True)
        reducer = field.reducer
        if kind is FieldKind.STATE and reducer is not None:
            at = (*path, "reducer")
            problems = reducer_problems(reducer)
            if problems:
                self.add(C.INVALID_REDUCER, at, "; ".join(problems), reasons=list(problems))
            elif schema_ok and field.schema is not None:
                mismatch = reducer_schema_mismatch(reducer, field.schema)
                if mismatch:
                    self.add(C.REDUCER_SCHEMA_MISMATCH, at, mismatch)
                elif is_ambiguous_list_write(reducer, field.schema):
                    self.add(
                        C.AMBIGUOUS_LIST_WRITE,
                        at,
                        f"{reducer.type} on a list of lists: a list write is taken as "
                        "several items, never as one item",
                        W,
                    )
        if schema_ok and field.schema is not None and field.default is not None:
            reasons = validate(field.schema, field.default, "default")
            if reasons:
                self.add(
                    C.INVALID_FIELD_DEFAULT,
                    (*path, "default"),
                    "; ".join(reasons),
                    reasons=list(reasons),
                )

    def schema(self, schema: Schema | None, path: Path, *, required: bool) -> bool:
        """Report a missing (when ``required``) or malformed schema; True when usable."""
        if schema is None:
            if required:
                self.add(C.MISSING_FIELD_SCHEMA, path, "a field needs a schema")
            return False
        problems = schema_problems(schema)
        if problems:
            self.add(C.INVALID_SCHEMA, path, "; ".join(problems), reasons=list(problems))
            return False
        return True

    # O -----------------------------------------------------------------------------------------

    def outputs(self) -> None:
        for output_id in _sorted(self.g.outputs):
            output = self.g.outputs[output_id]
            path = ("outputs", output_id)
            source = self.g.field(output.source)
            if source is None:
                self.add(
                    C.UNKNOWN_OUTPUT_SOURCE,
                    (*path, "source"),
                    f"output {output_id!r} projects {output.source!r}, which is neither an "
                    "input nor a state field",
                )
            if not self.schema(output.schema, (*path, "schema"), required=False):
                continue
            own = cast(Schema, output.schema)
            theirs = None if source is None else source.schema
            if theirs is not None and not schema_problems(theirs) and not _compatible(theirs, own):
                self.add(
                    C.INCOMPATIBLE_OUTPUT_SCHEMA,
                    (*path, "schema"),
                    f"output {output_id!r} schema ({own.type}) cannot hold every value "
                    f"of {output.source!r} ({theirs.type})",
                )

    # N -----------------------------------------------------------------------------------------

    def nodes(self) -> None:
        for node_id in _sorted(self.g.nodes):
            node = self.g.nodes[node_id]
            path = ("nodes", node_id)
            at = (*path, "implementation")
            contract = None
            if node.child:
                self.child(node_id, node.child, node.map, node.implementation, node.config)
            elif node.implementation is None:
                self.add(
                    C.MISSING_NODE_IMPLEMENTATION, at, f"node {node_id!r} has no implementation"
                )
            else:
                contract = self.contracts.get(node.implementation)
                if contract is None:
                    self.add(
                        C.UNKNOWN_IMPLEMENTATION,
                        at,
                        f"node {node_id!r} names implementation {node.implementation!r}, "
                        "which the node registry does not have",
                        implementation=node.implementation,
                    )
            if contract is not None and contract.problems:
                self.add(
                    C.INVALID_NODE_CONFIG_SCHEMA,
                    at,
                    f"implementation {contract.definition.name!r} has an unusable config "
                    "schema: " + "; ".join(contract.problems),
                    reasons=list(contract.problems),
                )
            elif contract is not None and contract.schema is not None:
                reasons = validate(contract.schema, node.config, "config")
                if reasons:
                    self.add(
                        C.INVALID_NODE_CONFIG,
                        (*path, "config"),
                        "; ".join(reasons),
                        reasons=list(reasons),
                    )
            for key, message in node_policies(node.policies)[1]:
                self.add(C.INVALID_POLICY, (*path, "policies", key), f"node {node_id!r}: {message}")
            if node.map:
                for key, message in map_problems(node.map, self.list_typed()):
                    self.add(C.INVALID_MAP, (*path, "map", key), f"node {node_id!r}: {message}")

    def child(
        self,
        node_id: str,
        raw: JSONDict,
        mapping: JSONDict,
        implementation: str | None,
        config: JSONDict,
    ) -> None:
        """A child node runs a graph, not an implementation (docket.graph.children)."""
        path = ("nodes", node_id)
        if implementation is not None:
            self.add(
                C.INVALID_CHILD,
                (*path, "implementation"),
                f"node {node_id!r} runs a child graph, so it takes no implementation",
            )
        if config:
            self.add(
                C.INVALID_CHILD,
                (*path, "config"),
                f"node {node_id!r} runs a child graph, so it takes no config",
            )
        readable = dict.fromkeys((*self.g.inputs, *self.g.fields), True)
        item = mapping.get("as")
        if isinstance(item, str):
            readable[item] = True
        state = frozenset(self.g.fields)
        for key, message in child_problems(raw, readable, state):
            self.add(C.INVALID_CHILD, (*path, "child", key), f"node {node_id!r}: {message}")

    def list_typed(self) -> dict[str, bool]:
        """Each input and field ID -> whether its schema is a list (a map's ``over``)."""
        out: dict[str, bool] = {}
        for record in (*self.g.inputs.values(), *self.g.fields.values()):
            schema = record.schema
            out[record.id] = isinstance(schema, Schema) and schema.type is SchemaType.LIST
        return out

    # E -----------------------------------------------------------------------------------------

    def edges(self) -> None:
        for edge_id in _sorted(self.g.edges):
            edge = self.g.edges[edge_id]
            self.edge_source(edge, ("edges", edge_id, "from"))
            at = ("edges", edge_id, "to")
            if edge.target == START:
                self.add(C.INVALID_START_ENDPOINT, at, f"edge {edge_id!r} cannot lead to {START}")
            elif edge.target != FINISH and edge.target not in self.g.nodes:
                self.add(
                    C.UNKNOWN_EDGE_TARGET,
                    at,
                    f"edge {edge_id!r} leads to unknown node {edge.target!r}",
                )

    def edge_source(self, edge: Edge, at: Path) -> None:
        if isinstance(edge.source, str):
            if edge.source == FINISH:
                self.add(
                    C.INVALID_FINISH_ENDPOINT, at, f"edge {edge.id!r} cannot start at {FINISH}"
                )
            elif edge.source != START and edge.source not in self.g.nodes:
                self.add(
                    C.UNKNOWN_EDGE_SOURCE,
                    at,
                    f"edge {edge.id!r} starts at unknown node {edge.source!r}",
                )
            return
        if not edge.source:
            self.add(C.EMPTY_EDGE_SOURCES, at, f"barrier edge {edge.id!r} lists no sources")
            return
        if FINISH in edge.source:
            self.add(C.INVALID_FINISH_ENDPOINT, at, f"barrier edge {edge.id!r} lists {FINISH}")
        if START in edge.source:
            self.add(
                C.INVALID_START_ENDPOINT,
                at,
                f"barrier edge {edge.id!r} lists {START}; a barrier joins nodes only",
            )
        repeated = sorted({s for s in edge.source if edge.source.count(s) > 1})
        if repeated:
            self.add(
                C.DUPLICATE_EDGE_SOURCE,
                at,
                f"barrier edge {edge.id!r} lists {repeated} more than once",
                sources=cast(JSONValue, repeated),
            )
        unknown = sorted(
            {s for s in edge.source if s not in (START, FINISH) and s not in self.g.nodes}
        )
        if unknown:
            self.add(
                C.UNKNOWN_EDGE_SOURCE,
                at,
                f"barrier edge {edge.id!r} lists unknown nodes {unknown}",
                sources=cast(JSONValue, unknown),
            )

    # B -----------------------------------------------------------------------------------------

    def branches(self) -> None:
        for node_id in _sorted(self.g.nodes):
            groups = self.g.nodes[node_id].branches
            seen: dict[str, int] = {}
            for group in sorted(groups):
                at = ("nodes", node_id, "branches", group)
                for edge_id in groups[group]:
                    seen[edge_id] = seen.get(edge_id, 0) + 1
                    edge = self.g.edges.get(edge_id)
                    if edge is None:
                        self.add(
                            C.UNKNOWN_BRANCH_EDGE,
                            at,
                            f"branch group {group!r} of {node_id!r} names unknown edge {edge_id!r}",
                            edge_id=edge_id,
                        )
                    elif edge.source != node_id:
                        self.add(
                            C.BRANCH_EDGE_SOURCE_MISMATCH,
                            at,
                            f"edge {edge_id!r} in branch group {group!r} does not leave "
                            f"{node_id!r} alone",
                            edge_id=edge_id,
                        )
                    elif edge.guard is None:
                        self.add(
                            C.UNGUARDED_BRANCH_EDGE,
                            at,
                            f"edge {edge_id!r} in branch group {group!r} has no guard, so it "
                            "always fires",
                            W,
                            edge_id=edge_id,
                        )
            for edge_id in sorted(e for e, n in seen.items() if n > 1):
                self.add(
                    C.DUPLICATE_BRANCH_EDGE,
                    ("nodes", node_id, "branches"),
                    f"edge {edge_id!r} appears more than once in the branch groups of {node_id!r}",
                    edge_id=edge_id,
                )

    # G -----------------------------------------------------------------------------------------

    def guards(self) -> None:
        for edge_id in _sorted(self.g.edges):
            guard = self.g.edges[edge_id].guard
            if guard is None:
                continue
            for problem in guard_problems(guard, self.known_fields):
                code = {
                    GuardProblemCode.INVALID_GUARD: C.INVALID_GUARD,
                    GuardProblemCode.UNKNOWN_GUARD_FIELD: C.UNKNOWN_GUARD_FIELD,
                    GuardProblemCode.INVALID_GUARD_PATH: C.INVALID_GUARD_PATH,
                }[problem.code]
                self.add(code, ("edges", edge_id, "guard"), f"edge {edge_id!r}: {problem.message}")

    # T -----------------------------------------------------------------------------------------

    def topology(self) -> None:
        g = self.g
        if (g.nodes or g.edges) and not any(e.source == START for e in g.edges.values()):
            self.add(C.NO_ENTRYPOINT, ("edges",), f"no edge leaves {START}, so nothing ever runs")
        self.reachable = _reachable(g)
        for node_id in _sorted(g.nodes):
            if node_id not in self.reachable:
                self.add(
                    C.UNREACHABLE_NODE,
                    ("nodes", node_id),
                    f"node {node_id!r} can never be activated from {START}",
                )

    # C -----------------------------------------------------------------------------------------

    def cycles(self) -> None:
        policy = self.g.policies.get(_MAX_SUPERSTEPS)
        if policy is not None and not _positive_int(policy):
            return  # the invalid policy is already reported
        for component in _cycles(self.g):
            members = cast(JSONValue, component)
            if policy is None:
                self.add(
                    C.UNBOUNDED_CYCLE,
                    ("policies", _MAX_SUPERSTEPS),
                    f"nodes {component} form a cycle and the graph sets no max_supersteps "
                    "(runs are bounded only by the host ceiling)",
                    W,
                    nodes=members,
                )
            elif not any(
                e.guard is not None
                and e.target in component
                and any(s in component for s in e.sources)
                for e in self.g.edges.values()
            ):
                self.add(
                    C.UNGUARDED_CYCLE,
                    ("nodes", component[0]),
                    f"nodes {component} form a cycle with no guarded edge; it only stops at "
                    f"max_supersteps ({policy})",
                    W,
                    nodes=members,
                )

    # X -----------------------------------------------------------------------------------------

    def exits(self) -> None:
        g = self.g
        if not g.nodes:
            return
        if not any(e.target == FINISH for e in g.edges.values()):
            self.add(C.NO_TERMINAL_EDGE, ("edges",), f"no edge leads to {FINISH}", W)
            return
        finishing = _reaches_finish(g)
        for node_id in _sorted(g.nodes):
            if node_id in self.reachable and node_id not in finishing:
                self.add(
                    C.DEAD_END_NODE,
                    ("nodes", node_id),
                    f"node {node_id!r} cannot reach {FINISH}",
                    W,
                )

    # R -----------------------------------------------------------------------------------------

    def references(self) -> None:
        g = self.g
        named: set[str] = {o.source for o in g.outputs.values()}
        for edge in g.edges.values():
            if edge.guard is not None:
                named |= guard_strings(edge.guard)
        for node in g.nodes.values():
            named |= _strings(node.config) | _strings(node.map.get("over"))
            named |= _strings(node.child.get("input"))
            written = node.child.get("output")
            named |= set(written) if isinstance(written, dict) else set()
        for field_id in _sorted(g.fields):
            if field_id not in named:
                self.add(
                    C.ORPHANED_FIELD,
                    ("fields", field_id),
                    f"state field {field_id!r} is not named by any output, guard or node config",
                    W,
                )


def _strings(value: JSONValue) -> set[str]:
    """Every string among the values of a JSON value (keys are not collected)."""
    if isinstance(value, str):
        return {value}
    items: Iterable[JSONValue] = (
        value if isinstance(value, list) else value.values() if isinstance(value, dict) else ()
    )
    out: set[str] = set()
    for item in items:
        out |= _strings(item)
    return out


def _compatible(source: Schema, output: Schema) -> bool:
    """Can ``output`` hold every value ``source`` admits? (object fields are not compared)"""
    if source.type is SchemaType.ENUM and output.type is SchemaType.ENUM:
        allowed = {strict_key(v) for v in output.values}
        return all(strict_key(v) in allowed for v in source.values)
    if source.type is SchemaType.LIST and output.type is SchemaType.LIST:
        if output.item is None:
            return True
        return source.item is not None and _compatible(source.item, output.item)
    if source.type is SchemaType.INTEGER and output.type is SchemaType.FLOAT:
        return True  # a float schema accepts integers
    return source.type == output.type


# -- graph algorithms (iterative: graphs may have thousands of nodes) --------------------------


def _reachable(g: Graph) -> set[str]:
    """Nodes activatable from ``$start``: a barrier needs all of its sources."""
    waiting: dict[str, int] = {}
    by_source: dict[str, list[Edge]] = {}
    for edge in g.edges.values():
        sources = set(edge.sources)
        if not sources:
            continue
        waiting[edge.id] = len(sources)
        for source in sources:
            by_source.setdefault(source, []).append(edge)
    reached: set[str] = set()
    queue = [START]
    while queue:
        current = queue.pop()
        for edge in by_source.get(current, ()):
            waiting[edge.id] -= 1
            target = edge.target
            if waiting[edge.id] == 0 and target in g.nodes and target not in reached:
                reached.add(target)
                queue.append(target)
    return reached


def _reaches_finish(g: Graph) -> set[str]:
    """Nodes from which some path leads to a ``$finish`` edge (barrier legs count)."""
    predecessors: dict[str, set[str]] = {}
    found: set[str] = set()
    for edge in g.edges.values():
        for source in edge.sources:
            if source in g.nodes:
                if edge.target == FINISH:
                    found.add(source)
                else:
                    predecessors.setdefault(edge.target, set()).add(source)
    queue = list(found)
    while queue:
        for source in predecessors.get(queue.pop(), ()):
            if source not in found:
                found.add(source)
                queue.append(source)
    return found


def _cycles(g: Graph) -> list[list[str]]:
    """Cyclic strongly connected components (several nodes, or one with a self-loop), each
    sorted, in order of their first member (Tarjan's algorithm, without recursion)."""
    successors: dict[str, set[str]] = {n: set() for n in g.nodes}
    for edge in g.edges.values():
        if edge.target in g.nodes:
            for source in edge.sources:
                if source in g.nodes:
                    successors[source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(successors):
        if root in index:
            continue
        work = [(root, iter(sorted(successors[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(successors[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1 or node in successors[node]:
                    components.append(sorted(members))
    return sorted(components)


# -- lowering ------------------------------------------------------------------------------------


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
