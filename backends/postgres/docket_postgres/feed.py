"""The live feed (``Feature.STREAMS``) on PostgreSQL: LISTEN/NOTIFY into a ``FeedHub``.

* **Commit notices** are sent by the database itself: a trigger on ``runs`` (schema
  version 8, :mod:`docket_postgres._schema.v8`) NOTIFYs ``docket_feed`` inside the
  transition's transaction, so PostgreSQL delivers the notice only once the commit is
  readable, and a refused write sends none.
* **Only while someone listens.** A NOTIFYing transaction takes a database-wide lock at
  commit, which every writer would pay for nobody. So the listener of this module
  registers in ``feed_listeners`` while this backend has subscriptions, and the trigger
  and :meth:`PostgresFeed.publish` send nothing while that table is empty. The
  listening session is opened by the first ``subscribe`` and closed (its row deleted)
  once no subscription is left, checked every ``check_interval`` seconds.
* **Emissions** go with ``pg_notify`` from a pooled connection. A payload must stay
  under 8000 bytes, so an emission's wire bytes (``feed_item_to_json``, at most
  ``MAX_EMISSION_BYTES`` of data after ``bounded_emission``) are cut into parts carrying
  an id, an index and a count, all sent by one statement (one transaction: delivered
  together, in order). The listener puts them back together and drops a set still
  incomplete after ``reassembly_timeout`` seconds. Emissions of one publisher arrive in
  the order its ``publish`` calls returned.
* **Schemas** share the channel: every payload starts with the schema name and a space,
  and a listener keeps only its own schema's.
* **A lost connection** (server restart) is retried with a capped exponential backoff
  while subscriptions stay open; ``get`` never raises for it (it keeps waiting, answering
  ``[]`` at each timeout), and once the listener is back every subscription receives
  ``CommitNotice(None, None)``: re-read everything, notices may have been missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from typing import Any, Final

import attrs
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from docket.contract.feed import FeedHub, LocalSubscription
from docket.records import (
    CommitNotice,
    Emission,
    FeedItem,
    OwnerScope,
    Scope,
    bounded_emission,
    feed_item_from_json,
    feed_item_to_json,
    require_owner,
    require_scope,
    tenant_id_of,
)
from docket_postgres._engine import Engine
from docket_postgres._schema.v8 import FEED_CHANNEL
from docket_postgres.errors import StoreError, store_error

log = logging.getLogger("docket_postgres")

#: Bytes of an emission's wire text per NOTIFY part (the payload limit is 8000 bytes,
#: which also holds the schema name and the part header).
PART_BYTES: Final = 7000
#: Seconds between the listener's checks that it is alive and still has subscriptions.
CHECK_INTERVAL: Final = 5.0
#: Incomplete part sets kept at once (the oldest is dropped past this).
MAX_PENDING_SETS: Final = 256

_PUBLISH = (
    f"SELECT pg_notify('{FEED_CHANNEL}', '@name@ ' || p) FROM unnest(%s::text[]) AS u(p) "
    "WHERE EXISTS (SELECT 1 FROM @schema@.feed_listeners)"
)
_CLEAN = "DELETE FROM @schema@.feed_listeners WHERE pg_try_advisory_xact_lock(key)"
_LOCK_KEY = "SELECT pg_advisory_lock(%s)"
_REGISTER = "INSERT INTO @schema@.feed_listeners (key) VALUES (%s)"
_UNREGISTER = "DELETE FROM @schema@.feed_listeners WHERE key = %s"
# Wait for the commits that looked for listeners before this one registered (see v8).
_SETTLE = (
    "SET LOCAL lock_timeout = '5s'; LOCK TABLE @schema@.feed_listeners IN ACCESS EXCLUSIVE MODE"
)


def split_payload(wire: bytes, part_bytes: int = PART_BYTES) -> list[str]:
    """The NOTIFY payloads (without the schema prefix) carrying ``wire``: itself when it
    fits, else parts ``p <id> <index> <count> <text>`` cut at UTF-8 character bounds."""
    if len(wire) <= part_bytes:
        return [wire.decode()]
    pieces: list[bytes] = []
    start = 0
    while start < len(wire):
        end = min(start + part_bytes, len(wire))
        while end < len(wire) and (wire[end] & 0xC0) == 0x80:  # inside a character
            end -= 1
        pieces.append(wire[start:end])
        start = end
    ident = secrets.token_hex(12)
    return [f"p {ident} {i} {len(pieces)} {piece.decode()}" for i, piece in enumerate(pieces)]


class Reassembly:
    """Puts split payloads back together; drops sets incomplete after ``timeout``."""

    def __init__(self, timeout: float, limit: int = MAX_PENDING_SETS) -> None:
        self._timeout = timeout
        self._limit = limit
        # id -> (deadline, count, parts by index); dicts keep insertion (arrival) order
        self._sets: dict[str, tuple[float, int, dict[int, str]]] = {}

    @property
    def pending(self) -> int:
        return len(self._sets)

    def add(self, body: str, now: float | None = None) -> str | None:
        """The whole wire text once ``body`` (one payload) completes it, else ``None``."""
        if not body.startswith("p "):
            return body
        now = time.monotonic() if now is None else now
        self.expire(now)
        try:
            _, ident, index_text, count_text, text = body.split(" ", 4)
            index, count = int(index_text), int(count_text)
        except ValueError:
            log.warning("docket-postgres feed: a malformed emission part was dropped")
            return None
        if not 0 <= index < count:
            return None
        _, _, parts = self._sets.setdefault(ident, (now + self._timeout, count, {}))
        parts[index] = text
        if len(parts) < count:
            if len(self._sets) > self._limit:
                self._sets.pop(next(iter(self._sets)))
            return None
        del self._sets[ident]
        return "".join(parts[i] for i in range(count))

    def expire(self, now: float) -> None:
        for ident in [i for i, (deadline, _, _) in self._sets.items() if deadline <= now]:
            del self._sets[ident]


class FeedListener:
    """The LISTEN session of the feed: open while there are subscriptions."""

    def __init__(
        self,
        engine: Engine,
        hub: FeedHub,
        *,
        check_interval: float,
        max_backoff: float,
        reassembly_timeout: float,
    ) -> None:
        name = conninfo_to_dict(engine.conninfo).get("application_name")
        self._conninfo = make_conninfo(
            engine.conninfo, application_name=f"{name or 'docket'}-feed"[:63]
        )
        self._engine = engine
        self._hub = hub
        self._check_interval = check_interval
        self._max_backoff = max_backoff
        self._parts = Reassembly(reassembly_timeout)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._key = 0
        self._connected = asyncio.Event()
        self.connections = 0  # how many times it has connected (tests watch reconnects)

    @property
    def running(self) -> bool:
        return self._task is not None

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def backend_pid(self) -> int | None:
        conn = self._conn
        return conn.info.backend_pid if conn is not None and not conn.closed else None

    @property
    def pending_parts(self) -> int:
        return self._parts.pending

    async def wait_connected(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout):  # 3.11's wait_for can lose a cancel
                await self._connected.wait()
            return True
        except TimeoutError:
            return False

    async def subscribe(self, scope: Scope) -> LocalSubscription:
        await self._engine.open()  # the schema is checked (or created) first
        async with self._lock:
            if self._task is None:
                conn = await self._connect()
                self._task = asyncio.create_task(self._run(conn), name="docket-feed")
            # opened under the lock: the idle check cannot retire the listener meanwhile
            return self._hub.open(scope)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        """A LISTENing, registered session whose registration every commit sees."""
        engine = self._engine
        try:
            conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True
            )
        except psycopg.Error as exc:
            raise store_error(exc, sent=False, write=False) from exc
        try:
            await conn.execute(f"LISTEN {FEED_CHANNEL}".encode())
            await conn.execute(engine.q(_CLEAN))
            key = secrets.randbits(63)
            await conn.execute(_LOCK_KEY.encode(), (key,))  # held while the session lives
            await conn.execute(engine.q(_REGISTER), (key,))
            self._key = key
            with contextlib.suppress(psycopg.errors.LockNotAvailable):
                async with conn.transaction():
                    await conn.execute(engine.q(_SETTLE))
        except BaseException as exc:
            await conn.close()
            if isinstance(exc, psycopg.Error):
                raise store_error(exc, sent=True, write=True) from exc
            raise
        self._conn = conn
        self.connections += 1
        self._connected.set()
        return conn

    async def _run(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        backoff = 0.05
        while True:
            try:
                if conn is None:
                    conn = await self._connect()
                    backoff = 0.05
                    # notices sent while it was away are lost: readers re-read
                    self._hub.deliver(CommitNotice(tenant_id=None, run_id=None))
                if await self._listen(conn):
                    return  # idle: _listen retired the listener under the lock
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError, StoreError) as exc:
                log.warning("docket-postgres feed listener lost its connection: %s", exc)
            self._connected.clear()
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
            conn = self._conn = None
            if self._hub.subscribers == 0 and await self._retire():
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff)

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Hand notifications to the hub until no subscription is left (``True``)."""
        prefix = self._engine.schema + " "
        while True:
            async for note in conn.notifies(timeout=self._check_interval):
                if note.channel == FEED_CHANNEL and note.payload.startswith(prefix):
                    self._receive(note.payload[len(prefix) :])
            self._parts.expire(time.monotonic())
            if self._hub.subscribers == 0 and await self._retire():
                return True
            await conn.execute(b"SELECT 1")  # quiet for a while: is it still alive?

    def _receive(self, body: str) -> None:
        wire = self._parts.add(body)
        if wire is None:
            return
        try:
            item: FeedItem = feed_item_from_json(wire)
        except ValueError:
            log.warning("docket-postgres feed: an unreadable item was dropped")
            return
        self._hub.deliver(item)

    async def _retire(self) -> bool:
        async with self._lock:
            if self._hub.subscribers:
                return False
            self._task = None
            await self._close()
            return True

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        self._connected.clear()
        if conn is None:
            return
        with contextlib.suppress(Exception):
            await conn.execute(self._engine.q(_UNREGISTER), (self._key,))
        with contextlib.suppress(Exception):
            await conn.close()  # also releases the registration's advisory lock

    async def stop(self) -> None:
        async with self._lock:
            task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._close()


