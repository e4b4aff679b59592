"""``SQLiteFeed``: the optional ``EventFeed`` store (``Feature.STREAMS``) on SQLite.

The machinery (hub, poller, the emissions table) is in ``_feed.py``; this is the store
object the backend hands out as ``backend.feed``.
"""

from __future__ import annotations

import sqlite3

from docket.contract.feed import LocalSubscription
from docket.records import Emission, OwnerScope, Scope
from docket_sqlite._engine import Engine
from docket_sqlite._feed import open_subscription, owned, write_emission
from docket_sqlite._threads import Done


class SQLiteFeed:
    """Commit notices and node emissions, in this process and across processes."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def subscribe(self, scope: Scope) -> LocalSubscription:
        """A subscription to every item of ``scope`` published after this returns."""
        engine = self._engine
        if not engine.target.memory:
            await engine.ensure_open()  # the poller reads a file whose schema is current
        return await open_subscription(
            engine.hub.feed, scope, engine.feed_poll, engine.busy_timeout
        )

    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        """Deliver ``emission`` here at once and, for a file, queue it for other processes."""
        engine = self._engine
        item = owned(owner, emission)
        engine.hub.feed.deliver(item)
        if engine.target.memory:
            return

        def job(conn: sqlite3.Connection) -> Done[None]:
            write_emission(conn, item, engine.now_us(None))
            return Done(None)

        await engine.write(job)


__all__ = ["SQLiteFeed"]
