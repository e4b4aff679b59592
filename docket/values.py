"""Durable values, canonical JSON, hashing and timestamps (layer 1).

A *durable value* is the only kind of data docket stores or hashes: ``None``,
``bool``, ``int``, finite ``float``, ``str``, ``list`` of durable values and
``dict`` with ``str`` keys that do not start with ``$``. One rule, used for graph
config, metadata, policies, run inputs, node writes and event payloads.

Canonical JSON (sorted keys, no whitespace, UTF-8, NaN/Infinity rejected) is the
single encoding behind every content hash. Python's ``json`` keeps ``1`` and
``1.0`` distinct (``"1"`` vs ``"1.0"``), which is what we want: they are
different values and must hash differently.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeGuard, cast

import orjson
from typing_extensions import TypeAliasType

# Real runtime aliases (not strings) so cattrs can recognise durable fields in records.
JSONValue = TypeAliasType(
    "JSONValue", "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"
)
JSONDict = TypeAliasType("JSONDict", "dict[str, JSONValue]")

#: The one key a document may use with a ``$`` prefix (guard expressions in JSON).
GUARD_TAG = "$guard"

__all__ = [
    "GUARD_TAG",
    "JSONDict",
    "JSONValue",
    "NonDurableValue",
    "canonical_json",
    "canonical_json_as",
    "canonical_json_of_checked",
    "coerce_durable",
    "content_hash",
    "durable_errors",
    "encoder_for",
    "ensure_durable",
    "from_micros",
    "is_durable",
    "sha256_hex",
    "to_micros",
    "utc",
]


class NonDurableValue(ValueError):
    """A value that docket cannot store: carries every reason, each with a path."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = tuple(reasons)
        super().__init__("; ".join(reasons))


def durable_errors(value: object, path: str = "$", *, allow_guard_tag: bool = False) -> list[str]:
    """Every reason ``value`` is not durable, as ``"<path>: <reason>"``; empty if durable."""
    if _durable_kind(value, allow_guard_tag) != _NOT_PLAIN:
        return []
    errors: list[str] = []
    _walk(value, path, errors, allow_guard_tag)
    return errors


# What _durable_kind found: not decided (take _walk), durable and made only of the types
# orjson encodes to exactly our canonical bytes, or durable but for the json module only
# (floats, whose text differs between the two; ints beyond 64 bits; str/int subclasses).
_NOT_PLAIN, _ORJSON_SAFE, _DURABLE = 0, 1, 2
_SAFE_LEAVES: frozenset[type] = frozenset({str, bool, type(None)})
_INT_MIN, _UINT_MAX = -(1 << 63), (1 << 64) - 1  # orjson's integer range


#: Lists and objects nest at most this deep in a durable value: deeper ones would overflow
#: recursive encoders, copies and drivers (and no workflow state needs them).
MAX_DEPTH = 128


