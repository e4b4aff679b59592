"""What the four SQLite stores share: the connections, the clock, the write primitive.

One :class:`Engine` per ``SQLiteBackend``; each store object holds it and nothing else
of the backend's. It owns one *writer* worker thread with the one writer connection,
and one *reader* thread with a read-only connection (an in-memory database has a single
connection, so there reads share the writer's thread); see ``_threads.py`` for the
threads and group commit.

* **Atomicity comes from SQLite.** Every write (:meth:`Engine.write`) — each
  transition, each claim operation, ``save_graph`` — runs inside a ``BEGIN IMMEDIATE``
  transaction that takes the file's write lock before it reads anything, so the
  decisions it makes (fences, replay, claim selection) cannot interleave with another
  writer, whether that writer is in this process or another one. Nothing relies on an
  in-process lock. Reads (:meth:`Engine.read`) each see one consistent snapshot.
* **One clock.** ``clock`` (default: the host clock, which every process on the
  machine shares) stamps every operational time; explicit ``now`` arguments win, as
  the contract says, for tests and simulations (:meth:`Engine.now`).
* **Lazy, reopenable.** Operations open the engine themselves; :meth:`Engine.close`
  swaps in fresh, unopened workers, so a store object outlives a close and reopens.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from datetime import datetime

from docket.contract import Limits, Permanent, Retryable
from docket.values import to_micros, utc
from docket_sqlite._feed import DEFAULT_FEED_POLL
from docket_sqlite._threads import (
    Done,
    Hub,
    Job,
    PendingWrite,
    T,
    Worker,
    apply_batch,
    hub_for,
    snapshot,
)
from docket_sqlite.errors import PermanentStoreError, SchemaTooNew, StoreError, store_error
from docket_sqlite.schema import SCHEMA_VERSION, connect, prepare, read_version
from docket_sqlite.url import Target


def _noop(conn: sqlite3.Connection) -> None:
    return None


class Engine:
    """The shared state of one backend: target, settings, clock, wake-ups, workers."""

    def __init__(
        self,
        target: Target,
        *,
        clock: Callable[[], datetime],
        limits: Limits,
        synchronous: str,
        busy_timeout: float,
        feed_poll: float = DEFAULT_FEED_POLL,
    ) -> None:
        self.target = target
        self.feed_poll = feed_poll
        self.limits = limits
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.hub: Hub = hub_for(target)
        self._clock = clock
        self._lifecycle = threading.Lock()
        self.writer, self.reader = self._workers()
        self.ready = False

    # -- clock ------------------------------------------------------------------------------

    def now(self, given: datetime | None) -> datetime:
        return utc(given) if given is not None else utc(self._clock())

    def now_us(self, given: datetime | None) -> int:
        return to_micros(self.now(given))

    # -- lifecycle ----------------------------------------------------------------------------

    def _workers(self) -> tuple[Worker, Worker]:
        writer = Worker("docket-sqlite-writer", self._open_writer)
        if self.target.memory:
            return writer, writer
        return writer, Worker("docket-sqlite-reader", self._open_reader)

    def _open_writer(self) -> sqlite3.Connection:
        conn = connect(self.target, busy_timeout=self.busy_timeout, synchronous=self.synchronous)
        try:
            prepare(conn, self.target, now_us=self.now_us(None))
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_reader(self) -> sqlite3.Connection:
        conn = connect(self.target, busy_timeout=self.busy_timeout, synchronous=self.synchronous)
        try:
            conn.execute("PRAGMA query_only = ON")
            found = read_version(conn, self.target.describe())
            if found > SCHEMA_VERSION:  # the writer checked it; a newer release moved it on
                raise SchemaTooNew(self.target.describe(), found, SCHEMA_VERSION)
            if found != SCHEMA_VERSION:
                raise PermanentStoreError(
                    f"{self.target.describe()} has schema version {found}, expected "
                    f"{SCHEMA_VERSION}"
                )
        except sqlite3.Error as exc:
            conn.close()
            raise store_error(exc) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    async def open(self) -> None:
        writer, reader = self.writer, self.reader
        await writer.run(_noop)
        if reader is not writer:
            await reader.run(_noop)
        with self._lifecycle:
            if self.writer is writer:
                self.ready = True

    async def close(self) -> None:
        with self._lifecycle:
            writer, reader = self.writer, self.reader
            self.writer, self.reader = self._workers()
            self.ready = False
        await writer.shutdown()
        if reader is not writer:
            await reader.shutdown()

    async def ensure_open(self) -> None:
        if not self.ready:
            await self.open()

    # -- running jobs --------------------------------------------------------------------------

    async def write(self, job: Callable[[sqlite3.Connection], Done[T]]) -> T:
        """Run ``job`` atomically on the writer thread, possibly sharing a transaction
        with other queued writes (group commit, see ``_threads.py``)."""
        await self.ensure_open()
        writer = self.writer
        loop = asyncio.get_running_loop()
        entry = PendingWrite(job, loop, loop.create_future())
        try:
            writer.enqueue(entry, self._apply_batch)
        except BaseException:  # the executor is shut down (a concurrent close)
            if writer.withdraw(entry):  # never ran, never will
                raise
        try:
            result: T = await entry.future
        except asyncio.CancelledError:
            writer.withdraw(entry)  # not started: it never runs; started: it finishes alone
            raise
        return result

    def _apply_batch(self, conn: sqlite3.Connection, batch: list[PendingWrite]) -> None:
        apply_batch(conn, batch, self.hub)

    async def read(self, job: Job[T]) -> T:
        """Run ``job`` inside one read transaction (one consistent snapshot)."""
        await self.ensure_open()
        return await self.reader.run(lambda conn: snapshot(conn, job))

    async def outcome(
        self, job: Callable[[sqlite3.Connection], Done[T]]
    ) -> T | Retryable | Permanent:
        """``write`` for operations whose answers include Retryable/Permanent."""
        try:
            return await self.write(job)
        except StoreError as exc:
            return exc.outcome


__all__ = ["Engine"]
