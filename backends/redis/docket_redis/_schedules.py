"""``RedisSchedules``: the schedule store (``ScheduleStore``, ``Feature.SCHEDULES``).

The rules are the shared ones (:mod:`docket.contract.schedules`): they give the exact
document to store, and this module adds only storage. Every schedule of the namespace
lives under one hash tag (see :mod:`docket_redis.keys`), so ``lua/schedule_write.lua``
writes a document and moves its listing and due indexes in one atomic script.

An update is decided in Python on the document read (its version must be the expected
one, its id, tenant and ``created_at`` are kept) and written only if that document is
still the stored one — the script compares its SHA-1. If another writer got in between,
the update reads again: that writer's version makes it ``StaleCheckpoint``, so of
several updates racing from one version exactly one is stored.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from docket.contract import Conflict, Limits, NotFound, StaleCheckpoint, TooLarge
from docket.contract.schedules import check_limit, for_create, for_update, page_of
from docket.records import (
    CronSchedule,
    OwnerScope,
    ScheduleCursor,
    SchedulePage,
    Scope,
    System,
    require_owner,
    require_scope,
    schedule_from_json,
    tenant_id_of,
)
from docket.values import to_micros, utc
from docket_redis._codec import code
from docket_redis._engine import RedisEngine
from docket_redis.errors import corrupt
from docket_redis.keys import schedule_member

#: How many times an update reads again after the document changed under it. Each
#: round means another writer stored a change; past this the update answers stale.
UPDATE_ROUNDS = 8


class RedisSchedules:
    """Cron schedules of every owner scope of one namespace."""

    def __init__(self, engine: RedisEngine) -> None:
        self._engine = engine
        self._keys = engine.ns.schedules

    @property
    def _limits(self) -> Limits:
        return self._engine.limits

    async def create_schedule(
        self, owner: OwnerScope, schedule: CronSchedule
    ) -> CronSchedule | Conflict | TooLarge:
        stored = for_create(owner, schedule, self._limits)
        data = check_limit(stored, self._limits)
        if isinstance(data, TooLarge):
            return data
        reply = await self._write("create", owner, stored, data)
        if code(reply) == "EXISTS":
            return Conflict(f"schedule {stored.id!r} already exists")
        _expect_ok(reply)
        return stored

    async def update_schedule(
        self, owner: OwnerScope, schedule: CronSchedule, expected_version: int
    ) -> CronSchedule | NotFound | StaleCheckpoint | TooLarge:
        # the reference's order: owner, id, lookup, the document's rules, size, fence
        owner = require_owner(owner)
        schedule_id = _id_of(schedule)
        for _ in range(UPDATE_ROUNDS):
            read = await self._read(owner, schedule_id)
            if read is None:
                return NotFound("schedule")
            current, raw = read
            new = for_update(current, schedule, expected_version, self._limits)
            data = check_limit(new, self._limits)
            if isinstance(data, TooLarge):
                return data
            if current.version != expected_version:
                return _stale(current, expected_version)
            reply = await self._write("update", owner, new, data, hashlib.sha1(raw).hexdigest())
            answer = code(reply)
            if answer == "NOT_FOUND":
                return NotFound("schedule")
            if answer != "CHANGED":
                _expect_ok(reply)
                return new
        return StaleCheckpoint(f"schedule {schedule_id!r} kept changing while being updated")

    async def fetch_schedule(self, owner: OwnerScope, schedule_id: str) -> CronSchedule | NotFound:
        read = await self._read(require_owner(owner), _require_id(schedule_id))
        return NotFound("schedule") if read is None else read[0]

    async def delete_schedule(self, owner: OwnerScope, schedule_id: str) -> bool:
        owner = require_owner(owner)
        member = schedule_member(_require_id(schedule_id), tenant_id_of(owner))
        reply = await self._eval_write(owner, ["delete", member, b"", ""])
        return code(reply) == "OK"

    async def list_schedules(
        self, scope: Scope, after: ScheduleCursor | None = None, limit: int = 100
    ) -> SchedulePage:
        scope = require_scope(scope)
        page_of((), after, limit)  # the arguments' checks, before any read
        if after is not None and not (
            isinstance(after.schedule_id, str)
            and (after.tenant_id is None or isinstance(after.tenant_id, str))
        ):
            raise TypeError(f"after must hold a schedule id and a tenant id, got {after!r}")
        keys = self._keys
        index = keys.index if isinstance(scope, System) else keys.by_owner(scope)
        bound = (
            b"-" if after is None else b"(" + schedule_member(after.schedule_id, after.tenant_id)
        )
        # one more than the page, so page_of can tell whether more follow
        reply = await self._engine.eval(
            "schedule_read", [index, keys.documents], ["list", bound, str(limit + 1)]
        )
        return page_of(_decode_all(reply), after, limit)

    async def due_schedules(
        self, now: datetime | None = None, limit: int = 100
    ) -> tuple[CronSchedule, ...]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        moment = self._engine.now_arg(None) if now is None else str(to_micros(utc(now)))
        keys = self._keys
        reply = await self._engine.eval(
            "schedule_read", [keys.due, keys.documents], ["due", moment, str(limit)]
        )
        # the zset's order is the answer's: due_at, then (id, tenant or "")
        return tuple(_decode_all(reply))

    # -- storage ----------------------------------------------------------------------------

    async def _read(self, owner: OwnerScope, schedule_id: str) -> tuple[CronSchedule, bytes] | None:
        documents = self._keys.documents
        member = schedule_member(schedule_id, tenant_id_of(owner))
        raw = await self._engine.transport.command(documents, "HGET", documents, member)
        if raw is None:
            return None
        return _decode(raw), raw

    async def _write(
        self, mode: str, owner: OwnerScope, stored: CronSchedule, data: bytes, fence: str = ""
    ) -> Any:
        due = stored.due_at
        member = schedule_member(stored.id, stored.tenant_id)
        due_arg = "" if due is None else str(to_micros(due))
        return await self._eval_write(owner, [mode, member, data, due_arg, fence])

    async def _eval_write(self, owner: OwnerScope, args: list[str | bytes]) -> Any:
        keys = self._keys
        return await self._engine.eval(
            "schedule_write",
            [keys.documents, keys.index, keys.by_owner(owner), keys.due],
            args,
        )


def _decode(raw: Any) -> CronSchedule:
    try:
        return schedule_from_json(raw)
    except (ValueError, TypeError, KeyError) as exc:
        raise corrupt(f"a stored schedule cannot be read: {exc}") from exc


def _decode_all(reply: Any) -> list[CronSchedule]:
    if not isinstance(reply, list) or any(raw is None for raw in reply):
        raise corrupt(f"a schedule index names a schedule without a document: {reply!r}")
    return [_decode(raw) for raw in reply]


def _expect_ok(reply: Any) -> None:
    if code(reply) != "OK":
        raise corrupt(f"schedule_write: {reply!r}")


def _stale(current: CronSchedule, expected_version: int) -> StaleCheckpoint:
    return StaleCheckpoint(
        f"schedule {current.id!r} is at version {current.version}, not {expected_version}"
    )


def _require_id(schedule_id: object) -> str:
    if not isinstance(schedule_id, str) or not schedule_id:
        raise ValueError(f"schedule_id must be a non-empty string, got {schedule_id!r}")
    return schedule_id


def _id_of(schedule: object) -> str:
    if not isinstance(schedule, CronSchedule):
        raise TypeError(f"expected a CronSchedule, got {type(schedule).__name__}")
    return _require_id(schedule.id)


__all__ = ["UPDATE_ROUNDS", "RedisSchedules"]
