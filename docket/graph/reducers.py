"""Reducers: how the writes to one state field in one superstep fold into its value.

Public API
----------
- ``ReducerType``: ``last_value first_value append union merge sum`` (``StrEnum``).
- ``Reducer``: frozen record ``(type, opts)``; ``R.last_value() R.first_value()
  R.append(unique=, max_length=) R.union(by=) R.merge(deep=) R.sum()`` build one.
- ``normalize_reducer(value) -> object``: shorthand (``"append"``, ``("append", {...})``) to a
  ``Reducer``; anything else is returned unchanged.
- ``Unset`` / ``UNSET`` / ``Current``: the value a reducer folds into, or "nothing yet".
- ``reduce(reducer, current, writes) -> JSONValue``: fold one step's writes (``None`` reducer
  behaves as ``last_value``).
- ``zero(reducer)``, ``effective_default(default, reducer)``, ``fold_base(committed, default)``:
  the channel default and the base of the first commit.
- ``write_schema(reducer, field_schema, write)`` / ``validate_write(...) -> list[str]``: what a
  single node write is checked against.
- ``reducer_problems(reducer) -> list[str]``, ``reducer_schema_mismatch(reducer, schema)``,
  ``is_ambiguous_list_write(reducer, schema)``: compile-time checks.
- ``FieldRule``, ``validate_update``, ``commit_step``: the deterministic commit of one superstep
  (writers sorted by node id, fold, then the committed value re-validated against the field
  schema), with ``AcceptedUpdate``/``RejectedUpdate`` and ``StepCommit``/``StepRejected``.
- ``reducer_to_json`` / ``reducer_from_json`` (strict, ``ReducerFormatError``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from enum import Enum, StrEnum
from typing import Final, Literal, TypeAlias, TypeGuard

import attrs

from docket.graph.schema import (
    NO_DEFAULT,
    FormatError,
    Schema,
    SchemaType,
    expect_durable,
    expect_keys,
    expect_object,
    show,
    strict_key,
    validate,
    validate_appended,
)
from docket.values import JSONDict, JSONValue, NonDurableValue, coerce_durable, durable_errors

__all__ = [
    "UNSET",
    "AcceptedUpdate",
    "Current",
    "FieldRule",
    "R",
    "Reducer",
    "ReducerFormatError",
    "ReducerType",
    "RejectedUpdate",
    "StepCommit",
    "StepRejected",
    "Unset",
    "commit_step",
    "effective_default",
    "fold_base",
    "is_ambiguous_list_write",
    "normalize_reducer",
    "reduce",
    "reducer_from_json",
    "reducer_problems",
    "reducer_schema_mismatch",
    "reducer_to_json",
    "validate_update",
    "validate_write",
    "write_schema",
    "zero",
]


class ReducerType(StrEnum):
    LAST_VALUE = "last_value"
    FIRST_VALUE = "first_value"
    APPEND = "append"
    UNION = "union"
    MERGE = "merge"
    SUM = "sum"


class Unset(Enum):
    """One-member enum: the field has no value to fold into."""

    TOKEN = "UNSET"


UNSET: Final = Unset.TOKEN
Current: TypeAlias = "JSONValue | Literal[Unset.TOKEN]"


class ReducerFormatError(FormatError):
    """A reducer document is malformed."""


def _to_type(value: str) -> ReducerType | str:
    return _type_of(value) or value  # an unknown name is kept for reducer_problems


def _json_map(value: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
    return dict(value)


@attrs.frozen
class Reducer:
    """A reducer descriptor; an unknown ``type`` name is kept as ``str`` for diagnostics."""

    type: ReducerType | str = attrs.field(converter=_to_type)
    opts: dict[str, JSONValue] = attrs.field(factory=dict, converter=_json_map)


class R:
    """Reducer constructors; options left at their defaults are not stored."""

    @staticmethod
    def last_value() -> Reducer:
        return Reducer(ReducerType.LAST_VALUE)

    @staticmethod
    def first_value() -> Reducer:
        return Reducer(ReducerType.FIRST_VALUE)

    @staticmethod
    def append(*, unique: bool = False, max_length: int | None = None) -> Reducer:
        opts: JSONDict = {}
        if unique:
            opts["unique"] = True
        if max_length is not None:
            opts["max_length"] = max_length
        return Reducer(ReducerType.APPEND, opts)

    @staticmethod
    def union(*, by: str | Sequence[str] | None = None) -> Reducer:
        if by is None:
            return Reducer(ReducerType.UNION)
        return Reducer(ReducerType.UNION, {"by": by if isinstance(by, str) else list(by)})

    @staticmethod
    def merge(*, deep: bool = False) -> Reducer:
        return Reducer(ReducerType.MERGE, {"deep": True} if deep else {})

    @staticmethod
    def sum() -> Reducer:
        return Reducer(ReducerType.SUM)


def _type_of(value: object) -> ReducerType | None:
    if isinstance(value, Enum):
        value = value.value
    if not isinstance(value, str):
        return None
    try:
        return ReducerType(str.__str__(value))
    except ValueError:
        return None


def normalize_reducer(value: object) -> object:
    """A ``Reducer`` from shorthand, else ``value`` unchanged (the compiler reports it).

    Shorthand: a type name (``"append"`` or ``ReducerType.APPEND``) or ``(type, opts)`` with
    ``opts`` a mapping with string keys. A ``Reducer`` and ``None`` pass through.
    """
    if isinstance(value, tuple) and len(value) == 2:
        type_, opts = _type_of(value[0]), value[1]
        string_keys = isinstance(opts, Mapping) and all(isinstance(k, str) for k in opts)
        if type_ is None or not string_keys:
            return value
        return Reducer(type_, {str.__str__(k): v for k, v in opts.items()})
    type_ = _type_of(value)
    return value if type_ is None or isinstance(value, Reducer) else Reducer(type_)


# -- folding ------------------------------------------------------------------------------------


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _positive_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _flatten(base: list[JSONValue], writes: Sequence[JSONValue]) -> list[JSONValue]:
    """``base`` then every write: a list write adds its elements, anything else (``None``
    included) is one element."""
    out = list(base)
    for write in writes:
        if isinstance(write, list):
            out.extend(write)
        else:
            out.append(write)
    return out


def _dedupe(items: list[JSONValue], key: Callable[[JSONValue], Hashable]) -> list[JSONValue]:
    seen: set[Hashable] = set()
    out: list[JSONValue] = []
    for element in items:
        k = key(element)
        if k not in seen:
            seen.add(k)
            out.append(element)
    return out


def _by_path(by: JSONValue) -> list[str] | None:
    if isinstance(by, str):
        return [by]
    if isinstance(by, list) and by and all(isinstance(seg, str) for seg in by):
        return [str(seg) for seg in by]
    return None


def _union_key(by: list[str]) -> Callable[[JSONValue], Hashable]:
    def key(element: JSONValue) -> Hashable:
        node = element
        for seg in by:
            if not isinstance(node, dict) or seg not in node:
                return ("whole", strict_key(element))
            node = node[seg]
        return ("by", strict_key(node))

    return key


def _deep_merge(left: JSONDict, right: JSONDict) -> JSONDict:
    out = dict(left)
    for key, value in right.items():
        old = out.get(key)
        out[key] = (
            _deep_merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return out


def reduce(reducer: Reducer | None, current: Current, writes: Sequence[JSONValue]) -> JSONValue:
    """Fold ``writes`` (non-empty, in writer order) into ``current``.

    - ``last_value`` (and ``None``): the last write.
    - ``first_value``: ``current`` if set, else the first write.
    - ``append``: the current list (else ``[]``) then each write; a list write adds its
      elements, any other write is one element. ``unique`` keeps first occurrences (strict
      equality), then ``max_length`` keeps the last n.
    - ``union``: like ``append``, then dedupe keeping first occurrences; with ``by`` the key
      is the value at that key path, or the whole element when the path is missing (the two
      kinds of key never collide).
    - ``merge``: dict writes fold into the current dict (else ``{}``), later keys win;
      ``deep`` merges nested dicts. Non-dict writes are ignored.
    - ``sum``: the current number (else 0) plus every numeric write; others are ignored.

    Options of the wrong type are ignored here; ``reducer_problems`` reports them.
    """
    if not writes:
        raise ValueError("reduce needs at least one write")
    type_ = ReducerType.LAST_VALUE if reducer is None else reducer.type
    opts = {} if reducer is None else reducer.opts
    base: JSONValue = None if current is UNSET else current
    match type_:
        case ReducerType.LAST_VALUE:
            return writes[-1]
        case ReducerType.FIRST_VALUE:
            return writes[0] if current is UNSET else base
        case ReducerType.APPEND:
            items = _flatten(base if isinstance(base, list) else [], writes)
            if opts.get("unique") is True:
                items = _dedupe(items, strict_key)
            max_length = opts.get("max_length")
            return items[-max_length:] if _positive_int(max_length) else items
        case ReducerType.UNION:
            items = _flatten(base if isinstance(base, list) else [], writes)
            by = _by_path(opts.get("by"))
            return _dedupe(items, strict_key if by is None else _union_key(by))
        case ReducerType.MERGE:
            merged: JSONDict = dict(base) if isinstance(base, dict) else {}
            deep = opts.get("deep") is True
            for write in writes:
                if isinstance(write, dict):
                    merged = _deep_merge(merged, write) if deep else {**merged, **write}
            return merged
        case ReducerType.SUM:
            total: int | float = base if _is_number(base) else 0
            for write in writes:
                if _is_number(write):
                    total += write
            return total
    raise ValueError(f"unknown reducer type {show(type_)}")


def zero(reducer: Reducer | None) -> JSONValue:
    """``[]`` for append/union, ``{}`` for merge, ``0`` for sum, else ``None``."""
    type_ = None if reducer is None else reducer.type
    if type_ in (ReducerType.APPEND, ReducerType.UNION):
        return []
    if type_ is ReducerType.MERGE:
        return {}
    if type_ is ReducerType.SUM:
        return 0
    return None


def effective_default(default: JSONValue, reducer: Reducer | None) -> JSONValue:
    """The channel default of a state field: its own default whenever it is not ``None``
    (``False``, ``0`` and ``""`` included), else the reducer's zero."""
    return zero(reducer) if default is None else default


