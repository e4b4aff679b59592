"""``RedisBackend``: the contract on Redis (or Valkey), one Lua script per transition.

How it is put together:

* **Validation in Python, decisions in Lua.** Every transition runs the shared
  validator first and sends the canonical bytes it returned. The script then looks the
  run up, checks the replay, the immutable identity, the fences, the event sequence and
  re-sent event content — in the contract's order, every check before the first write,
  because a Lua error does not roll back. A refused transition answers a code; Python
  turns it into the contract's error with the shared helpers (``check_replay``,
  ``check_identity``, ``split_events``), so messages are the reference's.
* **One hash tag per owner scope.** Every key of a tenant (or of the tenantless scope)
  carries ``{<prefix>:<owner>}``, so each script runs on one cluster slot (see
  :mod:`docket_redis.keys`). Tenants spread over the cluster; one tenant lives on one
  slot.
* **claim_due across scopes.** Due work sits in each scope's ``ready`` and ``claimed``
  sorted sets. ``claim_due`` reads the oldest candidates of every registered scope
  (``claim_peek``), chooses with the shared ``select_claims`` exactly as the reference
  does, then leases the chosen runs with one atomic ``claim_take`` script per scope,
  which re-checks each candidate. If a competing claimer took one in between, the
  choice is made again for the remaining demand (a few rounds at most).
* **One clock.** The Redis server's ``TIME``, read inside each script, stamps and
  compares every operational time — the clock of the primary holding the run's slot.
  An explicit ``now`` (the contract's testing seam) or a ``clock=`` given at creation
  (for test suites only) is sent in ``ARGV`` instead.
* **Wake-ups.** Scripts that make work due ``PUBLISH`` on ``<prefix>:wake``; every open
  backend keeps one subscription and wakes its ``wait_for_work`` callers. Polling stays
  the fallback (a lost subscription is re-established, and waiters are woken then).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import attrs
import orjson
from redis.asyncio import Redis

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
    InvalidTransition,
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
from docket.contract.proposals import ClaimClass
from docket.contract.queries import (
    check_abandon_policy,
    check_claim_policy,
    check_event_query,
    check_graph_query,
    check_run_query,
    check_seq,
    select_claims,
)
from docket.contract.registry import BackendFactory
from docket.contract.stored import decode_event, decode_graph
from docket.contract.validate import (
    ValidationResult,
    ValidTransition,
    check_identity,
    check_replay,
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
)
from docket.values import JSONDict, from_micros, to_micros, utc
from docket_redis.errors import SchemaTooNew, SchemaTooOld, StoreError, corrupt
from docket_redis.keys import (
    STATUS_ORDER,
    Namespace,
    ScopeKeys,
    index_member,
    member_ident,
    member_micros,
    owner_part,
    time_key,
)
from docket_redis.transport import (
    ClusterTransport,
    Script,
    SingleTransport,
    Transport,
    load_scripts,
)
from docket_redis.url import Target, parse_url

logger = logging.getLogger("docket_redis")

Clock = Callable[[], datetime]
Candidate = tuple[datetime, str, str | None]

#: The version of the key layout this release reads and writes.
SCHEMA_VERSION = 2  # 2: long run documents in pieces (lua/doc_pieces.lua)
#: How many times claim_due chooses again after losing candidates to a competitor.
CLAIM_ROUNDS = 4
#: Most index entries one list_runs script call looks at before answering.
LIST_BUDGET = 500
#: How long open() waits for the wake-up subscription to be confirmed.
SUBSCRIBE_TIMEOUT = 10.0


#: Bytes per stored piece of a run document; ``DOC_PIECE`` in lua/doc_pieces.lua.
PIECE_BYTES: Final = 8192


def long_document(doc: bytes) -> list[bytes] | None:
    """``doc`` cut into stored pieces, or ``None`` when it fits in one (sent whole)."""
    if len(doc) <= PIECE_BYTES:
        return None
    return [doc[i : i + PIECE_BYTES] for i in range(0, len(doc), PIECE_BYTES)]


class KnownDocuments:
    """The long run documents this backend last stored or read, each with its checkpoint,
    so that the next commit of that run sends only the pieces that changed (an append to
    a long list: the last piece or two instead of the whole document).

    Only a transition writes a document and each checkpoint has exactly one, so the
    document at the commit's fenced checkpoint is the one stored whenever the fence
    holds; ``commit.lua`` also checks the stored number of pieces, and answers
    ``REPATCH`` (the document is then sent whole) when it differs. Bounded by entries
    and bytes: the oldest go first. Documents come cut by :func:`long_document`, once
    per commit for both the patch and what is remembered."""

    def __init__(self, limit: int = 256, budget: int = 64 << 20) -> None:
        self._limit = limit
        self._budget = budget
        self._bytes = 0
        self._known: dict[tuple[str, str], tuple[int, list[bytes], int]] = {}

    def remember(
        self, part: str, run_id: str, checkpoint_seq: int, pieces: list[bytes] | None
    ) -> None:
        self.forget(part, run_id)
        if pieces is None:
            return  # one piece: sent whole anyway
        size = sum(map(len, pieces))
        self._known[(part, run_id)] = (checkpoint_seq, pieces, size)
        self._bytes += size
        while self._known and (len(self._known) > self._limit or self._bytes > self._budget):
            self._bytes -= self._known.pop(next(iter(self._known)))[2]

    def forget(self, part: str, run_id: str) -> None:
        known = self._known.pop((part, run_id), None)
        if known is not None:
            self._bytes -= known[2]

    def patch(
        self, part: str, run_id: str, expected: int, pieces: list[bytes] | None
    ) -> list[str | bytes]:
        """``commit.lua``'s patch arguments for a document, or ``[]`` to send it whole."""
        known = self._known.get((part, run_id))
        if known is None or known[0] != expected or pieces is None:
            return []
        base = known[1]
        changed = [
            (i, piece) for i, piece in enumerate(pieces, 1) if i > len(base) or base[i - 1] != piece
        ]
        args: list[str | bytes] = [str(len(base)), str(len(pieces)), str(len(changed))]
        for i, piece in changed:
            args += [str(i), piece]
        return args


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    raise TypeError(f"expected a string reply, got {value!r}")


