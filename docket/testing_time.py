"""A time-skipping test environment: the real runtime under a manual clock that jumps.

A workflow that sleeps a week, retries after a day or waits for a deadline is tested in
milliseconds: :class:`TimeSkippingEnv` runs a real :class:`~docket.Docket` and real
:class:`~docket.runtime.worker.Worker` s on a real backend (memory, or a SQLite file in a
temporary directory), all reading one :class:`~docket.clock.ManualClock` through the
backend. Whenever every worker is idle — nothing is due now — the environment moves the
clock to the earliest pending wake (the smallest ``wake_at`` of the unfinished runs, an
orphaned claim's expiry, the earliest schedule ``due_at``) and lets the workers go on::

    async with TimeSkippingEnv(nodes=registry) as env:
        ref = await env.docket.save_graph(graph)
        run = await env.docket.start_run(ref, {"topic": "otters"})
        run = await env.wait(run.id)        # a 1-day retry backoff, in milliseconds
        assert run.status == "done"

How the workers are steered: the environment's Docket talks to the backend through a
thin view that counts the store traffic (polls, commits) and answers ``wait_for_work``
itself. An idle worker therefore waits for the environment's kick, never for the poll
interval (set to a year), and the environment knows the workers are idle when no drain
is in flight, a poll found nothing due since the last change and no schedule is due
(each worker's ticker looks at the due schedules on every poll the environment causes:
``schedule_poll`` is a microsecond). Nothing moves between
two calls of the environment (eager starts are off by default), so tests are
deterministic: ids come from :class:`~docket.testing.SequentialIds` and time from the
manual clock; with the default single worker of concurrency one, runs are drained one
at a time in the backend's claim order.

Every wait has a target and stops there: :meth:`run_until` (a status or a predicate),
:meth:`wait` (terminal, or waiting with no wake), :meth:`drive` (a number of commits),
:meth:`advance` (a time span), :meth:`idle` (no jump at all). ``until=`` caps a wait at
a moment the clock never passes. Errors: :class:`Stalled` (nothing is pending and the
target is not reached), :class:`NotReached` (``until`` came first), :class:`NotSettled`
(the workers kept working for ``real_timeout`` real seconds: a node that really sleeps).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TypeAlias

import attrs

from docket._facade_args import parse_statuses
from docket.backends import from_url
from docket.clock import ManualClock
from docket.contract.capabilities import Feature
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import ClaimBatch, RunListQuery
from docket.contract.protocols import Backend
from docket.errors import InvalidOptions, from_contract
from docket.facade import Docket
from docket.graph.nodes import NodeRegistry
from docket.records import SYSTEM, OwnerScope, Run, RunInfo, RunStatus, owner_scope
from docket.runtime.lifecycle import Ids, Observer
from docket.runtime.worker import Worker
from docket.settings import Settings
from docket.telemetry import Telemetry
from docket.testing import DEFAULT_START, SequentialIds
from docket.values import utc

__all__ = [
    "BackendFactory",
    "NotReached",
    "NotSettled",
    "Stalled",
    "TimeSkipError",
    "TimeSkippingEnv",
]

#: Builds the environment's backend around its clock (for backends other than the two
#: built in); the environment opens it through its Docket and closes it at exit.
BackendFactory: TypeAlias = Callable[[ManualClock], Backend]

# An idle worker must never wake on its own: the environment kicks it instead.
_IDLE_POLL: Final = 365 * 24 * 3600.0
# ... and its schedule ticker looks at the due schedules on every poll the env causes
_TICKER_POLL: Final = 1e-6
# Reads never change what is due; every other store call may.
_READS: Final = frozenset(
    {
        "fetch_run",
        "inspect_run",
        "list_runs",
        "claimed_run",
        "refresh_claim",
        "fetch_schedule",
        "list_schedules",
        "due_schedules",
    }
)
_UNFINISHED: Final = frozenset({RunStatus.RUNNING, RunStatus.WAITING})
_PAGE: Final = 500
_TICK: Final = timedelta(milliseconds=1)  # the stores' resolution
_END_OF_TIME: Final = datetime(9999, 1, 1, tzinfo=UTC)


class TimeSkipError(Exception):
    """A wait of the time-skipping environment could not reach its target."""

    def __init__(self, message: str, *, run: Run | None = None, at: datetime) -> None:
        super().__init__(message)
        self.run = run  # the run as it stood when the wait gave up (None: no run)
        self.at = at  # the clock then


class Stalled(TimeSkipError):
    """Nothing is pending (no wake, no schedule) and the target is not reached."""


class NotReached(TimeSkipError):
    """The clock reached the wait's ``until`` before the target."""


