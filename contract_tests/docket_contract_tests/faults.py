"""Fault injection between the runtime and a real backend: a proxy bundle.

:class:`FaultyBackend` wraps any backend and satisfies the contract itself (it passes
``negotiate``), so a :class:`~docket.Docket`, a worker or a drainer can run on it
unchanged. Every store call goes through a :class:`FaultPlan`, which logs it and, for
the calls it was told to, injects one fault:

* ``LOST_REPLY`` — the call reaches the backend (which commits) and then the caller
  gets :class:`LostReply` instead of the answer, as when a connection drops after the
  server committed but before its reply arrived. The caller cannot know it landed;
* ``SERVER_ERROR`` — the call fails with :class:`InjectedServerError` before it reaches
  the backend (a server that errored before doing anything);
* ``RETRYABLE`` — the call answers ``Retryable`` without reaching the backend;
* ``STALL`` — the call waits until the test opens its gate, then reaches the backend
  (a slow commit that may arrive after its claim expired).

The proxy changes no argument and no answer it forwards: what the backend says is what
the caller sees, except where a fault was planned.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar, assert_never

from docket.contract import (
    AbandonOutcome,
    AbandonPolicy,
    Backend,
    Capabilities,
    ClaimBatch,
    ClaimedProposal,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    CorruptEventRow,
    CorruptGraph,
    EventListQuery,
    GraphListQuery,
    InactiveRun,
    InitProposal,
    NotFound,
    Permanent,
    Retryable,
    RunListQuery,
    TransitionResult,
    UnclaimedProposal,
)
from docket.contract.protocols import GraphSaveResult
from docket.records import (
    Event,
    EventPage,
    GraphRef,
    GraphVersionPage,
    OwnerScope,
    Run,
    RunInfo,
    RunPage,
    Scope,
)
from docket.values import JSONDict

T = TypeVar("T")


class FaultKind(StrEnum):
    LOST_REPLY = "lost_reply"
    SERVER_ERROR = "server_error"
    RETRYABLE = "retryable"
    STALL = "stall"


class LostReply(ConnectionResetError):
    """The connection dropped after the backend executed the call: outcome unknown."""


class InjectedServerError(RuntimeError):
    """A server error injected before the call reached the backend."""


@dataclass
class Fault:
    """Inject ``kind`` into the ``nth`` (1-based) call of ``operation``."""

    operation: str
    nth: int
    kind: FaultKind
    #: STALL: opened by the test to let the call through.
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set when the fault fired (for STALL: when the call is waiting at the gate).
    fired: asyncio.Event = field(default_factory=asyncio.Event)
    #: What the backend answered, when the call reached it.
    answer: object = None


@dataclass(frozen=True)
class Call:
    """One store call as the proxy saw it."""

    operation: str
    nth: int
    transition_id: str | None
    claim_token: str | None
    fault: FaultKind | None
    reached_backend: bool
    answer: object


class FaultPlan:
    """Which calls fail how, and the log of every call."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self.calls: list[Call] = []
        #: Awaited before every call with ``(operation, nth)``: lets a test look at the
        #: store at an exact point of the sequence (e.g. between a failure and its retry).
        self.before: Callable[[str, int], Awaitable[None]] | None = None
        self._counts: Counter[str] = Counter()

    def add(self, operation: str, nth: int, kind: FaultKind) -> Fault:
        fault = Fault(operation, nth, kind)
        self.faults.append(fault)
        return fault

    def of(self, operation: str) -> list[Call]:
        return [call for call in self.calls if call.operation == operation]

    async def around(
        self,
        operation: str,
        send: Callable[[], Awaitable[T]],
        *,
        proposal: object = None,
        token: str | None = None,
    ) -> T:
        self._counts[operation] += 1
        nth = self._counts[operation]
        if self.before is not None:
            await self.before(operation, nth)
        fault = next((f for f in self.faults if f.operation == operation and f.nth == nth), None)
        transition_id = getattr(proposal, "transition_id", None)
        token = token if token is not None else getattr(proposal, "claim_token", None)

        def log(reached: bool, answer: object) -> None:
            self.calls.append(
                Call(
                    operation,
                    nth,
                    transition_id,
                    token,
                    fault.kind if fault else None,
                    reached,
                    answer,
                )
            )

        if fault is None:
            try:
                answer = await send()
            except Exception as exc:  # logged (as the answer) and passed on unchanged
                log(True, exc)
                raise
            log(True, answer)
            return answer
        match fault.kind:
            case FaultKind.SERVER_ERROR:
                log(False, None)
                fault.fired.set()
                raise InjectedServerError(f"injected server error in {operation} #{nth}")
            case FaultKind.RETRYABLE:
                log(False, None)
                fault.fired.set()
                retry: Any = Retryable(f"injected retryable answer to {operation} #{nth}")
                return retry  # type: ignore[no-any-return]  # Retryable is in every answer type it is injected into
            case FaultKind.LOST_REPLY:
                answer = await send()
                fault.answer = answer
                log(True, answer)
                fault.fired.set()
                raise LostReply(f"connection lost after {operation} #{nth} reached the backend")
            case FaultKind.STALL:
                fault.fired.set()
                await fault.gate.wait()
                answer = await send()
                fault.answer = answer
                log(True, answer)
                return answer
            case _:
                assert_never(fault.kind)


