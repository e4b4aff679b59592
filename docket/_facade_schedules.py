"""The facade's cron schedules: :class:`ScheduleMethods`, mixed into :class:`~docket.Docket`.

A schedule is stored by the backend's schedule store (``Feature.SCHEDULES``); the runs
of its ticks are started by the ticker every worker runs
(:mod:`docket.runtime.schedules`). Everything here validates before it writes: a bad
cron expression, time zone, option or input raises and stores nothing.
docs/schedules.md has the concepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, cast

import attrs

from docket._facade_args import require_id, require_limit, shown
from docket.contract import errors as contract
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.protocols import Backend, ScheduleStore
from docket.core.errors import CoreError
from docket.errors import (
    InvalidGraph,
    InvalidInput,
    InvalidOptions,
    InvalidSchedule,
    InvalidTenant,
    NotFound,
    StaleCheckpoint,
    Unsupported,
    from_contract,
    from_core,
)
from docket.graph.compiler import RuntimeGraph
from docket.records import (
    SCHEDULE_KEY,
    SYSTEM,
    CronSchedule,
    GraphRef,
    Overlap,
    OwnerScope,
    Run,
    ScheduleCursor,
    SchedulePage,
    Scope,
)
from docket.runtime.graphs import GraphCache
from docket.runtime.lifecycle import Ids, Observers
from docket.runtime.schedules import ScheduleTicker, StartProblem, prepare_start
from docket.schedules import manual_run_id, parse_cron, schedule_metadata
from docket.settings import Settings
from docket.telemetry import Telemetry
from docket.values import JSONDict, JSONValue

__all__ = ["ScheduleMethods"]

#: The longest tail a schedule's run ids add to the schedule id (``@manual-run_`` + 16 hex).
_RUN_ID_TAIL = len("@manual-run_") + 16
#: Fenced changes (pause, resume) re-read and retry this often when a ticker races them.
_FENCE_TRIES = 8


class ScheduleMethods:
    """The schedule methods of :class:`~docket.Docket` (which provides what is declared
    under ``TYPE_CHECKING``)."""

    if TYPE_CHECKING:
        _store: Backend
        _ids: Ids
        _describe: GraphCache
        _observers: Observers
        settings: Settings
        telemetry: Telemetry

        @property
        def capabilities(self) -> Capabilities: ...
        def _owner(self, tenant_id: object) -> OwnerScope: ...
        def _ready(self) -> None: ...
        async def _ref(self, owner: OwnerScope, graph: GraphRef | str) -> GraphRef: ...
        async def _runtime_graph(self, owner: OwnerScope, ref: GraphRef) -> RuntimeGraph: ...

    # -- plumbing --------------------------------------------------------------------------

    def _schedules(self, action: str) -> ScheduleStore:
        if Feature.SCHEDULES not in self.capabilities.features:
            raise Unsupported(
                f"cannot {action}: this backend ({self.capabilities.name or 'unnamed'}) does "
                f"not declare the {Feature.SCHEDULES!s} feature cron schedules need",
                phase="schedule",
                details={"feature": str(Feature.SCHEDULES)},
            )
        store: ScheduleStore = getattr(self._store, "schedules")  # noqa: B009  # optional
        return store

    def _schedule_ticker(self) -> ScheduleTicker | None:
        """A ticker for a worker of this Docket (``None``: the backend has no schedules)."""
        if Feature.SCHEDULES not in self.capabilities.features:
            return None
        return ScheduleTicker(
            self._store,
            self._describe,
            self.settings,
            ids=self._ids,
            observers=self._observers,
            telemetry=self.telemetry,
        )

    async def _now(self) -> datetime:
        return await self._store.now()

    async def _fetch_schedule(self, owner: OwnerScope, schedule_id: str) -> CronSchedule:
        found = await self._schedules("read a schedule").fetch_schedule(owner, schedule_id)
        if isinstance(found, contract.NotFound):
            raise from_contract(found, subject=f"schedule {schedule_id!r}")
        return found

    # -- writes ----------------------------------------------------------------------------

    async def create_schedule(
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
        """Store a cron schedule of ``graph``: each tick of ``cron`` in ``timezone`` (an
        IANA name) starts a run with ``input``.

        ``graph`` is a graph id (each tick runs its newest saved version) or a
        :class:`GraphRef` (pinned). ``overlap`` says what a tick does while the previous
        run is unfinished (``skip``, ``allow``, ``buffer_one``); ``catchup`` how old a
        missed tick may be and still start its run. The input is checked against the
        graph now, as :meth:`start_run` would. Raises ``InvalidSchedule`` (cron, time zone,
        options), ``InvalidInput``, ``NotFound`` (graph), ``Conflict`` (the id is taken),
        ``Unsupported`` (the backend has no schedules) — writing nothing.
        """
        owner = self._owner(tenant_id)
        self._ready()
        store = self._schedules("create a schedule")
        require_id("schedule_id", schedule_id)
        reasons: list[str] = []
        if "@" in schedule_id:
            reasons.append("schedule_id must not contain '@' (it separates the tick in run ids)")
        limit = self.capabilities.limits.max_id_bytes - _RUN_ID_TAIL
        if len(schedule_id.encode()) > limit:
            reasons.append(f"schedule_id is longer than {limit} bytes (its run ids must fit)")
        spec = parse_cron(cron, timezone)
        if isinstance(spec, list):
            reasons.extend(spec)
        try:
            chosen = Overlap(overlap)
        except ValueError:
            chosen = Overlap.SKIP
            names = ", ".join(o.value for o in Overlap)
            reasons.append(f"overlap must be one of {names}, got {shown(overlap)}")
        if not isinstance(catchup, timedelta) or catchup < timedelta(0):
            reasons.append(f"catchup must be a non-negative timedelta, got {shown(catchup)}")
        if not isinstance(paused, bool):
            reasons.append(f"paused must be True or False, got {shown(paused)}")
        if reasons:
            raise InvalidSchedule(
                f"schedule {schedule_id!r} cannot be created: " + "; ".join(reasons),
                phase="schedule",
                details={"reasons": list[JSONValue](reasons)},
            )
        assert not isinstance(spec, list)
        if input is not None and not isinstance(input, Mapping):
            raise InvalidInput(
                "the schedule input must be a map",
                phase="init",
                details={"reasons": [f"expected a map, got {type(input).__name__}"]},
            )
        ref = await self._ref(owner, graph)
        rtg = await self._runtime_graph(owner, ref)
        now = await self._now()
        # the same check start_run makes, on a run that is never written
        checked = prepare_start(rtg, input, run_id=f"{schedule_id}@check", now=now, metadata={})
        if isinstance(checked, CoreError):
            raise from_core(checked)
        schedule = CronSchedule(
            id=schedule_id,
            graph_id=ref.graph_id,
            graph_hash=ref.graph_hash if isinstance(graph, GraphRef) else None,
            cron=cron,
            timezone=timezone,
            input=cast(JSONDict, dict(input or {})),  # as given; checked above
            overlap=chosen,
            catchup_ms=int(catchup.total_seconds() * 1000),
            paused=paused,
            next_tick_at=spec.first_after(now),
            created_at=now,
            updated_at=now,
        )
        try:
            stored = await store.create_schedule(owner, schedule)
        except (TypeError, ValueError) as exc:
            raise InvalidSchedule(
                str(exc), phase="schedule", details={"reasons": [str(exc)]}
            ) from None
        if isinstance(stored, CronSchedule):
            return stored
        raise from_contract(stored, subject=f"schedule {schedule_id!r}")

    async def _change(self, owner: OwnerScope, schedule_id: str, change: _Change) -> CronSchedule:
        """Apply ``change`` to the stored schedule, fenced on its version (re-read when a
        ticker advanced it meanwhile)."""
        store = self._schedules("change a schedule")
        for _ in range(_FENCE_TRIES):
            current = await self._fetch_schedule(owner, schedule_id)
            wanted = change(current, await self._now())
            if wanted == current:
                return current
            stored = await store.update_schedule(owner, wanted, current.version)
            if isinstance(stored, CronSchedule):
                return stored
            if not isinstance(stored, contract.StaleCheckpoint):
                raise from_contract(stored, subject=f"schedule {schedule_id!r}")
        raise StaleCheckpoint(f"schedule {schedule_id!r} kept changing; try again")

    async def pause_schedule(
        self, schedule_id: str, *, tenant_id: str | None = None
    ) -> CronSchedule:
        """Stop starting runs of the schedule (its runs so far are unaffected); a paused
        schedule comes back unchanged. Raises ``NotFound``."""
        owner = self._owner(tenant_id)
        self._ready()
        require_id("schedule_id", schedule_id)

        def pause(current: CronSchedule, now: datetime) -> CronSchedule:
            if current.paused:
                return current
            return attrs.evolve(current, paused=True, updated_at=now)

        return await self._change(owner, schedule_id, pause)

    async def resume_schedule(
        self, schedule_id: str, *, tenant_id: str | None = None
    ) -> CronSchedule:
        """Start ticking again from now: the ticks of the paused time are not made up
        (a held ``buffer_one`` tick is dropped too). A running schedule comes back
        unchanged. Raises ``NotFound``."""
        owner = self._owner(tenant_id)
        self._ready()
        require_id("schedule_id", schedule_id)

        def resume(current: CronSchedule, now: datetime) -> CronSchedule:
            if not current.paused:
                return current
            spec = parse_cron(current.cron, current.timezone)
            following = None if isinstance(spec, list) else spec.first_after(now)
            return attrs.evolve(
                current,
                paused=False,
                next_tick_at=following,
                buffered_tick_at=None,
                updated_at=now,
            )

        return await self._change(owner, schedule_id, resume)

    async def delete_schedule(self, schedule_id: str, *, tenant_id: str | None = None) -> bool:
        """Delete the schedule (the runs it started are kept); False when there was none."""
        owner = self._owner(tenant_id)
        self._ready()
        require_id("schedule_id", schedule_id)
        return await self._schedules("delete a schedule").delete_schedule(owner, schedule_id)

    async def trigger_schedule(self, schedule_id: str, *, tenant_id: str | None = None) -> Run:
        """Start a run of the schedule now, outside its cron (id
        ``<schedule_id>@manual-<unique>``); the schedule's cursor does not move, and the
        run does not count as its previous run for ``overlap``. Raises ``NotFound``,
        ``InvalidInput`` (the input no longer fits the newest graph)."""
        owner = self._owner(tenant_id)
        self._ready()
        require_id("schedule_id", schedule_id)
        schedule = await self._fetch_schedule(owner, schedule_id)
        ticker = self._schedule_ticker()
        assert ticker is not None  # _fetch_schedule checked the feature
        now = await self._now()
        run_id = manual_run_id(schedule_id, self._ids("run"))
        meta: dict[str, JSONValue] = {
            SCHEDULE_KEY: schedule_metadata(schedule_id, now, manual=True)
        }
        result = await ticker.start(owner, schedule, run_id=run_id, metadata=meta)
        if isinstance(result, Run):
            return result
        if isinstance(result, StartProblem):
            kind = {
                "missing": NotFound,
                "unknown_queue": NotFound,
                "invalid_input": InvalidInput,
            }.get(result.kind, InvalidGraph)
            raise kind(f"schedule {schedule_id!r} cannot start a run: {result.message}")
        raise from_contract(result, subject=f"run {run_id!r}")

    # -- reads -----------------------------------------------------------------------------

    async def get_schedule(self, schedule_id: str, *, tenant_id: str | None = None) -> CronSchedule:
        """The stored schedule. Raises ``NotFound``."""
        owner = self._owner(tenant_id)
        self._ready()
        require_id("schedule_id", schedule_id)
        return await self._fetch_schedule(owner, schedule_id)

    async def list_schedules(
        self,
        *,
        limit: int = 100,
        after: ScheduleCursor | None = None,
        tenant_id: str | None = None,
        all_tenants: bool = False,
    ) -> SchedulePage:
        """Schedules ascending by id; ``next_after`` pages on. ``all_tenants=True``: every
        tenant's (an operator view; not with ``tenant_id``)."""
        scope: Scope
        if all_tenants:
            if tenant_id is not None:
                raise InvalidTenant("all_tenants=True lists every tenant: drop tenant_id")
            scope = SYSTEM
        else:
            scope = self._owner(tenant_id)
        self._ready()
        require_limit(limit)
        if after is not None and not isinstance(after, ScheduleCursor):
            raise InvalidOptions("after must be a ScheduleCursor (a page's next_after)")
        return await self._schedules("list schedules").list_schedules(scope, after, limit)


if TYPE_CHECKING:
    from collections.abc import Callable

    _Change = Callable[[CronSchedule, datetime], CronSchedule]
