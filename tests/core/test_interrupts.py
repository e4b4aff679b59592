"""Interrupts, resolution and resumption (runtime-spec §12, cases 16 and 31-35)."""

from __future__ import annotations

from typing import Any

import pytest

from docket.core import AlreadyResolved, GraphMismatch, InterruptNotFound, InvalidInput, TerminalRun
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START
from docket.graph.schema import S
from docket.records import CheckpointType, EventType, InterruptStatus, RunStatus
from docket.testing import resolve_interrupt_inline, resume_inline
from tests.core import fixtures as fx
from tests.core.helpers import events_of, inline, resolve, resume, types


def _paused() -> Any:
    return inline(fx.interrupt_review())


def test_interrupt_pauses_the_run() -> None:
    result = _paused()
    run = result.run
    assert run.status is RunStatus.WAITING
    assert result.checkpoint_types == ("run_initialized", "interrupt_requested")
    (interrupt,) = run.interrupts.values()
    assert interrupt.node_id == "gate"
    assert interrupt.resume_channel == "decision"
    assert interrupt.status is InterruptStatus.OPEN
    assert interrupt.schema == {"type": "string"}
    assert interrupt.metadata == {"question": "approve?"}
    assert "gate" in run.pending_nodes
    last = result.checkpoints[-1]
    assert last.run.status is RunStatus.WAITING
    assert last.metadata["wake_disposition"] == "external"
    assert last.metadata["park_reason"] == "awaiting_interrupts"
    assert types(last) == ["interrupt_requested"]
    event = last.events[0]
    assert event.task_id == f"{run.id}:0:gate"
    assert event.payload == {
        "attempt": 1,
        "interrupt_id": interrupt.id,
        "resume_channel": "decision",
    }
    assert interrupt.id == "interrupt_0000000000000001"


def test_resolution_completes_the_run() -> None:
    paused = _paused()
    (interrupt_id,) = paused.run.interrupts
    result = resolve(fx.interrupt_review(), paused, interrupt_id, "approved")
    run = result.run
    assert run.status is RunStatus.DONE
    assert run.output == {"applied": "approved"}
    assert run.channels["state:decision"].value == "approved"
    assert run.interrupts[interrupt_id].status is InterruptStatus.RESOLVED
    assert run.interrupts[interrupt_id].resolved_at is not None
    assert "gate" not in run.pending_nodes
    assert result.checkpoint_types == ("interrupt_resolved", "step_committed", "run_completed")
    resolution = result.checkpoints[0]
    assert types(resolution) == ["interrupt_resolved", "channel_updated"]
    assert resolution.events[0].payload == {
        "interrupt_id": interrupt_id,
        "resume_channel": "decision",
    }
    assert resolution.events[0].node_id == "gate"
    assert resolution.events[1].payload == {"writers": ["gate"]}
    assert resolution.metadata["wake_disposition"] == "immediate"
    assert resolution.metadata["park_reason"] == "interrupt_resolved"


def test_resolution_errors() -> None:
    paused = _paused()
    (interrupt_id,) = paused.run.interrupts
    graph = fx.interrupt_review()
    with pytest.raises(InvalidInput) as caught:
        resolve_interrupt_inline(graph, paused.run, interrupt_id, 42, nodes=fx.NODES)
    assert caught.value.reasons == ["value must be a string, got 42"]
    with pytest.raises(InterruptNotFound):
        resolve_interrupt_inline(graph, paused.run, "nope", "x", nodes=fx.NODES)
    done = resolve(graph, paused, interrupt_id, "approved")
    with pytest.raises(TerminalRun):
        resolve_interrupt_inline(graph, done.run, interrupt_id, "again", nodes=fx.NODES)


def test_resolving_twice_on_a_live_run_is_already_resolved() -> None:
    paused = _paused()
    (interrupt_id,) = paused.run.interrupts
    resolved = resolve(fx.interrupt_review(), paused, interrupt_id, "approved", max_steps=0)
    assert resolved.run.status is RunStatus.RUNNING
    with pytest.raises(AlreadyResolved):
        resolve_interrupt_inline(
            fx.interrupt_review(), resolved.run, interrupt_id, "x", nodes=fx.NODES
        )


def test_resolution_writes_through_the_reducer() -> None:
    paused = inline(fx.append_resolution())
    (interrupt_id,) = paused.run.interrupts
    result = resolve(fx.append_resolution(), paused, interrupt_id, "yes")
    assert result.run.output == {"answers": ["yes"]}


def test_resume_a_waiting_run_stays_waiting() -> None:
    paused = _paused()
    again = resume(fx.interrupt_review(), paused.run, commit_to=paused.backend)
    assert again.checkpoint_types == ("run_initialized",)
    assert again.checkpoints[0].events[0].payload == {"resumed": True}
    assert again.checkpoints[0].metadata["wake_disposition"] == "external"
    assert again.run.status is RunStatus.WAITING
    (interrupt_id,) = again.run.interrupts
    done = resolve(fx.interrupt_review(), again, interrupt_id, "approved")
    assert done.run.status is RunStatus.DONE


def test_resume_a_mid_flight_run() -> None:
    graph = fx.minimal_linear()
    started = inline(graph, {"value": "v"}, max_steps=0)
    result = resume(graph, started.run, commit_to=started.backend)
    assert result.checkpoint_types == ("run_initialized", "step_committed", "run_completed")
    assert result.checkpoints[0].events[0].payload == {"resumed": True}
    assert result.run.output == {"result": "v"}