class _GraphStore:
    def __init__(self, backend: Backend, plan: FaultPlan) -> None:
        self._inner = backend
        self._plan = plan

    async def save_graph(
        self, owner: OwnerScope, ref: GraphRef, document: JSONDict
    ) -> GraphSaveResult:
        return await self._plan.around(
            "save_graph", lambda: self._inner.graphs.save_graph(owner, ref, document)
        )

    async def fetch_graph(
        self, owner: OwnerScope, ref: GraphRef
    ) -> JSONDict | NotFound | CorruptGraph:
        return await self._plan.around(
            "fetch_graph", lambda: self._inner.graphs.fetch_graph(owner, ref)
        )

    async def fetch_latest_graph_ref(self, owner: OwnerScope, graph_id: str) -> GraphRef | NotFound:
        return await self._plan.around(
            "fetch_latest_graph_ref",
            lambda: self._inner.graphs.fetch_latest_graph_ref(owner, graph_id),
        )

    async def list_graph_versions(
        self, owner: OwnerScope, graph_id: str, query: GraphListQuery
    ) -> GraphVersionPage:
        return await self._plan.around(
            "list_graph_versions",
            lambda: self._inner.graphs.list_graph_versions(owner, graph_id, query),
        )


class _RunStore:
    def __init__(self, backend: Backend, plan: FaultPlan) -> None:
        self._inner = backend
        self._plan = plan

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        return await self._plan.around(
            "fetch_run", lambda: self._inner.runs.fetch_run(owner, run_id)
        )

    async def inspect_run(self, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
        return await self._plan.around(
            "inspect_run", lambda: self._inner.runs.inspect_run(owner, run_id)
        )

    async def list_runs(self, scope: Scope, query: RunListQuery) -> RunPage:
        return await self._plan.around(
            "list_runs", lambda: self._inner.runs.list_runs(scope, query)
        )

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        return await self._plan.around("claim_due", lambda: self._inner.runs.claim_due(policy))

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        return await self._plan.around(
            "refresh_claim",
            lambda: self._inner.runs.refresh_claim(owner, run_id, token, now),
            token=token,
        )

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        await self._plan.around(
            "release_claim",
            lambda: self._inner.runs.release_claim(owner, run_id, token, now),
            token=token,
        )

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        return await self._plan.around(
            "abandon_claim",
            lambda: self._inner.runs.abandon_claim(owner, run_id, token, policy),
            token=token,
        )

    async def retry_poisoned_run(
        self, owner: OwnerScope, run_id: str, now: datetime | None = None
    ) -> Run | NotFound | InactiveRun:
        return await self._plan.around(
            "retry_poisoned_run", lambda: self._inner.runs.retry_poisoned_run(owner, run_id, now)
        )


class _EventStore:
    def __init__(self, backend: Backend, plan: FaultPlan) -> None:
        self._inner = backend
        self._plan = plan

    async def fetch_event(
        self, owner: OwnerScope, run_id: str, seq: int
    ) -> Event | NotFound | CorruptEventRow:
        return await self._plan.around(
            "fetch_event", lambda: self._inner.events.fetch_event(owner, run_id, seq)
        )

    async def fetch_latest_event(
        self, owner: OwnerScope, run_id: str
    ) -> Event | NotFound | CorruptEventRow | None:
        return await self._plan.around(
            "fetch_latest_event", lambda: self._inner.events.fetch_latest_event(owner, run_id)
        )

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        return await self._plan.around(
            "list_events", lambda: self._inner.events.list_events(owner, run_id, query)
        )


class _TransitionStore:
    def __init__(self, backend: Backend, plan: FaultPlan) -> None:
        self._inner = backend
        self._plan = plan

    async def initialize(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]
    ) -> TransitionResult:
        return await self._plan.around(
            "initialize",
            lambda: self._inner.transitions.initialize(owner, proposal, events),
            proposal=proposal,
        )

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        return await self._plan.around(
            "commit_claimed",
            lambda: self._inner.transitions.commit_claimed(owner, proposal, events),
            proposal=proposal,
        )

    async def commit_unclaimed(
        self,
        owner: OwnerScope,
        expected_checkpoint_seq: int,
        proposal: UnclaimedProposal,
        events: Sequence[Event],
    ) -> TransitionResult:
        return await self._plan.around(
            "commit_unclaimed",
            lambda: self._inner.transitions.commit_unclaimed(
                owner, expected_checkpoint_seq, proposal, events
            ),
            proposal=proposal,
        )


