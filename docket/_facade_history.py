"""The facade's state history: :class:`HistoryMethods`, mixed into :class:`~docket.Docket`.

History is read back from the run's own events (:mod:`docket.core.history`): listing
checkpoints, the state at one, a fork from one (a new run committed with ``initialize``,
like :meth:`~docket.Docket.start_run`), an operator's edit of a live or failed run (one
fenced unclaimed commit, like the signals), and retention (``prune``). See
docs/history.md.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

import attrs

from docket._facade_args import MAX_PAGE, require_id, require_limit
from docket._facade_children import require_runnable_children
from docket._facade_spans import lifecycle
from docket._facade_time import require_feature
from docket.contract import errors as contract
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.proposals import EventListQuery
from docket.contract.protocols import Backend, Prunable
from docket.contract.retention import PruneResult
from docket.core import errors as core
from docket.core.edits import edit_state
from docket.core.edits import fork_run as fork_moment
from docket.core.history import Rebuilt, checkpoint_infos, rebuild_at
from docket.core.moment import Moment
from docket.core.plan import check_execution_policy
from docket.core.proposals import init_proposal
from docket.core.state import snapshot
from docket.errors import InvalidOptions, NotFound, from_contract, from_core
from docket.graph.compiler import RuntimeGraph
from docket.records import (
    Event,
    EventType,
    GraphRef,
    HistoryPage,
    OwnerScope,
    Run,
    RunSnapshot,
    RunStatus,
)
from docket.runtime.drain import host_limits
from docket.runtime.lifecycle import CommitPolicy, Ids, Mutation, commit, stamp_clock
from docket.settings import Settings
from docket.telemetry import Telemetry
from docket.values import JSONDict, JSONValue

__all__ = ["HistoryMethods", "prune_store"]


class HistoryMethods:
    """The history methods of :class:`~docket.Docket` (which provides what is declared
    under ``TYPE_CHECKING``)."""

    if TYPE_CHECKING:
        _store: Backend
        _ids: Ids
        _policy: CommitPolicy
        backend: Backend
        settings: Settings
        telemetry: Telemetry

        @property
        def capabilities(self) -> Capabilities: ...
        def _owner(self, tenant_id: object) -> OwnerScope: ...
        def _ready(self) -> None: ...
        async def _fetch(self, owner: OwnerScope, run_id: str) -> Run: ...
        async def _runtime_graph(self, owner: OwnerScope, ref: GraphRef) -> RuntimeGraph: ...
        async def _signal(self, owner: OwnerScope, run_id: str, mutate: Mutation) -> Run: ...
        def _deliver(
            self, moment: Moment, owner: OwnerScope, operation: Literal["start"]
        ) -> None: ...

    async def state_history(
        self,
        run_id: str,
        *,
        after: int = 0,
        limit: int = 100,
        tenant_id: str | None = None,
    ) -> HistoryPage:
        """The run's checkpoints after checkpoint ``after``, oldest first (``limit`` at
        most; ``next_after`` pages on). Each says whether its state can still be read
        (``readable``: retention may have removed what it is rebuilt from);
        ``oldest_available`` is the first checkpoint retention kept.

        Raises ``NotFound`` (run), ``InvalidOptions`` (``after``/``limit``).
        """
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        _require_seq("after", after, minimum=0)
        require_limit(limit)
        run = await self._fetch(owner, run_id)
        infos = checkpoint_infos(await self._events(owner, run_id))
        later = [info for info in infos if info.checkpoint_seq > after]
        page = tuple(later[:limit])
        return HistoryPage(
            checkpoints=page,
            next_after=page[-1].checkpoint_seq if page else after,
            has_more=len(later) > limit,
            oldest_available=infos[0].checkpoint_seq if infos else None,
            latest=run.checkpoint_seq,
        )

    async def fetch_run_at(
        self, run_id: str, checkpoint_seq: int, *, tenant_id: str | None = None
    ) -> RunSnapshot:
        """The run's state as committed at ``checkpoint_seq``.

        Raises ``NotFound``: for an unknown run or checkpoint (``details["what"]`` is
        ``"checkpoint"``), and for a checkpoint whose history retention removed
        (``details["pruned"]`` is true); ``InvalidOptions`` for a bad ``checkpoint_seq``.
        """
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        _require_seq("checkpoint_seq", checkpoint_seq, minimum=1)
        run = await self._fetch(owner, run_id)
        rebuilt = await self._rebuilt(owner, run, checkpoint_seq)
        rtg = await self._runtime_graph(owner, GraphRef(run.graph_id, run.graph_hash))
        info = rebuilt.checkpoint
        channels: JSONDict = {
            cid: {
                "value": ch.value,
                "version": ch.version,
                "barrier_seen": list[JSONValue](ch.barrier_seen),
            }
            for cid, ch in sorted(rebuilt.channels.items())
        }
        return RunSnapshot(
            run_id=run.id,
            graph_id=run.graph_id,
            graph_hash=run.graph_hash,
            checkpoint_seq=info.checkpoint_seq,
            checkpoint_type=info.checkpoint_type,
            status=info.status,
            step=info.step,
            created_at=info.created_at,
            event_seq=info.event_seq,
            state=snapshot(rtg, rebuilt.channels),
            next=info.next,
            channels=channels,
            changed_channels=tuple(sorted(rebuilt.changed_channels)),
            pending_nodes=tuple(sorted(rebuilt.pending_nodes)),
        )

    @lifecycle("docket.run.fork", run_id_first=True)
    async def fork_run(
        self,
        run_id: str,
        *,
        at: int | None = None,
        new_run_id: str | None = None,
        patch: object = None,
        tenant_id: str | None = None,
    ) -> Run:
        """Start a new run from checkpoint ``at`` of ``run_id`` (default: its latest),
        with ``patch`` (state field -> new value) applied; returns the new run
        (``running``), which a worker takes from the superstep that was due after that
        checkpoint. It runs the source's graph version; its metadata names the source
        (``docket.forked_from``). Attempts in flight at the checkpoint start afresh.

        Raises ``NotFound`` (run, checkpoint, or a pruned checkpoint: see
        :meth:`fetch_run_at`), ``InvalidInput`` (the patch), ``Conflict`` (the new run
        id is taken), ``IncompatibleExecutionPolicy``; nothing is written then.
        """
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        if at is not None:
            _require_seq("at", at, minimum=1)
        if new_run_id is not None:
            require_id("new_run_id", new_run_id)
        source = await self._fetch(owner, run_id)
        rebuilt = await self._rebuilt(owner, source, source.checkpoint_seq if at is None else at)
        rtg = await self._runtime_graph(owner, GraphRef(source.graph_id, source.graph_hash))
        incompatible = check_execution_policy(rtg, host_limits(self.settings))
        if incompatible is not None:
            raise from_core(incompatible)
        if rtg.has_children:
            require_runnable_children(rtg, self.capabilities)
        now = await stamp_clock(self.backend)()
        moment = fork_moment(
            rtg, source, rebuilt, patch, run_id=new_run_id or self._ids("run"), now=now
        )
        if isinstance(moment, core.CoreError):
            raise from_core(moment)
        proposal = init_proposal(moment, transition_id=self._ids("transition"))
        if Feature.QUEUES in self.capabilities.features:
            # the fork waits in the source's queue, at its priority (kept beside the run)
            info = await self._store.runs.inspect_run(owner, run_id)
            if not isinstance(info, contract.NotFound):
                proposal = attrs.evolve(proposal, queue=info.queue, priority=info.priority)
        write = functools.partial(
            self._store.transitions.initialize, owner, proposal, moment.events
        )
        new_id = proposal.run.id
        stored: contract.TransitionResult = await commit(
            write, self._policy, what=f"fork of run {run_id} as {new_id}"
        )
        if not isinstance(stored, Run):
            raise from_contract(stored, subject=f"run {new_id!r}")
        if stored.checkpoint_seq != proposal.run.checkpoint_seq:
            # a replay answers the stored run: only an id this fork wrote may be returned
            raise from_contract(
                contract.Conflict(f"run {new_id!r} already exists"), subject=f"run {new_id!r}"
            )
        self._deliver(moment, owner, "start")
        return stored

    @lifecycle("docket.run.update_state", run_id_first=True)
    async def update_state(
        self,
        run_id: str,
        patch: object,
        *,
        reason: str | None = None,
        tenant_id: str | None = None,
    ) -> Run:
        """Replace state fields of a waiting, failed or poisoned run (field -> new value;
        reducers are not applied); returns the committed run, its status unchanged.

        A waiting run still waits (answer its interrupt or send its message as before);
        a failed run stays failed until :meth:`retry_run` resumes it with the edited
        state; a poisoned run is due again (every commit clears the poison). One
        ``state_edited`` event records the fields and ``reason``.

        Raises ``NotFound``; ``InactiveRun`` (done or cancelled: fork it instead);
        ``InvalidRun`` (running and not poisoned: a worker may hold it — wait until it
        waits or fails, or cancel it); ``InvalidInput`` (the patch or the reason);
        ``StaleCheckpoint``. Nothing is written then.
        """
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        found = await self._store.runs.inspect_run(owner, run_id)
        if isinstance(found, contract.NotFound):
            raise from_contract(found, subject=f"run {run_id!r}")
        rtg = await self._runtime_graph(owner, GraphRef(found.run.graph_id, found.run.graph_hash))
        # poisoned at this checkpoint: no worker holds it, nor will one claim it
        idle_at = found.run.checkpoint_seq if found.poisoned else None

        def mutate(run: Run, now: datetime) -> Moment | core.CoreError:
            if run.status is RunStatus.RUNNING and run.checkpoint_seq != idle_at:
                return core.UnusableRun(
                    f"run {run_id!r} is running and a worker may be changing it: wait "
                    "until it waits or fails, or cancel it, then edit",
                    phase="edit",
                    details={"status": str(run.status)},
                )
            return edit_state(rtg, run, patch, reason=reason, now=now)

        return await self._signal(owner, run_id, mutate)

    async def prune(
        self,
        *,
        events_older_than: timedelta | None = None,
        runs_older_than: timedelta | None = None,
        batch_size: int = 1000,
        until_done: bool = False,
    ) -> PruneResult:
        """Retention: delete events written more than ``events_older_than`` ago and runs
        finished more than ``runs_older_than`` ago (with their events), at most
        ``batch_size`` of each per pass; ``until_done`` repeats passes until one deletes
        less than a full batch. Spans every tenant (an operator's operation).

        Raises ``Unsupported`` (a backend without ``prune``), ``InvalidOptions``.
        """
        self._ready()
        require_feature(self.capabilities, Feature.PRUNE, "pruning")
        return await prune_store(
            self.backend,
            events_older_than=events_older_than,
            runs_older_than=runs_older_than,
            batch_size=batch_size,
            until_done=until_done,
        )

    # -- helpers ---------------------------------------------------------------------------

    async def _events(
        self, owner: OwnerScope, run_id: str, *, until: int | None = None
    ) -> list[Event]:
        """The run's retained events, oldest first (history folds from the nearest
        base): all of them, or up to the page holding checkpoint ``until``."""
        events: list[Event] = []
        after = 0
        while True:
            page = await self._store.events.list_events(
                owner, run_id, EventListQuery(after_seq=after, limit=MAX_PAGE)
            )
            if isinstance(page, contract.NotFound | contract.CorruptEventRow):
                raise from_contract(page, subject=f"run {run_id!r}")
            events.extend(page.events)
            if not page.has_more or (until is not None and _reached(page.events, until)):
                return events
            after = page.next_after_seq

    async def _rebuilt(self, owner: OwnerScope, run: Run, checkpoint_seq: int) -> Rebuilt:
        events = await self._events(owner, run.id, until=checkpoint_seq)
        rebuilt = rebuild_at(events, checkpoint_seq)
        if rebuilt is not None:
            return rebuilt
        if not 1 <= checkpoint_seq <= run.checkpoint_seq:
            raise NotFound(
                f"run {run.id!r} has no checkpoint {checkpoint_seq} "
                f"(its latest is {run.checkpoint_seq})",
                details={"what": "checkpoint", "checkpoint_seq": checkpoint_seq},
            )
        everything = await self._events(owner, run.id)  # the oldest readable may be later
        readable = [info.checkpoint_seq for info in checkpoint_infos(everything) if info.readable]
        raise NotFound(
            f"checkpoint {checkpoint_seq} of run {run.id!r} cannot be read: retention "
            "pruned the history it is rebuilt from"
            + (f" (the oldest readable is {readable[0]})" if readable else ""),
            details={
                "what": "checkpoint",
                "checkpoint_seq": checkpoint_seq,
                "pruned": True,
                "oldest_readable": readable[0] if readable else None,
            },
        )


async def prune_store(
    store: Backend,
    *,
    events_older_than: timedelta | None,
    runs_older_than: timedelta | None,
    batch_size: int,
    until_done: bool,
) -> PruneResult:
    """One ``prune`` pass of ``store`` (or passes until one deletes less than a full
    batch), the counts summed. ``InvalidOptions`` on bad arguments, nothing deleted."""
    if not isinstance(store, Prunable):
        raise InvalidOptions(f"{store!r} has no prune operation")
    for name, age in (
        ("events_older_than", events_older_than),
        ("runs_older_than", runs_older_than),
    ):
        if age is not None and (not isinstance(age, timedelta) or age < timedelta(0)):
            raise InvalidOptions(f"{name} must be a non-negative timedelta or None, got {age!r}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
        raise InvalidOptions(f"batch_size must be a positive integer, got {batch_size!r}")
    events = runs = 0
    ran = False
    while True:
        result = await store.prune(
            event_age=events_older_than, run_age=runs_older_than, batch_size=batch_size
        )
        ran = ran or result.ran
        events += result.events
        runs += result.runs
        full = result.events >= batch_size or result.runs >= batch_size
        if not (until_done and result.ran and full):
            return PruneResult(ran=ran, events=events, runs=runs)


def _reached(events: Sequence[Event], checkpoint_seq: int) -> bool:
    """Whether ``events`` hold the commit of checkpoint ``checkpoint_seq`` or a later one."""
    for event in reversed(events):
        if event.type is EventType.CHECKPOINT_COMMITTED:
            seq = event.metadata.get("checkpoint_seq")
            return isinstance(seq, int) and seq >= checkpoint_seq
    return False


def _require_seq(name: str, value: object, *, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidOptions(f"{name} must be an integer >= {minimum}, got {value!r}")
