"""The authored graph: frozen records and a functional editing API.

A :class:`Graph` is a plain, immutable value that may be incomplete or invalid (a draft).
Every editing method returns a *new* graph with ``diagnostics`` cleared; it only checks
that the edit can be represented (well-formed IDs, attribute types, durable content).
Whether the graph can run is the compiler's business (:mod:`docket.graph.compiler`).

Public API
----------
- ``START`` / ``FINISH``: the two reserved edge endpoints (``"$start"``, ``"$finish"``).
- ``Field``, ``Output``, ``Node``, ``Edge``, ``Graph``: the records; ``FieldKind``.
- ``Diagnostic``, ``Severity``, ``DiagnosticCode``: what the loader and compiler report.
- ``GraphError(code, message, path=(), details={})`` with ``GraphErrorCode``: editing and
  serialisation mistakes.
- ``new_graph(graph_id, ...)``: a validated empty graph.
- ``Graph.put_input / put_field / update_field / delete_field / put_output / update_output /
  delete_output / put_node / update_node / delete_node / put_edge / update_edge / delete_edge /
  set_policy / set_metadata``: the editing API.
- ``id_problem(value)``, ``implementation_name_problem(value)``: the two name rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Final, TypeVar, cast

import attrs

from docket.graph.guards import Guard
from docket.graph.reducers import Reducer, normalize_reducer
from docket.graph.schema import Schema, normalize_schema
from docket.values import JSONDict, JSONValue, NonDurableValue, coerce_durable

__all__ = [
    "FINISH",
    "START",
    "Diagnostic",
    "DiagnosticCode",
    "Edge",
    "Field",
    "FieldKind",
    "Graph",
    "GraphError",
    "GraphErrorCode",
    "Node",
    "Output",
    "Path",
    "Severity",
    "id_problem",
    "implementation_name_problem",
    "new_graph",
    "pointer",
]

START: Final = "$start"
FINISH: Final = "$finish"
RESERVED_IDS: Final = frozenset({START, FINISH})

_PUBLIC_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_IMPLEMENTATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")

#: A location inside a graph document: collection names, record IDs, keys, list indices.
Path = tuple[str | int, ...]


# -- diagnostics and errors ------------------------------------------------------------------


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


class DiagnosticCode(StrEnum):
    """Every code the loader and the compiler emit. The values are stable identifiers."""

    # loader (wire format)
    INVALID_JSON = "invalid_json"
    INVALID_DOCUMENT = "invalid_document"
    UNKNOWN_KEY = "unknown_key"
    MISSING_KEY = "missing_key"
    WRONG_TYPE = "wrong_type"
    INVALID_VALUE = "invalid_value"
    NON_DURABLE_VALUE = "non_durable_value"
    NON_CANONICAL_DOCUMENT = "non_canonical_document"
    # document (D) and ingest
    NON_DURABLE_GRAPH_VALUE = "non_durable_graph_value"
    UNSUPPORTED_SCHEMA_VERSION = "unsupported_schema_version"
    INVALID_PUBLIC_ID = "invalid_public_id"
    RESERVED_ID = "reserved_id"
    DUPLICATE_STATE_ID = "duplicate_state_id"
    INVALID_POLICY = "invalid_policy"
    MAX_SUPERSTEPS_CAPPED = "max_supersteps_capped"
    # fields (F)
    INVALID_FIELD = "invalid_field"
    MISSING_FIELD_SCHEMA = "missing_field_schema"
    INVALID_SCHEMA = "invalid_schema"
    INVALID_REDUCER = "invalid_reducer"
    REDUCER_SCHEMA_MISMATCH = "reducer_schema_mismatch"
    AMBIGUOUS_LIST_WRITE = "ambiguous_list_write"
    INVALID_FIELD_DEFAULT = "invalid_field_default"
    # outputs (O), nodes (N), edges (E)
    INVALID_RECORD = "invalid_record"
    UNKNOWN_OUTPUT_SOURCE = "unknown_output_source"
    INCOMPATIBLE_OUTPUT_SCHEMA = "incompatible_output_schema"
    MISSING_NODE_IMPLEMENTATION = "missing_node_implementation"
    UNKNOWN_IMPLEMENTATION = "unknown_implementation"
    INVALID_NODE_CONFIG_SCHEMA = "invalid_node_config_schema"
    INVALID_NODE_CONFIG = "invalid_node_config"
    INVALID_MAP = "invalid_map"
    INVALID_CHILD = "invalid_child"
    INVALID_FINISH_ENDPOINT = "invalid_finish_endpoint"
    INVALID_START_ENDPOINT = "invalid_start_endpoint"
    UNKNOWN_EDGE_SOURCE = "unknown_edge_source"
    UNKNOWN_EDGE_TARGET = "unknown_edge_target"
    EMPTY_EDGE_SOURCES = "empty_edge_sources"
    DUPLICATE_EDGE_SOURCE = "duplicate_edge_source"
    # branches (B), guards (G)
    UNKNOWN_BRANCH_EDGE = "unknown_branch_edge"
    BRANCH_EDGE_SOURCE_MISMATCH = "branch_edge_source_mismatch"
    UNGUARDED_BRANCH_EDGE = "unguarded_branch_edge"
    DUPLICATE_BRANCH_EDGE = "duplicate_branch_edge"
    INVALID_GUARD = "invalid_guard"
    UNKNOWN_GUARD_FIELD = "unknown_guard_field"
    INVALID_GUARD_PATH = "invalid_guard_path"
    # topology (T, C, X, R)
    NO_ENTRYPOINT = "no_entrypoint"
    UNREACHABLE_NODE = "unreachable_node"
    UNBOUNDED_CYCLE = "unbounded_cycle"
    UNGUARDED_CYCLE = "unguarded_cycle"
    NO_TERMINAL_EDGE = "no_terminal_edge"
    DEAD_END_NODE = "dead_end_node"
    ORPHANED_FIELD = "orphaned_field"
    # lowering self-checks
    RUNTIME_ID_COLLISION = "runtime_id_collision"
    MISSING_RUNTIME_CHANNEL = "missing_runtime_channel"
    LOWERING_INVARIANT_FAILED = "lowering_invariant_failed"


def pointer(path: Sequence[str | int]) -> str:
    """Render a path as a JSON pointer (RFC 6901 escaping): ``/nodes/writer/config``."""
    return "".join("/" + str(seg).replace("~", "~0").replace("/", "~1") for seg in path)


def _path(value: Sequence[str | int]) -> Path:
    return tuple(value)


def _json_map(value: Mapping[str, JSONValue]) -> JSONDict:
    return dict(value) if isinstance(value, Mapping) else value


@attrs.frozen
class Diagnostic:
    """One finding about a graph document: a stable ``code``, where it is, and why."""

    code: DiagnosticCode
    severity: Severity
    path: Path = attrs.field(converter=_path)
    message: str
    details: JSONDict = attrs.field(factory=dict, converter=_json_map)

    @property
    def pointer(self) -> str:
        return pointer(self.path)

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def to_dict(self) -> JSONDict:
        return {
            "code": self.code.value,
            "severity": self.severity.value,
            "path": pointer(self.path),
            "message": self.message,
            "details": dict(self.details),
        }

    def __str__(self) -> str:
        return (
            f"{self.severity.value} {self.code.value} {pointer(self.path) or '/'}: {self.message}"
        )


class GraphErrorCode(StrEnum):
    INVALID_PUBLIC_ID = "invalid_public_id"
    RESERVED_ID = "reserved_id"
    DUPLICATE_ID = "duplicate_id"
    UNKNOWN_RECORD = "unknown_record"
    INVALID_ATTRS = "invalid_attrs"
    CONFLICTING_FIELD = "conflicting_field"
    INVALID_IMPLEMENTATION = "invalid_implementation"
    INVALID_SCHEMA = "invalid_schema"
    INVALID_REDUCER = "invalid_reducer"
    INVALID_GUARD = "invalid_guard"
    NON_DURABLE_VALUE = "non_durable_value"
    INVALID_DOCUMENT = "invalid_document"
    INVALID_REGISTRY = "invalid_registry"


class GraphError(Exception):
    """An editing, building or serialisation mistake, identified by a stable ``code``."""

    def __init__(
        self,
        code: GraphErrorCode,
        message: str,
        *,
        path: Sequence[str | int] = (),
        details: JSONDict | None = None,
    ) -> None:
        self.code = code
        self.message = message
        self.path: Path = tuple(path)
        self.details: JSONDict = dict(details or {})
        super().__init__(f"{code.value}: {message}")


# -- name rules ------------------------------------------------------------------------------


def id_problem(value: object) -> DiagnosticCode | None:
    """``reserved_id`` / ``invalid_public_id`` when ``value`` is not a usable record ID."""
    if isinstance(value, str) and value in RESERVED_IDS:
        return DiagnosticCode.RESERVED_ID
    if not isinstance(value, str) or _PUBLIC_ID.fullmatch(value) is None:
        return DiagnosticCode.INVALID_PUBLIC_ID
    return None


def implementation_name_problem(value: object) -> str | None:
    """Why ``value`` cannot be a registered node implementation name (``None`` if it can)."""
    if not isinstance(value, str):
        return f"an implementation name must be a string, got {type(value).__name__}"
    if _IMPLEMENTATION_NAME.fullmatch(value) is None:
        return (
            f"implementation name {value!r} must start with a letter or digit and contain "
            "only letters, digits, '_', '.', ':' and '-'"
        )
    return None


def _require_id(value: object, label: str) -> str:
    problem = id_problem(value)
    if problem is None:
        return cast(str, value)
    code = GraphErrorCode(problem.value)
    shown = value if isinstance(value, str) else repr(value)
    details: JSONDict = {"label": label, "id": shown}
    if problem is DiagnosticCode.RESERVED_ID:
        raise GraphError(code, f"{label} ID {value!r} is reserved", details=details)
    raise GraphError(
        code,
        f"{label} ID {value!r} must be a string of letters, digits, '_' and '-', "
        "starting with a letter or digit",
        details=details,
    )


# -- records ---------------------------------------------------------------------------------


class FieldKind(StrEnum):
    INPUT = "input"
    STATE = "state"


def _endpoint(value: str | Sequence[str]) -> str | tuple[str, ...]:
    if isinstance(value, list | tuple):
        return tuple(value)
    return cast(str, value)  # a non-endpoint is kept as is for the compiler to report


def _branches(value: Mapping[str, Sequence[str]]) -> Mapping[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        return value  # kept as is for the compiler to report
    return {
        k: tuple(v) if isinstance(v, list | tuple) else cast("tuple[str, ...]", v)
        for k, v in value.items()
    }


def _diagnostics(value: Iterable[Diagnostic]) -> tuple[Diagnostic, ...]:
    return tuple(value)


@attrs.frozen
class Field:
    """An input (read-only run data) or a state field (written by nodes through a reducer).

    ``default=None`` means *no default*; any other value (``False``, ``0``, ``""``) is kept.
    ``required`` only matters for inputs; ``reducer`` only for state fields.
    """

    id: str
    kind: FieldKind = FieldKind.STATE
    schema: Schema | None = None
    reducer: Reducer | None = None
    required: bool = False
    default: JSONValue = None
    label: str | None = None
    description: str | None = None
    metadata: JSONDict = attrs.field(factory=dict, converter=_json_map)


@attrs.frozen
class Output:
    """A read-only projection of one input or state field into the run's output."""

    id: str
    source: str
    schema: Schema | None = None
    label: str | None = None
    description: str | None = None
    metadata: JSONDict = attrs.field(factory=dict, converter=_json_map)


