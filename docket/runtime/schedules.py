"""The schedule ticker (the I/O part of cron schedules): every worker runs one.

One pass (:meth:`ScheduleTicker.tick`): read ``backend.schedules.due_schedules(now)``, and
for each due schedule repeat the pure step (:func:`docket.schedules.step`) until it is
no longer due at ``now``:

1. the step names a tick to start (or none) and the schedule's next state;
2. a tick's run is started with ``initialize`` under the id ``<schedule_id>@<tick>``;
   ``Conflict`` means another ticker (or this one, before a crash) started it already —
   the tick is done either way;
3. the schedule is advanced with ``update_schedule`` fenced on the version read. A stale
   fence means someone else advanced it: read it again and go on from what is stored.

A tick therefore starts at most one run (the run id) and at least one while some ticker
runs (the cursor moves only after the start is durable); a crash between 2 and 3 makes
the next pass repeat the tick, find its run (``Conflict``) and only advance.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime

import attrs

from docket.contract.errors import Conflict, NotFound, Retryable, StaleCheckpoint
from docket.contract.protocols import Backend, ScheduleStore
from docket.core.errors import CoreError
from docket.core.init import build_initial_run, initialize
from docket.core.moment import Moment, Terminated
from docket.core.proposals import init_proposal
from docket.graph.compiler import RuntimeGraph
from docket.records import (
    DEFAULT_QUEUE,
    SCHEDULE_KEY,
    TENANTLESS,
    CronSchedule,
    GraphRef,
    OwnerScope,
    Run,
    Tenant,
    tenant_id_of,
)
from docket.runtime.graphs import GraphCache, GraphProblem
from docket.runtime.lifecycle import (
    CommitContext,
    CommitPolicy,
    Ids,
    Observers,
    commit,
    stamp_clock,
)
from docket.runtime.queues import QueueView, run_queue, uses_queues
from docket.schedules import parse_cron, run_id_for, schedule_metadata, step
from docket.settings import Settings
from docket.telemetry import Telemetry, stamp_logger
from docket.values import JSONValue

__all__ = ["ScheduleTicker", "StartProblem", "TickReport", "owner_of", "prepare_start"]

log = stamp_logger(logging.getLogger("docket.schedules"))

#: Steps one pass takes per schedule (a catch-up of more ticks goes on next pass).
_MAX_STEPS = 1000


def owner_of(schedule: CronSchedule) -> OwnerScope:
    return TENANTLESS if schedule.tenant_id is None else Tenant(schedule.tenant_id)


@attrs.frozen
class StartProblem:
    """Why a schedule's run cannot be started (its graph or input), as a message."""

    kind: str
    message: str


@attrs.define
class TickReport:
    """What ticker passes did (counters, for tests and logs)."""

    passes: int = 0
    started: list[str] = attrs.field(factory=list)  # run ids this ticker wrote
    already: list[str] = attrs.field(factory=list)  # run ids found started (Conflict)
    skipped: int = 0  # ticks passed over without a run (catch-up, overlap)
    unstartable: int = 0  # ticks whose run could not be built (graph, input)
    stale: int = 0  # fences lost to another ticker


async def schedule_graph(
    backend: Backend, graphs: GraphCache, owner: OwnerScope, schedule: CronSchedule
) -> RuntimeGraph | StartProblem:
    """The graph a tick runs: the pinned version, or the newest saved one now."""
    if schedule.graph_hash is not None:
        ref = GraphRef(schedule.graph_id, schedule.graph_hash)
    else:
        found = await backend.graphs.fetch_latest_graph_ref(owner, schedule.graph_id)
        if isinstance(found, NotFound):
            return StartProblem("missing", f"graph {schedule.graph_id!r} has no saved version")
        ref = found
    rtg = await graphs.get(owner, ref)
    if isinstance(rtg, GraphProblem):
        return StartProblem(rtg.kind, rtg.message)
    return rtg


def prepare_start(
    rtg: RuntimeGraph,
    input: Mapping[str, object] | None,
    *,
    run_id: str,
    now: datetime,
    metadata: Mapping[str, JSONValue],
) -> Moment | CoreError:
    """The initial moment of a run (what ``Docket.start_run`` and child starts build):
    a ``CoreError`` when the input does not fit the graph. Writes nothing."""
    created = build_initial_run(rtg, input, run_id=run_id, now=now, metadata=metadata)
    moment = initialize(rtg, created, now=now)
    assert not isinstance(moment, Terminated)  # a created run is never terminal
    return moment


