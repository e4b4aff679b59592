"""Processless testing helpers: run a graph to a pause or to the end, in-process.

``run_inline`` drives a run through the very same core the workers use (initialize,
advance, execute, settle) with no storage and no workers, and returns the final run with
every checkpoint it committed along the way. It is the fast path for unit-testing graphs::

    result = run_inline(graph, {"topic": "otters"}, nodes=registry)
    assert result.run.status == "done"
    assert result.run.output == {"draft": "..."}

Determinism by default: the clock is a :class:`~docket.clock.ManualClock` that only moves
when a retry backoff is "slept" (the sleep advances it instead of waiting), and run and
interrupt ids come from :class:`SequentialIds`, so running the same graph twice gives
byte-identical runs and events. Node timeouts still use real time. Transition ids (which
appear only in proposals, never in runs or events) are random by default, so that calls
sharing one backend never reuse one for a different proposal; pass ``ids=`` to draw every
kind from your own generator.

Two options prove that what the core proposes is acceptable to storage: ``validate=True``
passes every proposal through the shared contract validator, and ``commit_to=`` (a
:class:`~docket.contract.memory.MemoryBackend`, or ``True`` for a fresh one) commits every
proposal through a real transition store, claiming the run like a worker would.

Every function has an ``async`` twin (``run_inline_async`` ...); the sync ones cannot be
called from inside a running event loop. Errors are raised as the typed core errors
(:class:`~docket.core.errors.InvalidInput`, :class:`~docket.core.errors.UncompilableGraph`,
:class:`~docket.core.errors.AlreadyResolved`, ...); a run that fails is not an error, it is
a result whose ``run.status`` is ``failed``.

For the real runtime (a Docket, workers and a backend) under a clock that skips idle
time, see :class:`TimeSkippingEnv` (:mod:`docket.testing_time`, re-exported here) and
docs/testing.md.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, assert_never

import attrs

from docket._testing_sync import sync_twin
from docket.clock import ManualClock
from docket.contract.capabilities import Limits
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import At, ClaimBatch, ClaimPolicy, External, Immediate, Terminal
from docket.contract.validate import (
    ValidTransition,
    validate_commit_claimed,
    validate_commit_unclaimed,
    validate_initialize,
)
from docket.core.advance import advance
from docket.core.children import child_input, child_outcome, child_run_id, parent_link
from docket.core.errors import CoreError, UncompilableGraph
from docket.core.init import build_initial_run, initialize
from docket.core.moment import (
    Continue,
    Moment,
    NotDue,
    Terminated,
    Unchanged,
    Wait,
    ceil_ms,
    due_wake,
)
from docket.core.mutations import cancel_run, resolve_interrupt
from docket.core.outcomes import Failed, TaskOutcome, format_reason
from docket.core.plan import (
    DEFAULT_TIMEOUT_MS,
    Activation,
    Dispatch,
    HostLimits,
    check_execution_policy,
)
from docket.core.proposals import (
    claimed_proposal,
    init_proposal,
    schedule_for,
    unclaimed_proposal,
)
from docket.core.settle import settle
from docket.graph.compiler import CompileResult, RuntimeGraph, compile_graph, effective_document
from docket.graph.model import Graph
from docket.graph.nodes import NodeRegistry
from docket.records import (
    TENANTLESS,
    Checkpoint,
    Event,
    GraphRef,
    GraphVersion,
    Run,
    RunStatus,
    run_to_json,
)
from docket.runtime.execute import execute
from docket.runtime.lifecycle import random_ids
from docket.values import JSONDict, JSONValue

if TYPE_CHECKING:  # re-exported lazily (below): the environment needs the facade
    from docket.testing_time import (
        NotReached,
        NotSettled,
        Stalled,
        TimeSkipError,
        TimeSkippingEnv,
    )

__all__ = [
    "DEFAULT_INLINE_MAX_SUPERSTEPS",
    "DEFAULT_START",
    "InlineResult",
    "NotReached",
    "NotSettled",
    "ProposalRejected",
    "SequentialIds",
    "Stalled",
    "TimeSkipError",
    "TimeSkippingEnv",
    "cancel_inline",
    "cancel_inline_async",
    "resolve_interrupt_inline",
    "resolve_interrupt_inline_async",
    "resume_inline",
    "resume_inline_async",
    "run_inline",
    "run_inline_async",
    "step_inline",
    "step_inline_async",
]

#: Where the default manual clock starts.
DEFAULT_START: Final = datetime(2025, 1, 1, tzinfo=UTC)
#: Host superstep ceiling of inline runs (an unbounded cycle stops here instead of hanging).
DEFAULT_INLINE_MAX_SUPERSTEPS: Final = 10_000

GraphLike: TypeAlias = Graph | CompileResult | RuntimeGraph
Sleeper: TypeAlias = Callable[[int], Awaitable[None] | None]


class SequentialIds:
    """Deterministic ids: ``"<kind>_<16 hex digits>"`` counting from 1, per kind."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def __call__(self, kind: str) -> str:
        count = self._counts.get(kind, 0) + 1
        self._counts[kind] = count
        return f"{kind}_{count:016x}"