def _code(reply: Any) -> str:
    if not isinstance(reply, list) or not reply:
        raise corrupt(f"unexpected script answer {reply!r}")
    return _text(reply[0])


def _opt_time(value: Any) -> datetime | None:
    return None if value is None else from_micros(int(_text(value)))


def _check_run_id(run_id: object) -> str:
    if not isinstance(run_id, str):
        raise TypeError(f"run_id must be a string, got {type(run_id).__name__}")
    return run_id


def _schedule_args(schedule: Schedule) -> tuple[str, str]:
    """``(kind, wake us)`` as ``commit.lua`` expects them."""
    if isinstance(schedule, RetainClaim):
        return "retain", ""
    match schedule.wake:
        case Immediate():
            return "immediate", ""
        case At(wake_at=moment):
            return "at", str(to_micros(moment))
        case External() | Terminal():
            return "none", ""
    raise AssertionError(f"unvalidated schedule {schedule!r}")  # the validator rejects it


def _summary(run: Run) -> str:
    """The summary list_runs returns (index fields only; never the run document)."""
    # orjson: the same compact text json.dumps(separators=(",", ":"), ensure_ascii=False)
    # gives, at a fraction of the cost (once per commit)
    return orjson.dumps(
        {
            "g": run.graph_id,
            "h": run.graph_hash,
            "s": run.status.value,
            "n": run.step,
            "c": run.checkpoint_seq,
            "a": to_micros(run.started_at),
            "u": to_micros(run.updated_at),
            "f": None if run.finished_at is None else to_micros(run.finished_at),
        }
    ).decode()


def _event_args(valid: ValidTransition, indices: Sequence[int] | None = None) -> list[str | bytes]:
    out: list[str | bytes] = []
    for index in range(len(valid.events)) if indices is None else indices:
        out.append(str(valid.events[index].seq))
        out.append(valid.event_json[index])
        out.append(hashlib.sha256(valid.event_contents[index]).hexdigest())
    return out


