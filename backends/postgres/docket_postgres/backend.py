"""``PostgresBackend``: the docket contract on PostgreSQL, through psycopg 3.

How it is put together (one module per concern, all private):

* :mod:`docket_postgres._engine` — what the stores share: the connection pool and the
  LISTEN connection, opening (a schema written by a newer release is refused before
  anything is changed; an empty one is created), running one statement, the one clock
  (the database's), and wake-ups.
* one module per contract store, each one class over that engine:
  :mod:`~docket_postgres._graphs` (``GraphStore``), :mod:`~docket_postgres._runs`
  (``RunStore``: run reads and claims, and ``ClaimedRuns``),
  :mod:`~docket_postgres._events` (``EventStore``),
  :mod:`~docket_postgres._transitions` (``TransitionStore``, ``ChainedCommits``,
  ``ClaimedStarts``), whose writes are sent alone or grouped by
  :mod:`~docket_postgres._writes`, :mod:`~docket_postgres._schedules`
  (``ScheduleStore``), :mod:`~docket_postgres._queues` (``QueueStore``: queue configs
  and the slot ledger), :mod:`~docket_postgres._admissions` (``AdmissionStore``: the
  admission ledger) and :mod:`~docket_postgres.feed` (``EventFeed``, the live feed);
* :mod:`docket_postgres.schema` — the DDL, the PL/pgSQL functions and the migrations.

Every write is one call of a PL/pgSQL function in the store's schema: one round trip,
one transaction, all or nothing. This module holds the bundle: the arguments and their
checks, the four stores and the schedule store, capabilities, lifecycle, the clock and
wake-ups (the engine's), migrations, and the extras of this backend (``prune``, the
listener).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Final, Literal, cast

import psycopg

from docket.contract import Capabilities, Feature, Limits
from docket.contract.retention import PruneResult, require_prune_args
from docket_postgres._admissions import PostgresAdmissions
from docket_postgres._engine import INT4_MAX, Engine
from docket_postgres._events import PostgresEvents
from docket_postgres._graphs import PostgresGraphs
from docket_postgres._queues import PostgresQueues
from docket_postgres._runs import PostgresRuns
from docket_postgres._schedules import PostgresSchedules
from docket_postgres._transitions import PostgresTransitions
from docket_postgres.feed import PostgresFeed
from docket_postgres.notify import Listener
from docket_postgres.schema import SCHEMA_VERSION, apply_migrations, read_version, schema_sql
from docket_postgres.url import DEFAULT_SCHEMA, check_schema_name, describe, parse_url

ClaimPolicyName = Literal["blind", "fair"]
CLAIM_POLICIES: Final = ("blind", "fair")
DEFAULT_STATEMENT_TIMEOUT: Final = 30.0
DEFAULT_POOL_MIN: Final = 1
DEFAULT_POOL_MAX: Final = 10
DEFAULT_POOL_TIMEOUT: Final = 10.0
DEFAULT_CLOCK_RESYNC: Final = 1.0  # seconds between reads of the database clock
DEFAULT_COMMIT_LANES: Final = 2  # commit statements in flight before commits are grouped

_PRUNE = "SELECT * FROM @schema@.prune(%s::interval, %s::interval, %s::integer, %s::timestamptz)"


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
        self._claim_policy: ClaimPolicyName = claim_policy
        where = describe(conninfo, self._schema) if "://" in conninfo else self._schema
        self._where = where
        self._engine = Engine(
            conninfo,
            schema=self._schema,
            where=where,
            app_name=self.app_name,
            clock=clock,
            limits=limits or Limits(),
            fair=claim_policy == "fair",
            statement_timeout=float(statement_timeout),
            pool_min_size=pool_min_size,
            pool_max_size=pool_max_size,
            pool_timeout=float(pool_timeout) or DEFAULT_POOL_TIMEOUT,
            notify=bool(notify),
            prepare=bool(prepare),
            clock_resync=float(clock_resync),
            configure=self._configure,
        )
        self._graphs = PostgresGraphs(self._engine)
        self._runs = PostgresRuns(self._engine)
        self._events = PostgresEvents(self._engine)
        self._transitions = PostgresTransitions(self._engine, commit_lanes)
        self._schedules = PostgresSchedules(self._engine)
        self._feed = PostgresFeed(self._engine)
        self._queues = PostgresQueues(self._engine, self._runs)
        self._admissions = PostgresAdmissions(self._engine)

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
        return self._engine.listener

    # -- bundle -----------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        engine = self._engine
        features = {
            Feature.DURABLE,
            Feature.PRUNE,
            Feature.REOPEN_FAILED,
            Feature.CHILD_RUNS,
            Feature.TIMERS,
            Feature.MESSAGES,
            Feature.SCHEDULES,
            Feature.QUEUES,
            Feature.ADMISSION,
        }
        if engine.notify:  # the feed LISTENs too: not behind a transaction-pooling proxy
            features.add(Feature.NOTIFY)
            features.add(Feature.STREAMS)
        if engine.durable_fsync:
            features.add(Feature.DURABLE_FSYNC)
        if engine.fair:
            features.add(Feature.FAIR_CLAIMS)
        return Capabilities(limits=engine.limits, features=frozenset(features), name="postgres")

    @property
    def graphs(self) -> PostgresGraphs:
        return self._graphs

    @property
    def runs(self) -> PostgresRuns:
        return self._runs

    @property
    def events(self) -> PostgresEvents:
        return self._events

    @property
    def transitions(self) -> PostgresTransitions:
        return self._transitions

    @property
    def schedules(self) -> PostgresSchedules:
        """Cron schedules (``ScheduleStore``, ``Feature.SCHEDULES``)."""
        return self._schedules

    @property
    def feed(self) -> PostgresFeed:
        """The live feed (``EventFeed``, ``Feature.STREAMS``): commit notices and emissions."""
        return self._feed

    @property
    def queues(self) -> PostgresQueues:
        """Named queues' configs and slot ledger (``QueueStore``, ``Feature.QUEUES``)."""
        return self._queues

    @property
    def admissions(self) -> PostgresAdmissions:
        """The admission ledger of queues with admission limits (``AdmissionStore``,
        ``Feature.ADMISSION``)."""
        return self._admissions

    # -- migrations (docket.contract.Migratable) --------------------------------------------------

    def schema_sql(self) -> str:
        """The DDL that creates this backend's schema from nothing (for DBAs who run it)."""
        return schema_sql(self._schema)

    async def schema_versions(self) -> tuple[int | None, int]:
        """``(stored, supported)``; ``stored`` is ``None`` when the schema is empty."""
        conn = await self._engine.direct()
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
        conn = await self._engine.direct()
        try:
            return await apply_migrations(conn, self._schema, self._where, upgrade=True)
        finally:
            await conn.close()

    # -- lifecycle, clock, wake-ups ---------------------------------------------------------------

    async def open(self) -> None:
        """Check (or create) the schema, open the pool and the LISTEN connection.

        Idempotent. Raises :class:`~docket_postgres.errors.SchemaTooNew` (changing
        nothing) for a schema written by a newer release,
        :class:`~docket_postgres.errors.SchemaTooOld` for one that needs ``docket
        migrate``, and another :class:`~docket_postgres.errors.StoreError` when the
        database cannot be used (unreachable, wrong credentials, foreign schema).
        """
        await self._engine.open()

    async def close(self) -> None:
        """Close the LISTEN connections and the pool; idempotent."""
        await self._feed.close()
        await self._engine.close(flush=self._transitions.drain)

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Session settings of every pooled connection (a subclass may add its own)."""
        await self._engine.configure_session(conn)

    async def now(self) -> datetime:
        return await self._engine.now()

    async def sampled_now(self) -> datetime:
        """The database clock without a round trip each time (``SampledNow``)."""
        return await self._engine.sampled_now()

    async def wait_for_work(self, timeout: float) -> bool:
        return await self._engine.wait_for_work(timeout)

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
        require_prune_args(event_age, run_age, batch_size)
        engine = self._engine
        rows = await engine.fetch(
            engine.q(_PRUNE),
            (event_age, run_age, min(batch_size, INT4_MAX), engine.given(now)),
            write=True,
        )
        ran, events, runs = rows[0]
        return PruneResult(ran=bool(ran), events=int(events), runs=int(runs))


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