def fold_base(committed: Current, default: JSONValue) -> Current:
    """What a commit folds into: the committed value if the channel was ever written, else
    the channel default (see ``effective_default``) unless it is ``None``, else ``UNSET``.
    So for ``first_value`` a default counts as already set."""
    if committed is not UNSET:
        return committed
    return UNSET if default is None else default


# -- write validation ---------------------------------------------------------------------


def write_schema(
    reducer: Reducer | None, field_schema: Schema | None, write: JSONValue
) -> Schema | None:
    """The schema one node write is validated against (``None``: not validated).

    - ``append``/``union``: a list write is a ``list`` of the field's item schema, without
      the field's constraints; any other write is checked against the item schema.
    - ``merge`` on an ``object``: the object with every top-level field optional, no
      default, and ``None`` rejected (unknown keys still rejected unless open); on a ``map``:
      a required bare map.
    - ``sum``: a required bare number of the field's type (constraints dropped here; the
      committed total is re-validated by ``commit_step``).
    - ``last_value``/``first_value``/``None``: the field schema.
    """
    if field_schema is None:
        return None
    type_ = ReducerType.LAST_VALUE if reducer is None else reducer.type
    kind = field_schema.type
    if type_ in (ReducerType.APPEND, ReducerType.UNION):
        if isinstance(write, list):
            return Schema(SchemaType.LIST, item=field_schema.item)
        return field_schema.item
    if type_ is ReducerType.MERGE and kind is SchemaType.OBJECT:
        relaxed = {
            name: attrs.evolve(child, required=False) for name, child in field_schema.fields.items()
        }
        return attrs.evolve(field_schema, fields=relaxed, required=True, default=NO_DEFAULT)
    if type_ is ReducerType.MERGE and kind is SchemaType.MAP:
        return Schema(SchemaType.MAP, required=True)
    if type_ is ReducerType.SUM and kind in (SchemaType.FLOAT, SchemaType.INTEGER):
        return Schema(kind, required=True)
    return field_schema


