"""Node execution: run one superstep's activations, concurrently, and report outcomes.

Every activation runs in its own asyncio task under ``asyncio.timeout`` (its effective
attempt timeout). Async nodes are awaited on the loop; sync nodes run in a worker thread
(a shared pool by default). Each node gets its own deep copy of the snapshot and config,
so a node that mutates what it was given cannot disturb its siblings or the run.

Whatever a node does, exactly one :data:`~docket.core.outcomes.TaskOutcome` comes back per
activation and the caller never sees the node's exception:

- a raised exception (``SystemExit`` included) is a retryable failure naming it, and keeps
  the exception's type, message and bounded traceback (:func:`~docket.core.captured.error_info`);
- running past the timeout is a retryable ``timeout`` failure;
- a node that cancels its own task is a retryable ``killed`` failure;
- a return value that is not a dict, ``Update``, ``Interrupt`` or ``Failure`` is the
  permanent failure ``invalid_node_return``.

The items of a map node (``docket.graph.maps``) are activations like any other; a map's
``max_parallel`` bounds how many of its items run at once here (the rest wait their turn,
in item order), and each item's context carries ``item_index`` and ``item``.

A node's ``max_concurrency`` bounds its attempts in the whole process, across runs and
workers (``docket.runtime.gates``): an attempt over it waits for a place before its
timeout starts; a sync node keeps its place until its thread returns, timed out or not.
A node's ``limiter`` bounds its attempts across every worker (``docket.runtime.limiters``):
after its process place, an attempt waits for a slot of the limiter's ledger, and gives
it back when the attempt ends (a timed-out sync node's thread may still be running then).

Cancelling the caller cancels every in-flight async node (the tasks are awaited together).
A sync node that times out or is cancelled cannot be stopped: Python threads cannot be
killed, so it keeps running in its thread until it returns, and its result is dropped.
``KeyboardInterrupt`` is never swallowed.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import datetime, timedelta

import attrs

from docket.clock import system_clock
from docket.core.captured import error_info
from docket.core.outcomes import (
    Failed,
    TaskOutcome,
    classify_return,
    describe_exception,
    format_reason,
)
from docket.core.plan import Activation
from docket.core.state import copy_dict, copy_json
from docket.graph.compiler import RuntimeGraph, RuntimeNode
from docket.graph.nodes import NodeContext
from docket.runtime.emissions import Emitter
from docket.runtime.gates import NodeGate, Slot, node_gate
from docket.runtime.limiters import ClaimLimits, LimiterUnavailable
from docket.telemetry import Metadata, Telemetry, log_context, outcome_metadata
from docket.values import JSONValue

__all__ = ["execute", "execute_one", "node_threads"]


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def node_threads() -> Executor:
    """The shared thread pool sync nodes run in (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="docket-node")
        return _pool


def _failed(
    activation: Activation, kind: str, detail: str, raised: BaseException | None = None
) -> Failed:
    return Failed(
        task_id=activation.task_id,
        node_id=activation.node_id,
        attempt=activation.attempt,
        reason=format_reason(kind, detail),
        retryable=True,
        error=None if raised is None else error_info(raised),
    )


async def execute_one(
    node: RuntimeNode,
    activation: Activation,
    *,
    clock: Callable[[], datetime] = system_clock,
    application: Mapping[str, object] | None = None,
    threads: Executor | None = None,
    telemetry: Telemetry | None = None,
    emitter: Emitter | None = None,
    gate: NodeGate | None = None,
    limits: ClaimLimits | None = None,
) -> TaskOutcome:
    """Run one attempt of ``node``; never raises for anything the node does (cancelling the
    caller still cancels it). Logs inside carry the task's context; with ``telemetry``
    listening the attempt is a ``docket.node.execute`` span. ``emitter`` sends what the
    node's ``ctx.emit`` checked (``docket.runtime.emissions``). With a ``gate`` (the node's
    ``max_concurrency``) the attempt first waits for a place in it; then, for a node with
    a ``limiter`` and ``limits`` (the claim's), for a slot of that limiter, held until the
    attempt ends (``docket.runtime.limiters``)."""
    with log_context(
        run_id=activation.run_id,
        task_id=activation.task_id,
        node_id=activation.node_id,
        attempt=activation.attempt,
    ):
        slot = None if gate is None else await gate.acquire()
        held: str | None = None
        try:
            # the process's gate first: a cross-worker slot is not held while waiting here
            if limits is not None and node.policies.limiter is not None:
                try:
                    held = await limits.acquire(node.policies.limiter, activation)
                except LimiterUnavailable as exc:
                    return attrs.evolve(
                        _failed(activation, "limiter_unavailable", str(exc)), retryable=False
                    )
            if not telemetry:
                return await _attempt(node, activation, clock, application, threads, emitter, slot)
            metadata: Metadata = {
                "run_id": activation.run_id,
                "node_id": activation.node_id,
                "task_id": activation.task_id,
                "attempt": activation.attempt,
                "step": activation.step,
            }
            with telemetry.span("docket.node.execute", metadata) as span:
                outcome = await _attempt(
                    node, activation, clock, application, threads, emitter, slot
                )
                span.set(outcome_metadata(outcome))
            return outcome
        finally:
            try:
                if held is not None and limits is not None:
                    await asyncio.shield(limits.release(held))  # also when cancelled
            finally:  # a second cancel may interrupt the await above: the place still goes
                if slot is not None:
                    slot.release()  # a no-op for a sync node still running: its thread releases