def _durable_kind(value: Any, allow_guard: bool, depth: int = 0) -> int:
    """Classify ``value`` in one pass without building a path string per container.

    The common case is decided here; ``_NOT_PLAIN`` (a bad value, or an odd type such as
    a dict subclass or a str-subclass key) leaves the verdict and reasons to :func:`_walk`.
    Containers first (they are what a walk meets most), and empty ones are settled without
    a call.
    """
    cls = type(value)
    if cls is dict:
        if depth >= MAX_DEPTH:
            return _NOT_PLAIN  # _walk says why
        kind = _ORJSON_SAFE
        for key, item in value.items():
            if type(key) is not str:
                return _NOT_PLAIN
            if key[:1] == "$" and not (allow_guard and key == GUARD_TAG):
                return _NOT_PLAIN
            item_cls = type(item)
            if item_cls in _SAFE_LEAVES:
                continue
            if (item_cls is dict or item_cls is list) and not item and depth < MAX_DEPTH - 1:
                continue
            found = _durable_kind(item, allow_guard, depth + 1)
            if found == _NOT_PLAIN:
                return _NOT_PLAIN
            if found == _DURABLE:
                kind = _DURABLE
        return kind
    if cls in _SAFE_LEAVES:
        return _ORJSON_SAFE
    if cls is list:
        if depth >= MAX_DEPTH:
            return _NOT_PLAIN
        kind = _ORJSON_SAFE
        for item in value:
            if type(item) in _SAFE_LEAVES:
                continue
            found = _durable_kind(item, allow_guard, depth + 1)
            if found == _NOT_PLAIN:
                return _NOT_PLAIN
            if found == _DURABLE:
                kind = _DURABLE
        return kind
    if cls is int:
        return _ORJSON_SAFE if _INT_MIN <= value <= _UINT_MAX else _DURABLE
    if cls is float:
        return _DURABLE if math.isfinite(value) else _NOT_PLAIN
    if isinstance(value, enum.StrEnum):  # a str whose text is its value, for both encoders
        return _ORJSON_SAFE
    # Other subclasses of str and int are durable leaves too, as in _walk.
    return _DURABLE if isinstance(value, str | int) else _NOT_PLAIN


def encoder_for(value: object, depth: int = 0, *, allow_guard_tag: bool = True) -> bool | None:
    """What :func:`canonical_json` would decide for ``value`` met ``depth`` levels inside a
    document: ``True`` orjson gives the canonical bytes, ``False`` durable but the json
    module must encode it, ``None`` not plainly durable there (let canonical_json say why).

    For encoders that assemble a document from parts whose other members they have
    checked themselves, so the parts are not walked a second time.
    """
    kind = _durable_kind(value, allow_guard_tag, depth)
    return None if kind == _NOT_PLAIN else kind == _ORJSON_SAFE


def canonical_json_as(value: object, orjson_ok: bool) -> bytes:
    """:func:`canonical_json` of a value :func:`encoder_for` found durable (``orjson_ok``
    is its answer): the same bytes and errors, without classifying the value again."""
    if orjson_ok:
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # e.g. a lone surrogate: json decides, as in canonical_json
            pass
    return canonical_json_of_checked(value)


#: Exact types that are always durable leaves (subclasses take the full checks below).
_LEAF_TYPES: frozenset[type] = frozenset({str, int, bool, type(None)})