@attrs.frozen
class Node:
    """A unit of work. ``implementation`` is a *registered name*, resolved through the
    application's node registry; a document never names importable code."""

    id: str
    implementation: str | None = None
    config: JSONDict = attrs.field(factory=dict, converter=_json_map)
    policies: JSONDict = attrs.field(factory=dict, converter=_json_map)
    branches: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, converter=_branches)
    label: str | None = None
    description: str | None = None
    metadata: JSONDict = attrs.field(factory=dict, converter=_json_map)
    # ``{"over": field, "as": name, "max_items": n, "max_parallel": k}``: one task per
    # item of the list ``over`` (docs/graphs.md, maps); kept as data, checked by the compiler.
    map: JSONDict = attrs.field(factory=dict, converter=_json_map)
    # ``{"graph": id, "hash": h, "input": {...}, "output": {...}}``: run another graph as a
    # child run instead of an implementation (docs/graphs.md, child runs).
    child: JSONDict = attrs.field(factory=dict, converter=_json_map)


@attrs.frozen
class Edge:
    """A directed edge. ``source`` is ``START``, a node ID, or a tuple of node IDs (a
    barrier: fires once every listed node has completed, even with one element).
    ``target`` is a node ID or ``FINISH``."""

    id: str
    source: str | tuple[str, ...] = attrs.field(converter=_endpoint)
    target: str
    guard: Guard | None = None
    label: str | None = None
    description: str | None = None
    source_handle: str | None = None
    target_handle: str | None = None
    metadata: JSONDict = attrs.field(factory=dict, converter=_json_map)

    @property
    def is_barrier(self) -> bool:
        return isinstance(self.source, tuple)

    @property
    def sources(self) -> tuple[str, ...]:
        """The source endpoints as a tuple, whatever the form."""
        return self.source if isinstance(self.source, tuple) else (self.source,)