class PostgresFeed:
    """``EventFeed`` of ``PostgresBackend`` (``backend.feed``)."""

    def __init__(
        self,
        engine: Engine,
        *,
        check_interval: float | None = None,
        max_backoff: float = 5.0,
        reassembly_timeout: float = 30.0,
    ) -> None:
        self._engine = engine
        self.hub = FeedHub()
        self.listener = FeedListener(
            engine,
            self.hub,
            check_interval=CHECK_INTERVAL if check_interval is None else check_interval,
            max_backoff=max_backoff,
            reassembly_timeout=reassembly_timeout,
        )

    async def subscribe(self, scope: Scope) -> LocalSubscription:
        """A subscription receiving the items published after this returns; opens the
        listening session if needed (``StoreError`` when the server is unreachable)."""
        require_scope(scope)
        return await self.listener.subscribe(scope)

    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        """NOTIFY ``emission`` (tenant from ``owner``); nothing is sent while no session
        of this schema listens. ``StoreError`` when the server is unreachable."""
        require_owner(owner)
        if not isinstance(emission, Emission):
            raise TypeError(f"expected an Emission, got {type(emission).__name__}")
        tenant = tenant_id_of(owner)
        if emission.tenant_id != tenant:
            emission = attrs.evolve(emission, tenant_id=tenant)
        payloads = split_payload(feed_item_to_json(bounded_emission(emission)))
        engine = self._engine
        await engine.fetch(engine.q(_PUBLISH), (payloads,), write=True)

    async def close(self) -> None:
        """Close the listening session (subscriptions stay open and quiet)."""
        await self.listener.stop()


__all__ = ["FeedListener", "PostgresFeed", "Reassembly", "split_payload"]