class ProposalRejected(Exception):
    """The contract validator or the backend refused a proposal the core made (a bug)."""

    def __init__(self, operation: str, result: object) -> None:
        self.operation = operation
        self.result = result
        super().__init__(f"{operation} rejected the core's proposal: {result!r}")


@attrs.frozen(kw_only=True)
class InlineResult:
    """A run after driving it, and the checkpoints committed on the way (oldest first)."""

    run: Run
    checkpoints: tuple[Checkpoint, ...]
    runtime: RuntimeGraph
    backend: MemoryBackend | None = None

    @property
    def status(self) -> RunStatus:
        return self.run.status

    @property
    def output(self) -> JSONDict | None:
        return self.run.output

    @property
    def events(self) -> tuple[Event, ...]:
        """Every event of the checkpoints, in sequence order."""
        return tuple(e for c in self.checkpoints for e in c.events)

    @property
    def checkpoint_types(self) -> tuple[str, ...]:
        return tuple(str(c.type) for c in self.checkpoints)


# -- configuration --------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class _Options:
    clock: Callable[[], datetime]
    sleeper: Sleeper | None
    ids: Callable[[str], str]
    transition_ids: Callable[[str], str]
    limits: HostLimits
    context: Mapping[str, object]
    validate: bool
    backend: MemoryBackend | None
    document: JSONDict | None
    # child graphs by id, and the registry that compiles them (docs/execution.md)
    graphs: Mapping[str, GraphLike] = attrs.field(factory=dict)
    nodes: NodeRegistry | None = None


def _options(
    rtg: RuntimeGraph,
    document: JSONDict | None,
    *,
    clock: Callable[[], datetime] | None,
    sleeper: Sleeper | None,
    ids: Callable[[str], str] | None,
    max_supersteps: int | None,
    max_attempt_ms: int | None,
    default_timeout_ms: int | None,
    context: Mapping[str, object] | None,
    validate: bool,
    commit_to: MemoryBackend | Literal[True] | None,
    graphs: Mapping[str, GraphLike] | None = None,
    nodes: NodeRegistry | None = None,
) -> _Options:
    the_clock = clock or ManualClock(DEFAULT_START)
    backend = MemoryBackend(clock=the_clock) if commit_to is True else commit_to
    if backend is not None and document is None:
        raise ValueError("commit_to needs the graph (or its CompileResult), not a RuntimeGraph")
    limits = HostLimits(
        max_supersteps=max_supersteps,
        max_attempt_ms=max_attempt_ms,
        default_timeout_ms=default_timeout_ms or DEFAULT_TIMEOUT_MS,
    )
    incompatible = check_execution_policy(rtg, limits)
    if incompatible is not None:
        raise incompatible
    return _Options(
        clock=the_clock,
        sleeper=sleeper,
        ids=ids or SequentialIds(),
        transition_ids=ids or random_ids,
        limits=limits,
        context=dict(context or {}),
        validate=validate,
        backend=backend,
        document=document,
        graphs=dict(graphs or {}),
        nodes=nodes,
    )


