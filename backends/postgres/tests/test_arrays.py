"""Pre-encoded binary arrays (docket_postgres.arrays) against a real PostgreSQL server.

Every wrapper is sent to the server and read back; its bytes are compared with what
psycopg's own binary list dumper makes of the same list; and registering the wrappers
must leave the dumping of ordinary lists alone.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from docket_postgres import arrays
from docket_postgres.arrays import (
    BoolArray,
    ByteaArray,
    EncodedArray,
    Int4Array,
    Int8Array,
    TextArray,
    TimestamptzArray,
)
from docket_postgres.testing import ThrowawayPostgres
from psycopg import pq
from psycopg.adapt import AdaptersMap, PyFormat, Transformer
from psycopg.types.numeric import Int4, Int8

INT8_MIN, INT8_MAX = -(2**63), 2**63 - 1
INT4_MIN, INT4_MAX = -(2**31), 2**31 - 1
BIG_BYTES = bytes(range(256)) * 800  # 204,800 bytes, every byte value, zeros included
TOKYO = ZoneInfo("Asia/Tokyo")
MINUS_0330 = timezone(timedelta(hours=-3, minutes=-30))

CASES: list[tuple[type[EncodedArray], str, list[Any]]] = [
    (TextArray, "text[]", ["a", "run-1", "", "NULL", 'q"u{o}t,e\\', "ünï€ødé 🚀", "x" * 5000]),
    (TextArray, "text[]", [None, "a", None, None, "b", None]),
    (TextArray, "text[]", [None]),
    (Int8Array, "bigint[]", [0, 1, -1, INT8_MIN, INT8_MAX, 2**40, -(2**40), 7]),
    (Int8Array, "bigint[]", [None, 3, None]),
    (Int4Array, "integer[]", [0, 1, -1, INT4_MIN, INT4_MAX, 65536, -70000]),
    (Int4Array, "integer[]", [5, None]),
    (BoolArray, "boolean[]", [True, False, False, True]),
    (BoolArray, "boolean[]", [None, True, None, False]),
    (
        TimestamptzArray,
        "timestamptz[]",
        [
            datetime(2000, 1, 1, tzinfo=UTC),
            datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
            datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            datetime(1970, 1, 1, tzinfo=UTC),
            # a day in: read back in New York time, 0001-01-01 00:00 UTC would be year 0
            datetime(1, 1, 2, 0, 0, 0, 1, tzinfo=UTC),
            datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            datetime(2026, 3, 29, 1, 30, 0, 123457, tzinfo=TOKYO),
            datetime(1900, 6, 15, 12, 0, 0, 654321, tzinfo=MINUS_0330),
        ],
    ),
    (TimestamptzArray, "timestamptz[]", [None, datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC)]),
    (ByteaArray, "bytea[]", [b"", b"\x00", b"a\x00b\x00", BIG_BYTES, b"\xff" * 3]),
    (ByteaArray, "bytea[]", [None, b"\x00\x00", None]),
]
TYPE_NAMES = {
    "text[]": "text[]",
    "bigint[]": "bigint[]",
    "integer[]": "integer[]",
    "boolean[]": "boolean[]",
    "timestamptz[]": "timestamp with time zone[]",
    "bytea[]": "bytea[]",
}
IDS = [f"{wrapper.__name__}-{i}" for i, (wrapper, _, _) in enumerate(CASES)]
WRAPPERS: list[tuple[type[EncodedArray], str]] = [
    (TextArray, "text[]"),
    (Int8Array, "bigint[]"),
    (Int4Array, "integer[]"),
    (BoolArray, "boolean[]"),
    (TimestamptzArray, "timestamptz[]"),
    (ByteaArray, "bytea[]"),
]


@pytest.fixture(scope="module")
def conn(pg_server: ThrowawayPostgres) -> Iterator[psycopg.Connection[Any]]:
    """One connection for the module, the wrappers registered on it.

    Its session time zone is not UTC, so timestamps cannot come back right by accident.
    """
    connection: psycopg.Connection[Any] = psycopg.connect(pg_server.conninfo(), autocommit=True)
    with connection:
        connection.execute("SET TIME ZONE 'America/New_York'")
        arrays.register(connection.adapters)
        yield connection


def _psycopg_binary(conn: psycopg.Connection[Any], oid: int, values: list[Any]) -> bytes:
    """psycopg's own binary dump of ``values`` as the array type ``oid``."""
    dumper_class = conn.adapters.get_dumper_by_oid(oid, pq.Format.BINARY)
    dumper = dumper_class(list, Transformer.from_context(conn))
    data = dumper.dump(values)
    assert data is not None
    return bytes(data)


def _select(
    conn: psycopg.Connection[Any], query: str, params: Sequence[object], *, prepare: bool
) -> tuple[Any, ...]:
    if prepare:
        # run it twice: the second run uses the statement the first one prepared
        conn.execute(query, params, prepare=True, binary=True)
    row = conn.execute(query, params, prepare=prepare, binary=True).fetchone()
    assert row is not None
    return tuple(row)


