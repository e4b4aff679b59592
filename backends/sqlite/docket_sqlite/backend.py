"""``SQLiteBackend``: the contract on one SQLite file (WAL), driven from asyncio.

The backend is the bundle: it checks its options, builds the one shared
:class:`~docket_sqlite._engine.Engine` (connections on worker threads, the clock,
wake-ups, the atomic write) and the four store objects over it, and keeps what belongs
to the backend as a whole: capabilities, ``open``/``close``, the clock, ``wait_for_work``,
schema versions and migration, and the SQLite extras (``settings``, ``backup``).

Where the rest lives:

* ``_engine.py`` — connections, lifecycle, the clock, ``write``/``read``;
* ``_threads.py`` — worker threads, group commit, in-process wake-ups;
* ``_rows.py`` — column encodings and run documents stored in pieces;
* ``_graphs.py``, ``_runs.py``, ``_events.py``, ``_transitions.py`` — one class per
  contract store (``graphs``, ``runs``, ``events``, ``transitions``), and
  ``_schedules.py`` for the optional ``schedules`` store;
* ``_feed.py``, ``_live.py`` — the live feed (``backend.feed``, ``Feature.STREAMS``);
* ``_retention.py`` — ``prune`` (``Feature.PRUNE``);
* ``_queues.py``, ``_claims.py`` — named queues' ledger (``Feature.QUEUES``) and the
  claim's candidate reads by queue and priority;
* ``_admissions.py`` — queues' admission ledger (``backend.admissions``,
  ``Feature.ADMISSION``);
* ``schema.py`` — the DDL, connection settings and migrations.

Other processes on the same file learn about new work by polling (see the docs).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, cast

import attrs

from docket.clock import system_clock
from docket.contract import Capabilities, Feature, Limits, PruneResult
from docket_sqlite._admissions import SQLiteAdmissionStore
from docket_sqlite._engine import Engine
from docket_sqlite._events import SQLiteEventStore
from docket_sqlite._feed import DEFAULT_FEED_POLL
from docket_sqlite._graphs import SQLiteGraphStore
from docket_sqlite._live import SQLiteFeed
from docket_sqlite._queues import SQLiteQueueStore
from docket_sqlite._retention import prune as prune_file
from docket_sqlite._runs import SQLiteRunStore
from docket_sqlite._schedules import SQLiteScheduleStore
from docket_sqlite._transitions import SQLiteTransitionStore
from docket_sqlite.errors import store_error
from docket_sqlite.schema import (
    DEFAULT_BUSY_TIMEOUT,
    SCHEMA_VERSION,
    SYNCHRONOUS_MODES,
    read_version,
    schema_sql,
)
from docket_sqlite.schema import migrate as migrate_file
from docket_sqlite.url import Target


@attrs.frozen(kw_only=True)
class SQLiteSettings:
    """What the writer connection actually runs with (read back from SQLite)."""

    path: str
    journal_mode: str
    synchronous: str
    foreign_keys: bool
    busy_timeout: float  # seconds
    schema_version: int
    sqlite_version: str


_SYNC_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


# -- the backend ----------------------------------------------------------------------------------


class SQLiteBackend:
    """The docket contract on one SQLite database (a WAL file, or ``:memory:``).

    ``path`` is a file path (created, with its schema, on first open) or ``":memory:"``.
    ``clock`` is the backend's one authoritative clock (default: the host's), ``limits``
    the size limits it declares and enforces, ``synchronous`` ``"FULL"`` (every commit
    is fsynced before it is acknowledged) or ``"NORMAL"`` (faster; a power cut may lose
    the last commits, a process crash never does), ``busy_timeout`` how many seconds a
    write waits for another process's write lock before answering ``Retryable``.
    ``feed_poll`` how often (seconds) the live feed checks the file for other processes'
    commits while someone in this process subscribes (see ``_feed.py``).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Target = ":memory:",
        *,
        clock: Callable[[], datetime] | None = None,
        limits: Limits | None = None,
        synchronous: str = "FULL",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        feed_poll: float = DEFAULT_FEED_POLL,
    ) -> None:
        target = path if isinstance(path, Target) else Target.of(path)
        mode = synchronous.upper() if isinstance(synchronous, str) else synchronous
        if mode not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, got {synchronous!r}")
        if (
            not isinstance(busy_timeout, int | float)
            or isinstance(busy_timeout, bool)
            or not 0 <= busy_timeout <= 86_400
        ):
            raise ValueError(f"busy_timeout must be 0..86400 seconds, got {busy_timeout!r}")
        if (
            not isinstance(feed_poll, int | float)
            or isinstance(feed_poll, bool)
            or not 0.001 <= feed_poll <= 60
        ):
            raise ValueError(f"feed_poll must be 0.001..60 seconds, got {feed_poll!r}")
        clock, limits = _clock_and_limits(clock, limits)
        self._engine = engine = Engine(
            target,
            clock=clock or system_clock,
            limits=limits or Limits(),
            synchronous=mode,
            busy_timeout=float(busy_timeout),
            feed_poll=float(feed_poll),
        )
        self._graphs = SQLiteGraphStore(engine)
        self._runs = SQLiteRunStore(engine)
        self._events = SQLiteEventStore(engine)
        self._transitions = SQLiteTransitionStore(engine)
        self._schedules = SQLiteScheduleStore(engine)
        self._feed = SQLiteFeed(engine)
        self._queues = SQLiteQueueStore(engine)
        self._admissions = SQLiteAdmissionStore(engine)

    @classmethod
    def from_url(cls, url: str, **options: object) -> SQLiteBackend:
        """Build (not open) a backend from a ``sqlite://`` URL and factory options."""
        return _create(url, options)

    def __repr__(self) -> str:
        engine = self._engine
        return f"SQLiteBackend({engine.target.describe()!r}, synchronous={engine.synchronous!r})"

    @property
    def path(self) -> str | None:
        """The absolute database path, or ``None`` for an in-memory database."""
        return self._engine.target.path

    # -- bundle -----------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        features = {
            Feature.NOTIFY,
            Feature.REOPEN_FAILED,
            Feature.CHILD_RUNS,
            # schema version 3: waiting runs with a wake are claimed, schedules have a table;
            # messages live in the run document and need nothing of their own
            Feature.TIMERS,
            Feature.MESSAGES,
            Feature.SCHEDULES,
            # schema version 4: events and finished runs carry the times retention reads
            Feature.PRUNE,
            # in-process fan-out after each commit, a data_version poller across processes
            Feature.STREAMS,
            # schema version 5: runs keep queue and priority, queues and slots have tables
            Feature.QUEUES,
            # schema version 6: the admission ledger has a table beside the queue rows
            Feature.ADMISSION,
        }
        if not self._engine.target.memory:
            features.add(Feature.DURABLE)
            if self._engine.synchronous == "FULL":
                features.add(Feature.DURABLE_FSYNC)
        return Capabilities(limits=self._engine.limits, features=frozenset(features), name="sqlite")

    @property
    def graphs(self) -> SQLiteGraphStore:
        return self._graphs

    @property
    def runs(self) -> SQLiteRunStore:
        return self._runs

    @property
    def events(self) -> SQLiteEventStore:
        return self._events

    @property
    def transitions(self) -> SQLiteTransitionStore:
        return self._transitions

    @property
    def schedules(self) -> SQLiteScheduleStore:
        """Cron schedules (``Feature.SCHEDULES``): a ``docket.contract.ScheduleStore``."""
        return self._schedules

    @property
    def feed(self) -> SQLiteFeed:
        """The live feed (``Feature.STREAMS``): a ``docket.contract.EventFeed``."""
        return self._feed

    @property
    def queues(self) -> SQLiteQueueStore:
        """Named queues and their slot ledger (``Feature.QUEUES``): a
        ``docket.contract.QueueStore``."""
        return self._queues

    @property
    def admissions(self) -> SQLiteAdmissionStore:
        """Queues' admission ledger (``Feature.ADMISSION``): a
        ``docket.contract.AdmissionStore``."""
        return self._admissions

    # -- lifecycle ----------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the file (creating it and its schema if new) and check its version.

        Idempotent. Raises :class:`~docket_sqlite.errors.SchemaTooNew` (changing
        nothing) for a file written by a newer release, and another
        :class:`~docket_sqlite.errors.StoreError` when the file cannot be used.
        Operations open the backend themselves if it was not opened.
        """
        await self._engine.open()

    async def close(self) -> None:
        """Close the connections (an in-memory database is gone after this); idempotent."""
        await self._engine.close()

    async def settings(self) -> SQLiteSettings:
        """The durability settings in force on the writer connection."""
        await self._engine.ensure_open()

        def job(conn: sqlite3.Connection) -> SQLiteSettings:
            def pragma(name: str) -> Any:
                return conn.execute(f"PRAGMA {name}").fetchone()[0]

            try:
                return SQLiteSettings(
                    path=self._engine.target.describe(),
                    journal_mode=str(pragma("journal_mode")).lower(),
                    synchronous=_SYNC_NAMES.get(int(pragma("synchronous")), "?"),
                    foreign_keys=bool(pragma("foreign_keys")),
                    busy_timeout=int(pragma("busy_timeout")) / 1000,
                    schema_version=read_version(conn, self._engine.target.describe()),
                    sqlite_version=sqlite3.sqlite_version,
                )
            except sqlite3.Error as exc:
                raise store_error(exc) from exc

        return await self._engine.writer.run(job)

    async def backup(self, destination: str | os.PathLike[str]) -> None:
        """Copy a consistent snapshot into ``destination`` (SQLite's online backup API).

        Workers may keep running: the copy reads one snapshot and never blocks writers.
        ``destination`` is overwritten if it exists.
        """
        await self._engine.ensure_open()
        target = Target.of(destination)
        if target.path is None:
            raise ValueError("back up into a file, not into ':memory:'")
        if target.path == self._engine.target.path:
            raise ValueError("a backup cannot overwrite the database it copies")

        def job(conn: sqlite3.Connection) -> None:
            try:
                copy = sqlite3.connect(target.path or "", isolation_level=None)
            except sqlite3.Error as exc:
                raise store_error(exc) from exc
            try:
                conn.backup(copy)
                copy.execute("PRAGMA journal_mode = WAL")
            except sqlite3.Error as exc:
                raise store_error(exc) from exc
            finally:
                copy.close()

        await self._engine.reader.run(job)

    # -- schema (docket.contract.Migratable) ---------------------------------------------------

    async def schema_versions(self) -> tuple[int | None, int]:
        """``(stored, supported)`` schema versions; ``stored`` is ``None`` for a file that
        does not exist yet or has no docket tables. Reads without opening the backend, so
        it works on a file that :meth:`open` refuses (too old, too new)."""
        path = self._engine.target.path
        if path is None:
            return (SCHEMA_VERSION if self._engine.ready else None), SCHEMA_VERSION
        if not os.path.exists(path):
            return None, SCHEMA_VERSION

        def job() -> int:
            try:
                uri = f"{Path(path).as_uri()}?mode=ro"  # percent-encodes odd characters
                conn = sqlite3.connect(uri, uri=True, isolation_level=None)
            except sqlite3.Error as exc:
                raise store_error(exc) from exc
            try:
                return read_version(conn, self._engine.target.describe())
            finally:
                conn.close()

        found = await asyncio.to_thread(job)
        return (found or None), SCHEMA_VERSION

    async def migrate(self) -> tuple[int | None, int]:
        """Bring the file to the current schema (see :func:`docket_sqlite.migrate`);
        returns ``(from, to)``, ``from`` being ``None`` for a new file. Stop the workers
        using the file first."""
        path = self._engine.target.path
        if path is None:
            raise ValueError("an in-memory database has nothing to migrate; give a file path")
        found, current = await asyncio.to_thread(
            migrate_file, path, busy_timeout=self._engine.busy_timeout
        )
        return (found or None), current

    def schema_sql(self) -> str:
        """The DDL of the whole current schema (what :meth:`migrate` applies to a new file)."""
        return schema_sql()

    # -- retention (docket.contract.Prunable) ---------------------------------------------------

    async def prune(
        self,
        *,
        event_age: timedelta | None = None,
        run_age: timedelta | None = None,
        batch_size: int = 1000,
        now: datetime | None = None,
    ) -> PruneResult:
        """Delete, in one bounded write transaction, events written and runs finished
        more than an age before ``now`` (the backend's clock); see ``_retention.py``.

        Up to ``batch_size`` events of any run, live ones included (readers see the hole
        through ``EventPage.oldest_available_seq``), and up to ``batch_size`` finished
        runs with their events and transition records; ``None`` skips that kind; a row
        exactly at the boundary survives. Call it again at once while it keeps deleting
        full batches. The file's write lock serialises pruners, so ``ran`` is always
        ``True``.
        """
        return await prune_file(self._engine, event_age, run_age, batch_size, now)

    # -- clock and wake-ups --------------------------------------------------------------------

    async def now(self) -> datetime:
        return self._engine.now(None)

    async def wait_for_work(self, timeout: float) -> bool:
        return await self._engine.hub.wait(timeout)


def _clock_and_limits(
    clock: object, limits: object
) -> tuple[Callable[[], datetime] | None, Limits | None]:
    """The checks the constructor and ``from_url`` share (options may come untyped)."""
    if clock is not None and not callable(clock):
        raise TypeError("clock must be a callable returning an aware datetime")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError("limits must be docket.contract.Limits")
    return cast("Callable[[], datetime] | None", clock), limits


# -- discovery ----------------------------------------------------------------------------------


def _create(url: str, options: Mapping[str, object]) -> SQLiteBackend:
    from docket_sqlite.url import parse_url

    target, from_url = parse_url(url)
    known = {"clock", "limits", "synchronous", "busy_timeout", "feed_poll"}
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"sqlite:// does not take {', '.join(sorted(unknown))}")
    synchronous = options.get("synchronous", from_url.get("synchronous", "FULL"))
    if not isinstance(synchronous, str):
        raise TypeError("synchronous must be 'FULL' or 'NORMAL'")
    timeout: object = options.get("busy_timeout", from_url.get("busy_timeout"))
    if timeout is None:
        timeout = DEFAULT_BUSY_TIMEOUT
    elif isinstance(timeout, str):
        try:
            timeout = float(timeout)
        except ValueError:
            raise ValueError(f"busy_timeout must be a number of seconds, got {timeout!r}") from None
    if not isinstance(timeout, int | float) or isinstance(timeout, bool):
        raise TypeError("busy_timeout must be a number of seconds")
    clock, limits = _clock_and_limits(options.get("clock"), options.get("limits"))
    poll: object = options.get("feed_poll", from_url.get("feed_poll", DEFAULT_FEED_POLL))
    if isinstance(poll, str):
        try:
            poll = float(poll)
        except ValueError:
            raise ValueError(f"feed_poll must be a number of seconds, got {poll!r}") from None
    if not isinstance(poll, int | float) or isinstance(poll, bool):
        raise TypeError("feed_poll must be a number of seconds")
    return SQLiteBackend(
        target,
        clock=clock,
        limits=limits,
        synchronous=synchronous,
        busy_timeout=float(timeout),
        feed_poll=float(poll),
    )


__all__ = ["SQLiteBackend", "SQLiteSettings"]
