"""How a transition reaches PostgreSQL: one function call alone, or a group of them.

Each transition is one call of a PL/pgSQL function (``initialize_run``, ``commit_run``):
one round trip, one transaction, all or nothing. While ``commit_lanes`` statements are
in flight, further writes queue and go together as one call of the group form
(``initialize_runs``, ``commit_runs``; :class:`docket.contract.grouping.GroupCommit`),
which takes the same arguments as arrays, one element per write, the events flattened
with a count per write. A group that fails as a whole is resent one write at a time.

The event arrays go pre-encoded in PostgreSQL's binary array format
(:mod:`docket_postgres.arrays`): psycopg would send a list as a text array, ``bytea``
hex-escaped in Python.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final, cast

import attrs

from docket.contract import Permanent, Retryable
from docket.contract.grouping import GroupCommit
from docket_postgres._engine import Engine
from docket_postgres.arrays import (
    BoolArray,
    ByteaArray,
    EncodedArray,
    Int4Array,
    Int8Array,
    TextArray,
    TimestamptzArray,
)

GROUP_LIMIT: Final = 32  # most commits one group-commit statement carries

#: A write's arguments: the function's scalars, ``p_now``, then its events' seqs,
#: documents and hashes.
WriteArgs = tuple[object, ...]
#: A function's row, or the store's answer when the statement failed.
WriteAnswer = tuple[Any, ...] | Retryable | Permanent

_INITIALIZE = (
    "SELECT * FROM @schema@.initialize_run(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
    "%s::timestamptz, %s::timestamptz, %s::timestamptz, %s, %s, %s::timestamptz, %s, "
    "%s::timestamptz, %s::bigint[], %s::bytea[], %s::bytea[])"
)
# Schema version 9: a start in a named queue or at a priority (``Feature.QUEUES``) takes
# both after the claim token; a plain start sends the statement above, as it always did.
_INITIALIZE_QUEUED = (
    "SELECT * FROM @schema@.initialize_queued_run(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
    "%s::timestamptz, %s::timestamptz, %s::timestamptz, %s, %s, %s::timestamptz, %s, "
    "%s, %s::integer, %s::timestamptz, %s::bigint[], %s::bytea[], %s::bytea[])"
)
_COMMIT = (
    "SELECT * FROM @schema@.commit_run(%s, %s, %s, %s, %s, %s, %s::timestamptz, %s, %s, %s, "
    "%s, %s, %s, %s, %s::timestamptz, %s::timestamptz, %s, %s, %s, %s::timestamptz, "
    "%s::timestamptz, %s::bigint[], %s::bytea[], %s::bytea[])"
)
# Group commit (schema version 2): the same arguments as arrays, one element per commit,
# the events flattened with a count per commit.
_COMMIT_MANY = (
    "SELECT * FROM @schema@.commit_runs(%s::text[], %s::text[], %s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::timestamptz[], %s::bigint[], %s::boolean[], %s::text[], "
    "%s::text[], %s::bigint[], %s::bigint[], %s::bigint[], %s::timestamptz[], "
    "%s::timestamptz[], %s::bytea[], %s::text[], %s::text[], %s::timestamptz[], "
    "%s::timestamptz, %s::integer[], %s::bigint[], %s::bytea[], %s::bytea[], "
    "%s::integer[], %s::boolean[], %s::integer[])"
)
_INITIALIZE_MANY = (
    "SELECT * FROM @schema@.initialize_runs(%s::text[], %s::text[], %s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::bigint[], "
    "%s::timestamptz[], %s::timestamptz[], %s::timestamptz[], %s::bytea[], %s::text[], "
    "%s::timestamptz[], %s::text[], %s::timestamptz, %s::integer[], %s::bigint[], "
    "%s::bytea[], %s::bytea[], %s::integer[], %s::boolean[], %s::integer[])"
)
_INITIALIZE_QUEUED_MANY = (
    "SELECT * FROM @schema@.initialize_queued_runs(%s::text[], %s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::text[], %s::text[], %s::bigint[], %s::bigint[], "
    "%s::bigint[], %s::timestamptz[], %s::timestamptz[], %s::timestamptz[], %s::bytea[], "
    "%s::text[], %s::timestamptz[], %s::text[], %s::text[], %s::integer[], %s::timestamptz, "
    "%s::integer[], %s::bigint[], %s::bytea[], %s::bytea[], %s::integer[], %s::boolean[], "
    "%s::integer[])"
)


@attrs.frozen
class Statement:
    """A write that can be grouped: its one-run form, its group form, and the array type
    each of its leading arguments becomes in a group (the rest: ``p_now`` and the three
    event arrays, flattened with a count per write). Both start with tenant and run id."""

    single: str
    many: str
    columns: tuple[type[EncodedArray], ...]

    @property
    def scalars(self) -> int:
        return len(self.columns)


_T, _I8, _TS, _BY = TextArray, Int8Array, TimestamptzArray, ByteaArray
COMMIT_STATEMENT: Final = Statement(
    _COMMIT,
    _COMMIT_MANY,
    (
        _T,
        _T,
        _T,
        _T,
        _T,
        _T,
        _TS,
        _I8,
        BoolArray,
        _T,
        _T,
        _I8,
        _I8,
        _I8,
        _TS,
        _TS,
        _BY,
        _T,
        _T,
        _TS,
    ),
)
INITIALIZE_STATEMENT: Final = Statement(
    _INITIALIZE,
    _INITIALIZE_MANY,
    (_T, _T, _T, _T, _T, _T, _T, _I8, _I8, _I8, _TS, _TS, _TS, _BY, _T, _TS, _T),
)
INITIALIZE_QUEUED_STATEMENT: Final = Statement(
    _INITIALIZE_QUEUED,
    _INITIALIZE_QUEUED_MANY,
    (_T, _T, _T, _T, _T, _T, _T, _I8, _I8, _I8, _TS, _TS, _TS, _BY, _T, _TS, _T, _T, Int4Array),
)


def grouping(
    engine: Engine, statement: Statement, lanes: int
) -> GroupCommit[WriteArgs, WriteAnswer] | None:
    """The group commit of ``statement``; ``None`` for 0 lanes (every write alone)."""
    if not lanes:
        return None

    async def send(batch: list[WriteArgs]) -> list[WriteAnswer]:
        return await send_group(engine, statement, batch)

    return GroupCommit(send, lanes=lanes, limit=GROUP_LIMIT)


async def send_write(engine: Engine, statement: Statement, args: WriteArgs) -> WriteAnswer:
    """One write alone: the function's row, or the failure as the store's answer."""
    # the event arrays go pre-encoded (psycopg would send lists as text, bytea hex-escaped)
    n = statement.scalars + 1
    seqs, bodies, hashes = (cast(Sequence[Any], a) for a in args[n : n + 3])
    sent = (*args[:n], Int8Array(seqs), ByteaArray(bodies), ByteaArray(hashes))
    rows = await engine.outcome(engine.q(statement.single), sent)
    return rows if not isinstance(rows, list) else tuple(rows[0])


async def send_group(
    engine: Engine, statement: Statement, batch: list[WriteArgs]
) -> list[WriteAnswer]:
    """Group commit: several runs' writes in one ``commit_runs`` (``initialize_runs``)
    statement.

    Sorted by owner and run id, so concurrent batches lock run rows in one order. If
    the statement fails as a whole (nothing of it was kept, or, for a lost connection,
    maybe all of it), each write is resent alone: one that was applied answers as a
    replay of its transition id.
    """
    if len(batch) == 1:
        return [await send_write(engine, statement, batch[0])]
    scalars = statement.scalars
    order = sorted(range(len(batch)), key=lambda i: (batch[i][0], batch[i][1]))
    columns: list[list[object]] = [[] for _ in range(scalars)]
    counts: list[int] = []
    seqs: list[int] = []
    bodies: list[bytes] = []
    hashes: list[bytes] = []
    # per write: where its events start (1-based) and whether it is the first write to
    # its run in the group; per event: the write (1-based) it belongs to
    firsts: list[int] = []
    solo: list[bool] = []
    owners: list[int] = []
    previous: tuple[object, object] | None = None
    for position, i in enumerate(order, 1):
        args = batch[i]
        for column, value in zip(columns, args[:scalars], strict=True):
            column.append(value)
        event_seqs = cast(list[int], args[scalars + 1])
        firsts.append(len(seqs) + 1)
        counts.append(len(event_seqs))
        owners.extend([position] * len(event_seqs))
        seqs.extend(event_seqs)
        bodies.extend(cast(list[bytes], args[scalars + 2]))
        hashes.extend(cast(list[bytes], args[scalars + 3]))
        run = (args[0], args[1])
        solo.append(run != previous)  # sorted: a run's writes are adjacent
        previous = run
    now = batch[0][scalars]
    sent = (
        *(kind(column) for kind, column in zip(statement.columns, columns, strict=True)),
        now,
        Int4Array(counts),
        Int8Array(seqs),
        ByteaArray(bodies),
        ByteaArray(hashes),
        Int4Array(firsts),
        BoolArray(solo),
        Int4Array(owners),
    )
    rows = await engine.outcome(engine.q(statement.many), sent)
    if not isinstance(rows, list) or len(rows) != len(batch):
        return list(await asyncio.gather(*(send_write(engine, statement, args) for args in batch)))
    answers: list[WriteAnswer] = [()] * len(batch)
    for row in rows:
        answers[order[int(row[0]) - 1]] = tuple(row[1:])
    return answers