def _runtime(graph: GraphLike, nodes: NodeRegistry | None) -> tuple[RuntimeGraph, JSONDict | None]:
    if isinstance(graph, RuntimeGraph):
        return graph, None
    if isinstance(graph, Graph):
        if nodes is None:
            raise TypeError("compiling a Graph needs its node registry: pass nodes=...")
        graph = compile_graph(graph, nodes)
    if not isinstance(graph, CompileResult):
        raise TypeError(f"expected a Graph, CompileResult or RuntimeGraph, got {type(graph)}")
    if not graph.ok or graph.runtime is None or graph.effective is None:
        diagnostics: list[JSONValue] = [d.to_dict() for d in graph.errors]
        raise UncompilableGraph("the graph does not compile", details={"diagnostics": diagnostics})
    return graph.runtime, effective_document(graph.effective)


async def _sleep(options: _Options, ms: int) -> None:
    if options.sleeper is not None:
        result = options.sleeper(ms)
        if inspect.isawaitable(result):
            await result
    elif isinstance(options.clock, ManualClock):
        options.clock.advance(timedelta(milliseconds=ms))
    else:
        await asyncio.sleep(ms / 1000)


# -- publishing moments ----------------------------------------------------------------------


class _Ledger:
    """Accepts moments: checks each proposal and/or commits it to a backend, as asked."""

    def __init__(self, options: _Options, rtg: RuntimeGraph) -> None:
        self.options = options
        self.rtg = rtg
        self.checkpoints: list[Checkpoint] = []
        self.token: str | None = None
        self.due_at: datetime | None = None

    async def accept(self, moment: Moment, how: Literal["init", "claimed", "unclaimed"]) -> None:
        options = self.options
        if options.validate or options.backend is not None:
            transition = options.transition_ids("transition")
            if how == "init":
                await self._initialize(moment, transition)
            elif how == "claimed":
                await self._claimed(moment, transition)
            else:
                await self._unclaimed(moment, transition)
        wake = due_wake(moment.disposition)
        match wake:
            case Immediate():
                self.due_at = moment.proposed_at
            case At(wake_at=when):
                self.due_at = when
            case External() | Terminal():
                self.due_at = None
            case _:
                assert_never(wake)
        self.checkpoints.append(moment.checkpoint())

    def _require_valid(self, operation: str, result: object) -> None:
        if not isinstance(result, ValidTransition):
            raise ProposalRejected(operation, result)

    def _stored(self, operation: str, result: object, moment: Moment) -> None:
        if not isinstance(result, Run):
            raise ProposalRejected(operation, result)
        if run_to_json(result) != run_to_json(moment.run):
            raise ProposalRejected(operation, "the stored run differs from the proposed run")

    async def _initialize(self, moment: Moment, transition: str) -> None:
        proposal = init_proposal(moment, transition_id=transition)
        if self.options.validate:
            self._require_valid(
                "initialize", validate_initialize(TENANTLESS, proposal, moment.events, Limits())
            )
        backend = self.options.backend
        if backend is not None:
            assert self.options.document is not None  # checked by _options
            ref = GraphRef(self.rtg.graph_id, self.rtg.graph_hash)
            saved = await backend.graphs.save_graph(TENANTLESS, ref, self.options.document)
            if not isinstance(saved, GraphVersion):
                raise ProposalRejected("save_graph", saved)
            stored = await backend.transitions.initialize(TENANTLESS, proposal, moment.events)
            self._stored("initialize", stored, moment)

    async def _claimed(self, moment: Moment, transition: str) -> None:
        expected = moment.run.checkpoint_seq - 1
        backend = self.options.backend
        if backend is not None and self.token is None:
            now = self.options.clock()
            if self.due_at is not None and self.due_at > now:
                now = self.due_at
            policy = ClaimPolicy(
                limit=1, orphan_ttl=timedelta(hours=1), max_claim_attempts=1 << 30, now=now
            )
            batch = await backend.runs.claim_due(policy)
            if not isinstance(batch, ClaimBatch) or [lease.run_id for lease in batch.leases] != [
                moment.run.id
            ]:
                raise ProposalRejected("claim_due", batch)
            self.token = batch.leases[0].claim_token
        proposal = claimed_proposal(
            moment, expected, self.token or "inline", transition_id=transition
        )
        if self.options.validate:
            self._require_valid(
                "commit_claimed",
                validate_commit_claimed(TENANTLESS, proposal, moment.events, Limits()),
            )
        if backend is not None:
            stored = await backend.transitions.commit_claimed(TENANTLESS, proposal, moment.events)
            self._stored("commit_claimed", stored, moment)
            if schedule_for(moment.disposition, claimed=True) != proposal.schedule:
                raise AssertionError("unreachable: the schedule was built from the disposition")
            if not isinstance(moment.disposition, Continue):
                self.token = None

    async def _unclaimed(self, moment: Moment, transition: str) -> None:
        expected = moment.run.checkpoint_seq - 1
        proposal = unclaimed_proposal(moment, transition_id=transition)
        if self.options.validate:
            self._require_valid(
                "commit_unclaimed",
                validate_commit_unclaimed(TENANTLESS, expected, proposal, moment.events, Limits()),
            )
        backend = self.options.backend
        if backend is not None:
            stored = await backend.transitions.commit_unclaimed(
                TENANTLESS, expected, proposal, moment.events
            )
            self._stored("commit_unclaimed", stored, moment)
            self.token = None  # a signal revokes any claim

    async def result(self, run: Run) -> InlineResult:
        """The result, after handing back a claim still held (the next call claims anew)."""
        backend = self.options.backend
        if backend is not None and self.token is not None:
            await backend.runs.release_claim(
                TENANTLESS, run.id, self.token, now=self.options.clock()
            )
            self.token = None
        return InlineResult(
            run=run,
            checkpoints=tuple(self.checkpoints),
            runtime=self.rtg,
            backend=self.options.backend,
        )


