"""``PostgresBackend``: the docket contract on PostgreSQL, through psycopg 3.

How it is put together:

* **Connections.** A ``psycopg_pool.AsyncConnectionPool`` of autocommit connections
  (session time zone UTC, a statement timeout, prepared statements), plus one
  dedicated LISTEN connection for wake-ups (:mod:`docket_postgres.notify`). Opening the
  backend first checks the schema on a direct connection: a store written by a newer
  release is refused before anything is changed; an empty schema is created.
* **One statement per write.** Each transition, each claim operation and
  ``save_graph`` is one call of a PL/pgSQL function in the store's schema: one round
  trip, one transaction, all or nothing. Run rows are locked (``FOR UPDATE``) while a
  function decides, so concurrent writers of one run serialize in the database, whether
  they are tasks of one process or workers on other machines.
* **The shared rules.** Transitions run the shared validator first and send the
  canonical bytes it returns. The function writes only if every post-lookup rule holds
  (no recorded transition id, identity, fences, event sequence discipline, identical
  re-sent events); otherwise it writes nothing and answers the facts it read under the
  lock, and ``check_replay``, ``check_identity``, the fences, ``split_events`` and
  ``compare_event`` name the error in the normative order, here in Python.
* **One clock.** The database's ``clock_timestamp()`` stamps and compares every
  operational time, unless an operation is given an explicit ``now`` (the contract's
  testing hook) or the backend was built with a ``clock`` (a testing seam that replaces
  the database clock for the whole backend, so a test can drive time).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Literal, cast

import attrs
import psycopg
import psycopg_pool
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

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
    TransitionResult,
    UnclaimedProposal,
)
from docket.contract.claimed import ClaimedRunDocuments
from docket.contract.clock import SampledClock
from docket.contract.grouping import GroupCommit, commit_claimed_in_order
from docket.contract.queries import (
    check_abandon_policy,
    check_claim_policy,
    check_event_query,
    check_graph_query,
    check_run_query,
    check_seq,
)
from docket.contract.retention import PruneResult, check_prune_args
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
from docket.values import JSONDict, utc
from docket_postgres.arrays import (
    BoolArray,
    ByteaArray,
    EncodedArray,
    Int4Array,
    Int8Array,
    TextArray,
    TimestamptzArray,
)
from docket_postgres.arrays import register as register_arrays
from docket_postgres.errors import (
    PermanentStoreError,
    StoreError,
    store_error,
)
from docket_postgres.notify import Listener, Waiters
from docket_postgres.schema import (
    SCHEMA_VERSION,
    apply_migrations,
    check_shape,
    read_version,
    refuse,
    render,
    schema_sql,
)
from docket_postgres.url import DEFAULT_SCHEMA, check_schema_name, describe, parse_url

ClaimPolicyName = Literal["blind", "fair"]
CLAIM_POLICIES: Final = ("blind", "fair")
DEFAULT_STATEMENT_TIMEOUT: Final = 30.0
DEFAULT_POOL_MIN: Final = 1
DEFAULT_POOL_MAX: Final = 10
DEFAULT_POOL_TIMEOUT: Final = 10.0
DEFAULT_CLOCK_RESYNC: Final = 1.0  # seconds between reads of the database clock
DEFAULT_COMMIT_LANES: Final = 2  # commit statements in flight before commits are grouped
_GROUP_LIMIT: Final = 32  # most commits one group-commit statement carries
_BACKOFF_STEPS: Final = 31  # abandon backoff doubles at most 30 times
_INT4_MAX: Final = (1 << 31) - 1  # counters are ``integer``: a larger bound means "no bound"

Row = tuple[Any, ...]


def _key(owner: OwnerScope) -> str:
    """The ``tenant`` column of an owner: ``''`` for tenantless rows."""
    return tenant_id_of(owner) or ""


def _owner(key: str) -> OwnerScope:
    return owner_scope(key or None)


def _check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str):
        raise TypeError(f"run_id must be a string, got {type(run_id).__name__}")
    return run_id


def _storable(*texts: object) -> bool:
    """Whether PostgreSQL ``text`` can hold these ids (it cannot hold NUL)."""
    return all(not isinstance(t, str) or "\x00" not in t for t in texts)


def _opt_time(value: Any) -> datetime | None:
    return None if value is None else utc(value)


def _decode_run(data: bytes, where: str) -> Run:
    try:
        return run_from_json(data)
    except ValueError as exc:
        raise PermanentStoreError(f"the stored run document {where} cannot be read: {exc}") from exc


def _schedule_args(schedule: Schedule) -> tuple[str, datetime | None]:
    """``(p_schedule, p_wake_at)`` of the commit function."""
    if isinstance(schedule, RetainClaim):
        return "retain", None
    match schedule.wake:
        case Immediate():
            return "immediate", None
        case At(wake_at=moment):
            return "at", utc(moment)
        case External():
            return "external", None
        case Terminal():
            return "terminal", None
    raise AssertionError(f"unvalidated schedule {schedule!r}")  # the validator rejects it


def _backoff_delays(base: timedelta, cap: timedelta) -> list[timedelta]:
    """``min(base * 2**k, cap)`` for every k the backoff can reach (0..30)."""
    out: list[timedelta] = []
    for k in range(_BACKOFF_STEPS):
        factor = 1 << k
        out.append(cap if base > cap / factor else base * factor)
    return out


# -- statements (``@schema@`` is spliced in per backend) --------------------------------------

_NOW = "SELECT clock_timestamp()"
_SAVE_GRAPH = "SELECT * FROM @schema@.save_graph(%s, %s, %s, %s, %s::timestamptz)"
_FETCH_GRAPH = (
    "SELECT document FROM @schema@.graphs WHERE tenant = %s AND graph_id = %s AND graph_hash = %s"
)
_LATEST_GRAPH = (
    "SELECT graph_hash FROM @schema@.graphs WHERE tenant = %s AND graph_id = %s "
    "ORDER BY published_at DESC, graph_hash DESC LIMIT 1"
)
_GRAPH_VERSIONS = (
    "SELECT graph_hash, published_at FROM @schema@.graphs WHERE tenant = %s AND graph_id = %s "
    "AND (%s::timestamptz IS NULL OR (published_at, graph_hash) < (%s::timestamptz, %s::text)) "
    "ORDER BY published_at DESC, graph_hash DESC LIMIT %s"
)
_FETCH_RUN = "SELECT run_json FROM @schema@.runs WHERE tenant = %s AND run_id = %s"
_INSPECT_RUN = (
    "SELECT r.run_json, l.wake_at, l.claimed_at, coalesce(l.claim_attempts, 0), "
    "coalesce(l.claim_abandons, 0), l.poisoned_at, l.poison_reason, r.latest_checkpoint_type "
    "FROM @schema@.runs r LEFT JOIN @schema@.live l ON l.tenant = r.tenant AND l.run_id = r.run_id "
    "WHERE r.tenant = %s AND r.run_id = %s"
)
_SUMMARY = (
    "tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq, started_at, "
    "updated_at, finished_at"
)
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
_INITIALIZE = (
    "SELECT * FROM @schema@.initialize_run(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
    "%s::timestamptz, %s::timestamptz, %s::timestamptz, %s, %s, %s::timestamptz, %s, "
    "%s::timestamptz, %s::bigint[], %s::bytea[], %s::bytea[])"
)
_COMMIT = (
    "SELECT * FROM @schema@.commit_run(%s, %s, %s, %s, %s, %s, %s::timestamptz, %s, %s, %s, "
    "%s, %s, %s, %s, %s::timestamptz, %s::timestamptz, %s, %s, %s, %s::timestamptz, "
    "%s::timestamptz, %s::bigint[], %s::bytea[], %s::bytea[])"
)
# Group commit (schema version 2): the same arguments as arrays, one element per commit,
# the events flattened with a count per commit.
_COMMIT_MANY = (
    "SELECT * FROM @schema@.commit_runs(%s::text[], %s::text[], %s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::timestamptz[], %s::bigint[], %s::boolean[], %s::text[], "
    "%s::text[], %s::bigint[], %s::bigint[], %s::bigint[], %s::timestamptz[], "
    "%s::timestamptz[], %s::bytea[], %s::text[], %s::text[], %s::timestamptz[], "
    "%s::timestamptz, %s::integer[], %s::bigint[], %s::bytea[], %s::bytea[], "
    "%s::integer[], %s::boolean[], %s::integer[])"
)
_INITIALIZE_MANY = (
    "SELECT * FROM @schema@.initialize_runs(%s::text[], %s::text[], %s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::bigint[], "
    "%s::timestamptz[], %s::timestamptz[], %s::timestamptz[], %s::bytea[], %s::text[], "
    "%s::timestamptz[], %s::text[], %s::timestamptz, %s::integer[], %s::bigint[], "
    "%s::bytea[], %s::bytea[], %s::integer[], %s::boolean[], %s::integer[])"
)


@attrs.frozen
class _Statement:
    """A write that can be grouped: its one-run form, its group form, and the array type
    each of its leading arguments becomes in a group (the rest: ``p_now`` and the three
    event arrays, flattened with a count per write). Both start with tenant and run id."""

    single: str
    many: str
    columns: tuple[type[EncodedArray], ...]

    @property
    def scalars(self) -> int:
        return len(self.columns)


_T, _I8, _TS, _BY = TextArray, Int8Array, TimestamptzArray, ByteaArray
_COMMIT_STATEMENT: Final = _Statement(
    _COMMIT,
    _COMMIT_MANY,
    (
        _T,
        _T,
        _T,
        _T,
        _T,
        _T,
        _TS,
        _I8,
        BoolArray,
        _T,
        _T,
        _I8,
        _I8,
        _I8,
        _TS,
        _TS,
        _BY,
        _T,
        _T,
        _TS,
    ),
)
_INITIALIZE_STATEMENT: Final = _Statement(
    _INITIALIZE,
    _INITIALIZE_MANY,
    (_T, _T, _T, _T, _T, _T, _T, _I8, _I8, _I8, _TS, _TS, _TS, _BY, _T, _TS, _T),
)
_WriteArgs = tuple[object, ...]
#: A function's row, or the store's answer when the statement failed.
_WriteAnswer = tuple[Any, ...] | Retryable | Permanent

# The claimed run's document rides along with its lease, so the drain that follows need
# not read it back. The lookup reads ``runs`` in the statement's own snapshot, which may
# predate a commit the claim saw: a document whose checkpoint is not the lease's is left
# out (NULL), and the drain reads the run as usual. A subquery per claimed run rather than
# a join: it is always a key probe, where a join was planned as a scan of the whole table
# while ``runs`` had no statistics yet.
_CLAIM = (
    "SELECT c.o_tenant, c.o_run_id, c.o_graph_id, c.o_graph_hash, c.o_checkpoint_seq, "
    "c.o_token, c.o_attempts, c.o_poisoned, c.o_now, CASE WHEN NOT c.o_poisoned THEN ("
    "SELECT r.run_json FROM @schema@.runs r WHERE r.tenant = c.o_tenant "
    "AND r.run_id = c.o_run_id AND r.checkpoint_seq = c.o_checkpoint_seq) END "
    "FROM @schema@.claim_due(%s::integer, %s::interval, %s::integer, %s, %s::timestamptz, %s) "
    "WITH ORDINALITY c ORDER BY c.ordinality"
)

_REFRESH = (
    "UPDATE @schema@.live SET claimed_at = greatest(claimed_at, "
    "coalesce(%s::timestamptz, clock_timestamp())) "
    "WHERE tenant = %s AND run_id = %s AND claim_token = %s RETURNING claimed_at"
)
_RELEASE = (
    "WITH released AS (UPDATE @schema@.live SET claim_token = NULL, claimed_at = NULL, "
    "wake_at = coalesce(%s::timestamptz, clock_timestamp()) "
    "WHERE tenant = %s AND run_id = %s AND claim_token = %s RETURNING 1) "
    "SELECT pg_notify('docket_wake', '@name@') FROM released"
)
_ABANDON = (
    "SELECT * FROM @schema@.abandon_claim(%s, %s, %s, %s::bigint, %s::timestamptz, "
    "%s::timestamptz, %s::integer, %s, %s::interval[])"
)
_RETRY = "SELECT * FROM @schema@.retry_poisoned(%s, %s, %s::timestamptz)"
_PRUNE = "SELECT * FROM @schema@.prune(%s::interval, %s::interval, %s::integer, %s::timestamptz)"
_SETTINGS = "SELECT current_setting('fsync'), current_setting('synchronous_commit')"


class PostgresBackend:
    """The docket contract on one PostgreSQL schema.

    ``conninfo`` is a libpq URL or key/value string (no docket options: use
    :meth:`from_url` for a docket URL). ``schema`` names the PostgreSQL schema holding
    docket's objects (created, with its tables, on first open). ``clock`` is a testing
    seam: when given, it replaces the database clock as the backend's one clock.
    ``claim_policy`` is ``"blind"`` (oldest due first, whoever owns it) or ``"fair"``
    (breadth-first across tenants; see the docs). ``statement_timeout`` (seconds, ``0``
    for none) bounds every statement the backend sends, claims included. ``notify``
    enables the LISTEN connection (disable it behind a transaction-pooling proxy).
    ``prepare`` uses server-side prepared statements (disable behind PgBouncer in
    transaction mode).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        clock: Callable[[], datetime] | None = None,
        limits: Limits | None = None,
        claim_policy: ClaimPolicyName = "blind",
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
        pool_min_size: int = DEFAULT_POOL_MIN,
        pool_max_size: int = DEFAULT_POOL_MAX,
        pool_timeout: float = DEFAULT_POOL_TIMEOUT,
        notify: bool = True,
        prepare: bool = True,
        clock_resync: float = DEFAULT_CLOCK_RESYNC,
        commit_lanes: int = DEFAULT_COMMIT_LANES,
    ) -> None:
        if not isinstance(conninfo, str):
            raise TypeError("conninfo must be a string")
        self._schema = check_schema_name(schema)
        if clock is not None and not callable(clock):
            raise TypeError("clock must be a callable returning an aware datetime")
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError("limits must be docket.contract.Limits")
        if claim_policy not in CLAIM_POLICIES:
            raise ValueError(f"claim_policy must be one of {CLAIM_POLICIES}, got {claim_policy!r}")
        for name, value in (
            ("pool_min_size", pool_min_size),
            ("pool_max_size", pool_max_size),
            ("commit_lanes", commit_lanes),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if pool_max_size < max(1, pool_min_size):
            raise ValueError("pool_max_size must be at least 1 and at least pool_min_size")
        for name, seconds in (
            ("statement_timeout", statement_timeout),
            ("pool_timeout", pool_timeout),
            ("clock_resync", clock_resync),
        ):
            if (
                not isinstance(seconds, int | float)
                or isinstance(seconds, bool)
                or not 0 <= seconds <= 86_400
            ):
                raise ValueError(f"{name} must be 0..86400 seconds, got {seconds!r}")
        self._conninfo = conninfo
        self._clock = clock
        self._limits = limits or Limits()
        self._fair = claim_policy == "fair"
        self._claim_policy: ClaimPolicyName = claim_policy
        self._statement_timeout = float(statement_timeout)
        self._pool_min = pool_min_size
        self._pool_max = pool_max_size
        self._pool_timeout = float(pool_timeout) or DEFAULT_POOL_TIMEOUT
        self._notify = bool(notify)
        self._prepare = bool(prepare)
        self._where = describe(conninfo, self._schema) if "://" in conninfo else self._schema
        try:
            given = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"not a usable PostgreSQL connection string: {exc}") from None
        # name the sessions so operators can tell them apart (unless the URL names them)
        if "application_name" not in given:
            self._conninfo = make_conninfo(conninfo, application_name=self.app_name)
        self._pool: psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._listener: Listener | None = None
        self._waiters = Waiters()
        self._lifecycle = asyncio.Lock()
        self._durable_fsync = False
        self._sql: dict[str, bytes] = {}
        self._claimed_runs = ClaimedRunDocuments()
        self._server_clock = SampledClock(self._read_clock, resync=float(clock_resync))
        # 0 lanes: every write is its own statement (no grouping)
        self._group = self._grouping(_COMMIT_STATEMENT, commit_lanes)
        self._init_group = self._grouping(_INITIALIZE_STATEMENT, commit_lanes)

    @classmethod
    def from_url(cls, url: str, **options: object) -> PostgresBackend:
        """Build (not open) a backend from a ``postgresql://`` URL and factory options."""
        return _create(url, options)

    def __repr__(self) -> str:
        return f"PostgresBackend({self._where}, claim_policy={self._claim_policy!r})"

    @property
    def schema(self) -> str:
        return self._schema

    @property
    def claim_policy(self) -> ClaimPolicyName:
        return self._claim_policy

    @property
    def app_name(self) -> str:
        """The ``application_name`` of the pool's sessions (``docket-<schema>``)."""
        return f"docket-{self._schema}"[:63]

    @property
    def listener(self) -> Listener | None:
        """The LISTEN connection's manager (``None`` when closed or ``notify=False``)."""
        return self._listener

    # -- bundle -----------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        features = {Feature.DURABLE, Feature.PRUNE, Feature.REOPEN_FAILED}
        if self._notify:
            features.add(Feature.NOTIFY)
        if self._durable_fsync:
            features.add(Feature.DURABLE_FSYNC)
        if self._fair:
            features.add(Feature.FAIR_CLAIMS)
        return Capabilities(limits=self._limits, features=frozenset(features), name="postgres")

    @property
    def graphs(self) -> PostgresBackend:
        return self

    @property
    def runs(self) -> PostgresBackend:
        return self

    @property
    def events(self) -> PostgresBackend:
        return self

    @property
    def transitions(self) -> PostgresBackend:
        return self

    # -- migrations (docket.contract.Migratable) --------------------------------------------------

    def schema_sql(self) -> str:
        """The DDL that creates this backend's schema from nothing (for DBAs who run it)."""
        return schema_sql(self._schema)

    async def _direct(self, conninfo: str | None = None) -> psycopg.AsyncConnection[Any]:
        try:
            conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
                conninfo or self._conninfo, autocommit=True
            )
        except psycopg.Error as exc:
            raise store_error(exc, sent=False, write=False) from exc
        return conn

    async def schema_versions(self) -> tuple[int | None, int]:
        """``(stored, supported)``; ``stored`` is ``None`` when the schema is empty."""
        conn = await self._direct()
        try:
            return await read_version(conn, self._schema), SCHEMA_VERSION
        finally:
            await conn.close()

    async def migrate(self) -> tuple[int | None, int]:
        """Apply the pending migrations in order, in one transaction.

        Creates the schema when it is empty; a no-op ``(N, N)`` when current; raises
        :class:`~docket_postgres.errors.SchemaTooNew` (changing nothing) for a schema
        from a newer release. Stop the workers before upgrading a live store.
        """
        conn = await self._direct()
        try:
            return await apply_migrations(conn, self._schema, self._where, upgrade=True)
        finally:
            await conn.close()

    # -- lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        """Check (or create) the schema, open the pool and the LISTEN connection.

        Idempotent. Raises :class:`~docket_postgres.errors.SchemaTooNew` (changing
        nothing) for a schema written by a newer release,
        :class:`~docket_postgres.errors.SchemaTooOld` for one that needs ``docket
        migrate``, and another :class:`~docket_postgres.errors.StoreError` when the
        database cannot be used (unreachable, wrong credentials, foreign schema).
        """
        async with self._lifecycle:
            if self._pool is not None:
                return
            listener = (
                Listener(self._conninfo, self._schema, self._waiters) if self._notify else None
            )
            # One direct session checks the schema (so a refusal is precise and early);
            # it then becomes the LISTEN session.
            conn = await self._direct(listener.conninfo if listener else self._conninfo)
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
            pool: psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[Any]] = (
                psycopg_pool.AsyncConnectionPool(
                    self._conninfo,
                    min_size=self._pool_min,
                    max_size=self._pool_max,
                    timeout=self._pool_timeout,
                    kwargs={"autocommit": True},
                    configure=self._configure,
                    open=False,
                    name=f"docket-{self._schema}",
                )
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
        found = await read_version(conn, self._schema)
        refuse(found, self._where, SCHEMA_VERSION, older_ok=False)
        if found is None:
            await apply_migrations(conn, self._schema, self._where, upgrade=False)
        await check_shape(conn, self._schema)
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

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Session settings of every pooled connection."""
        timeout_ms = int(self._statement_timeout * 1000)
        await conn.execute(f"SET TIME ZONE 'UTC'; SET statement_timeout = {timeout_ms}".encode())
        conn.prepare_threshold = 0 if self._prepare else None
        register_arrays(conn.adapters)

    async def close(self) -> None:
        """Close the LISTEN connection and the pool; idempotent."""
        async with self._lifecycle:
            pool, self._pool = self._pool, None
            listener, self._listener = self._listener, None
        if listener is not None:
            await listener.stop()
        for group in (self._group, self._init_group):
            if group is not None:
                await group.drain()
        if pool is not None:
            await pool.close()

    async def _ensure_open(
        self,
    ) -> psycopg_pool.AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        pool = self._pool
        if pool is None:
            await self.open()
            pool = self._pool
            assert pool is not None
        return pool

    # -- running statements ---------------------------------------------------------------------

    def _q(self, template: str) -> bytes:
        """A statement with this backend's schema spliced in (cached)."""
        found = self._sql.get(template)
        if found is None:
            found = self._sql[template] = render(template, self._schema).encode()
        return found

    async def _fetch(
        self, query: bytes | sql.Composed, params: Sequence[object], *, write: bool
    ) -> list[Row]:
        """Run one statement on a pooled connection; raise a classified :class:`StoreError`."""
        pool = await self._ensure_open()
        sent = False
        try:
            async with pool.connection() as conn:
                sent = True
                cur = await conn.execute(query, params, binary=True)
                # (``cur.description`` would build a Column per field just to ask this)
                result = cur.pgresult
                if result is None or result.status != pq.ExecStatus.TUPLES_OK:
                    return []
                return await cur.fetchall()
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise store_error(exc, sent=sent, write=write) from exc

    async def _outcome(
        self, query: bytes, params: Sequence[object]
    ) -> list[Row] | Retryable | Permanent:
        """``_fetch`` of a write whose answers include Retryable/Permanent."""
        try:
            return await self._fetch(query, params, write=True)
        except StoreError as exc:
            return exc.outcome

    # -- clock and wake-ups -----------------------------------------------------------------------

    def _given(self, now: datetime | None) -> datetime | None:
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
        """The database clock without a round trip each time (``SampledNow``)."""
        if self._clock is not None:
            return utc(self._clock())
        return await self._server_clock.now()

    async def _read_clock(self) -> datetime:
        rows = await self._fetch(self._q(_NOW), (), write=False)
        return utc(rows[0][0])

    async def wait_for_work(self, timeout: float) -> bool:
        return await self._waiters.wait(timeout)

    def _announced(self, announced: object) -> None:
        """A write of ours announced work. The listener hears it; without one, wake here."""
        listener = self._listener
        if announced and (listener is None or not listener.connected):
            self._waiters.wake_all()

    # -- graphs ---------------------------------------------------------------------------------

    async def save_graph(
        self, owner: OwnerScope, ref: GraphRef, document: JSONDict
    ) -> GraphVersion | InvalidGraph | GraphContentConflict | TooLarge | Retryable | Permanent:
        checked = validate_graph_save(owner, ref, document, self._limits)
        if not isinstance(checked, bytes):
            return checked
        key = _key(owner)
        if not _storable(key, ref.graph_id, ref.graph_hash):
            return InvalidGraph(("ids: PostgreSQL text cannot hold NUL characters",))
        rows = await self._outcome(
            self._q(_SAVE_GRAPH), (key, ref.graph_id, ref.graph_hash, checked, self._given(None))
        )
        if not isinstance(rows, list):
            return rows
        published_at, same = rows[0]
        if not same:
            return GraphContentConflict()
        return GraphVersion(
            ref=GraphRef(ref.graph_id, ref.graph_hash), published_at=utc(published_at)
        )

    async def fetch_graph(
        self, owner: OwnerScope, ref: GraphRef
    ) -> JSONDict | NotFound | CorruptGraph:
        key = _key(require_owner(owner))
        graph_id, graph_hash = getattr(ref, "graph_id", None), getattr(ref, "graph_hash", None)
        if not isinstance(graph_id, str) or not isinstance(graph_hash, str):
            return NotFound("graph")
        if not _storable(key, graph_id, graph_hash):
            return NotFound("graph")
        rows = await self._fetch(self._q(_FETCH_GRAPH), (key, graph_id, graph_hash), write=False)
        if not rows:
            return NotFound("graph")
        data = bytes(rows[0][0])
        return decode_graph(GraphRef(graph_id, graph_hash), data)

    async def fetch_latest_graph_ref(self, owner: OwnerScope, graph_id: str) -> GraphRef | NotFound:
        key = _key(require_owner(owner))
        if not isinstance(graph_id, str) or not _storable(key, graph_id):
            return NotFound("graph")
        rows = await self._fetch(self._q(_LATEST_GRAPH), (key, graph_id), write=False)
        return GraphRef(graph_id, str(rows[0][0])) if rows else NotFound("graph")

    async def list_graph_versions(
        self, owner: OwnerScope, graph_id: str, query: GraphListQuery
    ) -> GraphVersionPage:
        check_graph_query(query)
        key = _key(require_owner(owner))
        if not isinstance(graph_id, str) or not _storable(key, graph_id):
            return GraphVersionPage.from_candidates([], query.limit, query.before)
        before = query.before
        at = utc(before.published_at) if before is not None else None
        rows = await self._fetch(
            self._q(_GRAPH_VERSIONS),
            (key, graph_id, at, at, before.graph_hash if before else None, query.limit + 1),
            write=False,
        )
        versions = [
            GraphVersion(ref=GraphRef(graph_id, str(h)), published_at=utc(at)) for h, at in rows
        ]
        return GraphVersionPage.from_candidates(versions, query.limit, query.before)

    # -- run reads ------------------------------------------------------------------------------

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        key = _key(require_owner(owner))
        if not _storable(_check_run_id(run_id), key):
            return NotFound()
        rows = await self._fetch(self._q(_FETCH_RUN), (key, run_id), write=False)
        return _decode_run(bytes(rows[0][0]), repr(run_id)) if rows else NotFound()

    async def inspect_run(self, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
        key = _key(require_owner(owner))
        if not _storable(_check_run_id(run_id), key):
            return NotFound()
        rows = await self._fetch(self._q(_INSPECT_RUN), (key, run_id), write=False)
        if not rows:
            return NotFound()
        data, wake, claimed, attempts, abandons, poisoned, reason, checkpoint = rows[0]
        return RunInfo(
            run=_decode_run(bytes(data), repr(run_id)),
            tenant_id=key or None,
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
        statement, params = self._list_runs_sql(scope, query)
        if statement is None:
            return RunPage.from_candidates([], query.limit, query.before)
        rows = await self._fetch(statement, params, write=False)
        return RunPage.from_candidates([_summary(row) for row in rows], query.limit, query.before)

    def _list_runs_sql(
        self, scope: Scope, query: RunListQuery
    ) -> tuple[sql.Composed | None, list[object]]:
        """The one statement behind ``list_runs``: scope and every filter applied in SQL.

        Newest first by ``(started_at, run_id)``; across owners (``System``) the identity
        column — insertion order — breaks the tie of one run id used by two tenants.
        """
        clauses: list[sql.Composable] = []
        params: list[object] = []
        if not isinstance(scope, System):
            clauses.append(sql.SQL("tenant = %s"))
            params.append(_key(scope))
        for name in ("graph_id", "graph_hash"):
            value = getattr(query, name)
            if value is not None:
                clauses.append(sql.SQL("{} = %s").format(sql.Identifier(name)))
                params.append(value)
        if not _storable(*params):
            return None, []
        if query.statuses is not None:
            clauses.append(sql.SQL("status = ANY(%s::text[])"))
            params.append(sorted(str(s) for s in query.statuses))
        if query.before is not None:
            if not _storable(query.before.run_id):
                return None, []
            clauses.append(sql.SQL("(started_at, run_id) < (%s::timestamptz, %s::text)"))
            params += [utc(query.before.started_at), query.before.run_id]
        where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL("")
        tie = sql.SQL(", id ASC") if isinstance(scope, System) else sql.SQL("")
        statement = sql.SQL(
            "SELECT {columns} FROM {schema}.runs{where} "
            "ORDER BY started_at DESC, run_id DESC{tie} LIMIT %s"
        ).format(
            columns=sql.SQL(_SUMMARY),
            schema=sql.Identifier(self._schema),
            where=where,
            tie=tie,
        )
        params.append(query.limit + 1)
        return statement, params

    # -- events ---------------------------------------------------------------------------------

    async def fetch_event(
        self, owner: OwnerScope, run_id: str, seq: int
    ) -> Event | NotFound | CorruptEventRow:
        key = _key(require_owner(owner))
        check_seq(seq)
        if not _storable(_check_run_id(run_id), key):
            return NotFound("event")
        rows = await self._fetch(self._q(_FETCH_EVENT), (key, run_id, seq), write=False)
        return decode_event(run_id, seq, bytes(rows[0][0])) if rows else NotFound("event")

    async def fetch_latest_event(
        self, owner: OwnerScope, run_id: str
    ) -> Event | NotFound | CorruptEventRow | None:
        key = _key(require_owner(owner))
        if not _storable(_check_run_id(run_id), key):
            return NotFound()
        rows = await self._fetch(self._q(_LATEST_EVENT), (key, run_id), write=False)
        if not rows:
            return NotFound()
        seq, data = rows[0]
        return None if seq is None else decode_event(run_id, int(seq), bytes(data))

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        key = _key(require_owner(owner))
        check_event_query(query)
        if not _storable(_check_run_id(run_id), key):
            return NotFound()
        rows = await self._fetch(
            self._q(_LIST_EVENTS), (query.after_seq, query.limit, key, run_id), write=False
        )
        if not rows:
            return NotFound()
        latest_seq, oldest, newest = rows[0][0], rows[0][1], rows[0][2]
        events: list[Event] = []
        for _, _, _, seq, data in rows:
            if seq is None:
                continue
            decoded = decode_event(run_id, int(seq), bytes(data))
            if isinstance(decoded, CorruptEventRow):
                return decoded
            events.append(decoded)
        return EventPage.from_candidates(
            events,
            limit=query.limit,
            after_seq=query.after_seq,
            oldest_available_seq=None if oldest is None else int(oldest),
            latest_available_seq=None if newest is None else int(newest),
            latest_seq=int(latest_seq),
        )

    # -- claims ---------------------------------------------------------------------------------

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        check_claim_policy(policy)
        preference = None if policy.preference is None else str(policy.preference.value)
        rows = await self._outcome(
            self._q(_CLAIM),
            (
                min(policy.limit, _INT4_MAX),
                policy.orphan_ttl,
                min(policy.max_claim_attempts, _INT4_MAX),
                preference,
                self._given(policy.now),
                self._fair,
            ),
        )
        if not isinstance(rows, list):
            return rows
        leases: list[Lease] = []
        poisoned: list[PoisonedClaim] = []
        claimed_runs = self._claimed_runs
        for row in rows:
            key, run_id, graph_id, graph_hash, seq, token, attempts, is_poisoned, at, doc = row
            owner = _owner(str(key))
            moment = utc(at)
            if is_poisoned:
                poisoned.append(
                    PoisonedClaim(
                        run_id=str(run_id),
                        owner=owner,
                        poisoned_at=moment,
                        poison_reason=POISON_MAX_ATTEMPTS,
                    )
                )
            else:
                leases.append(
                    Lease(
                        run_id=str(run_id),
                        owner=owner,
                        graph_id=str(graph_id),
                        graph_hash=str(graph_hash),
                        checkpoint_seq=int(seq),
                        claim_token=str(token),
                        claimed_at=moment,
                        claim_attempt=int(attempts),
                        orphan_ttl=policy.orphan_ttl,
                    )
                )
                if doc is not None:
                    claimed_runs.keep(str(token), str(key), str(run_id), bytes(doc))
        return ClaimBatch(tuple(leases), tuple(poisoned))

    async def claimed_run(self, owner: OwnerScope, run_id: str, token: str) -> Run | None:
        """The run as the claim holding ``token`` read it, at most once; ``None`` when this
        backend did not keep it (read the run instead). Saves the drain a round trip."""
        kept = self._claimed_runs.take(token, _key(require_owner(owner)), run_id)
        return None if kept is None else _decode_run(kept, repr(run_id))

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        key = _key(require_owner(owner))
        _check_run_id(run_id)
        moment = self._given(now)
        if not isinstance(token, str) or not _storable(run_id, key, token):
            return ClaimLost()
        rows = await self._fetch(self._q(_REFRESH), (moment, key, run_id, token), write=True)
        return ClaimRefreshed(utc(rows[0][0])) if rows else ClaimLost()

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        key = _key(require_owner(owner))
        _check_run_id(run_id)
        moment = self._given(now)
        if not isinstance(token, str) or not _storable(run_id, key, token):
            return
        rows = await self._fetch(self._q(_RELEASE), (moment, key, run_id, token), write=True)
        self._announced(bool(rows))

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        key = _key(require_owner(owner))
        _check_run_id(run_id)
        if not isinstance(policy, AbandonPolicy):
            raise TypeError(f"expected AbandonPolicy, got {type(policy).__name__}")
        now = utc(policy.now) if policy.now is not None else await self.now()
        check_abandon_policy(policy, now)
        if not isinstance(token, str) or not _storable(run_id, key, token):
            return StaleAbandon()
        backoff = policy.backoff
        delays = (
            _backoff_delays(backoff.base, backoff.cap)
            if policy.non_poisoning and backoff is not None
            else None
        )
        rows = await self._fetch(
            self._q(_ABANDON),
            (
                key,
                run_id,
                token,
                policy.expected_checkpoint_seq,
                now,
                utc(policy.retry_at),
                min(policy.max_claim_abandons, _INT4_MAX),
                policy.non_poisoning,
                delays,
            ),
            write=True,
        )
        outcome, at = rows[0]
        if outcome == "stale":
            return StaleAbandon()
        if outcome == "poisoned":
            return Poisoned(utc(at), POISON_MAX_ABANDONS)
        self._announced(True)
        return Rescheduled(utc(at))

    async def retry_poisoned_run(
        self, owner: OwnerScope, run_id: str, now: datetime | None = None
    ) -> Run | NotFound | InactiveRun:
        key = _key(require_owner(owner))
        _check_run_id(run_id)
        moment = self._given(now)
        if not _storable(run_id, key):
            return NotFound()
        rows = await self._fetch(self._q(_RETRY), (key, run_id, moment), write=True)
        outcome, data = rows[0]
        if outcome == "not_found":
            return NotFound()
        if outcome == "inactive":
            return InactiveRun()
        if outcome == "retried":
            self._announced(True)
        return _decode_run(bytes(data), repr(run_id))

    # -- retention ------------------------------------------------------------------------------

    async def prune(
        self,
        *,
        event_age: timedelta | None = None,
        run_age: timedelta | None = None,
        batch_size: int = 1000,
        now: datetime | None = None,
    ) -> PruneResult:
        """Delete, in one bounded transaction, events and finished runs older than an age.

        Up to ``batch_size`` events inserted more than ``event_age`` ago — of any run,
        live ones included (readers see the hole through
        ``EventPage.oldest_available_seq``) — and up to ``batch_size`` runs that finished
        more than ``run_age`` ago, with their events and transition records. ``None``
        skips that kind. Ages are measured on the backend's clock; a row exactly at the
        boundary survives. Call it periodically, and again at once while it keeps
        deleting full batches. One pruner runs per schema at a time: a concurrent call
        returns ``PruneResult(ran=False, ...)`` without waiting.
        """
        check_prune_args(event_age, run_age, batch_size)
        rows = await self._fetch(
            self._q(_PRUNE),
            (event_age, run_age, min(batch_size, _INT4_MAX), self._given(now)),
            write=True,
        )
        ran, events, runs = rows[0]
        return PruneResult(ran=bool(ran), events=int(events), runs=int(runs))

    # -- transitions ----------------------------------------------------------------------------

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
        """``ClaimedStarts`` (schema version 5): the run is written claimed by the token."""
        valid = validate_initialize_claimed(owner, proposal, events, claim_token, self._limits)
        return await self._initialize(owner, proposal, valid)

    async def _initialize(
        self,
        owner: OwnerScope,
        proposal: InitProposal,
        valid: ValidationResult,
    ) -> TransitionResult:
        if not isinstance(valid, ValidTransition):
            return valid
        key = _key(owner)
        run = valid.run
        if not _storable(key, run.id, run.graph_id, run.graph_hash, proposal.transition_id):
            return Permanent("PostgreSQL text cannot hold NUL characters in ids")
        hashes = [hashlib.sha256(c).digest() for c in valid.event_contents]
        args: _WriteArgs = (
            key,
            run.id,
            proposal.transition_id,
            valid.digest,
            run.graph_id,
            run.graph_hash,
            str(run.status),
            run.step,
            run.checkpoint_seq,
            run.event_seq,
            run.started_at,
            run.updated_at,
            run.finished_at,
            valid.run_json,
            str(proposal.checkpoint_type),
            utc(proposal.wake_at),
            valid.claim_token,
            self._given(None),
            [e.seq for e in valid.events],
            list(valid.event_json),
            hashes,
        )
        if self._init_group is None:
            answer = await self._send_write(_INITIALIZE_STATEMENT, args)
        else:
            answer = await self._init_group.submit(args)
        if not isinstance(answer, tuple):
            return answer
        outcome, digest, stored_json, announced = answer
        if outcome == "written":
            self._announced(announced)
            return valid.run  # what was just stored, checked durable: no decode
        if outcome == "no_graph":
            return NotFound("graph")
        recorded = {proposal.transition_id: str(digest)} if digest is not None else {}
        replay = check_replay(recorded, proposal.transition_id, valid.digest)
        if isinstance(replay, Replay):
            return self._stored(stored_json, run.id)
        return replay or Conflict(f"run {run.id!r} already exists")

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
        """``ChainedCommits``: commits submitted in one turn go in one ``commit_runs``
        statement, in order, which (schema version 4) applies a run's later writes set-wise
        behind its first."""
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

    def _grouping(
        self, statement: _Statement, lanes: int
    ) -> GroupCommit[_WriteArgs, _WriteAnswer] | None:
        if not lanes:
            return None

        async def send(batch: list[_WriteArgs]) -> list[_WriteAnswer]:
            return await self._send_group(statement, batch)

        return GroupCommit(send, lanes=lanes, limit=_GROUP_LIMIT)

    async def _send_write(self, statement: _Statement, args: _WriteArgs) -> _WriteAnswer:
        # the event arrays go pre-encoded (psycopg would send lists as text, bytea hex-escaped)
        n = statement.scalars + 1
        seqs, bodies, hashes = (cast(Sequence[Any], a) for a in args[n : n + 3])
        sent = (*args[:n], Int8Array(seqs), ByteaArray(bodies), ByteaArray(hashes))
        rows = await self._outcome(self._q(statement.single), sent)
        return rows if not isinstance(rows, list) else tuple(rows[0])

    async def _send_group(
        self, statement: _Statement, batch: list[_WriteArgs]
    ) -> list[_WriteAnswer]:
        """Group commit: several runs' writes in one ``commit_runs`` (``initialize_runs``)
        statement.

        Sorted by owner and run id, so concurrent batches lock run rows in one order. If
        the statement fails as a whole (nothing of it was kept, or, for a lost connection,
        maybe all of it), each write is resent alone: one that was applied answers as a
        replay of its transition id.
        """
        if len(batch) == 1:
            return [await self._send_write(statement, batch[0])]
        scalars = statement.scalars
        order = sorted(range(len(batch)), key=lambda i: (batch[i][0], batch[i][1]))
        columns: list[list[object]] = [[] for _ in range(scalars)]
        counts: list[int] = []
        seqs: list[int] = []
        bodies: list[bytes] = []
        hashes: list[bytes] = []
        # per write: where its events start (1-based) and whether it is the first write to
        # its run in the group; per event: the write (1-based) it belongs to
        firsts: list[int] = []
        solo: list[bool] = []
        owners: list[int] = []
        previous: tuple[object, object] | None = None
        for position, i in enumerate(order, 1):
            args = batch[i]
            for column, value in zip(columns, args[:scalars], strict=True):
                column.append(value)
            event_seqs = cast(list[int], args[scalars + 1])
            firsts.append(len(seqs) + 1)
            counts.append(len(event_seqs))
            owners.extend([position] * len(event_seqs))
            seqs.extend(event_seqs)
            bodies.extend(cast(list[bytes], args[scalars + 2]))
            hashes.extend(cast(list[bytes], args[scalars + 3]))
            run = (args[0], args[1])
            solo.append(run != previous)  # sorted: a run's writes are adjacent
            previous = run
        now = batch[0][scalars]
        sent = (
            *(kind(column) for kind, column in zip(statement.columns, columns, strict=True)),
            now,
            Int4Array(counts),
            Int8Array(seqs),
            ByteaArray(bodies),
            ByteaArray(hashes),
            Int4Array(firsts),
            BoolArray(solo),
            Int4Array(owners),
        )
        rows = await self._outcome(self._q(statement.many), sent)
        if not isinstance(rows, list) or len(rows) != len(batch):
            return list(
                await asyncio.gather(*(self._send_write(statement, args) for args in batch))
            )
        answers: list[_WriteAnswer] = [()] * len(batch)
        for row in rows:
            answers[order[int(row[0]) - 1]] = tuple(row[1:])
        return answers

    def _stored(self, data: object, run_id: str) -> Run | Permanent:
        if not isinstance(data, bytes | bytearray | memoryview):
            return Permanent(f"the stored run {run_id!r} vanished during a replay")
        try:
            return run_from_json(bytes(data))
        except ValueError as exc:
            return Permanent(f"the stored run document {run_id!r} cannot be read: {exc}")

    async def _commit(self, owner: OwnerScope, valid: ValidTransition) -> TransitionResult:
        transition_id, token = valid.transition_id, valid.claim_token
        expected, schedule = valid.expected_checkpoint_seq, valid.schedule
        checkpoint_type = valid.checkpoint_type
        assert expected is not None and schedule is not None  # a commit carries both
        key = _key(owner)
        run = valid.run
        if not _storable(key, run.id, transition_id, token):
            return Permanent("PostgreSQL text cannot hold NUL characters in ids")
        hashes = tuple(hashlib.sha256(c).digest() for c in valid.event_contents)
        schedule_name, wake_at = _schedule_args(schedule)
        args: _WriteArgs = (
            key,
            run.id,
            transition_id,
            valid.digest,
            run.graph_id,
            run.graph_hash,
            run.started_at,
            expected,
            token is not None,
            token,
            str(run.status),
            run.step,
            run.checkpoint_seq,
            run.event_seq,
            run.updated_at,
            run.finished_at,
            valid.run_json,
            str(checkpoint_type),
            schedule_name,
            wake_at,
            self._given(None),
            [e.seq for e in valid.events],
            list(valid.event_json),
            list(hashes),
        )
        if self._group is None:
            answer = await self._send_write(_COMMIT_STATEMENT, args)
        else:
            answer = await self._group.submit(args)
        if not isinstance(answer, tuple):
            return answer
        (
            outcome,
            digest,
            graph_id,
            graph_hash,
            started_at,
            checkpoint_seq,
            held,
            event_seq,
            stored,
            stored_json,
            announced,
        ) = answer
        if outcome == "written":
            self._announced(announced)
            return valid.run  # what was just stored, checked durable: no decode
        if outcome == "not_found":
            return NotFound()
        # Refused: nothing was written. Name the error with the shared rules, in order.
        recorded = {transition_id: str(digest)} if digest is not None else {}
        replay = check_replay(recorded, transition_id, valid.digest)
        if isinstance(replay, Replay):
            return self._stored(stored_json, run.id)
        if replay is not None:
            return replay
        identity = Run(  # the stored identity, from its columns (no document decode)
            id=run.id,
            graph_id=str(graph_id),
            graph_hash=str(graph_hash),
            status=run.status,
            started_at=utc(started_at),
            updated_at=utc(started_at),
        )
        broken = check_identity(identity, run)
        if broken is not None:
            return broken
        if int(checkpoint_seq) != expected or (token is not None and not held):
            return StaleCheckpoint()
        split = split_events(int(event_seq), valid)
        if not isinstance(split, tuple):
            return split
        _, old = split
        by_hash = attrs.evolve(valid, event_contents=hashes)
        found: list[bytes | None] = [None if s is None else bytes(s) for s in stored or []]
        for index in old:
            if not compare_event(found[index], by_hash, index):
                return EventConflict(valid.events[index].seq)
        return Permanent(
            f"docket-postgres refused a commit of run {run.id!r} that the shared rules accept "
            "(please report this bug)"
        )


def _summary(row: Row) -> RunSummary:
    key, run_id, graph_id, graph_hash, status, step, seq, started, updated, finished = row
    return RunSummary(
        id=str(run_id),
        tenant_id=str(key) or None,
        graph_id=str(graph_id),
        graph_hash=str(graph_hash),
        status=RunStatus(str(status)),
        step=int(step),
        checkpoint_seq=int(seq),
        started_at=utc(started),
        updated_at=utc(updated),
        finished_at=_opt_time(finished),
    )


# -- discovery ----------------------------------------------------------------------------------

_OPTIONS: Final = (
    "schema",
    "clock",
    "limits",
    "claim_policy",
    "statement_timeout",
    "pool_min_size",
    "pool_max_size",
    "pool_timeout",
    "notify",
    "prepare",
    "clock_resync",
    "commit_lanes",
)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _number(name: str, value: object, kind: type[int] | type[float]) -> int | float:
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if kind is int and not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return value


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise ValueError(f"{name} must be true or false, got {value!r}")


def _create(url: str, options: Mapping[str, object]) -> PostgresBackend:
    conninfo, from_url = parse_url(url)
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"postgresql:// does not take {', '.join(sorted(unknown))}")
    merged: dict[str, object] = {**from_url, **options}
    schema = merged.get("schema", DEFAULT_SCHEMA)
    policy = merged.get("claim_policy", "blind")
    if policy not in CLAIM_POLICIES:
        raise ValueError(f"claim_policy must be one of {CLAIM_POLICIES}, got {policy!r}")
    clock = merged.get("clock")
    if clock is not None and not callable(clock):
        raise TypeError("clock must be a callable returning an aware datetime")
    limits = merged.get("limits")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError("limits must be docket.contract.Limits")
    return PostgresBackend(
        conninfo,
        schema=cast(str, schema),
        clock=cast(Callable[[], datetime] | None, clock),
        limits=limits,
        claim_policy="fair" if policy == "fair" else "blind",
        statement_timeout=float(
            _number(
                "statement_timeout",
                merged.get("statement_timeout", DEFAULT_STATEMENT_TIMEOUT),
                float,
            )
        ),
        pool_min_size=int(
            _number("pool_min_size", merged.get("pool_min_size", DEFAULT_POOL_MIN), int)
        ),
        pool_max_size=int(
            _number("pool_max_size", merged.get("pool_max_size", DEFAULT_POOL_MAX), int)
        ),
        pool_timeout=float(
            _number("pool_timeout", merged.get("pool_timeout", DEFAULT_POOL_TIMEOUT), float)
        ),
        notify=_flag("notify", merged.get("notify", True)),
        prepare=_flag("prepare", merged.get("prepare", True)),
        clock_resync=float(
            _number("clock_resync", merged.get("clock_resync", DEFAULT_CLOCK_RESYNC), float)
        ),
        commit_lanes=int(
            _number("commit_lanes", merged.get("commit_lanes", DEFAULT_COMMIT_LANES), int)
        ),
    )


__all__ = ["CLAIM_POLICIES", "ClaimPolicyName", "PostgresBackend", "PruneResult"]