R = TypeVar("R", Field, Output, Node, Edge)

_FIELD_ATTRS: Final = frozenset(
    {"kind", "schema", "reducer", "required", "default", "label", "description", "metadata"}
)
_OUTPUT_ATTRS: Final = frozenset({"source", "schema", "label", "description", "metadata"})
_NODE_ATTRS: Final = frozenset(
    {
        "implementation",
        "config",
        "policies",
        "branches",
        "label",
        "description",
        "metadata",
        "map",
        "child",
    }
)
_EDGE_ATTRS: Final = frozenset(
    {
        "source",
        "target",
        "guard",
        "label",
        "description",
        "source_handle",
        "target_handle",
        "metadata",
    }
)


@attrs.frozen
class Graph:
    """An authored graph document.

    Collections map record IDs to records (each record repeats its ID). ``diagnostics``
    holds the findings of the last verification; it is transient: never serialised,
    never hashed and ignored by equality.
    """

    id: str
    name: str | None = None
    description: str | None = None
    schema_version: int = 1
    inputs: Mapping[str, Field] = attrs.field(factory=dict)
    fields: Mapping[str, Field] = attrs.field(factory=dict)
    outputs: Mapping[str, Output] = attrs.field(factory=dict)
    nodes: Mapping[str, Node] = attrs.field(factory=dict)
    edges: Mapping[str, Edge] = attrs.field(factory=dict)
    policies: JSONDict = attrs.field(factory=dict, converter=_json_map)
    metadata: JSONDict = attrs.field(factory=dict, converter=_json_map)
    diagnostics: tuple[Diagnostic, ...] = attrs.field(default=(), eq=False, converter=_diagnostics)

    # -- lookups ---------------------------------------------------------------------------

    def field(self, field_id: str) -> Field | None:
        """The input or state field with this ID, if any."""
        found = self.inputs.get(field_id)
        return found if found is not None else self.fields.get(field_id)

    @property
    def max_supersteps(self) -> JSONValue:
        """The graph policy as written (``None`` when absent)."""
        return self.policies.get("max_supersteps")

    # -- fields ----------------------------------------------------------------------------

    def put_input(
        self,
        field_id: str,
        schema: object = None,
        *,
        required: bool = False,
        default: JSONValue = None,
        label: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
    ) -> Graph:
        """Declare (or replace) an input; a state field with the same ID is removed."""
        record = _make_field(
            field_id,
            {
                "kind": FieldKind.INPUT,
                "schema": schema,
                "required": required,
                "default": default,
                "label": label,
                "description": description,
                "metadata": {} if metadata is None else metadata,
            },
        )
        return self._store_field(record)

    def put_field(
        self,
        field_id: str,
        schema: object = None,
        *,
        reducer: object = None,
        default: JSONValue = None,
        label: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
    ) -> Graph:
        """Declare (or replace) a state field; an input with the same ID is removed."""
        record = _make_field(
            field_id,
            {
                "kind": FieldKind.STATE,
                "schema": schema,
                "reducer": reducer,
                "default": default,
                "label": label,
                "description": description,
                "metadata": {} if metadata is None else metadata,
            },
        )
        return self._store_field(record)

    def update_field(
        self, field_id: str, change: Mapping[str, object] | Callable[[Field], Field]
    ) -> Graph:
        """Patch an existing input or field; changing ``kind`` moves it between the two."""
        current = self.field(field_id)
        if current is None:
            raise _unknown("field", field_id)
        updated = _apply(current, change, _FIELD_ATTRS, Field)
        return self._store_field(_make_field(field_id, attrs.asdict(updated, recurse=False)))

    def delete_field(self, field_id: str) -> Graph:
        return self._evolve(
            inputs=_without(self.inputs, field_id), fields=_without(self.fields, field_id)
        )

    def _store_field(self, record: Field) -> Graph:
        inputs, fields = dict(self.inputs), dict(self.fields)
        inputs.pop(record.id, None)
        fields.pop(record.id, None)
        (inputs if record.kind is FieldKind.INPUT else fields)[record.id] = record
        return self._evolve(inputs=inputs, fields=fields)

    # -- outputs ---------------------------------------------------------------------------

    def put_output(
        self,
        output_id: str,
        source: str | None = None,
        *,
        schema: object = None,
        label: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
    ) -> Graph:
        """Declare (or replace) an output projecting ``source`` (default: the output ID)."""
        record = _make_output(
            output_id,
            {
                "source": output_id if source is None else source,
                "schema": schema,
                "label": label,
                "description": description,
                "metadata": {} if metadata is None else metadata,
            },
        )
        return self._evolve(outputs=_with(self.outputs, record))

    def update_output(
        self, output_id: str, change: Mapping[str, object] | Callable[[Output], Output]
    ) -> Graph:
        current = self.outputs.get(output_id)
        if current is None:
            raise _unknown("output", output_id)
        updated = _apply(current, change, _OUTPUT_ATTRS, Output)
        record = _make_output(output_id, attrs.asdict(updated, recurse=False))
        return self._evolve(outputs=_with(self.outputs, record))

    def delete_output(self, output_id: str) -> Graph:
        return self._evolve(outputs=_without(self.outputs, output_id))

    # -- nodes -----------------------------------------------------------------------------

    def put_node(
        self,
        node_id: str,
        implementation: str | None = None,
        *,
        config: Mapping[str, JSONValue] | None = None,
        policies: Mapping[str, JSONValue] | None = None,
        branches: Mapping[str, Sequence[str]] | None = None,
        label: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, JSONValue] | None = None,
        inputs: Mapping[str, object] | None = None,
        fields: Mapping[str, object] | None = None,
        map: Mapping[str, JSONValue] | None = None,
        child: Mapping[str, JSONValue] | None = None,
    ) -> Graph:
        """Declare (or replace) a node.

        ``inputs`` / ``fields`` declare the fields the node uses inline: each value is a
        schema (or shorthand), a ``Field``, or a mapping of field attributes. They become
        ordinary graph fields; redeclaring an identical field is a no-op, a different one
        raises ``conflicting_field`` and leaves the graph unchanged.
        """
        record = _make_node(
            node_id,
            {
                "implementation": implementation,
                "config": {} if config is None else config,
                "policies": {} if policies is None else policies,
                "branches": {} if branches is None else branches,
                "label": label,
                "description": description,
                "metadata": {} if metadata is None else metadata,
                "map": {} if map is None else map,
                "child": {} if child is None else child,
            },
        )
        graph = self
        declared: list[Field] = []
        for kind, declarations in ((FieldKind.INPUT, inputs), (FieldKind.STATE, fields)):
            if declarations is None:
                continue
            if not isinstance(declarations, Mapping):
                raise GraphError(
                    GraphErrorCode.INVALID_ATTRS,
                    f"inline {kind.value} declarations of node {node_id!r} must be a mapping",
                )
            declared += [_inline_field(fid, kind, decl) for fid, decl in declarations.items()]
        for decl in sorted(declared, key=lambda f: f.id):
            existing = graph.field(decl.id)
            if existing is None:
                graph = graph._store_field(decl)
            elif existing != decl:
                raise GraphError(
                    GraphErrorCode.CONFLICTING_FIELD,
                    f"node {node_id!r} declares field {decl.id!r} differently from the "
                    "existing declaration",
                    details={"node_id": node_id, "field_id": decl.id},
                )
        return graph._evolve(nodes=_with(graph.nodes, record))

    def update_node(
        self, node_id: str, change: Mapping[str, object] | Callable[[Node], Node]
    ) -> Graph:
        current = self.nodes.get(node_id)
        if current is None:
            raise _unknown("node", node_id)
        updated = _apply(current, change, _NODE_ATTRS, Node)
        record = _make_node(node_id, attrs.asdict(updated, recurse=False))
        return self._evolve(nodes=_with(self.nodes, record))

    def delete_node(self, node_id: str) -> Graph:
        """Remove the node only; its edges and fields stay (the compiler reports them)."""
        return self._evolve(nodes=_without(self.nodes, node_id))

    # -- edges -----------------------------------------------------------------------------

    def put_edge(
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
    ) -> Graph:
        """Declare (or replace) an edge; a list ``source`` makes it a barrier (fan-in)."""
        record = _make_edge(
            edge_id,
            {
                "source": source,
                "target": target,
                "guard": guard,
                "label": label,
                "description": description,
                "source_handle": source_handle,
                "target_handle": target_handle,
                "metadata": {} if metadata is None else metadata,
            },
        )
        return self._evolve(edges=_with(self.edges, record))

    def update_edge(
        self, edge_id: str, change: Mapping[str, object] | Callable[[Edge], Edge]
    ) -> Graph:
        current = self.edges.get(edge_id)
        if current is None:
            raise _unknown("edge", edge_id)
        updated = _apply(current, change, _EDGE_ATTRS, Edge)
        record = _make_edge(edge_id, attrs.asdict(updated, recurse=False))
        return self._evolve(edges=_with(self.edges, record))

    def delete_edge(self, edge_id: str) -> Graph:
        return self._evolve(edges=_without(self.edges, edge_id))

    # -- graph-level maps --------------------------------------------------------------------

    def set_policy(self, key: str, value: JSONValue) -> Graph:
        """Set a graph policy (``max_supersteps`` is the one the engine reads)."""
        return self._evolve(policies=_with_key(self.policies, key, value, "policies"))

    def set_metadata(self, key: str, value: JSONValue) -> Graph:
        return self._evolve(metadata=_with_key(self.metadata, key, value, "metadata"))

    def _evolve(self, **changes: Any) -> Graph:
        return attrs.evolve(self, diagnostics=(), **changes)