def validate_write(
    reducer: Reducer | None, field_schema: Schema | None, write: JSONValue
) -> list[str]:
    """Reasons a single write is invalid for this field (empty means valid)."""
    schema = write_schema(reducer, field_schema, write)
    return [] if schema is None else validate(schema, write)


# -- compile-time checks --------------------------------------------------------------------

_NEEDS: Final = {
    ReducerType.APPEND: (SchemaType.LIST,),
    ReducerType.UNION: (SchemaType.LIST,),
    ReducerType.SUM: (SchemaType.FLOAT, SchemaType.INTEGER),
    ReducerType.MERGE: (SchemaType.MAP, SchemaType.OBJECT),
}


def reducer_problems(reducer: object) -> list[str]:
    """Why ``reducer`` is not a usable reducer descriptor (empty when it is).

    Unknown type; non-durable opts; ``append.unique`` not a bool; ``append.max_length`` not
    a positive int; ``union.by`` not a string or a non-empty list of strings; ``merge.deep``
    not a bool. Other opts are stored and ignored.
    """
    if not isinstance(reducer, Reducer):
        return [f"expected a Reducer, got {type(reducer).__name__}"]
    if not isinstance(reducer.type, ReducerType):
        return [f"unknown reducer type {show(reducer.type)}"]
    opts = reducer.opts
    out = [f"reducer {e}" for e in durable_errors(opts, "opts")]
    type_name = reducer.type.value

    def check(key: str, ok: Callable[[JSONValue], bool], expected: str) -> None:
        if key in opts and not ok(opts[key]):
            out.append(f"{type_name} option {key!r} must be {expected}, got {show(opts[key])}")

    match reducer.type:
        case ReducerType.APPEND:
            check("unique", lambda v: isinstance(v, bool), "a boolean")
            check("max_length", _positive_int, "a positive integer")
        case ReducerType.UNION:
            check("by", lambda v: _by_path(v) is not None, "a string or non-empty list of strings")
        case ReducerType.MERGE:
            check("deep", lambda v: isinstance(v, bool), "a boolean")
    return out