def test_resume_from_an_earlier_checkpoint_re_executes_the_superstep() -> None:
    graph = fx.simple_edge()
    calls: list[Any] = []
    full = inline(graph, {"topic": "t"}, context={"calls": calls})
    assert calls == [("writer", 1), ("reviewer", 1)]
    calls.clear()
    result = resume(graph, full.checkpoints[1].run, context={"calls": calls}, commit_to=None)
    assert calls == [("reviewer", 1)]
    assert result.run.status is RunStatus.DONE
    reviewer = events_of(result, EventType.NODE_COMPLETED)[0]
    assert reviewer.task_id == f"{full.run.id}:1:reviewer"


def test_resume_checks_the_graph_and_leaves_terminal_runs_alone() -> None:
    graph = fx.minimal_linear()
    done = inline(graph, {"value": "v"})
    untouched = resume_inline(graph, done.run, nodes=fx.NODES)
    assert untouched.checkpoints == ()
    assert untouched.run == done.run
    with pytest.raises(GraphMismatch):
        resume_inline(fx.simple_edge(), done.run, nodes=fx.NODES)
    changed = GraphBuilder("minimal_linear").node("copy", "noop").edge("s", START, "copy").build()
    with pytest.raises(GraphMismatch):
        resume_inline(changed, done.run, nodes=fx.NODES)


def test_resume_with_max_steps_zero_changes_no_graph_state() -> None:
    graph = fx.simple_edge()
    started = inline(graph, {"topic": "t"}, max_steps=0)
    again = resume(graph, started.run, max_steps=0, commit_to=started.backend)
    before, after = started.run, again.run
    assert (after.step, after.channels, after.changed_channels) == (
        before.step,
        before.channels,
        before.changed_channels,
    )
    assert after.checkpoint_seq == before.checkpoint_seq + 1


def test_interrupt_with_parallel_work_keeps_running_then_waits() -> None:
    result = inline(fx.interrupt_with_parallel_work())
    assert result.checkpoint_types == (
        "run_initialized",
        "interrupt_requested",
        "step_committed",
    )
    assert result.checkpoints[1].run.status is RunStatus.RUNNING
    assert result.checkpoints[1].metadata["wake_disposition"] == "continue"
    assert result.run.status is RunStatus.WAITING
    (interrupt_id,) = result.run.interrupts
    done = resolve(fx.interrupt_with_parallel_work(), result, interrupt_id, "ok")
    assert done.run.output == {"applied": "ok", "worked": "yes"}


def test_activation_for_a_paused_node_is_kept_until_it_runs() -> None:
    graph = fx.activation_while_paused()
    calls: list[Any] = []
    paused = inline(graph, context={"calls": calls})
    assert paused.run.status is RunStatus.WAITING
    # worker fired "poke" at gate in the barrier where gate paused; after_worker's barrier
    # committed since, and the activation is still there
    assert paused.checkpoints[-1].type is CheckpointType.STEP_COMMITTED
    assert paused.run.changed_channels == {"edge:poke"}
    assert paused.run.channels["edge:poke"].value is True
    (interrupt_id,) = paused.run.interrupts
    done = resolve(graph, paused, interrupt_id, "approved", context={"calls": calls})
    assert done.run.status is RunStatus.DONE
    assert [c for c in calls if c[0] == "gate"] == [("gate", 1), ("gate", 1)]
    assert done.run.channels["edge:poke"].value is None
    assert done.run.output == {"applied": "approved"}


def _two_gates(first_id: str, second_id: str, *, chained: bool) -> Any:
    builder = (
        GraphBuilder("two_gates")
        .field("decision", S.string())
        .field("applied", S.string())
        .node("g1", "gate", config={"interrupt_id": first_id})
        .node("g2", "pause", config={"interrupt_id": second_id, "resume": "decision"})
        .edge("to_g1", START, "g1")
    )
    if chained:
        builder.edge("next", "g1", "g2")
    else:
        builder.edge("to_g2", START, "g2")
    return builder.edge("d1", "g1", FINISH).edge("d2", "g2", FINISH).build()


def test_two_interrupts_with_one_id_in_a_superstep_fail_the_nodes() -> None:
    result = inline(_two_gates("same", "same", chained=False))
    failure = result.run.failure
    assert failure is not None
    assert failure.details["nodes"] == ["g1", "g2"]
    assert "twice" in str(failure.details["errors"])
    assert result.run.interrupts == {}


def test_an_interrupt_id_already_on_the_run_fails_the_node() -> None:
    graph = _two_gates("same", "same", chained=True)
    paused = inline(graph)
    assert list(paused.run.interrupts) == ["same"]
    result = resolve(graph, paused, "same", "go")
    failure = result.run.failure
    assert failure is not None and failure.node_id == "g2"
    assert "already exists" in str(failure.details["errors"])


def test_an_interrupt_on_an_undeclared_field_fails_permanently() -> None:
    from docket.graph.nodes import Interrupt, NodeContext, NodeRegistry, NodeState

    registry = NodeRegistry()

    @registry.node("wrong_channel")
    def wrong_channel(state: NodeState, ctx: NodeContext) -> Interrupt:
        return Interrupt("nowhere")

    graph = (
        GraphBuilder("wrong_channel")
        .node("n", "wrong_channel")
        .edge("s", START, "n")
        .edge("f", "n", FINISH)
        .build()
    )
    result = inline(graph, nodes=registry)
    failure = result.run.failure
    assert failure is not None
    assert "invalid_interrupt" in str(failure.details["errors"])
    assert "not a declared state field" in str(failure.details["errors"])