def new_graph(
    graph_id: str,
    *,
    name: str | None = None,
    description: str | None = None,
    schema_version: int = 1,
    policies: Mapping[str, JSONValue] | None = None,
    metadata: Mapping[str, JSONValue] | None = None,
) -> Graph:
    """An empty graph with a validated ID."""
    _require_id(graph_id, "graph")
    for attr, value in (("name", name), ("description", description)):
        _require_optional_str(value, f"graph {attr}")
    if isinstance(schema_version, bool) or not isinstance(schema_version, int):
        raise GraphError(GraphErrorCode.INVALID_ATTRS, "schema_version must be an integer")
    return Graph(
        id=graph_id,
        name=name,
        description=description,
        schema_version=schema_version,
        policies=_durable_map({} if policies is None else policies, ("policies",)),
        metadata=_durable_map({} if metadata is None else metadata, ("metadata",)),
    )


# -- record construction (shared by put_* and update_*) ----------------------------------------


def _unknown(label: str, record_id: str) -> GraphError:
    return GraphError(
        GraphErrorCode.UNKNOWN_RECORD,
        f"there is no {label} {record_id!r} to update",
        details={"label": label, "id": record_id},
    )


def _with(collection: Mapping[str, R], record: R) -> dict[str, R]:
    out = dict(collection)
    out[record.id] = record
    return out


