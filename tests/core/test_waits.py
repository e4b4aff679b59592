"""Durable sleep, message waits and deadlines in the pure core (docket.core.waits)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from docket.clock import ManualClock
from docket.core.advance import advance
from docket.core.moment import Moment, NotDue, Park
from docket.core.plan import Dispatch
from docket.core.settle import settle
from docket.core.waits import (
    accepted_keys,
    cap_wake,
    keep_message,
    pending_messages,
    take_message,
    with_deadline,
)
from docket.graph.builder import GraphBuilder
from docket.graph.compiler import RuntimeGraph, compile_graph
from docket.graph.model import FINISH, START
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState, Receive, Sleep, Update
from docket.graph.schema import S
from docket.proposals import At, External
from docket.records import (
    TASK_SLEEPING,
    TASK_WAITING_MESSAGE,
    EventType,
    RunStatus,
    run_problems,
)
from docket.testing import run_inline

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def _graph(result: object) -> tuple[RuntimeGraph, NodeRegistry]:
    nodes = NodeRegistry()

    @nodes.node("t.wait")
    def wait(state: NodeState, ctx: NodeContext) -> Sleep | Receive:
        assert isinstance(result, Sleep | Receive)
        return result

    @nodes.node("t.after")
    def after(state: NodeState, ctx: NodeContext) -> Update:
        return Update({"done": True})

    graph = (
        GraphBuilder("waits")
        .field("note", S.string())
        .field("done", S.boolean())
        .node("wait", "t.wait")
        .node("after", "t.after")
        .edge("a", START, "wait")
        .edge("b", "wait", "after")
        .edge("c", "after", FINISH)
        .output("note")
        .output("done")
        .build()
    )
    compiled = compile_graph(graph, nodes)
    assert isinstance(compiled.runtime, RuntimeGraph), compiled
    return compiled.runtime, nodes


def test_a_week_long_sleep_parks_then_writes_its_update_without_running_the_node() -> None:
    clock = ManualClock(T0)
    result = run_inline(
        _graph(Sleep(for_=timedelta(days=7), update={"note": "slept"}))[0],
        clock=clock,
    )
    run = result.run
    assert run.status is RunStatus.DONE
    assert run.output == {"note": "slept", "done": True}
    assert clock() >= T0 + timedelta(days=7)
    types = [e.type for e in result.events]
    assert EventType.SLEEP_STARTED in types
    parked = [c for c in result.checkpoints if c.run.active_tasks]
    assert parked and all(t.status == TASK_SLEEPING for t in parked[0].run.active_tasks.values())
    assert parked[0].metadata["park_reason"] == "sleeping"


def _parked(result_value: object) -> tuple[RuntimeGraph, Moment]:
    rtg, _ = _graph(result_value)
    first = run_inline(rtg, clock=ManualClock(T0), max_steps=0).run
    step = advance(rtg, first, now=T0)
    assert isinstance(step, Dispatch)
    from docket.core.outcomes import classify_return

    (activation,) = step.activations
    outcome = classify_return(
        activation.task_id, activation.node_id, activation.attempt, result_value
    )
    moment = settle(rtg, step, [outcome], now=T0, ids=lambda kind: f"{kind}-1")
    assert isinstance(moment, Moment)
    return rtg, moment


def test_a_message_wait_parks_the_run_as_waiting_with_no_wake() -> None:
    rtg, moment = _parked(Receive("approval", into="note"))
    run = moment.run
    assert run.status is RunStatus.WAITING
    assert run_problems(run) == []
    (task,) = run.active_tasks.values()
    assert task.status == TASK_WAITING_MESSAGE and task.metadata["topic"] == "approval"
    assert run.timers == {}
    assert isinstance(moment.disposition, Park) and moment.disposition.wake == External()
    assert isinstance(advance(rtg, run, now=T0 + timedelta(days=400)), NotDue)


def test_a_message_kept_before_the_wait_is_taken_at_once_exactly_once() -> None:
    rtg, _ = _graph(Receive("approval", into="note"))
    first = run_inline(rtg, clock=ManualClock(T0), max_steps=0).run
    kept, message = keep_message(first, "approval", "yes", "key-1", T0)
    assert pending_messages(kept) == (message,)
    assert accepted_keys(kept) == {"key-1"}
    step = advance(rtg, kept, now=T0)
    assert isinstance(step, Dispatch)
    from docket.core.outcomes import Receiving

    (activation,) = step.activations
    outcome = Receiving(
        task_id=activation.task_id,
        node_id=activation.node_id,
        attempt=1,
        receive=Receive("approval", into="note"),
    )
    moment = settle(rtg, step, [outcome], now=T0, ids=lambda kind: kind)
    assert isinstance(moment, Moment)
    assert moment.run.status is RunStatus.RUNNING
    assert moment.run.channels["state:note"].value == "yes"
    assert pending_messages(moment.run) == ()
    assert accepted_keys(moment.run) == {"key-1"}  # the key outlives the message
    assert take_message(moment.run, "approval") is None
    assert moment.events[0].type is EventType.MESSAGE_CONSUMED


def test_a_message_wait_that_times_out_writes_on_timeout() -> None:
    rtg, moment = _parked(
        Receive("approval", into="note", timeout=timedelta(hours=1), on_timeout={"note": "late"})
    )
    run = moment.run
    assert run.status is RunStatus.WAITING
    assert moment.disposition == Park(At(T0 + timedelta(hours=1)), moment.disposition.reason)  # type: ignore[union-attr]
    assert isinstance(advance(rtg, run, now=T0 + timedelta(minutes=59)), NotDue)
    step = advance(rtg, run, now=T0 + timedelta(hours=1))
    assert isinstance(step, Dispatch) and not step.activations and len(step.decided) == 1
    done = settle(rtg, step, [], now=T0 + timedelta(hours=1), ids=lambda kind: kind)
    assert isinstance(done, Moment)
    assert done.run.channels["state:note"].value == "late"


def test_a_message_wait_without_on_timeout_fails_permanently() -> None:
    rtg, moment = _parked(Receive("approval", into="note", timeout=timedelta(hours=1)))
    step = advance(rtg, moment.run, now=T0 + timedelta(hours=2))
    assert isinstance(step, Dispatch)
    failed = settle(rtg, step, [], now=T0 + timedelta(hours=2), ids=lambda kind: kind)
    assert isinstance(failed, Moment) and failed.run.status is RunStatus.FAILED
    assert "message_timeout" in str(failed.run.failure)


def test_a_deadline_caps_every_park_and_fails_the_run_when_it_passes() -> None:
    rtg, _ = _graph(Receive("approval", into="note"))
    first = run_inline(rtg, clock=ManualClock(T0), max_steps=0).run
    deadline = T0 + timedelta(minutes=30)
    import attrs

    timed = attrs.evolve(first, metadata=with_deadline(first.metadata, deadline))
    assert cap_wake(timed, External()) == At(deadline)
    assert cap_wake(timed, At(T0)) == At(T0)
    step = advance(rtg, timed, now=T0)
    assert isinstance(step, Dispatch)
    from docket.core.outcomes import classify_return

    (activation,) = step.activations
    outcome = classify_return(
        activation.task_id, activation.node_id, 1, Receive("approval", into="note")
    )
    parked = settle(rtg, step, [outcome], now=T0, ids=lambda kind: kind)
    assert isinstance(parked, Moment)
    assert parked.disposition == Park(At(deadline), parked.disposition.reason)  # type: ignore[union-attr]
    over = advance(rtg, parked.run, now=deadline)
    assert isinstance(over, Moment) and over.run.status is RunStatus.FAILED
    assert over.run.failure is not None and over.run.failure.code == "deadline_exceeded"


def test_an_invalid_sleep_update_fails_the_attempt_permanently() -> None:
    result = run_inline(
        _graph(Sleep(for_=timedelta(seconds=5), update={"note": 3}))[0], clock=ManualClock(T0)
    )
    assert result.run.status is RunStatus.FAILED
    assert "invalid_state_update" in str(result.run.failure)
