"""The subject under test, the per-case context and the operational-tuple audit.

A case receives a :class:`Kit`: the subject's backend and namespace, the backend's time
at the start of the case (``t0``; every ``now`` the kit passes is derived from it), the
invariant id the case checks, and assertion helpers whose messages all start with that
id. Reads made through the kit (:meth:`Kit.info`) are audited against the operational
tuple invariants (``docs/invariants.md#OPERATIONAL-TUPLE-AUDIT``) after every step.
Every id is a row of the invariant catalogue, ``docs/invariants.md``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

import attrs
import pytest

from docket.clock import ManualClock
from docket.contract import (
    Backend,
    ClaimBatch,
    ClaimPolicy,
    EventListQuery,
    Lease,
    Limits,
    NotFound,
    RunListQuery,
)
from docket.records import (
    DURABLE_STATUSES,
    SYSTEM,
    CheckpointType,
    Event,
    EventPage,
    OwnerScope,
    RunInfo,
    RunStatus,
    RunSummary,
    Tenant,
    tenant_id_of,
)

T = TypeVar("T")

#: The fixed start of every injected ManualClock (the Elixir suite's fixed clock).
CLOCK_START = datetime.fromisoformat("2026-07-15T12:00:00+00:00")

#: The invariant catalogue: one row, anchored by its id, per invariant the kit checks.
CATALOGUE = "docs/invariants.md"


def catalogue_link(ident: str) -> str:
    """Where the rule of invariant ``ident`` is written (its row in the catalogue)."""
    return f"{CATALOGUE}#{ident}"


#: Builds one more backend for the current case with the given options (``limits=``,
#: ``clock=``); returns ``None`` when the subject cannot take those options.
Maker = Callable[..., Backend | None]

#: Which optional features the subject declared, as the cases that depend on one saw it:
#: ``{feature: {invariant id: declared}}``, for the kit's terminal summary.
FEATURES_SEEN: dict[str, dict[str, bool]] = {}


@dataclass
class Subject:
    """What the kit runs against: an (unopened) backend, a namespace, maybe a clock.

    ``clock`` is the :class:`ManualClock` the backend was built with, or ``None`` when
    the backend keeps its own clock (a database's). ``make`` builds extra backends for
    the same case (e.g. with small ``limits``). The plugin opens ``backend`` before the
    case and closes it, and everything ``make`` built, afterwards.
    """

    backend: Backend
    namespace: str
    clock: ManualClock | None = None
    make: Maker | None = None
    rounds: int = 50
    t0: datetime | None = None
    extra: list[Backend] = field(default_factory=list)
    #: Builds a backend on the *same* store as ``backend`` (same URL and namespace), for
    #: the durability cases; ``None`` when the subject cannot.
    reopen: Callable[[], Backend | None] | None = None
    #: How a child process builds that same store: ``("url", url)`` (namespace filled in)
    #: or ``("factory", "module:callable")`` called with ``namespace=``.
    source: tuple[str, str] | None = None


class KitFailure(AssertionError):
    """A contract violation, reported with the invariant id it breaks."""


def _fmt(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 1200 else text[:1200] + "…"


def field_diff(got: object, want: object, path: str = "") -> list[str]:
    """``name: got != want`` for each field that differs between two records of one type
    (recursing into nested records); empty when they are not such records."""
    if isinstance(got, tuple | list) and type(got) is type(want):
        if len(got) != len(want):
            return [f"{path or 'items'} length: {len(got)} != {len(want)}"]
        return [
            line
            for index, (mine, theirs) in enumerate(zip(got, want, strict=True))
            if mine != theirs
            for line in field_diff(mine, theirs, f"{path}[{index}].")
            or [f"{path}[{index}]: {_fmt(mine)} != {_fmt(theirs)}"]
        ]
    if type(got) is not type(want) or not attrs.has(type(got)):
        return []
    out: list[str] = []
    for field_ in attrs.fields(type(got)):  # type: ignore[arg-type]  # attrs.has checked it
        mine, theirs = getattr(got, field_.name), getattr(want, field_.name)
        if mine == theirs:
            continue
        name = f"{path}{field_.name}"
        out.extend(
            field_diff(mine, theirs, f"{name}.") or [f"{name}: {_fmt(mine)} != {_fmt(theirs)}"]
        )
    return out


def audit(info: RunInfo, *, owner: OwnerScope | None = None, invariant: str = "") -> None:
    """Check the operational tuple invariants (OPERATIONAL-TUPLE-AUDIT) of one ``RunInfo``.

    Raises :class:`KitFailure` naming every broken invariant. ``owner`` additionally
    checks that the run is owned by that scope (ownership is immutable).
    """
    problems = audit_problems(info, owner=owner)
    if problems:
        prefix = f"[{invariant}] " if invariant else ""
        raise KitFailure(
            f"{prefix}OPERATIONAL-TUPLE-AUDIT of run {info.run.id!r}: "
            + "; ".join(problems)
            + f"\n  RunInfo = {_fmt(info)}"
        )


def _aware_us(value: datetime | None) -> bool:
    return value is None or (isinstance(value, datetime) and value.utcoffset() == timedelta(0))


def audit_problems(info: RunInfo, *, owner: OwnerScope | None = None) -> list[str]:
    """Every operational-tuple invariant ``info`` breaks (empty when it is sound)."""
    out: list[str] = []
    if not isinstance(info, RunInfo):
        return [f"expected a RunInfo, got {type(info).__name__}"]
    run = info.run
    status = run.status
    if status not in DURABLE_STATUSES:
        out.append(f"1: status {status!r} is not a durable status")
    terminal = isinstance(status, RunStatus) and status.terminal
    if (run.finished_at is not None) != terminal:
        out.append(f"2: finished_at {run.finished_at!r} must be present iff terminal ({status})")
    if (info.poisoned_at is None) != (info.poison_reason is None):
        out.append("4: poisoned_at and poison_reason must be present together")
    claimed = info.claimed_at is not None
    woken = info.wake_at is not None
    poisoned = info.poisoned_at is not None
    # a waiting run may be due at a time (a deadline, a message timeout) and is then
    # claimed like a running one (Feature.TIMERS); one waiting on External has neither
    live = status in (RunStatus.RUNNING, RunStatus.WAITING)
    if not live and (claimed or woken or poisoned):
        out.append(f"5: a {status} run has no claim, wake or poison")
    if poisoned and (not live or claimed or woken):
        out.append("6: a poisoned run is running or waiting, with no claim and no wake")
    if status is RunStatus.RUNNING and not poisoned and claimed == woken:
        out.append("7: a healthy running run has exactly one of wake_at / claim")
    if status is RunStatus.WAITING and claimed and woken:
        out.append("7: a waiting run has at most one of wake_at / claim")
    for name in ("claim_attempts", "claim_abandons"):
        value = getattr(info, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            out.append(f"8: {name} must be a non-negative integer, got {value!r}")
    for name in ("step", "checkpoint_seq", "event_seq"):
        value = getattr(run, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            out.append(f"8: run.{name} must be a non-negative integer, got {value!r}")
    if isinstance(run.checkpoint_seq, int) and run.checkpoint_seq < 1:
        out.append("8: a stored run has checkpoint_seq >= 1")
    if info.tenant_id is not None and (not isinstance(info.tenant_id, str) or not info.tenant_id):
        out.append("8: tenant_id, when present, is a non-empty string")
    if owner is not None and info.tenant_id != tenant_id_of(owner):
        out.append(f"10: owner changed: tenant_id {info.tenant_id!r}, expected {owner!r}")
    for name in ("wake_at", "claimed_at", "poisoned_at"):
        if not _aware_us(getattr(info, name)):
            out.append(f"timestamps: {name} must be an aware UTC datetime")
    if not isinstance(info.latest_checkpoint_type, CheckpointType):
        out.append(f"latest_checkpoint_type {info.latest_checkpoint_type!r} is not a type")
    return out


@dataclass(frozen=True)
class Snapshot:
    """Everything observable about one run: for "nothing changed" checks."""

    info: RunInfo | NotFound
    events: tuple[Event, ...] | NotFound
    latest: object


class Kit:
    """The per-case context: the subject, ``t0``, the invariant id and assertions."""

    def __init__(self, subject: Subject, invariant: str) -> None:
        self.subject = subject
        self.invariant = invariant
        self._labels = 0

    # -- subject ------------------------------------------------------------------------

    @property
    def b(self) -> Backend:
        return self.subject.backend

    @property
    def ns(self) -> str:
        return self.subject.namespace

    @property
    def t0(self) -> datetime:
        assert self.subject.t0 is not None, "the plugin sets t0 when it opens the backend"
        return self.subject.t0

    @property
    def rounds(self) -> int:
        return self.subject.rounds

    def at(self, seconds: float = 0, *, us: int = 0) -> datetime:
        """``t0`` shifted by ``seconds`` (and ``us`` microseconds)."""
        return self.t0 + timedelta(seconds=seconds, microseconds=us)

    def name(self, label: str) -> str:
        """A namespaced id (unique per case): ``<namespace>-<label>``."""
        return f"{self.ns}-{label}"

    def fresh(self, label: str = "x") -> str:
        self._labels += 1
        return self.name(f"{label}{self._labels}")

    def tenant(self, label: str) -> Tenant:
        return Tenant(self.name(f"t{label}"))

    async def variant(self, **options: Any) -> Backend | None:
        """An extra, opened backend with ``options`` (closed after the case), if possible."""
        if self.subject.make is None:
            return None
        backend = self.subject.make(**options)
        if backend is None:
            return None
        self.subject.extra.append(backend)
        await backend.open()
        return backend

    async def small_limits(self, limits: Limits) -> tuple[Backend, Limits]:
        """A backend enforcing ``limits`` if the subject takes custom limits.

        Otherwise the subject itself with the limits it declares.
        """
        backend = await self.variant(limits=limits)
        if backend is not None and backend.capabilities().limits == limits:
            return backend, limits
        return self.b, self.b.capabilities().limits

    def declares(self, feature: str) -> bool:
        """Whether the subject declares ``feature`` (recorded for the kit's summary)."""
        declared = feature in self.b.capabilities().features
        FEATURES_SEEN.setdefault(str(feature), {})[self.invariant] = declared
        return declared

    async def reopened(self) -> Backend:
        """A new, opened backend on the subject's store (closed after the case)."""
        backend = self.subject.reopen() if self.subject.reopen is not None else None
        if backend is None:
            self.fail("the kit cannot build a second backend on the same store (give a URL)")
        self.subject.extra.append(backend)
        await backend.open()
        return backend

    # -- assertions ---------------------------------------------------------------------

    def fail(self, message: str) -> NoReturn:
        raise KitFailure(f"[{self.invariant}] {message}")

    def check(self, condition: object, message: str) -> None:
        if not condition:
            self.fail(message)

    def eq(self, got: object, want: object, what: str) -> None:
        if got != want:
            fields = field_diff(got, want)
            if fields:
                listed = "\n".join(f"  {line}" for line in fields)
                self.fail(f"{what}: differs in\n{listed}")
            self.fail(f"{what}:\n  got  {_fmt(got)}\n  want {_fmt(want)}")

    def isa(self, value: object, kind: type[T], what: str) -> T:
        if not isinstance(value, kind):
            self.fail(f"{what}: expected {kind.__name__}, got {_fmt(value)}")
        return value

    async def raises_async(
        self,
        kinds: type[BaseException] | tuple[type[BaseException], ...],
        call: Callable[[], Awaitable[object]],
        what: str,
    ) -> None:
        try:
            result = await call()
        except kinds:
            return
        except Exception as exc:  # the wrong kind of error is a failure too
            self.fail(f"{what}: expected {_names(kinds)}, raised {type(exc).__name__}: {exc}")
        self.fail(f"{what}: expected {_names(kinds)} to be raised, returned {_fmt(result)}")

    # -- audited reads ------------------------------------------------------------------

    async def info(self, owner: OwnerScope, run_id: str, backend: Backend | None = None) -> RunInfo:
        """``inspect_run`` that must find the run, audited."""
        found = await (backend or self.b).runs.inspect_run(owner, run_id)
        info = self.isa(found, RunInfo, f"inspect_run({owner}, {run_id!r})")
        audit(info, owner=owner, invariant=self.invariant)
        return info

    async def events(
        self, owner: OwnerScope, run_id: str, backend: Backend | None = None
    ) -> tuple[Event, ...]:
        """Every retained event of a run, paged through ``list_events``."""
        got = await self._events(owner, run_id, backend)
        return self.isa(got, tuple, f"list_events({owner}, {run_id!r})")

    async def _events(
        self, owner: OwnerScope, run_id: str, backend: Backend | None = None
    ) -> tuple[Event, ...] | NotFound:
        store = (backend or self.b).events
        out: list[Event] = []
        after = 0
        for _ in range(10_000):
            page = await store.list_events(
                owner, run_id, EventListQuery(after_seq=after, limit=500)
            )
            if isinstance(page, NotFound):
                return page
            page = self.isa(page, EventPage, f"list_events({owner}, {run_id!r})")
            out.extend(page.events)
            if not page.has_more:
                return tuple(out)
            after = page.next_after_seq
        self.fail("list_events never ran out of pages")

    async def snapshot(
        self, owner: OwnerScope, run_id: str, backend: Backend | None = None
    ) -> Snapshot:
        store = backend or self.b
        info = await store.runs.inspect_run(owner, run_id)
        if isinstance(info, RunInfo):
            audit(info, owner=owner, invariant=self.invariant)
        events = await self._events(owner, run_id, backend)
        latest = await store.events.fetch_latest_event(owner, run_id)
        return Snapshot(info, events, latest)

    async def unchanged(
        self,
        owner: OwnerScope,
        run_id: str,
        before: Snapshot,
        what: str,
        backend: Backend | None = None,
    ) -> None:
        """The run reads back exactly as in ``before`` (document, operational state, events)."""
        after = await self.snapshot(owner, run_id, backend)
        self.eq(after.info, before.info, f"{what}: RunInfo changed after a rejection")
        self.eq(after.events, before.events, f"{what}: events changed after a rejection")
        self.eq(after.latest, before.latest, f"{what}: latest event changed after a rejection")

    async def absent(
        self, owner: OwnerScope, run_id: str, what: str, backend: Backend | None = None
    ) -> None:
        """No run ``run_id`` exists for ``owner`` and none is listed anywhere."""
        store = backend or self.b
        self.isa(await store.runs.fetch_run(owner, run_id), NotFound, f"{what}: fetch_run")
        self.isa(await store.runs.inspect_run(owner, run_id), NotFound, f"{what}: inspect_run")
        self.isa(
            await store.events.fetch_latest_event(owner, run_id),
            NotFound,
            f"{what}: fetch_latest_event",
        )
        listed = await self.all_runs(backend=store)
        self.check(
            all(s.id != run_id for s in listed),
            f"{what}: list_runs(SYSTEM) shows run {run_id!r} that should not exist",
        )

    async def all_runs(self, backend: Backend | None = None) -> list[RunSummary]:
        """``list_runs(SYSTEM)`` in full (the case's store holds only the case's runs)."""
        store = (backend or self.b).runs
        out: list[RunSummary] = []
        query = RunListQuery(limit=200)
        for _ in range(10_000):
            page = await store.list_runs(SYSTEM, query)
            out.extend(page.runs)
            if not page.has_more:
                return out
            query = RunListQuery(limit=200, before=page.next_before)
        self.fail("list_runs never ran out of pages")

    # -- claims -------------------------------------------------------------------------

    async def claim(
        self,
        now: datetime,
        *,
        limit: int = 1,
        ttl: timedelta = timedelta(seconds=60),
        max_attempts: int = 3,
        preference: Any = None,
        backend: Backend | None = None,
    ) -> ClaimBatch:
        batch = await (backend or self.b).runs.claim_due(
            ClaimPolicy(
                limit=limit,
                orphan_ttl=ttl,
                max_claim_attempts=max_attempts,
                preference=preference,
                now=now,
            )
        )
        batch = self.isa(batch, ClaimBatch, "claim_due")
        self.check(
            len(batch.leases) + len(batch.poisoned) <= limit,
            f"claim_due returned {len(batch.leases)} leases + {len(batch.poisoned)} poisoned "
            f"for a limit of {limit}",
        )
        ids = [(lease.owner, lease.run_id) for lease in batch.leases]
        self.check(len(ids) == len(set(ids)), f"one claim_due leased a run twice: {ids}")
        return batch

    async def claim_one(self, now: datetime, run_id: str, **options: Any) -> Lease:
        """A claim that must lease exactly ``run_id`` (the only due run)."""
        batch = await self.claim(now, **options)
        self.eq([lease.run_id for lease in batch.leases], [run_id], "claim_due leased")
        return batch.leases[0]

    async def gather_barrier(self, *calls: Callable[[], Awaitable[T]]) -> list[T]:
        """Run ``calls`` as concurrent tasks released together by an ``asyncio.Barrier``."""
        barrier = asyncio.Barrier(len(calls))

        async def go(call: Callable[[], Awaitable[T]]) -> T:
            await barrier.wait()
            return await call()

        return list(await asyncio.gather(*(go(call) for call in calls)))


def _names(kinds: type[BaseException] | tuple[type[BaseException], ...]) -> str:
    if isinstance(kinds, tuple):
        return " or ".join(k.__name__ for k in kinds)
    return kinds.__name__


def invariant(ident: str) -> pytest.MarkDecorator:
    """Tag a case with the invariant it checks (shown in its node id and messages)."""
    return pytest.mark.docket_invariant(ident)


__all__ = [
    "CATALOGUE",
    "CLOCK_START",
    "FEATURES_SEEN",
    "Kit",
    "KitFailure",
    "Maker",
    "Snapshot",
    "Subject",
    "audit",
    "audit_problems",
    "catalogue_link",
    "field_diff",
    "invariant",
]