def _walk(value: object, path: str, errors: list[str], allow_guard: bool, depth: int = 0) -> None:
    # Fast path: exact str/int/bool/None need no path and no recursion; the
    # checks below decide everything else, in the same order as before.
    cls = type(value)
    if cls in _LEAF_TYPES:
        return
    # bool before int: bool is a subclass of int and is its own durable kind.
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            errors.append(f"{path}: non-finite float {value!r} is not durable")
        return
    if depth >= MAX_DEPTH and isinstance(value, list | dict):
        errors.append(f"{path}: lists and objects nest deeper than {MAX_DEPTH} levels")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            if type(item) in _LEAF_TYPES:
                continue
            _walk(item, f"{path}[{index}]", errors, allow_guard, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                errors.append(f"{path}: key {key!r} is not a string")
                continue
            if key.startswith("$") and not (allow_guard and key == GUARD_TAG):
                errors.append(f"{path}: key {key!r} starts with '$', which is reserved")
                continue
            if type(item) in _LEAF_TYPES:
                continue
            _walk(item, f"{path}.{key}", errors, allow_guard, depth + 1)
        return
    if isinstance(value, tuple):
        errors.append(f"{path}: tuple is not durable (use a list)")
        return
    errors.append(f"{path}: {cls.__name__} is not durable")


def is_durable(value: object) -> bool:
    return not durable_errors(value)


def ensure_durable(value: object, path: str = "$") -> JSONValue:
    """Return ``value`` unchanged if it is durable, else raise :class:`NonDurableValue`."""
    errors = durable_errors(value, path)
    if errors:
        raise NonDurableValue(errors)
    return cast(JSONValue, value)  # checked structurally just above


#: Exact types whose every value is durable (subclasses, enums included, are not here).
_EXACT_SCALARS: frozenset[type] = frozenset({str, bool, int, type(None)})


def _plain_leaf(value: object) -> TypeGuard[str | int | float | None]:
    """An exact str, bool, int, None or finite float: coerce_durable keeps it as it is."""
    cls = type(value)
    return cls in _EXACT_SCALARS or (cls is float and math.isfinite(cast(float, value)))


def coerce_durable(value: object, path: str = "$", _depth: int = 0) -> JSONValue:
    """Coerce the Python analogues of durable values, then validate.

    ``str``-valued enum members become their value (keys too); everything else must
    already be durable. Key collisions after coercion are rejected.
    """
    if _plain_leaf(value):
        return value  # the usual leaf: durable as it is, nothing to coerce or walk
    if isinstance(value, enum.Enum):
        if isinstance(value.value, str):
            return value.value
        raise NonDurableValue([f"{path}: enum {value!r} has a non-string value"])
    if _depth >= MAX_DEPTH and isinstance(value, list | Mapping):
        raise NonDurableValue([f"{path}: lists and objects nest deeper than {MAX_DEPTH} levels"])
    if isinstance(value, list):
        # Usual leaves are kept without a call or a path: a list of numbers is common state.
        return [
            item if _plain_leaf(item) else coerce_durable(item, f"{path}[{i}]", _depth + 1)
            for i, item in enumerate(value)
        ]
    if isinstance(value, Mapping):
        out: dict[str, JSONValue] = {}
        for key, item in value.items():
            name = key.value if isinstance(key, enum.Enum) and isinstance(key.value, str) else key
            if not isinstance(name, str):
                raise NonDurableValue([f"{path}: key {key!r} is not a string"])
            if name in out:
                raise NonDurableValue([f"{path}: key {name!r} appears twice after coercion"])
            out[name] = coerce_durable(item, f"{path}.{name}", _depth + 1)
        return ensure_durable(out, path)
    return ensure_durable(value, path)


def canonical_json(value: object) -> bytes:
    """Deterministic bytes of a durable value (sorted keys, no whitespace, UTF-8).

    Raises :class:`NonDurableValue` for anything that is not a durable value (the
    ``$guard`` tag is allowed so graph documents can be hashed).

    Values without floats are encoded by orjson (the same bytes,
    several times faster: tests/test_values_canonical.py compares the two); floats
    always go through the json module, whose float text is the canonical one.
    """
    kind = _durable_kind(value, True)
    if kind == _ORJSON_SAFE:
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # e.g. a lone surrogate, or very deep nesting: json decides
            pass
    elif kind == _NOT_PLAIN:
        errors = durable_errors(value, allow_guard_tag=True)
        if errors:
            raise NonDurableValue(errors)
    return canonical_json_of_checked(value)


def canonical_json_of_checked(value: object) -> bytes:
    """:func:`canonical_json` of a value the caller has *already* checked to be durable
    (e.g. with :func:`durable_errors`): the same bytes, without walking the value again.
    Never call it on unchecked input."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_hash(value: object) -> str:
    """Lowercase hex SHA-256 of the canonical JSON of ``value``."""
    return sha256_hex(canonical_json(value))


# -- timestamps ---------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utc(moment: datetime) -> datetime:
    """Normalise an aware datetime to UTC; naive datetimes are refused (ambiguous)."""
    if moment.__class__ is datetime and moment.tzinfo is UTC:
        return moment  # already normalised (astimezone would return an equal copy)
    if not isinstance(moment, datetime):
        raise TypeError(f"expected a datetime, got {type(moment).__name__}")
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"naive datetime {moment.isoformat()} is ambiguous; pass an aware one")
    return moment.astimezone(UTC)


def to_micros(moment: datetime) -> int:
    """Whole microseconds since the Unix epoch (exact: no float rounding)."""
    delta = utc(moment) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)
