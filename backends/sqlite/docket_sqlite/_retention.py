"""``prune`` on SQLite (``Feature.PRUNE``): one bounded pass of retention.

Events are deleted by ``written_at_us`` and finished runs by ``ended_at_us`` (schema
version 4, both the backend's clock at commit), oldest first, each kind bounded by
``batch_size``. A run's delete cascades to its events, pieces and transition records
(foreign keys), which are not counted. The pass is one write transaction, so it never
interleaves with a commit: a run that finished is deleted whole or not at all, and a
live run is never deleted (only finished runs have an ``ended_at_us``). Emission rows
older than a minute go too: they are a transport, not a record.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta

from docket.contract.retention import PruneResult, require_prune_args
from docket.values import to_micros
from docket_sqlite._engine import Engine
from docket_sqlite._feed import EMISSIONS_TTL_US, trim_emissions
from docket_sqlite._threads import Done


async def prune(
    engine: Engine,
    event_age: timedelta | None,
    run_age: timedelta | None,
    batch_size: int,
    now: datetime | None,
) -> PruneResult:
    event_age, run_age, batch_size = require_prune_args(event_age, run_age, batch_size)
    moment = engine.now(now)
    event_cut = None if event_age is None else _cut(moment, event_age)
    run_cut = None if run_age is None else _cut(moment, run_age)
    limit = min(batch_size, 1 << 62)

    def job(conn: sqlite3.Connection) -> Done[PruneResult]:
        events = runs = 0
        if event_cut is not None:
            events = conn.execute(
                "DELETE FROM docket_events WHERE rowid IN (SELECT rowid FROM docket_events "
                "WHERE written_at_us < ? ORDER BY written_at_us LIMIT ?)",
                (event_cut, limit),
            ).rowcount
        if run_cut is not None:
            doomed = conn.execute(
                "SELECT tenant, run_id FROM docket_runs WHERE ended_at_us < ? "
                "ORDER BY ended_at_us LIMIT ?",
                (run_cut, limit),
            ).fetchall()
            conn.executemany(
                "DELETE FROM docket_runs WHERE tenant = ? AND run_id = ?",
                [(str(tenant), str(run_id)) for tenant, run_id in doomed],
            )
            runs = len(doomed)
        trim_emissions(conn, to_micros(moment) - EMISSIONS_TTL_US, limit)
        return Done(PruneResult(ran=True, events=events, runs=runs))

    return await engine.write(job)


def _cut(moment: datetime, age: timedelta) -> int:
    """Microseconds of ``moment - age``; an age reaching before year 1 keeps every row."""
    try:
        return to_micros(moment - age)
    except (OverflowError, ValueError):
        return -(1 << 63)


__all__ = ["prune"]