async def _attempt(
    node: RuntimeNode,
    activation: Activation,
    clock: Callable[[], datetime],
    application: Mapping[str, object] | None,
    threads: Executor | None,
    emitter: Emitter | None = None,
    slot: Slot | None = None,
) -> TaskOutcome:
    timeout_ms = activation.timeout_ms
    context = NodeContext(
        run_id=activation.run_id,
        node_id=activation.node_id,
        step=activation.step,
        attempt=activation.attempt,
        config=copy_dict(activation.config),
        source_versions=dict(activation.source_versions),
        application=application or {},
        deadline=clock() + timedelta(milliseconds=timeout_ms),
        timeout_ms=timeout_ms,
        item_index=activation.item_index,
        item=_item(node, activation),
        emitter=emitter,
    )
    state = copy_dict(activation.snapshot)
    fn = node.definition.fn
    try:
        async with asyncio.timeout(timeout_ms / 1000) as scope:
            if node.definition.is_async:
                value: object = fn(state, context)
            else:
                loop = asyncio.get_running_loop()
                call = functools.partial(contextvars.copy_context().run, fn, state, context)
                if slot is None:
                    value = await loop.run_in_executor(threads or node_threads(), call)
                else:  # the thread keeps the node's place until it returns, even timed out
                    running = (threads or node_threads()).submit(call)
                    slot.hold_until(running)
                    waited = asyncio.wrap_future(running)
                    value = await waited
            if inspect.isawaitable(value):
                value = await value
    except TimeoutError as exc:
        if scope.expired():
            return _failed(activation, "timeout", f"the attempt exceeded its {timeout_ms} ms")
        return _failed(activation, "exception", describe_exception(exc), exc)
    except SystemExit as exc:
        return _failed(activation, "exited", describe_exception(exc), exc)
    except Exception as exc:
        return _failed(activation, "exception", describe_exception(exc), exc)
    return classify_return(activation.task_id, activation.node_id, activation.attempt, value)


def _item(node: RuntimeNode, activation: Activation) -> JSONValue:
    if activation.item_index is None or node.map is None:
        return None
    return copy_json(activation.snapshot.get(node.map.item))


def _gate(rtg: RuntimeGraph, node: RuntimeNode) -> NodeGate | None:
    limit = node.policies.max_concurrency
    return None if limit is None else node_gate(rtg.id, node.public_id, limit)


async def _bounded(gate: asyncio.Semaphore, work: Awaitable[TaskOutcome]) -> TaskOutcome:
    async with gate:
        return await work


async def execute(
    rtg: RuntimeGraph,
    activations: Sequence[Activation],
    *,
    clock: Callable[[], datetime] = system_clock,
    application: Mapping[str, object] | None = None,
    threads: Executor | None = None,
    telemetry: Telemetry | None = None,
    emitters: Callable[[Activation], Emitter] | None = None,
    limits: ClaimLimits | None = None,
) -> tuple[TaskOutcome, ...]:
    """Run every activation concurrently; one outcome per activation, in the same order.

    An activation whose node is missing from ``rtg`` fails (retryably) without running.
    ``emitters`` gives each attempt its ``ctx.emit`` sender (none: emit is a no-op).
    ``limits`` holds the claim's limiter slots (none: ``limiter`` policies limit nothing,
    as in ``docket.testing``'s inline runner).
    """
    if not activations:
        return ()
    gates: dict[str, asyncio.Semaphore] = {}  # per map node with max_parallel
    jobs: list[asyncio.Future[TaskOutcome]] = []
    for activation in activations:
        node = rtg.nodes.get(activation.node_id)
        if node is None:
            done: asyncio.Future[TaskOutcome] = asyncio.get_running_loop().create_future()
            done.set_result(_failed(activation, "lost", "the graph has no such node"))
            jobs.append(done)
            continue
        coro = execute_one(
            node,
            activation,
            clock=clock,
            application=application,
            threads=threads,
            telemetry=telemetry,
            emitter=emitters(activation) if emitters is not None else None,
            gate=_gate(rtg, node),
            limits=limits,
        )
        limit = node.map.max_parallel if node.map is not None else None
        if limit is not None:
            gate = gates.setdefault(node.id, asyncio.Semaphore(limit))
            coro = _bounded(gate, coro)
        jobs.append(asyncio.ensure_future(coro))
    results = await asyncio.gather(*jobs, return_exceptions=True)
    outcomes: list[TaskOutcome] = []
    for activation, result in zip(activations, results, strict=True):
        if isinstance(result, asyncio.CancelledError):
            outcomes.append(_failed(activation, "killed", "the node's task was cancelled"))
        elif isinstance(result, BaseException):
            outcomes.append(_failed(activation, "exception", describe_exception(result), result))
        else:
            outcomes.append(result)
    return tuple(outcomes)
