"""The schema language: typed descriptions of input, state and config values.

Public API
----------
- ``SchemaType``: the eight schema types (``StrEnum``).
- ``NoDefault`` / ``NO_DEFAULT`` / ``NoDefaultType``: the "no default" sentinel (distinct from a
  ``None`` default, which is a real default).
- ``Schema``: frozen record ``(type, fields, item, values, required, default, constraints,
  metadata)``.
- ``S``: constructors ``S.string() S.float() S.integer() S.boolean() S.map() S.list(item)
  S.object(fields) S.enum(values)``; ``required``/``default``/``metadata`` set attributes,
  every other keyword becomes a constraint.
- ``schema_of(spec) -> Schema``: normalise shorthand or raise ``TypeError``.
- ``normalize_schema(value) -> object``: normalise shorthand, or return ``value`` unchanged.
- ``validate(schema, value, loc="value") -> list[str]``: the reasons ``value`` does not conform;
  an **empty list means valid**.
- ``schema_problems(schema) -> list[str]``: well-formedness problems; empty means well formed.
- ``schema_to_json(schema) -> JSONDict`` / ``schema_from_json(doc, at=()) -> Schema``: the
  one JSON form (wire and durable), strict on load.
- ``FormatError(ValueError)``: base of every strict-load error (``path``, ``reason``);
  ``SchemaFormatError`` is its schema flavour.
- ``strict_key(value)`` / ``loose_equal(a, b)``: the two equalities of durable values.
"""

from __future__ import annotations

import builtins
import functools
import json
import re
from collections.abc import Hashable, Mapping, Sequence
from enum import Enum, StrEnum
from typing import Final, Literal, TypeAlias, TypeGuard, cast, get_args, get_origin

import attrs

from docket.values import JSONDict, JSONValue, coerce_durable, durable_errors

__all__ = [
    "NO_DEFAULT",
    "FormatError",
    "NoDefault",
    "NoDefaultType",
    "S",
    "Schema",
    "SchemaFormatError",
    "SchemaLike",
    "SchemaType",
    "expect_durable",
    "expect_keys",
    "expect_object",
    "format_path",
    "is_valid",
    "loose_equal",
    "normalize_schema",
    "schema_from_json",
    "schema_of",
    "schema_problems",
    "schema_to_json",
    "show",
    "strict_key",
    "validate",
]


class SchemaType(StrEnum):
    STRING = "string"
    FLOAT = "float"
    INTEGER = "integer"
    BOOLEAN = "boolean"
    MAP = "map"
    OBJECT = "object"
    ENUM = "enum"
    LIST = "list"


class NoDefault(Enum):
    """One-member enum so ``NO_DEFAULT`` has a precise ``Literal`` type."""

    TOKEN = "NO_DEFAULT"


NO_DEFAULT: Final = NoDefault.TOKEN
NoDefaultType: TypeAlias = Literal[NoDefault.TOKEN]

#: Anything accepted where a schema is expected: a ``Schema`` or a shorthand form.
SchemaLike: TypeAlias = object

Path: TypeAlias = tuple[str | int, ...]


class FormatError(ValueError):
    """A JSON document does not have the expected shape; ``path`` locates the problem."""

    def __init__(self, path: Sequence[str | int], reason: str) -> None:
        self.path: Path = tuple(path)
        self.reason = reason
        super().__init__(f"{format_path(self.path)}: {reason}")


class SchemaFormatError(FormatError):
    """A schema document is malformed (unknown key, wrong type, unknown schema type...)."""


def format_path(path: Sequence[str | int]) -> str:
    """Render a document path as ``$.fields.name[0]``."""
    out = "$"
    for seg in path:
        out += f"[{seg}]" if isinstance(seg, int) else f".{seg}"
    return out


def _to_type(value: str) -> SchemaType | str:
    return _type_name(value) or value  # an unknown name is kept for schema_problems


def _schema_map(value: Mapping[str, Schema]) -> dict[str, Schema]:
    return dict(value)