@pytest.mark.parametrize("prepare", [False, True])
@pytest.mark.parametrize(("wrapper", "cast", "values"), CASES, ids=IDS)
def test_round_trip(
    conn: psycopg.Connection[Any],
    wrapper: type[EncodedArray],
    cast: str,
    values: list[Any],
    prepare: bool,
) -> None:
    sent = wrapper(values)
    back, typ, length, ndims, lower, nulls = _select(
        conn,
        f"SELECT %s::{cast}, pg_typeof(%s)::text, array_length(%s::{cast}, 1), "
        f"array_ndims(%s::{cast}), array_lower(%s::{cast}, 1), "
        f"array_positions(%s::{cast}, NULL)",
        [sent] * 6,
        prepare=prepare,
    )
    assert back == values
    assert typ == TYPE_NAMES[cast]  # sent as that type: the cast had nothing to do
    assert length == len(values)
    assert ndims == 1
    assert lower == 1
    assert nulls == [i + 1 for i, v in enumerate(values) if v is None]


@pytest.mark.parametrize(("wrapper", "cast"), WRAPPERS)
def test_empty_arrays(
    conn: psycopg.Connection[Any], wrapper: type[EncodedArray], cast: str
) -> None:
    empty = wrapper([])
    back, length, cardinality, typ = _select(
        conn,
        f"SELECT %s::{cast}, array_length(%s::{cast}, 1), cardinality(%s::{cast}), "
        "pg_typeof(%s)::text",
        [empty] * 4,
        prepare=False,
    )
    assert (back, length, cardinality, typ) == ([], None, 0, TYPE_NAMES[cast])
    assert empty.data == _psycopg_binary(conn, wrapper.array_oid, [])


def test_large_bytea_is_intact(conn: psycopg.Connection[Any]) -> None:
    length, digest, zeros = _select(
        conn,
        "SELECT length(a[2]), md5(a[2]), length(a[1]) FROM (SELECT %s::bytea[] AS a) AS t",
        [ByteaArray([b"\x00" * 7, BIG_BYTES])],
        prepare=False,
    )
    assert (length, zeros) == (len(BIG_BYTES), 7)
    assert digest == hashlib.md5(BIG_BYTES).hexdigest()


