"""``RedisEvents``: the event store (``EventStore``) of a ``RedisBackend``.

A run's events live in one hash (``<seq>`` → event JSON, ``d<seq>`` → its content
digest) with a sorted index of the retained sequence numbers; only the transition
scripts write them. The latest event and event pages are read by one script each
(``lua/latest_event.lua``, ``lua/list_events.lua``), which also tell a missing run from
a run without events.
"""

from __future__ import annotations

from docket.contract import CorruptEventRow, EventListQuery, NotFound
from docket.contract.queries import require_event_query, require_run_id, require_seq
from docket.contract.stored import decode_event, decode_event_page
from docket.records import Event, EventPage, OwnerScope, require_owner
from docket_redis._codec import code, text
from docket_redis._engine import RedisEngine


class RedisEvents:
    """Event reads. Events are written only inside transitions."""

    def __init__(self, engine: RedisEngine) -> None:
        self._engine = engine

    async def fetch_event(
        self, owner: OwnerScope, run_id: str, seq: int
    ) -> Event | NotFound | CorruptEventRow:
        scope = self._engine.ns.scope(require_owner(owner))
        require_seq(seq)
        key = scope.events(require_run_id(run_id))
        data = await self._engine.transport.command(key, "HGET", key, str(seq))
        return NotFound("event") if data is None else decode_event(run_id, seq, data)

    async def fetch_latest_event(
        self, owner: OwnerScope, run_id: str
    ) -> Event | NotFound | CorruptEventRow | None:
        scope = self._engine.ns.scope(require_owner(owner))
        require_run_id(run_id)
        reply = await self._engine.eval(
            "latest_event",
            [scope.run(run_id), scope.event_index(run_id), scope.events(run_id)],
            [],
        )
        answer = code(reply)
        if answer == "NOT_FOUND":
            return NotFound()
        if answer == "NONE":
            return None
        seq = int(text(reply[1]))
        return decode_event(run_id, seq, reply[2])

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        scope = self._engine.ns.scope(require_owner(owner))
        require_event_query(query)
        require_run_id(run_id)
        reply = await self._engine.eval(
            "list_events",
            [scope.run(run_id), scope.event_index(run_id), scope.events(run_id)],
            [str(query.after_seq), str(query.limit)],
        )
        if code(reply) == "NOT_FOUND":
            return NotFound()
        latest, oldest, newest = (text(part) for part in reply[1:4])
        rest = reply[4:]
        return decode_event_page(
            run_id,
            ((int(text(seq)), data) for seq, data in zip(rest[::2], rest[1::2])),
            query,
            oldest=int(oldest) if oldest else None,
            newest=int(newest) if newest else None,
            latest=int(latest),
        )
