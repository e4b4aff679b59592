"""The time-skipping environment (``docket.testing_time``): the real Docket, workers and
backend under a manual clock that jumps to the next wake whenever the workers are idle.

Days of backoff, a child's recheck timer and an interrupt answered days later take
milliseconds of real time; ``drive`` stops after exactly the commits asked for; a wait
never passes its ``until``; the same scenario gives the same history twice."""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import timedelta
from typing import Any

import pytest

from docket.contract.proposals import ClaimBatch, ClaimPolicy
from docket.errors import InvalidOptions
from docket.graph.builder import GraphBuilder
from docket.graph.children import ChildSpec
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import (
    Failure,
    Interrupt,
    NodeContext,
    NodeRegistry,
    NodeState,
    RetryPolicy,
)
from docket.graph.schema import S
from docket.records import EventType, Run, RunStatus, event_to_json
from docket.runtime.children import Children
from docket.testing import (
    DEFAULT_START,
    NotReached,
    NotSettled,
    Stalled,
    TimeSkippingEnv,
)
from docket.values import JSONDict

NODES = NodeRegistry()
DAY = timedelta(days=1)
BACKENDS = ["memory", "sqlite"]


def _app(ctx: NodeContext) -> dict[str, Any]:
    # the Docket copies its context: the test's own dict travels inside it
    app = ctx.application["app"]
    assert isinstance(app, dict)
    return app


@NODES.node("skip.flaky")
def flaky(state: NodeState, ctx: NodeContext) -> JSONDict | Failure:
    """Fails ``app["fail"]`` times, then answers."""
    app = _app(ctx)
    app.setdefault("calls", []).append(ctx.attempt)
    if app.get("fail", 0) > 0:
        app["fail"] -= 1
        return Failure("not yet")
    return {"out": f"ok after {ctx.attempt}"}


@NODES.node("skip.count")
def count(state: NodeState, ctx: NodeContext) -> JSONDict:
    app = _app(ctx)
    app.setdefault("ran", []).append(ctx.node_id)
    return {"n": int(str(state.get("n", 0))) + 1}


@NODES.node("skip.ask")
def ask(state: NodeState, ctx: NodeContext) -> JSONDict | Interrupt:
    if "decision" not in state:
        return Interrupt("decision", schema=S.enum(["yes", "no"]))
    return {"out": f"answered {state['decision']}"}


@NODES.node("skip.slow")
async def slow(state: NodeState, ctx: NodeContext) -> JSONDict:
    await asyncio.sleep(5)  # real time: what the environment cannot skip
    return {"out": "late"}


def retrying(backoff: timedelta, attempts: int = 3) -> Graph:
    return (
        GraphBuilder("retrying")
        .field("out", S.string())
        .node(
            "work",
            "skip.flaky",
            retry=RetryPolicy(
                max_attempts=attempts, backoff_ms=int(backoff.total_seconds() * 1000)
            ),
        )
        .edge("a", START, "work")
        .edge("b", "work", FINISH)
        .output("out")
        .build()
    )


def chain(length: int) -> Graph:
    builder = GraphBuilder("chain").field("n", S.integer())
    names = [f"n{i}" for i in range(length)]
    for name in names:
        builder = builder.node(name, "skip.count")
    hops = [START, *names, FINISH]
    for i, (src, dst) in enumerate(itertools.pairwise(hops)):
        builder = builder.edge(f"e{i}", src, dst)
    return builder.output("n").build()


ASKING = (
    GraphBuilder("asking")
    .field("decision", S.enum(["yes", "no"]))
    .field("out", S.string())
    .node("ask", "skip.ask")
    .edge("a", START, "ask")
    .edge("b", "ask", FINISH)
    .output("out")
    .build()
)

CHILD = (
    GraphBuilder("child")
    .field("out", S.string())
    .node("work", "skip.flaky")
    .edge("a", START, "work")
    .edge("b", "work", FINISH)
    .output("out")
    .build()
)

