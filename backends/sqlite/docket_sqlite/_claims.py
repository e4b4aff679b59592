"""Which rows a ``claim_due`` considers: each class's best candidates, read by index.

``select_claims`` needs, of each class (ready, expired), the first ``limit`` candidates in
claim order: priority (highest first), then ``(eligible_at, run_id, tenant)``, among the
runs of the policy's queues. The two claim indexes (schema version 5) are keyed
``(queue, priority, eligible_at, run_id, tenant)``, so the read walks the ``(queue,
priority)`` pairs that hold rows of the class, highest priority first within a queue, and
takes each pair's oldest eligible rows, moving to the next queue once one has ``limit``.
Every step is one index seek: a pair without eligible rows (only later wakes, say) costs a
seek, never a scan of its rows. The common case, a class whose rows all sit in one pair
(every run in "default" at priority 0), is found by one statement reading the class's
first and last index entries and then reads that pair's rows directly.

The union over queues is at most ``limit`` rows a queue; ``select_claims`` orders it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Final

import attrs

from docket.records import MAX_PRIORITY
from docket.values import from_micros
from docket_sqlite._rows import tenant_of

_ACTIVE: Final = "status IN ('running', 'waiting') AND poisoned_at_us IS NULL"
#: Each class: the partial index's condition (repeated verbatim so SQLite uses the
#: index), its time column and how that column compares with the class's bound.
_READY: Final = (f"{_ACTIVE} AND claim_token IS NULL", "wake_at_us", "<=")
_EXPIRED: Final = (f"{_ACTIVE} AND claim_token IS NOT NULL", "claimed_at_us", "<")

Candidate = tuple[datetime, str, str | None]
#: ``take(queue, priority, want)``: read up to ``want`` rows of one pair; answers how many.
_Take = Callable[[str, int, int], int]


@attrs.frozen
class _Statements:
    span: str  # the class's first and last (queue, priority) pairs, in one statement
    queue_span: str  # one queue's lowest and highest priority, likewise
    queue_below: str  # the greatest queue name below a bound
    priority_below: str  # a queue's greatest priority below a bound
    rows: str  # a pair's eligible rows, oldest first


def _statements(where: str, column: str, op: str) -> _Statements:
    # single-column bounds on the index's leading columns: SQLite seeks to them (the
    # min/max optimisation); a row-value bound ``(queue, priority) < (?, ?)`` scanned
    # every entry of the bound's own queue backwards, a whole backlog per step
    def edges(columns: str, queue: str = "") -> str:
        # the first and the last index entry of the class (two rows, or none), each one
        # index edge and one table lookup for the partial index's own terms
        one = f"SELECT {columns} FROM docket_runs WHERE {where}{queue} ORDER BY queue{{}}, "
        one += "priority{} LIMIT 1"
        low, high = one.format("", ""), one.format(" DESC", " DESC")
        return f"SELECT * FROM ({low}) UNION ALL SELECT * FROM ({high})"

    return _Statements(
        span=edges("queue, priority"),
        queue_span=edges("priority", " AND queue = ?1"),
        queue_below=f"SELECT max(queue) FROM docket_runs WHERE {where} AND queue < ?",
        priority_below=(
            f"SELECT max(priority) FROM docket_runs WHERE {where} AND queue = ? AND priority < ?"
        ),
        rows=(
            f"SELECT {column}, run_id, tenant, claim_attempts FROM docket_runs "
            f"WHERE {where} AND queue = ? AND priority = ? AND {column} {op} ? "
            f"ORDER BY {column}, run_id, tenant LIMIT ?"
        ),
    )


READY: Final = _statements(*_READY)
EXPIRED: Final = _statements(*_EXPIRED)
#: Above every queue name (names are ASCII), so the first pair is the greatest.
_TOP_QUEUE: Final = "\U0010ffff"


@attrs.define
class Found:
    """What the walk read: the candidates, and each run's attempts and priority."""

    attempts: dict[tuple[str, str], int] = attrs.Factory(dict)
    priority: dict[tuple[str, str], int] = attrs.Factory(dict)

    def priority_of(self, candidate: Candidate) -> int:
        return self.priority[(candidate[2] or "", candidate[1])]


def candidates(
    conn: sqlite3.Connection,
    statements: _Statements,
    bound: int,
    limit: int,
    queues: frozenset[str] | None,
    found: Found,
) -> list[Candidate]:
    """Up to ``limit`` candidates of each queue of ``queues`` (``None``: every queue) in
    claim order, eligible when their time compares with ``bound``."""
    out: list[Candidate] = []

    def take(queue: str, priority: int, want: int) -> int:
        rows = conn.execute(statements.rows, (queue, priority, bound, want)).fetchall()
        for at, run_id, tenant, tries in rows:
            key = (str(tenant), str(run_id))
            found.attempts[key] = int(tries)
            found.priority[key] = priority
            out.append((from_micros(int(at)), str(run_id), tenant_of(str(tenant))))
        return len(rows)

    # the common case, one (queue, priority) pair in the class: the span and the pair's
    # rows, one statement more than before schema 5
    if queues is None:
        pairs = conn.execute(statements.span).fetchall()
        if not pairs:
            return out
        if pairs[0] == pairs[-1]:
            take(str(pairs[0][0]), int(pairs[0][1]), limit)
        else:
            _walk_every_queue(conn, statements, limit, take)
        return out
    for queue in sorted(queues):
        levels = conn.execute(statements.queue_span, (queue,)).fetchall()
        if not levels:
            continue
        if levels[0] == levels[-1]:
            take(queue, int(levels[0][0]), limit)
        else:
            _walk_queue(conn, statements, queue, limit, take)
    return out


def _walk_every_queue(
    conn: sqlite3.Connection, statements: _Statements, limit: int, take: _Take
) -> None:
    queue = _TOP_QUEUE
    while True:
        found = conn.execute(statements.queue_below, (queue,)).fetchone()[0]
        if found is None:
            return
        queue = str(found)
        _walk_queue(conn, statements, queue, limit, take)


def _walk_queue(
    conn: sqlite3.Connection, statements: _Statements, queue: str, limit: int, take: _Take
) -> None:
    below, got = MAX_PRIORITY + 1, 0
    while got < limit:
        top = conn.execute(statements.priority_below, (queue, below)).fetchone()[0]
        if top is None:
            return
        below = int(top)
        got += take(queue, below, limit - got)


__all__ = ["EXPIRED", "READY", "Candidate", "Found", "candidates"]
