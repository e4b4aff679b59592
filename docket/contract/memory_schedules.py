"""The memory backend's schedule store (the reference for ``Feature.SCHEDULES``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from docket.contract.capabilities import Limits
from docket.contract.errors import Conflict, NotFound, StaleCheckpoint, TooLarge
from docket.contract.schedules import check_limit, for_create, for_update, page_of
from docket.records import (
    CronSchedule,
    OwnerScope,
    ScheduleCursor,
    SchedulePage,
    Scope,
    require_owner,
    require_scope,
    scope_admits,
    tenant_id_of,
)
from docket.values import utc

__all__ = ["MemorySchedules"]


class MemorySchedules:
    """Schedules in a dict, guarded by one lock; ``clock`` is the backend's."""

    def __init__(self, clock: Callable[[], datetime], limits: Limits) -> None:
        self._clock = clock
        self._limits = limits
        self._lock = threading.Lock()
        self._rows: dict[tuple[str | None, str], CronSchedule] = {}

    async def create_schedule(
        self, owner: OwnerScope, schedule: CronSchedule
    ) -> CronSchedule | Conflict | TooLarge:
        stored = for_create(owner, schedule, self._limits)
        too_large = check_limit(stored, self._limits)
        if isinstance(too_large, TooLarge):
            return too_large
        key = (stored.tenant_id, stored.id)
        with self._lock:
            if key in self._rows:
                return Conflict(f"schedule {stored.id!r} already exists")
            self._rows[key] = stored
        return stored

    async def update_schedule(
        self, owner: OwnerScope, schedule: CronSchedule, expected_version: int
    ) -> CronSchedule | NotFound | StaleCheckpoint | TooLarge:
        key = (tenant_id_of(require_owner(owner)), _id_of(schedule))
        with self._lock:
            current = self._rows.get(key)
            if current is None:
                return NotFound("schedule")
            new = for_update(current, schedule, expected_version, self._limits)
            too_large = check_limit(new, self._limits)
            if isinstance(too_large, TooLarge):
                return too_large
            if current.version != expected_version:
                return StaleCheckpoint(
                    f"schedule {current.id!r} is at version {current.version}, "
                    f"not {expected_version}"
                )
            self._rows[key] = new
        return new

    async def fetch_schedule(self, owner: OwnerScope, schedule_id: str) -> CronSchedule | NotFound:
        key = (tenant_id_of(require_owner(owner)), _require_id(schedule_id))
        with self._lock:
            found = self._rows.get(key)
        return NotFound("schedule") if found is None else found

    async def delete_schedule(self, owner: OwnerScope, schedule_id: str) -> bool:
        key = (tenant_id_of(require_owner(owner)), _require_id(schedule_id))
        with self._lock:
            return self._rows.pop(key, None) is not None

    async def list_schedules(
        self, scope: Scope, after: ScheduleCursor | None = None, limit: int = 100
    ) -> SchedulePage:
        scope = require_scope(scope)
        with self._lock:
            rows = [s for s in self._rows.values() if scope_admits(scope, s.tenant_id)]
        return page_of(rows, after, limit)

    async def due_schedules(
        self, now: datetime | None = None, limit: int = 100
    ) -> tuple[CronSchedule, ...]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        moment = utc(now) if now is not None else utc(self._clock())
        with self._lock:
            due = [s for s in self._rows.values() if s.due_at is not None and s.due_at <= moment]
        due.sort(key=lambda s: (s.due_at, s.id, s.tenant_id or ""))
        return tuple(due[:limit])


def _require_id(schedule_id: object) -> str:
    if not isinstance(schedule_id, str) or not schedule_id:
        raise ValueError(f"schedule_id must be a non-empty string, got {schedule_id!r}")
    return schedule_id


def _id_of(schedule: object) -> str:
    if not isinstance(schedule, CronSchedule):
        raise TypeError(f"expected a CronSchedule, got {type(schedule).__name__}")
    return _require_id(schedule.id)
