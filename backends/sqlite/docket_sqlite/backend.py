"""``SQLiteBackend``: the contract on one SQLite file (WAL), driven from asyncio.

How it is put together:

* **Threads.** The ``sqlite3`` module blocks, so every statement runs on a worker
  thread: one *writer* thread owning the one writer connection, and one *reader*
  thread owning a read-only connection (an in-memory database has a single
  connection, so there reads share the writer's thread). A coroutine hands its job to
  the right thread and awaits the answer; the event loop never blocks on the file.
* **Atomicity comes from SQLite.** Every write — each transition, each claim
  operation, ``save_graph`` — runs inside a ``BEGIN IMMEDIATE`` transaction that takes
  the file's write lock before it reads anything, so the decisions it makes (fences,
  replay, claim selection) cannot interleave with another writer, whether that writer
  is in this process or another one. Nothing relies on an in-process lock.
* **Group commit.** Writes that queue up while the writer thread is busy share one
  transaction (one fsync), each inside its own SAVEPOINT, so each is still kept or
  undone whole and answered only after the shared COMMIT (see ``_write``).
* **The shared rules.** Transitions run the shared validator first and store the
  canonical bytes it returns; inside the transaction they apply ``check_replay``,
  ``check_identity``, the fences, ``split_events`` and ``compare_event`` in the
  normative order; any failure rolls back, so nothing is written. Claims choose with
  ``select_claims`` over candidates read from the partial indexes.
* **Long documents in pieces.** A run document is stored in fixed-size pieces (see
  ``schema.RUN_PIECE_BYTES``) and a commit rewrites only the pieces whose bytes
  changed, so appending to a long list field costs about one piece, not the document.
* **One clock.** ``clock`` (default: the host clock, which every process on the
  machine shares) stamps every operational time; explicit ``now`` arguments win, as
  the contract says, for tests and simulations.
* **Wake-ups.** After a commit that makes work due, the writer thread wakes every
  ``wait_for_work`` waiter of every backend instance on the same file *in this
  process*. Other processes learn about new work by polling (see the docs).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import secrets
import sqlite3
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs

from docket.clock import system_clock
from docket.contract import (
    POISON_MAX_ABANDONS,
    POISON_MAX_ATTEMPTS,
    AbandonOutcome,
    AbandonPolicy,
    At,
    Capabilities,
    ClaimBatch,
    ClaimedProposal,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    Conflict,
    CorruptEventRow,
    CorruptGraph,
    EventConflict,
    EventListQuery,
    External,
    Feature,
    GraphContentConflict,
    GraphListQuery,
    Immediate,
    InactiveRun,
    InitProposal,
    InvalidGraph,
    Lease,
    Limits,
    NotFound,
    Permanent,
    Poisoned,
    PoisonedClaim,
    Rescheduled,
    RetainClaim,
    Retryable,
    RunListQuery,
    Schedule,
    StaleAbandon,
    StaleCheckpoint,
    Terminal,
    TooLarge,
    TransitionError,
    TransitionResult,
    UnclaimedProposal,
)
from docket.contract.grouping import commit_claimed_in_order
from docket.contract.queries import (
    check_abandon_policy,
    check_claim_policy,
    check_event_query,
    check_graph_query,
    check_run_query,
    check_seq,
    select_claims,
)
from docket.contract.stored import decode_event, decode_graph
from docket.contract.validate import (
    Replay,
    ValidationResult,
    ValidTransition,
    check_identity,
    check_replay,
    compare_event,
    split_events,
    validate_commit_claimed,
    validate_commit_unclaimed,
    validate_graph_save,
    validate_initialize,
    validate_initialize_claimed,
)
from docket.records import (
    CheckpointType,
    Event,
    EventPage,
    GraphRef,
    GraphVersion,
    GraphVersionPage,
    OwnerScope,
    RecordDecodeError,
    Run,
    RunInfo,
    RunPage,
    RunStatus,
    RunSummary,
    Scope,
    System,
    owner_scope,
    require_owner,
    require_scope,
    run_from_json,
    tenant_id_of,
)
from docket.values import JSONDict, from_micros, to_micros, utc
from docket_sqlite.errors import PermanentStoreError, SchemaTooNew, StoreError, store_error
from docket_sqlite.schema import (
    DEFAULT_BUSY_TIMEOUT,
    RUN_PIECE_BYTES,
    SCHEMA_VERSION,
    SYNCHRONOUS_MODES,
    connect,
    prepare,
    read_version,
    schema_sql,
)
from docket_sqlite.schema import migrate as migrate_file
from docket_sqlite.url import Target

T = TypeVar("T")
Job = Callable[[sqlite3.Connection], T]

_INT64_MIN = -(1 << 63)
# Most write jobs one group commit applies in one transaction (see ``_write``).
_MAX_GROUP_COMMIT = 64
_SUMMARY_COLUMNS = (
    "tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq, "
    "started_at_us, updated_at_us, finished_at_us"
)
_INFO_COLUMNS = (
    "tenant, run_json, run_parts, wake_at_us, claimed_at_us, claim_attempts, claim_abandons, "
    "poisoned_at_us, poison_reason, latest_checkpoint_type"
)
_READY_SQL = (
    "SELECT wake_at_us, run_id, tenant, claim_attempts FROM docket_runs "
    "WHERE status = 'running' AND poisoned_at_us IS NULL AND claim_token IS NULL "
    "AND wake_at_us <= ? ORDER BY wake_at_us, run_id, tenant LIMIT ?"
)
_EXPIRED_SQL = (
    "SELECT claimed_at_us, run_id, tenant, claim_attempts FROM docket_runs "
    "WHERE status = 'running' AND poisoned_at_us IS NULL AND claim_token IS NOT NULL "
    "AND claimed_at_us < ? ORDER BY claimed_at_us, run_id, tenant LIMIT ?"
)


# -- small helpers ------------------------------------------------------------------------------


def _key(owner: OwnerScope) -> str:
    """The ``tenant`` column value of an owner: ``''`` for tenantless rows."""
    return tenant_id_of(owner) or ""


def _tenant(key: str) -> str | None:
    return key or None


def _us(moment: datetime) -> int:
    return to_micros(moment)


def _opt_time(value: Any) -> datetime | None:
    return None if value is None else from_micros(int(value))


def _check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str):
        raise TypeError(f"run_id must be a string, got {type(run_id).__name__}")
    return run_id


@attrs.frozen
class _Done(Generic[T]):
    """What a write job decided: its answer, whether to commit, whether to wake waiters."""

    value: T
    commit: bool = True
    announce: bool = False


def _rollback_quietly(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # a broken connection: the next BEGIN says so
            conn.execute("ROLLBACK")


# -- wake-ups -----------------------------------------------------------------------------------


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Hub:
    """The ``wait_for_work`` waiters of every backend instance on one database file."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    async def wait(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            self._waiters.append(entry)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # a closed loop: its waiter went with it
                loop.call_soon_threadsafe(_resolve, future)