PARENT = (
    GraphBuilder("parent")
    .field("result", S.string())
    .node("call", child=ChildSpec(graph="child", input={}, output={"result": "out"}))
    .edge("a", START, "call")
    .edge("b", "call", FINISH)
    .output("result")
    .build()
)


def run(scenario: Any) -> None:
    asyncio.run(scenario())


# -- retries, children, interrupts -------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_one_day_retry_backoff_finishes_in_milliseconds(backend: str) -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {"fail": 2}
        async with TimeSkippingEnv(nodes=NODES, backend=backend, context={"app": app}) as env:
            ref = await env.docket.save_graph(retrying(DAY))
            started = time.perf_counter()
            first = await env.docket.start_run(ref, {})
            done = await env.wait(first.id)
            real = time.perf_counter() - started
            assert done.status is RunStatus.DONE, done.failure
            assert done.output == {"out": "ok after 3"}
            assert app["calls"] == [1, 2, 3]
            assert env.now() == DEFAULT_START + 2 * DAY  # two backoffs, nothing more
            assert done.updated_at == env.now()
            assert real < 10, real  # two days of backoff; generous for a loaded machine
            # idle workers waited for the environment's kicks, not on a poll interval
            assert env.docket.settings.poll_interval >= 365 * 24 * 3600
            assert sum(w.stats.polls for w in env.workers) < 20

    run(scenario)


def test_a_seven_day_backoff_costs_milliseconds_of_real_time() -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {"fail": 1}
        async with TimeSkippingEnv(nodes=NODES, context={"app": app}) as env:
            ref = await env.docket.save_graph(retrying(7 * DAY))
            started = time.perf_counter()
            first = await env.docket.start_run(ref, {})
            done = await env.wait(first.id)
            real = time.perf_counter() - started
            assert done.status is RunStatus.DONE
            assert env.now() == DEFAULT_START + 7 * DAY
            print(f"a 7-day retry backoff took {real * 1000:.1f} ms of real time")

    run(scenario)


def test_a_childs_recheck_timer_finds_a_lost_hand_off(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_hand_off(self: object, owner: object, child: Run) -> None:
        return None

    monkeypatch.setattr(Children, "hand_off", no_hand_off)

    async def scenario() -> None:
        app: dict[str, Any] = {}
        async with TimeSkippingEnv(nodes=NODES, context={"app": app}, child_recheck=300.0) as env:
            await env.docket.save_graph(CHILD)
            ref = await env.docket.save_graph(PARENT)
            parent = await env.docket.start_run(ref, {}, run_id="p")
            done = await env.wait(parent.id)
            assert done.status is RunStatus.DONE and done.output == {"result": "ok after 1"}
            # only the parent's recheck, 300 s after it parked, could have found the end
            assert env.now() == DEFAULT_START + timedelta(seconds=300)
            child = await env.docket.fetch_run("p:0:call:1@1")
            assert child.status is RunStatus.DONE and child.updated_at == DEFAULT_START

    run(scenario)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_interrupt_is_answered_days_later(backend: str) -> None:
    async def scenario() -> None:
        async with TimeSkippingEnv(nodes=NODES, backend=backend) as env:
            ref = await env.docket.save_graph(ASKING)
            first = await env.docket.start_run(ref, {})
            waiting = await env.wait(first.id)  # waiting, no wake: wait returns at once
            assert waiting.status is RunStatus.WAITING
            assert env.now() == DEFAULT_START
            assert await env.advance(3 * DAY) == DEFAULT_START + 3 * DAY
            (interrupt_id,) = waiting.open_interrupts
            await env.docket.resolve_interrupt(first.id, interrupt_id, "yes")
            done = await env.wait(first.id)
            assert done.status is RunStatus.DONE and done.output == {"out": "answered yes"}
            assert done.updated_at == DEFAULT_START + 3 * DAY

    run(scenario)


def test_several_workers_drain_many_runs_through_a_week_of_backoffs() -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {"fail": 0}
        async with TimeSkippingEnv(
            nodes=NODES, context={"app": app}, workers=2, concurrency=3
        ) as env:
            ref = await env.docket.save_graph(retrying(DAY, attempts=8))
            app["fail"] = 7  # shared by every run: seven failures among them, then none
            ids = [(await env.docket.start_run(ref, {})).id for _ in range(6)]
            for run_id in ids:
                done = await env.wait(run_id)
                assert done.status is RunStatus.DONE, done.failure
            assert len(app["calls"]) == 6 + 7
            assert env.now() <= DEFAULT_START + 7 * DAY
            assert all(w.in_flight == 0 for w in env.workers)

    run(scenario)


def test_a_run_held_by_a_worker_that_died_is_taken_over_after_the_claim_ttl() -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {}
        async with TimeSkippingEnv(nodes=NODES, context={"app": app}, claim_ttl=30.0) as env:
            ref = await env.docket.save_graph(chain(2))
            first = await env.docket.start_run(ref, {})
            # a worker of another process claims the run, then dies holding it
            policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=30), max_claim_attempts=5)
            batch = await env.backend.runs.claim_due(policy)
            assert isinstance(batch, ClaimBatch) and len(batch.leases) == 1
            expiry = DEFAULT_START + timedelta(seconds=30, milliseconds=1)  # strictly after
            assert await env.next_wake() == expiry
            done = await env.wait(first.id)
            assert done.status is RunStatus.DONE and app["ran"] == ["n0", "n1"]
            assert env.now() == expiry

    run(scenario)


