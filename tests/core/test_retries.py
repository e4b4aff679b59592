"""Retries, backoff parks and policies (runtime-spec §12, cases 20-30)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest

from docket.core import UncompilableGraph
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START
from docket.graph.nodes import NodePolicies, RetryPolicy
from docket.graph.schema import S
from docket.records import CheckpointType, EventType, RunStatus, WriteKind
from docket.testing import DEFAULT_START, run_inline
from tests.core import fixtures as fx
from tests.core.helpers import check_history, events_of, inline, resolve, resume, step, types


def test_retry_then_continue_parks_twice_then_completes() -> None:
    result = inline(fx.retry_then_continue())
    run = result.run
    assert run.status is RunStatus.DONE
    assert run.output == {"out": "ok"}
    assert result.checkpoint_types == (
        "run_initialized",
        "retry_scheduled",
        "retry_scheduled",
        "step_committed",
        "run_completed",
    )
    task = f"{run.id}:0:flaky"
    for k, park in enumerate(result.checkpoints[1:3], start=1):
        assert park.run.status is RunStatus.RUNNING
        assert park.run.step == 0
        assert list(park.run.active_tasks) == [task]
        parked = park.run.active_tasks[task]
        assert parked.attempt == k + 1
        assert parked.idempotency_key == f"{task}:{k + 1}"
        assert [f.attempt for f in parked.failures] == list(range(1, k + 1))
        assert park.run.timers[task].fires_at == park.created_at
        assert types(park) == ["node_failed"]
        assert park.events[0].payload == {
            "attempt": k,
            "reason": f"error: flaky attempt {k} failed",
            "permanent": False,
        }
        assert park.metadata["wake_disposition"] == "at"
        assert park.metadata["park_reason"] == "retry_backoff"
    barrier = result.checkpoints[3]
    assert types(barrier)[0] == "node_completed"
    assert barrier.events[0].payload == {"attempt": 3}
    assert "node_failed" not in types(barrier)
    assert barrier.run.active_tasks == {} and barrier.run.timers == {}


def test_retry_budget_exhausted_fails_the_run() -> None:
    result = inline(fx.retry_then_continue(max_attempts=2))
    run = result.run
    assert run.status is RunStatus.FAILED
    assert result.checkpoint_types == ("run_initialized", "retry_scheduled", "run_failed")
    assert [
        (e.payload["attempt"], e.payload["permanent"]) for e in result.checkpoints[1].events[:-1]
    ] == [(1, False)]
    failed = result.checkpoints[2]
    assert types(failed) == ["node_failed", "run_failed"]
    assert (failed.events[0].payload["attempt"], failed.events[0].payload["permanent"]) == (2, True)
    assert run.active_tasks == {} and run.pending_writes == () and run.timers == {}


class TickingClock:
    """Moves 1 ms forward on every read; the sleeper moves it by the sleep."""

    def __init__(self) -> None:
        self.now = DEFAULT_START
        self.slept: list[int] = []

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now

    def sleep(self, ms: int) -> None:
        self.slept.append(ms)
        self.now += timedelta(milliseconds=ms)


def test_sleeper_gets_exactly_the_backoff_even_when_the_clock_moves() -> None:
    clock = TickingClock()
    result = inline(
        fx.retry_then_continue(backoff_ms=25), clock=clock, sleeper=clock.sleep, commit_to=None
    )
    assert result.run.status is RunStatus.DONE
    assert clock.slept == [25, 25]
    parks = [c for c in result.checkpoints if c.type is CheckpointType.RETRY_SCHEDULED]
    for park in parks:
        timer = next(iter(park.run.timers.values()))
        assert timer.fires_at - park.run.updated_at == timedelta(milliseconds=25)


def test_default_manual_clock_advances_instead_of_sleeping() -> None:
    result = inline(fx.retry_then_continue(backoff_ms=60_000))
    times = [c.created_at for c in result.checkpoints]
    assert times[1] - times[0] == timedelta(0)
    assert times[2] - times[1] == timedelta(minutes=1)
    assert times[3] - times[2] == timedelta(minutes=1)


def test_corrupted_policy_in_a_precompiled_graph_fails_with_invalid_policy() -> None:
    rtg = fx.runtime(fx.retry_then_continue())
    node = rtg.nodes["flaky"]
    broken = attrs.evolve(node, policies=NodePolicies(retry=RetryPolicy(max_attempts=0)))
    rtg = attrs.evolve(rtg, nodes={**rtg.nodes, "flaky": broken})
    result = run_inline(rtg, {}, validate=True)
    check_history(result.checkpoints)
    failure = result.run.failure
    assert failure is not None
    assert (failure.code, failure.node_id) == ("invalid_policy", "flaky")
    assert events_of(result, EventType.RUN_FAILED)[0].node_id == "flaky"


def test_reserved_on_error_policy_never_compiles() -> None:
    graph = fx.single_node("noop", policies={"on_error": "skip"})
    with pytest.raises(UncompilableGraph) as caught:
        run_inline(graph, {}, nodes=fx.NODES)
    assert "invalid_policy" in str(caught.value.details["diagnostics"])


def test_parallel_retry_runs_the_steady_sibling_once() -> None:
    calls: list[Any] = []
    result = inline(fx.parallel_retry(), context={"calls": calls})
    assert sorted(calls) == [("flaky", 1), ("flaky", 2), ("steady", 1)]
    park = result.checkpoints[1]
    assert park.type is CheckpointType.RETRY_SCHEDULED
    (pending,) = park.run.pending_writes
    assert (pending.node_id, pending.attempt, pending.kind) == ("steady", 1, WriteKind.UPDATE)
    assert pending.value == {"steady_out": "steady"}
    assert "state:steady_out" not in park.run.channels
    barrier = result.checkpoints[2]
    completed = [
        (e.node_id, e.payload["attempt"])
        for e in barrier.events
        if e.type is EventType.NODE_COMPLETED
    ]
    assert barrier.run.step == 1
    assert completed == [("flaky", 2), ("steady", 1)]


def test_park_envelopes_describe_attempts() -> None:
    result = inline(fx.parallel_retry(fail_times=2))
    run_id = result.run.id
    flaky, steady = f"{run_id}:0:flaky", f"{run_id}:0:steady"
    first, second = result.checkpoints[1], result.checkpoints[2]
    assert first.metadata["node_attempts"] == [
        {
            "task_id": flaky,
            "node_id": "flaky",
            "attempted": 1,
            "outcome": "failed",
            "next_scheduled_attempt": 2,
        },
        {
            "task_id": steady,
            "node_id": "steady",
            "attempted": 1,
            "outcome": "pending_update",
            "next_scheduled_attempt": None,
        },
    ]
    assert second.metadata["node_attempts"] == [
        {
            "task_id": flaky,
            "node_id": "flaky",
            "attempted": 2,
            "outcome": "failed",
            "next_scheduled_attempt": 3,
        }
    ]
    assert second.metadata["active_superstep"] == {
        "graph_step": 0,
        "tasks": [
            {
                "task_id": flaky,
                "node_id": "flaky",
                "scheduled_attempt": 3,
                "idempotency_key": f"{flaky}:3",
            }
        ],
        "pending_attempts": [
            {
                "task_id": steady,
                "node_id": "steady",
                "attempted": 1,
                "kind": "update",
                "idempotency_key": f"{steady}:1",
            }
        ],
    }


def test_crash_during_backoff_resumes_at_the_persisted_attempt() -> None:
    first = inline(fx.parallel_retry(backoff_ms=5_000), commit_to=None)
    parked = first.checkpoints[1].run
    calls: list[Any] = []
    result = resume(
        fx.parallel_retry(backoff_ms=5_000), parked, context={"calls": calls}, commit_to=None
    )
    assert calls == [("flaky", 2)]
    assert result.run.status is RunStatus.DONE
    assert result.run.output == {"out": "ok"}
    completed = events_of(result, EventType.NODE_COMPLETED)
    flaky = next(e for e in completed if e.node_id == "flaky")
    assert flaky.task_id == f"{parked.id}:0:flaky"
    assert parked.active_tasks[f"{parked.id}:0:flaky"].idempotency_key == f"{parked.id}:0:flaky:2"
    assert result.checkpoint_types[0] == "run_initialized"


def test_permanent_failure_after_a_park_commits_nothing_but_keeps_the_parked_result() -> None:
    calls: list[Any] = []
    result = inline(fx.parallel_retry(fail_times=5, max_attempts=2), context={"calls": calls})
    assert sorted(calls) == [("flaky", 1), ("flaky", 2), ("steady", 1)]
    run = result.run
    assert run.status is RunStatus.FAILED
    assert "state:steady_out" not in run.channels
    # kept for an operator's retry (docs/execution.md, "Retrying a failed run")
    assert [(w.node_id, w.attempt) for w in run.pending_writes] == [("steady", 1)]
    assert (run.active_tasks, run.timers) == ({}, {})
    assert events_of(result, EventType.NODE_COMPLETED) == []


def test_corrupted_pending_write_fails_through_the_typed_path() -> None:
    first = inline(fx.parallel_retry(backoff_ms=5_000), commit_to=None)
    parked = first.checkpoints[1].run
    (pending,) = parked.pending_writes
    corrupted = attrs.evolve(parked, pending_writes=(attrs.evolve(pending, value={"nope": 1}),))
    result = resume(fx.parallel_retry(backoff_ms=5_000), corrupted, commit_to=None)
    failure = result.run.failure
    assert failure is not None and failure.code == "node_failed"
    errors = failure.details["errors"]
    assert isinstance(errors, dict)
    assert 'unknown field "nope"' in str(errors["steady"])


def _two_speeds() -> Any:
    return (
        GraphBuilder("two_speeds")
        .field("fast_out", S.string())
        .field("slow_out", S.string())
        .node(
            "fast",
            "flaky",
            config={"fail_times": 1, "values": {"fast_out": "f"}},
            retry=RetryPolicy(2, 10),
        )
        .node(
            "slow",
            "flaky",
            config={"fail_times": 1, "values": {"slow_out": "s"}},
            retry=RetryPolicy(2, 50),
        )
        .edge("to_fast", START, "fast")
        .edge("to_slow", START, "slow")
        .edge("fast_done", "fast", FINISH)
        .edge("slow_done", "slow", FINISH)
        .build()
    )


def test_heterogeneous_backoffs_park_per_deadline() -> None:
    slept: list[int] = []
    frozen = DEFAULT_START
    result = inline(_two_speeds(), clock=lambda: frozen, sleeper=slept.append, commit_to=None)
    assert result.run.status is RunStatus.DONE
    assert slept == [10, 40]  # the second wait starts from the first deadline, not from t0
    assert result.checkpoint_types == (
        "run_initialized",
        "retry_scheduled",
        "retry_scheduled",
        "step_committed",
        "run_completed",
    )
    second = result.checkpoints[2]
    assert types(second) == []
    run_id = result.run.id
    fast, slow = f"{run_id}:0:fast", f"{run_id}:0:slow"
    (pending,) = second.run.pending_writes
    assert (pending.node_id, pending.attempt) == ("fast", 2)
    assert second.run.active_tasks[slow].attempt == 2
    assert second.metadata["active_superstep"] == {
        "graph_step": 0,
        "tasks": [
            {
                "task_id": slow,
                "node_id": "slow",
                "scheduled_attempt": 2,
                "idempotency_key": f"{slow}:2",
            }
        ],
        "pending_attempts": [
            {
                "task_id": fast,
                "node_id": "fast",
                "attempted": 2,
                "kind": "update",
                "idempotency_key": f"{fast}:2",
            }
        ],
    }
    assert second.metadata["node_attempts"] == [
        {
            "task_id": fast,
            "node_id": "fast",
            "attempted": 2,
            "outcome": "pending_update",
            "next_scheduled_attempt": None,
        }
    ]
    assert second.metadata["wake_disposition"] == "at"


def _gate_and_flaky() -> Any:
    return (
        GraphBuilder("gate_and_flaky")
        .field("decision", S.string())
        .field("applied", S.string())
        .field("out", S.string())
        .node("gate", "gate")
        .node("worker", "noop")
        .node("flaky", "flaky", config={"fail_times": 1}, retry=RetryPolicy(2, 1_000))
        .edge("to_gate", START, "gate")
        .edge("to_worker", START, "worker")
        .edge("then", "worker", "flaky")
        .edge("gate_done", "gate", FINISH)
        .edge("flaky_done", "flaky", FINISH)
        .output("applied")
        .output("out")
        .build()
    )


def test_resolution_during_a_retry_park() -> None:
    graph = _gate_and_flaky()
    snapshots: list[Any] = []
    context = {"snapshots": snapshots}
    from docket.core import build_initial_run

    created = build_initial_run(fx.runtime(graph), {}, run_id="park", now=DEFAULT_START)
    init = step(graph, created, True, context=context)
    barrier = step(graph, init.run, init.backend, context=context)
    assert barrier.checkpoint_types == ("interrupt_requested",)
    assert barrier.run.status is RunStatus.RUNNING
    park = step(graph, barrier.run, init.backend, context=context)
    assert park.checkpoint_types == ("retry_scheduled",)
    (interrupt_id,) = park.run.interrupts
    result = resolve(graph, park, interrupt_id, "approved", context=context)
    resolution = result.checkpoints[0]
    assert resolution.type is CheckpointType.INTERRUPT_RESOLVED
    assert resolution.metadata["wake_disposition"] == "at"
    assert resolution.metadata["park_reason"] == "interrupt_resolved"
    assert result.run.status is RunStatus.DONE
    assert result.run.output == {"applied": "approved", "out": "ok"}
    flaky_views = [state for node, _, state in snapshots if node == "flaky"]
    assert flaky_views == [{}, {}]  # the parked attempt re-ran on its original snapshot


def test_a_pending_write_of_an_unknown_node_fails_typed() -> None:
    first = inline(fx.parallel_retry(backoff_ms=5_000), commit_to=None)
    parked = first.checkpoints[1].run
    (pending,) = parked.pending_writes
    stranger = attrs.evolve(
        pending, node_id="ghost", task_id=pending.task_id.replace("steady", "ghost")
    )
    corrupted = attrs.evolve(parked, pending_writes=(stranger,))
    result = resume(fx.parallel_retry(backoff_ms=5_000), corrupted, commit_to=None)
    failure = result.run.failure
    assert failure is not None
    assert failure.code == "invalid_run"
    assert failure.details == {"nodes": ["ghost"]}
