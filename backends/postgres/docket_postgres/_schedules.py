"""The schedule store (``ScheduleStore``, ``Feature.SCHEDULES``) of ``PostgresBackend``.

One row per schedule and owner in the ``schedules`` table (schema version 7): the
document as :func:`~docket.records.schedule_to_json` encodes it, plus the copies the
statements read — ``version`` and ``due_at``. The rules (what a create or an update
stores, the size bound, how a page is cut) are the shared ones of
:mod:`docket.contract.schedules`; this module adds only the storage and the atomic
writes: a create is ``INSERT ... ON CONFLICT DO NOTHING``, an update is ``UPDATE ...
WHERE version = expected`` (the fence is the database's, whoever races), a delete is a
plain ``DELETE``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from docket.contract import Conflict, NotFound, StaleCheckpoint, TooLarge
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
from docket.values import utc
from docket_postgres._engine import INT4_MAX, Engine, Row, storable, tenant_key
from docket_postgres.errors import PermanentStoreError

_INSERT: Final = (
    "INSERT INTO @schema@.schedules (tenant, schedule_id, version, due_at, document) "
    "VALUES (%s, %s, %s, %s::timestamptz, %s) ON CONFLICT DO NOTHING RETURNING version"
)
_FETCH: Final = "SELECT document FROM @schema@.schedules WHERE tenant = %s AND schedule_id = %s"
# the fence: the row changes only if it still holds the version the caller read — and
# the very document this update was built over (a schedule deleted and created again
# in between is at version 1 again, with another identity)
_UPDATE: Final = (
    "UPDATE @schema@.schedules SET version = %s, due_at = %s::timestamptz, document = %s "
    "WHERE tenant = %s AND schedule_id = %s AND version = %s AND document = %s "
    "RETURNING version"
)
_DELETE: Final = (
    "DELETE FROM @schema@.schedules WHERE tenant = %s AND schedule_id = %s RETURNING version"
)
# keyset pages in (schedule id, tenant) order; one more row than asked says "more"
_LIST_ALL: Final = (
    "SELECT document FROM @schema@.schedules "
    "WHERE (%s::text IS NULL OR (schedule_id, tenant) > (%s::text, %s::text)) "
    "ORDER BY schedule_id, tenant LIMIT %s"
)
_LIST_OWNER: Final = (
    "SELECT document FROM @schema@.schedules WHERE tenant = %s "
    "AND (%s::text IS NULL OR (schedule_id, tenant) > (%s::text, %s::text)) "
    "ORDER BY schedule_id LIMIT %s"
)
# the moment is a sub-select (evaluated once) so it bounds the index scan: a bare
# clock_timestamp() is volatile, and would only filter a walk of every future row
_DUE: Final = (
    "SELECT document FROM @schema@.schedules "
    "WHERE due_at IS NOT NULL "
    "AND due_at <= (SELECT coalesce(%s::timestamptz, clock_timestamp())) "
    "ORDER BY due_at, schedule_id, tenant LIMIT %s"
)
_NUL: Final = "PostgreSQL text cannot hold NUL characters"


class PostgresSchedules:
    """``ScheduleStore`` over one backend's :class:`~docket_postgres._engine.Engine`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def create_schedule(
        self, owner: OwnerScope, schedule: CronSchedule
    ) -> CronSchedule | Conflict | TooLarge:
        engine = self._engine
        stored = for_create(owner, schedule, engine.limits)
        data = check_limit(stored, engine.limits)
        if isinstance(data, TooLarge):
            return data
        key = tenant_key(owner)
        _require_storable(key, stored.id)
        rows = await engine.fetch(
            engine.q(_INSERT),
            (key, stored.id, stored.version, stored.due_at, data),
            write=True,
        )
        if not rows:
            return Conflict(f"schedule {stored.id!r} already exists")
        return stored

    async def update_schedule(
        self, owner: OwnerScope, schedule: CronSchedule, expected_version: int
    ) -> CronSchedule | NotFound | StaleCheckpoint | TooLarge:
        engine = self._engine
        key = tenant_key(require_owner(owner))
        schedule_id = _id_of(schedule)
        if not storable(key, schedule_id):
            return NotFound("schedule")
        found = await self._read_raw(key, schedule_id)
        if found is None:
            return NotFound("schedule")
        current, read = found
        new = for_update(current, schedule, expected_version, engine.limits)
        data = check_limit(new, engine.limits)
        if isinstance(data, TooLarge):
            return data
        if current.version != expected_version:
            return _stale(current, expected_version)
        rows = await engine.fetch(
            engine.q(_UPDATE),
            (new.version, new.due_at, data, key, schedule_id, expected_version, read),
            write=True,
        )
        if rows:
            return new
        # someone changed (or deleted) it between the read and the fenced write
        now_stored = await self._read(key, schedule_id)
        if now_stored is None:
            return NotFound("schedule")
        return _stale(now_stored, expected_version)

    async def fetch_schedule(self, owner: OwnerScope, schedule_id: str) -> CronSchedule | NotFound:
        key = tenant_key(require_owner(owner))
        schedule_id = _require_id(schedule_id)
        if not storable(key, schedule_id):
            return NotFound("schedule")
        found = await self._read(key, schedule_id)
        return NotFound("schedule") if found is None else found

    async def delete_schedule(self, owner: OwnerScope, schedule_id: str) -> bool:
        key = tenant_key(require_owner(owner))
        schedule_id = _require_id(schedule_id)
        if not storable(key, schedule_id):
            return False
        engine = self._engine
        rows = await engine.fetch(engine.q(_DELETE), (key, schedule_id), write=True)
        return bool(rows)

    async def list_schedules(
        self, scope: Scope, after: ScheduleCursor | None = None, limit: int = 100
    ) -> SchedulePage:
        scope = require_scope(scope)
        page_of((), after, limit)  # the argument checks, before any statement
        engine = self._engine
        start_id = after.schedule_id if after is not None else None
        start_tenant = (after.tenant_id or "") if after is not None else None
        if after is not None and not storable(start_id, start_tenant):
            raise ValueError(f"after: {_NUL}")
        if isinstance(scope, System):
            params: tuple[object, ...] = (
                start_id,
                start_id,
                start_tenant,
                min(limit, INT4_MAX) + 1,
            )
            rows = await engine.fetch(engine.q(_LIST_ALL), params, write=False)
        else:
            key = tenant_id_of(scope) or ""
            if not storable(key):
                return page_of((), after, limit)
            params = (key, start_id, start_id, start_tenant, min(limit, INT4_MAX) + 1)
            rows = await engine.fetch(engine.q(_LIST_OWNER), params, write=False)
        return page_of(self._decoded(rows), after, limit)

    async def due_schedules(
        self, now: datetime | None = None, limit: int = 100
    ) -> tuple[CronSchedule, ...]:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be a positive integer, got {limit!r}")
        engine = self._engine
        moment = engine.given(utc(now) if now is not None else None)
        rows = await engine.fetch(engine.q(_DUE), (moment, min(limit, INT4_MAX)), write=False)
        return tuple(self._decoded(rows))

    # -- rows -------------------------------------------------------------------------------------

    async def _read(self, key: str, schedule_id: str) -> CronSchedule | None:
        found = await self._read_raw(key, schedule_id)
        return None if found is None else found[0]

    async def _read_raw(self, key: str, schedule_id: str) -> tuple[CronSchedule, bytes] | None:
        """The stored schedule and the bytes it was decoded from."""
        engine = self._engine
        rows = await engine.fetch(engine.q(_FETCH), (key, schedule_id), write=False)
        if not rows:
            return None
        data = bytes(rows[0][0])
        return _decode((data,)), data

    @staticmethod
    def _decoded(rows: list[Row]) -> list[CronSchedule]:
        return [_decode(row) for row in rows]


def _decode(row: Row) -> CronSchedule:
    """A stored schedule document; one that cannot be read is a ``PermanentStoreError``."""
    try:
        return schedule_from_json(bytes(row[0]))
    except ValueError as exc:
        raise PermanentStoreError(f"a stored schedule document cannot be read: {exc}") from exc


def _stale(current: CronSchedule, expected_version: int) -> StaleCheckpoint:
    return StaleCheckpoint(
        f"schedule {current.id!r} is at version {current.version}, not {expected_version}"
    )


def _require_storable(key: str, schedule_id: str) -> None:
    if not storable(key, schedule_id):
        raise ValueError(f"schedule id: {_NUL}")


def _require_id(schedule_id: object) -> str:
    if not isinstance(schedule_id, str) or not schedule_id:
        raise ValueError(f"schedule_id must be a non-empty string, got {schedule_id!r}")
    return schedule_id


def _id_of(schedule: object) -> str:
    if not isinstance(schedule, CronSchedule):
        raise TypeError(f"expected a CronSchedule, got {type(schedule).__name__}")
    return _require_id(schedule.id)
