"""The public API: :class:`Docket` (asyncio) and :class:`SyncDocket` (blocking, for scripts).

::

    async with Docket("sqlite:///app.db", nodes=registry) as docket:
        ref = await docket.save_graph(graph)
        async with docket.worker():                 # an in-process worker
            run = await docket.start_run(ref, {"topic": "otters"})
            run = await docket.await_run(run.id, timeout=30)

Every method takes ``tenant_id=`` (required in ``tenant_mode="required"``, refused in the
default ``"none"``) and raises the typed exceptions of :mod:`docket.errors`; a refused
call writes nothing. Writes return only after their durable commit.

Time: a :class:`Docket` has no clock of its own. Every timestamp it writes and every
decision about what is due uses the backend's clock (``await backend.now()``), the one
clock ``claim_due`` compares wakes with; tests that need a frozen or manual clock give it
to the backend (``MemoryBackend(clock=...)``, ``SQLiteBackend(path, clock=...)``).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Literal, ParamSpec, TypeVar, cast

import attrs

from docket import _facade_admission, _facade_drain, _facade_reads
from docket._facade_admission import AdmissionMethods
from docket._facade_args import (
    MAX_PAGE,
    durable_metadata,
    require_id,
    require_limit,
    require_ref,
    resolve_backend,
    shown,
)
from docket._facade_children import (
    pin_children,
    require_child_runs,
    require_runnable_children,
)
from docket._facade_family import read_children
from docket._facade_history import HistoryMethods
from docket._facade_keyed import keyed_run_id, started_before
from docket._facade_queues import (
    QueueMethods,
    eager_slot,
    require_graph_queue,
    require_queue_options,
    start_queue,
)
from docket._facade_schedules import ScheduleMethods
from docket._facade_signals import SignalMethods
from docket._facade_spans import lifecycle
from docket._facade_streams import StreamMethods
from docket._facade_time import run_timing
from docket.contract import errors as contract
from docket.contract.capabilities import BackendContractError, Capabilities, negotiate
from docket.contract.proposals import GraphListQuery, PoisonedClaim
from docket.contract.protocols import Backend, ClaimedStarts, GraphSaveResult
from docket.contract.validate import text_problem
from docket.core.errors import CoreError
from docket.core.family import ChildInfo
from docket.core.init import build_initial_run, initialize
from docket.core.moment import Moment, Terminated
from docket.core.plan import check_execution_policy
from docket.core.proposals import init_proposal
from docket.errors import (
    CorruptData,
    InvalidBackend,
    InvalidGraph,
    InvalidInput,
    InvalidOptions,
    InvalidSettings,
    InvalidTenant,
    RuntimeUnavailable,
    from_contract,
    from_core,
)
from docket.graph.compiler import (
    RuntimeGraph,
    compile_graph,
    effective_document,
    graph_from_effective_document,
)
from docket.graph.model import Graph
from docket.graph.nodes import NodeRegistry
from docket.graph.wire import GraphLoadError
from docket.records import (
    DEFAULT_QUEUE,
    SYSTEM,
    TENANTLESS,
    Event,
    EventPage,
    GraphRef,
    GraphVersion,
    GraphVersionCursor,
    GraphVersionPage,
    OwnerScope,
    Run,
    RunCursor,
    RunInfo,
    RunPage,
    RunStatus,
    Scope,
    Tenant,
    tenant_id_of,
)
from docket.runtime.children import Children
from docket.runtime.drain import Drainer, DrainOutcome, host_limits
from docket.runtime.graphs import GraphCache
from docket.runtime.lifecycle import (
    CommitContext,
    CommitPolicy,
    Ids,
    Observer,
    Observers,
    commit,
    random_ids,
    stamp_clock,
)
from docket.runtime.worker import PoisonHandler, Worker, WorkerStats
from docket.settings import Settings
from docket.telemetry import Telemetry, instrument_backend, log_context
from docket.values import JSONValue

__all__ = ["DEFAULT_AWAIT_POLL", "Docket", "DrainSummary", "TenantMode"]

TenantMode = Literal["none", "required"]
DEFAULT_AWAIT_POLL: Final = 0.05
_T = TypeVar("_T")
_P = ParamSpec("_P")


@attrs.frozen(kw_only=True)
class DrainSummary:
    """What :meth:`Docket.drain_due` did: drains run (with their outcomes), runs found
    poisoned, and whether it stopped at ``max_runs`` with work possibly left."""

    outcomes: tuple[DrainOutcome, ...]
    poisoned: tuple[PoisonedClaim, ...]
    limit_reached: bool

    @property
    def drained(self) -> int:
        return len(self.outcomes)


class Docket(
    SignalMethods, ScheduleMethods, HistoryMethods, StreamMethods, QueueMethods, AdmissionMethods
):  # docket/_facade_*.py
    """A docket runtime instance: one backend, one node registry, one set of settings.

    ``backend`` is a URL (``"sqlite:///app.db"``, ``"memory://"``; resolved through the
    installed backends, with ``backend_options`` as factory keywords) or a backend object.
    A backend created from a URL is owned (closed by :meth:`close`); a backend object
    you pass in stays yours to close.

    ``nodes`` names the node implementations this process offers; a worker executes only
    graphs whose implementations it has. ``settings`` (or keyword overrides such as
    ``claim_ttl=2``) are validated here; see :class:`~docket.settings.Settings`.
    ``context`` reaches every node as ``ctx.application``. ``observers`` are called after
    each commit (best effort), ``on_poisoned`` when a worker finds a run poisoned.
    ``ids`` generates run, transition and interrupt ids (default: random).
    ``telemetry`` is the event bus this Docket reports to (default: a fresh one, as
    ``docket.telemetry``; see :mod:`docket.telemetry`).
    """

    def __init__(
        self,
        backend: str | Backend,
        *,
        nodes: NodeRegistry | None = None,
        tenant_mode: TenantMode = "none",
        settings: Settings | None = None,
        context: Mapping[str, object] | None = None,
        observers: Sequence[Observer] = (),
        on_poisoned: PoisonHandler | None = None,
        ids: Ids | None = None,
        backend_options: Mapping[str, object] | None = None,
        telemetry: Telemetry | None = None,
        **overrides: Any,
    ) -> None:
        base = settings if settings is not None else Settings()
        if not isinstance(base, Settings):
            raise InvalidSettings(f"settings must be docket.Settings, got {type(base).__name__}")
        try:
            chosen = attrs.evolve(base, **overrides)
        except TypeError as exc:
            raise InvalidSettings(f"unknown setting: {exc}") from None
        self.settings = chosen.validate()
        if tenant_mode not in ("none", "required"):
            raise InvalidTenant(
                f"tenant_mode must be 'none' or 'required', got {tenant_mode!r}",
                details={"tenant_mode": repr(tenant_mode)},
            )
        if nodes is not None and not isinstance(nodes, NodeRegistry):
            raise TypeError(f"nodes must be a docket NodeRegistry, got {type(nodes).__name__}")
        self.tenant_mode: TenantMode = tenant_mode
        self.nodes = nodes if nodes is not None else NodeRegistry()
        self.backend, self._owns_backend = resolve_backend(backend, backend_options)
        self._clock: Callable[[], Awaitable[datetime]] | None = None  # see start_run
        if telemetry is not None and not isinstance(telemetry, Telemetry):
            raise InvalidOptions(
                f"telemetry must be a docket.telemetry.Telemetry, got {type(telemetry).__name__}"
            )
        self.telemetry = telemetry if telemetry is not None else Telemetry()
        # Store calls go through a view that reports them on the bus; ``self.backend``
        # stays the object the caller knows.
        self._store = instrument_backend(self.backend, self.telemetry)
        self._ids: Ids = ids or random_ids
        self._context = dict(context or {})
        self._observers = Observers(tuple(observers))
        self._on_poisoned = on_poisoned
        self._policy = CommitPolicy(
            attempts=self.settings.commit_attempts, backoff=self.settings.commit_backoff
        )
        self._child_runs: Children | None = None  # built on first use
        self._describe = GraphCache(self._store, self.nodes, executable=False)
        self._execute = GraphCache(self._store, self.nodes, executable=True)
        self._drainer = Drainer(
            self._store,
            self._execute,
            self.settings,
            ids=self._ids,
            observers=self._observers,
            application=self._context,
            telemetry=self.telemetry,
        )
        self._workers: list[Worker] = []
        self._claimed_starts: bool | None = None  # the store declares ClaimedStarts
        self._capabilities: Capabilities | None = None
        self._state: Literal["new", "open", "closed"] = "new"

    def __repr__(self) -> str:
        return f"Docket({self.backend!r}, tenant_mode={self.tenant_mode!r}, {self._state})"

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        """What the backend declared when it was negotiated (on :meth:`open`)."""
        if self._capabilities is None:
            raise RuntimeUnavailable("open the Docket first")
        return self._capabilities

    async def open(self) -> Docket:
        """Negotiate the backend (contract version, stores, signatures) and open it."""
        if self._state == "open":
            return self
        if self._state == "closed":
            raise RuntimeUnavailable("this Docket was closed; create a new one")
        try:
            self._capabilities = negotiate(self.backend)
        except BackendContractError as exc:
            raise InvalidBackend(str(exc), details={"defect": str(exc.code)}) from None
        await self.backend.open()
        self._state = "open"
        return self

    async def close(self) -> None:
        """Stop this Docket's workers (gracefully), flush observers, close an owned
        backend. Idempotent."""
        if self._state == "closed":
            return
        workers, self._workers = self._workers, []
        for worker in workers:
            await worker.stop()
        await self._observers.drain(timeout=5.0)
        if self._owns_backend and self._state == "open":
            await self.backend.close()
        self._state = "closed"

    async def __aenter__(self) -> Docket:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _ready(self) -> None:
        if self._state != "open":
            raise RuntimeUnavailable(
                "the Docket is not open: use 'async with Docket(...)' or await open()"
                if self._state == "new"
                else "the Docket is closed"
            )

    def _owner(self, tenant_id: object) -> OwnerScope:
        if self.tenant_mode == "none":
            if tenant_id is not None:
                raise InvalidTenant(
                    "this Docket is tenantless (tenant_mode='none'): do not pass tenant_id"
                )
            return TENANTLESS
        if not isinstance(tenant_id, str) or not tenant_id:
            raise InvalidTenant("tenant_mode='required': pass a non-empty tenant_id")
        # the validator's rule for every id, here before a read hands a store bad text
        problem = text_problem("tenant_id", tenant_id)
        if problem is not None:
            raise InvalidTenant(f"{problem}: {shown(tenant_id)}")
        return Tenant(tenant_id)

    # -- graphs ------------------------------------------------------------------------------

    async def save_graph(self, graph: Graph, *, tenant_id: str | None = None) -> GraphRef:
        """Compile ``graph`` with this Docket's nodes and publish its effective document.

        Idempotent (the same content gives the same reference). A graph with error
        diagnostics raises :class:`~docket.errors.InvalidGraph` and stores nothing.
        Child nodes are pinned first (:mod:`docket._facade_children`): the returned
        reference is the pinned document's, whose hash differs from ``graph``'s own
        when a child node named no hash.
        """
        owner = self._owner(tenant_id)
        self._ready()
        if not isinstance(graph, Graph):
            raise InvalidGraph(
                f"save_graph expects a docket Graph, got {type(graph).__name__}",
                details={"diagnostics": []},
            )
        if graph.policies:
            require_graph_queue(graph, self.capabilities)
        if any(node.child for node in graph.nodes.values()):
            require_child_runs(graph, self.capabilities, "saved")
            if compile_graph(graph, self.nodes).ok:  # pin only what compiles (else: below)
                graph = await pin_children(self._store, owner, graph)
        result = compile_graph(graph, self.nodes, max_supersteps=self.settings.max_supersteps)
        if not result.ok or result.effective is None or result.graph_hash is None:
            diagnostics: list[JSONValue] = [d.to_dict() for d in result.errors]
            raise InvalidGraph(
                f"graph {graph.id!r} does not compile: "
                + "; ".join(str(d) for d in result.errors[:5]),
                details={"diagnostics": diagnostics},
            )
        ref = GraphRef(result.effective.id, result.graph_hash)
        document = effective_document(result.effective)
        saved: GraphSaveResult = await commit(
            functools.partial(self._store.graphs.save_graph, owner, ref, document),
            self._policy,
            what=f"save of graph {ref.graph_id}",
        )
        if not isinstance(saved, GraphVersion):
            raise from_contract(saved, subject=f"graph {ref.graph_id!r}")
        return saved.ref

    async def fetch_graph(self, ref: GraphRef, *, tenant_id: str | None = None) -> Graph:
        """The stored effective graph of ``ref``."""
        owner = self._owner(tenant_id)
        self._ready()
        require_ref(ref)
        document = await self._store.graphs.fetch_graph(owner, ref)
        if isinstance(document, contract.NotFound | contract.CorruptGraph):
            raise from_contract(document, subject=f"graph {ref.graph_id!r} ({ref.graph_hash[:12]})")
        try:
            return graph_from_effective_document(document)
        except GraphLoadError as exc:
            raise CorruptData(f"the stored graph {ref.graph_id} cannot be decoded: {exc}") from None

    async def latest_graph_ref(self, graph_id: str, *, tenant_id: str | None = None) -> GraphRef:
        """The most recently published version of ``graph_id``."""
        owner = self._owner(tenant_id)
        self._ready()
        if not isinstance(graph_id, str) or not graph_id:
            raise InvalidOptions("graph_id must be a non-empty string")
        found = await self._store.graphs.fetch_latest_graph_ref(owner, graph_id)
        if isinstance(found, contract.NotFound):
            raise from_contract(found, subject=f"graph {graph_id!r}")
        return found

    async def list_graph_versions(
        self,
        graph_id: str,
        *,
        limit: int = 100,
        before: GraphVersionCursor | None = None,
        tenant_id: str | None = None,
    ) -> GraphVersionPage:
        """Published versions of ``graph_id``, newest first (``next_before`` pages on)."""
        owner = self._owner(tenant_id)
        self._ready()
        if not isinstance(graph_id, str) or not graph_id:
            raise InvalidOptions("graph_id must be a non-empty string")
        require_limit(limit)
        if before is not None and not isinstance(before, GraphVersionCursor):
            raise InvalidOptions("before must be a GraphVersionCursor (a page's next_before)")
        query = GraphListQuery(limit=limit, before=before)
        return await self._store.graphs.list_graph_versions(owner, graph_id, query)

    async def _ref(self, owner: OwnerScope, graph: GraphRef | str) -> GraphRef:
        return await _facade_reads.resolve_ref(self._store, owner, graph)

    async def _runtime_graph(self, owner: OwnerScope, ref: GraphRef) -> RuntimeGraph:
        return await _facade_reads.runtime_graph(self._describe, owner, ref)

    # -- runs: writes ------------------------------------------------------------------------

    @lifecycle("docket.run.start")
    async def start_run(
        self,
        graph: GraphRef | str,
        input: Mapping[str, object] | None = None,
        *,
        run_id: str | None = None,
        metadata: Mapping[str, object] | None = None,
        tenant_id: str | None = None,
        start_at: datetime | None = None,
        deadline: datetime | None = None,
        timeout: timedelta | None = None,
        idempotency_key: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> Run:
        """Start a run of ``graph`` (a reference, or a graph id meaning its latest version).

        Returns the initialized run (``running``, checkpoint 1) once it is durably
        committed; a worker takes it from there — not before ``start_at`` when given.
        ``deadline`` (or ``timeout`` after the start, or the graph policy
        ``run_timeout_ms``): past it the run fails with ``deadline_exceeded`` whatever it
        is doing (docs/execution.md#durable-time). Raises ``InvalidInput`` (input,
        metadata or times), ``GuardEvaluationFailed``, ``IncompatibleExecutionPolicy`` (a
        node timeout above this host's maximum), ``NotFound`` (graph), ``Conflict`` (the
        run id is taken) or ``Unsupported`` (times on a backend without ``timers``)
        without writing anything.

        With ``idempotency_key`` (instead of ``run_id``) the run is named after the key,
        and starting again with a key used before in this scope returns that run instead
        of raising ``Conflict``, for as long as retention keeps it (docs/execution.md,
        Deduplicated starts).

        ``queue``/``priority`` (default: the graph's ``queue``/``priority`` policies, else
        ``"default"`` and 0) name the queue the run waits in for a worker and its rank
        there, higher first (docs/queues.md). A queue the backend does not know raises
        ``NotFound``; anything but the defaults on a backend without queues raises
        ``Unsupported``; nothing is written then.

        In a queue with an admission limit (docs/queues.md#admission-limits) a start
        beyond it is held: the answer is the run as it will start, with status
        ``queued`` (never stored; ``checkpoint_seq`` 0), and it is initialised when a
        slot frees.
        """
        owner = self._owner(tenant_id)
        self._ready()
        if run_id is not None:
            require_id("run_id", run_id)
        if queue is not None or priority is not None:
            require_queue_options(queue, priority)
        if input is not None and not isinstance(input, Mapping):
            raise InvalidInput(
                "the run input must be a map",
                phase="init",
                details={"reasons": [f"expected a map, got {type(input).__name__}"]},
            )
        meta = durable_metadata(metadata)
        if idempotency_key is not None:
            run_id, meta = keyed_run_id(idempotency_key, run_id, meta)
        ref = await self._ref(owner, graph)
        rtg = await self._runtime_graph(owner, ref)
        incompatible = check_execution_policy(rtg, host_limits(self.settings))
        if incompatible is not None:
            raise from_core(incompatible)
        if rtg.has_children:
            require_runnable_children(rtg, self.capabilities)
        chosen: tuple[str, int] | None = None
        if queue is not None or priority is not None or rtg.policies:
            chosen = await start_queue(self._store, self.capabilities, rtg, queue, priority)
        queue_name = DEFAULT_QUEUE if chosen is None else chosen[0]
        admitting = await _facade_admission.starts_admitted(
            self._drainer.queues.view, self.capabilities, queue_name
        )
        if admitting:  # whoever commits the run's end releases its count in this queue
            meta = {**meta, _facade_admission.ADMISSION_METADATA: queue_name}
        if self._clock is None:  # looked up once: a Protocol isinstance is slow
            self._clock = stamp_clock(self.backend)
        now = await self._clock()
        later: datetime | None = None
        if start_at is not None or deadline is not None or timeout is not None or rtg.policies:
            meta, later = run_timing(
                rtg,
                meta,
                now,
                self.capabilities,
                start_at=start_at,
                deadline=deadline,
                timeout=timeout,
            )
        created = build_initial_run(
            rtg, input, run_id=run_id or self._ids("run"), now=now, metadata=meta
        )
        moment = initialize(rtg, created, now=now)
        if isinstance(moment, CoreError):
            raise from_core(moment)
        assert not isinstance(moment, Terminated)  # a created run is never terminal
        proposal = init_proposal(moment, transition_id=self._ids("transition"))
        if later is not None:  # a delayed start: due at its time, never started eagerly
            proposal = attrs.evolve(proposal, wake_at=later)
        if chosen is not None and chosen != (DEFAULT_QUEUE, 0):
            proposal = attrs.evolve(proposal, queue=chosen[0], priority=chosen[1])
        if admitting:
            queued = await _facade_admission.admit_start(
                self._drainer.admissions,
                owner,
                proposal,
                moment.events,
                explicit_id=run_id is not None and idempotency_key is None,
                key=idempotency_key,
            )
            if queued is not None:
                return queued
        # an admitted start is never claimed eagerly: a worker's reconcile may write it too
        eager = None if later is not None or admitting else self._eager_slot(proposal.queue)
        slot = None
        if eager is not None and self._drainer.queues.view.store is not None:
            got = await eager_slot(
                self._drainer.queues, eager[0], proposal.queue, self.settings.claim_ttl
            )
            eager, slot = (None, None) if got is False else (eager, got)
        with log_context(run_id=created.id):
            if eager is None:
                write = functools.partial(
                    self._store.transitions.initialize, owner, proposal, moment.events
                )
            else:
                token = self._ids("claim")
                write = functools.partial(
                    eager[1].initialize_claimed, owner, proposal, moment.events, token
                )
            try:
                stored: contract.TransitionResult = await commit(
                    write, self._policy, what=f"start of run {created.id}"
                )
            except BaseException:
                if eager is not None:
                    eager[0].unreserve()
                if slot is not None:
                    await asyncio.shield(self._drainer.queues.slots.refund(slot[0], [slot[1]]))
                raise
        if eager is not None:
            if isinstance(stored, Run) and stored.checkpoint_seq == proposal.run.checkpoint_seq:
                eager[0].adopt(owner, stored, token, proposal.wake_at, slot)
            else:
                eager[0].unreserve()
                if slot is not None:
                    await self._drainer.queues.slots.refund(slot[0], [slot[1]])
        if not isinstance(stored, Run):
            if admitting:
                await _facade_admission.admitted_refused(
                    self._drainer.admissions, owner, proposal.run
                )
            if idempotency_key is not None and isinstance(stored, contract.Conflict):
                return await started_before(self._store, owner, created.id, ref.graph_id, stored)
            raise from_contract(stored, subject=f"run {created.id!r}")
        self._deliver(moment, owner, "start")
        return stored

    def _eager_slot(self, queue: str) -> tuple[Worker, ClaimedStarts] | None:
        """A running worker of this Docket with a slot promised to the run being started,
        and the store to start it claimed with; None unless the settings allow eager
        starts and the store declares ``ClaimedStarts``."""
        if not self.settings.eager_starts or not self._workers:
            return None
        transitions = self._store.transitions
        if self._claimed_starts is None:  # a Protocol isinstance is slow: once
            self._claimed_starts = isinstance(transitions, ClaimedStarts)
        if not self._claimed_starts:
            return None
        for worker in self._workers:
            if worker.serves(queue) and worker.reserve():
                return worker, cast(ClaimedStarts, transitions)
        return None

    def _deliver(self, moment: Moment, owner: OwnerScope, operation: Literal["start"]) -> None:
        if self.telemetry:
            self.telemetry.committed(
                moment.checkpoint(), operation=operation, tenant_id=tenant_id_of(owner)
            )
        if self._observers:
            context = CommitContext(tenant_id=tenant_id_of(owner), operation=operation)
            self._observers.deliver(moment.checkpoint(), context)

    async def _fetch(self, owner: OwnerScope, run_id: str) -> Run:
        found = await self._store.runs.fetch_run(owner, run_id)
        if isinstance(found, contract.NotFound):
            await _facade_admission.require_active(self._drainer.admissions, owner, run_id)
            raise from_contract(found, subject=f"run {run_id!r}")
        return found

    async def fetch_run(self, run_id: str, *, tenant_id: str | None = None) -> Run:
        """The last committed run document (a run an admission limit holds: ``queued``)."""
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        found = await self._store.runs.fetch_run(owner, run_id)
        if isinstance(found, contract.NotFound):
            queued = await _facade_admission.find_queued(self._drainer.admissions, owner, run_id)
            if queued is not None:
                return queued.run
            raise from_contract(found, subject=f"run {run_id!r}")
        return found

    async def inspect_run(self, run_id: str, *, tenant_id: str | None = None) -> RunInfo:
        """The run plus its operational facts (wake, claim, poison)."""
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        found = await self._store.runs.inspect_run(owner, run_id)
        if isinstance(found, contract.NotFound):
            queued = await _facade_admission.find_queued(self._drainer.admissions, owner, run_id)
            if queued is not None:
                return queued
            raise from_contract(found, subject=f"run {run_id!r}")
        return found

    async def await_run(
        self,
        run_id: str,
        *,
        timeout: float,
        poll_interval: float = DEFAULT_AWAIT_POLL,
        tenant_id: str | None = None,
    ) -> Run:
        """Wait until the run is ``waiting`` or finished, and return it.

        Raises ``RunPoisoned`` as soon as the run is poisoned, ``AwaitTimeout`` after
        ``timeout`` seconds (``0`` looks exactly once), ``NotFound``.
        """
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        return await _facade_admission.await_admitted(
            self._store, self._drainer.admissions, owner, run_id, timeout, poll_interval
        )

    async def list_runs(
        self,
        *,
        limit: int = 100,
        before: RunCursor | None = None,
        status: RunStatus | str | Iterable[RunStatus | str] | None = None,
        graph_id: str | None = None,
        graph_hash: str | None = None,
        tenant_id: str | None = None,
        all_tenants: bool = False,
    ) -> RunPage:
        """Run summaries, newest first by ``(started_at, id)``; ``next_before`` pages on.

        ``all_tenants=True`` lists every tenant's runs (an operator view; it cannot be
        combined with ``tenant_id``).
        """
        scope: Scope
        if all_tenants:
            if tenant_id is not None:
                raise InvalidTenant("all_tenants=True lists every tenant: drop tenant_id")
            scope = SYSTEM
        else:
            scope = self._owner(tenant_id)
        self._ready()
        query = _facade_reads.run_query(
            limit=limit, before=before, status=status, graph_id=graph_id, graph_hash=graph_hash
        )
        return await self._store.runs.list_runs(scope, query)

    async def list_events(
        self,
        run_id: str,
        *,
        after_seq: int = 0,
        limit: int = 250,
        tenant_id: str | None = None,
    ) -> EventPage:
        """One page of the run's events after ``after_seq``, ascending."""
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        return await _facade_reads.event_page(
            self._store, owner, run_id, after_seq=after_seq, limit=limit
        )

    async def history(self, run_id: str, *, tenant_id: str | None = None) -> tuple[Event, ...]:
        """Every retained event of the run, ascending (pages through :meth:`list_events`)."""
        events: list[Event] = []
        after = 0
        while True:
            page = await self.list_events(
                run_id, after_seq=after, limit=MAX_PAGE, tenant_id=tenant_id
            )
            events.extend(page.events)
            if not page.has_more:
                return tuple(events)
            after = page.next_after_seq

    async def children(self, run_id: str, *, tenant_id: str | None = None) -> tuple[ChildInfo, ...]:
        """The child runs ``run_id`` asked for, in the order it asked (one per child node
        attempt, a failed attempt's child included): each with its status (``run`` is
        ``None`` until the child exists) and its open interrupts. A child names its
        parent in turn: ``ParentLink.of(run)`` (:mod:`docket.core.children`)."""
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        return await read_children(self._store, self._describe, owner, run_id)

    # -- workers -----------------------------------------------------------------------------

    def worker(
        self,
        *,
        concurrency: int | None = None,
        name: str = "worker",
        queues: Collection[str] | None = None,
    ) -> Worker:
        """A worker over this Docket (not started): ``async with docket.worker(): ...``.

        ``queues``: claim only runs of these named queues (default: every queue);
        ``Unsupported`` on a backend without queues, ``NotFound`` on start for a queue
        that does not exist. Stopped by :meth:`close` if still running."""
        self._ready()
        settings = self.settings
        if concurrency is not None:
            settings = attrs.evolve(settings, concurrency=concurrency).validate()
        worker = Worker(
            self._store,
            self._drainer,
            settings,
            on_poisoned=self._on_poisoned,
            name=name,
            telemetry=self.telemetry,
            ticker=self._schedule_ticker(),
            queues=queues,
        )
        self._workers.append(worker)
        return worker

    async def run_worker(
        self,
        *,
        concurrency: int | None = None,
        stop: asyncio.Event | None = None,
        queues: Collection[str] | None = None,
    ) -> WorkerStats:
        """Run a worker until ``stop`` is set (or this task is cancelled), then shut it
        down gracefully; returns its counters. ``queues``: as :meth:`worker`."""
        worker = self.worker(concurrency=concurrency, queues=queues)
        await worker.check_queues()
        worker.start()
        try:
            if stop is None:
                await asyncio.Event().wait()
            else:
                await stop.wait()
        finally:
            await asyncio.shield(worker.stop())
        return worker.stats

    async def drain_due(self, *, max_runs: int = 100) -> DrainSummary:
        """Claim and drain due runs one at a time, in the caller, until none is due (or
        ``max_runs`` drains happened). For scripts and tests that want no background
        worker; a run parked on a future timer is not waited for."""
        self._ready()
        outcomes, poisoned, limit_reached = await _facade_drain.drain_due(
            self._store, self._drainer, self.settings, self.telemetry, max_runs=max_runs
        )
        return DrainSummary(outcomes=outcomes, poisoned=poisoned, limit_reached=limit_reached)

    @property
    def graph_cache(self) -> GraphCache:
        """The executing graph cache (counters ``fetches``/``compiles``; for tests)."""
        return self._execute


def __getattr__(name: str) -> object:
    # the blocking twin lives in docket._sync (it imports this module); keep its old path
    if name == "SyncDocket":
        from docket._sync import SyncDocket

        return SyncDocket
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
