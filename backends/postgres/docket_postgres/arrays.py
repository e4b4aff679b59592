"""One-dimensional PostgreSQL arrays, encoded to the binary wire format ahead of time.

psycopg's generic list dumper works out the element type of every list it is given
(scanning the list, looking up a dumper per element type, choosing the smallest integer
type that fits) and then dumps element by element through that dumper. For the group
commit, which sends some 25 arrays per statement, that bookkeeping is a noticeable share
of a worker's CPU. The wrappers here know their element type, so they skip all of it:

::

    from docket_postgres import arrays

    arrays.register(conn.adapters)      # once per connection (or on a pool's configure)
    conn.execute(
        "SELECT %s::text[], %s::bigint[]",
        (arrays.TextArray(["a", None]), arrays.Int8Array([1, 2])),
    )

Each wrapper encodes its elements when it is constructed and keeps only the bytes
(``.data``); its dumper hands those bytes to psycopg as they are. The bytes are exactly
what psycopg's own binary list dumper would send for the same list with the same element
type. Elements may be None (a NULL element) in every kind of array.

Element types, per wrapper:

* :class:`TextArray` (``text[]``): ``str``, sent as UTF-8. PostgreSQL text cannot hold
  NUL characters; callers refuse those before they get here.
* :class:`Int8Array` (``bigint[]``) and :class:`Int4Array` (``integer[]``): ``int`` (any
  object with ``__index__``, so also ``bool``) within the type's range; out of range is a
  ValueError.
* :class:`BoolArray` (``boolean[]``): ``bool`` (``1`` and ``0``, being equal to True and
  False, are taken as them).
* :class:`TimestamptzArray` (``timestamptz[]``): timezone-aware ``datetime``; a naive one
  is a TypeError (its instant is unknown, and guessing a zone would shift it silently).
* :class:`ByteaArray` (``bytea[]``): ``bytes``, ``bytearray`` or ``memoryview``.

Any other element is a TypeError raised by the constructor, naming its position.

Only the binary format is provided: the wrappers are for ``%s`` and ``%b`` placeholders
(``%t`` cannot adapt them).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from psycopg import pq
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import AdaptersMap, Dumper

__all__ = [
    "BoolArray",
    "ByteaArray",
    "EncodedArray",
    "Int4Array",
    "Int8Array",
    "TextArray",
    "TimestamptzArray",
    "register",
]

# Element and array type oids (pg_type).
TEXT_OID, TEXT_ARRAY_OID = 25, 1009
INT8_OID, INT8_ARRAY_OID = 20, 1016
INT4_OID, INT4_ARRAY_OID = 23, 1007
BOOL_OID, BOOL_ARRAY_OID = 16, 1000
TIMESTAMPTZ_OID, TIMESTAMPTZ_ARRAY_OID = 1184, 1185
BYTEA_OID, BYTEA_ARRAY_OID = 17, 1001

_pack_len = struct.Struct("!i").pack
# ndim, flags (1: has NULLs), element oid; for one dimension also its length and lower bound.
_pack_empty = struct.Struct("!iiI").pack
_pack_head = struct.Struct("!iiIii").pack
# An element's length word and its value, in one call.
_pack_int8 = struct.Struct("!iq").pack
_pack_int4 = struct.Struct("!ii").pack

_NULL = b"\xff\xff\xff\xff"  # length -1
_BOOLS: dict[object, bytes] = {
    True: b"\x00\x00\x00\x01\x01",
    False: b"\x00\x00\x00\x01\x00",
    None: _NULL,
}
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # PostgreSQL's timestamp epoch
_MICROSECOND = timedelta(microseconds=1)


def _array(element_oid: int, count: int, hasnull: bool, body: bytes) -> bytes:
    if not count:
        # what array_recv expects for '{}' (and what psycopg sends): no dimensions at all
        return _pack_empty(0, 0, element_oid)
    return _pack_head(1, hasnull, element_oid, count, 1) + body


def _position(kind: str, index: int, value: object, expected: str) -> TypeError:
    return TypeError(
        f"{kind} element {index} is {type(value).__name__} {value!r:.80}; expected {expected}"
    )


class EncodedArray:
    """A one-dimensional array already in PostgreSQL's binary format (``data``).

    A plain slotted class rather than an attrs record: it is built on the hot path of
    every group commit, and its one field is computed, not given.
    """

    __slots__ = ("data",)

    element_oid: ClassVar[int]
    array_oid: ClassVar[int]

    data: bytes

    def __init__(self, values: Sequence[Any]) -> None:
        raise NotImplementedError  # each element type encodes in its own subclass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {len(self.data)} bytes>"


class TextArray(EncodedArray):
    """``text[]`` of ``str`` (or None) elements."""

    __slots__ = ()
    element_oid = TEXT_OID
    array_oid = TEXT_ARRAY_OID

    def __init__(self, values: Sequence[str | None]) -> None:
        parts: list[bytes] = []
        append = parts.append
        try:
            for value in values:
                if value is None:
                    append(_NULL)
                else:
                    encoded = value.encode()
                    append(_pack_len(len(encoded)))
                    append(encoded)
        except (AttributeError, TypeError):
            _check(values, "text[]", "str", lambda v: isinstance(v, str))
            raise
        self.data = _array(TEXT_OID, len(values), None in values, b"".join(parts))


class ByteaArray(EncodedArray):
    """``bytea[]`` of ``bytes``/``bytearray``/``memoryview`` (or None) elements."""

    __slots__ = ()
    element_oid = BYTEA_OID
    array_oid = BYTEA_ARRAY_OID

    def __init__(self, values: Sequence[bytes | bytearray | memoryview | None]) -> None:
        parts: list[Buffer] = []
        append = parts.append
        for index, value in enumerate(values):
            if value is None:
                append(_NULL)
                continue
            if type(value) is not bytes:
                if isinstance(value, memoryview):
                    # len() of a memoryview counts items, not bytes
                    value = value.tobytes()
                elif not isinstance(value, bytes | bytearray):
                    raise _position("bytea[]", index, value, "bytes")
            append(_pack_len(len(value)))
            append(value)
        self.data = _array(BYTEA_OID, len(values), None in values, b"".join(parts))


class Int8Array(EncodedArray):
    """``bigint[]`` of ``int`` (or None) elements, each within a signed 64-bit range."""

    __slots__ = ()
    element_oid = INT8_OID
    array_oid = INT8_ARRAY_OID

    def __init__(self, values: Sequence[int | None]) -> None:
        try:
            body = b"".join([_NULL if v is None else _pack_int8(8, v) for v in values])
        except struct.error:
            _check_ints(values, "bigint[]", 64)
            raise
        self.data = _array(INT8_OID, len(values), None in values, body)


class Int4Array(EncodedArray):
    """``integer[]`` of ``int`` (or None) elements, each within a signed 32-bit range."""

    __slots__ = ()
    element_oid = INT4_OID
    array_oid = INT4_ARRAY_OID

    def __init__(self, values: Sequence[int | None]) -> None:
        try:
            body = b"".join([_NULL if v is None else _pack_int4(4, v) for v in values])
        except struct.error:
            _check_ints(values, "integer[]", 32)
            raise
        self.data = _array(INT4_OID, len(values), None in values, body)


class BoolArray(EncodedArray):
    """``boolean[]`` of ``bool`` (or None) elements."""

    __slots__ = ()
    element_oid = BOOL_OID
    array_oid = BOOL_ARRAY_OID

    def __init__(self, values: Sequence[bool | None]) -> None:
        try:
            body = b"".join(map(_BOOLS.__getitem__, values))
        except (KeyError, TypeError):  # TypeError: an unhashable element
            _check(values, "boolean[]", "bool", lambda v: _hashable(v) and v in _BOOLS)
            raise
        self.data = _array(BOOL_OID, len(values), None in values, body)


class TimestamptzArray(EncodedArray):
    """``timestamptz[]`` of timezone-aware ``datetime`` (or None) elements.

    The value sent is the number of microseconds since 2000-01-01 00:00 UTC, computed
    with integer arithmetic (``timedelta // timedelta`` is exact), so no instant moves.
    """

    __slots__ = ()
    element_oid = TIMESTAMPTZ_OID
    array_oid = TIMESTAMPTZ_ARRAY_OID

    def __init__(self, values: Sequence[datetime | None]) -> None:
        try:
            body = b"".join(
                [
                    _NULL if v is None else _pack_int8(8, (v - _EPOCH) // _MICROSECOND)
                    for v in values
                ]
            )
        except (TypeError, struct.error):
            for index, value in enumerate(values):
                if value is None:
                    continue
                if not isinstance(value, datetime):
                    raise _position("timestamptz[]", index, value, "datetime") from None
                if value.utcoffset() is None:
                    raise TypeError(
                        f"timestamptz[] element {index} is a naive datetime ({value}); "
                        "give it a timezone"
                    ) from None
            raise
        self.data = _array(TIMESTAMPTZ_OID, len(values), None in values, body)


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _check(
    values: Sequence[object], kind: str, expected: str, good: Callable[[object], bool]
) -> None:
    """Raise a TypeError naming the first element that is neither None nor ``good``."""
    for index, value in enumerate(values):
        if value is not None and not good(value):
            raise _position(kind, index, value, expected) from None


def _check_ints(values: Sequence[int | None], kind: str, bits: int) -> None:
    """Raise a TypeError/ValueError naming the first element that is not a fitting int."""
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    for index, value in enumerate(values):
        if value is None:
            continue
        try:
            number = value.__index__()
        except (AttributeError, TypeError):
            raise _position(kind, index, value, "int") from None
        if not low <= number <= high:
            raise ValueError(
                f"{kind} element {index} is {number}, outside [{low}, {high}]"
            ) from None


class EncodedArrayDumper(Dumper):
    """Sends an :class:`EncodedArray`'s bytes as they are, as the wrapper's array type."""

    format = pq.Format.BINARY

    def __init__(self, cls: type, context: AdaptContext | None = None) -> None:
        super().__init__(cls, context)
        # Set on the instance, not the class: a dumper class with an oid would also be
        # registered as *the* dumper for that oid (COPY's set_types(), dumping by oid),
        # where it would be handed plain lists.
        self.oid = cls.array_oid if issubclass(cls, EncodedArray) else 0

    def dump(self, obj: Any) -> Buffer | None:
        data: bytes = obj.data
        return data


WRAPPERS: tuple[type[EncodedArray], ...] = (
    TextArray,
    Int8Array,
    Int4Array,
    BoolArray,
    TimestamptzArray,
    ByteaArray,
)


def register(adapters: AdaptersMap) -> None:
    """Make ``adapters`` (``conn.adapters``, ``psycopg.adapters``...) dump the wrappers."""
    for wrapper in WRAPPERS:
        adapters.register_dumper(wrapper, EncodedArrayDumper)