def _json_map(value: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
    return dict(value)


def _json_tuple(value: Sequence[JSONValue]) -> tuple[JSONValue, ...]:
    return tuple(value)


@attrs.frozen
class Schema:
    """A schema value. Collections are copied on construction; treat them as read-only.

    ``type`` is a ``SchemaType`` for known names; an unknown name is kept as a plain ``str``
    so ``schema_problems`` can report it. ``fields`` is for ``object``, ``item`` for ``list``,
    ``values`` for ``enum``.
    """

    type: SchemaType | str = attrs.field(converter=_to_type)
    fields: dict[str, Schema] = attrs.field(factory=dict, converter=_schema_map)
    item: Schema | None = None
    values: tuple[JSONValue, ...] = attrs.field(default=(), converter=_json_tuple)
    required: bool = False
    default: JSONValue | NoDefaultType = NO_DEFAULT
    constraints: dict[str, JSONValue] = attrs.field(factory=dict, converter=_json_map)
    metadata: dict[str, JSONValue] = attrs.field(factory=dict, converter=_json_map)


# -- constructors and shorthand ----------------------------------------------------------

_Default: TypeAlias = "JSONValue | NoDefaultType"
_Meta: TypeAlias = "Mapping[str, JSONValue] | None"
_Fields: TypeAlias = "Mapping[str, SchemaLike]"
_Values: TypeAlias = "Sequence[JSONValue]"

_SCALARS: Final = frozenset(
    {SchemaType.STRING, SchemaType.FLOAT, SchemaType.INTEGER, SchemaType.BOOLEAN, SchemaType.MAP}
)
_PY_TYPES: Final[dict[type, SchemaType]] = {
    str: SchemaType.STRING,
    int: SchemaType.INTEGER,
    float: SchemaType.FLOAT,
    bool: SchemaType.BOOLEAN,
    dict: SchemaType.MAP,
}


def _make(
    type_: SchemaType,
    required: bool,
    default: _Default,
    metadata: _Meta,
    constraints: Mapping[str, JSONValue],
    *,
    fields: Mapping[str, Schema] | None = None,
    item: Schema | None = None,
    values: Sequence[JSONValue] = (),
) -> Schema:
    return Schema(
        type_,
        fields=fields or {},
        item=item,
        values=values,
        required=required,
        default=default,
        constraints=constraints,
        metadata=metadata or {},
    )


def _children(fields: _Fields) -> dict[str, Schema]:
    if not isinstance(fields, Mapping):
        raise TypeError(f"object fields must be a mapping, got {type(fields).__name__}")
    return {name: schema_of(child) for name, child in fields.items()}


def _enum_values(values: _Values) -> tuple[JSONValue, ...]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise TypeError(f"enum values must be a list, got {type(values).__name__}")
    return tuple(values)


class S:
    """Schema constructors: ``S.integer(min=0)``, ``S.list(str, max_items=3)``, ...

    ``required``, ``default`` and ``metadata`` set those attributes; every other keyword is
    stored as a constraint. Child schemas (``item``, object fields) may be shorthand; a child
    that is not a schema raises ``TypeError``.
    """

    @staticmethod
    def string(
        *,
        required: bool = False,
        default: _Default = NO_DEFAULT,
        metadata: _Meta = None,
        **constraints: JSONValue,
    ) -> Schema:
        return _make(SchemaType.STRING, required, default, metadata, constraints)

    @staticmethod
    def float(
        *,
        required: bool = False,
        default: _Default = NO_DEFAULT,
        metadata: _Meta = None,
        **constraints: JSONValue,
    ) -> Schema:
        return _make(SchemaType.FLOAT, required, default, metadata, constraints)

    @staticmethod
    def integer(
        *,
        required: bool = False,
        default: _Default = NO_DEFAULT,
        metadata: _Meta = None,
        **constraints: JSONValue,
    ) -> Schema:
        return _make(SchemaType.INTEGER, required, default, metadata, constraints)

    @staticmethod
    def boolean(
        *,
        required: bool = False,
        default: _Default = NO_DEFAULT,
        metadata: _Meta = None,
        **constraints: JSONValue,
    ) -> Schema:
        return _make(SchemaType.BOOLEAN, required, default, metadata, constraints)

    @staticmethod
    def map(
        *,
        required: bool = False,
        default: _Default = NO_DEFAULT,
        metadata: _Meta = None,
        **constraints: JSONValue,
    ) -> Schema:
        return _make(SchemaType.MAP, required, default, metadata, constraints)

    @staticmethod
    def list(
        item: SchemaLike,
        *,
        required: bool = False,
        default: _Default = NO_DEFAULT,
        metadata: _Meta = None,
        **constraints: JSONValue,
    ) -> Schema:
        return _make(
            SchemaType.LIST, required, default, metadata, constraints, item=schema_of(item)
        )

    @staticmethod
    def object(
        fields: _Fields,
        *,
        required: bool = False,
        default: _Default = NO_DEFAULT,
        metadata: _Meta = None,
        **constraints: JSONValue,
    ) -> Schema:
        return _make(
            SchemaType.OBJECT, required, default, metadata, constraints, fields=_children(fields)
        )

    @staticmethod
    def enum(
        values: _Values,
        *,
        required: bool = False,
        default: _Default = NO_DEFAULT,
        metadata: _Meta = None,
        **constraints: JSONValue,
    ) -> Schema:
        return _make(
            SchemaType.ENUM, required, default, metadata, constraints, values=_enum_values(values)
        )


def _plain_str(value: object) -> str | None:
    """``value`` as a plain ``str`` (str-valued enum members give their value), else None."""
    if isinstance(value, Enum):
        value = value.value
    return str.__str__(value) if isinstance(value, str) else None


def _type_name(value: object) -> SchemaType | None:
    name = _plain_str(value)
    if name is None:
        return None
    try:
        return SchemaType(name)
    except ValueError:
        return None


def _with_opts(
    type_: SchemaType,
    opts: object,
    *,
    fields: Mapping[str, Schema] | None = None,
    item: Schema | None = None,
    values: Sequence[JSONValue] = (),
) -> Schema | None:
    """Split shorthand options into attributes and constraints; None if they are malformed."""
    if not isinstance(opts, Mapping):
        return None
    constraints: dict[str, JSONValue] = {}
    required: object = False
    default: object = NO_DEFAULT
    metadata: object = {}
    for raw_key, value in opts.items():
        key = _plain_str(raw_key)
        if key is None:
            return None
        if key == "required":
            required = value
        elif key == "default":
            default = value
        elif key == "metadata":
            metadata = value
        else:
            constraints[key] = value
    if not isinstance(required, bool) or not isinstance(metadata, Mapping):
        return None
    return Schema(
        type_,
        fields=fields or {},
        item=item,
        values=values,
        required=required,
        default=cast("JSONValue", default),  # any value; schema_problems checks durability
        constraints=constraints,
        metadata=metadata,
    )


def _shorthand(spec: object) -> Schema | None:
    if isinstance(spec, Schema):
        return spec
    if isinstance(spec, type) and spec in _PY_TYPES:
        return Schema(_PY_TYPES[spec])
    origin = get_origin(spec)
    if origin is not None:
        args = get_args(spec)
        if origin is list and len(args) == 1:
            item = _shorthand(args[0])
            return None if item is None else Schema(SchemaType.LIST, item=item)
        if origin is dict:
            return Schema(SchemaType.MAP)
        if origin is Literal:
            return Schema(SchemaType.ENUM, values=args)
        return None
    scalar = _type_name(spec)
    if scalar in _SCALARS:
        return Schema(scalar)
    if not isinstance(spec, tuple) or len(spec) not in (2, 3):
        return None
    head, arg, *rest = spec
    opts = rest[0] if rest else {}
    kind = _type_name(head)
    if kind in _SCALARS and not rest:
        return _with_opts(kind, arg)
    if kind is SchemaType.LIST:
        item = _shorthand(arg)
        return None if item is None else _with_opts(kind, opts, item=item)
    if kind is SchemaType.ENUM:
        if isinstance(arg, str | bytes) or not isinstance(arg, Sequence):
            return None
        return _with_opts(kind, opts, values=tuple(arg))
    if kind is SchemaType.OBJECT and isinstance(arg, Mapping):
        fields: dict[str, Schema] = {}
        for name, child in arg.items():
            key, child_schema = _plain_str(name), _shorthand(child)
            if key is None or child_schema is None:
                return None
            fields[key] = child_schema
        return _with_opts(kind, opts, fields=fields)
    return None


def schema_of(spec: SchemaLike) -> Schema:
    """Normalise a schema or shorthand into a ``Schema``; raise ``TypeError`` if it is neither.

    Shorthand: ``"string"``/``SchemaType.STRING`` (and ``float integer boolean map``);
    ``(scalar, opts)``; ``("list", item[, opts])``; ``("enum", values[, opts])``;
    ``("object", fields[, opts])``; Python types ``str int float bool dict``, ``list[X]``,
    ``dict[K, V]`` (a map; keys and values unchecked) and ``Literal[...]`` (an enum). Nested
    shorthand normalises too. Bare ``list``/``object``/``enum`` are not shorthand.
    """
    schema = _shorthand(spec)
    if schema is None:
        raise TypeError(f"not a schema or schema shorthand: {spec!r}")
    return schema


def normalize_schema(value: object) -> object:
    """``schema_of(value)`` when ``value`` is a schema or shorthand, else ``value`` unchanged
    (the compiler then reports it)."""
    schema = _shorthand(value)
    return value if schema is None else schema


# -- validation ---------------------------------------------------------------------------

_NOUNS: Final = {
    SchemaType.STRING: "a string",
    SchemaType.FLOAT: "a number",
    SchemaType.INTEGER: "an integer",
    SchemaType.BOOLEAN: "a boolean",
    SchemaType.MAP: "a map",
    SchemaType.OBJECT: "a map",
    SchemaType.LIST: "a list",
}


def show(value: object, limit: int = 120) -> str:
    """A short, stable rendering of a value for messages (JSON when possible)."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_number(value: object) -> TypeGuard[int | builtins.float]:
    return isinstance(value, int | builtins.float) and not isinstance(value, bool)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@functools.lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None


def _type_ok(schema: Schema, value: JSONValue) -> bool:
    match schema.type:
        case SchemaType.STRING:
            return isinstance(value, str)
        case SchemaType.FLOAT:
            return _is_number(value)
        case SchemaType.INTEGER:
            return isinstance(value, int) and not isinstance(value, bool)
        case SchemaType.BOOLEAN:
            return isinstance(value, bool)
        case SchemaType.MAP | SchemaType.OBJECT:
            return isinstance(value, dict)
        case SchemaType.LIST:
            return isinstance(value, list)
        case SchemaType.ENUM:
            key = strict_key(value)
            return any(strict_key(member) == key for member in schema.values)
    return False


def _bounds(
    loc: str,
    low: int | builtins.float | None,
    high: int | builtins.float | None,
    got: int | builtins.float,
    unit: str,
    shown: str | None,
    out: list[str],
) -> None:
    """``shown`` is ``got`` as a message prints it, ``None`` for ``show(got)``: rendered
    only for a broken bound (show is json.dumps; every state write checks its numbers)."""
    if low is not None and got < low:
        out.append(f"{loc} must be at least {show(low)}{unit}, got {_shown(got, shown)}")
    if high is not None and got > high:
        out.append(f"{loc} must be at most {show(high)}{unit}, got {_shown(got, shown)}")


def _shown(got: int | builtins.float, shown: str | None) -> str:
    return show(got) if shown is None else shown


#: The exact element types an unconstrained scalar item schema takes without a problem.
_PLAIN_ITEMS: Final[dict[SchemaType, frozenset[type]]] = {
    SchemaType.STRING: frozenset({str}),
    SchemaType.FLOAT: frozenset({int, builtins.float}),
    SchemaType.INTEGER: frozenset({int}),
    SchemaType.BOOLEAN: frozenset({bool}),
}


def _plain_items(item: object, value: list[JSONValue]) -> bool:
    """Every element of ``value`` passes ``item`` with nothing to report (an unconstrained
    scalar schema, elements of its exact types, ``None`` unless required): the per-element
    walk, a location string each, is then skipped. Anything else takes the walk."""
    if not isinstance(item, Schema) or item.constraints or item.type.__class__ is not SchemaType:
        return False
    accepted = _PLAIN_ITEMS.get(item.type)
    if accepted is None:
        return False
    if item.required:
        return all(type(element) in accepted for element in value)
    return all(element is None or type(element) in accepted for element in value)


def _add_problems(schema: object, value: JSONValue, loc: str, out: list[str]) -> None:
    if not isinstance(schema, Schema):
        out.append(f"{loc} cannot be checked: the schema is not a Schema")
        return
    if value is None:
        if schema.required:
            out.append(f"{loc} is required but was null")
        return
    if not isinstance(schema.type, SchemaType):
        out.append(f"{loc} cannot be checked: unknown schema type {show(schema.type)}")
        return
    if not _type_ok(schema, value):
        if schema.type is SchemaType.ENUM:
            out.append(f"{loc} must be one of {show(list(schema.values))}, got {show(value)}")
        else:
            out.append(f"{loc} must be {_NOUNS[schema.type]}, got {show(value)}")
        return
    c = schema.constraints
    if isinstance(value, str) and schema.type is SchemaType.STRING:
        n = len(value)  # code points (DECISIONS), not graphemes
        lo, hi = _count(c.get("min_length")), _count(c.get("max_length"))
        _bounds(loc, lo, hi, n, " characters", f"{n} characters", out)
        pattern = c.get("pattern")
        if pattern is not None:
            compiled = _compile(pattern) if isinstance(pattern, str) else None
            if compiled is None:
                out.append(f"{loc} has an invalid pattern constraint {show(pattern)}")
            elif compiled.search(value) is None:
                out.append(f"{loc} must match pattern {show(pattern)}, got {show(value)}")
    elif _is_number(value) and schema.type in (SchemaType.FLOAT, SchemaType.INTEGER):
        low, high = c.get("min"), c.get("max")
        if low is not None or high is not None:
            _bounds(
                loc,
                low if _is_number(low) else None,
                high if _is_number(high) else None,
                value,
                "",
                None,
                out,
            )
    elif isinstance(value, list) and schema.type is SchemaType.LIST:
        if schema.item is not None and not _plain_items(schema.item, value):
            for index, element in enumerate(value):
                _add_problems(schema.item, element, f"{loc}[{index}]", out)
        n = len(value)
        lo, hi = _count(c.get("min_items")), _count(c.get("max_items"))
        _bounds(loc, lo, hi, n, " items", f"{n} items", out)
    elif isinstance(value, dict) and schema.type is SchemaType.OBJECT:
        local: list[str] = []
        if c.get("open") is not True:
            local.extend(
                f"{loc} has unknown field {key}" for key in value if key not in schema.fields
            )
        for name, child in schema.fields.items():
            if name in value:
                _add_problems(child, value[name], f"{loc}.{name}", local)
            elif isinstance(child, Schema) and child.required:
                local.append(f"{loc}.{name} is required but missing")
        out.extend(sorted(local))


def validate(schema: Schema, value: JSONValue, loc: str = "value") -> list[str]:
    """Every reason ``value`` does not conform to ``schema``; an empty list means valid.

    ``None`` is valid unless the schema is ``required``; an object's reasons are sorted.
    Locations read ``value``, ``value[1]``, ``value.name``.
    """
    out: list[str] = []
    _add_problems(schema, value, loc, out)
    return out


def validate_appended(
    schema: Schema, value: list[JSONValue], start: int, loc: str = "value"
) -> list[str]:
    """``validate(schema, value)`` for a list whose first ``start`` elements are already
    known to conform (a committed prefix that an append extended): only the elements from
    ``start`` on and the list's own bounds are checked, so the cost follows what was
    appended, not the length of the history. Same reasons, same order, as ``validate``."""
    if schema.type is not SchemaType.LIST or not 0 <= start <= len(value):
        return validate(schema, value, loc)
    out: list[str] = []
    if schema.item is not None:
        for index in range(start, len(value)):
            _add_problems(schema.item, value[index], f"{loc}[{index}]", out)
    c, n = schema.constraints, len(value)
    _bounds(
        loc, _count(c.get("min_items")), _count(c.get("max_items")), n, " items", f"{n} items", out
    )
    return out


def is_valid(schema: Schema, value: JSONValue) -> bool:
    return not validate(schema, value)


def _constraint_problems(schema: Schema, type_: SchemaType, loc: str) -> list[str]:
    c, out = schema.constraints, []
    counts = {
        SchemaType.STRING: ("min_length", "max_length"),
        SchemaType.LIST: ("min_items", "max_items"),
    }
    for key in counts.get(type_, ()):
        value, n = c.get(key), _count(c.get(key))
        if value is not None and (n is None or n < 0):
            out.append(
                f"{loc}.constraints.{key}: must be a non-negative integer, got {show(value)}"
            )
    if type_ in (SchemaType.FLOAT, SchemaType.INTEGER):
        for key in ("min", "max"):
            value = c.get(key)
            if value is not None and not _is_number(value):
                out.append(f"{loc}.constraints.{key}: must be a number, got {show(value)}")
    pattern = c.get("pattern")
    bad_pattern = not isinstance(pattern, str) or _compile(pattern) is None
    if type_ is SchemaType.STRING and pattern is not None and bad_pattern:
        out.append(f"{loc}.constraints.pattern: not a valid regular expression: {show(pattern)}")
    is_open = c.get("open")
    if type_ is SchemaType.OBJECT and is_open is not None and not isinstance(is_open, bool):
        out.append(f"{loc}.constraints.open: must be a boolean, got {show(is_open)}")
    return out


def _problems(schema: object, loc: str) -> list[str]:
    if not isinstance(schema, Schema):
        return [f"{loc}: expected a Schema, got {type(schema).__name__}"]
    out: list[str] = []
    type_ = schema.type if isinstance(schema.type, SchemaType) else None
    if type_ is None:
        out.append(f"{loc}: unknown schema type {show(schema.type)}")
    if not isinstance(schema.required, bool):
        out.append(f"{loc}.required: must be a boolean, got {show(schema.required)}")
    for attr in ("constraints", "metadata"):
        out.extend(f"{loc}.{e}" for e in durable_errors(getattr(schema, attr), attr))
    out.extend(f"{loc}.{e}" for e in durable_errors(list(schema.values), "values"))
    if schema.values and type_ is not SchemaType.ENUM:
        out.append(f"{loc}.values: only enum schemas have values")
    if schema.fields and type_ is not SchemaType.OBJECT:
        out.append(f"{loc}.fields: only object schemas have fields")
    for name, child in schema.fields.items():
        if not isinstance(name, str) or name.startswith("$"):
            out.append(f"{loc}.fields: invalid field name {show(name)}")
        else:
            out.extend(_problems(child, f"{loc}.fields.{name}"))
    if type_ is SchemaType.LIST:
        if schema.item is None:
            out.append(f"{loc}.item: a list schema needs an item schema")
        else:
            out.extend(_problems(schema.item, f"{loc}.item"))
    elif schema.item is not None:
        out.append(f"{loc}.item: only list schemas have an item schema")
    if type_ is not None:
        out.extend(_constraint_problems(schema, type_, loc))
    if schema.default is not NO_DEFAULT:
        errors = durable_errors(schema.default, "default")
        out.extend(f"{loc}.{e}" for e in errors)
        if not out:  # checking the default is only meaningful on a well-formed schema
            out.extend(f"{loc}.default: {r}" for r in validate(schema, schema.default, "default"))
    return out


def schema_problems(schema: object, loc: str = "schema") -> list[str]:
    """Why ``schema`` is not a well-formed schema (empty when it is).

    Checks: known type; boolean ``required``; durable ``values``/``constraints``/``metadata``;
    ``values`` only on enums, ``fields`` only on objects, ``item`` exactly on lists; field
    names are strings without ``$``; children well formed; known constraints of the right
    kind (``min``/``max`` numbers, length/item bounds non-negative integers, ``pattern`` a
    compilable regex, ``open`` a boolean); a default that is durable and valid.
    """
    return _problems(schema, loc)


# -- JSON form ------------------------------------------------------------------------------

_SCHEMA_KEYS: Final = frozenset(
    {"type", "fields", "item", "values", "required", "default", "constraints", "metadata"}
)


def _durable_copy(value: object, path: Path) -> JSONValue:
    return coerce_durable(value, format_path(path))


def _dump(schema: object, path: Path) -> JSONDict:
    if not isinstance(schema, Schema):
        raise SchemaFormatError(path, f"expected a Schema, got {type(schema).__name__}")
    type_name = _type_name(schema.type)
    if type_name is None:
        raise SchemaFormatError((*path, "type"), f"unknown schema type {show(schema.type)}")
    doc: JSONDict = {"type": type_name.value}
    if schema.fields:
        fields: JSONDict = {}
        for name, child in schema.fields.items():
            if not isinstance(name, str) or name.startswith("$"):
                raise SchemaFormatError((*path, "fields"), f"invalid field name {show(name)}")
            fields[name] = _dump(child, (*path, "fields", name))
        doc["fields"] = fields
    if schema.item is not None:
        doc["item"] = _dump(schema.item, (*path, "item"))
    if schema.values:
        doc["values"] = _durable_copy(list(schema.values), (*path, "values"))
    if schema.required is True:
        doc["required"] = True
    elif schema.required is not False:
        raise SchemaFormatError((*path, "required"), "must be a boolean")
    if schema.default is not NO_DEFAULT:
        doc["default"] = _durable_copy(schema.default, (*path, "default"))
    if schema.constraints:
        doc["constraints"] = _durable_copy(schema.constraints, (*path, "constraints"))
    if schema.metadata:
        doc["metadata"] = _durable_copy(schema.metadata, (*path, "metadata"))
    return doc


def schema_to_json(schema: Schema) -> JSONDict:
    """The JSON form of a schema (the wire form and the durable form are the same).

    ``type`` is always present; ``fields``/``item``/``values``/``constraints``/``metadata``
    are omitted when empty, ``required`` when false. ``default`` is omitted only for
    ``NO_DEFAULT``: a ``None`` default is written as ``null``. Str-valued enum members in
    open content become plain strings.

    Raises ``NonDurableValue`` for non-durable content and ``SchemaFormatError`` for a
    structure that cannot be written (unknown type, a child that is not a ``Schema``, a
    ``$`` field name, a non-boolean ``required``).
    """
    return _dump(schema, ())


def expect_durable(
    value: object, path: Path, error: type[FormatError], what: str = "value"
) -> JSONValue:
    """``value`` if it is durable, else raise ``error`` at ``path`` (shared by the loaders)."""
    problems = durable_errors(value, what)
    if problems:
        raise error(path, f"not a durable value: {problems[0]}")
    return cast("JSONValue", value)  # checked just above


def expect_object(value: object, path: Path, error: type[FormatError], what: str) -> JSONDict:
    """``value`` as a JSON object with string keys, else raise ``error`` at ``path``."""
    if not isinstance(value, dict):
        raise error(path, f"{what} must be a JSON object, got {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise error(path, f"{what} has a non-string key {key!r}")
    return cast("JSONDict", value)  # keys checked; values are checked by the caller


def expect_keys(
    doc: JSONDict, allowed: frozenset[str], path: Path, error: type[FormatError]
) -> None:
    """Raise ``error`` for the first (sorted) key of ``doc`` not in ``allowed``."""
    for key in sorted(doc):
        if key not in allowed:
            raise error((*path, key), "unknown key")


def _load(doc: object, path: Path) -> Schema:
    obj = expect_object(doc, path, SchemaFormatError, "a schema")
    expect_keys(obj, _SCHEMA_KEYS, path, SchemaFormatError)
    if "type" not in obj:
        raise SchemaFormatError(path, "missing key 'type'")
    type_name = obj["type"]
    if not isinstance(type_name, str) or _type_name(type_name) is None:
        raise SchemaFormatError((*path, "type"), f"unknown schema type {show(type_name)}")
    fields_doc = expect_object(
        obj.get("fields", {}), (*path, "fields"), SchemaFormatError, "fields"
    )
    fields: dict[str, Schema] = {}
    for name, child in fields_doc.items():
        if name.startswith("$"):
            raise SchemaFormatError((*path, "fields", name), "field names must not start with '$'")
        fields[name] = _load(child, (*path, "fields", name))
    item_doc = obj.get("item")
    values = obj.get("values", [])
    if not isinstance(values, list):
        raise SchemaFormatError((*path, "values"), "must be a list")
    required = obj.get("required", False)
    if not isinstance(required, bool):
        raise SchemaFormatError((*path, "required"), "must be a boolean")
    default: JSONValue | NoDefaultType = NO_DEFAULT
    if "default" in obj:
        default = expect_durable(obj["default"], (*path, "default"), SchemaFormatError)
    open_maps = {}
    for key in ("constraints", "metadata"):
        raw = expect_object(obj.get(key, {}), (*path, key), SchemaFormatError, key)
        open_maps[key] = cast("JSONDict", expect_durable(raw, (*path, key), SchemaFormatError))
    return Schema(
        _type_name(type_name) or type_name,
        fields=fields,
        item=None if item_doc is None else _load(item_doc, (*path, "item")),
        values=cast(
            "list[JSONValue]", expect_durable(values, (*path, "values"), SchemaFormatError)
        ),
        required=required,
        default=default,
        constraints=open_maps["constraints"],
        metadata=open_maps["metadata"],
    )


def schema_from_json(doc: object, at: Sequence[str | int] = ()) -> Schema:
    """Parse the JSON form strictly; raise ``SchemaFormatError`` on any problem.

    Rejected: a non-object, unknown keys, a missing or unknown ``type``, ``$`` field names,
    wrongly typed attributes, non-durable content. Explicit empty values (``"item": null``,
    ``"fields": {}``, ``"required": false``) are accepted. ``at`` is the location of ``doc``
    inside a larger document; error paths start with it.
    """
    return _load(doc, tuple(at))


# -- equality -------------------------------------------------------------------------------


def strict_key(value: JSONValue) -> Hashable:
    """A hashable, type-tagged key: equal keys iff the values are strictly equal.

    ``True``, ``1`` and ``1.0`` all differ; lists compare element-wise, dicts by their
    (key, value) pairs. Used for enum membership and for dedupe in reducers.
    """
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", int(value))
    if isinstance(value, builtins.float):
        return ("float", builtins.float(value))
    if isinstance(value, str):
        return ("str", str.__str__(value))
    if isinstance(value, list):
        return ("list", tuple(strict_key(element) for element in value))
    if isinstance(value, dict):
        return ("map", frozenset((str.__str__(k), strict_key(v)) for k, v in value.items()))
    return ("other", type(value).__name__, repr(value))  # not durable; never equal to durable


def loose_equal(a: JSONValue, b: JSONValue) -> bool:
    """Equality with ``1 == 1.0`` (recursively, through lists and dicts) where a bool never
    equals a number. Used by the guard ``equals``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(loose_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(loose_equal(a[k], b[k]) for k in a)
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return a is None and b is None