def test_timestamps_are_exact_microseconds(conn: psycopg.Connection[Any]) -> None:
    """The server's own arithmetic agrees with the instants sent, to the microsecond."""
    stamps = [
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2000, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC),
        datetime(1677, 9, 21, 0, 12, 43, 145225, tzinfo=UTC),
        datetime(2026, 7, 1, 12, 0, 0, 999999, tzinfo=TOKYO),
    ]
    (micros,) = _select(
        conn,
        "SELECT array_agg((extract(epoch FROM t - '2000-01-01 00:00:00+00') * 1000000)::bigint "
        "ORDER BY n) FROM unnest(%s::timestamptz[]) WITH ORDINALITY AS u(t, n)",
        [TimestamptzArray(stamps)],
        prepare=False,
    )
    epoch = datetime(2000, 1, 1, tzinfo=UTC)
    assert micros == [(s - epoch) // timedelta(microseconds=1) for s in stamps]


def test_many_parameters_in_one_statement(conn: psycopg.Connection[Any]) -> None:
    """The shape of a group commit: many arrays of a few elements, prepared."""
    now = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    params: list[EncodedArray] = [
        TextArray(["k1", "k2", None]),
        Int8Array([1, 2, 3]),
        Int4Array([4, 5, 6]),
        BoolArray([True, False, True]),
        TimestamptzArray([now, None, now]),
        ByteaArray([b"{}", None, b"\x00"]),
    ] * 4
    query = "SELECT " + ", ".join(f"%s::{cast}" for _ in range(4) for _, cast in WRAPPERS)
    row = _select(conn, query, params, prepare=True)
    expected = [
        ["k1", "k2", None],
        [1, 2, 3],
        [4, 5, 6],
        [True, False, True],
        [now, None, now],
        [b"{}", None, b"\x00"],
    ] * 4
    assert list(row) == expected


@pytest.mark.parametrize(("wrapper", "cast", "values"), CASES, ids=IDS)
def test_bytes_equal_psycopgs_binary_dump(
    conn: psycopg.Connection[Any], wrapper: type[EncodedArray], cast: str, values: list[Any]
) -> None:
    """Byte for byte what psycopg's binary list dumper makes of the list for that type."""
    assert wrapper(values).data == _psycopg_binary(conn, wrapper.array_oid, values)


@pytest.mark.parametrize(
    ("wrapper", "values"),
    [
        (TextArray, ["a", None, "ü"]),
        (BoolArray, [True, None]),
        (TimestamptzArray, [datetime(2001, 2, 3, 4, 5, 6, 7, tzinfo=TOKYO), None]),
        (ByteaArray, [b"\x00", None, b""]),
    ],
)
def test_bytes_equal_psycopgs_inferred_dump(
    conn: psycopg.Connection[Any], wrapper: type[EncodedArray], values: list[Any]
) -> None:
    """Where psycopg infers the element type from the list, it picks the same bytes and oid."""
    dumper = Transformer.from_context(conn).get_dumper(values, PyFormat.BINARY)
    data = dumper.dump(values)
    assert data is not None
    assert wrapper(values).data == bytes(data)
    assert dumper.oid == wrapper.array_oid


def test_int_arrays_equal_psycopgs_sized_ints(conn: psycopg.Connection[Any]) -> None:
    """psycopg's Int8/Int4 element wrappers pin the type; the bytes agree."""
    values = [INT8_MIN, -1, 0, None, INT8_MAX]
    tx = Transformer.from_context(conn)
    pinned = [None if v is None else Int8(v) for v in values]
    data = tx.get_dumper(pinned, PyFormat.BINARY).dump(pinned)
    assert data is not None and Int8Array(values).data == bytes(data)
    small = [INT4_MIN, None, 0, INT4_MAX]
    pinned4 = [None if v is None else Int4(v) for v in small]
    data = tx.get_dumper(pinned4, PyFormat.BINARY).dump(pinned4)
    assert data is not None and Int4Array(small).data == bytes(data)


def test_register_leaves_plain_lists_alone(pg_server: ThrowawayPostgres) -> None:
    plain, registered = AdaptersMap(psycopg.adapters), AdaptersMap(psycopg.adapters)
    arrays.register(registered)
    for fmt in PyFormat:
        assert registered.get_dumper(list, fmt) is plain.get_dumper(list, fmt)
    for _, cast in WRAPPERS:
        oid = registered.types[cast].oid
        for pq_format in pq.Format:
            # the by-oid dumpers (COPY set_types) stay psycopg's
            assert registered.get_dumper_by_oid(oid, pq_format) is plain.get_dumper_by_oid(
                oid, pq_format
            )
    values = ["a", None, "b"]
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as before:
        sent_before = _sent(before, values)
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as after:
        arrays.register(after.adapters)
        assert _sent(after, values) == sent_before
        (back,) = _select(after, "SELECT %s::text[]", [values], prepare=False)
        assert back == values


def _sent(conn: psycopg.Connection[Any], values: list[Any]) -> list[tuple[Any, ...]]:
    """How a plain list goes: (dumper class, oid, bytes) for each placeholder format."""
    tx = Transformer.from_context(conn)
    out = []
    for fmt in (PyFormat.AUTO, PyFormat.TEXT, PyFormat.BINARY):
        dumper = tx.get_dumper(values, fmt)
        out.append((type(dumper), dumper.oid, dumper.dump(values)))
    return out


def test_wrappers_need_registration(pg_server: ThrowawayPostgres) -> None:
    with (
        psycopg.connect(pg_server.conninfo(), autocommit=True) as unregistered,
        pytest.raises(psycopg.ProgrammingError, match="cannot adapt"),
    ):
        unregistered.execute("SELECT %s::text[]", [TextArray(["a"])])


def test_naive_datetime_is_refused() -> None:
    aware = datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(TypeError, match="element 1 is a naive datetime"):
        TimestamptzArray([aware, datetime(2026, 1, 1), aware])


@pytest.mark.parametrize(
    ("wrapper", "values", "error", "message"),
    [
        (TextArray, ["a", b"b"], TypeError, "text\\[\\] element 1 is bytes"),
        (TextArray, [1], TypeError, "text\\[\\] element 0 is int"),
        (ByteaArray, [b"a", "b"], TypeError, "bytea\\[\\] element 1 is str"),
        (ByteaArray, [7], TypeError, "bytea\\[\\] element 0 is int"),
        (Int8Array, [1, 2**63], ValueError, "bigint\\[\\] element 1 is 9223372036854775808"),
        (Int8Array, [-(2**63) - 1], ValueError, "outside"),
        (Int8Array, [1.5], TypeError, "bigint\\[\\] element 0 is float"),
        (Int8Array, ["1"], TypeError, "bigint\\[\\] element 0 is str"),
        (Int4Array, [0, 2**31], ValueError, "integer\\[\\] element 1 is 2147483648"),
        (Int4Array, [None, -(2**31) - 1], ValueError, "outside"),
        (BoolArray, [True, 2], TypeError, "boolean\\[\\] element 1 is int"),
        (BoolArray, ["yes"], TypeError, "boolean\\[\\] element 0 is str"),
        (BoolArray, [[True]], TypeError, "boolean\\[\\] element 0 is list"),
        (TimestamptzArray, [None, "2026-01-01"], TypeError, "timestamptz\\[\\] element 1 is str"),
    ],
)
def test_bad_elements_are_refused(
    wrapper: type[EncodedArray], values: list[Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        wrapper(values)


def test_memoryview_elements_send_their_bytes(conn: psycopg.Connection[Any]) -> None:
    words = memoryview(bytearray(b"\x01\x00\x02\x00")).cast("H")  # 2 items, 4 bytes
    (back,) = _select(
        conn, "SELECT %s::bytea[]", [ByteaArray([words, bytearray(b"ab")])], prepare=False
    )
    assert back == [b"\x01\x00\x02\x00", b"ab"]
