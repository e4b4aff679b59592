"""What the four stores of one ``PostgresBackend`` share: connections, the clock, wake-ups.

* **Connections.** A ``psycopg_pool.AsyncConnectionPool`` of autocommit connections
  (session time zone UTC, a statement timeout, prepared statements), plus one
  dedicated LISTEN connection for wake-ups (:mod:`docket_postgres.notify`). Opening
  first checks the schema on a direct connection: a store written by a newer release is
  refused before anything is changed; an empty schema is created.
* **One statement per write.** :meth:`Engine.fetch` runs one statement on a pooled
  connection and turns a driver error into a classified :class:`StoreError`;
  :meth:`Engine.outcome` answers the same failure as ``Retryable``/``Permanent`` for the
  operations whose contract has a slot for it. Statements name the schema as
  ``@schema@``, spliced in once per statement (:meth:`Engine.q`).
* **One clock.** The database's ``clock_timestamp()`` stamps and compares every
  operational time, unless an operation is given an explicit ``now`` (the contract's
  testing hook) or the backend was built with a ``clock`` (a testing seam that replaces
  the database clock for the whole backend, so a test can drive time). :meth:`Engine.given`
  is the instant an operation sends: explicit, the test clock, or ``None`` (the
  database's).

The small helpers at the end turn owners, ids and stored rows into what the statements
take and back; every store uses them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

import psycopg
import psycopg_pool
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from docket.contract import Limits, Permanent, Retryable
from docket.contract.clock import SampledClock
from docket.records import OwnerScope, Run, owner_scope, run_from_json, tenant_id_of
from docket.values import utc
from docket_postgres.arrays import register as register_arrays
from docket_postgres.errors import PermanentStoreError, StoreError, store_error
from docket_postgres.notify import Listener, Waiters
from docket_postgres.schema import (
    SCHEMA_VERSION,
    apply_migrations,
    check_shape,
    read_version,
    refuse,
    render,
)

INT4_MAX: Final = (1 << 31) - 1  # counters are ``integer``: a larger bound means "no bound"

Row = tuple[Any, ...]
T = TypeVar("T")
Pool = psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[Any]]

_NOW = "SELECT clock_timestamp()"
_SETTINGS = "SELECT current_setting('fsync'), current_setting('synchronous_commit')"


class Engine:
    """The pool, the LISTEN connection, the clock and the wake-ups of one backend.

    Built (not opened) by :class:`~docket_postgres.backend.PostgresBackend`, which has
    already checked every argument; any store operation opens it on first use.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str,
        where: str,
        app_name: str,
        clock: Callable[[], datetime] | None,
        limits: Limits,
        fair: bool,
        statement_timeout: float,
        pool_min_size: int,
        pool_max_size: int,
        pool_timeout: float,
        notify: bool,
        prepare: bool,
        clock_resync: float,
        configure: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.schema = schema
        self.where = where  # how a refusal names the store
        self.limits = limits
        self.fair = fair
        self.notify = notify
        self._conninfo = conninfo
        self._clock = clock
        self._statement_timeout = statement_timeout
        self._pool_min = pool_min_size
        self._pool_max = pool_max_size
        self._pool_timeout = pool_timeout
        self._checking: asyncio.Task[None] | None = None
        self._prepare = prepare
        # what sets up each pooled session: the backend's seam, else configure_session
        self._configure = configure or self.configure_session
        try:
            given = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"not a usable PostgreSQL connection string: {exc}") from None
        # name the sessions so operators can tell them apart (unless the URL names them)
        if "application_name" not in given:
            self._conninfo = make_conninfo(conninfo, application_name=app_name)
        self._pool: Pool | None = None
        self._listener: Listener | None = None
        self._waiters = Waiters()
        self._lifecycle = asyncio.Lock()
        self._durable_fsync = False
        self._sql: dict[str, bytes] = {}
        self._server_clock = SampledClock(self._read_clock, resync=clock_resync)

    @property
    def conninfo(self) -> str:
        """Where the backend connects (with its ``application_name``)."""
        return self._conninfo

    @property
    def pool(self) -> Pool | None:
        """The open pool (``None`` while closed)."""
        return self._pool

    @property
    def listener(self) -> Listener | None:
        """The LISTEN connection's manager (``None`` when closed or ``notify=False``)."""
        return self._listener

    @property
    def durable_fsync(self) -> bool:
        """Whether the server, as last opened, flushes commits to disk before answering."""
        return self._durable_fsync

    # -- lifecycle ------------------------------------------------------------------------------

    async def direct(self, conninfo: str | None = None) -> psycopg.AsyncConnection[Any]:
        """A connection outside the pool (schema checks, migrations, the LISTEN session)."""
        try:
            conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
                conninfo or self._conninfo, autocommit=True
            )
        except psycopg.Error as exc:
            raise store_error(exc, sent=False, write=False) from exc
        return conn

    async def open(self) -> None:
        """Check (or create) the schema, open the pool and the LISTEN connection.

        Idempotent. See :meth:`docket_postgres.backend.PostgresBackend.open`.
        """
        async with self._lifecycle:
            if self._pool is not None:
                return
            listener = Listener(self._conninfo, self.schema, self._waiters) if self.notify else None
            # One direct session checks the schema (so a refusal is precise and early);
            # it then becomes the LISTEN session.
            conn = await self.direct(listener.conninfo if listener else self._conninfo)
            try:
                await self._prepare_schema(conn)
                if listener is not None:
                    await listener.start(conn)
            except BaseException as exc:
                await conn.close()
                if isinstance(exc, psycopg.Error):
                    raise store_error(exc, sent=True, write=False) from exc
                raise
            if listener is None:
                await conn.close()
            pool: Pool = psycopg_pool.AsyncConnectionPool(
                self._conninfo,
                min_size=self._pool_min,
                max_size=self._pool_max,
                timeout=self._pool_timeout,
                kwargs={"autocommit": True},
                configure=self._configure,
                open=False,
                name=f"docket-{self.schema}",
            )
            try:
                await pool.open(wait=True, timeout=self._pool_timeout)
            except BaseException as exc:
                await pool.close()
                if listener is not None:
                    await listener.stop()
                if isinstance(exc, psycopg_pool.PoolTimeout):
                    raise store_error(exc, sent=False, write=False) from exc
                raise
            self._pool, self._listener = pool, listener

    async def _prepare_schema(self, conn: psycopg.AsyncConnection[Any]) -> None:
        found = await read_version(conn, self.schema)
        refuse(found, self.where, SCHEMA_VERSION, older_ok=False)
        if found is None:
            await apply_migrations(conn, self.schema, self.where, upgrade=False)
        await check_shape(conn, self.schema)
        try:
            cur = await conn.execute(_SETTINGS)
            row = await cur.fetchone()
        except psycopg.Error as exc:
            raise store_error(exc, sent=True, write=False) from exc
        fsync, synchronous = (str(v) for v in (row or ("off", "off")))
        self._durable_fsync = fsync == "on" and synchronous in (
            "on",
            "remote_write",
            "remote_apply",
        )

    async def configure_session(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Session settings of every pooled connection."""
        timeout_ms = int(self._statement_timeout * 1000)
        await conn.execute(f"SET TIME ZONE 'UTC'; SET statement_timeout = {timeout_ms}".encode())
        conn.prepare_threshold = 0 if self._prepare else None
        register_arrays(conn.adapters)

    async def close(self, flush: Callable[[], Awaitable[None]]) -> None:
        """Close the LISTEN connection and the pool; idempotent. ``flush`` runs between
        the two: the writes still queued for a group statement go while the pool is up."""
        async with self._lifecycle:
            pool, self._pool = self._pool, None
            listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()
        await flush()
        checking, self._checking = self._checking, None
        if checking is not None and not checking.done():
            checking.cancel()
        if checking is not None:
            await asyncio.wait([checking])
        if pool is not None:
            await pool.close()

    async def _ensure_open(self) -> Pool:
        pool = self._pool
        if pool is None:
            await self.open()
            pool = self._pool
            assert pool is not None
        return pool

    # -- running statements ---------------------------------------------------------------------

    def q(self, template: str) -> bytes:
        """A statement with this backend's schema spliced in (cached)."""
        found = self._sql.get(template)
        if found is None:
            found = self._sql[template] = render(template, self.schema).encode()
        return found

    async def fetch(
        self, query: bytes | sql.Composed, params: Sequence[object], *, write: bool
    ) -> list[Row]:
        """Run one statement on a pooled connection; raise a classified :class:`StoreError`."""
        pool = await self._ensure_open()
        for again in (False, True):
            conn: psycopg.AsyncConnection[Any] | None = None
            try:
                async with pool.connection() as conn:
                    cur = await conn.execute(query, params, binary=True)
                    # (``cur.description`` would build a Column per field just to ask this)
                    result = cur.pgresult
                    if result is not None and result.status == pq.ExecStatus.TUPLES_OK:
                        return await cur.fetchall()
                    if result is not None and result.status == pq.ExecStatus.COMMAND_OK:
                        return []  # a statement that answers no rows
                    # anything else is not this statement's answer: never read it as
                    # "no rows" (a missing run, a lost claim); the connection's state is
                    # unknown, so it is closed (the pool replaces it), and the error is
                    # classified as any lost connection's
                    await conn.close()
                    status = "none" if result is None else pq.ExecStatus(result.status).name
                    raise psycopg.OperationalError(f"unexpected result status {status}")
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                stale = conn is not None and conn.broken
                if stale:
                    checking = self._check_idle(pool)
                    # A read that met a connection the server dropped while it sat idle
                    # (a restart) goes once more, once the others were tested: that is no
                    # outage to its caller.
                    if not write and not again:
                        await asyncio.wait([checking])
                        continue
                raise store_error(exc, sent=conn is not None, write=write) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_idle(self, pool: Pool) -> asyncio.Task[None]:
        """After a restart every idle pooled connection is dead, and each would fail the
        next statement sent on it: have the pool test (and replace) them all, once."""
        checking = self._checking
        if checking is None or checking.done():
            checking = self._checking = asyncio.get_running_loop().create_task(pool.check())
            # a check that failed (the server still down) has nothing to add to the
            # statement's own error: retrieve it, so it is not reported as unhandled
            checking.add_done_callback(lambda done: done.cancelled() or done.exception())
        return checking

    async def transaction(
        self,
        body: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]],
        *,
        write: bool,
    ) -> T:
        """Run ``body`` in one transaction on a pooled connection (several statements that
        must be atomic together: the queue ledger's operations); raise a classified
        :class:`StoreError` for a database failure (the transaction is rolled back).

        Never in psycopg's pipeline mode: a pipelined transaction cancelled mid-flight
        went back to the pool still in pipeline mode, and every later statement on that
        connection read an earlier one's result (a run read as missing)."""
        pool = await self._ensure_open()
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            async with pool.connection() as conn, conn.transaction():
                return await body(conn)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            if conn is not None and conn.broken:
                self._check_idle(pool)
            raise store_error(exc, sent=conn is not None, write=write) from exc

    async def outcome(
        self, query: bytes, params: Sequence[object]
    ) -> list[Row] | Retryable | Permanent:
        """``fetch`` of a write whose answers include Retryable/Permanent."""
        try:
            return await self.fetch(query, params, write=True)
        except StoreError as exc:
            return exc.outcome

    # -- clock and wake-ups -----------------------------------------------------------------------

    def given(self, now: datetime | None) -> datetime | None:
        """The instant to send for ``now``: explicit, the test clock, or None (database)."""
        if now is not None:
            return utc(now)
        if self._clock is not None:
            return utc(self._clock())
        return None

    async def now(self) -> datetime:
        if self._clock is not None:
            return utc(self._clock())
        return await self._read_clock()

    async def sampled_now(self) -> datetime:
        if self._clock is not None:
            return utc(self._clock())
        return await self._server_clock.now()

    async def _read_clock(self) -> datetime:
        rows = await self.fetch(self.q(_NOW), (), write=False)
        return utc(rows[0][0])

    async def wait_for_work(self, timeout: float) -> bool:
        return await self._waiters.wait(timeout)

    def announced(self, announced: object) -> None:
        """A write of ours announced work. The listener hears it; without one, wake here."""
        listener = self._listener
        if announced and (listener is None or not listener.connected):
            self._waiters.wake_all()


# -- rows ---------------------------------------------------------------------------------------


def tenant_key(owner: OwnerScope) -> str:
    """The ``tenant`` column of an owner: ``''`` for tenantless rows."""
    return tenant_id_of(owner) or ""


def owner_of(key: str) -> OwnerScope:
    """The owner of a row, from its ``tenant`` column."""
    return owner_scope(key or None)


def storable(*texts: object) -> bool:
    """Whether PostgreSQL ``text`` can hold these ids (it cannot hold NUL)."""
    return all(not isinstance(t, str) or "\x00" not in t for t in texts)


def opt_time(value: Any) -> datetime | None:
    return None if value is None else utc(value)


def decode_run(data: bytes, where: str) -> Run:
    """A stored run document; one that cannot be read raises :class:`PermanentStoreError`."""
    try:
        return run_from_json(data)
    except ValueError as exc:
        raise PermanentStoreError(f"the stored run document {where} cannot be read: {exc}") from exc
