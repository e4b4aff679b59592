"""Child runs, the I/O part: starting children, checking on them, handing their end to
the parent, and cancelling the ones nobody waits for any more.

The protocol (docs/guarantees.md, child runs), in the order things happen:

1. **Ask.** A child node's attempt runs no code: the worker returns ``AwaitingChild``
   with the child's derived id, and the parent's commit records the task as
   ``child_running`` (event ``child_started``). Nothing exists outside the parent yet.
2. **Start** (:meth:`Children.after_commit`). Only then does the committer create each
   newly awaited child (``initialize`` in the parent's owner scope, the parent link in
   its metadata). A child therefore only ever exists for an attempt its parent recorded.
   A crash before the start is repaired by the parent's recheck (3), which starts a
   missing child; a start that finds the id taken by the same parent's child adopts it.
   After starting, the committer reads the parent again: if it has ended meanwhile (a
   cancel racing the start), it cancels the children it just started.
3. **Recheck** (:meth:`Children.outcomes`). The parked task's timer makes the parent due
   now and then (``child_recheck``, growing to ``child_recheck_cap``); the worker that
   claims it reads each due child: missing → start it; ended → its outcome; still going
   → keep waiting. Only a lost hand-off ever needs this.
4. **Hand off** (:meth:`Children.hand_off`). Whoever commits a child's end (its worker,
   or an operator's cancel) settles the child's outcome into the parent with
   ``commit_unclaimed`` fenced on the parent's checkpoint, re-reading and re-evaluating
   when it loses a race. Once that lands the task no longer waits, so a repeated
   hand-off (or a recheck) finds nothing to do.
5. **Drop.** A parent commit that removes a waiting task without its child's outcome (the
   parent failed or was cancelled) cancels that child.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Literal

import attrs

from docket.contract.errors import (
    Conflict,
    NotFound,
    Retryable,
    StaleCheckpoint,
    TransitionResult,
)
from docket.contract.proposals import Lease
from docket.contract.protocols import Backend, ClaimedStarts
from docket.core.children import (
    ParentLink,
    awaited_children,
    child_input,
    child_outcome,
    child_run_id,
    deliver,
    parent_link,
    waiting_task,
)
from docket.core.errors import CoreError
from docket.core.init import build_initial_run, initialize
from docket.core.moment import Moment, Terminated, Unchanged
from docket.core.mutations import cancel_run
from docket.core.outcomes import AwaitingChild, Completed, Failed, TaskOutcome, format_reason
from docket.core.plan import Activation, Dispatch, HostLimits
from docket.core.proposals import init_proposal, unclaimed_proposal
from docket.graph.children import ChildSpec
from docket.graph.compiler import RuntimeGraph
from docket.records import (
    TASK_CHILD_RUNNING,
    GraphRef,
    OwnerScope,
    Run,
    TaskState,
    tenant_id_of,
)
from docket.runtime.graphs import GraphCache, GraphProblem
from docket.runtime.lifecycle import (
    CommitContext,
    CommitPolicy,
    Ids,
    Observers,
    SignalResult,
    commit,
    signal,
    stamp_clock,
)
from docket.runtime.queues import DEFAULTS, QueueRuntime, uses_queues
from docket.settings import Settings
from docket.telemetry import Telemetry, stamp_logger

__all__ = ["Children", "is_child_dispatch"]

#: Longest a hand-off waits for a worker holding the parent to let go (then it commits
#: anyway: the holder's attempt is lost and runs again, nothing is committed twice).
_HOLDER_PATIENCE = 5.0
#: Races a hand-off may lose to others committing the parent before leaving the rest to
#: the parent's recheck (a map's children ending together race each other).
_HAND_OFF_RACES = 12

log = stamp_logger(logging.getLogger("docket.children"))


def is_child_dispatch(rtg: RuntimeGraph, activation: Activation) -> bool:
    node = rtg.nodes.get(activation.node_id)
    return node is not None and node.child is not None


def _failed(task_id: str, node_id: str, attempt: int, kind: str, text: str) -> Failed:
    return Failed(
        task_id=task_id,
        node_id=node_id,
        attempt=attempt,
        reason=format_reason(kind, text),
        retryable=False,
    )


class Children:
    """Everything a runtime does for child runs; one per worker (and one per Docket)."""

    def __init__(
        self,
        backend: Backend,
        graphs: GraphCache,
        settings: Settings,
        *,
        ids: Ids,
        limits: HostLimits,
        observers: Observers | None = None,
        telemetry: Telemetry | None = None,
        queues: QueueRuntime | None = None,
    ) -> None:
        self._backend = backend
        self._queues = queues  # a child joins its parent's queue (Feature.QUEUES)
        self._graphs = graphs
        self._settings = settings
        self._ids = ids
        self._limits = limits
        self._observers = observers
        self._telemetry = telemetry
        self._policy = CommitPolicy(
            attempts=settings.commit_attempts, backoff=settings.commit_backoff
        )
        # a server's clock without a round trip each time; looked up on first use, because
        # a runtime may be built before its backend has been negotiated
        self._stamp: Callable[[], Awaitable[datetime]] | None = None

    async def _clock(self) -> datetime:
        if self._stamp is None:
            self._stamp = stamp_clock(self._backend)
        return await self._stamp()

    # -- 1 and 3: outcomes of child attempts ------------------------------------------

    def recheck_at(self, now: datetime, since: datetime | None) -> datetime:
        """When a parent looks again at a child it waits for: ``child_recheck`` at first,
        then a quarter of the wait so far, never more than ``child_recheck_cap``."""
        waited = 0.0 if since is None else max((now - since).total_seconds(), 0.0)
        delay = min(self._settings.child_recheck_cap, max(self._settings.child_recheck, waited / 4))
        return now + timedelta(seconds=delay)

    async def outcomes(
        self,
        owner: OwnerScope,
        rtg: RuntimeGraph,
        dispatch: Dispatch,
        activations: Sequence[Activation],
        now: datetime,
    ) -> list[TaskOutcome]:
        """The outcomes of the child attempts among a dispatch's activations."""
        run = dispatch.run
        out: list[TaskOutcome] = []
        checks: list[tuple[Activation, TaskState, str, ChildSpec]] = []
        for activation in activations:
            spec = rtg.nodes[activation.node_id].child
            assert spec is not None
            task = run.active_tasks.get(activation.task_id)
            recorded = None
            if task is not None and task.status == TASK_CHILD_RUNNING:
                ident = task.metadata.get("child_run_id")
                recorded = ident if isinstance(ident, str) else None
            if recorded is None or task is None:
                if spec.graph_hash is None:
                    out.append(self._unpinned(activation, spec))
                    continue
                ident = child_run_id(activation.task_id, activation.attempt, run.checkpoint_seq)
                out.append(
                    AwaitingChild(
                        task_id=activation.task_id,
                        node_id=activation.node_id,
                        attempt=activation.attempt,
                        child_run_id=ident,
                        check_at=self.recheck_at(now, None),
                    )
                )
            else:
                checks.append((activation, task, recorded, spec))
        if checks:
            out.extend(
                await asyncio.gather(
                    *(self._check(owner, run, t, ident, spec, now) for _, t, ident, spec in checks)
                )
            )
        return out

    def _unpinned(self, activation: Activation, spec: ChildSpec) -> Failed:
        return _failed(
            activation.task_id,
            activation.node_id,
            activation.attempt,
            "child_unpinned",
            f"child graph {spec.graph!r} has no pinned hash (save the parent graph through "
            "Docket.save_graph, which pins it)",
        )

    async def _check(
        self,
        owner: OwnerScope,
        parent: Run,
        task: TaskState,
        ident: str,
        spec: ChildSpec,
        now: datetime,
    ) -> TaskOutcome:
        child = await self._backend.runs.fetch_run(owner, ident)
        if isinstance(child, NotFound):
            queue = await self._parent_queue(owner, parent)
            started = await self.start(owner, parent, task, ident, spec, queue=queue)
            if isinstance(started, Failed):
                return started
            if isinstance(started, Retryable):  # the store is away: look again later
                return AwaitingChild(
                    task_id=task.task_id,
                    node_id=task.node_id,
                    attempt=task.attempt,
                    child_run_id=ident,
                    check_at=self.recheck_at(now, task.started_at),
                )
            child = started
        ended = child_outcome(spec, task, child)
        if ended is not None:
            return ended
        return AwaitingChild(
            task_id=task.task_id,
            node_id=task.node_id,
            attempt=task.attempt,
            child_run_id=ident,
            check_at=self.recheck_at(now, task.started_at),
        )

    # -- 2: starting ------------------------------------------------------------------

    async def start(
        self,
        owner: OwnerScope,
        parent: Run,
        task: TaskState,
        ident: str,
        spec: ChildSpec,
        *,
        now: datetime | None = None,
        claim_token: str | None = None,
        written: set[str] | None = None,
        queue: tuple[str, int] = DEFAULTS,
    ) -> Run | Failed | Retryable:
        """Create the child ``ident`` of ``task`` (or adopt it if it exists); a child that
        cannot be created is the attempt's permanent failure. A store that stays away
        through the commit policy's tries answers ``Retryable``: the child is not started
        *yet*, and the parent's recheck starts it later (an outage must not fail the
        parent). ``now``: the store's time (read here when not given). ``queue``: the
        parent's queue and priority, which the child inherits."""

        def failed(kind: str, text: str) -> Failed:
            return _failed(task.task_id, task.node_id, task.attempt, kind, text)

        if spec.graph_hash is None:
            return failed("child_unpinned", f"child graph {spec.graph!r} has no pinned hash")
        rtg = await self._graphs.get(owner, GraphRef(spec.graph, spec.graph_hash))
        if isinstance(rtg, GraphProblem):
            return failed("child_graph_unusable", rtg.message)
        if now is None:
            now = await self._clock()
        created = build_initial_run(
            rtg,
            child_input(spec, task.snapshot),
            run_id=ident,
            now=now,
            metadata=parent_link(parent, task.task_id, task.node_id, task.attempt),
        )
        moment = initialize(rtg, created, now=now)
        if isinstance(moment, CoreError):
            return failed("invalid_child_input", moment.message)
        assert not isinstance(moment, Terminated)
        proposal = init_proposal(moment, transition_id=self._ids("transition"))
        if uses_queues(*queue):
            proposal = attrs.evolve(proposal, queue=queue[0], priority=queue[1])
        transitions = self._backend.transitions

        async def write() -> TransitionResult:
            if claim_token is not None and isinstance(transitions, ClaimedStarts):
                return await transitions.initialize_claimed(
                    owner, proposal, moment.events, claim_token
                )
            return await transitions.initialize(owner, proposal, moment.events)

        stored = await commit(write, self._policy, what=f"start of child run {ident}")
        if isinstance(stored, Retryable):
            log.warning("child run %s not started yet (%s); the recheck repeats it", ident, stored)
            return stored
        if isinstance(stored, Run):
            if written is not None:
                written.add(ident)  # written by this call (not adopted)
            self._tell(moment, owner, "start")
            return stored
        if isinstance(stored, Conflict):  # started before (a replay): adopt our own child
            existing = await self._backend.runs.fetch_run(owner, ident)
            link = None if isinstance(existing, NotFound) else ParentLink.of(existing)
            if isinstance(existing, Run) and link is not None and link.run_id == parent.id:
                return existing
            return failed("child_run_id_taken", f"run id {ident!r} is taken by another run")
        return failed("child_not_started", f"the store refused child run {ident!r}: {stored!r}")

    def _tell(
        self, moment: Moment, owner: OwnerScope, operation: Literal["start", "signal"]
    ) -> None:
        checkpoint = moment.checkpoint()
        tenant = tenant_id_of(owner)
        if self._telemetry:
            self._telemetry.committed(checkpoint, operation=operation, tenant_id=tenant)
        if self._observers:
            self._observers.deliver(
                checkpoint, CommitContext(tenant_id=tenant, operation=operation)
            )

    # -- after every commit of a run that has or is a child ---------------------------

    @staticmethod
    def concerned(before: Run, after: Run) -> bool:
        """Whether :meth:`after_commit` has anything to do (cheap: no I/O)."""
        if after.status.terminal and ParentLink.of(after) is not None:
            return True
        return any(t.status == TASK_CHILD_RUNNING for t in before.active_tasks.values()) or any(
            t.status == TASK_CHILD_RUNNING for t in after.active_tasks.values()
        )

    async def after_commit(
        self,
        owner: OwnerScope,
        before: Run,
        after: Run,
        *,
        ended: str | None = None,
        eager: bool = False,
    ) -> tuple[Lease, Run] | None:
        """Start the children ``after`` newly waits for, cancel those it dropped (but
        ``ended``, the child whose end this commit settled), and hand ``after``'s end to
        its parent if it is a child that just ended.

        With ``eager`` (a worker whose slot the parent just freed) the first new child is
        started already claimed (``ClaimedStarts``), and its lease is returned for the
        caller to drain at once, saving the announce and claim round trips."""
        was, now_waiting = awaited_children(before), awaited_children(after)
        new = [(ident, task) for ident, task in now_waiting.items() if ident not in was]
        dropped = [ident for ident in was if ident not in now_waiting and ident != ended]
        follow: tuple[Lease, Run] | None = None
        try:
            if new:
                follow = await self._start_new(owner, after, new, eager=eager)
            if dropped:
                await asyncio.gather(*(self._cancel_if_running(owner, i) for i in dropped))
        except asyncio.CancelledError:
            raise
        except Exception:
            # the commit stands; a start the store refused now is the recheck's to repeat
            log.exception("starting or cancelling the children of run %s failed", after.id)
        if after.status.terminal and not before.status.terminal:
            await self.hand_off(owner, after)
        return follow

    async def _start_new(
        self, owner: OwnerScope, parent: Run, new: list[tuple[str, TaskState]], *, eager: bool
    ) -> tuple[Lease, Run] | None:
        rtg = await self._graphs.get(owner, GraphRef(parent.graph_id, parent.graph_hash))
        if isinstance(rtg, GraphProblem):
            return None  # the parent's recheck runs where its graph can be used
        now = await self._clock()  # one clock read for the batch
        queue = await self._parent_queue(owner, parent)
        token = self._ids("claim") if eager else None
        # an eager child in a limited queue takes its slot first; none free: it waits
        # its turn like any started run
        slot = await self._eager_slot(queue[0]) if eager else None
        if eager and slot == "":
            token = None
        first = new[0][0]
        written: set[str] = set()

        async def one(ident: str, task: TaskState) -> Run | None:
            spec = rtg.nodes[task.node_id].child if task.node_id in rtg.nodes else None
            if spec is None:
                return None
            claim = token if ident == first else None
            result = await self.start(
                owner,
                parent,
                task,
                ident,
                spec,
                now=now,
                claim_token=claim,
                written=written,
                queue=queue,
            )
            if isinstance(result, Failed):
                await self._deliver(owner, parent.id, ident, result)
                return None
            if isinstance(result, Retryable):
                return None  # not started yet: the parent's recheck starts it
            return result

        try:
            follow = await self._start_all(owner, parent, new, one, token, first, written, now)
        except BaseException:
            if slot:
                await asyncio.shield(self._refund(queue[0], slot))
            raise
        if slot:
            assert self._queues is not None
            if follow is None:
                await self._refund(queue[0], slot)
            else:
                self._queues.slots.hold(follow[0].claim_token, queue[0], slot)
        return follow

    async def _start_all(
        self,
        owner: OwnerScope,
        parent: Run,
        new: list[tuple[str, TaskState]],
        one: Callable[[str, TaskState], Awaitable[Run | None]],
        token: str | None,
        first: str,
        written: set[str],
        now: datetime,
    ) -> tuple[Lease, Run] | None:
        # concurrently: a map's children reach a group-committing store together
        results = await asyncio.gather(*(one(ident, task) for ident, task in new))
        started = [run for run in results if run is not None]
        if not started:
            return None
        # A cancel may have ended the parent between its commit and these starts: the
        # canceller only saw the children already started, so these are ours to cancel.
        latest = await self._backend.runs.fetch_run(owner, parent.id)
        if isinstance(latest, Run) and latest.status.terminal:
            await asyncio.gather(*(self._cancel_if_running(owner, r.id) for r in started))
            return None
        claimed = next((r for r in started if r.id == first), None)
        if token is None or claimed is None or first not in written:
            return None  # adopted, not started by us just now: nothing to drain eagerly
        lease = Lease(
            run_id=claimed.id,
            owner=owner,
            graph_id=claimed.graph_id,
            graph_hash=claimed.graph_hash,
            checkpoint_seq=claimed.checkpoint_seq,
            claim_token=token,
            claimed_at=now,
            claim_attempt=1,  # the start counted it, as claim_due counts a lease
            orphan_ttl=timedelta(seconds=self._settings.claim_ttl),
        )
        return lease, claimed

    async def _parent_queue(self, owner: OwnerScope, parent: Run) -> tuple[str, int]:
        """The parent's queue and priority (kept beside the run: one read, on a backend
        with queues only)."""
        if self._queues is None or self._queues.view.store is None:
            return DEFAULTS
        info = await self._backend.runs.inspect_run(owner, parent.id)
        return DEFAULTS if isinstance(info, NotFound) else (info.queue, info.priority)

    async def _eager_slot(self, queue: str) -> str | None:
        """``None``: the queue needs no slot; ``""``: it needs one and none was granted;
        else the granted slot's holder id."""
        if self._queues is None or not await self._queues.limited(queue):
            return None
        ttl = timedelta(seconds=self._settings.claim_ttl)
        return await self._queues.slots.acquire_one(queue, ttl) or ""

    async def _refund(self, queue: str, holder: str) -> None:
        assert self._queues is not None
        await self._queues.slots.refund(queue, [holder])

    async def _cancel_if_running(self, owner: OwnerScope, ident: str) -> None:
        result = await signal(
            self._backend,
            owner,
            ident,
            lambda run, now: Unchanged(run) if run.status.terminal else cancel_run(run, now=now),
            ids=self._ids,
            policy=self._policy,
            attempts=self._settings.signal_attempts,
            observers=self._observers,
            telemetry=self._telemetry,
        )
        if isinstance(result, SignalResult) and result.previous is not None:
            await self.after_commit(owner, result.previous, result.run)

    async def cancel_children(self, owner: OwnerScope, before: Run) -> None:
        """Cancel every child ``before`` waited for (after its run was cancelled)."""
        await asyncio.gather(*(self._cancel_if_running(owner, i) for i in awaited_children(before)))

    # -- 4: the hand-off --------------------------------------------------------------

    async def hand_off(self, owner: OwnerScope, child: Run) -> None:
        """Settle ended ``child``'s outcome into its parent (nothing if the parent no
        longer waits for it). Never raises for what the parent or the store do."""
        link = ParentLink.of(child)
        if link is None:
            return
        try:
            known = None
            if link.graph_id is not None and link.graph_hash is not None:
                known = GraphRef(link.graph_id, link.graph_hash)
            await self._deliver(owner, link.run_id, child.id, child, graph=known)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("handing child run %s to parent %s failed", child.id, link.run_id)

    async def _deliver(
        self,
        owner: OwnerScope,
        parent_id: str,
        ident: str,
        ended: Run | Failed,
        *,
        graph: GraphRef | None = None,
    ) -> None:
        if graph is None:  # a link written without the parent's graph: read the parent
            parent = await self._backend.runs.fetch_run(owner, parent_id)
            if isinstance(parent, NotFound):
                return
            graph = GraphRef(parent.graph_id, parent.graph_hash)
        rtg = await self._graphs.get(owner, graph)
        if isinstance(rtg, GraphProblem):
            log.warning("parent %s of child %s: %s", parent_id, ident, rtg.message)
            return

        def settle_child(run: Run, now: datetime) -> Moment | Unchanged | CoreError:
            if (run.graph_id, run.graph_hash) != (rtg.graph_id, rtg.graph_hash):
                return Unchanged(run)  # not the parent the link names
            task = waiting_task(run, ident)
            if task is None:
                return Unchanged(run)
            spec = rtg.nodes[task.node_id].child if task.node_id in rtg.nodes else None
            if spec is None:
                return Unchanged(run)
            outcome: Completed | Failed | None
            if isinstance(ended, Failed):
                outcome = _as_attempt(ended, task)
            else:
                outcome = child_outcome(spec, task, ended)
            if outcome is None:
                return Unchanged(run)
            moment = deliver(rtg, run, outcome, now=now, ids=self._ids, limits=self._limits)
            return Unchanged(run) if moment is None else moment

        runs, transitions = self._backend.runs, self._backend.transitions
        patience = min(self._settings.claim_ttl, _HOLDER_PATIENCE)
        waited, pause, lost = 0.0, 0.02, 0
        while lost < _HAND_OFF_RACES:
            info = await runs.inspect_run(owner, parent_id)
            if isinstance(info, NotFound):
                return
            run = info.run
            if info.claimed_at is not None and waited < patience:
                # A worker holds the parent (a sibling's retry, a recheck): committing now
                # would revoke its claim and waste its attempt. It parks soon; wait for it.
                await asyncio.sleep(pause)
                waited, pause = waited + pause, min(pause * 2, 0.5)
                continue
            now = await self._clock()
            step = settle_child(run, max(now, run.updated_at))
            if isinstance(step, Unchanged):
                return
            if isinstance(step, CoreError):
                log.warning("child %s cannot be handed to %s: %s", ident, parent_id, step)
                return
            proposal = unclaimed_proposal(step, transition_id=self._ids("transition"))
            stored = await commit(
                functools.partial(
                    transitions.commit_unclaimed,
                    owner,
                    run.checkpoint_seq,
                    proposal,
                    step.events,
                ),
                self._policy,
                what=f"hand-off of child {ident} to run {parent_id}",
            )
            if isinstance(stored, Run):
                self._tell(step, owner, "signal")
                await self.after_commit(owner, run, stored, ended=ident)
                return
            if not isinstance(stored, StaleCheckpoint):
                log.warning("hand-off of child %s to %s refused: %r", ident, parent_id, stored)
                return
            # lost a race (a sibling's hand-off, a recheck): read and evaluate again
            lost += 1
            await asyncio.sleep(random.uniform(0.0, 0.01) * lost)
        log.info("hand-off of child %s to %s left to the parent's recheck", ident, parent_id)


def _as_attempt(failed: Failed, task: TaskState) -> Failed:
    """``failed`` as the outcome of ``task``'s current attempt."""
    return Failed(
        task_id=task.task_id,
        node_id=task.node_id,
        attempt=task.attempt,
        reason=failed.reason,
        retryable=failed.retryable,
        details=failed.details,
    )