# -- the drive loop --------------------------------------------------------------------------


async def _drive(
    rtg: RuntimeGraph, run: Run, ledger: _Ledger, *, max_steps: int | None, max_commits: int | None
) -> Run:
    """Advance ``run`` until it parks for good, waits, ends, or hits a step budget.

    ``max_steps`` counts committed moments that leave the run runnable at once (continue or
    immediate; retry parks are free); ``max_commits`` counts every commit.
    """
    options = ledger.options
    steps = commits = 0
    floor: datetime | None = None
    while True:
        if max_steps is not None and steps >= max_steps:
            return run
        step = advance(rtg, run, now=options.clock(), limits=options.limits, resume_floor=floor)
        if isinstance(step, Dispatch):
            outcomes = await _execute(rtg, step, options)
            step = settle(rtg, step, outcomes, now=options.clock(), ids=options.ids)
        match step:
            case CoreError():
                raise step
            case Terminated() | Wait():
                return run
            case NotDue(resume_at=resume_at, wait_ms=wait_ms):
                await _sleep(options, wait_ms)
                floor = resume_at
                continue
            case Moment():
                await ledger.accept(step, "claimed")
                run = step.run
                commits += 1
                if max_commits is not None and commits >= max_commits:
                    return run
            case _:
                assert_never(step)
        floor = None
        wake = due_wake(step.disposition)
        match wake:
            case Immediate():
                steps += 1
            case At(wake_at=when):
                await _sleep(options, ceil_ms(when - run.updated_at))
                floor = when
            case External() | Terminal():
                return run
            case _:
                assert_never(wake)


async def _execute(
    rtg: RuntimeGraph, dispatch: Dispatch, options: _Options
) -> tuple[TaskOutcome, ...]:
    if not rtg.has_children:
        return await execute(
            rtg, dispatch.activations, clock=options.clock, application=options.context
        )
    nodes = [a for a in dispatch.activations if rtg.nodes[a.node_id].child is None]
    children = [a for a in dispatch.activations if rtg.nodes[a.node_id].child is not None]
    done = await execute(rtg, nodes, clock=options.clock, application=options.context)
    ran = [await _run_child(rtg, dispatch, a, options) for a in children]
    return (*done, *ran)


