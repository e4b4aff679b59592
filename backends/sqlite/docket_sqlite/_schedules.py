"""Cron schedules (``SQLiteBackend.schedules``, ``Feature.SCHEDULES``; schema version 3).

The rules (what a create or an update stores, the size bound, how a page is cut) are the
contract's (``docket.contract.schedules``); this module adds only storage. Each schedule
is one ``docket_schedules`` row: the ``schedule_to_json`` document beside the columns the
queries need (``version`` for the fence, ``due_at_us`` for ``due_schedules``, NULL when
paused or finished). Every change is one ``BEGIN IMMEDIATE`` write whose UPDATE is
conditional on the version read, so of several writers (threads, processes) fenced on
one version exactly one wins.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime

from docket.contract.errors import Conflict, NotFound, StaleCheckpoint, TooLarge
from docket.contract.schedules import check_limit, check_schedule, for_create, for_update, page_of
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
)
from docket.values import to_micros
from docket_sqlite._engine import Engine
from docket_sqlite._rows import tenant_key
from docket_sqlite._threads import Done

#: Due schedules of every owner, oldest ``due_at`` first (served by a partial index).
DUE_SCHEDULES_SQL = (
    "SELECT document FROM docket_schedules WHERE due_at_us IS NOT NULL AND due_at_us <= ? "
    "ORDER BY due_at_us, schedule_id, tenant LIMIT ?"
)


def _due_us(schedule: CronSchedule) -> int | None:
    due = schedule.due_at
    return None if due is None else to_micros(due)


def _require_id(schedule_id: object) -> str:
    if not isinstance(schedule_id, str) or not schedule_id:
        raise ValueError(f"schedule_id must be a non-empty string, got {schedule_id!r}")
    return schedule_id


def _require_limit(limit: object) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    return limit


class SQLiteScheduleStore:
    """Schedules of every owner in one table (``SQLiteBackend.schedules``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def create_schedule(
        self, owner: OwnerScope, schedule: CronSchedule
    ) -> CronSchedule | Conflict | TooLarge:
        limits = self._engine.limits
        stored = for_create(owner, schedule, limits)
        data = check_limit(stored, limits)
        if isinstance(data, TooLarge):
            return data
        key = tenant_key(owner)

        def job(conn: sqlite3.Connection) -> Done[CronSchedule | Conflict]:
            cursor = conn.execute(
                "INSERT INTO docket_schedules (tenant, schedule_id, version, due_at_us, "
                "document) VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, schedule_id) DO NOTHING",
                (key, stored.id, stored.version, _due_us(stored), data),
            )
            if cursor.rowcount != 1:
                return Done(Conflict(f"schedule {stored.id!r} already exists"), commit=False)
            return Done(stored)

        return await self._engine.write(job)

    async def update_schedule(
        self, owner: OwnerScope, schedule: CronSchedule, expected_version: int
    ) -> CronSchedule | NotFound | StaleCheckpoint | TooLarge:
        limits = self._engine.limits
        key = tenant_key(require_owner(owner))
        if not isinstance(expected_version, int) or isinstance(expected_version, bool):
            raise TypeError("expected_version must be an int")
        schedule_id = _require_id(check_schedule(schedule, limits).id)

        def job(
            conn: sqlite3.Connection,
        ) -> Done[CronSchedule | NotFound | StaleCheckpoint | TooLarge]:
            row = conn.execute(
                "SELECT document FROM docket_schedules WHERE tenant = ? AND schedule_id = ?",
                (key, schedule_id),
            ).fetchone()
            if row is None:
                return Done(NotFound("schedule"), commit=False)
            current = schedule_from_json(bytes(row[0]))
            new = for_update(current, schedule, expected_version, limits)
            data = check_limit(new, limits)
            if isinstance(data, TooLarge):
                return Done(data, commit=False)
            # the fence is the UPDATE's own condition: no row matches unless the stored
            # version is still the one the caller read
            cursor = conn.execute(
                "UPDATE docket_schedules SET version = ?, due_at_us = ?, document = ? "
                "WHERE tenant = ? AND schedule_id = ? AND version = ?",
                (new.version, _due_us(new), data, key, schedule_id, expected_version),
            )
            if cursor.rowcount != 1:
                return Done(
                    StaleCheckpoint(
                        f"schedule {schedule_id!r} is at version {current.version}, "
                        f"not {expected_version}"
                    ),
                    commit=False,
                )
            return Done(new)

        return await self._engine.write(job)

    async def fetch_schedule(self, owner: OwnerScope, schedule_id: str) -> CronSchedule | NotFound:
        key = tenant_key(require_owner(owner))
        _require_id(schedule_id)

        def job(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT document FROM docket_schedules WHERE tenant = ? AND schedule_id = ?",
                (key, schedule_id),
            ).fetchone()
            return None if row is None else bytes(row[0])

        data = await self._engine.read(job)
        return NotFound("schedule") if data is None else schedule_from_json(data)

    async def delete_schedule(self, owner: OwnerScope, schedule_id: str) -> bool:
        key = tenant_key(require_owner(owner))
        _require_id(schedule_id)

        def job(conn: sqlite3.Connection) -> Done[bool]:
            cursor = conn.execute(
                "DELETE FROM docket_schedules WHERE tenant = ? AND schedule_id = ?",
                (key, schedule_id),
            )
            deleted = cursor.rowcount == 1
            return Done(deleted, commit=deleted)

        return await self._engine.write(job)

    async def list_schedules(
        self, scope: Scope, after: ScheduleCursor | None = None, limit: int = 100
    ) -> SchedulePage:
        scope = require_scope(scope)
        _require_limit(limit)
        if after is not None and not isinstance(after, ScheduleCursor):
            raise TypeError("after must be a ScheduleCursor or None")
        sql, params = list_schedules_sql(scope, after, limit)

        def job(conn: sqlite3.Connection) -> list[bytes]:
            return [bytes(row[0]) for row in conn.execute(sql, params).fetchall()]

        documents = await self._engine.read(job)
        return page_of((schedule_from_json(d) for d in documents), after, limit)

    async def due_schedules(
        self, now: datetime | None = None, limit: int = 100
    ) -> tuple[CronSchedule, ...]:
        _require_limit(limit)
        moment_us = self._engine.now_us(now)

        def job(conn: sqlite3.Connection) -> list[bytes]:
            rows = conn.execute(DUE_SCHEDULES_SQL, (moment_us, limit)).fetchall()
            return [bytes(row[0]) for row in rows]

        return tuple(schedule_from_json(d) for d in await self._engine.read(job))


def list_schedules_sql(
    scope: Scope, after: ScheduleCursor | None, limit: int
) -> tuple[str, list[object]]:
    """The statement behind ``list_schedules``: ascending by ``(schedule_id, tenant)``, the
    keyset after ``after``, one row past the page (so ``page_of`` knows there is more)."""
    clauses: list[str] = []
    params: list[object] = []
    if not isinstance(scope, System):
        clauses.append("tenant = ?")
        params.append(tenant_key(scope))
    if after is not None:
        clauses.append("(schedule_id, tenant) > (?, ?)")
        params.extend([after.schedule_id, after.tenant_id or ""])
    where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
    params.append(limit + 1)
    sql = f"SELECT document FROM docket_schedules {where}ORDER BY schedule_id, tenant LIMIT ?"
    return sql, params


__all__ = ["DUE_SCHEDULES_SQL", "SQLiteScheduleStore", "list_schedules_sql"]
