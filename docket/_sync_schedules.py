"""The blocking twins of :class:`docket._facade_schedules.ScheduleMethods`, mixed into
:class:`~docket.SyncDocket` (each delegates to the ``Docket`` method of the same name;
tests/test_schedules_facade.py holds the two to the same signatures)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from docket.records import CronSchedule, GraphRef, Overlap, Run, ScheduleCursor, SchedulePage

if TYPE_CHECKING:
    from docket.facade import Docket

__all__ = ["SyncScheduleMethods"]

_T = TypeVar("_T")


class SyncScheduleMethods:
    if TYPE_CHECKING:
        docket: Docket

        def _call(self, make: Callable[[], Awaitable[_T]]) -> _T: ...

    def create_schedule(
        self,
        schedule_id: str,
        graph: GraphRef | str,
        *,
        cron: str,
        input: Mapping[str, object] | None = None,
        timezone: str = "UTC",
        overlap: Overlap | str = "skip",
        catchup: timedelta = timedelta(0),
        paused: bool = False,
        tenant_id: str | None = None,
    ) -> CronSchedule:
        return self._call(
            lambda: self.docket.create_schedule(
                schedule_id,
                graph,
                cron=cron,
                input=input,
                timezone=timezone,
                overlap=overlap,
                catchup=catchup,
                paused=paused,
                tenant_id=tenant_id,
            )
        )

    def pause_schedule(self, schedule_id: str, *, tenant_id: str | None = None) -> CronSchedule:
        return self._call(lambda: self.docket.pause_schedule(schedule_id, tenant_id=tenant_id))

    def resume_schedule(self, schedule_id: str, *, tenant_id: str | None = None) -> CronSchedule:
        return self._call(lambda: self.docket.resume_schedule(schedule_id, tenant_id=tenant_id))

    def delete_schedule(self, schedule_id: str, *, tenant_id: str | None = None) -> bool:
        return self._call(lambda: self.docket.delete_schedule(schedule_id, tenant_id=tenant_id))

    def trigger_schedule(self, schedule_id: str, *, tenant_id: str | None = None) -> Run:
        return self._call(lambda: self.docket.trigger_schedule(schedule_id, tenant_id=tenant_id))

    def get_schedule(self, schedule_id: str, *, tenant_id: str | None = None) -> CronSchedule:
        return self._call(lambda: self.docket.get_schedule(schedule_id, tenant_id=tenant_id))

    def list_schedules(
        self,
        *,
        limit: int = 100,
        after: ScheduleCursor | None = None,
        tenant_id: str | None = None,
        all_tenants: bool = False,
    ) -> SchedulePage:
        return self._call(
            lambda: self.docket.list_schedules(
                limit=limit, after=after, tenant_id=tenant_id, all_tenants=all_tenants
            )
        )


def _copy_docstrings() -> None:
    from docket._facade_schedules import ScheduleMethods

    for name, method in vars(SyncScheduleMethods).items():
        original = getattr(ScheduleMethods, name, None)
        if callable(method) and not method.__doc__ and original is not None:
            method.__doc__ = original.__doc__


_copy_docstrings()
