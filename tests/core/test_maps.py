"""Maps in the pure core and the inline runner: one task per item, item-order commits,
empty lists, typed limits, retries per item, interrupts from items."""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest

from docket.core import Dispatch, advance, settle
from docket.core.moment import Moment
from docket.core.outcomes import Completed
from docket.core.plan import HostLimits
from docket.graph.builder import GraphBuilder
from docket.graph.compiler import compile_graph
from docket.graph.maps import MapSpec
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import Failure, Interrupt, NodeContext, NodeRegistry, NodeState, RetryPolicy
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.records import EventType, Run, RunStatus, event_to_json, run_problems, run_to_json
from docket.testing import SequentialIds, run_inline
from docket.values import JSONDict
from tests.core.helpers import events_of, inline, resolve

NODES = NodeRegistry()


def _calls(ctx: NodeContext) -> list[Any]:
    calls = ctx.application.get("calls")
    return calls if isinstance(calls, list) else []


@NODES.node("map.plan")
def plan_node(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"questions": [f"q{i}" for i in range(int(str(state["count"])))]}


@NODES.node("map.research")
def research(state: NodeState, ctx: NodeContext) -> JSONDict | Failure | Interrupt:
    _calls(ctx).append((ctx.item_index, ctx.attempt))
    fail = ctx.application.get("fail", {})
    assert isinstance(fail, dict)
    if fail.get(ctx.item_index, 0) >= ctx.attempt:
        return Failure("flaky source", retryable=ctx.application.get("retryable", True) is True)
    if ctx.item_index == ctx.application.get("ask") and "hint" not in state:
        return Interrupt("hint", id=f"hint-{ctx.item_index}", schema=S.string())
    hint = state.get("hint", "")
    return {"answers": f"{ctx.item_index}:{state['question']}:{ctx.item}{hint}"}


@NODES.node("map.side")
def side(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"side": "done"}


@NODES.node("map.draft")
def draft(state: NodeState, ctx: NodeContext) -> JSONDict:
    answers = state["answers"]
    assert isinstance(answers, list)
    return {"draft": " | ".join(str(a) for a in answers)}


def map_graph(
    *, max_items: int | None = None, max_parallel: int | None = None, retries: int = 1
) -> Graph:
    """plan -> research (a map over the questions) -> draft, and a side node that the
    draft waits for too (a barrier), so an empty map must still let the barrier fire."""
    return (
        GraphBuilder("map-demo")
        .input("count", S.integer(min=0), required=True)
        .field("questions", S.list(S.string()))
        .field("answers", S.list(S.string()), reducer=R.append())
        .field("hint", S.string())
        .field("side", S.string())
        .field("draft", S.string())
        .node("plan", "map.plan")
        .node(
            "research",
            "map.research",
            map=MapSpec(
                over="questions", item="question", max_items=max_items, max_parallel=max_parallel
            ),
            retry=RetryPolicy(max_attempts=retries),
        )
        .node("side", "map.side")
        .node("draft", "map.draft")
        .edge("begin", START, "plan")
        .edge("fan", "plan", "research")
        .edge("aside", "plan", "side")
        .fan_in("join", ["research", "side"], "draft")
        .edge("end", "draft", FINISH)
        .output("draft")
        .build()
    )


def test_each_item_is_its_own_task_and_writes_fold_in_item_order() -> None:
    calls: list[Any] = []
    result = inline(map_graph(), {"count": 3}, nodes=NODES, context={"calls": calls})
    assert result.run.status is RunStatus.DONE
    assert result.run.output == {"draft": "0:q0:q0 | 1:q1:q1 | 2:q2:q2"}
    assert sorted(calls) == [(0, 1), (1, 1), (2, 1)]
    done = [e for e in events_of(result, EventType.NODE_COMPLETED) if e.node_id == "research"]
    run_id = result.run.id
    assert [(e.task_id, e.payload) for e in done] == [
        (f"{run_id}:1:research[{i}]", {"attempt": 1, "item": i}) for i in range(3)
    ]
    (updated,) = [
        e for e in events_of(result, EventType.CHANNEL_UPDATED) if e.channel_id == "state:answers"
    ]
    assert updated.payload["writers"] == ["research[0]", "research[1]", "research[2]"]