async def _run_child(
    rtg: RuntimeGraph, dispatch: Dispatch, activation: Activation, options: _Options
) -> TaskOutcome:
    """A child node's attempt, inline: the child graph runs to its end right here (with the
    same clock, ids and context), and its end is the attempt's outcome."""
    spec = rtg.nodes[activation.node_id].child
    assert spec is not None

    def failed(kind: str, text: str) -> Failed:
        return Failed(
            task_id=activation.task_id,
            node_id=activation.node_id,
            attempt=activation.attempt,
            reason=format_reason(kind, text),
            retryable=False,
        )

    graph = options.graphs.get(spec.graph)
    if graph is None:
        return failed(
            "child_graph_unusable",
            f"no child graph {spec.graph!r} was given to the inline runner (graphs=...)",
        )
    ident = child_run_id(activation.task_id, activation.attempt, dispatch.run.checkpoint_seq)
    result = await run_inline_async(
        graph,
        child_input(spec, activation.snapshot),
        nodes=options.nodes,
        run_id=ident,
        metadata=parent_link(
            dispatch.run, activation.task_id, activation.node_id, activation.attempt
        ),
        clock=options.clock,
        sleeper=options.sleeper,
        ids=options.ids,
        max_supersteps=options.limits.max_supersteps,
        max_attempt_ms=options.limits.max_attempt_ms,
        default_timeout_ms=options.limits.default_timeout_ms,
        context=options.context,
        graphs=options.graphs,
    )
    ended = child_outcome(spec, activation, result.run)
    if ended is not None:
        return ended
    return failed(
        "child_waiting",
        f"child run {ident!r} waits for an interrupt, which the inline runner cannot answer "
        "for a child",
    )


async def _initialized(rtg: RuntimeGraph, run: Run, ledger: _Ledger) -> tuple[Run, bool]:
    """Initialize (fresh or resumed); returns the run and whether it may be driven on."""
    moment = initialize(rtg, run, now=ledger.options.clock())
    match moment:
        case CoreError():
            raise moment
        case Terminated():
            return run, False
        case Moment():
            await ledger.accept(moment, "init" if run.status is RunStatus.CREATED else "unclaimed")
            return moment.run, isinstance(moment.disposition, Continue)
        case _:
            assert_never(moment)


# -- public API ------------------------------------------------------------------------------


async def run_inline_async(
    graph: GraphLike,
    input: Mapping[str, object] | None = None,
    *,
    nodes: NodeRegistry | None = None,
    run_id: str | None = None,
    metadata: Mapping[str, JSONValue] | None = None,
    clock: Callable[[], datetime] | None = None,
    sleeper: Sleeper | None = None,
    ids: Callable[[str], str] | None = None,
    max_steps: int | None = None,
    max_supersteps: int | None = DEFAULT_INLINE_MAX_SUPERSTEPS,
    max_attempt_ms: int | None = None,
    default_timeout_ms: int | None = None,
    context: Mapping[str, object] | None = None,
    validate: bool = False,
    commit_to: MemoryBackend | Literal[True] | None = None,
    graphs: Mapping[str, GraphLike] | None = None,
) -> InlineResult:
    """Start a run of ``graph`` with ``input`` and drive it to a pause or to the end.

    ``graph`` is a :class:`Graph` (compiled with ``nodes``), a ``CompileResult`` or a
    ``RuntimeGraph`` (reuse a compiled graph to skip compiling on every call).
    ``max_steps`` stops after that many committed steps (``0``: initialize only).
    ``max_supersteps`` is the host ceiling (the graph's own limit can only lower it);
    ``max_attempt_ms`` caps node timeouts (a node declaring more raises
    ``IncompatibleExecutionPolicy`` before anything runs); ``default_timeout_ms`` applies to
    nodes without a timeout (60 s). ``context`` reaches nodes as ``ctx.application``.
    ``graphs`` gives the child graphs by id: a child node runs its child inline, to its
    end, as its attempt (the pinned hash is not checked here).
    """
    rtg, document = _runtime(graph, nodes)
    options = _options(
        rtg,
        document,
        clock=clock,
        sleeper=sleeper,
        ids=ids,
        max_supersteps=max_supersteps,
        max_attempt_ms=max_attempt_ms,
        default_timeout_ms=default_timeout_ms,
        context=context,
        validate=validate,
        commit_to=commit_to,
        graphs=graphs,
        nodes=nodes,
    )
    ledger = _Ledger(options, rtg)
    now = options.clock()
    created = build_initial_run(
        rtg, input, run_id=run_id or options.ids("run"), now=now, metadata=metadata
    )
    run, go_on = await _initialized(rtg, created, ledger)
    if go_on:
        run = await _drive(rtg, run, ledger, max_steps=max_steps, max_commits=None)
    return await ledger.result(run)