def reducer_schema_mismatch(reducer: Reducer, schema: Schema) -> str | None:
    """A message when the reducer cannot work on this field type (append on a string...)."""
    needs = _NEEDS.get(reducer.type) if isinstance(reducer.type, ReducerType) else None
    if needs is None or schema.type in needs:
        return None
    wanted = " or ".join(t.value for t in needs)
    return f"reducer {reducer.type} needs a {wanted} field, got {show(str(schema.type))}"


def is_ambiguous_list_write(reducer: Reducer, schema: Schema) -> bool:
    """True for append/union on a list of lists: a list write is then ambiguous."""
    return (
        reducer.type in (ReducerType.APPEND, ReducerType.UNION)
        and schema.type is SchemaType.LIST
        and isinstance(schema.item, Schema)
        and schema.item.type is SchemaType.LIST
    )


# -- the commit of one superstep -------------------------------------------------------------


@attrs.frozen
class FieldRule:
    """What the commit needs to know about one state field (``default`` ``None`` = none)."""

    schema: Schema | None = None
    reducer: Reducer | None = None
    default: JSONValue = None


@attrs.frozen
class AcceptedUpdate:
    values: JSONDict


@attrs.frozen
class RejectedUpdate:
    reasons: tuple[str, ...]


@attrs.frozen
class StepCommit:
    """The new committed value of every field written this step, and its writers in fold
    order. ``changed`` is write-based: a field rewritten with an equal value is changed."""

    values: JSONDict
    writers: dict[str, tuple[str, ...]]

    @property
    def changed(self) -> frozenset[str]:
        return frozenset(self.values)


@attrs.frozen
class StepRejected:
    """Nothing commits; ``errors`` maps each failing node id to its reasons."""

    errors: dict[str, tuple[str, ...]]


def validate_update(
    node_id: str, update: object, fields: Mapping[str, FieldRule], inputs: Collection[str]
) -> AcceptedUpdate | RejectedUpdate:
    """Check one node's returned update: a mapping, durable (str-valued enum members become
    strings), and every key a state field whose write is valid for its reducer. Keys are
    checked in sorted order; the accepted values are the coerced ones."""
    if not isinstance(update, Mapping):
        reason = f'node "{node_id}" must return a state update map, got {show(update)}'
        return RejectedUpdate((reason,))
    try:
        values = coerce_durable(update, "update")
    except NonDurableValue as exc:
        return RejectedUpdate((f'node "{node_id}" returned a non-durable update: {exc}',))
    assert isinstance(values, dict)  # coerce_durable turns a Mapping into a dict
    reasons: list[str] = []
    for key in sorted(values):
        rule = fields.get(key)
        if rule is not None:
            prefix = f'node "{node_id}" wrote invalid value to "{key}": '
            reasons.extend(
                prefix + r for r in validate_write(rule.reducer, rule.schema, values[key])
            )
        elif key in inputs:
            reasons.append(f'node "{node_id}" wrote "{key}", which is an input and read-only')
        else:
            reasons.append(f'node "{node_id}" wrote unknown field "{key}"')
    return RejectedUpdate(tuple(reasons)) if reasons else AcceptedUpdate(values)


