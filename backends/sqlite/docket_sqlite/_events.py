"""``SQLiteEventStore``: the contract's EventStore over ``docket_events``.

Events are written only by transitions (``_transitions.py``); this store reads them,
each through the shared ``decode_event`` checks, inside one read snapshot so a page and
its bounds agree.
"""

from __future__ import annotations

import sqlite3

from docket.contract import CorruptEventRow, EventListQuery, NotFound
from docket.contract.queries import require_event_query, require_run_id, require_seq
from docket.contract.stored import decode_event, decode_event_page
from docket.records import Event, EventPage, OwnerScope, require_owner
from docket_sqlite._engine import Engine
from docket_sqlite._rows import run_address, run_exists, tenant_key


class SQLiteEventStore:
    """A run's event log, read-only (``SQLiteBackend.events``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def fetch_event(
        self, owner: OwnerScope, run_id: str, seq: int
    ) -> Event | NotFound | CorruptEventRow:
        key = tenant_key(require_owner(owner))
        require_seq(seq)
        require_run_id(run_id)

        def job(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT event_json FROM docket_events WHERE tenant = ? AND run_id = ? AND seq = ?",
                (key, run_id, seq),
            ).fetchone()
            return None if row is None else bytes(row[0])

        data = await self._engine.read(job)
        return NotFound("event") if data is None else decode_event(run_id, seq, data)

    async def fetch_latest_event(
        self, owner: OwnerScope, run_id: str
    ) -> Event | NotFound | CorruptEventRow | None:
        key = run_address(owner, run_id)

        def job(conn: sqlite3.Connection) -> NotFound | tuple[int, bytes] | None:
            if not run_exists(conn, key, run_id):
                return NotFound()
            row = conn.execute(
                "SELECT seq, event_json FROM docket_events WHERE tenant = ? AND run_id = ? "
                "ORDER BY seq DESC LIMIT 1",
                (key, run_id),
            ).fetchone()
            return None if row is None else (int(row[0]), bytes(row[1]))

        found = await self._engine.read(job)
        if found is None or isinstance(found, NotFound):
            return found
        return decode_event(run_id, found[0], found[1])

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        key = tenant_key(require_owner(owner))
        require_event_query(query)
        require_run_id(run_id)

        def job(conn: sqlite3.Connection) -> EventPage | NotFound | CorruptEventRow:
            row = conn.execute(
                "SELECT event_seq FROM docket_runs WHERE tenant = ? AND run_id = ?", (key, run_id)
            ).fetchone()
            if row is None:
                return NotFound()
            latest_seq = int(row[0])
            bounds = [
                conn.execute(
                    "SELECT seq FROM docket_events WHERE tenant = ? AND run_id = ? "
                    f"ORDER BY seq {direction} LIMIT 1",
                    (key, run_id),
                ).fetchone()
                for direction in ("ASC", "DESC")
            ]
            rows = conn.execute(
                "SELECT seq, event_json FROM docket_events "
                "WHERE tenant = ? AND run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (key, run_id, query.after_seq, query.limit),
            ).fetchall()
            return decode_event_page(
                run_id,
                ((int(seq), bytes(data)) for seq, data in rows),
                query,
                oldest=None if bounds[0] is None else int(bounds[0][0]),
                newest=None if bounds[1] is None else int(bounds[1][0]),
                latest=latest_seq,
            )

        return await self._engine.read(job)


__all__ = ["SQLiteEventStore"]
