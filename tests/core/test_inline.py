"""Processless semantics through the inline runner (runtime-spec §12, cases 1-19 and 37)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from docket.core import InvalidInput, UncompilableGraph, snapshot
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START
from docket.graph.schema import S
from docket.records import CheckpointType, EventType, RunStatus
from docket.testing import run_inline, step_inline
from tests.core import fixtures as fx
from tests.core.helpers import check_history, events_of, inline, step, types


def test_minimal_linear_runs_to_done_with_options_honoured() -> None:
    result = inline(fx.minimal_linear(), {"value": "hello"}, run_id="r-1", metadata={"who": "t"})
    run = result.run
    assert run.status is RunStatus.DONE
    assert run.step == 1
    assert run.output == {"result": "hello"}
    assert result.checkpoint_types == ("run_initialized", "step_committed", "run_completed")
    assert run.id == "r-1"
    assert run.metadata == {"who": "t"}
    assert run.finished_at == run.updated_at
    assert run.input == {"value": "hello"}


def test_init_events_and_envelope() -> None:
    result = inline(fx.minimal_linear(), {"value": "hello"})
    init = result.checkpoints[0]
    assert types(init) == ["run_initialized", "channel_updated", "edge_triggered"]
    assert init.events[0].payload == {"inputs": ["value"]}
    assert init.events[1].channel_id == "input:value"
    assert init.events[1].payload == {"version": 1}
    assert init.events[2].channel_id == "edge:start"
    assert init.events[2].payload == {"edge_id": "start", "to": "copy"}
    assert init.metadata == {
        "checkpoint_seq": 1,
        "checkpoint_type": "run_initialized",
        "graph_step": 0,
        "wake_disposition": "continue",
        "park_reason": None,
        "active_superstep": None,
        "node_attempts": [],
    }
    assert init.run.changed_channels == {"input:value", "edge:start"}


def test_barrier_events() -> None:
    result = inline(fx.minimal_linear(), {"value": "hello"})
    barrier = result.checkpoints[1]
    assert types(barrier) == ["node_completed", "channel_updated", "edge_triggered"]
    task = f"{result.run.id}:0:copy"
    completed, updated, edge = barrier.events[:3]
    assert (completed.node_id, completed.task_id, completed.payload) == (
        "copy",
        task,
        {"attempt": 1},
    )
    assert (updated.channel_id, updated.payload) == ("state:result", {"writers": ["copy"]})
    assert edge.payload == {"edge_id": "done", "to": FINISH}
    assert barrier.metadata["node_attempts"] == [
        {
            "task_id": task,
            "node_id": "copy",
            "attempted": 1,
            "outcome": "completed",
            "next_scheduled_attempt": None,
        }
    ]
    done = result.checkpoints[2]
    assert types(done) == ["run_completed"]
    assert done.events[0].payload == {"outputs": ["result"]}
    assert done.metadata["wake_disposition"] == "terminal"
    assert done.metadata["park_reason"] == "run_completed"


def test_max_steps_stops_after_that_many_commits() -> None:
    result = inline(fx.simple_edge(), {"topic": "x"}, max_steps=1)
    assert result.run.status is RunStatus.RUNNING
    assert result.run.step == 1
    assert result.checkpoint_types == ("run_initialized", "step_committed")
    only_init = inline(fx.simple_edge(), {"topic": "x"}, max_steps=0)
    assert only_init.checkpoint_types == ("run_initialized",)


def test_invalid_graph_raises_with_diagnostics() -> None:
    broken = GraphBuilder("broken").node("a", "not_registered").edge("s", START, "a").build()
    with pytest.raises(UncompilableGraph) as caught:
        run_inline(broken, {}, nodes=fx.NODES)
    diagnostics = caught.value.details["diagnostics"]
    assert isinstance(diagnostics, list) and diagnostics
    assert any("unknown_implementation" in str(d) for d in diagnostics)


@pytest.mark.parametrize(
    ("given", "reasons"),
    [
        ({}, ['required input "value" is missing']),
        ({"value": None}, ['required input "value" is null']),
        ({"value": "x", "extra": 1}, ['unknown input "extra"']),
        ({"value": 42}, ['input "value" must be a string, got 42']),
    ],
)
def test_invalid_input_is_rejected_before_any_run(
    given: dict[str, Any], reasons: list[str]
) -> None:
    with pytest.raises(InvalidInput) as caught:
        run_inline(fx.minimal_linear(), given, nodes=fx.NODES, commit_to=True)
    assert caught.value.reasons == reasons
    assert caught.value.phase == "init"


def test_non_durable_input_is_invalid() -> None:
    with pytest.raises(InvalidInput) as caught:
        run_inline(fx.minimal_linear(), {"value": object()}, nodes=fx.NODES)
    assert "not durable" in caught.value.message


def test_step_inline_commits_one_moment_per_call() -> None:
    graph = fx.simple_edge()
    first = step(graph, _created(graph, {"topic": "x"}), None)
    assert first.checkpoint_types == ("run_initialized",)
    backend = None
    run = first.run
    seen = []
    for _ in range(3):
        result = step(graph, run, backend)
        assert len(result.checkpoints) == 1
        seen.append((result.checkpoint_types[0], result.run.step))
        run = result.run
    assert seen == [("step_committed", 1), ("step_committed", 2), ("run_completed", 2)]
    again = step_inline(graph, run, nodes=fx.NODES)
    assert again.checkpoints == ()
    assert again.run == run


def _created(graph: Any, given: dict[str, Any]) -> Any:
    from docket.core import build_initial_run
    from docket.testing import DEFAULT_START

    return build_initial_run(fx.runtime(graph), given, run_id="stepped", now=DEFAULT_START)


def test_simple_edge_projects_never_written_output_as_none() -> None:
    result = inline(fx.simple_edge(), {"topic": "x"})
    assert result.run.step == 2
    assert result.run.output == {"draft": None}


def test_outputs_project_effective_defaults() -> None:
    graph = (
        GraphBuilder("defaults")
        .input("mode", S.string(), default="fast")
        .field("flag", S.boolean(), default=False)
        .field("items", S.list(S.string()), reducer="append")
        .field("nothing", S.string())
        .node("idle", "noop")
        .edge("s", START, "idle")
        .edge("f", "idle", FINISH)
        .output("mode")
        .output("flag")
        .output("items")
        .output("nothing")
        .build()
    )
    result = inline(graph)
    assert result.run.output == {"mode": "fast", "flag": False, "items": [], "nothing": None}


def test_fanout_siblings_complete_in_one_checkpoint_in_node_order() -> None:
    result = inline(fx.fanout())
    second = result.checkpoints[2]
    completed = [e.node_id for e in second.events if e.type is EventType.NODE_COMPLETED]
    assert completed == ["left", "right"]
    assert result.run.step == 2


def test_barrier_edge_fires_once_both_sources_completed() -> None:
    result = inline(fx.multi_source_edge())
    triggered = [
        (c.run.step, e.payload["edge_id"])
        for c in result.checkpoints
        for e in c.events
        if e.type is EventType.EDGE_TRIGGERED
    ]
    assert ("join" in [edge for _, edge in triggered]) is True
    assert [step for step, edge in triggered if edge == "join"] == [2]
    combine = [e for e in events_of(result, EventType.NODE_COMPLETED) if e.node_id == "combine"]
    assert combine[0].task_id == f"{result.run.id}:2:combine"
    assert result.run.step == 3
    assert result.run.channels["edge:join"].barrier_seen == ()


def test_barrier_memory_is_sticky_across_supersteps() -> None:
    result = inline(fx.sticky_barrier())
    after_first = result.checkpoints[1].run
    assert after_first.channels["edge:join"].barrier_seen == ("a",)
    assert after_first.channels["edge:join"].version == 0
    joined = [e for e in events_of(result, EventType.NODE_COMPLETED) if e.node_id == "joined"]
    assert len(joined) == 1
    assert result.run.channels["edge:join"].barrier_seen == ()
    assert result.run.channels["edge:join"].version == 1


def test_same_step_isolation_reader_sees_committed_default() -> None:
    result = inline(fx.same_step_isolation())
    assert result.run.output == {"x": "new", "y": "old"}


def test_write_conflict_last_writer_in_node_order_wins() -> None:
    result = inline(fx.write_conflict())
    assert result.run.output == {"out": "from_b"}
    channel = result.run.channels["state:out"]
    assert channel.version == 1
    assert "state:out" in result.checkpoints[1].run.changed_channels
    updated = events_of(result, EventType.CHANNEL_UPDATED)[-1]
    assert updated.payload == {"writers": ["a_writer", "b_writer"]}


def test_equal_value_write_still_bumps_version() -> None:
    graph = (
        GraphBuilder("rewrite")
        .field("x", S.string(), default="same")
        .node("w", "write", config={"values": {"x": "same"}})
        .edge("s", START, "w")
        .edge("f", "w", FINISH)
        .build()
    )
    result = inline(graph)
    assert result.run.channels["state:x"].version == 1
    assert result.checkpoints[1].run.changed_channels == {"state:x"}


@pytest.mark.parametrize(
    ("user", "route"),
    [({"premium_user": True}, "premium"), ({"premium_user": False}, "standard"), ({}, "standard")],
)
def test_guarded_edge_routes(user: dict[str, Any], route: str) -> None:
    result = inline(fx.guarded_edge(), {"user": user})
    assert result.run.output == {"route": route}


def test_cycle_counter_terminates_at_ten() -> None:
    result = inline(fx.cycle_counter())
    assert result.run.status is RunStatus.DONE
    assert result.run.output == {"count": 10.0}
    assert result.run.step == 20


@pytest.mark.parametrize("where", ["graph", "host"])
def test_superstep_limit_fails_the_run(where: str) -> None:
    if where == "graph":
        result = inline(fx.cycle_counter(limit=3))
    else:
        result = inline(fx.cycle_counter(limit=None), max_supersteps=3)
    run = result.run
    assert run.status is RunStatus.FAILED
    assert run.step == 3
    assert run.failure is not None
    assert run.failure.code == "max_supersteps_exceeded"
    assert run.failure.details == {"limit": 3}
    assert run.failure.message == "run exceeded the superstep limit of 3"
    last = result.checkpoints[-1]
    assert last.type is CheckpointType.RUN_FAILED
    assert types(last) == ["run_failed"]
    assert last.events[0].payload == {
        "limit": 3,
        "reason": "max_supersteps_exceeded",
        "message": "run exceeded the superstep limit of 3",
    }


def test_host_ceiling_caps_a_higher_graph_policy() -> None:
    result = inline(fx.cycle_counter(limit=50), max_supersteps=4)
    assert result.run.failure is not None
    assert result.run.failure.details == {"limit": 4}


def test_endless_cycle_stops_at_the_inline_ceiling() -> None:
    result = inline(fx.endless_cycle(), max_supersteps=6)
    assert result.run.failure is not None
    assert result.run.failure.code == "max_supersteps_exceeded"


def test_enum_content_is_coerced_to_strings() -> None:
    graph = (
        GraphBuilder("enums")
        .field("status", S.string())
        .node("w", "enum_writer")
        .edge("s", START, "w")
        .edge("f", "w", FINISH)
        .output("status")
        .build()
    )
    result = inline(graph)
    assert result.run.output == {"status": "ok"}
    assert type(result.run.channels["state:status"].value) is str


def test_reducers_fold_across_and_within_supersteps() -> None:
    result = inline(fx.reducers())
    assert result.run.output == {
        "log": ["one", "two", "three"],
        "seeded": ["seed", "from_a", "from_b"],
        "total": 5,
        "info": {"a": 1, "b": 2},
        "first": "x",
    }


def test_accumulating_field_snapshot_shows_its_zero() -> None:
    graph = (
        GraphBuilder("zero")
        .field("items", S.list(S.string()), reducer="append")
        .field("seen", S.list(S.string()))
        .node("look", "copy", config={"from": "items", "to": "seen"})
        .edge("s", START, "look")
        .edge("f", "look", FINISH)
        .output("seen")
        .build()
    )
    result = inline(graph)
    assert result.run.output == {"seen": []}
    assert snapshot(fx.runtime(graph), {}) == {"items": []}


def test_append_item_schema_violation_fails_and_leaves_channel_unwritten() -> None:
    graph = (
        GraphBuilder("bad_append")
        .field("items", S.list(S.string()), reducer="append")
        .node("w", "write", config={"values": {"items": 5}})
        .edge("s", START, "w")
        .edge("f", "w", FINISH)
        .build()
    )
    result = inline(graph)
    assert result.run.status is RunStatus.FAILED
    assert "state:items" not in result.run.channels
    failure = result.run.failure
    assert failure is not None and failure.code == "node_failed"
    errors = failure.details["errors"]
    assert isinstance(errors, dict)
    assert "invalid_state_update" in str(errors["w"])


def test_parallel_failure_commits_nothing() -> None:
    result = inline(fx.parallel_failure())
    run = result.run
    assert run.status is RunStatus.FAILED
    assert run.step == 0
    assert "state:ok_out" not in run.channels
    assert result.checkpoint_types == ("run_initialized", "run_failed")
    failure = run.failure
    assert failure is not None
    assert (failure.code, failure.node_id) == ("node_failed", "failing_node")
    assert failure.details["nodes"] == ["failing_node"]
    errors = failure.details["errors"]
    assert isinstance(errors, dict) and "always_fails" in str(errors["failing_node"])
    last = result.checkpoints[-1]
    assert types(last) == ["node_failed", "run_failed"]
    assert last.events[0].payload == {
        "attempt": 1,
        "reason": "error: always_fails",
        "permanent": True,
    }
    assert last.events[1].node_id == "failing_node"
    assert last.events[1].payload["reason"] == "node_failed"
    assert last.metadata["park_reason"] == "run_failed"


@pytest.mark.parametrize(
    ("implementation", "needle"),
    [
        ("bad_return", "invalid_node_return"),
        ("fails_permanently", "not_worth_retrying"),
    ],
)
def test_permanent_shapes_fail_on_the_first_attempt_despite_retry_budget(
    implementation: str, needle: str
) -> None:
    from docket.graph.nodes import RetryPolicy

    calls: list[Any] = []
    graph = fx.single_node(implementation, retry=RetryPolicy(3, 0))
    result = inline(graph, context={"calls": calls})
    assert result.run.status is RunStatus.FAILED
    assert calls == [("only", 1)]
    failed = events_of(result, EventType.NODE_FAILED)
    assert [(e.payload["attempt"], e.payload["permanent"]) for e in failed] == [(1, True)]
    assert needle in str(failed[0].payload["reason"])


@pytest.mark.parametrize(("implementation", "needle"), [("raises", "boom"), ("exits", "exited")])
def test_raising_nodes_fail_the_run(implementation: str, needle: str) -> None:
    result = inline(fx.single_node(implementation))
    assert result.run.status is RunStatus.FAILED
    reason = events_of(result, EventType.NODE_FAILED)[0].payload["reason"]
    assert needle in str(reason)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"nope": 1}, 'wrote unknown field "nope"'),
        ({"seed": "x"}, "is an input and read-only"),
        ({"out": 5}, "must be a string"),
    ],
)
def test_invalid_writes_fail_the_superstep(values: dict[str, Any], needle: str) -> None:
    graph = (
        GraphBuilder("bad_writes")
        .input("seed", S.string())
        .field("out", S.string())
        .node("writer", "write", config={"values": values})
        .edge("s", START, "writer")
        .edge("f", "writer", FINISH)
        .build()
    )
    result = inline(graph)
    failure = result.run.failure
    assert failure is not None
    assert failure.node_id == "writer"
    assert failure.details["nodes"] == ["writer"]
    assert needle in str(failure.details["errors"])
    run_failed = events_of(result, EventType.RUN_FAILED)[0]
    assert run_failed.node_id == "writer"
    assert run_failed.payload["reason"] == "node_failed"


def test_committed_values_are_revalidated_after_reducers() -> None:
    graph = (
        GraphBuilder("revalidate")
        .field("total", S.integer(min=0), reducer="sum")
        .node("minus", "write", config={"values": {"total": -3}})
        .edge("s", START, "minus")
        .edge("f", "minus", FINISH)
        .build()
    )
    result = inline(graph)
    assert result.run.status is RunStatus.FAILED
    assert "would commit an invalid value" in str(result.run.failure)


def test_nodes_get_private_copies_of_the_snapshot() -> None:
    graph = (
        GraphBuilder("mutation")
        .field("items", S.list(S.string()), reducer="append", default=["a"])
        .node("m1", "mutates_state")
        .node("m2", "copy", config={"from": "items", "to": "copied"})
        .field("copied", S.list(S.string()))
        .edge("s1", START, "m1")
        .edge("s2", START, "m2")
        .edge("f1", "m1", FINISH)
        .edge("f2", "m2", FINISH)
        .output("copied")
        .output("items")
        .build()
    )
    result = inline(graph)
    assert result.run.output == {"copied": ["a"], "items": ["a"]}


def test_start_fanned_nodes_run_concurrently_on_one_snapshot() -> None:
    graph = (
        GraphBuilder("together")
        .input("value", S.string())
        .node("a", "rendezvous")
        .node("b", "rendezvous")
        .node("c", "rendezvous")
        .edge("sa", START, "a")
        .edge("sb", START, "b")
        .edge("sc", START, "c")
        .edge("fa", "a", FINISH)
        .edge("fb", "b", FINISH)
        .edge("fc", "c", FINISH)
        .build()
    )
    seen: dict[str, Any] = {}

    async def go() -> Any:
        from docket.testing import run_inline_async

        return await run_inline_async(
            graph,
            {"value": "shared"},
            nodes=fx.NODES,
            context={"barrier": asyncio.Barrier(3), "seen": seen},
            validate=True,
        )

    result = asyncio.run(go())
    assert result.run.status is RunStatus.DONE
    assert result.run.step == 1
    assert seen == {n: {"value": "shared"} for n in "abc"}
    check_history(result.checkpoints)


def test_sync_nodes_run_in_threads_concurrently() -> None:
    graph = (
        GraphBuilder("threads")
        .node("a", "thread_rendezvous")
        .node("b", "thread_rendezvous")
        .edge("sa", START, "a")
        .edge("sb", START, "b")
        .edge("fa", "a", FINISH)
        .edge("fb", "b", FINISH)
        .build()
    )
    result = inline(graph, context={"thread_barrier": threading.Barrier(2)})
    assert result.run.status is RunStatus.DONE


def test_sync_helpers_refuse_a_running_loop() -> None:
    async def go() -> None:
        with pytest.raises(RuntimeError, match="_async twin"):
            run_inline(fx.minimal_linear(), {"value": "x"}, nodes=fx.NODES)

    asyncio.run(go())


def test_a_precompiled_runtime_graph_runs_without_recompiling() -> None:
    rtg = fx.runtime(fx.minimal_linear())
    result = run_inline(rtg, {"value": "hi"}, validate=True)
    assert result.run.output == {"result": "hi"}
    with pytest.raises(ValueError, match="commit_to"):
        run_inline(rtg, {"value": "hi"}, commit_to=True)


def test_ids_come_from_the_injected_generator() -> None:
    drawn: list[str] = []

    def ids(kind: str) -> str:
        drawn.append(kind)
        return f"{kind}-{len(drawn)}"

    result = inline(fx.minimal_linear(), {"value": "x"}, ids=ids)
    assert result.run.id == "run-1"
    assert drawn == ["run", "transition", "transition", "transition"]