class ScheduleTicker:
    """Starts the runs of due schedule ticks, exactly once per tick (module docstring)."""

    def __init__(
        self,
        backend: Backend,
        graphs: GraphCache,
        settings: Settings,
        *,
        ids: Ids,
        observers: Observers | None = None,
        telemetry: Telemetry | None = None,
        batch: int = 100,
    ) -> None:
        self._backend = backend
        self._graphs = graphs
        self._ids = ids
        self._observers = observers
        self._telemetry = telemetry
        self._batch = batch
        self._policy = CommitPolicy(
            attempts=settings.commit_attempts, backoff=settings.commit_backoff
        )
        self._stamp: Callable[[], Awaitable[datetime]] | None = None
        self.report = TickReport()

    @property
    def _store(self) -> ScheduleStore:
        store = getattr(self._backend, "schedules", None)
        if store is None:
            raise RuntimeError("the backend has no schedule store (Feature.SCHEDULES)")
        return store  # type: ignore[no-any-return]  # negotiated: a ScheduleStore

    async def _clock(self) -> datetime:
        if self._stamp is None:
            self._stamp = stamp_clock(self._backend)
        return await self._stamp()

    async def tick(self, now: datetime | None = None) -> TickReport:
        """One pass over the schedules due at ``now`` (``None``: the store's clock)."""
        moment = now if now is not None else await self._clock()
        self.report.passes += 1
        due = await self._store.due_schedules(moment, self._batch)
        for schedule in due:
            try:
                await self._advance(schedule, moment)
            except Exception:  # one schedule's failure must not stop the others
                log.exception("schedule %s could not be advanced", schedule.id)
        return self.report

    async def _advance(self, schedule: CronSchedule, now: datetime) -> None:
        owner = owner_of(schedule)
        spec = parse_cron(schedule.cron, schedule.timezone)
        if isinstance(spec, list):  # stored by an older version or by hand: leave it
            log.warning("schedule %s is unusable: %s", schedule.id, "; ".join(spec))
            return
        for _ in range(_MAX_STEPS):
            unfinished = await self._unfinished(owner, schedule)
            decided = step(spec, schedule, now, previous_unfinished=unfinished)
            if decided.schedule is None:
                return
            self.report.skipped += len(decided.skipped)
            if decided.start is not None and not await self._start(owner, schedule, decided.start):
                return  # the store is unavailable: the next pass tries the tick again
            stored = await self._store.update_schedule(owner, decided.schedule, schedule.version)
            if isinstance(stored, CronSchedule):
                schedule = stored
                continue
            if isinstance(stored, StaleCheckpoint):
                self.report.stale += 1
                fresh = await self._store.fetch_schedule(owner, schedule.id)
                if isinstance(fresh, NotFound):
                    return
                schedule = fresh
                continue
            log.warning("schedule %s could not be advanced: %r", schedule.id, stored)
            return

    async def _unfinished(self, owner: OwnerScope, schedule: CronSchedule) -> bool:
        """Whether the schedule's previous run is still going (a deleted one is not)."""
        if schedule.last_run_id is None:
            return False
        found = await self._backend.runs.fetch_run(owner, schedule.last_run_id)
        return isinstance(found, Run) and not found.status.terminal

    async def _start(self, owner: OwnerScope, schedule: CronSchedule, tick: datetime) -> bool:
        """Start ``tick``'s run; False only when the store stayed unavailable (a run that
        cannot be built — its graph gone, its input no longer fitting — is logged and the
        tick passed over, or the schedule would stop forever at it)."""
        run_id = run_id_for(schedule.id, tick)
        meta: dict[str, JSONValue] = {SCHEDULE_KEY: schedule_metadata(schedule.id, tick)}
        result = await self.start(owner, schedule, run_id=run_id, metadata=meta)
        if isinstance(result, Run):
            self.report.started.append(run_id)
        elif isinstance(result, Conflict):
            self.report.already.append(run_id)
        elif isinstance(result, Retryable):
            log.warning("tick %s of schedule %s: store unavailable", run_id, schedule.id)
            return False
        else:
            self.report.unstartable += 1
            log.warning("tick %s of schedule %s starts no run: %s", run_id, schedule.id, result)
        return True

    async def start(
        self,
        owner: OwnerScope,
        schedule: CronSchedule,
        *,
        run_id: str,
        metadata: Mapping[str, JSONValue],
    ) -> Run | Conflict | Retryable | StartProblem:
        """Start one run of ``schedule`` under ``run_id`` (also the facade's trigger)."""
        rtg = await schedule_graph(self._backend, self._graphs, owner, schedule)
        if isinstance(rtg, StartProblem):
            return rtg
        now = await self._clock()
        moment = prepare_start(rtg, schedule.input, run_id=run_id, now=now, metadata=metadata)
        if isinstance(moment, CoreError):
            return StartProblem("invalid_input", moment.message)
        proposal = init_proposal(moment, transition_id=self._ids("transition"))
        queue, priority = run_queue(rtg, None, None)  # the graph's policies, if any
        if uses_queues(queue, priority):
            problem = await self._queue_problem(queue)
            if problem is not None:
                return problem
            proposal = attrs.evolve(proposal, queue=queue, priority=priority)

        write = functools.partial(
            self._backend.transitions.initialize, owner, proposal, moment.events
        )
        stored = await commit(write, self._policy, what=f"start of scheduled run {run_id}")
        if isinstance(stored, Run):
            self._tell(moment, owner)
            return stored
        if isinstance(stored, Conflict | Retryable):
            return stored
        return StartProblem("refused", f"the store refused run {run_id!r}: {stored!r}")

    async def _queue_problem(self, queue: str) -> StartProblem | None:
        """Why a tick cannot start a run in ``queue`` (the graph's policy), or ``None``."""
        view = QueueView(self._backend, refresh=0.0)
        store = view.store
        if store is None:
            return StartProblem(
                "unsupported", f"the graph names queue {queue!r}; the backend has no queues"
            )
        if queue != DEFAULT_QUEUE and isinstance(await store.fetch_queue(queue), NotFound):
            return StartProblem("unknown_queue", f"no queue {queue!r}")
        return None

    def _tell(self, moment: Moment, owner: OwnerScope) -> None:
        checkpoint = moment.checkpoint()
        tenant = tenant_id_of(owner)
        if self._telemetry:
            self._telemetry.committed(checkpoint, operation="start", tenant_id=tenant)
        if self._observers:
            self._observers.deliver(checkpoint, CommitContext(tenant_id=tenant, operation="start"))
