"""The public JSON wire format of graph documents.

``to_dict`` / ``to_json`` write an authored :class:`~docket.graph.model.Graph`;
``from_dict`` / ``from_json`` read one back. Every graph ``to_dict`` accepts comes back
equal (``from_json(to_json(g)) == g``), and ``schema_version`` is kept as written.

Writing is deterministic: collections are objects keyed by record ID (records do not
repeat their ID), empty collections, empty maps, ``None`` attributes and ``false`` flags
are left out, so every graph has exactly one document. Reading is strict: an unknown key,
a wrongly typed value, a malformed schema, reducer or guard, a ``$`` key in open content,
an invalid record ID or an unsupported ``schema_version`` raises :class:`GraphLoadError`,
which carries one :class:`~docket.graph.model.Diagnostic` per problem found (with a
stable code and a path), and nothing else is ever raised for a bad document.

Public API
----------
- ``to_dict(graph) -> JSONDict`` / ``to_json(graph, indent=2) -> str``: raise ``GraphError``
  for content that cannot be written (a non-durable value, a record filed under another ID).
- ``from_dict(doc, strict=True) -> Graph`` / ``from_json(text) -> Graph``: raise
  ``GraphLoadError``. ``strict=False`` (used by the compiler) leaves record IDs and
  ``schema_version`` to the compiler's diagnostics.
- ``GraphLoadError``: a ``GraphError`` with ``diagnostics``.
- ``SUPPORTED_SCHEMA_VERSION``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Final, TypeVar, cast

from docket.graph.guards import Guard, guard_from_json, guard_to_json
from docket.graph.model import (
    Diagnostic,
    DiagnosticCode,
    Edge,
    Field,
    FieldKind,
    Graph,
    GraphError,
    GraphErrorCode,
    Node,
    Output,
    Path,
    Severity,
    id_problem,
    implementation_name_problem,
    pointer,
)
from docket.graph.reducers import Reducer, reducer_from_json, reducer_to_json
from docket.graph.schema import FormatError, Schema, schema_from_json, schema_to_json
from docket.values import JSONDict, JSONValue, NonDurableValue, coerce_durable, durable_errors

__all__ = [
    "SUPPORTED_SCHEMA_VERSION",
    "GraphLoadError",
    "from_dict",
    "from_json",
    "to_dict",
    "to_json",
]

SUPPORTED_SCHEMA_VERSION: Final = 1

_GRAPH_KEYS: Final = frozenset(
    {
        "schema_version",
        "id",
        "name",
        "description",
        "inputs",
        "fields",
        "outputs",
        "nodes",
        "edges",
        "policies",
        "metadata",
    }
)
_FIELD_KEYS: Final = frozenset(
    {"kind", "label", "description", "schema", "reducer", "required", "default", "metadata"}
)
_OUTPUT_KEYS: Final = frozenset({"source", "label", "description", "schema", "metadata"})
_NODE_KEYS: Final = frozenset(
    {
        "implementation",
        "label",
        "description",
        "branches",
        "config",
        "policies",
        "metadata",
        "map",
        "child",
    }
)
_EDGE_KEYS: Final = frozenset(
    {
        "from",
        "to",
        "label",
        "description",
        "source_handle",
        "target_handle",
        "guard",
        "metadata",
    }
)
_EDGE_STRINGS: Final = ("label", "description", "source_handle", "target_handle")


class GraphLoadError(GraphError):
    """A document could not be read; ``diagnostics`` lists every problem found."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        first = self.diagnostics[0]
        more = len(self.diagnostics) - 1
        suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        super().__init__(
            GraphErrorCode.INVALID_DOCUMENT,
            f"{pointer(first.path) or '/'}: {first.message}{suffix}",
            path=first.path,
            details={"diagnostics": [d.to_dict() for d in self.diagnostics]},
        )


# -- writing ----------------------------------------------------------------------------------


def to_dict(graph: Graph) -> JSONDict:
    """The wire document of ``graph`` (see the module docstring for the omission rules)."""
    if not isinstance(graph, Graph):
        raise TypeError(f"to_dict expects a Graph, got {type(graph).__name__}")
    doc: JSONDict = {
        "schema_version": _version(graph.schema_version),
        "id": _text(graph.id, ("id",)),
    }
    _put_strings(doc, graph, ("name", "description"), ())
    for key, write in (
        ("inputs", _write_field),
        ("fields", _write_field),
        ("outputs", _write_output),
        ("nodes", _write_node),
        ("edges", _write_edge),
    ):
        records = _write_collection(getattr(graph, key), key, write)
        if records:
            doc[key] = records
    _put_map(doc, "policies", graph.policies, ())
    _put_map(doc, "metadata", graph.metadata, ())
    return doc