def commit_step(
    fields: Mapping[str, FieldRule],
    inputs: Collection[str],
    committed: Mapping[str, JSONValue],
    updates: Mapping[str, object],
    order: Sequence[str] | None = None,
) -> StepCommit | StepRejected:
    """Commit one superstep's updates (node id -> returned update).

    ``order`` lists the writers in the order their writes fold (the barrier passes a map's
    items in item order); by default they are sorted by node id.

    ``committed`` holds the values of the state channels written before (a missing key means
    never written). Each update is checked with ``validate_update``. Writers are sorted by
    node id (code points), so with ``last_value`` the greatest node id wins whatever the
    completion order. Each field's writes fold into ``fold_base`` and the result is
    re-validated against the field schema (a ``sum`` cannot leave ``integer(min=0)``
    negative). Any failure rejects the whole step: each offending node gets its reasons, and
    a committed value that fails re-validation is blamed on every writer of that field.
    """
    errors: dict[str, list[str]] = {}
    grouped: dict[str, list[tuple[str, JSONValue]]] = {}
    for node_id in sorted(updates) if order is None else order:
        result = validate_update(node_id, updates[node_id], fields, inputs)
        if isinstance(result, RejectedUpdate):
            errors[node_id] = list(result.reasons)
            continue
        for key, value in result.values.items():
            grouped.setdefault(key, []).append((node_id, value))
    values: JSONDict = {}
    writers: dict[str, tuple[str, ...]] = {}
    for key in sorted(grouped):
        rule = fields[key]
        previous: Current = committed.get(key, UNSET)
        base = fold_base(previous, effective_default(rule.default, rule.reducer))
        new = reduce(rule.reducer, base, [value for _, value in grouped[key]])
        names = tuple(node_id for node_id, _ in grouped[key])
        for reason in [] if rule.schema is None else _committed_problems(rule, previous, new):
            for node_id in names:
                errors.setdefault(node_id, []).append(
                    f'field "{key}" would commit an invalid value: {reason}'
                )
        values[key], writers[key] = new, names
    if errors:
        return StepRejected({node_id: tuple(errors[node_id]) for node_id in sorted(errors)})
    return StepCommit(values, writers)


def _committed_problems(rule: FieldRule, previous: Current, new: JSONValue) -> list[str]:
    """Why the value a step would commit breaks the field's schema.

    An append that kept the committed list as its prefix (the very same elements, no
    trimming) only needs its new elements and the list bounds checked: the prefix was
    validated when it was committed, under the same schema (a run is pinned to one graph
    version). Long histories then cost a step what it appended, not what came before."""
    assert rule.schema is not None
    if (
        rule.reducer is not None
        and rule.reducer.type is ReducerType.APPEND
        and isinstance(previous, list)
        and isinstance(new, list)
        and len(new) >= len(previous)
        and all(old is kept for old, kept in zip(previous, new))
    ):
        return validate_appended(rule.schema, new, len(previous))
    return validate(rule.schema, new)


# -- JSON form ---------------------------------------------------------------------------------

_REDUCER_KEYS: Final = frozenset({"type", "opts"})


def reducer_to_json(reducer: Reducer) -> JSONDict:
    """``{"type": ..., "opts": {...}}`` with ``opts`` omitted when empty.

    Raises ``ReducerFormatError`` for an unknown type and ``NonDurableValue`` for
    non-durable opts.
    """
    type_ = _type_of(reducer.type)
    if type_ is None:
        raise ReducerFormatError(("type",), f"unknown reducer type {show(reducer.type)}")
    doc: JSONDict = {"type": type_.value}
    if reducer.opts:
        doc["opts"] = coerce_durable(reducer.opts, "$.opts")
    return doc


def reducer_from_json(doc: object, at: Sequence[str | int] = ()) -> Reducer:
    """Parse strictly; raise ``ReducerFormatError`` with the path of the problem.

    Rejected: a non-object, unknown keys, a missing or unknown ``type``, ``opts`` that is not
    a durable object. Unknown opts are kept (stored and ignored). ``at`` prefixes paths.
    """
    path = tuple(at)
    obj = expect_object(doc, path, ReducerFormatError, "a reducer")
    expect_keys(obj, _REDUCER_KEYS, path, ReducerFormatError)
    if "type" not in obj:
        raise ReducerFormatError(path, "missing key 'type'")
    raw_type = obj["type"]
    type_ = _type_of(raw_type) if isinstance(raw_type, str) else None
    if type_ is None:
        raise ReducerFormatError((*path, "type"), f"unknown reducer type {show(raw_type)}")
    opts = expect_object(obj.get("opts", {}), (*path, "opts"), ReducerFormatError, "opts")
    expect_durable(opts, (*path, "opts"), ReducerFormatError)
    return Reducer(type_, opts)