def _without(collection: Mapping[str, R], record_id: str) -> dict[str, R]:
    return {k: v for k, v in collection.items() if k != record_id}


def _with_key(current: JSONDict, key: str, value: JSONValue, where: str) -> JSONDict:
    if not isinstance(key, str):
        raise GraphError(GraphErrorCode.INVALID_ATTRS, f"{where} keys must be strings")
    return _durable_map({**current, key: value}, (where,))


def _apply(record: R, change: object, allowed: frozenset[str], cls: type[R]) -> R:
    if isinstance(change, Mapping):
        unknown = sorted(str(k) for k in change if k not in allowed)
        if unknown:
            raise GraphError(
                GraphErrorCode.INVALID_ATTRS,
                f"unknown {cls.__name__.lower()} attributes {unknown}",
                details={"keys": cast(JSONValue, unknown)},
            )
        return attrs.evolve(record, **change)
    if callable(change):
        result = change(record)
        if not isinstance(result, cls):
            raise GraphError(
                GraphErrorCode.INVALID_ATTRS,
                f"an update function must return a {cls.__name__}, got {type(result).__name__}",
            )
        return result
    raise GraphError(
        GraphErrorCode.INVALID_ATTRS,
        f"an update must be a mapping of attributes or a function, got {type(change).__name__}",
    )