_HUBS: weakref.WeakValueDictionary[str, _Hub] = weakref.WeakValueDictionary()
_HUBS_LOCK = threading.Lock()


def _hub_for(target: Target) -> _Hub:
    if target.path is None:
        return _Hub()  # an in-memory database is private to its backend
    with _HUBS_LOCK:
        hub = _HUBS.get(target.path)
        if hub is None:
            hub = _Hub()
            _HUBS[target.path] = hub
        return hub


# -- threads and connections ----------------------------------------------------------------------


@attrs.define(eq=False)  # compared by identity: withdraw() removes this very entry
class _PendingWrite:
    """A write job waiting for the writer thread, and where its answer goes."""

    job: Callable[[sqlite3.Connection], _Done[Any]]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


Batch = list[_PendingWrite]


def _answer(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled; the outcome stands in the store
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _deliver(entry: _PendingWrite, value: Any, error: BaseException | None = None) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        entry.loop.call_soon_threadsafe(_answer, entry.future, value, error)


Answer = tuple[asyncio.Future[Any], Any, BaseException | None]


def _answer_all(answers: list[Answer]) -> None:
    for future, value, error in answers:
        _answer(future, value, error)


def _deliver_all(answers: Sequence[tuple[_PendingWrite, Any, BaseException | None]]) -> None:
    """Answer a batch: one wake-up of each event loop for all of its writes, not one per
    write (each ``call_soon_threadsafe`` writes to the loop's self-pipe)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Answer]] = {}
    for entry, value, error in answers:
        by_loop.setdefault(entry.loop, []).append((entry.future, value, error))
    for loop, answered in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            loop.call_soon_threadsafe(_answer_all, answered)


class _Worker:
    """One thread and the one connection it owns (opened lazily, on that thread).

    The writer also keeps the queue of write jobs that group commit drains (see
    ``SQLiteBackend._write``).
    """

    def __init__(self, name: str, opener: Callable[[], sqlite3.Connection]) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._opener = opener
        self._conn: sqlite3.Connection | None = None
        self.pending: list[_PendingWrite] = []
        self.pending_lock = threading.Lock()
        self._pass_queued = False  # a drain pass is queued or running (under pending_lock)

    def withdraw(self, entry: _PendingWrite) -> bool:
        """Take ``entry`` back if no batch has picked it up yet."""
        with self.pending_lock:
            if entry in self.pending:
                self.pending.remove(entry)
                return True
        return False

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._opener()
        return self._conn

    def _call(self, job: Job[T]) -> T:
        return job(self._connection())

    async def run(self, job: Job[T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, job)

    def enqueue(
        self, entry: _PendingWrite, apply: Callable[[sqlite3.Connection, Batch], None]
    ) -> None:
        """Queue a write for group commit; its answer comes through ``entry.future``.

        At most one drain pass is queued at a time: a write that finds one queued or
        running only joins the list, so a busy writer costs no executor round trip per
        write, and the event loop is woken once per write (by the answer). Each pass
        applies one batch (``apply``) and, if more writes arrived meanwhile, queues the
        next pass behind whatever else the thread has to do.
        """
        with self.pending_lock:
            self.pending.append(entry)
            if self._pass_queued:
                return
            self._pass_queued = True
        try:
            self._executor.submit(self._pass, apply)
        except BaseException:  # shut down by a concurrent close
            with self.pending_lock:
                self._pass_queued = False
            raise

    def _take(self, limit: int | None) -> Batch:
        with self.pending_lock:
            if limit is None:
                batch, self.pending = self.pending, []
            else:
                batch, self.pending = self.pending[:limit], self.pending[limit:]
        return batch

    def _pass(self, apply: Callable[[sqlite3.Connection, Batch], None]) -> None:
        try:
            try:
                conn = self._connection()
            except BaseException as exc:  # every queued write would fail the same way
                for entry in self._take(None):
                    _deliver(entry, None, exc)
                return
            batch = self._take(_MAX_GROUP_COMMIT)
            if batch:
                apply(conn, batch)
        finally:
            self._next_pass(apply)

    def _next_pass(self, apply: Callable[[sqlite3.Connection, Batch], None]) -> None:
        with self.pending_lock:
            if not self.pending:
                self._pass_queued = False
                return
        try:
            self._executor.submit(self._pass, apply)
        except RuntimeError as exc:  # the executor was shut down: nobody will drain these
            with self.pending_lock:
                self._pass_queued = False
            for entry in self._take(None):
                _deliver(entry, None, exc)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _rollback_quietly(conn)
            conn.close()

    async def shutdown(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._close)
        finally:
            self._executor.shutdown(wait=False)


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
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | Target = ":memory:",
        *,
        clock: Callable[[], datetime] | None = None,
        limits: Limits | None = None,
        synchronous: str = "FULL",
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
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
        if clock is not None and not callable(clock):
            raise TypeError("clock must be a callable returning an aware datetime")
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError("limits must be docket.contract.Limits")
        self._target = target
        self._clock = clock or system_clock
        self._limits = limits or Limits()
        self._synchronous = mode
        self._busy_timeout = float(busy_timeout)
        self._hub = _hub_for(target)
        self._lifecycle = threading.Lock()
        self._writer, self._reader = self._workers()
        self._ready = False

    @classmethod
    def from_url(cls, url: str, **options: object) -> SQLiteBackend:
        """Build (not open) a backend from a ``sqlite://`` URL and factory options."""
        return _create(url, options)

    def __repr__(self) -> str:
        return f"SQLiteBackend({self._target.describe()!r}, synchronous={self._synchronous!r})"

    @property
    def path(self) -> str | None:
        """The absolute database path, or ``None`` for an in-memory database."""
        return self._target.path

    # -- bundle -----------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        features = {Feature.NOTIFY, Feature.REOPEN_FAILED}
        if not self._target.memory:
            features.add(Feature.DURABLE)
            if self._synchronous == "FULL":
                features.add(Feature.DURABLE_FSYNC)
        return Capabilities(limits=self._limits, features=frozenset(features), name="sqlite")

    @property
    def graphs(self) -> SQLiteBackend:
        return self

    @property
    def runs(self) -> SQLiteBackend:
        return self

    @property
    def events(self) -> SQLiteBackend:
        return self

    @property
    def transitions(self) -> SQLiteBackend:
        return self

    # -- lifecycle ----------------------------------------------------------------------------

    def _workers(self) -> tuple[_Worker, _Worker]:
        writer = _Worker("docket-sqlite-writer", self._open_writer)
        if self._target.memory:
            return writer, writer
        return writer, _Worker("docket-sqlite-reader", self._open_reader)

    def _open_writer(self) -> sqlite3.Connection:
        conn = connect(self._target, busy_timeout=self._busy_timeout, synchronous=self._synchronous)
        try:
            prepare(conn, self._target, now_us=self._now_us(None))
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_reader(self) -> sqlite3.Connection:
        conn = connect(self._target, busy_timeout=self._busy_timeout, synchronous=self._synchronous)
        try:
            conn.execute("PRAGMA query_only = ON")
            found = read_version(conn, self._target.describe())
            if found > SCHEMA_VERSION:  # the writer checked it; a newer release moved it on
                raise SchemaTooNew(self._target.describe(), found, SCHEMA_VERSION)
            if found != SCHEMA_VERSION:
                raise PermanentStoreError(
                    f"{self._target.describe()} has schema version {found}, expected "
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
        """Open the file (creating it and its schema if new) and check its version.

        Idempotent. Raises :class:`~docket_sqlite.errors.SchemaTooNew` (changing
        nothing) for a file written by a newer release, and another
        :class:`~docket_sqlite.errors.StoreError` when the file cannot be used.
        Operations open the backend themselves if it was not opened.
        """
        writer, reader = self._writer, self._reader
        await writer.run(_noop)
        if reader is not writer:
            await reader.run(_noop)
        with self._lifecycle:
            if self._writer is writer:
                self._ready = True

    async def close(self) -> None:
        """Close the connections (an in-memory database is gone after this); idempotent."""
        with self._lifecycle:
            writer, reader = self._writer, self._reader
            self._writer, self._reader = self._workers()
            self._ready = False
        await writer.shutdown()
        if reader is not writer:
            await reader.shutdown()

    async def _ensure_open(self) -> None:
        if not self._ready:
            await self.open()

    async def settings(self) -> SQLiteSettings:
        """The durability settings in force on the writer connection."""
        await self._ensure_open()

        def job(conn: sqlite3.Connection) -> SQLiteSettings:
            def pragma(name: str) -> Any:
                return conn.execute(f"PRAGMA {name}").fetchone()[0]

            try:
                return SQLiteSettings(
                    path=self._target.describe(),
                    journal_mode=str(pragma("journal_mode")).lower(),
                    synchronous=_SYNC_NAMES.get(int(pragma("synchronous")), "?"),
                    foreign_keys=bool(pragma("foreign_keys")),
                    busy_timeout=int(pragma("busy_timeout")) / 1000,
                    schema_version=read_version(conn, self._target.describe()),
                    sqlite_version=sqlite3.sqlite_version,
                )
            except sqlite3.Error as exc:
                raise store_error(exc) from exc

        return await self._writer.run(job)

    async def backup(self, destination: str | os.PathLike[str]) -> None:
        """Copy a consistent snapshot into ``destination`` (SQLite's online backup API).

        Workers may keep running: the copy reads one snapshot and never blocks writers.
        ``destination`` is overwritten if it exists.
        """
        await self._ensure_open()
        target = Target.of(destination)
        if target.path is None:
            raise ValueError("back up into a file, not into ':memory:'")
        if target.path == self._target.path:
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

        await self._reader.run(job)

    # -- schema (docket.contract.Migratable) ---------------------------------------------------

    async def schema_versions(self) -> tuple[int | None, int]:
        """``(stored, supported)`` schema versions; ``stored`` is ``None`` for a file that
        does not exist yet or has no docket tables. Reads without opening the backend, so
        it works on a file that :meth:`open` refuses (too old, too new)."""
        path = self._target.path
        if path is None:
            return (SCHEMA_VERSION if self._ready else None), SCHEMA_VERSION
        if not os.path.exists(path):
            return None, SCHEMA_VERSION

        def job() -> int:
            try:
                uri = f"{Path(path).as_uri()}?mode=ro"  # percent-encodes odd characters
                conn = sqlite3.connect(uri, uri=True, isolation_level=None)
            except sqlite3.Error as exc:
                raise store_error(exc) from exc
            try:
                return read_version(conn, self._target.describe())
            finally:
                conn.close()

        found = await asyncio.to_thread(job)
        return (found or None), SCHEMA_VERSION

    async def migrate(self) -> tuple[int | None, int]:
        """Bring the file to the current schema (see :func:`docket_sqlite.migrate`);
        returns ``(from, to)``, ``from`` being ``None`` for a new file. Stop the workers
        using the file first."""
        path = self._target.path
        if path is None:
            raise ValueError("an in-memory database has nothing to migrate; give a file path")
        found, current = await asyncio.to_thread(
            migrate_file, path, busy_timeout=self._busy_timeout
        )
        return (found or None), current

    def schema_sql(self) -> str:
        """The DDL of the whole current schema (what :meth:`migrate` applies to a new file)."""
        return schema_sql()

    # -- clock and wake-ups --------------------------------------------------------------------

    async def now(self) -> datetime:
        return self._now(None)

    def _now(self, given: datetime | None) -> datetime:
        return utc(given) if given is not None else utc(self._clock())

    def _now_us(self, given: datetime | None) -> int:
        return _us(self._now(given))

    async def wait_for_work(self, timeout: float) -> bool:
        return await self._hub.wait(timeout)

    # -- running jobs --------------------------------------------------------------------------

    async def _write(self, job: Callable[[sqlite3.Connection], _Done[T]]) -> T:
        """Run ``job`` atomically on the writer thread, possibly sharing a transaction.

        Group commit: jobs queue up while the writer thread is busy (typically waiting
        for the previous commit's fsync), and the next pass applies everything queued in
        ONE ``BEGIN IMMEDIATE … COMMIT`` (one fsync), each job inside its own SAVEPOINT.
        A job's writes are kept or undone as a unit (``_Done.commit``, or an exception),
        exactly as if it had its own transaction, and later jobs in the batch see the
        earlier ones' writes, as they would in sequence. No job is answered before the
        batch's COMMIT returns; if the batch as a whole fails, every job in it gets the
        error and none of its writes is kept.
        """
        await self._ensure_open()
        writer = self._writer
        loop = asyncio.get_running_loop()
        entry = _PendingWrite(job, loop, loop.create_future())
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

    def _apply_batch(self, conn: sqlite3.Connection, batch: Batch) -> None:
        """Apply queued writes (on the writer thread); every one of them is answered."""
        if len(batch) == 1:
            (entry,) = batch
            try:
                value = self._transact(conn, entry.job)
            except BaseException as exc:
                _deliver(entry, None, exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                _deliver(entry, value)
        elif batch:
            self._transact_batch(conn, batch)

    def _transact_batch(self, conn: sqlite3.Connection, batch: list[_PendingWrite]) -> None:
        answers: list[tuple[_PendingWrite, Any, BaseException | None]] = []
        changed = announce = False
        try:
            conn.execute("BEGIN IMMEDIATE")
            for entry in batch:
                conn.execute("SAVEPOINT docket_job")
                try:
                    done = entry.job(conn)
                except Exception as exc:
                    if not conn.in_transaction:  # SQLite gave up the whole transaction
                        raise
                    conn.execute("ROLLBACK TO docket_job")
                    conn.execute("RELEASE docket_job")
                    refused = store_error(exc) if isinstance(exc, sqlite3.Error) else exc
                    answers.append((entry, None, refused))
                    continue
                if not done.commit:
                    conn.execute("ROLLBACK TO docket_job")
                conn.execute("RELEASE docket_job")
                changed = changed or done.commit
                announce = announce or (done.commit and done.announce)
                answers.append((entry, done.value, None))
            conn.execute("COMMIT" if changed else "ROLLBACK")
        except BaseException as exc:
            _rollback_quietly(conn)
            failure = store_error(exc) if isinstance(exc, sqlite3.Error) else exc
            for entry in batch:
                _deliver(entry, None, failure)
            if not isinstance(exc, Exception):
                raise
            return
        if announce:
            self._hub.notify()
        _deliver_all(answers)

    def _transact(
        self, conn: sqlite3.Connection, job: Callable[[sqlite3.Connection], _Done[T]]
    ) -> T:
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise store_error(exc) from exc
        try:
            done = job(conn)
            conn.execute("COMMIT" if done.commit else "ROLLBACK")
        except BaseException as exc:
            _rollback_quietly(conn)
            if isinstance(exc, sqlite3.Error):
                raise store_error(exc) from exc
            raise
        if done.commit and done.announce:
            self._hub.notify()
        return done.value

    async def _read(self, job: Job[T]) -> T:
        """Run ``job`` inside one read transaction (one consistent snapshot)."""
        await self._ensure_open()
        return await self._reader.run(lambda conn: _snapshot(conn, job))

    async def _outcome(
        self, job: Callable[[sqlite3.Connection], _Done[T]]
    ) -> T | Retryable | Permanent:
        """``_write`` for operations whose answers include Retryable/Permanent."""
        try:
            return await self._write(job)
        except StoreError as exc:
            return exc.outcome

    # -- graphs ------------------------------------------------------------------------------

    async def save_graph(
        self, owner: OwnerScope, ref: GraphRef, document: JSONDict
    ) -> GraphVersion | InvalidGraph | GraphContentConflict | TooLarge | Retryable | Permanent:
        checked = validate_graph_save(owner, ref, document, self._limits)
        if not isinstance(checked, bytes):
            return checked
        key = _key(owner)

        def job(conn: sqlite3.Connection) -> _Done[GraphVersion | GraphContentConflict]:
            row = conn.execute(
                "SELECT document, published_at_us FROM docket_graphs "
                "WHERE tenant = ? AND graph_id = ? AND graph_hash = ?",
                (key, ref.graph_id, ref.graph_hash),
            ).fetchone()
            if row is None:
                published = self._now_us(None)
                conn.execute(
                    "INSERT INTO docket_graphs "
                    "(tenant, graph_id, graph_hash, document, published_at_us) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (key, ref.graph_id, ref.graph_hash, checked, published),
                )
            elif bytes(row[0]) != checked:
                return _Done(GraphContentConflict(), commit=False)
            else:
                published = int(row[1])
            version = GraphVersion(
                ref=GraphRef(ref.graph_id, ref.graph_hash), published_at=from_micros(published)
            )
            return _Done(version, commit=row is None)

        return await self._outcome(job)

    async def fetch_graph(
        self, owner: OwnerScope, ref: GraphRef
    ) -> JSONDict | NotFound | CorruptGraph:
        key = _key(require_owner(owner))
        if not isinstance(ref.graph_id, str) or not isinstance(ref.graph_hash, str):
            return NotFound("graph")

        def job(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT document FROM docket_graphs "
                "WHERE tenant = ? AND graph_id = ? AND graph_hash = ?",
                (key, ref.graph_id, ref.graph_hash),
            ).fetchone()
            return None if row is None else bytes(row[0])

        data = await self._read(job)
        if data is None:
            return NotFound("graph")
        return decode_graph(ref, data)

    async def fetch_latest_graph_ref(self, owner: OwnerScope, graph_id: str) -> GraphRef | NotFound:
        key = _key(require_owner(owner))
        if not isinstance(graph_id, str):
            return NotFound("graph")

        def job(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT graph_hash FROM docket_graphs WHERE tenant = ? AND graph_id = ? "
                "ORDER BY published_at_us DESC, graph_hash DESC LIMIT 1",
                (key, graph_id),
            ).fetchone()
            return None if row is None else str(row[0])

        graph_hash = await self._read(job)
        return NotFound("graph") if graph_hash is None else GraphRef(graph_id, graph_hash)

    async def list_graph_versions(
        self, owner: OwnerScope, graph_id: str, query: GraphListQuery
    ) -> GraphVersionPage:
        check_graph_query(query)
        key = _key(require_owner(owner))
        if not isinstance(graph_id, str):
            return GraphVersionPage.from_candidates([], query.limit, query.before)
        sql = (
            "SELECT graph_hash, published_at_us FROM docket_graphs "
            "WHERE tenant = ? AND graph_id = ?"
        )
        params: list[object] = [key, graph_id]
        if query.before is not None:
            sql += " AND (published_at_us, graph_hash) < (?, ?)"
            params += [_us(query.before.published_at), query.before.graph_hash]
        sql += " ORDER BY published_at_us DESC, graph_hash DESC LIMIT ?"
        params.append(query.limit + 1)

        def job(conn: sqlite3.Connection) -> list[GraphVersion]:
            return [
                GraphVersion(ref=GraphRef(graph_id, str(h)), published_at=from_micros(int(at)))
                for h, at in conn.execute(sql, params).fetchall()
            ]

        versions = await self._read(job)
        return GraphVersionPage.from_candidates(versions, query.limit, query.before)

    # -- run reads ---------------------------------------------------------------------------

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        key = _key(require_owner(owner))
        _check_run_id(run_id)

        def job(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT run_json, run_parts FROM docket_runs WHERE tenant = ? AND run_id = ?",
                (key, run_id),
            ).fetchone()
            return None if row is None else _whole_run_json(conn, key, run_id, row[0], row[1])

        data = await self._read(job)
        return NotFound() if data is None else run_from_json(data)

    async def inspect_run(self, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
        key = _key(require_owner(owner))
        _check_run_id(run_id)

        def job(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row = conn.execute(
                f"SELECT {_INFO_COLUMNS} FROM docket_runs WHERE tenant = ? AND run_id = ?",
                (key, run_id),
            ).fetchone()
            if row is None:
                return None
            return (row[0], _whole_run_json(conn, key, run_id, row[1], row[2]), *row[3:])

        row = await self._read(job)
        if row is None:
            return NotFound()
        tenant, data, wake, claimed, attempts, abandons, poisoned, reason, checkpoint = row
        return RunInfo(
            run=run_from_json(bytes(data)),
            tenant_id=_tenant(str(tenant)),
            wake_at=_opt_time(wake),
            claimed_at=_opt_time(claimed),
            claim_attempts=int(attempts),
            claim_abandons=int(abandons),
            poisoned_at=_opt_time(poisoned),
            poison_reason=None if reason is None else str(reason),
            latest_checkpoint_type=CheckpointType(str(checkpoint)),
        )

    async def list_runs(self, scope: Scope, query: RunListQuery) -> RunPage:
        require_scope(scope)
        check_run_query(query)
        sql, params = list_runs_sql(scope, query)

        def job(conn: sqlite3.Connection) -> list[RunSummary]:
            return [_summary(row) for row in conn.execute(sql, params).fetchall()]

        summaries = await self._read(job)
        return RunPage.from_candidates(summaries, query.limit, query.before)

    # -- events -----------------------------------------------------------------------------

    async def fetch_event(
        self, owner: OwnerScope, run_id: str, seq: int
    ) -> Event | NotFound | CorruptEventRow:
        key = _key(require_owner(owner))
        check_seq(seq)
        _check_run_id(run_id)

        def job(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT event_json FROM docket_events WHERE tenant = ? AND run_id = ? AND seq = ?",
                (key, run_id, seq),
            ).fetchone()
            return None if row is None else bytes(row[0])

        data = await self._read(job)
        return NotFound("event") if data is None else decode_event(run_id, seq, data)

    async def fetch_latest_event(
        self, owner: OwnerScope, run_id: str
    ) -> Event | NotFound | CorruptEventRow | None:
        key = _key(require_owner(owner))
        _check_run_id(run_id)

        def job(conn: sqlite3.Connection) -> NotFound | tuple[int, bytes] | None:
            if not _run_exists(conn, key, run_id):
                return NotFound()
            row = conn.execute(
                "SELECT seq, event_json FROM docket_events WHERE tenant = ? AND run_id = ? "
                "ORDER BY seq DESC LIMIT 1",
                (key, run_id),
            ).fetchone()
            return None if row is None else (int(row[0]), bytes(row[1]))

        found = await self._read(job)
        if found is None or isinstance(found, NotFound):
            return found
        return decode_event(run_id, found[0], found[1])

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        key = _key(require_owner(owner))
        check_event_query(query)
        _check_run_id(run_id)

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
            events: list[Event] = []
            for seq, data in rows:
                decoded = decode_event(run_id, int(seq), bytes(data))
                if isinstance(decoded, CorruptEventRow):
                    return decoded
                events.append(decoded)
            return EventPage.from_candidates(
                events,
                limit=query.limit,
                after_seq=query.after_seq,
                oldest_available_seq=None if bounds[0] is None else int(bounds[0][0]),
                latest_available_seq=None if bounds[1] is None else int(bounds[1][0]),
                latest_seq=latest_seq,
            )

        return await self._read(job)

    # -- claims -----------------------------------------------------------------------------

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        check_claim_policy(policy)

        def job(conn: sqlite3.Connection) -> _Done[ClaimBatch]:
            now_us = self._now_us(policy.now)
            now = from_micros(now_us)
            cutoff = max(now_us - policy.orphan_ttl // timedelta(microseconds=1), _INT64_MIN)
            attempts: dict[tuple[str, str], int] = {}

            def candidates(sql: str, bound: int) -> list[tuple[datetime, str, str | None]]:
                found: list[tuple[datetime, str, str | None]] = []
                for at, run_id, tenant, tries in conn.execute(sql, (bound, policy.limit)):
                    attempts[(str(tenant), str(run_id))] = int(tries)
                    found.append((from_micros(int(at)), str(run_id), _tenant(str(tenant))))
                return found

            ready = candidates(_READY_SQL, now_us)
            expired = candidates(_EXPIRED_SQL, cutoff)
            chosen = select_claims(ready, expired, policy.limit, policy.preference)
            leases: list[Lease] = []
            poisoned: list[PoisonedClaim] = []
            for _, run_id, tenant in chosen:
                key = tenant or ""
                if attempts[(key, run_id)] < policy.max_claim_attempts:
                    token = secrets.token_urlsafe(18)
                    graph_id, graph_hash, checkpoint_seq, attempt = conn.execute(
                        "UPDATE docket_runs SET claim_token = ?, claimed_at_us = ?, "
                        "wake_at_us = NULL, claim_attempts = claim_attempts + 1 "
                        "WHERE tenant = ? AND run_id = ? "
                        "RETURNING graph_id, graph_hash, checkpoint_seq, claim_attempts",
                        (token, now_us, key, run_id),
                    ).fetchall()[0]
                    leases.append(
                        Lease(
                            run_id=run_id,
                            owner=owner_scope(tenant),
                            graph_id=str(graph_id),
                            graph_hash=str(graph_hash),
                            checkpoint_seq=int(checkpoint_seq),
                            claim_token=token,
                            claimed_at=now,
                            claim_attempt=int(attempt),
                            orphan_ttl=policy.orphan_ttl,
                        )
                    )
                else:
                    _poison(conn, key, run_id, now_us, POISON_MAX_ATTEMPTS)
                    poisoned.append(
                        PoisonedClaim(
                            run_id=run_id,
                            owner=owner_scope(tenant),
                            poisoned_at=now,
                            poison_reason=POISON_MAX_ATTEMPTS,
                        )
                    )
            return _Done(ClaimBatch(tuple(leases), tuple(poisoned)), commit=bool(chosen))

        return await self._outcome(job)

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        key = _key(require_owner(owner))
        _check_run_id(run_id)
        if now is not None:
            now = self._now(now)
        if not isinstance(token, str):
            return ClaimLost()

        def job(conn: sqlite3.Connection) -> _Done[ClaimRefreshed | ClaimLost]:
            rows = conn.execute(
                "UPDATE docket_runs SET claimed_at_us = max(claimed_at_us, ?) "
                "WHERE tenant = ? AND run_id = ? AND claim_token = ? RETURNING claimed_at_us",
                (self._now_us(now), key, run_id, token),
            ).fetchall()
            if not rows:
                return _Done(ClaimLost(), commit=False)
            return _Done(ClaimRefreshed(from_micros(int(rows[0][0]))))

        return await self._write(job)

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        key = _key(require_owner(owner))
        _check_run_id(run_id)
        if now is not None:
            now = self._now(now)
        if not isinstance(token, str):
            return

        def job(conn: sqlite3.Connection) -> _Done[None]:
            cursor = conn.execute(
                "UPDATE docket_runs SET claim_token = NULL, claimed_at_us = NULL, "
                "wake_at_us = ? WHERE tenant = ? AND run_id = ? AND claim_token = ?",
                (self._now_us(now), key, run_id, token),
            )
            matched = cursor.rowcount == 1
            return _Done(None, commit=matched, announce=matched)

        await self._write(job)

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        key = _key(require_owner(owner))
        _check_run_id(run_id)
        now = self._now(policy.now)
        check_abandon_policy(policy, now)
        if not isinstance(token, str):
            return StaleAbandon()

        def job(conn: sqlite3.Connection) -> _Done[AbandonOutcome]:
            row = conn.execute(
                "SELECT claim_token, checkpoint_seq, claim_attempts, claim_abandons "
                "FROM docket_runs WHERE tenant = ? AND run_id = ?",
                (key, run_id),
            ).fetchone()
            if (
                row is None
                or row[0] is None
                or row[0] != token
                or int(row[1]) != policy.expected_checkpoint_seq
            ):
                return _Done(StaleAbandon(), commit=False)
            old = int(row[3])
            attempts = max(int(row[2]) - 1, 0)
            if not policy.non_poisoning and old >= policy.max_claim_abandons:
                conn.execute(
                    "UPDATE docket_runs SET claim_token = NULL, claimed_at_us = NULL, "
                    "wake_at_us = NULL, claim_attempts = ?, poisoned_at_us = ?, "
                    "poison_reason = ? WHERE tenant = ? AND run_id = ?",
                    (attempts, _us(now), POISON_MAX_ABANDONS, key, run_id),
                )
                return _Done(Poisoned(now, POISON_MAX_ABANDONS))
            if policy.non_poisoning and policy.backoff is not None:
                wake = now + min(policy.backoff.base * 2 ** min(old, 30), policy.backoff.cap)
            else:
                wake = utc(policy.retry_at)
            conn.execute(
                "UPDATE docket_runs SET claim_token = NULL, claimed_at_us = NULL, "
                "wake_at_us = ?, claim_attempts = ?, claim_abandons = ? "
                "WHERE tenant = ? AND run_id = ?",
                (_us(wake), attempts, old + 1, key, run_id),
            )
            return _Done(Rescheduled(wake), announce=True)

        return await self._write(job)

    async def retry_poisoned_run(
        self, owner: OwnerScope, run_id: str, now: datetime | None = None
    ) -> Run | NotFound | InactiveRun:
        key = _key(require_owner(owner))
        _check_run_id(run_id)
        if now is not None:
            now = self._now(now)

        def job(conn: sqlite3.Connection) -> _Done[bytes | NotFound | InactiveRun]:
            row = conn.execute(
                "SELECT status, poisoned_at_us FROM docket_runs WHERE tenant = ? AND run_id = ?",
                (key, run_id),
            ).fetchone()
            if row is None:
                return _Done(NotFound(), commit=False)
            if RunStatus(str(row[0])).terminal:
                return _Done(InactiveRun(), commit=False)
            if row[1] is None:
                return _Done(_stored_run_json(conn, key, run_id), commit=False)
            conn.execute(
                "UPDATE docket_runs SET poisoned_at_us = NULL, poison_reason = NULL, "
                "claim_token = NULL, claimed_at_us = NULL, claim_attempts = 0, "
                "claim_abandons = 0, wake_at_us = ? WHERE tenant = ? AND run_id = ?",
                (self._now_us(now), key, run_id),
            )
            return _Done(_stored_run_json(conn, key, run_id), announce=True)

        found = await self._write(job)
        return run_from_json(found) if isinstance(found, bytes) else found

    # -- transitions ------------------------------------------------------------------------

    async def initialize(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]
    ) -> TransitionResult:
        valid = validate_initialize(owner, proposal, events, self._limits)
        return await self._initialize(owner, proposal, valid)

    async def initialize_claimed(
        self,
        owner: OwnerScope,
        proposal: InitProposal,
        events: Sequence[Event],
        claim_token: str,
    ) -> TransitionResult:
        """``ClaimedStarts``: the run is written claimed by ``claim_token`` (claimed at
        ``proposal.wake_at``, one claim attempt, no wake, nothing announced)."""
        valid = validate_initialize_claimed(owner, proposal, events, claim_token, self._limits)
        return await self._initialize(owner, proposal, valid)

    async def _initialize(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidationResult
    ) -> TransitionResult:
        if not isinstance(valid, ValidTransition):
            return valid
        key = _key(owner)
        run = valid.run
        hashes = _content_hashes(valid)
        token = valid.claim_token
        start_us = _us(proposal.wake_at)
        # a claimed start holds its claim from the start's own time, with no wake
        wake_us = start_us if token is None else None
        claimed_us = None if token is None else start_us
        attempts = 0 if token is None else 1
        head, pieces = _cut(valid.run_json)

        def job(conn: sqlite3.Connection) -> _Done[Run | bytes | TransitionError]:
            graph = conn.execute(
                "SELECT 1 FROM docket_graphs WHERE tenant = ? AND graph_id = ? AND graph_hash = ?",
                (key, run.graph_id, run.graph_hash),
            ).fetchone()
            if graph is None:
                return _Done(NotFound("graph"), commit=False)
            if _run_exists(conn, key, run.id):
                replay = check_replay(
                    _recorded(conn, key, run.id, proposal.transition_id),
                    proposal.transition_id,
                    valid.digest,
                )
                if isinstance(replay, Replay):
                    return _Done(_stored_run_json(conn, key, run.id), commit=False)
                return _Done(replay or Conflict(f"run {run.id!r} already exists"), commit=False)
            conn.execute(
                "INSERT INTO docket_runs (tenant, run_id, graph_id, graph_hash, status, step, "
                "checkpoint_seq, event_seq, started_at_us, updated_at_us, finished_at_us, "
                "run_json, run_parts, latest_checkpoint_type, wake_at_us, claim_token, "
                "claimed_at_us, claim_attempts) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    run.id,
                    run.graph_id,
                    run.graph_hash,
                    str(run.status),
                    run.step,
                    run.checkpoint_seq,
                    run.event_seq,
                    _us(run.started_at),
                    _us(run.updated_at),
                    None if run.finished_at is None else _us(run.finished_at),
                    head,
                    len(pieces),
                    str(proposal.checkpoint_type),
                    wake_us,
                    token,
                    claimed_us,
                    attempts,
                ),
            )
            _store_pieces(conn, key, run.id, pieces, 0)
            _record(conn, key, run.id, proposal.transition_id, valid.digest)
            _insert_events(conn, key, valid, hashes, range(len(valid.events)))
            # what was just stored, already checked durable: no decode of its bytes
            due = wake_us is not None and wake_us <= self._now_us(None)
            return _Done(valid.run, announce=due)

        return await self._transition(job)

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        valid = validate_commit_claimed(owner, proposal, events, self._limits)
        if not isinstance(valid, ValidTransition):
            return valid
        return await self._commit(owner, valid)

    async def commit_claimed_chain(
        self, owner: OwnerScope, commits: Sequence[tuple[ClaimedProposal, Sequence[Event]]]
    ) -> list[TransitionResult]:
        """``ChainedCommits``: its one writer applies queued writes in the order they came."""
        return await commit_claimed_in_order(self, owner, commits)

    async def commit_unclaimed(
        self,
        owner: OwnerScope,
        expected_checkpoint_seq: int,
        proposal: UnclaimedProposal,
        events: Sequence[Event],
    ) -> TransitionResult:
        valid = validate_commit_unclaimed(
            owner, expected_checkpoint_seq, proposal, events, self._limits
        )
        if not isinstance(valid, ValidTransition):
            return valid
        return await self._commit(owner, valid)

    async def _commit(self, owner: OwnerScope, valid: ValidTransition) -> TransitionResult:
        transition_id, token = valid.transition_id, valid.claim_token
        expected, schedule = valid.expected_checkpoint_seq, valid.schedule
        checkpoint_type = valid.checkpoint_type
        assert expected is not None and schedule is not None  # a commit carries both
        key = _key(owner)
        run = valid.run
        hashes = _content_hashes(valid)
        head, pieces = _cut(valid.run_json)

        def job(conn: sqlite3.Connection) -> _Done[Run | bytes | TransitionError]:
            row = conn.execute(
                "SELECT graph_id, graph_hash, status, started_at_us, updated_at_us, "
                "checkpoint_seq, event_seq, claim_token, claimed_at_us, run_parts "
                "FROM docket_runs WHERE tenant = ? AND run_id = ?",
                (key, run.id),
            ).fetchone()
            if row is None:
                return _Done(NotFound(), commit=False)
            replay = check_replay(
                _recorded(conn, key, run.id, transition_id), transition_id, valid.digest
            )
            if isinstance(replay, Replay):
                return _Done(_stored_run_json(conn, key, run.id), commit=False)
            if replay is not None:
                return _Done(replay, commit=False)
            graph_id, graph_hash, status, started, updated, stored_seq, event_seq = row[:7]
            held, since, stored_parts = row[7:]
            stored = Run(  # the stored identity, from its columns (no document decode)
                id=run.id,
                graph_id=str(graph_id),
                graph_hash=str(graph_hash),
                status=RunStatus(str(status)),
                started_at=from_micros(int(started)),
                updated_at=from_micros(int(updated)),
            )
            broken = check_identity(stored, run)
            if broken is not None:
                return _Done(broken, commit=False)
            if int(stored_seq) != expected or (token is not None and held != token):
                return _Done(StaleCheckpoint(), commit=False)
            split = split_events(int(event_seq), valid)
            if not isinstance(split, tuple):
                return _Done(split, commit=False)
            new, old = split
            for index in old:
                seq = valid.events[index].seq
                found = conn.execute(
                    "SELECT content_sha256 FROM docket_events "
                    "WHERE tenant = ? AND run_id = ? AND seq = ?",
                    (key, run.id, seq),
                ).fetchone()
                if not compare_event(None if found is None else bytes(found[0]), hashes, index):
                    return _Done(EventConflict(seq), commit=False)
            now_us = self._now_us(None)
            claim_token, claimed_at, wake = _schedule_columns(schedule, held, since, now_us)
            cursor = conn.execute(
                "UPDATE docket_runs SET status = ?, step = ?, checkpoint_seq = ?, "
                "event_seq = ?, updated_at_us = ?, finished_at_us = ?, run_json = ?, "
                "run_parts = ?, latest_checkpoint_type = ?, claim_attempts = 0, "
                "claim_abandons = 0, poisoned_at_us = NULL, poison_reason = NULL, claim_token = ?, "
                "claimed_at_us = ?, wake_at_us = ? "
                "WHERE tenant = ? AND run_id = ? AND checkpoint_seq = ?",
                (
                    str(run.status),
                    run.step,
                    run.checkpoint_seq,
                    run.event_seq,
                    _us(run.updated_at),
                    None if run.finished_at is None else _us(run.finished_at),
                    head,
                    len(pieces),
                    str(checkpoint_type),
                    claim_token,
                    claimed_at,
                    wake,
                    key,
                    run.id,
                    expected,
                ),
            )
            if cursor.rowcount != 1:  # unreachable under the write lock; never publish blind
                return _Done(StaleCheckpoint(), commit=False)
            _store_pieces(conn, key, run.id, pieces, int(stored_parts))
            _record(conn, key, run.id, transition_id, valid.digest)
            _insert_events(conn, key, valid, hashes, new)
            return _Done(valid.run, announce=wake is not None and wake <= now_us)

        return await self._transition(job)

    async def _transition(
        self, job: Callable[[sqlite3.Connection], _Done[Run | bytes | TransitionError]]
    ) -> TransitionResult:
        try:
            found = await self._outcome(job)
        except RecordDecodeError as exc:  # a replay whose stored pieces are incomplete
            return Permanent(f"the stored run document cannot be read: {exc}")
        if not isinstance(found, bytes):  # a fresh commit's run, or a refusal
            return found
        try:
            return run_from_json(found)
        except ValueError as exc:  # only a replay answers stored bytes; they are corrupt
            return Permanent(f"the stored run document cannot be read: {exc}")


def list_runs_sql(scope: Scope, query: RunListQuery) -> tuple[str, list[object]]:
    """The one statement behind ``list_runs``: scope and every filter applied in SQL.

    Newest first by ``(started_at, run_id)``; ``rowid`` (insertion order) only breaks
    the tie of one run id reused by two tenants under ``System``. Reads ``limit + 1``
    rows so the page knows whether there is more.
    """
    clauses: list[str] = []
    params: list[object] = []
    if not isinstance(scope, System):
        clauses.append("tenant = ?")
        params.append(_key(scope))
    if query.graph_id is not None:
        clauses.append("graph_id = ?")
        params.append(query.graph_id)
    if query.graph_hash is not None:
        clauses.append("graph_hash = ?")
        params.append(query.graph_hash)
    if query.statuses is not None:
        statuses = sorted(str(s) for s in query.statuses)
        clauses.append(f"status IN ({', '.join('?' * len(statuses))})")
        params.extend(statuses)
    if query.before is not None:
        clauses.append("(started_at_us, run_id) < (?, ?)")
        params += [_us(query.before.started_at), query.before.run_id]
    where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
    sql = (
        f"SELECT {_SUMMARY_COLUMNS} FROM docket_runs {where}"
        "ORDER BY started_at_us DESC, run_id DESC, rowid ASC LIMIT ?"
    )
    params.append(query.limit + 1)
    return sql, params


# -- statements shared by several operations --------------------------------------------------


def _noop(conn: sqlite3.Connection) -> None:
    return None


def _snapshot(conn: sqlite3.Connection, job: Job[T]) -> T:
    try:
        conn.execute("BEGIN")
        try:
            return job(conn)
        finally:
            _rollback_quietly(conn)
    except sqlite3.Error as exc:
        raise store_error(exc) from exc


def _summary(row: Sequence[Any]) -> RunSummary:
    tenant, run_id, graph_id, graph_hash, status, step, seq, started, updated, finished = row
    return RunSummary(
        id=str(run_id),
        tenant_id=_tenant(str(tenant)),
        graph_id=str(graph_id),
        graph_hash=str(graph_hash),
        status=RunStatus(str(status)),
        step=int(step),
        checkpoint_seq=int(seq),
        started_at=from_micros(int(started)),
        updated_at=from_micros(int(updated)),
        finished_at=_opt_time(finished),
    )


def _run_exists(conn: sqlite3.Connection, key: str, run_id: str) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM docket_runs WHERE tenant = ? AND run_id = ?", (key, run_id)
        ).fetchone()
        is not None
    )


def _stored_run_json(conn: sqlite3.Connection, key: str, run_id: str) -> bytes:
    row = conn.execute(
        "SELECT run_json, run_parts FROM docket_runs WHERE tenant = ? AND run_id = ?",
        (key, run_id),
    ).fetchone()
    return _whole_run_json(conn, key, run_id, row[0], row[1])


def _cut(document: bytes) -> tuple[bytes, list[bytes]]:
    """A run document as its first piece (``run_json``) and the pieces after it."""
    size = RUN_PIECE_BYTES
    if len(document) <= size:
        return document, []
    return document[:size], [document[i : i + size] for i in range(size, len(document), size)]


def _store_pieces(
    conn: sqlite3.Connection, key: str, run_id: str, pieces: Sequence[bytes], stored: int
) -> None:
    """Make ``docket_run_parts`` hold ``pieces`` as parts 1.., writing only what changed.

    A piece equal to the stored one is left as it is (the upsert's WHERE), so an append
    to a long document rewrites its last pieces, not all of it; ``stored`` is how many
    parts the row had, so surplus ones are dropped.
    """
    if pieces:
        conn.executemany(
            "INSERT INTO docket_run_parts (tenant, run_id, part, data) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tenant, run_id, part) DO UPDATE SET data = excluded.data "
            "WHERE data <> excluded.data",
            [(key, run_id, index, piece) for index, piece in enumerate(pieces, 1)],
        )
    if stored > len(pieces):
        conn.execute(
            "DELETE FROM docket_run_parts WHERE tenant = ? AND run_id = ? AND part > ?",
            (key, run_id, len(pieces)),
        )


def _whole_run_json(
    conn: sqlite3.Connection, key: str, run_id: str, head: Any, parts: Any
) -> bytes:
    """The stored document: ``run_json`` followed by its ``parts`` further pieces."""
    first: bytes = bytes(head)
    count = int(parts)
    if count == 0:
        return first
    rows = conn.execute(
        "SELECT part, data FROM docket_run_parts WHERE tenant = ? AND run_id = ? ORDER BY part",
        (key, run_id),
    ).fetchall()
    pieces = [bytes(data) for _, data in rows]
    complete = [int(part) for part, _ in rows] == list(range(1, count + 1)) and all(
        len(piece) == RUN_PIECE_BYTES for piece in pieces[:-1]
    )
    if not complete:
        raise RecordDecodeError(
            "run", [f"the stored document of run {run_id!r} lacks some of its {count} parts"]
        )
    return b"".join([first, *pieces])


def _recorded(
    conn: sqlite3.Connection, key: str, run_id: str, transition_id: str
) -> Mapping[str, str]:
    """The digest committed under ``transition_id`` for this run, as ``check_replay`` wants."""
    row = conn.execute(
        "SELECT digest FROM docket_transitions "
        "WHERE tenant = ? AND run_id = ? AND transition_id = ?",
        (key, run_id, transition_id),
    ).fetchone()
    return {} if row is None else {transition_id: str(row[0])}


def _record(
    conn: sqlite3.Connection, key: str, run_id: str, transition_id: str, digest: str
) -> None:
    conn.execute(
        "INSERT INTO docket_transitions (tenant, run_id, transition_id, digest) "
        "VALUES (?, ?, ?, ?)",
        (key, run_id, transition_id, digest),
    )


def _content_hashes(valid: ValidTransition) -> ValidTransition:
    """``valid`` with each event's canonical content replaced by its SHA-256.

    The store keeps the digest of an event's content rather than a second copy of it;
    comparing digests with the shared ``compare_event`` is comparing contents.
    """
    return attrs.evolve(
        valid,
        event_contents=tuple(hashlib.sha256(c).digest() for c in valid.event_contents),
    )


def _insert_events(
    conn: sqlite3.Connection,
    key: str,
    valid: ValidTransition,
    hashes: ValidTransition,
    indices: Sequence[int],
) -> None:
    conn.executemany(
        "INSERT INTO docket_events (tenant, run_id, seq, event_json, content_sha256) "
        "VALUES (?, ?, ?, ?, ?)",
        [
            (
                key,
                valid.run.id,
                valid.events[i].seq,
                valid.event_json[i],
                hashes.event_contents[i],
            )
            for i in indices
        ],
    )


def _poison(conn: sqlite3.Connection, key: str, run_id: str, now_us: int, reason: str) -> None:
    conn.execute(
        "UPDATE docket_runs SET claim_token = NULL, claimed_at_us = NULL, wake_at_us = NULL, "
        "poisoned_at_us = ?, poison_reason = ? WHERE tenant = ? AND run_id = ?",
        (now_us, reason, key, run_id),
    )


def _schedule_columns(
    schedule: Schedule, held: object, since: object, now_us: int
) -> tuple[object, int | None, int | None]:
    """``(claim_token, claimed_at_us, wake_at_us)`` after a commit with ``schedule``."""
    if isinstance(schedule, RetainClaim):
        # the commit is liveness: a retained claim is as fresh as now, and never older
        claimed_at = now_us if not isinstance(since, int) else max(since, now_us)
        return held, claimed_at, None
    match schedule.wake:
        case Immediate():
            return None, None, now_us
        case At(wake_at=moment):
            return None, None, _us(moment)
        case External() | Terminal():
            return None, None, None
    raise AssertionError(f"unvalidated schedule {schedule!r}")  # the validator rejects it


# -- discovery ----------------------------------------------------------------------------------


def _create(url: str, options: Mapping[str, object]) -> SQLiteBackend:
    from docket_sqlite.url import parse_url

    target, from_url = parse_url(url)
    known = {"clock", "limits", "synchronous", "busy_timeout"}
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
    clock = options.get("clock")
    limits = options.get("limits")
    if clock is not None and not callable(clock):
        raise TypeError("clock must be a callable returning an aware datetime")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError("limits must be docket.contract.Limits")
    return SQLiteBackend(
        target,
        clock=clock,
        limits=limits,
        synchronous=synchronous,
        busy_timeout=float(timeout),
    )


__all__ = ["SQLiteBackend", "SQLiteSettings"]
