"""Wake-ups: ``wait_for_work`` waiters, and the LISTEN connection that wakes them.

Writes that make work due call ``pg_notify('docket_wake', '<schema>')`` inside their
transaction, so PostgreSQL delivers the notification only if they commit. Every
backend instance keeps one dedicated connection (outside the pool) that has run
``LISTEN docket_wake``; a notification naming its schema wakes every waiter of that
instance. Notifications for other schemas on the same database are ignored.

The listener reconnects with a capped exponential backoff when its connection is lost.
Notifications sent while it was away are lost, so after a reconnection it wakes every
waiter once: they poll, which is what they would have done on a notification. Polling
(the ``wait_for_work`` timeout) stays the fallback for everything, including timers
that come due without any write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from docket_postgres.schema import NOTIFY_CHANNEL

log = logging.getLogger("docket_postgres")


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Waiters:
    """The futures of the ``wait_for_work`` calls in flight (one event loop)."""

    def __init__(self) -> None:
        self._futures: set[asyncio.Future[None]] = set()

    async def wait(self, timeout: float) -> bool:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._futures.add(future)
        try:
            async with asyncio.timeout(max(0.0, timeout)):  # 3.11's wait_for can lose a cancel
                await future
            return True
        except TimeoutError:
            return False
        finally:
            self._futures.discard(future)

    def wake_all(self) -> None:
        for future in list(self._futures):
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits
                future.get_loop().call_soon_threadsafe(_resolve, future)

    @property
    def count(self) -> int:
        return len(self._futures)


class Listener:
    """One LISTEN connection with reconnection; wakes ``waiters`` on matching payloads."""

    def __init__(
        self,
        conninfo: str,
        schema: str,
        waiters: Waiters,
        *,
        check_interval: float = 30.0,
        max_backoff: float = 5.0,
    ) -> None:
        name = conninfo_to_dict(conninfo).get("application_name")
        # the LISTEN session is told apart from the pool's by its name
        self._conninfo = make_conninfo(conninfo, application_name=f"{name or 'docket'}-listen"[:63])
        self._schema = schema
        self._waiters = waiters
        self._check_interval = check_interval
        self._max_backoff = max_backoff
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._connected = asyncio.Event()
        self.connections = 0  # how many times it has connected (tests watch reconnects)

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def backend_pid(self) -> int | None:
        """The server process of the LISTEN connection (None while disconnected)."""
        conn = self._conn
        return conn.info.backend_pid if conn is not None and not conn.closed else None

    @property
    def conninfo(self) -> str:
        """Where (and under which ``application_name``) the LISTEN session connects."""
        return self._conninfo

    async def start(self, conn: psycopg.AsyncConnection[Any] | None = None) -> None:
        """LISTEN (on ``conn`` if given) before returning, so no later announcement is
        missed; then keep listening in a background task."""
        if conn is None:
            conn = await self._connect()
        else:
            await self._listen_on(conn)
        self._task = asyncio.create_task(self._run(conn), name=f"docket-listen-{self._schema}")

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True
        )
        try:
            await self._listen_on(conn)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _listen_on(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        self._conn = conn
        self.connections += 1
        self._connected.set()

    async def wait_connected(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(timeout):  # 3.11's wait_for can lose a cancel
                await self._connected.wait()
            return True
        except TimeoutError:
            return False

    async def _run(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        backoff = 0.05
        while True:
            try:
                if conn is None:
                    conn = await self._connect()
                    backoff = 0.05
                    self._waiters.wake_all()  # announcements may have been missed meanwhile
                await self._listen(conn)
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                log.warning("docket-postgres listener lost its connection: %s", exc)
            finally:
                self._connected.clear()
                if conn is not None:
                    with contextlib.suppress(Exception):
                        await conn.close()
                conn = None
                self._conn = None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff)

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        while True:
            async for note in conn.notifies(timeout=self._check_interval):
                if note.channel == NOTIFY_CHANNEL and note.payload == self._schema:
                    self._waiters.wake_all()
            # quiet for a while: make sure the connection is still alive
            await conn.execute("SELECT 1")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
        self._connected.clear()


__all__ = ["Listener", "Waiters"]