def _require_optional_str(value: object, what: str) -> None:
    if value is not None and not isinstance(value, str):
        raise GraphError(
            GraphErrorCode.INVALID_ATTRS, f"{what} must be a string or None, got {value!r}"
        )


def _durable(value: object, path: Path) -> JSONValue:
    try:
        return coerce_durable(value, "$")
    except NonDurableValue as exc:
        raise GraphError(
            GraphErrorCode.NON_DURABLE_VALUE,
            f"{pointer(path)} is not a durable value: {exc}",
            path=path,
            details={"reasons": list(exc.reasons)},
        ) from None


def _durable_map(value: object, path: Path) -> JSONDict:
    if not isinstance(value, Mapping):
        raise GraphError(
            GraphErrorCode.INVALID_ATTRS,
            f"{pointer(path)} must be a mapping, got {type(value).__name__}",
            path=path,
        )
    return cast(JSONDict, _durable(value, path))


def _strings(record: Mapping[str, object], keys: Sequence[str], what: str) -> None:
    for key in keys:
        _require_optional_str(record.get(key), f"{what} {key}")


def _schema(value: object, path: Path) -> Schema | None:
    if value is None:
        return None
    normalised = normalize_schema(value)
    if not isinstance(normalised, Schema):
        raise GraphError(
            GraphErrorCode.INVALID_SCHEMA,
            f"{pointer(path)}: {value!r} is neither a schema nor schema shorthand",
            path=path,
        )
    return normalised


