"""``RedisQueues``: the queue store (``QueueStore``, ``Feature.QUEUES``, layout 5).

Queues are namespace-wide, so every queue's keys live under one hash tag
``{<prefix>:queues}`` (see :mod:`docket_redis.keys`) and each operation is one Lua script
on one cluster slot, atomic against every other on that queue. The scripts
(``lua/queue_*.lua`` over ``lua/ledger.lua``) mirror
:class:`docket.contract.queues.SlotLedger` step for step, with the Redis server's
``TIME`` as the clock unless ``now=`` (or the backend's test clock) is given.

``list_queues`` reports each queue's depth from the scopes' ready zsets (due runs of its
lanes, ``lua/queue_depth.lua``): one read per scope, not atomic across scopes, which is
enough for a display. Unlike the reference, a waiting run whose durable timer is due
counts too (it sits in the same zset until a worker fires it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from docket.contract.errors import NotFound
from docket.contract.queues import (
    default_config,
    require_queue_config,
    require_queue_name,
    require_slot_request,
)
from docket.records import (
    DEFAULT_QUEUE,
    QueueConfig,
    QueueStatus,
    queue_config_from_json,
    queue_config_to_json,
)
from docket_redis._codec import text
from docket_redis._engine import RedisEngine
from docket_redis.errors import corrupt

_US = timedelta(microseconds=1)


class RedisQueues:
    """Queue configs and the slot ledger of one namespace."""

    def __init__(self, engine: RedisEngine) -> None:
        self._engine = engine
        self._keys = engine.ns.queues

    def _ledger_keys(self, name: str) -> list[str]:
        keys = self._keys
        return [keys.configs, keys.buckets, keys.holders(name)]

    async def set_queue(self, config: QueueConfig) -> QueueConfig:
        require_queue_config(config)
        engine = self._engine
        await engine.eval(
            "queue_set",
            self._ledger_keys(config.name),
            [config.name, queue_config_to_json(config), engine.now_arg(None)],
        )
        return config

    async def fetch_queue(self, name: str) -> QueueConfig | NotFound:
        require_queue_name(name)
        configs = self._keys.configs
        raw = await self._engine.transport.command(configs, "HGET", configs, name)
        if raw is None:
            return default_config() if name == DEFAULT_QUEUE else NotFound("queue")
        return _decode(name, raw)

    async def queue_configs(self) -> Sequence[QueueConfig]:
        keys = self._keys
        now = self._engine.now_arg(None)
        heads = [keys.holders_head, keys.admitted_head, keys.held_head]
        reply = await self._engine.eval("queue_list", [keys.configs], [now, *heads])
        configs = [
            default_config() if item[1] is None else _decode(text(item[0]), item[1])
            for item in reply
        ]
        return sorted(configs, key=lambda config: config.name)

    async def list_queues(self) -> Sequence[QueueStatus]:
        engine = self._engine
        now = engine.now_arg(None)
        keys = self._keys
        heads = [keys.holders_head, keys.admitted_head, keys.held_head]
        reply = await engine.eval("queue_list", [keys.configs], [now, *heads])
        depth = await self._depths(now)
        out: list[QueueStatus] = []
        for item in reply:
            name, raw, running = text(item[0]), item[1], int(item[2])
            config = default_config() if raw is None else _decode(name, raw)
            status = QueueStatus(
                config=config,
                running=running,
                depth=depth.get(name, 0),
                admitted=int(item[3]),
                held=int(item[4]),
            )
            out.append(status)
        return sorted(out, key=lambda status: status.config.name)

    async def _depths(self, now: str) -> dict[str, int]:
        """Due, unclaimed runs per queue, summed over every scope."""
        engine = self._engine
        depth: dict[str, int] = {}
        for scope in await engine.scopes():
            flat = await engine.eval("queue_depth", [scope.ready, scope.lanes], [now])
            for queue, count in zip(flat[::2], flat[1::2]):
                depth[text(queue)] = depth.get(text(queue), 0) + int(count)
        return depth

    async def acquire_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        require_slot_request(name, holders, ttl)
        if not holders:
            raise ValueError("holders: acquire at least one slot")
        return int(await self._slots("queue_acquire", name, holders, ttl, now))

    async def renew_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        require_slot_request(name, holders, ttl)
        if not holders:
            return 0
        return int(await self._slots("queue_renew", name, holders, ttl, now))

    async def release_slots(self, name: str, holders: Sequence[str], refund: bool = False) -> None:
        require_slot_request(name, holders, timedelta(0))
        if not holders:
            return
        engine = self._engine
        await engine.eval(
            "queue_release",
            self._ledger_keys(name),
            [name, engine.now_arg(None), "1" if refund else "0", *holders],
        )

    async def _slots(
        self, script: str, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None
    ) -> Any:
        engine = self._engine
        return await engine.eval(
            script,
            self._ledger_keys(name),
            [name, engine.now_arg(now), str(ttl // _US), *holders],
        )


def _decode(name: str, raw: Any) -> QueueConfig:
    try:
        config = queue_config_from_json(raw)
    except ValueError as exc:
        raise corrupt(f"queue {name!r} has an unreadable config: {exc}") from exc
    if config.name != name:
        raise corrupt(f"queue {name!r} holds the config of {config.name!r}")
    return config


__all__ = ["RedisQueues"]
