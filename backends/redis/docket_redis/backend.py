"""``RedisBackend``: the contract on Redis (or Valkey), one Lua script per transition.

How it is put together (one module per concern):

* :mod:`docket_redis._engine` — what the stores share: the transport, the server clock,
  wake-ups, group commit, the registry of owner scopes.
* :mod:`docket_redis._graphs`, :mod:`docket_redis._runs` (with
  :mod:`docket_redis._claims`), :mod:`docket_redis._events`,
  :mod:`docket_redis._transitions` — one class per contract store, over the engine.
  Validation is in Python, decisions in Lua (see ``_transitions``).
* :mod:`docket_redis._schedules` — the schedule store; every schedule of the namespace
  under one hash tag (the exception to the rule below, see :mod:`docket_redis.keys`).
* :mod:`docket_redis._feed` — the live feed (``streams``): commit notices published by
  the transition scripts, emissions by clients, one subscriber per backend;
  :mod:`docket_redis._retention` — ``prune`` over the per-scope retention indexes;
  :mod:`docket_redis._queues` — named queues' configs and slot ledger (one hash tag).
  :mod:`docket_redis._admissions` — the queues' admission ledgers (the same hash tag).
* :mod:`docket_redis._schema` — the layout version; :mod:`docket_redis._persistence` —
  what each primary does to keep writes; :mod:`docket_redis._documents` — long run
  documents in pieces; :mod:`docket_redis._codec` — script answers and run summaries.
* **One hash tag per owner scope.** Every key of a tenant (or of the tenantless scope)
  carries ``{<prefix>:<owner>}``, so each script runs on one cluster slot (see
  :mod:`docket_redis.keys`). Tenants spread over the cluster; one tenant lives on one
  slot.

``RedisBackend`` builds the engine and the four stores, and keeps what belongs to the
bundle: capabilities, open/close, the clock, wake-ups and the layout version.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, cast

import attrs

from docket.contract import Capabilities, Feature, Limits
from docket.contract.registry import BackendFactory
from docket.contract.retention import PruneResult
from docket_redis import _retention, _schema
from docket_redis._admissions import RedisAdmissions
from docket_redis._documents import PIECE_BYTES, KnownDocuments, long_document
from docket_redis._engine import Clock, RedisEngine
from docket_redis._events import RedisEvents
from docket_redis._feed import RedisFeed
from docket_redis._graphs import RedisGraphs
from docket_redis._persistence import NodePersistence, read_persistence, warn_durability
from docket_redis._queues import RedisQueues
from docket_redis._runs import RedisRuns
from docket_redis._schedules import RedisSchedules
from docket_redis._schema import SCHEMA_VERSION
from docket_redis._transitions import RedisTransitions
from docket_redis.url import Target, parse_url


class RedisBackend:
    """The docket contract on a Redis server or a Redis Cluster.

    Build it with :meth:`from_url` (or ``docket.contract.registry.from_url``).
    ``prefix`` names the namespace all of its keys live under; ``clock`` replaces the
    server's ``TIME`` as the authoritative clock and exists **for test suites only**
    (the contract kit drives time with it); ``limits`` are the size limits it declares
    and enforces. ``clock_resync`` is how many seconds may pass between two reads of the
    server's ``TIME`` by ``sampled_now()``, the worker's clock (``0``: read it every time;
    ``now()`` always reads it); see
    :class:`docket.contract.clock.SampledClock`. ``commit_lanes`` is how many commit
    scripts (or pipelines of them) may be in flight before further commits are grouped
    into one pipeline (``0``: every commit is sent alone); see
    :class:`docket.contract.grouping.GroupCommit`.
    """

    def __init__(
        self,
        target: Target,
        *,
        clock: Clock | None = None,
        limits: Limits | None = None,
        prefix: str | None = None,
        driver_options: Mapping[str, Any] | None = None,
        clock_resync: float = 1.0,
        commit_lanes: int = 2,
    ) -> None:
        clock, limits = _checked(clock, limits)
        if prefix is not None:
            target = attrs.evolve(target, prefix=prefix)
        self._engine = RedisEngine(
            target,
            clock=clock,
            limits=limits or Limits(),
            driver_options=driver_options or {},
            clock_resync=_seconds(clock_resync),
            commit_lanes=_lanes(commit_lanes),
        )
        self._persistence: tuple[NodePersistence, ...] = ()
        self._graphs = RedisGraphs(self._engine)
        self._runs = RedisRuns(self._engine)
        self._events = RedisEvents(self._engine)
        self._transitions = RedisTransitions(self._engine)
        self._schedules = RedisSchedules(self._engine)
        self._feed = RedisFeed(self._engine)
        self._queues = RedisQueues(self._engine)
        self._admissions = RedisAdmissions(self._engine)

    @classmethod
    def from_url(cls, url: str, **options: object) -> RedisBackend:
        """Build (not open) a backend from a ``redis://`` URL and factory options."""
        return _create(url, options)

    def __repr__(self) -> str:
        engine = self._engine
        return f"RedisBackend({engine.target.describe()!r}, prefix={engine.ns.prefix!r})"

    @property
    def prefix(self) -> str:
        return self._engine.ns.prefix

    @property
    def cluster(self) -> bool:
        return self._engine.target.cluster

    @property
    def persistence(self) -> tuple[NodePersistence, ...]:
        """The persistence settings read from every primary at :meth:`open`."""
        return self._persistence

    # -- bundle -----------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        """Declared features; ``durable``/``durable.fsync`` reflect the server after open()."""
        features: set[str] = {
            Feature.NOTIFY,
            Feature.REOPEN_FAILED,
            Feature.CHILD_RUNS,
            Feature.TIMERS,
            Feature.MESSAGES,
            Feature.SCHEDULES,
            Feature.STREAMS,
            Feature.PRUNE,
            Feature.QUEUES,
            Feature.ADMISSION,
        }
        nodes = self._persistence
        if nodes and all(node.durable for node in nodes):
            features.add(Feature.DURABLE)
            if all(node.fsync for node in nodes):
                features.add(Feature.DURABLE_FSYNC)
        return Capabilities(limits=self._engine.limits, features=frozenset(features), name="redis")

    @property
    def graphs(self) -> RedisGraphs:
        return self._graphs

    @property
    def runs(self) -> RedisRuns:
        return self._runs

    @property
    def events(self) -> RedisEvents:
        return self._events

    @property
    def transitions(self) -> RedisTransitions:
        return self._transitions

    @property
    def schedules(self) -> RedisSchedules:
        """``ScheduleStore`` (``Feature.SCHEDULES``): every tenant's schedules under one
        hash tag (see :mod:`docket_redis._schedules`)."""
        return self._schedules

    @property
    def queues(self) -> RedisQueues:
        """``QueueStore`` (``Feature.QUEUES``): queue configs and the slot ledger under one
        hash tag (see :mod:`docket_redis._queues`)."""
        return self._queues

    @property
    def admissions(self) -> RedisAdmissions:
        """``AdmissionStore`` (``Feature.ADMISSION``): each queue's admission ledger beside
        its config, under the queue hash tag (see :mod:`docket_redis._admissions`)."""
        return self._admissions

    @property
    def feed(self) -> RedisFeed:
        """``EventFeed`` (``Feature.STREAMS``): commit notices and emissions over pub/sub
        (see :mod:`docket_redis._feed`)."""
        return self._feed

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, read the servers' persistence settings, subscribe to wake-ups.

        Idempotent. Logs a warning when the servers cannot promise durable commits.
        Raises :class:`~docket_redis.errors.StoreError` when Redis cannot be reached.
        """
        engine = self._engine
        if engine.opened:
            return
        await engine.transport.start()
        await _schema.check_schema(engine)
        self._persistence = await read_persistence(engine.transport)
        warn_durability(self._persistence)
        await engine.ensure_listener()
        engine.opened = True

    async def close(self) -> None:
        """Stop listening and close every connection; idempotent (and re-openable)."""
        await self._feed.close()
        await self._engine.close()

    async def schema_versions(self) -> tuple[int | None, int]:
        """``(stored, supported)`` layout versions; ``stored`` is ``None`` for a namespace
        no backend has opened yet. Reads only."""
        return await _schema.schema_versions(self._engine)

    async def migrate(self) -> tuple[int | None, int]:
        """Bring the namespace to the current layout; returns ``(from, to)`` (see
        :func:`docket_redis._schema.migrate`)."""
        return await _schema.migrate(self._engine)

    def schema_sql(self) -> str:
        """What :meth:`migrate` writes to an empty namespace (Redis has no DDL)."""
        return _schema.schema_sql(self._engine)

    # -- retention --------------------------------------------------------------------------

    async def prune(
        self,
        *,
        event_age: timedelta | None = None,
        run_age: timedelta | None = None,
        batch_size: int = 1000,
        now: datetime | None = None,
    ) -> PruneResult:
        """``Prunable``: one bounded pass deleting up to ``batch_size`` events written more
        than ``event_age`` ago (live runs' too) and up to ``batch_size`` runs finished more
        than ``run_age`` ago, with everything of theirs; ``None`` skips that kind. A row
        exactly at the boundary survives; ``event_seq`` never changes (readers see the
        hole). One pruner per namespace at a time: a concurrent pass returns
        ``ran=False``. See :mod:`docket_redis._retention`."""
        return await _retention.prune(
            self._engine, event_age=event_age, run_age=run_age, batch_size=batch_size, now=now
        )

    # -- clock and wake-ups -----------------------------------------------------------------

    async def now(self) -> datetime:
        return await self._engine.now()

    async def sampled_now(self) -> datetime:
        """The server's ``TIME`` without a round trip each time (``SampledNow``)."""
        return await self._engine.sampled_now()

    async def wait_for_work(self, timeout: float) -> bool:
        return await self._engine.wait_for_work(timeout)


# -- discovery ------------------------------------------------------------------------------

_OPTIONS = ("clock", "limits", "prefix", "clock_resync", "commit_lanes")


def _checked(clock: object, limits: object) -> tuple[Clock | None, Limits | None]:
    """The options ``from_url`` and the constructor both take, or a ``TypeError``."""
    if clock is not None and not callable(clock):
        raise TypeError("clock must be a callable returning an aware datetime")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError("limits must be docket.contract.Limits")
    return cast("Clock | None", clock), limits


def _lanes(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"commit_lanes must be a non-negative integer, got {value!r}")
    return value


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 86_400:
        raise ValueError(f"clock_resync must be 0..86400 seconds, got {value!r}")
    return float(value)


def _create(url: str, options: Mapping[str, object]) -> RedisBackend:
    target = parse_url(url)
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(
            f"{url.partition('://')[0]}:// does not take {', '.join(sorted(unknown))} "
            f"(options: {', '.join(_OPTIONS)})"
        )
    clock, limits = _checked(options.get("clock"), options.get("limits"))
    prefix = options.get("prefix")
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError("prefix must be a string")
    return RedisBackend(
        target,
        clock=clock,
        limits=limits,
        prefix=prefix,
        clock_resync=_seconds(options.get("clock_resync", 1.0)),
        commit_lanes=_lanes(options.get("commit_lanes", 2)),
    )


#: Entry point ``docket.backends: redis``.
factory = BackendFactory(
    name="redis",
    schemes=("redis", "rediss", "redis+cluster", "rediss+cluster"),
    create=_create,
    description="Redis or Valkey (>= 7), single server or Redis Cluster; one Lua script per "
    "transition",
)

# all but RedisBackend and factory live in private modules now: re-exported, so their
# import path from before the split still works
__all__ = [
    "PIECE_BYTES",
    "SCHEMA_VERSION",
    "KnownDocuments",
    "NodePersistence",
    "RedisBackend",
    "factory",
    "long_document",
]