def _make_field(field_id: str, values: Mapping[str, object]) -> Field:
    _require_id(field_id, "field")
    where = ("fields", field_id)
    kind = values.get("kind", FieldKind.STATE)
    if kind not in (FieldKind.INPUT, FieldKind.STATE):
        raise GraphError(
            GraphErrorCode.INVALID_ATTRS, f"field kind must be input or state, got {kind!r}"
        )
    required = values.get("required", False)
    if not isinstance(required, bool):
        raise GraphError(
            GraphErrorCode.INVALID_ATTRS, f"field {field_id!r} required must be a bool"
        )
    _strings(values, ("label", "description"), f"field {field_id!r}")
    reducer = values.get("reducer")
    if reducer is not None:
        reducer = normalize_reducer(reducer)
        if not isinstance(reducer, Reducer):
            raise GraphError(
                GraphErrorCode.INVALID_REDUCER,
                f"field {field_id!r}: {values.get('reducer')!r} is not a reducer",
                path=(*where, "reducer"),
            )
    return Field(
        id=field_id,
        kind=FieldKind(str(kind)),
        schema=_schema(values.get("schema"), (*where, "schema")),
        reducer=reducer,
        required=required,
        default=_durable(values.get("default"), (*where, "default")),
        label=cast("str | None", values.get("label")),
        description=cast("str | None", values.get("description")),
        metadata=_durable_map(values.get("metadata", {}), (*where, "metadata")),
    )


def _inline_field(field_id: object, kind: FieldKind, declaration: object) -> Field:
    if not isinstance(field_id, str):
        _require_id(field_id, "field")
    fid = cast(str, field_id)
    if isinstance(declaration, Field):
        values: dict[str, object] = attrs.asdict(declaration, recurse=False)
    elif isinstance(declaration, Mapping):
        unknown = sorted(str(k) for k in declaration if k not in _FIELD_ATTRS - {"kind"})
        if unknown:
            raise GraphError(
                GraphErrorCode.INVALID_ATTRS, f"unknown field attributes {unknown} for {fid!r}"
            )
        values = dict(declaration)
    else:
        values = {"schema": declaration}
    values["kind"] = kind
    if kind is FieldKind.INPUT:
        values.pop("reducer", None)
    return _make_field(fid, values)