def to_json(graph: Graph, *, indent: int | None = 2) -> str:
    """``to_dict`` as JSON text, newline-terminated and deterministic (equal graphs give
    equal text). With ``indent``, containers that fit on one line stay on one line, and
    keys are sorted with a few identifying keys (``id``, ``type``, ``from``...) first.
    ``indent=None`` gives one compact line."""
    doc = to_dict(graph)
    if indent is None:
        return json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
    return _pretty(doc, 0, indent) + "\n"


_FIRST_KEYS: Final = (
    *("schema_version", "id", "name", "description", "kind", "type", "op", "from", "to"),
    *("source", "implementation", "label", "schema", "reducer", "required", "default"),
    *("inputs", "fields", "nodes", "edges", "outputs"),
)
_WIDTH: Final = 99


def _key_order(key: str) -> tuple[int, str]:
    return (_FIRST_KEYS.index(key), "") if key in _FIRST_KEYS else (len(_FIRST_KEYS), key)


def _inline(value: JSONValue) -> str:
    if isinstance(value, dict):
        items = (f"{_inline(k)}: {_inline(value[k])}" for k in sorted(value, key=_key_order))
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _pretty(value: JSONValue, level: int, indent: int, used: int = 0) -> str:
    """``value`` at nesting ``level``; ``used`` is the width already taken on its line."""
    flat = _inline(value)
    if not isinstance(value, dict | list) or used + len(flat) <= _WIDTH:
        return flat
    pad, end = " " * indent * (level + 1), " " * indent * level
    if isinstance(value, list):
        lines = [pad + _pretty(item, level + 1, indent, len(pad)) for item in value]
        return "[\n" + ",\n".join(lines) + "\n" + end + "]"
    lines = []
    for key in sorted(value, key=_key_order):
        head = f"{pad}{_inline(key)}: "
        lines.append(head + _pretty(value[key], level + 1, indent, len(head)))
    return "{\n" + ",\n".join(lines) + "\n" + end + "}"


def _cannot(code: GraphErrorCode, path: Path, message: str) -> GraphError:
    return GraphError(code, f"{pointer(path) or '/'}: {message}", path=path)


