"""Draining one lease: advance, execute, settle and commit a claimed run until it parks.

A worker hands each lease it claims to :meth:`Drainer.drain`, which is the inline
runner's loop (``docket.testing``) with a store and a claim:

1. read the run in the lease's scope; if its checkpoint moved since the claim (a signal
   committed in between), the fence is lost: hand the claim back and stop;
2. get the compiled graph (fetched and compiled once per process); a graph this process
   cannot use is handed back with ``abandon_claim`` — after a pause, poisoning the run
   after too many hand-backs; a graph whose node timeouts exceed this host's maximum is
   handed back *without* poisoning, with a growing pause, for a worker that allows them;
3. loop: ``advance`` (the first time with ``resume_floor = lease.claimed_at``, so a run
   claimed exactly at its timer counts as due), execute the node work, ``settle``, and
   commit the moment under the claim token. A ``Continue`` moment keeps the claim and
   the loop goes on; any ``Park`` releases the claim with its wake and ends the drain.
   Retry backoffs are never slept here: the retry park is committed and the run comes
   back when its timer is due;
4. a moment that leaves the run runnable is committed as a yield (``Park(Immediate)``)
   once the drain has made ``drain_max_moments`` commits or worked
   ``drain_max_seconds``, or when the worker is shutting down, so one endless run cannot
   monopolise a slot;
5. nothing due yet (clock skew, a claim that raced a timer) is a *deferral*: the claim is
   abandoned with the timer as the next wake, without counting towards poisoning.

Each failed node attempt settled is logged (WARNING retried, ERROR permanent; see
:mod:`docket.runtime.failures`); a hand-back that poisons the run says so in the
outcome (``DrainOutcome.poisoned``), for the worker to report.

While the drain holds the claim a **heartbeat** refreshes it every ``claim_ttl / 3``, so a
node that runs longer than the TTL is never taken over while its worker lives. If the
refresh answers ``ClaimLost`` (the run was cancelled, or the claim was taken over after
this process stalled), node work in flight is cancelled and nothing is committed.

Time: every decision and every timestamp uses the store's clock (``backend.now()``, or
its cheaper ``sampled_now()`` on a server backend), the same clock ``claim_due``
compares wakes with. Durations (budgets, heartbeat pauses) use
the monotonic clock.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Literal, TypeAlias, assert_never, cast

import attrs

from docket.contract.capabilities import Feature
from docket.contract.errors import (
    NotFound,
    Poisoned,
    Rescheduled,
    Retryable,
    StaleAbandon,
    StaleCheckpoint,
    TransitionResult,
)
from docket.contract.proposals import (
    AbandonPolicy,
    Backoff,
    ClaimedProposal,
    Lease,
    PoisonedClaim,
    Terminal,
)
from docket.contract.protocols import Backend, ChainedCommits, ClaimedRuns, TransitionStore
from docket.core.advance import advance
from docket.core.errors import CoreError
from docket.core.moment import (
    Continue,
    Moment,
    NotDue,
    Park,
    Terminated,
    Wait,
    wake_name,
    yield_moment,
)
from docket.core.outcomes import AwaitingChild, TaskOutcome, describe_exception
from docket.core.plan import Activation, Dispatch, HostLimits, check_execution_policy
from docket.core.proposals import claimed_proposal
from docket.core.settle import settle
from docket.graph.compiler import RuntimeGraph
from docket.records import Event, GraphRef, OwnerScope, Run, RunStatus, tenant_id_of
from docket.runtime.admission import Admissions, admission_queue
from docket.runtime.children import Children, is_child_dispatch
from docket.runtime.emissions import EMISSION_FLUSH, EmissionPump, Emitter
from docket.runtime.execute import execute
from docket.runtime.failures import log_failed_attempts, poisoned_claim
from docket.runtime.graphs import GraphCache, GraphProblem
from docket.runtime.heartbeat import Heartbeat
from docket.runtime.lifecycle import (
    CommitContext,
    CommitPolicy,
    Ids,
    Observers,
    commit,
    stamp_clock,
)
from docket.runtime.messages import supported_waits
from docket.runtime.queues import QueueRuntime
from docket.settings import Settings
from docket.telemetry import NO_SPAN, Span, Telemetry, log_context, stamp_logger

__all__ = ["DrainOutcome", "Drainer", "Heartbeat", "OutcomeKind", "host_limits"]

log = stamp_logger(logging.getLogger("docket.worker"))

OutcomeKind: TypeAlias = Literal[
    "parked",  # committed up to a park (detail: immediate, at, external, terminal)
    "fence_lost",  # a signal committed between the claim and the read
    "claim_lost",  # the heartbeat found the claim gone; nothing was committed
    "discarded",  # a commit was refused (detail: the error); the claim was handed back
    "abandoned",  # the graph cannot be used here; handed back (detail: outcome)
    "host_incompatible",  # node timeouts above this host's maximum; handed back, no poison
    "deferred",  # nothing due yet; handed back with the timer as wake, no poison
    "stopped",  # the worker is shutting down; claim released before any work
    "invariant",  # the claimed run cannot be advanced (a bug); claim released
    "crashed",  # an unexpected exception; claim released if possible
]


@attrs.frozen(kw_only=True)
class DrainOutcome:
    """How one drain ended, and how many moments it committed. ``poisoned``: the run its
    hand-back poisoned (past ``max_claim_abandons``), for the caller to report."""

    kind: OutcomeKind
    run_id: str
    commits: int = 0
    detail: str = ""
    yielded: bool = False
    poisoned: PoisonedClaim | None = None
    # a child run this drain started claimed (an eager child): drained next, in this slot
    follow: tuple[Lease, Run] | None = attrs.field(default=None, eq=False, repr=False)


def host_limits(settings: Settings) -> HostLimits:
    return HostLimits(
        max_supersteps=settings.max_supersteps,
        max_attempt_ms=settings.max_attempt_ms,
        default_timeout_ms=settings.node_timeout_ms,
        max_map_items=settings.max_map_items,
    )


class Drainer:
    """Drains leases: everything a worker needs besides claiming."""

    def __init__(
        self,
        backend: Backend,
        graphs: GraphCache,
        settings: Settings,
        *,
        ids: Ids,
        observers: Observers | None = None,
        application: Mapping[str, object] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._backend = backend
        # no round trip per superstep on a server; looked up on first use, because a
        # Drainer may be built before the backend has been negotiated
        self._clock: Callable[[], Awaitable[datetime]] | None = None
        self._claimed_runs: ClaimedRuns | None = None  # looked up on first use, likewise
        self._claimed_known = False
        self._chains: bool | None = None  # whether commits chain; decided on first use
        self._features: frozenset[str] | None = None  # the backend's; read on first use
        #: The queue ``ctx.emit`` feeds (``Feature.STREAMS``); made on first use.
        self.emissions: EmissionPump | None = None
        self._telemetry = telemetry if telemetry is not None else Telemetry()
        self._graphs = graphs
        self._settings = settings
        self._ids = ids
        self._observers = observers or Observers()
        self._application = dict(application or {})
        self._limits = host_limits(settings)
        self._policy = CommitPolicy(
            attempts=settings.commit_attempts, backoff=settings.commit_backoff
        )
        #: Named queues' view and the slots this process's claims hold (Feature.QUEUES).
        self.queues = QueueRuntime(backend, settings.queue_refresh)
        #: Admission limits (Feature.ADMISSION): releases a run's count when it ends.
        self.admissions = Admissions(
            backend, self._policy, observers=self._observers, telemetry=self._telemetry
        )
        self._children = Children(
            backend,
            # structure is all a child's start or hand-off needs: a worker that serves
            # only the children's nodes can still hand their ends to the parent
            GraphCache(backend, None, executable=False),
            settings,
            ids=ids,
            limits=self._limits,
            observers=self._observers,
            telemetry=self._telemetry,
            queues=self.queues,
        )

    async def drain(
        self,
        lease: Lease,
        *,
        stopping: Callable[[], bool] = lambda: False,
        run: Run | None = None,
        parked: Callable[[], None] | None = None,
    ) -> DrainOutcome:
        """Drain ``lease``; never raises for what the run, its graph or the store do.
        ``run``: the claimed run when the caller has it already (it wrote it: an eager
        start), saving the read. ``parked`` is called once the run has been parked (its
        claim handed back with its last commit), before that commit's observers are told:
        what is left of the drain is bookkeeping, so a worker can count the slot as free.

        Logs carry the run's context; with telemetry listening the drain is a
        ``docket.run.drain`` span around ``docket.run.step`` spans."""
        tenant_id = tenant_id_of(lease.owner)
        with log_context(run_id=lease.run_id, tenant_id=tenant_id):
            telemetry = self._telemetry
            span = NO_SPAN
            if telemetry:
                span = telemetry.span(
                    "docket.run.drain",
                    {
                        "run_id": lease.run_id,
                        "tenant_id": tenant_id,
                        "graph_id": lease.graph_id,
                        "graph_hash": lease.graph_hash,
                        "checkpoint_seq": lease.checkpoint_seq,
                        "attempt": lease.claim_attempt,
                    },
                )
            try:
                outcome = await self._hold(lease, stopping, run, parked)
            except BaseException as exc:
                span.fail(exc)
                raise
            # the claim has ended (parked, handed back, released or lost): so has its
            # slot. A cancelled drain's slot is released by whoever releases its claim.
            if self.queues.slots.holds(lease):
                await self.queues.slots.release(lease)
            span.stop(
                {"outcome": outcome.kind, "reason": outcome.detail}, {"commits": outcome.commits}
            )
        if outcome.follow is None:
            return outcome
        # the slot the parent held goes on with its eagerly started child (the parent
        # did not report itself parked, so the worker still counts the slot busy)
        child_lease, child_run = outcome.follow
        then = await self.drain(child_lease, stopping=stopping, run=child_run, parked=parked)
        return then if then.poisoned is not None else attrs.evolve(outcome, follow=None)

    async def _hold(
        self,
        lease: Lease,
        stopping: Callable[[], bool],
        run: Run | None,
        parked: Callable[[], None] | None,
    ) -> DrainOutcome:
        heartbeat = Heartbeat(
            self._backend, lease, self._settings.heartbeat_interval, self.queues.slots
        )
        heartbeat.start()
        try:
            return await self._drain(lease, heartbeat, stopping, run, parked)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("draining run %s crashed", lease.run_id)
            await self._release(lease)
            return DrainOutcome(kind="crashed", run_id=lease.run_id, detail=describe_exception(exc))
        finally:
            await heartbeat.stop()

    # -- the loop ------------------------------------------------------------------------

    async def _drain(
        self,
        lease: Lease,
        heartbeat: Heartbeat,
        stopping: Callable[[], bool],
        known: Run | None,
        parked: Callable[[], None] | None,
    ) -> DrainOutcome:
        run_id = lease.run_id
        if stopping():
            await self._release(lease)
            return DrainOutcome(kind="stopped", run_id=run_id)
        fetched = known if known is not None else await self._claimed_run(lease)
        if isinstance(fetched, NotFound):
            await self._release(lease)
            return DrainOutcome(kind="invariant", run_id=run_id, detail="the run is gone")
        if fetched.checkpoint_seq != lease.checkpoint_seq:
            await self._release(lease)
            return DrainOutcome(kind="fence_lost", run_id=run_id)
        # a waiting run is claimed only by a wake of durable time (a deadline, a message
        # wait that gives up): advance decides what is due
        if fetched.status is not RunStatus.RUNNING and fetched.status is not RunStatus.WAITING:
            await self._release(lease)
            return DrainOutcome(
                kind="invariant", run_id=run_id, detail=f"claimed run is {fetched.status}"
            )
        rtg = await self._graphs.get(lease.owner, GraphRef(fetched.graph_id, fetched.graph_hash))
        if isinstance(rtg, GraphProblem):
            return await self._abandon_unusable(lease, rtg)
        incompatible = check_execution_policy(rtg, self._limits)
        if incompatible is not None:
            return await self._abandon_incompatible(lease, incompatible.message)
        return await self._advance(lease, rtg, fetched, heartbeat, stopping, parked)

    async def _claimed_run(self, lease: Lease) -> Run | NotFound:
        """The claimed run: as the claim itself read it when the backend kept it (one
        round trip less; see :class:`ClaimedRuns`), else read now."""
        runs = self._backend.runs
        if not self._claimed_known:  # a Protocol isinstance is slow: once, not per claim
            self._claimed_runs = runs if isinstance(runs, ClaimedRuns) else None
            self._claimed_known = True
        claimed = self._claimed_runs
        if claimed is not None:
            run = await claimed.claimed_run(lease.owner, lease.run_id, lease.claim_token)
            if isinstance(run, Run) and run.checkpoint_seq == lease.checkpoint_seq:
                return run
        return await runs.fetch_run(lease.owner, lease.run_id)

    async def _advance(
        self,
        lease: Lease,
        rtg: RuntimeGraph,
        run: Run,
        heartbeat: Heartbeat,
        stopping: Callable[[], bool],
        parked: Callable[[], None] | None = None,
    ) -> DrainOutcome:
        settings = self._settings
        started = time.monotonic()
        commits = 0
        floor: datetime | None = lease.claimed_at
        # One store-clock read per superstep (a round trip on a server backend): the
        # first superstep starts at the claim's own store timestamp, and each later one
        # at the time the previous one settled, the commit between them taken as instant.
        known_now: datetime | None = lease.claimed_at
        # The next superstep's plan, made before this one's commit (see _look_ahead);
        # for a terminal moment, with its commit sent in one chain behind this one's.
        planned: _Planned | None = None
        while True:
            with self._step_span(run) as span:
                sent: _Sent | None = None
                # A commit chained behind the last one was sent already: hear its answer.
                behind = planned is not None and planned.sent is not None
                if not behind and heartbeat.lost.is_set():
                    return DrainOutcome(kind="claim_lost", run_id=run.id, commits=commits)
                if planned is not None:
                    step, sent, planned = planned.step, planned.sent, None
                    known_now = None
                else:
                    now = known_now if known_now is not None else await self._now()
                    known_now = None
                    step = advance(rtg, run, now=now, limits=self._limits, resume_floor=floor)
                    floor = None
                if isinstance(step, Dispatch):
                    worked = await self._work(lease, rtg, step, heartbeat)
                    if worked is None:
                        return DrainOutcome(kind="claim_lost", run_id=run.id, commits=commits)
                    if isinstance(worked, datetime):  # only waiting for children: no commit
                        return await self._defer(lease, run, worked, commits)
                    outcomes = worked
                    known_now = await self._now()
                    step = settle(rtg, step, outcomes, now=known_now, ids=self._ids)
                    if isinstance(step, Moment):
                        log_failed_attempts(step, tenant_id_of(lease.owner))
                match step:
                    case CoreError() | Terminated() | Wait():
                        await self._release(lease)
                        return DrainOutcome(
                            kind="invariant",
                            run_id=run.id,
                            commits=commits,
                            detail=f"a claimed run cannot advance: {step!r}"[:500],
                        )
                    case NotDue(resume_at=resume_at):
                        return await self._defer(lease, run, resume_at, commits)
                    case Moment():
                        moment = step
                    case _:
                        assert_never(step)
                yielded = False
                if isinstance(moment.disposition, Continue) and (
                    commits + 1 >= settings.drain_max_moments
                    or time.monotonic() - started >= settings.drain_max_seconds
                    or stopping()
                ):
                    rewritten = yield_moment(moment)
                    assert isinstance(rewritten, Moment), rewritten  # a continue yields
                    moment, yielded = rewritten, True
                if sent is None:
                    if heartbeat.lost.is_set():
                        return DrainOutcome(kind="claim_lost", run_id=run.id, commits=commits)
                    sent = self._send(lease, moment, run.checkpoint_seq)
                    chain = self._chained()
                    if (
                        chain is not None
                        and isinstance(moment.disposition, Continue)
                        and known_now is not None
                    ):
                        planned = self._look_ahead(lease, rtg, moment, known_now)
                        if planned.sent is not None:
                            await _send_chained(chain, lease.owner, sent, planned.sent)
                stored = await sent.answer(behind=behind)
                if not isinstance(stored, Run):
                    if planned is not None and planned.sent is not None:
                        planned.sent.dropped(run.id)
                    planned = None
                    await self._release(lease)
                    if isinstance(stored, StaleCheckpoint):
                        log.info("run %s moved on under another holder; stopping", run.id)
                    else:
                        log.error("commit of run %s refused: %r", run.id, stored)
                    detail = type(stored).__name__
                    return DrainOutcome(
                        kind="discarded", run_id=run.id, commits=commits, detail=detail
                    )
                commits += 1
                follow = None
                if Children.concerned(run, stored):
                    follow = await self._children.after_commit(
                        lease.owner,
                        run,
                        stored,
                        eager=isinstance(moment.disposition, Park) and not stopping(),
                    )
                if span is not NO_SPAN:  # nobody listens: skip building what nobody reads
                    span.set(
                        {
                            "result": wake_name(moment.disposition)
                            if isinstance(moment.disposition, Park)
                            else "continue",
                            "status": str(stored.status),
                            "checkpoint_seq": stored.checkpoint_seq,
                        }
                    )
                if self._telemetry:
                    self._telemetry.committed(
                        moment.checkpoint(),
                        operation="moment",
                        tenant_id=tenant_id_of(lease.owner),
                    )
                if parked is not None and isinstance(moment.disposition, Park) and not follow:
                    parked()
                if self._observers:
                    context = CommitContext(tenant_id=tenant_id_of(lease.owner), operation="moment")
                    self._observers.deliver(moment.checkpoint(), context)
                if stored.status.terminal and admission_queue(stored) is not None:
                    # the run ended: free its admission count, start what that promotes
                    await self.admissions.finished(run, stored)
                run = stored
                if isinstance(moment.disposition, Park):
                    return DrainOutcome(
                        kind="parked",
                        run_id=run.id,
                        commits=commits,
                        detail=wake_name(moment.disposition),
                        yielded=yielded,
                        follow=follow,
                    )

    def _send(self, lease: Lease, moment: Moment, expected_seq: int) -> _Sent:
        proposal = claimed_proposal(
            moment, expected_seq, lease.claim_token, transition_id=self._ids("transition")
        )
        return _Sent(lease.owner, proposal, moment.events, self._backend.transitions, self._policy)

    def _chained(self) -> ChainedCommits | None:
        """The transition store, if it chains commits. The store is read each time (a
        telemetry view of it comes and goes with its listeners); whether it chains is
        decided once (a Protocol isinstance is slow)."""
        store = self._backend.transitions
        if self._chains is None:
            self._chains = isinstance(store, ChainedCommits)
        return cast(ChainedCommits, store) if self._chains else None

    def _look_ahead(
        self, lease: Lease, rtg: RuntimeGraph, moment: Moment, now: datetime
    ) -> _Planned:
        """Plan the superstep after ``moment`` before ``moment`` is committed.

        A commit that lands answers the proposed run (the contract's rule), and planning
        is a pure function of the run and ``now`` — the same ``now`` the next superstep
        would start at — so this is the plan the next turn of the loop would make. When
        that plan is the run's end (its completion, or a failure found by planning), which
        needs no node work, its commit is prepared too, to go in one chain behind
        ``moment``'s (see :class:`ChainedCommits`): a run's last checkpoint then costs no
        round trip of its own.
        """
        step = advance(rtg, moment.run, now=now, limits=self._limits, resume_floor=None)
        if (
            isinstance(step, Moment)
            and isinstance(step.disposition, Park)
            and isinstance(step.disposition.wake, Terminal)
        ):
            return _Planned(step, self._send(lease, step, moment.run.checkpoint_seq))
        return _Planned(step, None)

    async def now(self) -> datetime:
        """The backend's clock (as every commit of a drain is stamped)."""
        return await self._now()

    async def _now(self) -> datetime:
        if self._clock is None:
            self._clock = stamp_clock(self._backend)
        return await self._clock()

    def _step_span(self, run: Run) -> Span:
        """One superstep: advance, node work, settle, commit (``result`` = how it parked,
        ``continue``, or ``not_committed``)."""
        if not self._telemetry:
            return NO_SPAN
        return self._telemetry.span(
            "docket.run.step",
            {
                "run_id": run.id,
                "step": run.step,
                "checkpoint_seq": run.checkpoint_seq,
                "result": "not_committed",
            },
        )

    async def _work(
        self, lease: Lease, rtg: RuntimeGraph, dispatch: Dispatch, heartbeat: Heartbeat
    ) -> tuple[TaskOutcome, ...] | datetime | None:
        """The dispatch's outcomes: node work executed, child attempts asked or checked
        (``docket.runtime.children``). ``None`` when the claim was lost; a time when the
        dispatch only rechecked children that are still running (nothing to commit: the
        caller hands the claim back until then)."""
        if not rtg.has_children:
            done = await self._execute(rtg, dispatch, heartbeat, dispatch.now, lease.owner)
            return done if done is None else self._supported(done)
        children = [a for a in dispatch.activations if is_child_dispatch(rtg, a)]
        if not children:
            done = await self._execute(rtg, dispatch, heartbeat, dispatch.now, lease.owner)
            return done if done is None else self._supported(done)
        others = tuple(a for a in dispatch.activations if not is_child_dispatch(rtg, a))
        executed: tuple[TaskOutcome, ...] | None = ()
        if others:
            subset = attrs.evolve(dispatch, activations=others)
            executed = await self._execute(rtg, subset, heartbeat, dispatch.now, lease.owner)
            if executed is None:
                return None
            executed = self._supported(executed)
        asked = await self._children.outcomes(lease.owner, rtg, dispatch, children, dispatch.now)
        run = dispatch.run
        unchanged = [
            o
            for o in asked
            if isinstance(o, AwaitingChild)
            and (task := run.active_tasks.get(o.task_id)) is not None
            and task.metadata.get("child_run_id") == o.child_run_id
        ]
        if (
            dispatch.resumed
            and not others
            and not dispatch.decided
            and len(unchanged) == len(asked)
        ):
            dispatched = {a.task_id for a in dispatch.activations}
            later = [t.fires_at for k, t in run.timers.items() if k not in dispatched]
            return min([*(o.check_at for o in unchanged), *later])
        return (*(executed or ()), *asked)

    def _emitters(self, owner: OwnerScope) -> Callable[[Activation], Emitter] | None:
        """Each attempt's ``ctx.emit`` sender, where the backend has a live feed."""
        if self._features is None:
            self._features = self._backend.capabilities().features
        if Feature.STREAMS not in self._features:
            return None
        if self.emissions is None:
            self.emissions = EmissionPump(getattr(self._backend, "feed"))  # noqa: B009
        return functools.partial(self.emissions.emitter, owner)

    def _supported(self, outcomes: tuple[TaskOutcome, ...]) -> tuple[TaskOutcome, ...]:
        if self._features is None:
            self._features = self._backend.capabilities().features
        return supported_waits(outcomes, self._features)

    async def _execute(
        self,
        rtg: RuntimeGraph,
        dispatch: Dispatch,
        heartbeat: Heartbeat,
        now: datetime,
        owner: OwnerScope,
    ) -> tuple[TaskOutcome, ...] | None:
        """Run the node work; ``None`` when the claim was lost first (the heartbeat
        cancels the work then)."""
        work = asyncio.ensure_future(
            execute(
                rtg,
                dispatch.activations,
                clock=lambda: now,
                application=self._application,
                telemetry=self._telemetry,
                emitters=self._emitters(owner),
            )
        )
        heartbeat.work = cast("asyncio.Future[object]", work)
        if heartbeat.lost.is_set():  # lost before the work was registered
            work.cancel()
        task = asyncio.current_task()
        try:
            outcomes = await work
        except asyncio.CancelledError:
            # The heartbeat's cancel of the work (the claim was lost) ends here; a cancel
            # of this drain itself (cancelling() > 0) goes on.
            if heartbeat.lost.is_set() and (task is None or not task.cancelling()):
                return None
            raise
        finally:
            heartbeat.work = None
        if heartbeat.lost.is_set():
            return None
        if self.emissions is not None:
            # what the nodes emitted goes out before their outcomes commit, so a reader
            # sees an attempt's emissions before its node_completed (bounded: best effort)
            await self.emissions.flush(EMISSION_FLUSH)
        return outcomes

    # -- hand-backs ----------------------------------------------------------------------

    async def _release(self, lease: Lease) -> None:
        """Best effort: a lost token makes this a no-op, and an expired claim is recovered
        by anyone anyway."""
        try:
            await self._backend.runs.release_claim(lease.owner, lease.run_id, lease.claim_token)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("releasing the claim on %s failed: %s", lease.run_id, exc)

    async def _abandon(
        self, lease: Lease, policy: Callable[[datetime], AbandonPolicy]
    ) -> Rescheduled | Poisoned | StaleAbandon | None:
        try:
            answer = await self._backend.runs.abandon_claim(
                lease.owner, lease.run_id, lease.claim_token, policy(await self._backend.now())
            )
            if isinstance(answer, Poisoned) and self._telemetry:
                self._telemetry.emit(
                    "docket.run.poisoned",
                    {},
                    {
                        "run_id": lease.run_id,
                        "tenant_id": tenant_id_of(lease.owner),
                        "graph_id": lease.graph_id,
                        "graph_hash": lease.graph_hash,
                        "reason": answer.reason,
                        "operation": "abandon_claim",
                    },
                )
            return answer
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("handing back run %s failed (%s); releasing it", lease.run_id, exc)
            await self._release(lease)
            return None

    async def _abandon_unusable(self, lease: Lease, problem: GraphProblem) -> DrainOutcome:
        settings = self._settings
        base = settings.abandon_backoff

        def policy(now: datetime) -> AbandonPolicy:
            pause = timedelta(seconds=base + random.uniform(0, base))
            return AbandonPolicy(
                expected_checkpoint_seq=lease.checkpoint_seq,
                retry_at=now + pause,
                max_claim_abandons=settings.max_claim_abandons,
            )

        answer = await self._abandon(lease, policy)
        log.warning("run %s handed back: %s (%s)", lease.run_id, problem.message, _name(answer))
        return DrainOutcome(
            kind="abandoned",
            run_id=lease.run_id,
            detail=f"{_name(answer)}: {problem.message}",
            poisoned=poisoned_claim(lease, answer),
        )

    async def _abandon_incompatible(self, lease: Lease, message: str) -> DrainOutcome:
        settings = self._settings
        backoff = Backoff(
            base=timedelta(seconds=settings.incompatible_backoff),
            cap=timedelta(seconds=settings.incompatible_backoff_cap),
        )

        def policy(now: datetime) -> AbandonPolicy:
            return AbandonPolicy(
                expected_checkpoint_seq=lease.checkpoint_seq,
                retry_at=now + backoff.base,
                max_claim_abandons=settings.max_claim_abandons,
                non_poisoning=True,
                backoff=backoff,
            )

        answer = await self._abandon(lease, policy)
        log.warning("run %s handed back: %s (%s)", lease.run_id, message, _name(answer))
        return DrainOutcome(
            kind="host_incompatible",
            run_id=lease.run_id,
            detail=f"{_name(answer)}: {message}",
            poisoned=poisoned_claim(lease, answer),  # not expected: it does not poison
        )

    async def _defer(
        self, lease: Lease, run: Run, resume_at: datetime, commits: int
    ) -> DrainOutcome:
        def policy(now: datetime) -> AbandonPolicy:
            return AbandonPolicy(
                expected_checkpoint_seq=run.checkpoint_seq,
                retry_at=max(resume_at, now),
                max_claim_abandons=self._settings.max_claim_abandons,
                non_poisoning=True,
            )

        answer = await self._abandon(lease, policy)
        return DrainOutcome(
            kind="deferred",
            run_id=run.id,
            commits=commits,
            detail=_name(answer),
            poisoned=poisoned_claim(lease, answer),  # not expected: it does not poison
        )


@attrs.frozen
class _Planned:
    """The next superstep's plan, and its commit if that was chained behind the last."""

    step: Dispatch | Moment | NotDue | CoreError | Terminated | Wait
    sent: _Sent | None


class _Sent:
    """One claimed commit, sent with the runtime's commit discipline (tries of the same
    proposal). Its first try may have gone in a chain (:func:`_send_chained`); ``tried``
    holds that answer."""

    def __init__(
        self,
        owner: OwnerScope,
        proposal: ClaimedProposal,
        events: Sequence[Event],
        store: TransitionStore,
        policy: CommitPolicy,
    ) -> None:
        self.proposal = proposal
        self.events = events
        self.tried: TransitionResult | None = None
        self._send = functools.partial(store.commit_claimed, owner, proposal, events)
        self._policy = policy

    async def answer(self, *, behind: bool = False) -> TransitionResult | Retryable:
        """The commit's definite answer. ``behind``: it was chained behind another commit,
        so a stale refusal of its first try may only mean it arrived first."""
        tried, self.tried = self.tried, None
        arrived_first = behind and isinstance(tried, StaleCheckpoint)
        if tried is not None and not isinstance(tried, Retryable) and not arrived_first:
            return tried
        what = f"commit of run {self.proposal.run.id}"
        return await commit(self._send, self._policy, what=what)

    def dropped(self, run_id: str) -> None:
        """The commit this one was chained behind failed: this one cannot have landed
        (fenced on it), unless that failure was only an unknown outcome."""
        if isinstance(self.tried, Run):
            log.warning("run %s ended by a chained commit after an unknown outcome", run_id)
        self.tried = None


async def _send_chained(chain: ChainedCommits, owner: OwnerScope, *sent: _Sent) -> None:
    """First tries of ``sent``, back to back in one chain; each keeps its answer."""
    answers = await chain.commit_claimed_chain(owner, [(s.proposal, s.events) for s in sent])
    if len(answers) != len(sent):
        raise RuntimeError(f"a chain of {len(sent)} commits got {len(answers)} answers")
    for one, answer in zip(sent, answers, strict=True):
        one.tried = answer


def _name(answer: object) -> str:
    return "released" if answer is None else type(answer).__name__.lower()