def _make_output(output_id: str, values: Mapping[str, object]) -> Output:
    _require_id(output_id, "output")
    source = values.get("source")
    if not isinstance(source, str):
        raise GraphError(
            GraphErrorCode.INVALID_ATTRS, f"output {output_id!r} source must be a string"
        )
    _strings(values, ("label", "description"), f"output {output_id!r}")
    where = ("outputs", output_id)
    return Output(
        id=output_id,
        source=source,
        schema=_schema(values.get("schema"), (*where, "schema")),
        label=cast("str | None", values.get("label")),
        description=cast("str | None", values.get("description")),
        metadata=_durable_map(values.get("metadata", {}), (*where, "metadata")),
    )


def _make_node(node_id: str, values: Mapping[str, object]) -> Node:
    _require_id(node_id, "node")
    implementation = values.get("implementation")
    if implementation is not None:
        problem = implementation_name_problem(implementation)
        if problem is not None:
            raise GraphError(
                GraphErrorCode.INVALID_IMPLEMENTATION,
                f"node {node_id!r}: {problem} (implementations are registered names)",
                path=("nodes", node_id, "implementation"),
            )
    _strings(values, ("label", "description"), f"node {node_id!r}")
    where = ("nodes", node_id)
    branches = values.get("branches", {})
    if not isinstance(branches, Mapping) or not all(
        isinstance(k, str) and isinstance(v, list | tuple) and all(isinstance(e, str) for e in v)
        for k, v in branches.items()
    ):
        raise GraphError(
            GraphErrorCode.INVALID_ATTRS,
            f"node {node_id!r} branches must map group names to lists of edge IDs",
            path=(*where, "branches"),
        )
    return Node(
        id=node_id,
        implementation=cast("str | None", implementation),
        config=_durable_map(values.get("config", {}), (*where, "config")),
        policies=_durable_map(values.get("policies", {}), (*where, "policies")),
        branches=cast("Mapping[str, tuple[str, ...]]", branches),
        label=cast("str | None", values.get("label")),
        description=cast("str | None", values.get("description")),
        metadata=_durable_map(values.get("metadata", {}), (*where, "metadata")),
        map=_durable_map(values.get("map", {}), (*where, "map")),
        child=_durable_map(values.get("child", {}), (*where, "child")),
    )


def _make_edge(edge_id: str, values: Mapping[str, object]) -> Edge:
    _require_id(edge_id, "edge")
    source, target = values.get("source"), values.get("target")
    if not (
        isinstance(source, str)
        or (isinstance(source, list | tuple) and all(isinstance(s, str) for s in source))
    ):
        raise GraphError(
            GraphErrorCode.INVALID_ATTRS,
            f"edge {edge_id!r} source must be a node ID, {START!r} or a list of node IDs",
        )
    if not isinstance(target, str):
        raise GraphError(
            GraphErrorCode.INVALID_ATTRS, f"edge {edge_id!r} target must be a node ID or {FINISH!r}"
        )
    guard = values.get("guard")
    if guard is not None and not isinstance(guard, Guard):
        raise GraphError(
            GraphErrorCode.INVALID_GUARD,
            f"edge {edge_id!r} guard must be a Guard, got {type(guard).__name__}",
            path=("edges", edge_id, "guard"),
        )
    _strings(
        values,
        ("label", "description", "source_handle", "target_handle"),
        f"edge {edge_id!r}",
    )
    return Edge(
        id=edge_id,
        source=cast("str | tuple[str, ...]", source),
        target=target,
        guard=guard,
        label=cast("str | None", values.get("label")),
        description=cast("str | None", values.get("description")),
        source_handle=cast("str | None", values.get("source_handle")),
        target_handle=cast("str | None", values.get("target_handle")),
        metadata=_durable_map(values.get("metadata", {}), ("edges", edge_id, "metadata")),
    )