def _version(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _cannot(GraphErrorCode.INVALID_ATTRS, ("schema_version",), "must be an integer")
    return value


def _text(value: object, path: Path) -> str:
    if not isinstance(value, str):
        raise _cannot(GraphErrorCode.INVALID_ATTRS, path, f"must be a string, got {value!r}")
    return value


def _durable(value: object, path: Path) -> JSONValue:
    try:
        return coerce_durable(value, "$")
    except NonDurableValue as exc:
        raise _durable_error(exc, path) from None


def _put_strings(doc: JSONDict, record: object, keys: Sequence[str], path: Path) -> None:
    for key in keys:
        value = getattr(record, key)
        if value is not None:
            doc[key] = _text(value, (*path, key))


def _put_map(doc: JSONDict, key: str, value: object, path: Path) -> None:
    if not isinstance(value, Mapping):
        raise _cannot(GraphErrorCode.INVALID_ATTRS, (*path, key), "must be a mapping")
    if value:
        doc[key] = _durable(value, (*path, key))


_Rec = TypeVar("_Rec", Field, Output, Node, Edge)


def _write_collection(
    records: object, key: str, write: Callable[[object, Path], JSONDict]
) -> JSONDict:
    if not isinstance(records, Mapping):
        raise _cannot(GraphErrorCode.INVALID_ATTRS, (key,), "must be a mapping of records")
    out: JSONDict = {}
    for record_id, record in records.items():
        path: Path = (key, _text(record_id, (key,)))
        if getattr(record, "id", None) != record_id:
            raise _cannot(
                GraphErrorCode.INVALID_ATTRS,
                path,
                f"the record filed under {record_id!r} has ID {getattr(record, 'id', None)!r}",
            )
        out[record_id] = write(record, path)
    return out


def _expect(record: object, cls: type[_Rec], path: Path) -> _Rec:
    if not isinstance(record, cls):
        raise _cannot(
            GraphErrorCode.INVALID_ATTRS,
            path,
            f"expected a {cls.__name__} record, got {type(record).__name__}",
        )
    return record


_Part = TypeVar("_Part", Schema, Reducer, Guard)


def _part(
    value: object,
    cls: type[_Part],
    dump: Callable[[_Part], JSONDict],
    code: GraphErrorCode,
    path: Path,
) -> JSONDict:
    """The JSON form of a schema, reducer or guard, with errors located in the graph."""
    if not isinstance(value, cls):
        raise _cannot(code, path, f"expected a {cls.__name__}, got {type(value).__name__}")
    return _located(lambda: dump(value), code, path)


def _located(make: Callable[[], JSONDict], code: GraphErrorCode, path: Path) -> JSONDict:
    try:
        return make()
    except NonDurableValue as exc:
        raise _durable_error(exc, path) from None
    except FormatError as exc:
        raise _cannot(code, (*path, *exc.path), exc.reason) from None


def _durable_error(exc: NonDurableValue, path: Path) -> GraphError:
    return GraphError(
        GraphErrorCode.NON_DURABLE_VALUE,
        f"{pointer(path) or '/'}: not a durable value ({exc})",
        path=path,
        details={"reasons": list(exc.reasons)},
    )


def _schema_doc(value: object, path: Path) -> JSONDict:
    return _part(value, Schema, schema_to_json, GraphErrorCode.INVALID_SCHEMA, path)


def _write_field(record: object, path: Path) -> JSONDict:
    field = _expect(record, Field, path)
    if field.kind not in (FieldKind.INPUT, FieldKind.STATE):
        raise _cannot(GraphErrorCode.INVALID_ATTRS, (*path, "kind"), "must be input or state")
    doc: JSONDict = {"kind": FieldKind(field.kind).value}
    _put_strings(doc, field, ("label", "description"), path)
    if field.schema is not None:
        doc["schema"] = _schema_doc(field.schema, (*path, "schema"))
    if field.reducer is not None:
        doc["reducer"] = _part(
            field.reducer,
            Reducer,
            reducer_to_json,
            GraphErrorCode.INVALID_REDUCER,
            (*path, "reducer"),
        )
    if field.required is True:
        doc["required"] = True
    elif field.required is not False:
        raise _cannot(GraphErrorCode.INVALID_ATTRS, (*path, "required"), "must be a boolean")
    if field.default is not None:
        doc["default"] = _durable(field.default, (*path, "default"))
    _put_map(doc, "metadata", field.metadata, path)
    return doc


def _write_output(record: object, path: Path) -> JSONDict:
    output = _expect(record, Output, path)
    doc: JSONDict = {"source": _text(output.source, (*path, "source"))}
    _put_strings(doc, output, ("label", "description"), path)
    if output.schema is not None:
        doc["schema"] = _schema_doc(output.schema, (*path, "schema"))
    _put_map(doc, "metadata", output.metadata, path)
    return doc


def _write_node(record: object, path: Path) -> JSONDict:
    node = _expect(record, Node, path)
    doc: JSONDict = {}
    if node.implementation is not None:
        problem = implementation_name_problem(node.implementation)
        if problem is not None:
            raise _cannot(GraphErrorCode.INVALID_IMPLEMENTATION, (*path, "implementation"), problem)
        doc["implementation"] = node.implementation
    _put_strings(doc, node, ("label", "description"), path)
    if not isinstance(node.branches, Mapping):
        raise _cannot(GraphErrorCode.INVALID_ATTRS, (*path, "branches"), "must be a mapping")
    groups = {
        group: list(edges) if isinstance(edges, tuple) else edges
        for group, edges in node.branches.items()
    }
    _put_map(doc, "branches", groups, path)
    _put_map(doc, "config", node.config, path)
    _put_map(doc, "policies", node.policies, path)
    _put_map(doc, "metadata", node.metadata, path)
    _put_map(doc, "map", node.map, path)
    _put_map(doc, "child", node.child, path)
    return doc


def _write_edge(record: object, path: Path) -> JSONDict:
    edge = _expect(record, Edge, path)
    source: JSONValue
    if isinstance(edge.source, tuple):
        source = [_text(s, (*path, "from", i)) for i, s in enumerate(edge.source)]
    else:
        source = _text(edge.source, (*path, "from"))
    doc: JSONDict = {"from": source, "to": _text(edge.target, (*path, "to"))}
    _put_strings(doc, edge, _EDGE_STRINGS, path)
    if edge.guard is not None:
        doc["guard"] = _part(
            edge.guard, Guard, guard_to_json, GraphErrorCode.INVALID_GUARD, (*path, "guard")
        )
    _put_map(doc, "metadata", edge.metadata, path)
    return doc


# -- reading ----------------------------------------------------------------------------------


def from_json(text: str | bytes) -> Graph:
    """Parse JSON text (duplicate keys, ``NaN`` and ``Infinity`` are rejected) and load it."""
    if not isinstance(text, str | bytes | bytearray):
        raise TypeError(f"from_json expects str or bytes, got {type(text).__name__}")
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        raise GraphLoadError(
            [_diag(DiagnosticCode.INVALID_JSON, (), f"not a valid JSON document: {exc}")]
        ) from None
    return from_dict(doc)


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not allowed in a graph document")


def from_dict(doc: object, *, strict: bool = True) -> Graph:
    """Load a wire document; raise :class:`GraphLoadError` listing every problem.

    With ``strict=False`` record IDs and ``schema_version`` are taken as written (they
    must still have the right JSON type); the compiler reports them as diagnostics.
    """
    loader = _Loader(strict)
    try:
        graph = loader.graph(doc)
    except RecursionError:
        raise GraphLoadError(
            [_diag(DiagnosticCode.INVALID_DOCUMENT, (), "the document is nested too deeply")]
        ) from None
    if loader.problems or graph is None:
        raise GraphLoadError(
            loader.problems or [_diag(DiagnosticCode.INVALID_DOCUMENT, (), "unreadable")]
        )
    return graph


def _diag(code: DiagnosticCode, path: Path, message: str) -> Diagnostic:
    return Diagnostic(code, Severity.ERROR, path, message)


_T = TypeVar("_T")


class _Loader:
    """Reads a document, collecting a diagnostic for every problem instead of stopping."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.problems: list[Diagnostic] = []

    def fail(self, code: DiagnosticCode, path: Path, message: str) -> None:
        self.problems.append(_diag(code, path, message))

    def obj(
        self, value: object, path: Path, allowed: frozenset[str], what: str
    ) -> dict[str, object] | None:
        if not isinstance(value, dict):
            self.fail(
                DiagnosticCode.WRONG_TYPE, path, f"{what} must be an object, got {_kind(value)}"
            )
            return None
        ok = True
        for key in value:
            if not isinstance(key, str):
                self.fail(DiagnosticCode.WRONG_TYPE, path, f"{what} has a non-string key {key!r}")
                ok = False
            elif key not in allowed:
                self.fail(
                    DiagnosticCode.UNKNOWN_KEY, (*path, key), f"unknown key {key!r} in {what}"
                )
        return cast("dict[str, object]", value) if ok else None

    def text(self, doc: Mapping[str, object], key: str, path: Path) -> str | None:
        value = doc.get(key)
        if value is None and key not in doc:
            return None
        if not isinstance(value, str):
            self.fail(
                DiagnosticCode.WRONG_TYPE,
                (*path, key),
                f"{key} must be a string, got {_kind(value)}",
            )
            return None
        return value

    def durable(self, value: object, path: Path) -> JSONValue:
        errors = durable_errors(value, "value")
        if errors:
            self.fail(DiagnosticCode.NON_DURABLE_VALUE, path, "; ".join(errors))
            return None
        return cast(JSONValue, value)

    def open_map(self, doc: Mapping[str, object], key: str, path: Path) -> JSONDict:
        if key not in doc:
            return {}
        value = doc[key]
        if not isinstance(value, dict):
            self.fail(
                DiagnosticCode.WRONG_TYPE,
                (*path, key),
                f"{key} must be an object, got {_kind(value)}",
            )
            return {}
        checked = self.durable(value, (*path, key))
        return checked if isinstance(checked, dict) else {}

    def nested(
        self, parse: Callable[[object, Path], _T], value: object, path: Path, code: DiagnosticCode
    ) -> _T | None:
        try:
            return parse(value, path)
        except (ValueError, TypeError) as exc:  # FormatError and NonDurableValue are ValueErrors
            where = exc.path if isinstance(exc, FormatError) else path
            reason = exc.reason if isinstance(exc, FormatError) else str(exc)
            self.fail(code, where, reason)
            return None

    def record_id(self, value: str, path: Path) -> None:
        problem = id_problem(value)
        if self.strict and problem is not None:
            what = "reserved" if problem is DiagnosticCode.RESERVED_ID else "not a valid ID"
            self.fail(problem, path, f"{value!r} is {what}")

    # -- records ---------------------------------------------------------------------------

    def graph(self, value: object) -> Graph | None:
        doc = self.obj(value, (), _GRAPH_KEYS, "a graph document")
        if doc is None:
            return None
        version = doc.get("schema_version")
        if "schema_version" not in doc:
            self.fail(DiagnosticCode.MISSING_KEY, ("schema_version",), "schema_version is required")
        elif isinstance(version, bool) or not isinstance(version, int):
            self.fail(
                DiagnosticCode.WRONG_TYPE, ("schema_version",), "schema_version must be an integer"
            )
        elif self.strict and version < 1:
            self.fail(
                DiagnosticCode.INVALID_VALUE,
                ("schema_version",),
                "schema_version must be a positive integer",
            )
        elif self.strict and version > SUPPORTED_SCHEMA_VERSION:
            self.fail(
                DiagnosticCode.UNSUPPORTED_SCHEMA_VERSION,
                ("schema_version",),
                f"schema_version {version} is not supported "
                f"(this docket reads version {SUPPORTED_SCHEMA_VERSION})",
            )
            return None  # a newer format: the rest cannot be interpreted reliably
        graph_id = self.text(doc, "id", ())
        if "id" not in doc:
            self.fail(DiagnosticCode.MISSING_KEY, ("id",), "id is required")
        elif graph_id is not None:
            self.record_id(graph_id, ("id",))
        graph = Graph(
            id=graph_id or "",
            name=self.text(doc, "name", ()),
            description=self.text(doc, "description", ()),
            schema_version=version if isinstance(version, int) else SUPPORTED_SCHEMA_VERSION,
            inputs=self.collection(doc, "inputs", self.input_field),
            fields=self.collection(doc, "fields", self.state_field),
            outputs=self.collection(doc, "outputs", self.output),
            nodes=self.collection(doc, "nodes", self.node),
            edges=self.collection(doc, "edges", self.edge),
            policies=self.open_map(doc, "policies", ()),
            metadata=self.open_map(doc, "metadata", ()),
        )
        return graph

    def collection(
        self,
        doc: Mapping[str, object],
        key: str,
        parse: Callable[[str, dict[str, object], Path], _T | None],
    ) -> dict[str, _T]:
        value = doc.get(key, {})
        if not isinstance(value, dict):
            self.fail(
                DiagnosticCode.WRONG_TYPE,
                (key,),
                f"{key} must be an object keyed by ID, got {_kind(value)}",
            )
            return {}
        out: dict[str, _T] = {}
        for record_id, record_doc in value.items():
            if not isinstance(record_id, str):
                self.fail(
                    DiagnosticCode.WRONG_TYPE, (key,), f"{key} has a non-string key {record_id!r}"
                )
                continue
            path: Path = (key, record_id)
            self.record_id(record_id, path)
            if not isinstance(record_doc, dict):
                self.fail(
                    DiagnosticCode.WRONG_TYPE,
                    path,
                    f"a record must be an object, got {_kind(record_doc)}",
                )
                continue
            record = parse(record_id, record_doc, path)
            if record is not None:
                out[record_id] = record
        return out

    def input_field(self, record_id: str, raw: dict[str, object], path: Path) -> Field | None:
        return self.field(record_id, raw, path, FieldKind.INPUT)

    def state_field(self, record_id: str, raw: dict[str, object], path: Path) -> Field | None:
        return self.field(record_id, raw, path, FieldKind.STATE)

    def field(
        self, record_id: str, raw: dict[str, object], path: Path, kind: FieldKind
    ) -> Field | None:
        doc = self.obj(raw, path, _FIELD_KEYS, "a field")
        if doc is None:
            return None
        raw_kind = doc.get("kind", kind.value)
        if raw_kind not in (FieldKind.INPUT.value, FieldKind.STATE.value) or not isinstance(
            raw_kind, str
        ):
            self.fail(
                DiagnosticCode.INVALID_VALUE,
                (*path, "kind"),
                f"kind must be 'input' or 'state', got {raw_kind!r}",
            )
            raw_kind = kind.value
        required = doc.get("required", False)
        if not isinstance(required, bool):
            self.fail(DiagnosticCode.WRONG_TYPE, (*path, "required"), "required must be a boolean")
            required = False
        schema = (
            self.nested(
                schema_from_json, doc["schema"], (*path, "schema"), DiagnosticCode.INVALID_SCHEMA
            )
            if "schema" in doc
            else None
        )
        reducer = (
            self.nested(
                reducer_from_json,
                doc["reducer"],
                (*path, "reducer"),
                DiagnosticCode.INVALID_REDUCER,
            )
            if "reducer" in doc
            else None
        )
        return Field(
            id=record_id,
            kind=FieldKind(raw_kind),
            schema=schema,
            reducer=reducer,
            required=required,
            default=self.durable(doc.get("default"), (*path, "default")),
            label=self.text(doc, "label", path),
            description=self.text(doc, "description", path),
            metadata=self.open_map(doc, "metadata", path),
        )

    def output(self, record_id: str, raw: dict[str, object], path: Path) -> Output | None:
        doc = self.obj(raw, path, _OUTPUT_KEYS, "an output")
        if doc is None:
            return None
        source = self.text(doc, "source", path) if "source" in doc else record_id
        schema = (
            self.nested(
                schema_from_json, doc["schema"], (*path, "schema"), DiagnosticCode.INVALID_SCHEMA
            )
            if "schema" in doc
            else None
        )
        return Output(
            id=record_id,
            source=source or record_id,
            schema=schema,
            label=self.text(doc, "label", path),
            description=self.text(doc, "description", path),
            metadata=self.open_map(doc, "metadata", path),
        )

    def node(self, record_id: str, raw: dict[str, object], path: Path) -> Node | None:
        doc = self.obj(raw, path, _NODE_KEYS, "a node")
        if doc is None:
            return None
        implementation = self.text(doc, "implementation", path)
        if implementation is not None:
            problem = implementation_name_problem(implementation)
            if problem is not None:
                self.fail(DiagnosticCode.INVALID_VALUE, (*path, "implementation"), problem)
        return Node(
            id=record_id,
            implementation=implementation,
            config=self.open_map(doc, "config", path),
            policies=self.open_map(doc, "policies", path),
            branches=self.branches(doc, path),
            label=self.text(doc, "label", path),
            description=self.text(doc, "description", path),
            metadata=self.open_map(doc, "metadata", path),
            map=self.open_map(doc, "map", path),
            child=self.open_map(doc, "child", path),
        )

    def branches(self, doc: Mapping[str, object], path: Path) -> dict[str, tuple[str, ...]]:
        groups = self.open_map(doc, "branches", path)
        out: dict[str, tuple[str, ...]] = {}
        for group, edges in groups.items():
            at = (*path, "branches", group)
            if not isinstance(edges, list) or not all(isinstance(e, str) for e in edges):
                self.fail(
                    DiagnosticCode.WRONG_TYPE, at, "a branch group must be a list of edge IDs"
                )
                continue
            out[group] = tuple(cast("list[str]", edges))
        return out

    def edge(self, record_id: str, raw: dict[str, object], path: Path) -> Edge | None:
        doc = self.obj(raw, path, _EDGE_KEYS, "an edge")
        if doc is None:
            return None
        ok = True
        for key in ("from", "to"):
            if key not in doc:
                self.fail(DiagnosticCode.MISSING_KEY, (*path, key), f"an edge needs {key!r}")
                ok = False
        source, target = doc.get("from"), doc.get("to")
        if "from" in doc and not (
            isinstance(source, str)
            or (isinstance(source, list) and all(isinstance(s, str) for s in source))
        ):
            self.fail(
                DiagnosticCode.WRONG_TYPE,
                (*path, "from"),
                "from must be a node ID, '$start' or a list of node IDs",
            )
            ok = False
        if "to" in doc and not isinstance(target, str):
            self.fail(DiagnosticCode.WRONG_TYPE, (*path, "to"), "to must be a node ID or '$finish'")
            ok = False
        guard = (
            self.nested(
                guard_from_json, doc["guard"], (*path, "guard"), DiagnosticCode.INVALID_GUARD
            )
            if "guard" in doc
            else None
        )
        label, description, source_handle, target_handle = (
            self.text(doc, key, path) for key in _EDGE_STRINGS
        )
        metadata = self.open_map(doc, "metadata", path)
        if not ok:
            return None
        return Edge(
            id=record_id,
            source=cast("str | list[str]", source),
            target=cast(str, target),
            guard=guard,
            label=label,
            description=description,
            source_handle=source_handle,
            target_handle=target_handle,
            metadata=metadata,
        )


def _kind(value: object) -> str:
    names = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
    }
    if type(value) in names:
        return names[type(value)]
    if isinstance(value, int | float):
        return "a number"
    return f"a {type(value).__name__}"