class FaultyBackend:
    """A backend bundle that forwards to ``inner`` through ``plan`` (see the module doc).

    Opening and closing are forwarded too, but the kit owns the inner backend: closing
    the proxy twice or after the case is harmless because both are idempotent.
    """

    def __init__(self, inner: Backend, plan: FaultPlan | None = None) -> None:
        self.inner = inner
        self.plan = plan or FaultPlan()
        self._graphs = _GraphStore(inner, self.plan)
        self._runs = _RunStore(inner, self.plan)
        self._events = _EventStore(inner, self.plan)
        self._transitions = _TransitionStore(inner, self.plan)

    def capabilities(self) -> Capabilities:
        return self.inner.capabilities()

    @property
    def graphs(self) -> _GraphStore:
        return self._graphs

    @property
    def runs(self) -> _RunStore:
        return self._runs

    @property
    def events(self) -> _EventStore:
        return self._events

    @property
    def transitions(self) -> _TransitionStore:
        return self._transitions

    @property
    def schedules(self) -> object:
        """The inner backend's schedule store, unfaulted (no fault case reaches it); it is
        there so a bundle declaring ``schedules`` still negotiates through the proxy."""
        return getattr(self.inner, "schedules", None)

    @property
    def feed(self) -> object:
        """The inner backend's feed (``streams``), unfaulted, like ``schedules``: its
        notices come from the inner commits, so a lost reply still noticed its write."""
        return getattr(self.inner, "feed", None)

    @property
    def queues(self) -> object:
        """The inner backend's queue store (``queues``), unfaulted, like ``schedules``."""
        return getattr(self.inner, "queues", None)

    @property
    def admissions(self) -> object:
        """The inner backend's admission ledger (``admission``), unfaulted, like ``queues``."""
        return getattr(self.inner, "admissions", None)

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        """The inner backend stays open: it belongs to whoever built it."""

    async def now(self) -> datetime:
        return await self.inner.now()

    async def wait_for_work(self, timeout: float) -> bool:
        return await self.inner.wait_for_work(timeout)


__all__ = [
    "Call",
    "Fault",
    "FaultKind",
    "FaultPlan",
    "FaultyBackend",
    "InjectedServerError",
    "LostReply",
]