def test_item_order_holds_whatever_order_the_items_finish_in() -> None:
    compiled = compile_graph(map_graph(), NODES)
    assert compiled.runtime is not None
    rtg = compiled.runtime
    run = _planned(map_graph(), 12)  # plan committed: research has 12 items to run
    dispatch = advance(rtg, run, now=run.updated_at)
    assert isinstance(dispatch, Dispatch)
    items = [a for a in dispatch.activations if a.node_id == "research"]
    assert [a.item_index for a in items] == list(range(12))
    assert [a.idempotency_key for a in items] == [f"{run.id}:1:research[{i}]:1" for i in range(12)]
    outcomes = [
        Completed(
            task_id=a.task_id,
            node_id=a.node_id,
            attempt=1,
            update={"answers": f"a{a.item_index}"} if a.item_index is not None else {"side": "x"},
        )
        for a in dispatch.activations
    ]
    moments = []
    for seed in range(5):
        shuffled = list(outcomes)
        random.Random(seed).shuffle(shuffled)
        moment = settle(rtg, dispatch, shuffled, now=run.updated_at, ids=SequentialIds())
        assert isinstance(moment, Moment)
        moments.append(moment)
    answers = moments[0].run.channels["state:answers"].value
    assert answers == [f"a{i}" for i in range(12)]
    assert len({run_to_json(m.run) for m in moments}) == 1


def _planned(graph: Graph, count: int) -> Run:
    """The run right after ``plan`` committed (the map is activated, not yet run)."""
    for steps in range(1, 4):
        run = run_inline(graph, {"count": count}, nodes=NODES, max_steps=steps).run
        if run.step == 1:
            return run
    raise AssertionError("the plan step never committed")


def test_two_runs_of_the_same_input_give_byte_identical_documents() -> None:
    def once() -> tuple[bytes, list[bytes]]:
        result = run_inline(map_graph(), {"count": 5}, nodes=NODES, validate=True)
        return run_to_json(result.run), [event_to_json(e) for e in result.events]

    assert once() == once()


def test_an_empty_list_activates_nothing_and_the_join_still_fires() -> None:
    calls: list[Any] = []
    result = inline(map_graph(), {"count": 0}, nodes=NODES, context={"calls": calls})
    assert calls == []
    assert result.run.status is RunStatus.DONE
    assert result.run.output == {"draft": ""}
    done = [(e.node_id, e.payload) for e in events_of(result, EventType.NODE_COMPLETED)]
    assert [node for node, _ in done] == ["plan", "research", "side", "draft"]
    assert done[1][1] == {"attempt": 1, "items": 0}  # nothing ran for it


def test_an_item_is_retried_alone_with_its_own_attempts() -> None:
    calls: list[Any] = []
    context = {"calls": calls, "fail": {1: 1}}
    result = inline(map_graph(retries=2), {"count": 3}, nodes=NODES, context=context)
    assert result.run.status is RunStatus.DONE
    assert sorted(calls) == [(0, 1), (1, 1), (1, 2), (2, 1)]
    (parked,) = [c.run for c in result.checkpoints if c.run.active_tasks]
    assert list(parked.active_tasks) == [f"{parked.id}:1:research[1]"]
    assert parked.active_tasks[f"{parked.id}:1:research[1]"].idempotency_key.endswith("[1]:2")
    assert [w.task_id.rsplit(":", 1)[1] for w in parked.pending_writes] == [
        "research[0]",
        "research[2]",
        "side",
    ]
    assert result.run.output == {"draft": "0:q0:q0 | 1:q1:q1 | 2:q2:q2"}


