"""The worker: claims due runs in batches and drains them, a bounded number at a time.

One dispatcher loop per worker:

* **poll** — ``claim_due`` with ``limit = concurrency - in flight`` (the backend's clock
  decides what is due: the policy's ``now`` is left ``None``). Expired claims of dead
  workers are part of what ``claim_due`` takes, so recovery needs nothing special. With a
  demand of one the preferred class alternates between ready and expired runs after each
  successful poll, so neither can starve the other. A worker serving named queues
  (``queues=``), or any worker while a served queue has limits, claims through
  :class:`~docket.runtime.queues.QueueClaimer` (slots first in a limited queue);
* **launch** — one drain task per lease (:class:`~docket.runtime.drain.Drainer`);
  candidates that ran out of claim attempts come back *poisoned* instead of leased: the
  backend has already set them aside, the worker logs them and calls ``on_poisoned``.
  A drain whose hand-back poisoned its run (past ``max_claim_abandons``: this deployment
  cannot use the run's graph) is reported the same way, from the drain's task;
* **wait** — when the poll filled less than its demand, the dispatcher sleeps until the
  backend announces work (``wait_for_work``: immediate within a process), a drain ends
  (a slot is free), the worker is stopped, or the poll interval passes. The interval is
  jittered between half and all of ``poll_interval`` so that processes sharing a store do
  not poll in lock-step; it is measured from the *start* of the previous poll, so an idle
  worker polls at least once per ``poll_interval``;
* **tick** — given a :class:`~docket.runtime.schedules.ScheduleTicker` (the backend
  declares ``schedules``), each poll also starts a ticker pass in its own task, at most
  every ``schedule_poll`` seconds and one at a time (docs/schedules.md);
* **stop** — :meth:`Worker.stop` stops claiming at once; drains in flight yield at their
  next commit boundary (the run is committed as due-now and its claim released) and are
  awaited up to ``shutdown_timeout`` from the stop (so is a ``claim_due`` in flight, which
  with the store down would wait out a connection timeout); whatever is still running
  then is cancelled and its claim released, so another worker can take the run without
  waiting for the TTL. Those releases go together and get at most ``claim_ttl`` (by then
  the claims have expired), so a store that is down does not hold the stop for a
  connection timeout per run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from datetime import datetime, timedelta
from typing import TypeAlias, cast

import attrs

from docket.contract.proposals import ClaimBatch, ClaimClass, ClaimPolicy, Lease, PoisonedClaim
from docket.contract.protocols import Backend
from docket.records import OwnerScope, Run, tenant_id_of
from docket.runtime.drain import Drainer, DrainOutcome
from docket.runtime.emissions import EmissionStats
from docket.runtime.queues import QueueClaimer, require_served, require_store, served_queues
from docket.runtime.retention import Pruner
from docket.runtime.schedules import ScheduleTicker
from docket.settings import Settings
from docket.telemetry import NO_SPAN, Measurements, Span, Telemetry, stamp_logger, store_result

__all__ = ["PoisonHandler", "Worker", "WorkerStats"]

log = stamp_logger(logging.getLogger("docket.worker"))

#: Called with each run ``claim_due`` poisoned instead of leasing (sync or async).
PoisonHandler: TypeAlias = Callable[[PoisonedClaim], Awaitable[None] | None]


@attrs.define
class WorkerStats:
    """Counters of one worker, for tests, logs and dashboards."""

    polls: int = 0
    leases: int = 0
    poisoned: int = 0
    commits: int = 0
    eager_starts: int = 0  # runs started by this process and handed over claimed
    released_at_shutdown: int = 0
    outcomes: Counter[str] = attrs.field(factory=Counter)
    poisoned_runs: list[PoisonedClaim] = attrs.field(factory=list)


class Worker:
    """Claims and drains due runs until stopped. Use as ``async with worker: ...`` or call
    :meth:`start` / :meth:`stop` (or await :meth:`run` in a task of your own)."""

    def __init__(
        self,
        backend: Backend,
        drainer: Drainer,
        settings: Settings,
        *,
        on_poisoned: PoisonHandler | None = None,
        name: str = "worker",
        telemetry: Telemetry | None = None,
        ticker: ScheduleTicker | None = None,
        queues: Collection[str] | None = None,
    ) -> None:
        self._backend = backend
        # Feature.QUEUES: the queues served (None: every one), checked to exist on start
        self.queues = served_queues(queues)
        if self.queues is not None:
            require_store(drainer.queues.view, "serve named queues")
        self._queues_checked = self.queues is None
        self._claimer = QueueClaimer(backend, drainer.queues, self.queues)
        self._ticker = ticker
        self._ticking: asyncio.Task[object] | None = None
        self._ticked_at: float | None = None  # monotonic start of the last ticker pass
        # Feature.ADMISSION: the periodic repair of admission ledgers (runtime/admission.py)
        self._reconciling: asyncio.Task[object] | None = None
        self._reconciled_at: float | None = None
        self._telemetry = telemetry if telemetry is not None else Telemetry()
        self._drainer = drainer
        self._settings = settings
        self._on_poisoned = on_poisoned
        self.name = name
        self.stats = WorkerStats()
        self._active: dict[asyncio.Task[DrainOutcome], Lease] = {}
        self._parked: set[asyncio.Task[DrainOutcome]] = set()  # active, run handed back
        self._reserved = 0  # slots promised to eager starts still committing
        self._settled = asyncio.Event()  # set whenever no slot is reserved
        self._settled.set()
        self._stopping = False
        self._stop_deadline: float | None = None  # monotonic; set when a stop begins
        self._stop_signal: asyncio.Future[bool] | None = None  # resolved when it does
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._preference = ClaimClass.READY
        self._pruner = Pruner.of(backend, settings)  # retention: off unless configured

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @property
    def in_flight(self) -> int:
        return len(self._active)

    @property
    def emissions(self) -> EmissionStats:
        """What ``ctx.emit`` handed the feed through this worker's drainer: published,
        dropped on a full queue, failed (docket/runtime/emissions.py)."""
        pump = self._drainer.emissions
        return pump.stats if pump is not None else EmissionStats()

    def serves(self, queue: str) -> bool:
        """Whether this worker claims runs of ``queue``."""
        return self.queues is None or queue in self.queues

    async def check_queues(self) -> None:
        """``NotFound`` when a served queue does not exist (once; :meth:`run` and
        ``async with`` call it)."""
        if not self._queues_checked:
            await require_served(self._drainer.queues.view, self.queues)
            self._queues_checked = True

    # -- eager starts ----------------------------------------------------------------------

    def reserve(self) -> bool:
        """Promise a slot to a run this process is starting (an eager start): False when
        the worker is not running, stopping, or has no free slot. Follow with
        :meth:`adopt` once the start committed claimed, or :meth:`unreserve`."""
        if not self.running or self._stopping:
            return False
        if self._busy() >= self._settings.concurrency:
            return False
        self._reserved += 1
        self._settled.clear()
        return True

    def unreserve(self) -> None:
        """Give back a slot :meth:`reserve` promised (the start failed or went unclaimed)."""
        self._settle_reservation()
        if self._wake is not None:
            self._wake.set()

    def adopt(
        self,
        owner: OwnerScope,
        run: Run,
        token: str,
        claimed_at: datetime,
        slot: tuple[str, str] | None = None,
    ) -> None:
        """Drain ``run``, which this process just started claimed by ``token`` at
        ``claimed_at``, in the slot :meth:`reserve` promised; the drain starts from ``run``
        (what the start wrote) instead of reading it. A worker stopping meanwhile hands the
        claim back (the drain's first check). ``slot``: the ``(queue, holder)`` slot the
        start took in a limited queue, released when the claim ends."""
        self._settle_reservation()
        if slot is not None:
            self._drainer.queues.slots.hold(token, *slot)
        self.stats.eager_starts += 1
        lease = Lease(
            run_id=run.id,
            owner=owner,
            graph_id=run.graph_id,
            graph_hash=run.graph_hash,
            checkpoint_seq=run.checkpoint_seq,
            claim_token=token,
            claimed_at=claimed_at,
            claim_attempt=1,  # the start counted it, as claim_due counts a lease
            orphan_ttl=_seconds(self._settings.claim_ttl),
        )
        self._launch(lease, run)

    def _settle_reservation(self) -> None:
        self._reserved -= 1
        if not self._reserved:
            self._settled.set()

    def start(self) -> None:
        """Start the dispatcher in a task of the running loop."""
        if self._task is not None:
            raise RuntimeError("this worker was started already")
        self._task = asyncio.get_running_loop().create_task(self.run(), name=self.name)

    def request_stop(self) -> None:
        """Stop claiming; in-flight drains wind down (see :meth:`stop`)."""
        self._begin_stop()
        if self._wake is not None:
            self._wake.set()

    def _begin_stop(self) -> None:
        if self._stop_deadline is None:
            self._stop_deadline = time.monotonic() + self._settings.shutdown_timeout
        self._stopping = True
        if self._stop_signal is not None and not self._stop_signal.done():
            self._stop_signal.set_result(True)

    def _grace(self) -> float:
        """Seconds left of ``shutdown_timeout`` since the stop began."""
        assert self._stop_deadline is not None
        return max(0.0, self._stop_deadline - time.monotonic())

    async def stop(self) -> None:
        """Stop claiming, let in-flight drains finish (up to ``shutdown_timeout``), cancel
        and release the rest. Idempotent."""
        self.request_stop()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def __aenter__(self) -> Worker:
        await self.check_queues()
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- the dispatcher ------------------------------------------------------------------

    async def run(self) -> None:
        """The dispatcher loop; returns after a graceful shutdown (:meth:`request_stop`)."""
        await self.check_queues()
        self._wake = asyncio.Event()
        self._stop_signal = asyncio.get_running_loop().create_future()
        if self._stopping:
            self._wake.set()
            self._stop_signal.set_result(True)
        announced: asyncio.Task[bool] | None = None
        slots = self._drainer.queues.slots
        slots.start_carrying()  # an ended claim's slot may ride on this loop's next poll
        try:
            while not self._stopping:
                self._wake.clear()
                if announced is None or announced.done():
                    announced = asyncio.ensure_future(self._announced(self._pause()))
                poll_started = time.monotonic()
                self._maybe_tick(poll_started)
                self._maybe_reconcile(poll_started)
                if self._pruner is not None:
                    self._pruner.maybe_start(poll_started)
                demand = self._settings.concurrency - self._busy()
                filled = False
                if demand > 0:
                    filled = await self._poll_unless_stopped(demand)
                if filled and not self._stopping:
                    await asyncio.sleep(0)  # more may be due: poll again, letting others run
                    continue
                await self._idle(announced, poll_started)
        finally:
            if announced is not None and not announced.done():
                announced.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await announced
            await self._stop_ticking()
            await self._stop_reconciling()
            if self._pruner is not None:
                await self._pruner.stop()
            try:
                await self._shutdown()
            finally:
                await slots.stop_carrying()  # no poll follows: noted slots go now

    def _maybe_tick(self, now: float) -> None:
        """Start a ticker pass unless one runs or the last began under ``schedule_poll``
        ago (a pass in its own task: a slow store must not hold up claiming)."""
        if self._ticker is None or (self._ticking is not None and not self._ticking.done()):
            return
        interval = self._settings.schedule_interval
        if self._ticked_at is not None and now - self._ticked_at < interval:
            return
        self._ticked_at = now
        self._ticking = asyncio.ensure_future(self._tick(self._ticker))

    async def _tick(self, ticker: ScheduleTicker) -> object:
        try:
            return await ticker.tick()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("the schedule ticker failed (%s); trying again next poll", exc)
            return None

    async def _stop_ticking(self) -> None:
        # a pass cut short is a crash between a start and its advance: the next repeats it
        if self._ticking is not None and not self._ticking.done():
            self._ticking.cancel()
            await asyncio.gather(self._ticking, return_exceptions=True)

    def _maybe_reconcile(self, now: float) -> None:
        """Start an admission reconcile pass (its own task) every ``admission_reconcile``
        seconds while the backend declares admission and none runs."""
        admissions = self._drainer.admissions
        if admissions.store is None or (
            self._reconciling is not None and not self._reconciling.done()
        ):
            return
        interval = self._settings.admission_reconcile
        if self._reconciled_at is not None and now - self._reconciled_at < interval:
            return
        self._reconciled_at = now
        self._reconciling = asyncio.ensure_future(self._reconcile())

    async def _reconcile(self) -> object:
        settings = self._settings
        try:
            now = await self._drainer.now()
            report = await self._drainer.admissions.reconcile(
                now,
                settle=timedelta(seconds=settings.admission_reconcile),
                grace=timedelta(seconds=settings.admission_grace),
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("the admission reconcile failed (%s); trying again later", exc)
            return None
        if report.finished or report.started:
            log.info(
                "admission reconcile: released %d finished runs, started %d",
                report.finished,
                report.started,
            )
        return report

    async def _stop_reconciling(self) -> None:
        # a pass cut short is repeated by the next one (every step of it is idempotent)
        if self._reconciling is not None and not self._reconciling.done():
            self._reconciling.cancel()
            await asyncio.gather(self._reconciling, return_exceptions=True)

    def _pause(self) -> float:
        interval = self._settings.poll_interval
        return random.uniform(interval / 2, interval)

    async def _announced(self, timeout: float) -> bool:
        try:
            return await self._backend.wait_for_work(timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("wait_for_work failed (%s); polling instead", exc)
            await asyncio.sleep(timeout)
            return False

    async def _idle(self, announced: asyncio.Task[bool], poll_started: float) -> None:
        assert self._wake is not None
        if self._stopping:
            return
        woken = asyncio.ensure_future(self._wake.wait())
        limit = max(0.0, poll_started + self._settings.poll_interval - time.monotonic())
        try:
            await asyncio.wait(
                {announced, woken}, timeout=limit, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            if not woken.done():
                woken.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await woken

    async def _poll_unless_stopped(self, demand: int) -> bool:
        """:meth:`_poll`, given no longer than the stop's ``shutdown_timeout`` once a stop
        begins: with the store down, ``claim_due`` waits out a connection timeout (10 s on
        PostgreSQL) that a stop need not. A poll cancelled then may have claimed runs and
        lost the answer; those claims expire after ``claim_ttl``, as a crashed worker's do."""
        assert self._stop_signal is not None
        poll = asyncio.ensure_future(self._poll(demand))
        either: set[asyncio.Future[bool]] = {poll, self._stop_signal}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not poll.done():
                await asyncio.wait({poll}, timeout=self._grace())
        finally:
            if not poll.done():
                poll.cancel()
                await asyncio.gather(poll, return_exceptions=True)
        return not poll.cancelled() and poll.result()

    async def _poll(self, demand: int) -> bool:
        """One ``claim_due``; True when it filled the whole demand (more may be due)."""
        settings = self._settings
        policy = ClaimPolicy(
            limit=demand,
            orphan_ttl=_seconds(settings.claim_ttl),
            max_claim_attempts=settings.max_claim_attempts,
            preference=self._preference if demand == 1 else None,
        )
        self.stats.polls += 1
        span = claim_span(self._telemetry, self.name)
        try:
            batch = await self._claimer.claim(policy)
        except asyncio.CancelledError as exc:
            span.fail(exc)
            raise
        except Exception as exc:
            span.fail(exc)
            log.warning("claim_due failed: %s", exc)
            return False
        end_claim_span(span, batch, demand)
        if not isinstance(batch, ClaimBatch):
            log.info("claim_due answered %r; polling again later", batch)
            return False
        if demand == 1 and (batch.leases or batch.poisoned):
            self._preference = (
                ClaimClass.EXPIRED if self._preference is ClaimClass.READY else ClaimClass.READY
            )
        for poisoned in batch.poisoned:
            await self._report_poisoned(poisoned)
        for lease in batch.leases:
            if self._stopping:
                await self._release(lease)
                continue
            self._launch(lease)
        return len(batch.leases) + len(batch.poisoned) >= demand

    def _busy(self) -> int:
        """Slots taken: drains still working their run, and slots promised to starts."""
        return len(self._active) - len(self._parked) + self._reserved

    def _launch(self, lease: Lease, run: Run | None = None) -> None:
        self.stats.leases += 1
        task = asyncio.get_running_loop().create_task(
            self._drain(lease, run), name=f"drain {lease.run_id}"
        )
        self._active[task] = lease
        task.add_done_callback(self._finished)

    async def _drain(self, lease: Lease, run: Run | None) -> DrainOutcome:
        outcome = await self._drainer.drain(
            lease, stopping=lambda: self._stopping, run=run, parked=self._drain_parked
        )
        if outcome.poisoned is not None:  # the drain emitted its telemetry already
            await self._report_poisoned(outcome.poisoned, operation="abandon_claim")
        return outcome

    def _drain_parked(self) -> None:
        """Called from a drain's task once its run is handed back: the slot is free."""
        task = asyncio.current_task()
        if task in self._active:
            self._parked.add(cast(asyncio.Task[DrainOutcome], task))
            if self._wake is not None:
                self._wake.set()

    def _finished(self, task: asyncio.Task[DrainOutcome]) -> None:
        self._active.pop(task, None)
        self._parked.discard(task)
        if not task.cancelled() and task.exception() is None:
            outcome = task.result()
            self.stats.outcomes[outcome.kind] += 1
            self.stats.commits += outcome.commits
        if self._wake is not None:
            self._wake.set()

    async def _report_poisoned(
        self, poisoned: PoisonedClaim, *, operation: str = "claim_due"
    ) -> None:
        if operation == "claim_due":
            report_poisoned(self._telemetry, poisoned)
        self.stats.poisoned += 1
        self.stats.poisoned_runs.append(poisoned)
        tenant_id = tenant_id_of(poisoned.owner)
        log.error(
            "run %s (tenant %s) was poisoned by %s (%s): it is set aside until retry_poisoned_run",
            poisoned.run_id,
            tenant_id or "-",
            operation,
            poisoned.poison_reason,
            extra={"run_id": poisoned.run_id, "tenant_id": tenant_id},
        )
        if self._on_poisoned is None:
            return
        try:
            result = self._on_poisoned(poisoned)
            if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("on_poisoned failed for run %s", poisoned.run_id)

    async def _release(self, lease: Lease) -> None:
        try:
            await self._backend.runs.release_claim(lease.owner, lease.run_id, lease.claim_token)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("releasing the claim on %s failed: %s", lease.run_id, exc)
        slots = self._drainer.queues.slots
        if slots.holds(lease):
            await slots.release(lease)

    async def _shutdown(self) -> None:
        self._begin_stop()
        # an eager start still committing adopts (and its drain releases) or gives back
        # its slot within one commit; wait for it so its drain is not left behind
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._grace()):  # 3.11's wait_for can lose a cancel
                await self._settled.wait()
        active = dict(self._active)
        if not active:
            return
        _, late = await asyncio.wait(set(active), timeout=self._grace())
        for task in late:
            task.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)
        cancelled = [active[task] for task in late if task.cancelled()]
        self.stats.released_at_shutdown += len(cancelled)
        await self._release_all(cancelled)

    async def _release_all(self, leases: list[Lease]) -> None:
        """Release the claims of cancelled drains, together and for at most ``claim_ttl``.

        One at a time, a store that is down (a database restarting) made each release
        wait out its own connection timeout (10 s on PostgreSQL): a worker holding 8 runs
        took 80 s to stop. A release is only a head start for the next worker: the
        claim's heartbeat stopped with its drain, so it expires within ``claim_ttl`` anyway
        and a release still unanswered by then is worth nothing."""
        if not leases:
            return
        sends = [asyncio.ensure_future(self._release(lease)) for lease in leases]
        _, late = await asyncio.wait(sends, timeout=self._settings.claim_ttl)
        for send in late:
            send.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)
            log.warning(
                "%d claims were not released within claim_ttl; they expire on their own",
                len(late),
            )


def claim_span(telemetry: Telemetry, worker: str) -> Span:
    """A ``docket.worker.claim`` span around one ``claim_due``."""
    if not telemetry:
        return NO_SPAN
    return telemetry.span("docket.worker.claim", {"worker": worker, "operation": "claim_due"})


def end_claim_span(span: Span, batch: object, demand: int) -> None:
    """End a claim span with what came back: counts for a batch, else the refusal."""
    if not span:
        return
    counts: Measurements = {"demand": demand}
    if isinstance(batch, ClaimBatch):
        counts.update({"leases": len(batch.leases), "poisoned": len(batch.poisoned)})
        span.stop({"result": "ok"}, counts)
    else:
        span.stop({"result": store_result(batch)}, counts)


def report_poisoned(telemetry: Telemetry, poisoned: PoisonedClaim) -> None:
    """Emit ``docket.run.poisoned`` for a run ``claim_due`` set aside."""
    if telemetry:
        telemetry.emit(
            "docket.run.poisoned",
            {},
            {
                "run_id": poisoned.run_id,
                "tenant_id": tenant_id_of(poisoned.owner),
                "reason": poisoned.poison_reason,
                "operation": "claim_due",
            },
        )


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)
