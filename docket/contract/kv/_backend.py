"""``KVBackend``: the contract's four stores and bundle members over a :class:`KVStore`."""

from __future__ import annotations

import asyncio
import secrets
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from typing import TypeVar

from docket.clock import system_clock
from docket.contract.capabilities import Capabilities, Feature, Limits
from docket.contract.errors import (
    AbandonOutcome,
    ClaimLost,
    ClaimRefreshed,
    CorruptEventRow,
    CorruptGraph,
    GraphContentConflict,
    InactiveRun,
    InvalidGraph,
    NotFound,
    Permanent,
    PermanentStoreError,
    Retryable,
    RetryableStoreError,
    StoreError,
    TooLarge,
    TransitionResult,
)
from docket.contract.grouping import commit_claimed_in_order
from docket.contract.kv import _reads as reads
from docket.contract.kv import _writes as writes
from docket.contract.kv._keys import KEY_OVERHEAD, LAYOUT, LAYOUT_KEY
from docket.contract.kv._protocol import KVConflict, KVStore
from docket.contract.kv._tx import Tx
from docket.contract.proposals import (
    AbandonPolicy,
    ClaimBatch,
    ClaimedProposal,
    ClaimPolicy,
    EventListQuery,
    GraphListQuery,
    InitProposal,
    RunListQuery,
)
from docket.contract.queries import (
    require_abandon_policy,
    require_claim_policy,
    require_event_query,
    require_graph_query,
    require_run_query,
    require_seq,
)
from docket.contract.validate import (
    ValidTransition,
    validate_graph_save,
)
from docket.contract.writes import ValidatedTransitions
from docket.records import (
    Event,
    EventPage,
    GraphRef,
    GraphVersion,
    GraphVersionPage,
    OwnerScope,
    Run,
    RunInfo,
    RunPage,
    Scope,
    require_owner,
    require_scope,
    run_from_json,
)
from docket.values import JSONDict, utc

T = TypeVar("T")

#: How often a transaction an optimistic store refused (``KVConflict``) is run again.
CONFLICT_RETRIES = 8