async def resume_inline_async(
    graph: GraphLike,
    run: Run,
    *,
    nodes: NodeRegistry | None = None,
    clock: Callable[[], datetime] | None = None,
    sleeper: Sleeper | None = None,
    ids: Callable[[str], str] | None = None,
    max_steps: int | None = None,
    max_supersteps: int | None = DEFAULT_INLINE_MAX_SUPERSTEPS,
    max_attempt_ms: int | None = None,
    default_timeout_ms: int | None = None,
    context: Mapping[str, object] | None = None,
    validate: bool = False,
    commit_to: MemoryBackend | Literal[True] | None = None,
) -> InlineResult:
    """Pick up a saved run (e.g. a checkpoint's run after a crash) and drive it on.

    A ``running`` or ``waiting`` run first gets a resumed initialization
    (``run_initialized`` with ``{"resumed": true}``); a waiting run stays waiting. A
    terminal run is returned unchanged with no checkpoints. A run of another graph raises
    ``GraphMismatch``. An uncommitted superstep is simply planned and executed again.
    """
    rtg, document = _runtime(graph, nodes)
    options = _options(
        rtg,
        document,
        clock=clock,
        sleeper=sleeper,
        ids=ids,
        max_supersteps=max_supersteps,
        max_attempt_ms=max_attempt_ms,
        default_timeout_ms=default_timeout_ms,
        context=context,
        validate=validate,
        commit_to=commit_to,
    )
    ledger = _Ledger(options, rtg)
    current, go_on = await _initialized(rtg, run, ledger)
    if go_on:
        current = await _drive(rtg, current, ledger, max_steps=max_steps, max_commits=None)
    return await ledger.result(current)


async def step_inline_async(
    graph: GraphLike,
    run: Run,
    *,
    nodes: NodeRegistry | None = None,
    clock: Callable[[], datetime] | None = None,
    sleeper: Sleeper | None = None,
    ids: Callable[[str], str] | None = None,
    max_supersteps: int | None = DEFAULT_INLINE_MAX_SUPERSTEPS,
    max_attempt_ms: int | None = None,
    default_timeout_ms: int | None = None,
    context: Mapping[str, object] | None = None,
    validate: bool = False,
    commit_to: MemoryBackend | Literal[True] | None = None,
) -> InlineResult:
    """Exactly one commit: initialize a ``created`` run, or advance a running one by one
    moment (a retry backoff that is not due yet is slept first). Waiting and terminal runs
    come back unchanged with no checkpoints."""
    rtg, document = _runtime(graph, nodes)
    options = _options(
        rtg,
        document,
        clock=clock,
        sleeper=sleeper,
        ids=ids,
        max_supersteps=max_supersteps,
        max_attempt_ms=max_attempt_ms,
        default_timeout_ms=default_timeout_ms,
        context=context,
        validate=validate,
        commit_to=commit_to,
    )
    ledger = _Ledger(options, rtg)
    if run.status is RunStatus.CREATED:
        current, _ = await _initialized(rtg, run, ledger)
        return await ledger.result(current)
    current = await _drive(rtg, run, ledger, max_steps=None, max_commits=1)
    return await ledger.result(current)


