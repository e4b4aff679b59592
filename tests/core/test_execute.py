"""Node execution: timeouts, isolation, cancellation (runtime-spec §4.6 and §12 case 38)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

from docket.core import (
    Completed,
    Dispatch,
    Failed,
    IncompatibleExecutionPolicy,
    Interrupted,
    advance,
    classify_return,
)
from docket.graph.nodes import Failure, Interrupt, NodeContext, NodeRegistry, NodeState, Update
from docket.records import EventType, RunStatus
from docket.runtime.execute import execute
from docket.testing import DEFAULT_START, run_inline, run_inline_async
from tests.core import fixtures as fx
from tests.core.helpers import events_of, inline


def _reason(result: Any) -> str:
    return str(events_of(result, EventType.NODE_FAILED)[-1].payload["reason"])


@pytest.mark.parametrize("implementation", ["async_sleep", "sync_sleep"])
def test_missing_timeout_inherits_the_host_maximum(implementation: str) -> None:
    graph = fx.single_node(implementation, config={"seconds": 0.5})
    started = time.monotonic()
    result = inline(graph, max_attempt_ms=20)
    assert time.monotonic() - started < 0.45
    assert result.run.status is RunStatus.FAILED
    assert "timeout" in _reason(result)
    assert "20 ms" in _reason(result)


def test_an_explicit_lower_timeout_wins() -> None:
    graph = fx.single_node("async_sleep", config={"seconds": 0.5}, timeout_ms=15)
    result = inline(graph, max_attempt_ms=10_000)
    assert "15 ms" in _reason(result)


def test_an_explicit_timeout_above_the_host_maximum_runs_nothing() -> None:
    calls: list[Any] = []
    graph = fx.single_node("noop", timeout_ms=5_000)
    with pytest.raises(IncompatibleExecutionPolicy) as caught:
        run_inline(graph, {}, nodes=fx.NODES, max_attempt_ms=20, context={"calls": calls})
    assert calls == []
    assert caught.value.node_id == "only"
    assert caught.value.details == {"timeout_ms": 5_000, "max_attempt_elapsed_ms": 20}


def test_default_timeout_is_sixty_seconds_and_reaches_the_context() -> None:
    seen: list[NodeContext] = []
    registry = NodeRegistry()

    @registry.node("peek")
    def peek(state: NodeState, ctx: NodeContext) -> dict[str, Any]:
        seen.append(ctx)
        return {}

    graph = fx.single_node("peek")
    result = inline(graph, nodes=registry, commit_to=None)
    assert result.run.status is RunStatus.DONE
    (ctx,) = seen
    assert ctx.timeout_ms == 60_000
    assert ctx.deadline is not None
    assert ctx.deadline - DEFAULT_START == timedelta(seconds=60)
    assert ctx.task_id == f"{result.run.id}:0:only"
    assert ctx.idempotency_key == f"{result.run.id}:0:only:1"
    assert (ctx.run_id, ctx.step, ctx.attempt) == (result.run.id, 0, 1)


def test_a_self_killing_node_fails_without_crashing_the_caller() -> None:
    result = inline(fx.single_node("kills_itself"))
    assert result.run.status is RunStatus.FAILED
    assert "killed" in _reason(result)


def test_caller_death_cancels_in_flight_node_work() -> None:
    events: list[Any] = []
    calls: list[Any] = []
    graph = fx.single_node("async_sleep", config={"seconds": 5.0})

    async def go() -> None:
        context = {"events": events, "calls": calls}
        task = asyncio.ensure_future(run_inline_async(graph, {}, nodes=fx.NODES, context=context))
        while not calls:  # the node has started and is now suspended in its sleep
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.monotonic()
    asyncio.run(go())
    assert time.monotonic() - started < 2
    assert events == [("cancelled", "only")]


def test_outcomes_come_back_in_activation_order_whatever_finishes_first() -> None:
    rtg = fx.runtime(fx.fanout())
    result = run_inline(rtg, {}, max_steps=1)
    step = advance(rtg, result.run, now=DEFAULT_START)
    assert isinstance(step, Dispatch)
    outcomes = asyncio.run(execute(rtg, step.activations))
    assert [o.node_id for o in outcomes] == [a.node_id for a in step.activations]
    assert all(isinstance(o, Completed) for o in outcomes)


@pytest.mark.parametrize(
    ("value", "kind", "retryable"),
    [
        ({"a": 1}, Completed, None),
        (Update({"a": 1}), Completed, None),
        (Interrupt("a"), Interrupted, None),
        (Failure("nope"), Failed, True),
        (Failure("nope", retryable=False), Failed, False),
        (42, Failed, False),
        (None, Failed, False),
        ("text", Failed, False),
    ],
)
def test_classify_return(value: object, kind: type, retryable: bool | None) -> None:
    outcome = classify_return("t", "n", 1, value)
    assert isinstance(outcome, kind)
    if isinstance(outcome, Failed):
        assert outcome.retryable is retryable
        if not retryable and not isinstance(value, Failure):
            assert outcome.reason.startswith("invalid_node_return")


def test_exceptions_become_retryable_failures_naming_them() -> None:
    from docket.graph.nodes import RetryPolicy

    calls: list[Any] = []
    result = inline(fx.single_node("raises", retry=RetryPolicy(2, 0)), context={"calls": calls})
    assert calls == [("only", 1), ("only", 2)]
    reasons = [e.payload["reason"] for e in events_of(result, EventType.NODE_FAILED)]
    assert reasons == ["exception: RuntimeError: boom from a node"] * 2