def _decode_run(data: Any) -> Run:
    try:
        return run_from_json(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise corrupt(f"a stored run document cannot be read: {exc}") from exc


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@attrs.frozen(kw_only=True)
class NodePersistence:
    """What one Redis primary does to keep writes (``CONFIG GET``)."""

    node: str
    appendonly: bool | None  # None: the server would not say
    appendfsync: str | None
    save: str | None
    eviction: str | None = None  # maxmemory-policy
    error: str | None = None

    @property
    def durable(self) -> bool:
        """Commits survive a crash of the Redis process (AOF on)."""
        return self.appendonly is True

    @property
    def fsync(self) -> bool:
        """Commits survive a crash of the machine too (AOF fsynced before each reply)."""
        return self.durable and self.appendfsync == "always"


@attrs.define
class _Peek:
    scope: ScopeKeys
    ready: list[Candidate]
    expired: list[Candidate]


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
        if clock is not None and not callable(clock):
            raise TypeError("clock must be a callable returning an aware datetime")
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError("limits must be docket.contract.Limits")
        if prefix is not None:
            target = attrs.evolve(target, prefix=prefix)
        self._target = target
        self._ns = Namespace(target.prefix)
        self._clock = clock
        self._limits = limits or Limits()
        self._driver_options = dict(driver_options or {})
        self._scripts = load_scripts()
        self._transport = self._new_transport()
        self._registered: set[str] = set()
        self._persistence: tuple[NodePersistence, ...] = ()
        self._waiters: set[asyncio.Future[None]] = set()
        self._listener: asyncio.Task[None] | None = None
        self._subscribed: asyncio.Event | None = None
        self._open = False
        self._claimed_runs = ClaimedRunDocuments()
        self._documents = KnownDocuments()
        self._server_clock = SampledClock(self._read_clock, resync=_seconds(clock_resync))
        lanes = _lanes(commit_lanes)
        # commits and run starts, each grouped apart (0 lanes: every call is sent alone)
        self._group = self._grouping("commit", lanes)
        self._init_group = self._grouping("initialize", lanes)

    @classmethod
    def from_url(cls, url: str, **options: object) -> RedisBackend:
        """Build (not open) a backend from a ``redis://`` URL and factory options."""
        return _create(url, options)

    def __repr__(self) -> str:
        return f"RedisBackend({self._target.describe()!r}, prefix={self._ns.prefix!r})"

    def _new_transport(self) -> Transport:
        # RESP2: the replies this module parses have one shape across driver versions
        options = {"socket_connect_timeout": 10.0, "protocol": 2, **self._driver_options}
        if self._target.cluster:
            return ClusterTransport(self._target.url, options)
        return SingleTransport(self._target.url, options)

    @property
    def prefix(self) -> str:
        return self._ns.prefix

    @property
    def cluster(self) -> bool:
        return self._target.cluster

    @property
    def persistence(self) -> tuple[NodePersistence, ...]:
        """The persistence settings read from every primary at :meth:`open`."""
        return self._persistence

    # -- bundle -----------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        """Declared features; ``durable``/``durable.fsync`` reflect the server after open()."""
        features: set[str] = {Feature.NOTIFY, Feature.REOPEN_FAILED}
        nodes = self._persistence
        if nodes and all(node.durable for node in nodes):
            features.add(Feature.DURABLE)
            if all(node.fsync for node in nodes):
                features.add(Feature.DURABLE_FSYNC)
        return Capabilities(limits=self._limits, features=frozenset(features), name="redis")

    @property
    def graphs(self) -> RedisBackend:
        return self

    @property
    def runs(self) -> RedisBackend:
        return self

    @property
    def events(self) -> RedisBackend:
        return self

    @property
    def transitions(self) -> RedisBackend:
        return self

    # -- lifecycle --------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, read the servers' persistence settings, subscribe to wake-ups.

        Idempotent. Logs a warning when the servers cannot promise durable commits.
        Raises :class:`~docket_redis.errors.StoreError` when Redis cannot be reached.
        """
        if self._open:
            return
        await self._transport.start()
        await self._check_schema()
        self._persistence = await self._read_persistence()
        self._warn_durability()
        await self._ensure_listener()
        self._open = True

    async def _check_schema(self) -> None:
        """Record the layout version in a new namespace; refuse a newer one untouched."""
        key = self._ns.schema
        stored = await self._transport.command(key, "GET", key)
        if stored is None:
            await self._transport.command(key, "SET", key, str(SCHEMA_VERSION), "NX")
            stored = await self._transport.command(key, "GET", key)
        try:
            found = int(_text(stored))
        except (TypeError, ValueError) as exc:
            raise corrupt(f"{key} holds {stored!r}, not a layout version") from exc
        if found > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"{self._target.describe()} prefix {self._ns.prefix!r}", found, SCHEMA_VERSION
            )
        if found < SCHEMA_VERSION:
            raise SchemaTooOld(
                f"{self._target.describe()} prefix {self._ns.prefix!r}", found, SCHEMA_VERSION
            )

    async def schema_versions(self) -> tuple[int | None, int]:
        """``(stored, supported)`` layout versions; ``stored`` is ``None`` for a namespace
        no backend has opened yet. Reads only."""
        stored = await self._transport.command(self._ns.schema, "GET", self._ns.schema)
        return (None if stored is None else int(_text(stored))), SCHEMA_VERSION

    async def migrate(self) -> tuple[int | None, int]:
        """Bring the namespace to the current layout; returns ``(from, to)``.

        Records the layout in a new namespace and refuses (unchanged) one written by a
        newer release. Layout 2 keeps long run documents in pieces; a layout-1 document
        (whole in ``doc``) reads as one piece, so 1 → 2 rewrites no data: it records the
        new version, after which layout-1 code refuses the namespace. Stop workers of
        the old release first: one still running would write whole documents beside
        pieces it does not know of.
        """
        found, current = await self.schema_versions()
        key = self._ns.schema
        if found is not None and found < SCHEMA_VERSION:
            # Only from the version just read: a concurrent migrate or a newer release
            # leaves the key as it found it.
            await self._eval("set_layout", [key], [str(found), str(SCHEMA_VERSION)])
        await self._check_schema()
        return found, current

    def schema_sql(self) -> str:
        """What :meth:`migrate` writes to an empty namespace (Redis has no DDL)."""
        return f"SET {self._ns.schema} {SCHEMA_VERSION} NX"

    async def close(self) -> None:
        """Stop listening and close every connection; idempotent (and re-openable)."""
        listener, self._listener = self._listener, None
        self._subscribed = None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await listener
        for group in (self._group, self._init_group):
            if group is not None:
                await group.drain()  # writes in flight get their answers first
        transport, self._transport = self._transport, self._new_transport()
        self._open = False
        with contextlib.suppress(Exception):
            await transport.close()
        self._wake_all()  # nobody is left to announce work: let waiters go and poll

    async def _read_persistence(self) -> tuple[NodePersistence, ...]:
        replies = await self._transport.each_primary(
            "CONFIG", "GET", "appendonly", "appendfsync", "save", "maxmemory-policy"
        )
        out: list[NodePersistence] = []
        for node, reply in replies:
            if isinstance(reply, StoreError):
                out.append(
                    NodePersistence(
                        node=node,
                        appendonly=None,
                        appendfsync=None,
                        save=None,
                        error=reply.outcome.reason,
                    )
                )
                continue
            if isinstance(reply, dict):
                settings = {_text(k): _text(v) for k, v in reply.items()}
            else:
                flat = [_text(item) for item in reply] if isinstance(reply, list) else []
                settings = dict(zip(flat[::2], flat[1::2]))
            appendonly = settings.get("appendonly")
            out.append(
                NodePersistence(
                    node=node,
                    appendonly=None if appendonly is None else appendonly == "yes",
                    appendfsync=settings.get("appendfsync"),
                    save=settings.get("save"),
                    eviction=settings.get("maxmemory-policy"),
                )
            )
        return tuple(out)

    def _warn_durability(self) -> None:
        for node in self._persistence:
            if node.eviction not in (None, "noeviction"):
                logger.warning(
                    "docket-redis: %s has maxmemory-policy %s: under memory pressure Redis "
                    "may evict docket's keys and corrupt runs; use noeviction",
                    node.node,
                    node.eviction,
                )
            if node.appendonly is None:
                logger.warning(
                    "docket-redis: cannot read the persistence settings of %s (%s); "
                    "assuming commits are not durable",
                    node.node,
                    node.error or "CONFIG GET answered nothing",
                )
            elif not node.durable:
                logger.warning(
                    "docket-redis: %s runs without AOF (appendonly no%s): acknowledged "
                    "commits are lost if Redis stops; set appendonly yes and appendfsync "
                    "always for durable commits",
                    node.node,
                    f", save {node.save!r}" if node.save else ", no snapshots",
                )
            elif not node.fsync:
                logger.info(
                    "docket-redis: %s has AOF with appendfsync %s: commits survive a "
                    "Redis crash, but a machine crash may lose about the last second",
                    node.node,
                    node.appendfsync,
                )

    # -- clock ------------------------------------------------------------------------------

    async def now(self) -> datetime:
        if self._clock is not None:
            return utc(self._clock())
        return await self._read_clock()

    async def sampled_now(self) -> datetime:
        """The server's ``TIME`` without a round trip each time (``SampledNow``)."""
        if self._clock is not None:
            return utc(self._clock())
        return await self._server_clock.now()

    async def _read_clock(self) -> datetime:
        return await self._server_time(self._ns.registry)

    async def _server_time(self, routing_key: str) -> datetime:
        reply = await self._transport.command(routing_key, "TIME")
        seconds, micros = (int(_text(part)) for part in reply)
        return from_micros(seconds * 1_000_000 + micros)

    def _now_arg(self, given: datetime | None) -> str:
        """What a script gets as ``now``: explicit, the test clock, or '' for ``TIME``."""
        if given is not None:
            return str(to_micros(utc(given)))
        if self._clock is not None:
            return str(to_micros(utc(self._clock())))
        return ""

    # -- wake-ups ---------------------------------------------------------------------------

    async def wait_for_work(self, timeout: float) -> bool:
        await self._ensure_listener()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiters.add(future)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._waiters.discard(future)

    def _wake_all(self) -> None:
        for future in list(self._waiters):
            _resolve(future)

    async def _ensure_listener(self) -> None:
        if self._listener is None or self._listener.done():
            self._subscribed = asyncio.Event()
            self._listener = asyncio.create_task(
                self._listen(self._subscribed), name=f"docket-redis-wake:{self._ns.prefix}"
            )
        subscribed = self._subscribed
        assert subscribed is not None
        if not subscribed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(subscribed.wait(), SUBSCRIBE_TIMEOUT)

    async def _listen(self, subscribed: asyncio.Event) -> None:
        """Keep one subscription to the wake channel; wake waiters on each message."""
        delay = 0.05
        first = True
        while True:
            client: Redis = self._transport.subscriber()
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(self._ns.channel)
                async for message in pubsub.listen():
                    kind = message.get("type")
                    if kind in ("subscribe", b"subscribe"):
                        subscribed.set()
                        delay = 0.05
                        if not first:  # announcements may have been missed meanwhile
                            self._wake_all()
                        first = False
                    elif kind in ("message", b"message"):
                        self._wake_all()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.debug("docket-redis: wake-up subscription lost: %r", exc)
            finally:
                subscribed.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
                with contextlib.suppress(Exception):
                    await client.aclose()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    # -- plumbing ---------------------------------------------------------------------------

    async def _eval(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        script: Script = self._scripts[name]
        return await self._transport.eval(script, keys, args)

    def _grouping(self, name: str, lanes: int) -> GroupCommit[_Call, Any] | None:
        """Group commit for script ``name``: calls of several runs, pipelined per node."""
        if not lanes:
            return None

        async def send(calls: list[_Call]) -> list[Any]:
            if len(calls) == 1:
                try:
                    return [await self._eval(name, *calls[0])]
                except StoreError as exc:
                    return [exc]
            return await self._transport.eval_many(self._scripts[name], calls)

        return GroupCommit(send, lanes=lanes, limit=32)

    async def _grouped(self, group: GroupCommit[_Call, Any] | None, name: str, call: _Call) -> Any:
        """Run script ``name`` for ``call``, through ``group`` when grouping is on."""
        if group is None:
            return await self._eval(name, *call)
        reply = await group.submit(call)
        if isinstance(reply, StoreError):
            raise reply
        return reply

    async def _register(self, scope: ScopeKeys, *, order: bool) -> int:
        """Record the scope (claims and SYSTEM listings visit it); maybe take an order."""
        if not order and scope.part in self._registered:
            return 0
        reply = await self._eval(
            "register",
            [self._ns.registry, self._ns.order],
            [scope.part, "1" if order else "0"],
        )
        self._registered.add(scope.part)
        return int(reply)

    async def _scopes(self) -> list[ScopeKeys]:
        parts = await self._transport.command(self._ns.registry, "SMEMBERS", self._ns.registry)
        return [self._ns.scope_of_part(_text(part)) for part in sorted(parts)]

    # -- graphs -----------------------------------------------------------------------------

    async def save_graph(
        self, owner: OwnerScope, ref: GraphRef, document: JSONDict
    ) -> GraphVersion | InvalidGraph | GraphContentConflict | TooLarge | Retryable | Permanent:
        checked = validate_graph_save(owner, ref, document, self._limits)
        if not isinstance(checked, bytes):
            return checked
        scope = self._ns.scope(owner)
        now = self._now_arg(None)
        try:
            await self._register(scope, order=False)
            reply = await self._eval(
                "save_graph",
                [scope.graph(ref.graph_id), scope.versions(ref.graph_id)],
                [ref.graph_hash, checked, now, time_key(int(now)) if now else ""],
            )
        except StoreError as exc:
            return exc.outcome
        if _code(reply) == "CONFLICT":
            return GraphContentConflict()
        return GraphVersion(
            ref=GraphRef(ref.graph_id, ref.graph_hash),
            published_at=from_micros(int(_text(reply[1]))),
        )

    async def fetch_graph(
        self, owner: OwnerScope, ref: GraphRef
    ) -> JSONDict | NotFound | CorruptGraph:
        scope = self._ns.scope(require_owner(owner))
        if not isinstance(ref.graph_id, str) or not isinstance(ref.graph_hash, str):
            return NotFound("graph")
        data = await self._transport.command(
            scope.graph(ref.graph_id), "HGET", scope.graph(ref.graph_id), f"d:{ref.graph_hash}"
        )
        if data is None:
            return NotFound("graph")
        return decode_graph(ref, data)

    async def fetch_latest_graph_ref(self, owner: OwnerScope, graph_id: str) -> GraphRef | NotFound:
        scope = self._ns.scope(require_owner(owner))
        if not isinstance(graph_id, str):
            return NotFound("graph")
        key = scope.versions(graph_id)
        found = await self._transport.command(
            key, "ZRANGE", key, "+", "-", "BYLEX", "REV", "LIMIT", "0", "1"
        )
        if not found:
            return NotFound("graph")
        return GraphRef(graph_id, member_ident(found[0]))

    async def list_graph_versions(
        self, owner: OwnerScope, graph_id: str, query: GraphListQuery
    ) -> GraphVersionPage:
        check_graph_query(query)
        scope = self._ns.scope(require_owner(owner))
        if not isinstance(graph_id, str):
            return GraphVersionPage.from_candidates([], query.limit, query.before)
        bound = "+"
        if query.before is not None:
            cursor = query.before
            bound = "(" + index_member(to_micros(cursor.published_at), cursor.graph_hash)
        key = scope.versions(graph_id)
        found = await self._transport.command(
            key, "ZRANGE", key, bound, "-", "BYLEX", "REV", "LIMIT", "0", str(query.limit + 1)
        )
        versions = [
            GraphVersion(
                ref=GraphRef(graph_id, member_ident(member)),
                published_at=from_micros(member_micros(member)),
            )
            for member in found
        ]
        return GraphVersionPage.from_candidates(versions, query.limit, query.before)

    # -- run reads --------------------------------------------------------------------------

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        scope = self._ns.scope(require_owner(owner))
        key = scope.run(_check_run_id(run_id))
        data = (await self._eval("read_run", [key], []))[0]
        return NotFound() if data is None else _decode_run(data)

    async def inspect_run(self, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
        scope = self._ns.scope(require_owner(owner))
        key = scope.run(_check_run_id(run_id))
        row = await self._eval("read_run", [key], [])
        data, wake, claimed, attempts, abandons, poisoned, reason, checkpoint = row
        if data is None:
            return NotFound()
        try:
            return RunInfo(
                run=_decode_run(data),
                tenant_id=scope.tenant_id,
                wake_at=_opt_time(wake),
                claimed_at=_opt_time(claimed),
                claim_attempts=int(_text(attempts)),
                claim_abandons=int(_text(abandons)),
                poisoned_at=_opt_time(poisoned),
                poison_reason=None if reason is None else _text(reason),
                latest_checkpoint_type=CheckpointType(_text(checkpoint)),
            )
        except (TypeError, ValueError) as exc:
            raise corrupt(f"run {run_id!r} has unreadable operational state: {exc}") from exc

    async def list_runs(self, scope: Scope, query: RunListQuery) -> RunPage:
        require_scope(scope)
        check_run_query(query)
        if query.graph_id == "" or query.graph_hash == "":
            return RunPage.from_candidates([], query.limit, query.before)  # no such graph
        if isinstance(scope, System):
            scopes = await self._scopes()
        else:
            scopes = [self._ns.scope(scope)]
        want = query.limit + 1
        found: list[tuple[int, RunSummary]] = []
        for keys in scopes:
            found.extend(await self._list_scope(keys, query, want))
        found.sort(key=lambda item: item[0])  # listing order: ties keep creation order
        found.sort(key=lambda item: (to_micros(item[1].started_at), item[1].id), reverse=True)
        return RunPage.from_candidates([s for _, s in found[:want]], query.limit, query.before)

    async def _list_scope(
        self, keys: ScopeKeys, query: RunListQuery, want: int
    ) -> list[tuple[int, RunSummary]]:
        if query.graph_hash is not None:
            drivers = [keys.by_hash(query.graph_hash)]
        elif query.graph_id is not None:
            drivers = [keys.by_graph(query.graph_id)]
        elif query.statuses is not None:
            drivers = [keys.by_status(status) for status in sorted(query.statuses)]
        else:
            drivers = [keys.index]
        start = "+"
        if query.before is not None:
            start = "(" + index_member(to_micros(query.before.started_at), query.before.run_id)
        statuses = ",".join(sorted(s.value for s in query.statuses or ()))
        out: list[tuple[int, RunSummary]] = []
        for driver in drivers:
            bound = start
            matched = 0
            while matched < want:
                reply = await self._eval(
                    "list_runs",
                    [driver, keys.summaries],
                    [
                        bound,
                        str(want - matched),
                        str(LIST_BUDGET),
                        query.graph_id or "",
                        query.graph_hash or "",
                        statuses,
                    ],
                )
                state, bound, items = _text(reply[0]), _text(reply[1]), reply[2]
                for run_id, summary in zip(items[::2], items[1::2]):
                    out.append(self._summary(keys, _text(run_id), summary))
                    matched += 1
                if state == "DONE":
                    break
        return out

    @staticmethod
    def _summary(keys: ScopeKeys, run_id: str, stored: bytes) -> tuple[int, RunSummary]:
        try:
            order, _, body = stored.partition(b"|")
            fields = json.loads(body)
            finished = fields["f"]
            return int(order), RunSummary(
                id=run_id,
                tenant_id=keys.tenant_id,
                graph_id=str(fields["g"]),
                graph_hash=str(fields["h"]),
                status=RunStatus(fields["s"]),
                step=int(fields["n"]),
                checkpoint_seq=int(fields["c"]),
                started_at=from_micros(int(fields["a"])),
                updated_at=from_micros(int(fields["u"])),
                finished_at=None if finished is None else from_micros(int(finished)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise corrupt(f"the summary of run {run_id!r} cannot be read: {exc}") from exc

    # -- events -----------------------------------------------------------------------------

    async def fetch_event(
        self, owner: OwnerScope, run_id: str, seq: int
    ) -> Event | NotFound | CorruptEventRow:
        scope = self._ns.scope(require_owner(owner))
        check_seq(seq)
        key = scope.events(_check_run_id(run_id))
        data = await self._transport.command(key, "HGET", key, str(seq))
        return NotFound("event") if data is None else decode_event(run_id, seq, data)

    async def fetch_latest_event(
        self, owner: OwnerScope, run_id: str
    ) -> Event | NotFound | CorruptEventRow | None:
        scope = self._ns.scope(require_owner(owner))
        _check_run_id(run_id)
        reply = await self._eval(
            "latest_event",
            [scope.run(run_id), scope.event_index(run_id), scope.events(run_id)],
            [],
        )
        code = _code(reply)
        if code == "NOT_FOUND":
            return NotFound()
        if code == "NONE":
            return None
        seq = int(_text(reply[1]))
        return decode_event(run_id, seq, reply[2])

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        scope = self._ns.scope(require_owner(owner))
        check_event_query(query)
        _check_run_id(run_id)
        reply = await self._eval(
            "list_events",
            [scope.run(run_id), scope.event_index(run_id), scope.events(run_id)],
            [str(query.after_seq), str(query.limit)],
        )
        if _code(reply) == "NOT_FOUND":
            return NotFound()
        latest, oldest, newest = (_text(part) for part in reply[1:4])
        events: list[Event] = []
        rest = reply[4:]
        for seq, data in zip(rest[::2], rest[1::2]):
            decoded = decode_event(run_id, int(_text(seq)), data)
            if isinstance(decoded, CorruptEventRow):
                return decoded
            events.append(decoded)
        return EventPage.from_candidates(
            events,
            limit=query.limit,
            after_seq=query.after_seq,
            oldest_available_seq=int(oldest) if oldest else None,
            latest_available_seq=int(newest) if newest else None,
            latest_seq=int(latest),
        )

    # -- claims -----------------------------------------------------------------------------

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        check_claim_policy(policy)
        now = self._now_arg(policy.now)
        ttl = str(policy.orphan_ttl // timedelta(microseconds=1))
        leases: list[Lease] = []
        poisoned: list[PoisonedClaim] = []
        taken: set[tuple[str, str]] = set()
        demand = policy.limit
        try:
            scopes = await self._scopes()
            for _ in range(CLAIM_ROUNDS):
                peeks = await asyncio.gather(
                    *(self._peek(keys, now, ttl, demand, taken) for keys in scopes)
                )
                lost = await self._take(peeks, policy, now, ttl, demand, leases, poisoned, taken)
                demand = policy.limit - len(leases) - len(poisoned)
                if not lost or demand <= 0:
                    break
        except StoreError as exc:
            if not leases and not poisoned:
                return exc.outcome
            # some runs were already leased: hand them out rather than strand them
        return ClaimBatch(tuple(leases), tuple(poisoned))

    async def _peek(
        self, keys: ScopeKeys, now: str, ttl: str, demand: int, taken: set[tuple[str, str]]
    ) -> _Peek:
        reply = await self._eval("claim_peek", [keys.ready, keys.claimed], [now, ttl, str(demand)])
        tenant = keys.tenant_id

        def candidates(flat: list[Any]) -> list[Candidate]:
            out: list[Candidate] = []
            for member, score in zip(flat[::2], flat[1::2]):
                run_id = _text(member)
                if (keys.part, run_id) not in taken:
                    out.append((from_micros(int(float(_text(score)))), run_id, tenant))
            return out

        return _Peek(scope=keys, ready=candidates(reply[1]), expired=candidates(reply[2]))

    async def _take(
        self,
        peeks: Sequence[_Peek],
        policy: ClaimPolicy,
        now: str,
        ttl: str,
        demand: int,
        leases: list[Lease],
        poisoned: list[PoisonedClaim],
        taken: set[tuple[str, str]],
    ) -> bool:
        """Lease the chosen candidates; ``True`` when a competitor took some of them."""
        ready = [c for peek in peeks for c in peek.ready]
        expired = [c for peek in peeks for c in peek.expired]
        chosen = select_claims(ready, expired, demand, policy.preference)
        if not chosen:
            return False
        ready_ids = {(c[1], c[2]) for c in ready}
        scope_of = {
            (c[1], c[2]): peek.scope for peek in peeks for c in (*peek.ready, *peek.expired)
        }
        groups: dict[str, list[tuple[Candidate, ClaimClass]]] = {}
        for candidate in chosen:
            ident = (candidate[1], candidate[2])
            cls = ClaimClass.READY if ident in ready_ids else ClaimClass.EXPIRED
            groups.setdefault(scope_of[ident].part, []).append((candidate, cls))
        outcomes: dict[tuple[str, str | None], Lease | PoisonedClaim] = {}
        for part, members in groups.items():
            keys = self._ns.scope_of_part(part)
            args: list[str | bytes] = [
                now,
                ttl,
                str(policy.max_claim_attempts),
                POISON_MAX_ATTEMPTS,
            ]
            for candidate, cls in members:
                args += [candidate[1], cls.value, secrets.token_urlsafe(18)]
            reply = await self._eval(
                "claim_take",
                [keys.ready, keys.claimed, *(keys.run(c[1]) for c, _ in members)],
                args,
            )
            if _code(reply) != "OK":
                raise corrupt(f"claim_take: {reply!r}")
            moment = from_micros(int(_text(reply[1])))
            owner = owner_scope(keys.tenant_id)
            for item in reply[2:]:
                run_id, what = _text(item[0]), _text(item[1])
                if what == "leased":
                    token, attempt, graph_id, graph_hash, seq = (_text(x) for x in item[2:7])
                    self._keep_claimed_run(token, keys.part, run_id, item[7])
                    if isinstance(item[7], bytes):
                        pieces = long_document(item[7])
                        self._documents.remember(keys.part, run_id, int(seq), pieces)
                    outcomes[(run_id, keys.tenant_id)] = Lease(
                        run_id=run_id,
                        owner=owner,
                        graph_id=graph_id,
                        graph_hash=graph_hash,
                        checkpoint_seq=int(seq),
                        claim_token=token,
                        claimed_at=moment,
                        claim_attempt=int(attempt),
                        orphan_ttl=policy.orphan_ttl,
                    )
                elif what == "poisoned":
                    outcomes[(run_id, keys.tenant_id)] = PoisonedClaim(
                        run_id=run_id,
                        owner=owner,
                        poisoned_at=moment,
                        poison_reason=POISON_MAX_ATTEMPTS,
                    )
                if what != "skipped":
                    taken.add((part, run_id))
        for candidate in chosen:
            outcome = outcomes.get((candidate[1], candidate[2]))
            if isinstance(outcome, Lease):
                leases.append(outcome)
            elif isinstance(outcome, PoisonedClaim):
                poisoned.append(outcome)
        return len(outcomes) < len(chosen)

    def _keep_claimed_run(self, token: str, part: str, run_id: str, doc: object) -> None:
        if isinstance(doc, bytes):
            self._claimed_runs.keep(token, part, run_id, doc)

    async def claimed_run(self, owner: OwnerScope, run_id: str, token: str) -> Run | None:
        """The run as the claim holding ``token`` read it (atomically with the lease), at
        most once; ``None`` when not kept (read the run instead). Saves the drain a call."""
        kept = self._claimed_runs.take(token, owner_part(require_owner(owner)), run_id)
        return None if kept is None else _decode_run(kept)

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        scope = self._ns.scope(require_owner(owner))
        _check_run_id(run_id)
        moment = self._now_arg(now)
        if not isinstance(token, str):
            return ClaimLost()
        reply = await self._eval(
            "refresh", [scope.run(run_id), scope.claimed], [token, moment, run_id]
        )
        if _code(reply) != "OK":
            return ClaimLost()
        return ClaimRefreshed(from_micros(int(_text(reply[1]))))

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        scope = self._ns.scope(require_owner(owner))
        _check_run_id(run_id)
        moment = self._now_arg(now)
        if not isinstance(token, str):
            return
        await self._eval(
            "release",
            [scope.run(run_id), scope.ready, scope.claimed],
            [token, moment, run_id, self._ns.channel],
        )

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        scope = self._ns.scope(require_owner(owner))
        given = self._now_arg(policy.now)
        now = from_micros(int(given)) if given else await self._server_time(scope.ready)
        check_abandon_policy(policy, now)
        _check_run_id(run_id)
        if not isinstance(token, str):
            return StaleAbandon()
        backoff = policy.backoff
        reply = await self._eval(
            "abandon",
            [scope.run(run_id), scope.ready, scope.claimed],
            [
                token,
                str(policy.expected_checkpoint_seq),
                str(to_micros(now)),
                str(policy.max_claim_abandons),
                "1" if policy.non_poisoning else "0",
                "" if backoff is None else str(backoff.base // timedelta(microseconds=1)),
                "" if backoff is None else str(backoff.cap // timedelta(microseconds=1)),
                str(to_micros(policy.retry_at)),
                run_id,
                self._ns.channel,
                POISON_MAX_ABANDONS,
            ],
        )
        code = _code(reply)
        if code == "STALE":
            return StaleAbandon()
        if code == "POISONED":
            return Poisoned(from_micros(int(_text(reply[1]))), POISON_MAX_ABANDONS)
        if code == "RESCHEDULED":
            return Rescheduled(from_micros(int(_text(reply[1]))))
        raise corrupt(f"abandon of run {run_id!r}: {reply!r}")

    async def retry_poisoned_run(
        self, owner: OwnerScope, run_id: str, now: datetime | None = None
    ) -> Run | NotFound | InactiveRun:
        scope = self._ns.scope(require_owner(owner))
        _check_run_id(run_id)
        moment = self._now_arg(now)
        reply = await self._eval(
            "retry_poisoned",
            [scope.run(run_id), scope.ready, scope.claimed],
            [moment, run_id, self._ns.channel],
        )
        code = _code(reply)
        if code == "NOT_FOUND":
            return NotFound()
        if code == "INACTIVE":
            return InactiveRun()
        return _decode_run(reply[1])

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
        """``ClaimedStarts``: the run is written as ``claim_take`` would lease it to
        ``claim_token`` at ``proposal.wake_at`` (the same script as ``initialize``)."""
        valid = validate_initialize_claimed(owner, proposal, events, claim_token, self._limits)
        return await self._initialize(owner, proposal, valid)

    async def _initialize(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidationResult
    ) -> TransitionResult:
        if not isinstance(valid, ValidTransition):
            return valid
        scope = self._ns.scope(owner)
        run = valid.run
        token = valid.claim_token
        started = to_micros(run.started_at)
        # On a single server the script registers the scope and takes the listing order
        # itself (one call); a cluster keeps those keys on other slots, so ask first.
        folded = not self._target.cluster
        try:
            order = scope.part if folded else str(await self._register(scope, order=True))
            call: _Call = (
                [
                    scope.graph(run.graph_id),
                    scope.run(run.id),
                    scope.transitions(run.id),
                    scope.events(run.id),
                    scope.event_index(run.id),
                    scope.ready,
                    scope.summaries,
                    scope.index,
                    scope.by_status(RunStatus.RUNNING),
                    scope.by_graph(run.graph_id),
                    scope.by_hash(run.graph_hash),
                    scope.claimed,
                    *((self._ns.registry, self._ns.order) if folded else ()),
                ],
                [
                    f"d:{run.graph_hash}",
                    proposal.transition_id,
                    valid.digest,
                    valid.run_json,
                    run.graph_id,
                    run.graph_hash,
                    run.status.value,
                    str(run.checkpoint_seq),
                    str(run.event_seq),
                    str(started),
                    str(to_micros(proposal.wake_at)),
                    self._now_arg(None),
                    self._ns.channel,
                    index_member(started, run.id),
                    _summary(run),
                    run.id,
                    proposal.checkpoint_type.value,
                    order,
                    token or "",
                    str(len(valid.events)),
                    *_event_args(valid),
                ],
            )
            reply = await self._grouped(self._init_group, "initialize", call)
        except StoreError as exc:
            return exc.outcome
        code = _code(reply)
        if code == "OK":
            if folded:
                self._registered.add(scope.part)
            if token is not None:  # its holder commits next: patch against this document
                pieces = long_document(valid.run_json)
                self._documents.remember(scope.part, run.id, run.checkpoint_seq, pieces)
            return valid.run  # what was just stored, checked durable: no decode
        if code == "NOT_FOUND_GRAPH":
            return NotFound("graph")
        if code == "EXISTS":
            return Conflict(f"run {run.id!r} already exists")
        return self._answer(code, reply, proposal.transition_id, valid)

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
        """``ChainedCommits``: the group commit sends scripts queued in one turn as one
        pipeline, run in order."""
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
        scope = self._ns.scope(owner)
        run = valid.run
        kind, wake = _schedule_args(schedule)
        pieces = long_document(valid.run_json)
        patch = self._documents.patch(scope.part, run.id, expected, pieces)
        call: _Call = (
            [
                scope.run(run.id),
                scope.transitions(run.id),
                scope.events(run.id),
                scope.event_index(run.id),
                scope.ready,
                scope.claimed,
                scope.summaries,
                *(scope.by_status(status) for status in STATUS_ORDER),
            ],
            [
                transition_id,
                valid.digest,
                str(expected),
                token or "",
                run.graph_id,
                run.graph_hash,
                str(to_micros(run.started_at)),
                b"" if patch else valid.run_json,
                run.status.value,
                str(run.checkpoint_seq),
                str(run.event_seq),
                checkpoint_type.value,
                kind,
                wake,
                self._now_arg(None),
                self._ns.channel,
                index_member(to_micros(run.started_at), run.id),
                _summary(run),
                run.id,
                str(len(valid.events)),
                *_event_args(valid),
                *patch,
            ],
        )
        try:
            reply = await self._grouped(self._group, "commit", call)
        except StoreError as exc:
            return exc.outcome
        code = _code(reply)
        if code == "OK":
            if run.status.terminal:
                self._documents.forget(scope.part, run.id)
            else:
                self._documents.remember(scope.part, run.id, run.checkpoint_seq, pieces)
            return valid.run  # what was just stored, checked durable: no decode
        if code == "REPATCH":  # the pieces it was sent against are not the stored ones
            self._documents.forget(scope.part, run.id)
            return await self._commit(owner, valid)
        if code == "NOT_FOUND":
            return NotFound()
        if code == "STALE":
            return StaleCheckpoint()
        if code == "EVENT_CONFLICT":
            return EventConflict(int(_text(reply[1])))
        if code == "IDENTITY":
            return self._identity(reply, run)
        if code == "SPLIT":
            split = split_events(int(_text(reply[1])), valid)
            if isinstance(split, InvalidTransition):
                return split
            return Permanent(f"the store refused the event sequences of {split!r}")
        return self._answer(code, reply, transition_id, valid)

    @staticmethod
    def _identity(reply: list[Any], run: Run) -> TransitionResult:
        graph_id, graph_hash, started = reply[1:4]
        if graph_id is None or graph_hash is None or started is None:
            return Permanent(f"run {run.id!r} is stored without its identity")
        stored = attrs.evolve(
            run,
            graph_id=_text(graph_id),
            graph_hash=_text(graph_hash),
            started_at=from_micros(int(_text(started))),
        )
        broken = check_identity(stored, run)
        return broken or Permanent("the store reported an identity change it does not have")

    @staticmethod
    def _answer(
        code: str, reply: list[Any], transition_id: str, valid: ValidTransition
    ) -> TransitionResult:
        """The answers both transition scripts share: replay, reused id, corruption."""
        if code == "REPLAY":
            try:
                return run_from_json(reply[1])
            except (ValueError, TypeError, KeyError) as exc:
                return Permanent(f"the stored run document cannot be read: {exc}")
        if code == "TX_CONFLICT":
            answer = check_replay({transition_id: _text(reply[1])}, transition_id, valid.digest)
            if isinstance(answer, Conflict):
                return answer
            return Permanent("the store reported a transition conflict it does not have")
        if code == "CORRUPT":
            return Permanent(f"corrupt data in redis: {_text(reply[1])}")
        return Permanent(f"unexpected script answer {reply!r}")


# -- discovery ------------------------------------------------------------------------------

_OPTIONS = ("clock", "limits", "prefix", "clock_resync", "commit_lanes")
#: One script call: its keys and its arguments.
_Call = tuple[list[str], list[str | bytes]]


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
    clock = options.get("clock")
    limits = options.get("limits")
    prefix = options.get("prefix")
    if clock is not None and not callable(clock):
        raise TypeError("clock must be a callable returning an aware datetime")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError("limits must be docket.contract.Limits")
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

__all__ = ["NodePersistence", "RedisBackend", "factory"]