async def resolve_interrupt_inline_async(
    graph: GraphLike,
    run: Run,
    interrupt_id: str,
    value: object,
    *,
    nodes: NodeRegistry | None = None,
    clock: Callable[[], datetime] | None = None,
    sleeper: Sleeper | None = None,
    ids: Callable[[str], str] | None = None,
    max_steps: int | None = None,
    max_supersteps: int | None = DEFAULT_INLINE_MAX_SUPERSTEPS,
    max_attempt_ms: int | None = None,
    default_timeout_ms: int | None = None,
    context: Mapping[str, object] | None = None,
    validate: bool = False,
    commit_to: MemoryBackend | Literal[True] | None = None,
) -> InlineResult:
    """Answer an open interrupt of ``run`` with ``value``, then drive the run on.

    Raises ``TerminalRun`` (terminal run), ``AlreadyResolved``, ``InterruptNotFound`` (no such
    interrupt) or ``InvalidInput`` (the value fails the interrupt's schema or the resume
    field) before anything is committed.
    """
    rtg, document = _runtime(graph, nodes)
    options = _options(
        rtg,
        document,
        clock=clock,
        sleeper=sleeper,
        ids=ids,
        max_supersteps=max_supersteps,
        max_attempt_ms=max_attempt_ms,
        default_timeout_ms=default_timeout_ms,
        context=context,
        validate=validate,
        commit_to=commit_to,
    )
    ledger = _Ledger(options, rtg)
    moment = resolve_interrupt(rtg, run, interrupt_id, value, now=options.clock())
    if isinstance(moment, CoreError):
        raise moment
    await ledger.accept(moment, "unclaimed")
    current = await _drive(rtg, moment.run, ledger, max_steps=max_steps, max_commits=None)
    return await ledger.result(current)


async def cancel_inline_async(
    graph: GraphLike,
    run: Run,
    *,
    nodes: NodeRegistry | None = None,
    clock: Callable[[], datetime] | None = None,
    ids: Callable[[str], str] | None = None,
    validate: bool = False,
    commit_to: MemoryBackend | Literal[True] | None = None,
) -> InlineResult:
    """Cancel ``run``. A cancelled run comes back unchanged (no checkpoint); a done or
    failed one raises ``TerminalRun``."""
    rtg, document = _runtime(graph, nodes)
    options = _options(
        rtg,
        document,
        clock=clock,
        sleeper=None,
        ids=ids,
        max_supersteps=None,
        max_attempt_ms=None,
        default_timeout_ms=None,
        context=None,
        validate=validate,
        commit_to=commit_to,
    )
    ledger = _Ledger(options, rtg)
    moment = cancel_run(run, now=options.clock())
    if isinstance(moment, CoreError):
        raise moment
    if isinstance(moment, Unchanged):
        return await ledger.result(moment.run)
    await ledger.accept(moment, "unclaimed")
    return await ledger.result(moment.run)


# -- sync twins ------------------------------------------------------------------------------


run_inline = sync_twin(run_inline_async)
resume_inline = sync_twin(resume_inline_async)
step_inline = sync_twin(step_inline_async)
resolve_interrupt_inline = sync_twin(resolve_interrupt_inline_async)
cancel_inline = sync_twin(cancel_inline_async)


# -- the time-skipping environment (docket.testing_time) -------------------------------------

_TIME_NAMES: Final = frozenset(
    {"NotReached", "NotSettled", "Stalled", "TimeSkipError", "TimeSkippingEnv"}
)


def __getattr__(name: str) -> object:
    # imported on first use: docket.testing_time imports the facade, which imports this
    # module's neighbours; importing it here eagerly would make the facade a dependency
    # of the inline runner
    if name in _TIME_NAMES:
        from docket import testing_time

        return getattr(testing_time, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