# -- drive, advance, until ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_drive_stops_after_exactly_the_commits_asked_for(backend: str) -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {}
        async with TimeSkippingEnv(nodes=NODES, backend=backend, context={"app": app}) as env:
            ref = await env.docket.save_graph(chain(5))
            first = await env.docket.start_run(ref, {})
            assert env.commits(first.id) == 1  # the start
            one = await env.drive(first.id, commits=1)
            assert one.checkpoint_seq == first.checkpoint_seq + 1
            assert env.commits(first.id) == 2
            assert one.status is RunStatus.RUNNING
            ran = list(app["ran"])
            three = await env.drive(first.id, commits=2)
            assert three.checkpoint_seq == first.checkpoint_seq + 3
            assert app["ran"][: len(ran)] == ran and len(app["ran"]) == len(ran) + 2
            stored = await env.docket.fetch_run(first.id)
            assert stored.checkpoint_seq == three.checkpoint_seq  # nothing ran behind it
            rest = await env.drive(first.id, commits=100)  # ends first
            assert rest.status is RunStatus.DONE and rest.output == {"n": 5}
            assert app["ran"] == ["n0", "n1", "n2", "n3", "n4"]
            again = await env.drive(first.id, commits=1)  # a finished run stays as it is
            assert again.checkpoint_seq == rest.checkpoint_seq

    run(scenario)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_workers_have_polled_once_before_the_test_gets_the_env(backend: str) -> None:
    """A worker's first poll comes when its task first runs. Were that after the test's
    first start_run, the worker would claim the run behind drive()'s back; drive() would
    take the claim for an orphan, skip to its expiry and run the node twice."""

    async def scenario() -> None:
        async with TimeSkippingEnv(nodes=NODES, backend=backend, context={"app": {}}) as env:
            traffic = env._traffic  # the environment's own view of its workers
            assert traffic.polls == 0 and traffic.quiet == traffic.generation
            ref = await env.docket.save_graph(chain(2))
            first = await env.docket.start_run(ref, {})
            await asyncio.sleep(0)  # a worker that had not started would poll here
            info = await env.docket.inspect_run(first.id)
            assert info.claimed_at is None and env.commits(first.id) == 1

    run(scenario)