def test_a_failed_item_fails_the_node_and_keeps_its_siblings_results() -> None:
    context = {"fail": {1: 9}, "retryable": False}
    result = inline(map_graph(), {"count": 3}, nodes=NODES, context=context)
    run = result.run
    assert run.status is RunStatus.FAILED and run.failure is not None
    assert run.failure.code == "node_failed"
    assert run.failure.details["nodes"] == ["research"]
    assert run.failure.details["items"] == {"research": [1]}
    kept = [w.task_id.rsplit(":", 1)[1] for w in run.pending_writes]
    assert kept == ["research[0]", "research[2]", "side"]
    assert run_problems(run) == []


@pytest.mark.parametrize(("max_items", "host"), [(2, None), (None, 2), (5, 2)])
def test_an_oversized_list_is_a_typed_failure_never_a_truncation(
    max_items: int | None, host: int | None
) -> None:
    graph = map_graph(max_items=max_items)
    rtg = compile_graph(graph, NODES).runtime
    assert rtg is not None
    run = _planned(graph, 3)
    limits = HostLimits() if host is None else HostLimits(max_map_items=host)
    moment = advance(rtg, run, now=run.updated_at, limits=limits)
    assert isinstance(moment, Moment)
    failure = moment.run.failure
    assert failure is not None and failure.code == "map_too_large"
    assert failure.details == {"over": "questions", "items": 3, "limit": 2}
    assert moment.run.channels == run.channels  # nothing of it committed


def test_a_list_within_the_limit_runs_every_item() -> None:
    result = inline(map_graph(max_items=3), {"count": 3}, nodes=NODES)
    assert result.run.status is RunStatus.DONE


def test_a_map_over_an_unwritten_list_fails_typed() -> None:
    graph = (
        GraphBuilder("unwritten")
        .field("questions", S.list(S.string()))
        .field("answers", S.list(S.string()), reducer=R.append())
        .node("research", "map.research", map={"over": "questions", "as": "question"})
        .edge("begin", START, "research")
        .edge("end", "research", FINISH)
        .output("answers")
        .build()
    )
    result = inline(graph, {}, nodes=NODES)
    assert result.run.failure is not None
    assert result.run.failure.code == "invalid_map_input"


def test_an_items_interrupt_pauses_the_node_and_the_answer_reruns_it() -> None:
    calls: list[Any] = []
    context = {"calls": calls, "ask": 1}
    paused = inline(map_graph(), {"count": 3}, nodes=NODES, context=context)
    assert paused.run.status is RunStatus.WAITING
    assert list(paused.run.open_interrupts) == ["hint-1"]
    assert "state:answers" not in paused.run.channels  # the paused map wrote nothing
    (asked,) = events_of(paused, EventType.INTERRUPT_REQUESTED)
    assert asked.task_id == f"{paused.run.id}:1:research[1]"
    calls.clear()
    done = resolve(map_graph(), paused, "hint-1", "!", nodes=NODES, context=context)
    assert done.run.status is RunStatus.DONE
    assert sorted(calls) == [(0, 1), (1, 1), (2, 1)]
    assert done.run.output == {"draft": "0:q0:q0! | 1:q1:q1! | 2:q2:q2!"}


def test_a_map_item_document_is_valid_and_a_duplicate_task_is_not() -> None:
    context = {"fail": {1: 9}, "retryable": False}
    run = inline(map_graph(), {"count": 3}, nodes=NODES, context=context).run
    first = run.pending_writes[0]
    twice = attrs.evolve(run, pending_writes=(first, *run.pending_writes))
    assert any("more than once" in p for p in run_problems(twice))
    odd = attrs.evolve(first, task_id=first.task_id.replace("[0]", "[00]"))
    assert any("task_id" in p for p in run_problems(attrs.evolve(run, pending_writes=(odd,))))
