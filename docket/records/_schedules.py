"""Cron schedules as stored records (layer 1), and their one storage encoding.

A schedule is data a backend keeps and hands back; what a tick *does* (which run it starts,
how missed ticks are made up) is worked out by the runtime from this record and the
cron library (``docket.schedules``). The backend stores the document and the few columns
it indexes (``due_at``), and fences every change on ``version``.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

import attrs

from docket.records._codec import _structure, converter
from docket.values import JSONDict, canonical_json


class Overlap(StrEnum):
    """What a tick does while the schedule's previous run is still unfinished."""

    SKIP = "skip"  # the tick starts nothing
    ALLOW = "allow"  # the tick starts its run anyway
    BUFFER_ONE = "buffer_one"  # the tick waits for the previous run; later ones are dropped


@attrs.frozen(kw_only=True)
class CronSchedule:
    """One schedule of one owner scope (``tenant_id``, set by the store).

    ``next_tick_at`` is the first tick not yet dealt with (``None``: the cron expression
    has no further tick); ``buffered_tick_at`` a tick held back by ``buffer_one`` until the
    previous run ends. ``catchup_ms``: how old a missed tick may be and still start its run
    (0: a missed tick is skipped; the next one on time still starts). ``graph_hash``
    pins a graph version (``None``: the newest saved version at each tick).
    ``version`` fences changes: a store writes a change only over the version it was
    read at, and stores it as the next one.
    """

    id: str
    graph_id: str
    cron: str
    created_at: datetime
    updated_at: datetime
    timezone: str = "UTC"
    input: JSONDict = attrs.field(factory=dict)
    overlap: Overlap = Overlap.SKIP
    catchup_ms: int = 0
    graph_hash: str | None = None
    paused: bool = False
    next_tick_at: datetime | None = None
    buffered_tick_at: datetime | None = None
    last_tick_at: datetime | None = None
    last_run_id: str | None = None
    version: int = 1
    tenant_id: str | None = None
    metadata: JSONDict = attrs.field(factory=dict)

    @property
    def due_at(self) -> datetime | None:
        """When a ticker must look at this schedule next (``None``: paused or done).

        The column a store indexes for :meth:`ScheduleStore.due_schedules`."""
        if self.paused:
            return None
        times = [t for t in (self.next_tick_at, self.buffered_tick_at) if t is not None]
        return min(times) if times else None


@attrs.frozen
class ScheduleCursor:
    """Where a page of schedules stopped: ascending by ``(schedule_id, tenant_id or "")``."""

    schedule_id: str
    tenant_id: str | None


@attrs.frozen(kw_only=True)
class SchedulePage:
    schedules: tuple[CronSchedule, ...]
    next_after: ScheduleCursor | None
    has_more: bool


def schedule_order(schedule: CronSchedule) -> tuple[str, str]:
    """The one listing order of schedules (what :class:`ScheduleCursor` points into)."""
    return schedule.id, schedule.tenant_id or ""


def schedule_to_dict(schedule: CronSchedule) -> JSONDict:
    data: JSONDict = converter.unstructure(schedule)
    return data


def schedule_from_dict(data: object) -> CronSchedule:
    return _structure(data, CronSchedule)


def schedule_to_json(schedule: CronSchedule) -> bytes:
    return canonical_json(schedule_to_dict(schedule))


def schedule_from_json(data: bytes | str) -> CronSchedule:
    import orjson

    return schedule_from_dict(orjson.loads(data))


__all__ = [
    "CronSchedule",
    "Overlap",
    "ScheduleCursor",
    "SchedulePage",
    "schedule_from_dict",
    "schedule_from_json",
    "schedule_order",
    "schedule_to_dict",
    "schedule_to_json",
]