class _Announcer:
    """In-process wake-ups, shared by every backend on the same ``wake_key``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    async def wait(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        entry = (loop, loop.create_future())
        with self._lock:
            self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):  # 3.11's wait_for can lose a cancel
                await entry[1]
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def notify(self) -> None:
        with self._lock:
            for loop, future in self._waiters:
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


_ANNOUNCERS: weakref.WeakValueDictionary[Hashable, _Announcer] = weakref.WeakValueDictionary()
_ANNOUNCERS_LOCK = threading.Lock()


def _announcer(key: Hashable | None) -> _Announcer:
    if key is None:
        return _Announcer()
    with _ANNOUNCERS_LOCK:
        found = _ANNOUNCERS.get(key)
        if found is None:
            found = _ANNOUNCERS[key] = _Announcer()
        return found


def _id(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {type(value).__name__}")
    return value


class KVBackend(ValidatedTransitions):
    """The whole contract over one :class:`KVStore`.

    ``open_store`` opens the store (called by :meth:`open`, on a worker thread);
    ``name`` and ``features`` go into the capabilities (``notify``, ``reopen_failed``,
    ``child_runs``, ``timers`` and ``messages`` are always declared; a durable store adds
    ``durable``/``durable.fsync``; ``schedules`` is refused: the adapter keeps no
    schedules, so a runtime on it runs no cron schedules). ``clock``
    is the backend's one clock (the host's by default); ``wake_key`` names the store
    (its path, say) so that backends on the same store in this process wake each
    other's ``wait_for_work``; ``prefix`` puts every key under a prefix, so several
    docket stores can share one key space.
    """

    def __init__(
        self,
        open_store: Callable[[], KVStore],
        *,
        name: str,
        features: Iterable[str] = (),
        clock: Callable[[], datetime] | None = None,
        limits: Limits | None = None,
        wake_key: Hashable | None = None,
        prefix: bytes = b"",
        readers: int = 4,
    ) -> None:
        self._open_store = open_store
        self._name = name
        # the due index is the wake, whatever the status: a waiting run with a due wake is
        # claimed like a running one (timers); a send is any fenced commit (messages)
        self._features = frozenset(
            {
                Feature.NOTIFY,
                Feature.REOPEN_FAILED,
                Feature.CHILD_RUNS,
                Feature.TIMERS,
                Feature.MESSAGES,
                *features,
            }
        )
        if Feature.SCHEDULES in self._features:
            raise ValueError(
                "the KV adapter keeps no cron schedules: it cannot declare 'schedules' "
                "(use a backend that provides a ScheduleStore)"
            )
        self._clock = clock or system_clock
        self._limits = limits or Limits()
        self._prefix = prefix
        self._readers = readers
        self._announcer = _announcer(wake_key)
        self._store: KVStore | None = None
        self._writer: ThreadPoolExecutor | None = None
        self._reader: ThreadPoolExecutor | None = None

    # -- bundle -----------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        return Capabilities(limits=self._limits, features=self._features, name=self._name)

    @property
    def graphs(self) -> KVBackend:
        return self

    @property
    def runs(self) -> KVBackend:
        return self

    @property
    def events(self) -> KVBackend:
        return self

    @property
    def transitions(self) -> KVBackend:
        return self

    async def open(self) -> None:
        if self._store is not None:
            return
        store = await asyncio.to_thread(self._open_store)
        longest = self._limits.max_id_bytes + KEY_OVERHEAD + len(self._prefix)
        if store.max_key_bytes < longest:
            store.close()
            raise PermanentStoreError(
                f"the store takes keys of up to {store.max_key_bytes} bytes; with "
                f"max_id_bytes={self._limits.max_id_bytes} docket's keys reach {longest}"
            )
        # One writer thread applies writes in the order they were sent (ChainedCommits
        # relies on it); reads run beside it on a small pool.
        self._writer = ThreadPoolExecutor(1, thread_name_prefix=f"docket-{self._name}-w")
        self._reader = ThreadPoolExecutor(self._readers, thread_name_prefix=f"docket-{self._name}")
        self._store = store
        try:
            await self._write(self._check_layout)
        except BaseException:
            await self.close()
            raise

    def _check_layout(self, tx: Tx) -> None:
        found = tx.get(LAYOUT_KEY)
        if found is None:
            tx.put(LAYOUT_KEY, LAYOUT)
        elif found != LAYOUT:
            raise PermanentStoreError(f"the store holds layout {found!r}; this is {LAYOUT!r}")

    async def close(self) -> None:
        store, self._store = self._store, None
        for pool in (self._writer, self._reader):
            if pool is not None:
                await asyncio.to_thread(pool.shutdown)
        self._writer = self._reader = None
        if store is not None:
            await asyncio.to_thread(store.close)

    async def now(self) -> datetime:
        return self._now(None)

    def _now(self, given: datetime | None) -> datetime:
        return utc(given) if given is not None else utc(self._clock())

    async def wait_for_work(self, timeout: float) -> bool:
        return await self._announcer.wait(timeout)

    # -- running transactions ---------------------------------------------------------

    def _run(self, write: bool, body: Callable[[Tx], T]) -> T:
        store = self._store
        if store is None:
            raise PermanentStoreError(f"the {self._name} backend is not open")
        for _ in range(CONFLICT_RETRIES):
            try:
                with store.transaction(write=write) as txn:
                    tx = Tx(txn, self._prefix)
                    result = body(tx)
            except KVConflict:
                continue
            if tx.announce:
                self._announcer.notify()
            return result
        raise RetryableStoreError(f"transaction conflicted {CONFLICT_RETRIES} times")

    async def _write(self, body: Callable[[Tx], T]) -> T:
        if self._writer is None:
            raise PermanentStoreError(f"the {self._name} backend is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writer, self._run, True, body)

    async def _read(self, body: Callable[[Tx], T]) -> T:
        if self._reader is None:
            raise PermanentStoreError(f"the {self._name} backend is not open")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader, self._run, False, body)

    async def _outcome(self, body: Callable[[Tx], T]) -> T | Retryable | Permanent:
        """A write whose answer has a slot for infrastructure failures."""
        try:
            return await self._write(body)
        except StoreError as exc:
            return exc.outcome

    # -- graphs -----------------------------------------------------------------------

    async def save_graph(
        self, owner: OwnerScope, ref: GraphRef, document: JSONDict
    ) -> GraphVersion | InvalidGraph | GraphContentConflict | TooLarge | Retryable | Permanent:
        checked = validate_graph_save(owner, ref, document, self._limits)
        if not isinstance(checked, bytes):
            return checked
        return await self._outcome(
            lambda tx: writes.save_graph(tx, owner, ref, checked, self._now(None))
        )

    async def fetch_graph(
        self, owner: OwnerScope, ref: GraphRef
    ) -> JSONDict | NotFound | CorruptGraph:
        require_owner(owner)
        return await self._read(partial(reads.fetch_graph, owner=owner, ref=ref))

    async def fetch_latest_graph_ref(self, owner: OwnerScope, graph_id: str) -> GraphRef | NotFound:
        page = await self.list_graph_versions(owner, graph_id, GraphListQuery(limit=1))
        return page.versions[0].ref if page.versions else NotFound("graph")

    async def list_graph_versions(
        self, owner: OwnerScope, graph_id: str, query: GraphListQuery
    ) -> GraphVersionPage:
        require_owner(owner)
        require_graph_query(query)
        _id("graph_id", graph_id)
        return await self._read(
            partial(reads.list_graph_versions, owner=owner, graph_id=graph_id, query=query)
        )

    # -- run reads --------------------------------------------------------------------

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        require_owner(owner)
        data = await self._read(partial(reads.fetch_run, owner=owner, run_id=_id("run_id", run_id)))
        return NotFound() if data is None else run_from_json(data)

    async def inspect_run(self, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
        require_owner(owner)
        return await self._read(
            partial(reads.inspect_run, owner=owner, run_id=_id("run_id", run_id))
        )

    async def list_runs(self, scope: Scope, query: RunListQuery) -> RunPage:
        require_scope(scope)
        require_run_query(query)
        return await self._read(partial(reads.list_runs, scope=scope, query=query))

    # -- events -----------------------------------------------------------------------

    async def fetch_event(
        self, owner: OwnerScope, run_id: str, seq: int
    ) -> Event | NotFound | CorruptEventRow:
        require_owner(owner)
        require_seq(seq)
        return await self._read(
            partial(reads.fetch_event, owner=owner, run_id=_id("run_id", run_id), seq=seq)
        )

    async def fetch_latest_event(
        self, owner: OwnerScope, run_id: str
    ) -> Event | NotFound | CorruptEventRow | None:
        require_owner(owner)
        return await self._read(
            partial(reads.fetch_latest_event, owner=owner, run_id=_id("run_id", run_id))
        )

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        require_owner(owner)
        require_event_query(query)
        return await self._read(
            partial(reads.list_events, owner=owner, run_id=_id("run_id", run_id), query=query)
        )

    # -- claims -----------------------------------------------------------------------

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        require_claim_policy(policy)
        return await self._outcome(
            lambda tx: writes.claim_due(
                tx, policy, self._now(policy.now), lambda: secrets.token_urlsafe(18)
            )
        )

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        require_owner(owner)
        _id("run_id", run_id)
        return await self._write(
            lambda tx: writes.refresh_claim(tx, owner, run_id, token, self._now(now))
        )

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        require_owner(owner)
        _id("run_id", run_id)
        await self._write(lambda tx: writes.release_claim(tx, owner, run_id, token, self._now(now)))

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        require_owner(owner)
        _id("run_id", run_id)
        require_abandon_policy(policy, self._now(policy.now))
        return await self._write(
            lambda tx: writes.abandon_claim(tx, owner, run_id, token, policy, self._now(policy.now))
        )

    async def retry_poisoned_run(
        self, owner: OwnerScope, run_id: str, now: datetime | None = None
    ) -> Run | NotFound | InactiveRun:
        require_owner(owner)
        _id("run_id", run_id)
        return await self._write(
            lambda tx: writes.retry_poisoned_run(tx, owner, run_id, self._now(now))
        )

    # -- transitions ------------------------------------------------------------------

    @property
    def limits(self) -> Limits:
        return self._limits

    async def _publish_start(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidTransition
    ) -> TransitionResult:
        return await self._outcome(lambda tx: writes.initialize(tx, owner, valid, self._now(None)))

    async def _publish_commit(self, owner: OwnerScope, valid: ValidTransition) -> TransitionResult:
        return await self._outcome(lambda tx: writes.commit(tx, owner, valid, self._now(None)))

    async def commit_claimed_chain(
        self, owner: OwnerScope, commits: Sequence[tuple[ClaimedProposal, Sequence[Event]]]
    ) -> list[TransitionResult]:
        """``ChainedCommits``: the one writer thread applies them in the order sent."""
        return await commit_claimed_in_order(self, owner, commits)


def kv_options(
    scheme: str, options: Mapping[str, object], extra: Iterable[str] = ()
) -> tuple[Callable[[], datetime] | None, Limits | None]:
    """The ``clock`` and ``limits`` a factory's ``options`` give (the kit passes both);
    ``TypeError`` for an option neither they nor ``extra`` name, or of the wrong type."""
    unknown = set(options) - {"clock", "limits", *extra}
    if unknown:
        raise TypeError(f"{scheme}:// does not take {', '.join(sorted(unknown))}")
    clock, limits = options.get("clock"), options.get("limits")
    if clock is not None and not callable(clock):
        raise TypeError("clock must be a callable returning an aware datetime")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError("limits must be docket.contract.Limits")
    return clock, limits


__all__ = ["KVBackend", "kv_options"]