class NotSettled(TimeSkipError):
    """The workers kept working for ``real_timeout`` real seconds without going idle."""


# -- the steered view of the backend ----------------------------------------------------------


class _Traffic:
    """What the environment knows of its store traffic, and the kick for idle workers.

    ``generation`` moves on every change that may make work due (a commit, a claim, a
    release, a clock jump); ``quiet`` is the generation a poll last found nothing due at.
    """

    def __init__(self) -> None:
        self.generation = 0
        self.quiet = -1
        self.polls = 0
        self.commits: Counter[str] = Counter()  # committed transitions per run id
        self.changed = asyncio.Event()
        self._waiters: list[asyncio.Future[bool]] = []

    def bump(self) -> None:
        self.generation += 1
        self.changed.set()

    def count(self, answer: object) -> None:
        answers = answer if isinstance(answer, list | tuple) else (answer,)
        for one in answers:
            if isinstance(one, Run):
                self.commits[one.id] += 1

    async def wait_for_work(self) -> bool:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            return await future
        finally:
            if future in self._waiters:
                self._waiters.remove(future)

    def kick(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(True)


class _WatchedStore:
    """A sub-store seen by the environment: polls and changes are counted, the rest
    passes through. Wrappers keep the wrapped method's signature (``functools.wraps``),
    which negotiation checks."""

    def __init__(self, store: object, traffic: _Traffic, *, commits: bool) -> None:
        self._store = store
        self._traffic = traffic
        self._commits = commits

    def __getattr__(self, name: str) -> object:
        target = getattr(self._store, name)
        if name.startswith("_") or name in _READS or not inspect.iscoroutinefunction(target):
            return target
        traffic = self._traffic
        if name == "claim_due":

            @functools.wraps(target)
            async def poll(*args: Any, **kwargs: Any) -> object:
                traffic.polls += 1
                started = traffic.generation
                answer: object = None
                try:
                    answer = await target(*args, **kwargs)
                finally:
                    traffic.polls -= 1
                    empty = (
                        isinstance(answer, ClaimBatch) and not answer.leases and not answer.poisoned
                    )
                    if empty and traffic.generation == started:
                        traffic.quiet = started
                    if empty:
                        traffic.changed.set()
                    else:  # a claim (or a failure: who knows) changes what is due
                        traffic.bump()
                return answer

            return poll
        counts = self._commits

        @functools.wraps(target)
        async def change(*args: Any, **kwargs: Any) -> object:
            traffic.bump()
            try:
                answer = await target(*args, **kwargs)
            finally:
                traffic.bump()
            if counts:
                traffic.count(answer)
            return answer

        return change


class _SteeredBackend:
    """The backend as the environment's Docket sees it: ``wait_for_work`` answers the
    environment's kick (an idle worker never waits on real time), ``runs``,
    ``transitions`` and ``schedules`` are watched, everything else is the backend's."""

    def __init__(self, backend: Backend, traffic: _Traffic) -> None:
        self._backend = backend
        self._traffic = traffic

    @property
    def runs(self) -> object:
        return _WatchedStore(self._backend.runs, self._traffic, commits=False)

    @property
    def transitions(self) -> object:
        return _WatchedStore(self._backend.transitions, self._traffic, commits=True)

    @property
    def schedules(self) -> object:
        store = getattr(self._backend, "schedules", None)
        if store is None:
            raise AttributeError("schedules")
        return _WatchedStore(store, self._traffic, commits=False)

    async def wait_for_work(self, timeout: float) -> bool:
        return await self._traffic.wait_for_work()

    def __getattr__(self, name: str) -> object:
        return getattr(self._backend, name)

    def __repr__(self) -> str:
        return f"steered({self._backend!r})"


# -- the environment --------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class _DocketOptions:
    nodes: NodeRegistry | None
    context: Mapping[str, object] | None
    observers: Sequence[Observer]
    ids: Ids
    telemetry: Telemetry | None


class TimeSkippingEnv:
    """The real runtime under a manual clock that jumps over idle time (module doc).

    ``backend``: ``"memory"`` (default), ``"sqlite"`` (a file in a temporary directory,
    removed at exit; needs the ``docket-sqlite`` package) or a factory given the clock.
    ``workers`` background workers of ``concurrency`` slots each drain the runs (more
    than one slot makes the order of concurrent drains, and so sequential ids, depend on
    scheduling). ``settings`` and keyword overrides go to the Docket, except that
    ``poll_interval`` is set to a year (idle workers wait for the environment) and
    ``eager_starts`` defaults to ``False`` (a run started between two calls of the
    environment waits for the next one). ``ids`` defaults to a fresh
    :class:`~docket.testing.SequentialIds`. ``real_timeout``: real seconds the workers
    may keep busy before a wait raises :class:`NotSettled`; ``max_jumps``: clock jumps one
    wait may make before it raises :class:`Stalled` (a schedule ticking forever).
    """

    def __init__(
        self,
        *,
        nodes: NodeRegistry | None = None,
        backend: str | BackendFactory = "memory",
        start: datetime = DEFAULT_START,
        workers: int = 1,
        concurrency: int = 1,
        settings: Settings | None = None,
        context: Mapping[str, object] | None = None,
        observers: Sequence[Observer] = (),
        ids: Ids | None = None,
        telemetry: Telemetry | None = None,
        real_timeout: float = 60.0,
        max_jumps: int = 10_000,
        **overrides: Any,
    ) -> None:
        if backend not in ("memory", "sqlite") and not callable(backend):
            raise InvalidOptions(
                f"backend must be 'memory', 'sqlite' or a factory taking the clock, got {backend!r}"
            )
        for name, value in (("workers", workers), ("concurrency", concurrency)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidOptions(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(max_jumps, int) or isinstance(max_jumps, bool) or max_jumps < 1:
            raise InvalidOptions(f"max_jumps must be a positive integer, got {max_jumps!r}")
        if not isinstance(real_timeout, int | float) or not real_timeout > 0:
            raise InvalidOptions(f"real_timeout must be positive seconds, got {real_timeout!r}")
        self.clock = ManualClock(start)
        self._backend_choice = backend
        self._workers_wanted = workers
        self._concurrency = concurrency
        base = settings if settings is not None else Settings()
        self._settings = attrs.evolve(
            base,
            **{
                "eager_starts": False,
                **overrides,
                "poll_interval": _IDLE_POLL,
                "schedule_poll": _TICKER_POLL,
            },
        ).validate()
        self._options = _DocketOptions(
            nodes=nodes,
            context=context,
            observers=tuple(observers),
            ids=ids or SequentialIds(),
            telemetry=telemetry,
        )
        self._real_timeout = float(real_timeout)
        self._max_jumps = max_jumps
        self._traffic = _Traffic()
        self._raw: Backend | None = None
        self._steered: _SteeredBackend | None = None
        self._docket: Docket | None = None
        self._budgeted: dict[int, Docket] = {}
        self._workers: list[Worker] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def docket(self) -> Docket:
        """The environment's Docket (open inside ``async with``)."""
        if self._docket is None:
            raise RuntimeError("enter the environment first: 'async with TimeSkippingEnv(...)'")
        return self._docket

    @property
    def backend(self) -> Backend:
        """The backend itself (reads through it are not seen as traffic)."""
        if self._raw is None:
            raise RuntimeError("enter the environment first: 'async with TimeSkippingEnv(...)'")
        return self._raw

    @property
    def workers(self) -> tuple[Worker, ...]:
        return tuple(self._workers)

    def now(self) -> datetime:
        return self.clock()

    def commits(self, run_id: str) -> int:
        """Transitions committed to ``run_id`` through this environment so far."""
        return self._traffic.commits[run_id]

    async def __aenter__(self) -> TimeSkippingEnv:
        raw = self._make_backend()
        self._raw = raw
        self._steered = _SteeredBackend(raw, self._traffic)
        try:
            self._docket = await self._open_docket(self._settings)
            for number in range(self._workers_wanted):
                worker = self._docket.worker(
                    concurrency=self._concurrency, name=f"env-worker-{number + 1}"
                )
                worker.start()
                self._workers.append(worker)
            # Each worker polls once as it starts, whenever its task first runs: on a busy
            # machine that can be after the test's first start_run, and a run claimed
            # behind the test's back would look orphaned to drive() and be run twice.
            await self._settle()
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    def _make_backend(self) -> Backend:
        choice = self._backend_choice
        if choice == "memory":
            return MemoryBackend(clock=self.clock)
        if choice == "sqlite":
            self._tmp = tempfile.TemporaryDirectory(prefix="docket-env-")
            path = Path(self._tmp.name) / "docket.db"
            return from_url(f"sqlite:///{path}", clock=self.clock)
        assert callable(choice)
        return choice(self.clock)

    async def _open_docket(self, settings: Settings) -> Docket:
        options = self._options
        assert self._steered is not None
        docket = Docket(
            self._steered,  # type: ignore[arg-type]  # a view with the Backend's members
            nodes=options.nodes,
            settings=settings,
            context=options.context,
            observers=options.observers,
            ids=options.ids,
            telemetry=options.telemetry,
        )
        return await docket.open()

    async def _close(self) -> None:
        self._traffic.kick()
        budgeted, self._budgeted = self._budgeted, {}
        for twin in budgeted.values():
            await twin.close()
        if self._docket is not None:
            await self._docket.close()  # stops the workers
        self._workers = []
        if self._raw is not None:
            await self._raw.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -- waits -------------------------------------------------------------------------------

    async def idle(self) -> None:
        """Let the workers drain whatever is due now, without moving the clock."""
        await self._settle()

    async def advance(self, delta: timedelta) -> datetime:
        """Move the clock ``delta`` forward, stopping at every wake on the way (in order)
        so that what falls due runs at its own time; returns the new time."""
        if not isinstance(delta, timedelta) or delta < timedelta(0):
            raise InvalidOptions(f"advance takes a timedelta >= 0, got {delta!r}")
        target = self.clock() + delta
        for _ in range(self._max_jumps):
            await self._settle()
            wake = await self.next_wake()
            if wake is None or wake > target:
                if self.clock() < target:
                    self._jump(target)
                    await self._settle()
                return self.clock()
            self._jump(wake)
        raise Stalled(f"advance made {self._max_jumps} jumps (max_jumps)", at=self.clock())

    async def run_until(
        self,
        run_id: str,
        predicate: Callable[[Run], bool] | None = None,
        *,
        status: RunStatus | str | Iterable[RunStatus | str] | None = None,
        until: datetime | None = None,
        tenant_id: str | None = None,
    ) -> Run:
        """Skip time until ``run_id`` has ``status`` (one or several) and/or ``predicate``
        holds, judged whenever the workers are idle; returns the run then."""
        if predicate is None and status is None:
            raise InvalidOptions("run_until needs a status, a predicate, or both")
        wanted = parse_statuses(status)

        def reached(info: RunInfo) -> bool:
            run = info.run
            return (wanted is None or run.status in wanted) and (
                predicate is None or predicate(run)
            )

        return (await self._until(run_id, reached, until, tenant_id)).run

    async def wait(
        self, run_id: str, *, until: datetime | None = None, tenant_id: str | None = None
    ) -> Run:
        """Skip time until ``run_id`` is terminal, or waiting with no wake (for a person or
        a message with no deadline); returns the run then."""
        return (await self._until(run_id, _settled_for_good, until, tenant_id)).run

    async def drive(
        self,
        run_id: str,
        *,
        commits: int = 1,
        until: datetime | None = None,
        tenant_id: str | None = None,
    ) -> Run:
        """Advance ``run_id`` by at most ``commits`` committed transitions (fewer when it
        ends or waits with no wake first) and return it.

        The environment drains here, in the caller, one due run at a time under a drain
        budget of the commits left (``drain_max_moments``: the drain yields the run, due
        now, after its last allowed commit), skipping time when nothing is due; the
        background workers are not kicked meanwhile. Commits to other runs (a child the
        run waits for) do not count."""
        if not isinstance(commits, int) or isinstance(commits, bool) or commits < 1:
            raise InvalidOptions(f"commits must be a positive integer, got {commits!r}")
        owner = owner_scope(tenant_id)
        deadline = utc(until) if until is not None else None
        first = self._traffic.commits[run_id]
        for _ in range(self._max_jumps):
            info = await self._inspect(owner, run_id)
            done = self._traffic.commits[run_id] - first
            if done >= commits or _settled_for_good(info):
                return info.run
            twin = await self._budget(commits - done)
            summary = await twin.drain_due(max_runs=1)
            if summary.drained or summary.poisoned:
                continue
            wake = await self.next_wake()
            if wake is None or (deadline is not None and wake > deadline):
                return info.run
            self._jump(wake)
        raise Stalled(f"drive made {self._max_jumps} jumps (max_jumps)", at=self.clock())

    async def next_wake(self) -> datetime | None:
        """The earliest pending wake after now: a run's ``wake_at``, an orphaned claim's
        expiry, a schedule's ``due_at``; ``None`` when nothing is pending."""
        now = self.clock()
        ttl = timedelta(seconds=self.docket.settings.claim_ttl)
        wakes: list[datetime] = []
        async for info in self._unfinished():
            if info.poisoned:
                continue
            if info.claimed_at is not None:
                # idle, so nobody drains it: orphaned, stealable strictly after its TTL
                wakes.append(info.claimed_at + ttl + _TICK)
            elif info.wake_at is not None:
                wakes.append(info.wake_at)
        wakes.extend(await self._schedule_wakes())
        later = [wake for wake in wakes if wake > now]
        return min(later) if later else None

    # -- machinery ---------------------------------------------------------------------------

    async def _until(
        self,
        run_id: str,
        reached: Callable[[RunInfo], bool],
        until: datetime | None,
        tenant_id: str | None,
    ) -> RunInfo:
        owner = owner_scope(tenant_id)
        deadline = utc(until) if until is not None else None
        for _ in range(self._max_jumps):
            await self._settle()
            info = await self._inspect(owner, run_id)
            if reached(info):
                return info
            wake = await self.next_wake()
            if deadline is not None and (wake is None or wake > deadline):
                if self.clock() < deadline:
                    self._jump(deadline)
                    continue
                raise NotReached(
                    f"run {run_id!r} is {info.run.status} at {deadline.isoformat()}, the "
                    "wait's until",
                    run=info.run,
                    at=self.clock(),
                )
            if wake is None:
                raise Stalled(
                    f"run {run_id!r} is {info.run.status} and nothing is pending: no run "
                    "has a future wake and no schedule is due later",
                    run=info.run,
                    at=self.clock(),
                )
            self._jump(wake)
        raise Stalled(
            f"the wait for run {run_id!r} made {self._max_jumps} jumps (max_jumps)",
            at=self.clock(),
        )

    def _jump(self, moment: datetime) -> None:
        self.clock.set(moment)
        self._traffic.bump()

    async def _settle(self) -> None:
        """Return once every worker is idle: no drain or poll in flight, and a poll found
        nothing due since the last change. Kicks idle workers to make them poll."""
        traffic = self._traffic
        give_up = time.monotonic() + self._real_timeout
        while True:
            traffic.changed.clear()
            if traffic.polls == 0 and all(w.in_flight == 0 for w in self._workers):
                # a due schedule means a ticker pass is (or must be) on its way
                if traffic.quiet == traffic.generation and not await self._schedule_due():
                    return
                traffic.kick()
            left = give_up - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                async with asyncio.timeout(left):  # 3.11's wait_for can lose a cancel
                    await traffic.changed.wait()
            except TimeoutError:
                busy = sum(w.in_flight for w in self._workers)
                raise NotSettled(
                    f"the workers did not go idle within {self._real_timeout} real seconds "
                    f"({busy} drains and {traffic.polls} polls in flight): does a node "
                    "really sleep or loop?",
                    at=self.clock(),
                ) from None

    async def _budget(self, moments: int) -> Docket:
        """A second Docket over the same view whose drains commit at most ``moments``."""
        twin = self._budgeted.get(moments)
        if twin is None:
            settings = attrs.evolve(self.docket.settings, drain_max_moments=moments)
            twin = await self._open_docket(settings)
            self._budgeted[moments] = twin
        return twin

    async def _inspect(self, owner: OwnerScope, run_id: str) -> RunInfo:
        found = await self.backend.runs.inspect_run(owner, run_id)
        if not isinstance(found, RunInfo):
            raise from_contract(found, subject=f"run {run_id!r}")
        return found

    async def _unfinished(self) -> AsyncIterator[RunInfo]:
        runs = self.backend.runs
        before = None
        while True:
            query = RunListQuery(limit=_PAGE, before=before, statuses=_UNFINISHED)
            page = await runs.list_runs(SYSTEM, query)
            for summary in page.runs:
                found = await runs.inspect_run(owner_scope(summary.tenant_id), summary.id)
                if isinstance(found, RunInfo):
                    yield found
            if not page.has_more:
                return
            before = page.next_before

    async def _schedule_due(self) -> bool:
        if Feature.SCHEDULES not in self.docket.capabilities.features:
            return False
        store = getattr(self.backend, "schedules", None)
        return store is not None and bool(await store.due_schedules(now=self.clock(), limit=1))

    async def _schedule_wakes(self) -> list[datetime]:
        if Feature.SCHEDULES not in self.docket.capabilities.features:
            return []
        store = getattr(self.backend, "schedules", None)
        if store is None:
            return []
        # oldest due_at first: the first schedule due by the end of time is the next one
        first = await store.due_schedules(now=_END_OF_TIME, limit=1)
        due = first[0].due_at if first else None
        return [due] if due is not None else []


def _settled_for_good(info: RunInfo) -> bool:
    """Terminal, or waiting with no wake: only a person, a message or a signal moves it."""
    run = info.run
    return run.status.terminal or (run.status is RunStatus.WAITING and info.wake_at is None)
