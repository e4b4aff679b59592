"""The memory backend's queue store (the reference for ``Feature.QUEUES`` and
``Feature.ADMISSION``): one :class:`~docket.contract.queues.SlotLedger` and one
:class:`~docket.contract.admission.AdmissionBook` per queue, behind one lock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from docket.contract.admission import AdmissionBook, require_admit_request, require_run_ids
from docket.contract.errors import NotFound
from docket.contract.queues import (
    SlotLedger,
    default_config,
    require_queue_config,
    require_queue_name,
    require_slot_request,
)
from docket.records import (
    DEFAULT_QUEUE,
    Admission,
    AdmissionView,
    HeldStart,
    QueueConfig,
    QueueStatus,
)
from docket.values import utc

__all__ = ["MemoryAdmissions", "MemoryQueues"]


class MemoryQueues:
    """Queue configs and slots in dicts; ``depth`` counts a queue's due, unclaimed runs
    (the backend answers it from its run rows)."""

    def __init__(self, clock: Callable[[], datetime], depth: Callable[[str], int]) -> None:
        self._clock = clock
        self._depth = depth
        self._lock = threading.Lock()
        self._ledgers: dict[str, SlotLedger] = {}
        self.books: dict[str, AdmissionBook] = {}  # Feature.ADMISSION, under the same lock

    def _now(self, given: datetime | None) -> datetime:
        return utc(given) if given is not None else self._clock()

    def _ledger(self, name: str, now: datetime) -> SlotLedger | None:
        ledger = self._ledgers.get(name)
        if ledger is None and name == DEFAULT_QUEUE:
            ledger = self._ledgers[name] = SlotLedger.new(default_config(), now)
        return ledger

    async def set_queue(self, config: QueueConfig) -> QueueConfig:
        require_queue_config(config)
        now = self._clock()
        with self._lock:
            ledger = self._ledgers.get(config.name)
            if ledger is None:
                self._ledgers[config.name] = SlotLedger.new(config, now)
            else:
                ledger.reconfigure(config, now)
        return config

    async def fetch_queue(self, name: str) -> QueueConfig | NotFound:
        require_queue_name(name)
        with self._lock:
            ledger = self._ledger(name, self._clock())
            return NotFound("queue") if ledger is None else ledger.config

    async def queue_configs(self) -> Sequence[QueueConfig]:
        with self._lock:
            self._ledger(DEFAULT_QUEUE, self._clock())
            return [ledger.config for _, ledger in sorted(self._ledgers.items())]

    async def list_queues(self) -> Sequence[QueueStatus]:
        now = self._clock()
        with self._lock:
            self._ledger(DEFAULT_QUEUE, now)
            held = {
                name: (ledger.config, ledger.live(now)) for name, ledger in self._ledgers.items()
            }
            books = {name: (len(b.admitted), len(b.held)) for name, b in self.books.items()}
        return [
            QueueStatus(
                config=config,
                running=running,
                depth=self._depth(name),
                admitted=books.get(name, (0, 0))[0],
                held=books.get(name, (0, 0))[1],
            )
            for name, (config, running) in sorted(held.items())
        ]

    async def acquire_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        require_slot_request(name, holders, ttl)
        if not holders:
            raise ValueError("holders: acquire at least one slot")
        at = self._now(now)
        with self._lock:
            ledger = self._ledger(name, at)
            return 0 if ledger is None else ledger.acquire(holders, ttl, at)

    async def renew_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        require_slot_request(name, holders, ttl)
        at = self._now(now)
        with self._lock:
            ledger = self._ledgers.get(name)
            return 0 if ledger is None else ledger.renew(holders, ttl, at)

    async def release_slots(self, name: str, holders: Sequence[str], refund: bool = False) -> None:
        require_slot_request(name, holders, timedelta(0))
        now = self._clock()
        with self._lock:
            ledger = self._ledgers.get(name)
            if ledger is not None:
                ledger.release(holders, refund, now)


class MemoryAdmissions:
    """The admission ledgers of :class:`MemoryQueues` (its configs, its lock)."""

    def __init__(self, queues: MemoryQueues) -> None:
        self._queues = queues

    def _config(self, name: str, now: datetime) -> QueueConfig | None:
        ledger = self._queues._ledger(name, now)
        return None if ledger is None else ledger.config

    def _book(self, name: str) -> AdmissionBook:
        return self._queues.books.setdefault(name, AdmissionBook())

    async def admit(
        self,
        name: str,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime | None = None,
    ) -> Admission | NotFound:
        require_admit_request(name, run_id, tenant, priority, start)
        at = self._queues._now(now)
        with self._queues._lock:
            config = self._config(name, at)
            if config is None:
                return NotFound("queue")
            return self._book(name).admit(config, run_id, tenant, priority, start, at)

    async def finish_admitted(
        self, name: str, run_ids: Sequence[str], now: datetime | None = None
    ) -> Sequence[HeldStart]:
        require_queue_name(name)
        require_run_ids(run_ids)
        at = self._queues._now(now)
        with self._queues._lock:
            config = self._config(name, at)
            book = self._queues.books.get(name)
            if config is None or book is None:
                return []
            return book.finish(config, run_ids, at)

    async def promote_held(self, name: str, now: datetime | None = None) -> Sequence[HeldStart]:
        require_queue_name(name)
        at = self._queues._now(now)
        with self._queues._lock:
            config = self._config(name, at)
            book = self._queues.books.get(name)
            if config is None or book is None:
                return []
            return book.promote(config, at)

    async def drop_held(self, name: str, run_id: str) -> HeldStart | None:
        require_queue_name(name)
        require_run_ids([run_id])
        with self._queues._lock:
            book = self._queues.books.get(name)
            return None if book is None else book.drop(run_id)

    async def held_start(self, run_id: str, tenant: str | None) -> HeldStart | None:
        require_run_ids([run_id])
        with self._queues._lock:
            for _, book in sorted(self._queues.books.items()):
                for entries in (book.admitted, book.held):
                    entry = entries.get(run_id)
                    if entry is not None and entry.tenant == tenant:
                        return entry
        return None

    async def admissions(self, name: str, limit: int = 1000) -> AdmissionView:
        require_queue_name(name)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit: expected a positive integer, got {limit!r}")
        with self._queues._lock:
            book = self._queues.books.get(name)
            return AdmissionView(admitted=(), held=()) if book is None else book.view(limit)
