"""The memory backend's queue store (the reference for ``Feature.QUEUES``): one
:class:`~docket.contract.queues.SlotLedger` per queue behind one lock."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from docket.contract.errors import NotFound
from docket.contract.queues import (
    SlotLedger,
    default_config,
    require_queue_config,
    require_queue_name,
    require_slot_request,
)
from docket.records import DEFAULT_QUEUE, QueueConfig, QueueStatus
from docket.values import utc

__all__ = ["MemoryQueues"]


class MemoryQueues:
    """Queue configs and slots in dicts; ``depth`` counts a queue's due, unclaimed runs
    (the backend answers it from its run rows)."""

    def __init__(self, clock: Callable[[], datetime], depth: Callable[[str], int]) -> None:
        self._clock = clock
        self._depth = depth
        self._lock = threading.Lock()
        self._ledgers: dict[str, SlotLedger] = {}

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
        return [
            QueueStatus(config=config, running=running, depth=self._depth(name))
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