def test_drive_skips_time_to_the_next_retry() -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {"fail": 1}
        async with TimeSkippingEnv(nodes=NODES, context={"app": app}) as env:
            ref = await env.docket.save_graph(retrying(DAY))
            first = await env.docket.start_run(ref, {})
            parked = await env.drive(first.id, commits=1)  # the failed attempt parks
            assert parked.status is RunStatus.RUNNING and env.now() == DEFAULT_START
            retried = await env.drive(first.id, commits=1)  # a day later, the retry
            assert env.now() == DEFAULT_START + DAY
            assert retried.checkpoint_seq == parked.checkpoint_seq + 1
            assert app["calls"] == [1, 2]

    run(scenario)


def test_advance_stops_at_each_wake_on_the_way_and_at_its_target() -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {"fail": 5}
        async with TimeSkippingEnv(nodes=NODES, context={"app": app}) as env:
            ref = await env.docket.save_graph(retrying(DAY, attempts=6))
            first = await env.docket.start_run(ref, {})
            await env.advance(timedelta(days=2, hours=12))
            # attempts at day 0, 1 and 2; the next one is due at day 3
            assert app["calls"] == [1, 2, 3]
            assert env.now() == DEFAULT_START + timedelta(days=2, hours=12)
            info = await env.docket.inspect_run(first.id)
            assert info.wake_at == DEFAULT_START + 3 * DAY
            retried = [
                e for e in await env.docket.history(first.id) if e.type is EventType.NODE_FAILED
            ]
            assert [e.timestamp for e in retried] == [DEFAULT_START + i * DAY for i in range(3)]

    run(scenario)


def test_a_wait_never_passes_its_until() -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {"fail": 2}
        async with TimeSkippingEnv(nodes=NODES, context={"app": app}) as env:
            ref = await env.docket.save_graph(retrying(DAY))
            first = await env.docket.start_run(ref, {})
            until = DEFAULT_START + timedelta(hours=36)
            with pytest.raises(NotReached) as caught:
                await env.wait(first.id, until=until)
            assert env.now() == until and app["calls"] == [1, 2]
            assert caught.value.run is not None and caught.value.run.status is RunStatus.RUNNING
            done = await env.run_until(first.id, status="done")
            assert done.status is RunStatus.DONE and env.now() == DEFAULT_START + 2 * DAY

    run(scenario)


def test_a_target_nothing_can_reach_is_stalled_not_a_hang() -> None:
    async def scenario() -> None:
        async with TimeSkippingEnv(nodes=NODES) as env:
            ref = await env.docket.save_graph(ASKING)
            first = await env.docket.start_run(ref, {})
            with pytest.raises(Stalled) as caught:
                await env.run_until(first.id, status="done")
            assert caught.value.run is not None
            assert caught.value.run.status is RunStatus.WAITING
            with pytest.raises(InvalidOptions):
                await env.run_until(first.id)
            with pytest.raises(InvalidOptions):
                await env.drive(first.id, commits=0)

    run(scenario)


def test_a_node_that_really_sleeps_is_reported_not_waited_for() -> None:
    graph = (
        GraphBuilder("slow")
        .field("out", S.string())
        .node("work", "skip.slow")
        .edge("a", START, "work")
        .edge("b", "work", FINISH)
        .build()
    )

    async def scenario() -> None:
        async with TimeSkippingEnv(nodes=NODES, real_timeout=0.3, shutdown_timeout=0.1) as env:
            ref = await env.docket.save_graph(graph)
            first = await env.docket.start_run(ref, {})
            with pytest.raises(NotSettled, match="did not go idle"):
                await env.wait(first.id)

    run(scenario)


def test_the_same_scenario_gives_the_same_history_twice() -> None:
    async def once() -> list[object]:
        app: dict[str, Any] = {"fail": 2}
        async with TimeSkippingEnv(nodes=NODES, context={"app": app}) as env:
            ref = await env.docket.save_graph(retrying(DAY))
            first = await env.docket.start_run(ref, {})
            await env.wait(first.id)
            return [event_to_json(e) for e in await env.docket.history(first.id)]

    first, second = asyncio.run(once()), asyncio.run(once())
    assert first == second and len(first) > 5
