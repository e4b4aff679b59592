"""The one implementation of the schedule store's rules (layer 4), shared by every backend.

A backend adds only its native atomic write: it calls :func:`for_create` /
:func:`for_update` to get the exact document to store (and the ``due_at`` to index), and
:func:`page_of` to cut a listing. Malformed input raises ``TypeError``/``ValueError``
before anything is written; a document over ``Limits.max_run_bytes`` is ``TooLarge``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import attrs

from docket.contract.capabilities import Limits
from docket.contract.errors import TooLarge
from docket.records import (
    CronSchedule,
    Overlap,
    OwnerScope,
    ScheduleCursor,
    SchedulePage,
    require_owner,
    schedule_order,
    schedule_to_json,
    tenant_id_of,
)
from docket.values import durable_errors

__all__ = ["check_limit", "check_schedule", "for_create", "for_update", "page_of"]


def _utc(value: object) -> bool:
    return (
        isinstance(value, datetime)
        and value.utcoffset() is not None
        and value.utcoffset().total_seconds() == 0  # type: ignore[union-attr]  # checked
    )


def check_schedule(schedule: object, limits: Limits) -> CronSchedule:
    """``schedule`` if it is a storable :class:`CronSchedule`, else ``TypeError``/``ValueError``
    naming every problem."""
    if not isinstance(schedule, CronSchedule):
        raise TypeError(f"expected a CronSchedule, got {type(schedule).__name__}")
    problems: list[str] = []
    for name in ("id", "graph_id", "cron", "timezone"):
        value = getattr(schedule, name)
        if not isinstance(value, str) or not value:
            problems.append(f"{name} must be a non-empty string")
        elif name in ("id", "graph_id") and len(value.encode()) > limits.max_id_bytes:
            problems.append(f"{name} is longer than {limits.max_id_bytes} bytes")
    if schedule.graph_hash is not None and (
        not isinstance(schedule.graph_hash, str) or not schedule.graph_hash
    ):
        problems.append("graph_hash must be a non-empty string or None")
    if not isinstance(schedule.overlap, Overlap):
        problems.append(f"overlap must be one of {', '.join(o.value for o in Overlap)}")
    if (
        not isinstance(schedule.catchup_ms, int)
        or isinstance(schedule.catchup_ms, bool)
        or schedule.catchup_ms < 0
    ):
        problems.append("catchup_ms must be a non-negative integer")
    if not isinstance(schedule.paused, bool):
        problems.append("paused must be a bool")
    for name in ("created_at", "updated_at"):
        if not _utc(getattr(schedule, name)):
            problems.append(f"{name} must be an aware UTC datetime")
    for name in ("next_tick_at", "buffered_tick_at", "last_tick_at"):
        value = getattr(schedule, name)
        if value is not None and not _utc(value):
            problems.append(f"{name} must be an aware UTC datetime or None")
    if schedule.last_run_id is not None and (
        not isinstance(schedule.last_run_id, str) or not schedule.last_run_id
    ):
        problems.append("last_run_id must be a non-empty string or None")
    for name in ("input", "metadata"):
        value = getattr(schedule, name)
        if not isinstance(value, dict):
            problems.append(f"{name} must be an object")
        else:
            problems.extend(durable_errors(value, name))
    if problems:
        raise ValueError("not a storable schedule: " + "; ".join(problems))
    return schedule


def check_limit(schedule: CronSchedule, limits: Limits) -> bytes | TooLarge:
    """The stored encoding, or ``TooLarge`` past ``max_run_bytes`` (a schedule's input
    becomes a run's input, so it is held to the same bound)."""
    data = schedule_to_json(schedule)
    if len(data) > limits.max_run_bytes:
        return TooLarge("max_run_bytes", len(data), limits.max_run_bytes)
    return data


def for_create(owner: OwnerScope, schedule: object, limits: Limits) -> CronSchedule:
    """The document a create stores: version 1, owned by ``owner``."""
    owner = require_owner(owner)
    checked = check_schedule(schedule, limits)
    return attrs.evolve(checked, version=1, tenant_id=tenant_id_of(owner))


def for_update(
    stored: CronSchedule, schedule: object, expected_version: int, limits: Limits
) -> CronSchedule:
    """The document an update stores over ``stored`` (whose version matched): the next
    version, with the stored identity (id, created_at, tenant) kept."""
    if not isinstance(expected_version, int) or isinstance(expected_version, bool):
        raise TypeError("expected_version must be an int")
    checked = check_schedule(schedule, limits)
    return attrs.evolve(
        checked,
        id=stored.id,
        created_at=stored.created_at,
        tenant_id=stored.tenant_id,
        version=expected_version + 1,
    )


def page_of(
    schedules: Iterable[CronSchedule], after: ScheduleCursor | None, limit: int
) -> SchedulePage:
    """One listing page from any superset of the page (sorted and cut here)."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    if after is not None and not isinstance(after, ScheduleCursor):
        raise TypeError("after must be a ScheduleCursor or None")
    start = None if after is None else (after.schedule_id, after.tenant_id or "")
    ordered = sorted(
        (s for s in schedules if start is None or schedule_order(s) > start),
        key=schedule_order,
    )
    page = tuple(ordered[:limit])
    last = page[-1] if page else None
    cursor = ScheduleCursor(last.id, last.tenant_id) if last is not None else after
    return SchedulePage(schedules=page, next_after=cursor, has_more=len(ordered) > limit)
