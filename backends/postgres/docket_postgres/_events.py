"""The event store (``EventStore``) of ``PostgresBackend``: reads of the ``events`` table.

Events are written only by the transition functions (:mod:`docket_postgres._transitions`).
Each read is one statement; a page's bounds and its rows come from the same snapshot.
Stored bytes are decoded by :func:`docket.contract.stored.decode_event`.
"""

from __future__ import annotations

from docket.contract import CorruptEventRow, EventListQuery, NotFound
from docket.contract.queries import require_event_query, require_run_id, require_seq
from docket.contract.stored import decode_event, decode_event_page
from docket.records import Event, EventPage, OwnerScope, require_owner
from docket_postgres._engine import Engine, storable, tenant_key

_FETCH_EVENT = (
    "SELECT event_json FROM @schema@.events WHERE tenant = %s AND run_id = %s AND seq = %s"
)
_LATEST_EVENT = (
    "SELECT e.seq, e.event_json FROM @schema@.runs r LEFT JOIN LATERAL ("
    "SELECT x.seq, x.event_json FROM @schema@.events x "
    "WHERE x.tenant = r.tenant AND x.run_id = r.run_id ORDER BY x.seq DESC LIMIT 1) e ON true "
    "WHERE r.tenant = %s AND r.run_id = %s"
)
# One statement, so the bounds and the page come from one snapshot.
_LIST_EVENTS = (
    "SELECT r.event_seq, "
    "(SELECT min(x.seq) FROM @schema@.events x WHERE x.tenant = r.tenant AND x.run_id = r.run_id), "
    "(SELECT max(x.seq) FROM @schema@.events x WHERE x.tenant = r.tenant AND x.run_id = r.run_id), "
    "p.seq, p.event_json "
    "FROM @schema@.runs r LEFT JOIN LATERAL ("
    "SELECT x.seq, x.event_json FROM @schema@.events x "
    "WHERE x.tenant = r.tenant AND x.run_id = r.run_id AND x.seq > %s "
    "ORDER BY x.seq LIMIT %s) p ON true "
    "WHERE r.tenant = %s AND r.run_id = %s ORDER BY p.seq"
)


class PostgresEvents:
    """``EventStore`` over one backend's :class:`~docket_postgres._engine.Engine`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def fetch_event(
        self, owner: OwnerScope, run_id: str, seq: int
    ) -> Event | NotFound | CorruptEventRow:
        key = tenant_key(require_owner(owner))
        require_seq(seq)
        if not storable(require_run_id(run_id), key):
            return NotFound("event")
        engine = self._engine
        rows = await engine.fetch(engine.q(_FETCH_EVENT), (key, run_id, seq), write=False)
        return decode_event(run_id, seq, bytes(rows[0][0])) if rows else NotFound("event")

    async def fetch_latest_event(
        self, owner: OwnerScope, run_id: str
    ) -> Event | NotFound | CorruptEventRow | None:
        key = tenant_key(require_owner(owner))
        if not storable(require_run_id(run_id), key):
            return NotFound()
        engine = self._engine
        rows = await engine.fetch(engine.q(_LATEST_EVENT), (key, run_id), write=False)
        if not rows:
            return NotFound()
        seq, data = rows[0]
        return None if seq is None else decode_event(run_id, int(seq), bytes(data))

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        key = tenant_key(require_owner(owner))
        require_event_query(query)
        if not storable(require_run_id(run_id), key):
            return NotFound()
        engine = self._engine
        rows = await engine.fetch(
            engine.q(_LIST_EVENTS), (query.after_seq, query.limit, key, run_id), write=False
        )
        if not rows:
            return NotFound()
        latest_seq, oldest, newest = rows[0][0], rows[0][1], rows[0][2]
        return decode_event_page(
            run_id,
            ((int(seq), bytes(data)) for _, _, _, seq, data in rows if seq is not None),
            query,
            oldest=None if oldest is None else int(oldest),
            newest=None if newest is None else int(newest),
            latest=int(latest_seq),
        )
