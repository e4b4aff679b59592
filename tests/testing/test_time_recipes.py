"""The recipes of docs/testing.md, run: a week-long ``Sleep``, a deadline passing while a
run waits for a person, a message sent while a node waits (with and without a timeout),
a schedule's ticks over three days, and a crash replayed by the inline runner.

Each runs in the time-skipping environment on the memory backend, which declares the
durable-time features."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from docket import Receive, Sleep
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import Interrupt, NodeContext, NodeRegistry, NodeState, Update
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.records import TASK_SLEEPING, TASK_WAITING_MESSAGE, Run, RunStatus
from docket.testing import DEFAULT_START, TimeSkippingEnv, resume_inline, run_inline

NODES = NodeRegistry()
DAY = timedelta(days=1)


@NODES.node("recipe.nap")
def nap(state: NodeState, ctx: NodeContext) -> Sleep:
    return Sleep(for_=timedelta(days=7), update={"log": ["rested"]})


@NODES.node("recipe.listen")
def listen(state: NodeState, ctx: NodeContext) -> Receive:
    days = ctx.config.get("timeout_days")
    if days is None:
        return Receive("answer", into="answer", update={"log": ["heard"]})
    return Receive(
        "answer",
        into="answer",
        update={"log": ["heard"]},
        timeout=timedelta(days=int(str(days))),
        on_timeout={"log": ["no reply"]},
    )


@NODES.node("recipe.ask")
def ask(state: NodeState, ctx: NodeContext) -> Update | Interrupt:
    if "answer" not in state:
        return Interrupt("answer")
    return Update({"log": ["answered"]})


@NODES.node("recipe.report")
def report(state: NodeState, ctx: NodeContext) -> Update:
    return Update({"log": [f"report at {ctx.run_id}"]})


def one_node(
    kind: str, *, graph_id: str | None = None, config: dict[str, Any] | None = None
) -> Graph:
    return (
        GraphBuilder(graph_id or kind.split(".")[1])
        .field("answer", S.string())
        .field("log", S.list(S.string()), reducer=R.append())
        .node("work", kind, config=config or {})
        .edge("a", START, "work")
        .edge("b", "work", FINISH)
        .output("log")
        .build()
    )


def statuses(run: Run) -> set[str]:
    return {str(task.status) for task in run.active_tasks.values()}


def test_a_week_long_sleep_holds_no_worker_and_ends_a_week_later() -> None:
    async def scenario() -> None:
        async with TimeSkippingEnv(nodes=NODES) as env:
            ref = await env.docket.save_graph(one_node("recipe.nap"))
            run = await env.docket.start_run(ref)
            asleep = await env.run_until(run.id, lambda r: TASK_SLEEPING in statuses(r))
            info = await env.docket.inspect_run(run.id)
            assert asleep.status is RunStatus.RUNNING and info.claimed_at is None
            assert info.wake_at == DEFAULT_START + 7 * DAY
            done = await env.wait(run.id)
            assert done.status is RunStatus.DONE and done.output == {"log": ["rested"]}
            assert env.now() == DEFAULT_START + 7 * DAY

    asyncio.run(scenario())


def test_a_deadline_passes_while_a_run_waits_for_a_person() -> None:
    async def scenario() -> None:
        async with TimeSkippingEnv(nodes=NODES) as env:
            ref = await env.docket.save_graph(one_node("recipe.ask"))
            run = await env.docket.start_run(ref, timeout=timedelta(hours=48))
            waiting = await env.run_until(run.id, status="waiting")
            assert waiting.open_interrupts
            info = await env.docket.inspect_run(run.id)
            assert info.wake_at == DEFAULT_START + timedelta(hours=48)
            failed = await env.wait(run.id)
            assert failed.status is RunStatus.FAILED and failed.failure is not None
            assert failed.failure.code == "deadline_exceeded"
            assert env.now() == DEFAULT_START + timedelta(hours=48)

    asyncio.run(scenario())


def test_a_message_sent_while_a_node_waits_with_no_timeout() -> None:
    async def scenario() -> None:
        async with TimeSkippingEnv(nodes=NODES) as env:
            ref = await env.docket.save_graph(one_node("recipe.listen"))
            run = await env.docket.start_run(ref)
            waiting = await env.wait(run.id)  # waiting with no wake: at once
            assert waiting.status is RunStatus.WAITING
            assert TASK_WAITING_MESSAGE in statuses(waiting)
            await env.advance(3 * DAY)
            sent = await env.docket.send(run.id, "answer", "yes")
            assert sent.delivered and not sent.duplicate
            done = await env.wait(run.id)
            assert done.status is RunStatus.DONE and done.output == {"log": ["heard"]}
            assert done.updated_at == DEFAULT_START + 3 * DAY

    asyncio.run(scenario())


def test_a_message_sent_before_the_timeout_and_one_never_sent() -> None:
    async def scenario() -> None:
        async with TimeSkippingEnv(nodes=NODES) as env:
            graph = one_node("recipe.listen", config={"timeout_days": 2})
            ref = await env.docket.save_graph(graph)
            answered = await env.docket.start_run(ref)
            await env.run_until(answered.id, status="waiting")
            info = await env.docket.inspect_run(answered.id)
            assert info.wake_at == DEFAULT_START + 2 * DAY
            await env.advance(DAY)
            sent = await env.docket.send(answered.id, "answer", "yes")
            assert sent.delivered
            done = await env.wait(answered.id)
            assert done.output == {"log": ["heard"]} and env.now() == DEFAULT_START + DAY

            ignored = await env.docket.start_run(ref)
            timed_out = await env.wait(ignored.id)
            assert timed_out.status is RunStatus.DONE
            assert timed_out.output == {"log": ["no reply"]}
            assert env.now() == DEFAULT_START + 3 * DAY  # two days after its wait began

    asyncio.run(scenario())


def test_a_schedules_ticks_over_three_days() -> None:
    async def scenario() -> None:
        async with TimeSkippingEnv(nodes=NODES) as env:
            ref = await env.docket.save_graph(one_node("recipe.report", graph_id="nightly"))
            await env.docket.create_schedule("nightly", ref, cron="0 2 * * *")
            assert await env.next_wake() == DEFAULT_START + timedelta(hours=2)
            await env.advance(3 * DAY)
            page = await env.docket.list_runs(graph_id="nightly")
            assert sorted(r.id for r in page.runs) == [
                "nightly@20250101T020000Z",
                "nightly@20250102T020000Z",
                "nightly@20250103T020000Z",
            ]
            assert {r.status for r in page.runs} == {RunStatus.DONE}
            for summary in page.runs:  # each ran at its own tick, not at the end
                run = await env.docket.fetch_run(summary.id)
                assert run.started_at.hour == 2 and run.updated_at == run.started_at
            assert env.now() == DEFAULT_START + 3 * DAY
            assert await env.next_wake() == DEFAULT_START + 3 * DAY + timedelta(hours=2)

    asyncio.run(scenario())


def test_a_crash_between_two_commits_replays_from_the_last_checkpoint() -> None:
    graph = one_node("recipe.report", graph_id="crashy")
    first = run_inline(graph, {}, nodes=NODES, max_steps=0)  # then the process dies
    assert first.run.status is RunStatus.RUNNING
    again = resume_inline(graph, first.run, nodes=NODES)
    assert again.run.status is RunStatus.DONE
    assert again.checkpoint_types[0] == "run_initialized"  # the resumed initialization
    assert again.run.output == {"log": ["report at run_0000000000000001"]}
