"""Child runs through the runtime (memory backend, manual clock, ``drain_due``): the
parent parks, the child is started after the parent's commit, the child's end is handed
to the parent once, failures follow the node's retry policy, a map over a child node
starts one child per item, cancelling a parent cancels its children, and the hand-off
survives being lost (the parent's recheck finds the ended child)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from docket import Docket
from docket.clock import ManualClock
from docket.contract.errors import Retryable
from docket.contract.memory import MemoryBackend
from docket.errors import InvalidGraph, NotFound, Unsupported
from docket.graph.builder import GraphBuilder
from docket.graph.children import ChildSpec
from docket.graph.compiler import compile_graph
from docket.graph.maps import MapSpec
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import Failure, Interrupt, NodeContext, NodeRegistry, NodeState, RetryPolicy
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.records import PARENT_KEY, EventType, Run, RunStatus
from docket.runtime.children import Children
from docket.testing import run_inline
from docket.values import JSONDict
from tests.runtime import child_scenarios as e2e
from tests.runtime.helpers import T0, check_events, later, memory_docket

NODES = NodeRegistry()


def _app(ctx: NodeContext) -> dict[str, Any]:
    app = ctx.application
    assert isinstance(app, dict)
    return app


@NODES.node("kids.double")
def double(state: NodeState, ctx: NodeContext) -> JSONDict | Failure:
    app = _app(ctx)
    app.setdefault("calls", []).append((ctx.run_id, state["n"]))
    failing = app.get("fail", 0)
    if isinstance(failing, int) and failing > 0:
        app["fail"] = failing - 1
        return Failure("not today")
    n = state["n"]
    assert isinstance(n, int)
    return {"twice": n * 2}


@NODES.node("kids.split")
def split(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"items": list(range(int(str(state["count"]))))}


CHILD = (
    GraphBuilder("double")
    .input("n", S.integer(), required=True)
    .field("twice", S.integer())
    .node("work", "kids.double")
    .edge("a", START, "work")
    .edge("b", "work", FINISH)
    .output("twice")
    .build()
)


def parent(retries: int = 1) -> Graph:
    return (
        GraphBuilder("parent")
        .input("n", S.integer(), required=True)
        .field("result", S.integer())
        .node(
            "call",
            child=ChildSpec(graph="double", input={"n": "n"}, output={"result": "twice"}),
            retry=RetryPolicy(max_attempts=retries),
        )
        .edge("a", START, "call")
        .edge("b", "call", FINISH)
        .output("result")
        .build()
    )


MAPPED = (
    GraphBuilder("many")
    .input("count", S.integer(min=0), required=True)
    .field("items", S.list(S.integer()))
    .field("results", S.list(S.integer()), reducer=R.append())
    .node("split", "kids.split")
    .node(
        "each",
        child=ChildSpec(graph="double", input={"n": "item"}, output={"results": "twice"}),
        map=MapSpec(over="items", item="item"),
    )
    .edge("a", START, "split")
    .edge("b", "split", "each")
    .edge("c", "each", FINISH)
    .output("results")
    .build()
)


async def _settle(docket: Docket, run_id: str, rounds: int = 30) -> Run:
    for _ in range(rounds):
        await docket.drain_due()
        run = await docket.fetch_run(run_id)
        if run.status.terminal:
            return run
    raise AssertionError(f"run {run_id} never ended: {run!r}")


async def _events(docket: Docket, run_id: str) -> list[Any]:
    return list(await docket.history(run_id))


def test_a_parent_runs_a_child_and_takes_its_output() -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {"calls": []}
        docket, _, _ = memory_docket(nodes=NODES, context=app)
        async with docket:
            child_ref = await docket.save_graph(CHILD)
            ref = await docket.save_graph(parent())
            stored = await docket.fetch_graph(ref)
            assert stored.nodes["call"].child["hash"] == child_ref.graph_hash
            unpinned = compile_graph(parent(), NODES).graph_hash
            assert ref.graph_hash != unpinned  # the pin is part of the parent's hash
            await docket.start_run(ref, {"n": 21}, run_id="p")
            done = await _settle(docket, "p")
            assert done.status is RunStatus.DONE, done.failure
            assert done.output == {"result": 42}
            events = await _events(docket, "p")
            check_events(done, events)
            started = [e for e in events if e.type is EventType.CHILD_STARTED]
            assert len(started) == 1
            child_id = started[0].payload["child_run_id"]
            assert child_id == "p:0:call:1@1"
            child = await docket.fetch_run(str(child_id))
            assert child.status is RunStatus.DONE and child.output == {"twice": 42}
            link = child.metadata[PARENT_KEY]
            assert isinstance(link, dict) and link.pop("graph_hash") == ref.graph_hash
            assert link == {
                "graph_id": "parent",
                "run_id": "p",
                "task_id": "p:0:call",
                "node_id": "call",
                "attempt": 1,
            }
            assert app["calls"] == [(child_id, 21)]  # the child ran exactly once

    asyncio.run(scenario())


def test_a_failed_child_is_a_failed_attempt_and_the_retry_starts_a_new_child() -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {"fail": 1}
        docket, _, _ = memory_docket(nodes=NODES, context=app)
        async with docket:
            await docket.save_graph(CHILD)
            ref = await docket.save_graph(parent(retries=2))
            await docket.start_run(ref, {"n": 5}, run_id="p")
            done = await _settle(docket, "p")
            assert done.status is RunStatus.DONE, done.failure
            assert done.output == {"result": 10}
            events = await _events(docket, "p")
            started = [
                str(e.payload["child_run_id"]) for e in events if e.type is EventType.CHILD_STARTED
            ]
            assert len(started) == 2 and started[0] != started[1]
            first = await docket.fetch_run(started[0])
            assert first.status is RunStatus.FAILED
            failed = [e for e in events if e.type is EventType.NODE_FAILED]
            assert len(failed) == 1 and "child_failed" in str(failed[0].payload["reason"])

    asyncio.run(scenario())


def test_a_child_that_fails_for_good_fails_the_parent() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(nodes=NODES, context={"fail": 5})
        async with docket:
            await docket.save_graph(CHILD)
            ref = await docket.save_graph(parent(retries=1))
            await docket.start_run(ref, {"n": 5}, run_id="p")
            done = await _settle(docket, "p")
            assert done.status is RunStatus.FAILED and done.failure is not None
            assert done.failure.code == "node_failed"
            assert "child_failed" in str(done.failure.details["errors"])

    asyncio.run(scenario())


def test_a_map_over_a_child_node_starts_one_child_per_item_in_item_order() -> None:
    async def scenario() -> None:
        app: dict[str, Any] = {"calls": []}
        docket, _, _ = memory_docket(nodes=NODES, context=app)
        async with docket:
            await docket.save_graph(CHILD)
            ref = await docket.save_graph(MAPPED)
            await docket.start_run(ref, {"count": 5}, run_id="m")
            done = await _settle(docket, "m")
            assert done.status is RunStatus.DONE, done.failure
            assert done.output == {"results": [0, 2, 4, 6, 8]}
            events = await _events(docket, "m")
            check_events(done, events)
            started = [e.task_id for e in events if e.type is EventType.CHILD_STARTED]
            assert started == [f"m:1:each[{i}]" for i in range(5)]
            assert sorted(n for _, n in app["calls"]) == [0, 1, 2, 3, 4]

    asyncio.run(scenario())


def test_cancelling_the_parent_cancels_its_running_child() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(nodes=NODES, context={})
        async with docket:
            await docket.save_graph(GATED)
            ref = await docket.save_graph(
                GraphBuilder("waits")
                .input("n", S.integer(), required=True)
                .field("result", S.integer())
                .node(
                    "call",
                    child=ChildSpec(graph="gated", input={"n": "n"}, output={"result": "twice"}),
                )
                .edge("a", START, "call")
                .output("result")
                .build()
            )
            await docket.start_run(ref, {"n": 1}, run_id="p")
            # the parent asks for its child; the child waits for an answer
            await _settle_until(docket, "p:0:call:1@1", RunStatus.WAITING)
            await docket.cancel_run("p")
            assert (await docket.fetch_run("p:0:call:1@1")).status is RunStatus.CANCELLED

    asyncio.run(scenario())


def test_a_lost_hand_off_is_found_by_the_parents_recheck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        docket, _, clock = memory_docket(nodes=NODES, context={}, child_recheck=2.0)
        async with docket:
            await docket.save_graph(CHILD)
            ref = await docket.save_graph(parent())
            await docket.start_run(ref, {"n": 4}, run_id="p")

            # lose the hand-off: the child's end is committed but never handed to the parent
            async def no_hand_off(self: object, owner: object, child: Run) -> None:
                return None

            with monkeypatch.context() as patch:
                patch.setattr(Children, "hand_off", no_hand_off)
                await docket.drain_due()  # the parent parks, its child starts and ends
            assert (await docket.fetch_run("p:0:call:1@1")).status is RunStatus.DONE
            assert (await docket.fetch_run("p")).status is RunStatus.RUNNING
            await docket.drain_due()  # not due yet: the recheck is 2 s away
            assert (await docket.fetch_run("p")).status is RunStatus.RUNNING
            clock.set(later(clock, 2.5))
            done = await _settle(docket, "p")
            assert done.status is RunStatus.DONE and done.output == {"result": 8}

    asyncio.run(scenario())


def test_a_backend_without_the_feature_refuses_a_parent_at_save() -> None:
    class Plain(MemoryBackend):
        def capabilities(self) -> Any:
            import attrs

            caps = super().capabilities()
            return attrs.evolve(caps, features=caps.features - {"child_runs"})

    async def scenario() -> None:
        docket, _, _ = memory_docket(nodes=NODES, context={}, backend=Plain())
        async with docket:
            await docket.save_graph(CHILD)  # a graph without children is fine
            with pytest.raises(Unsupported, match="child_runs"):
                await docket.save_graph(parent())

    asyncio.run(scenario())


def test_saving_a_parent_checks_the_child_interface() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(nodes=NODES, context={})
        async with docket:
            with pytest.raises(InvalidGraph, match="not saved"):
                await docket.save_graph(parent())
            await docket.save_graph(CHILD)
            wrong = (
                GraphBuilder("wrong")
                .input("n", S.integer())
                .field("result", S.integer())
                .node(
                    "call",
                    child=ChildSpec(graph="double", input={"m": "n"}, output={"result": "nope"}),
                )
                .edge("a", START, "call")
                .output("result")
                .build()
            )
            with pytest.raises(InvalidGraph) as raised:
                await docket.save_graph(wrong)
            text = str(raised.value)
            assert "no input 'm'" in text and "required child input 'n'" in text
            assert "no output 'nope'" in text

    asyncio.run(scenario())


def test_the_inline_runner_runs_children_inline() -> None:
    app: dict[str, Any] = {"calls": []}
    result = run_inline(
        parent(), {"n": 3}, nodes=NODES, context=app, graphs={"double": CHILD}, run_id="i"
    )
    assert result.run.status is RunStatus.DONE and result.run.output == {"result": 6}
    assert app["calls"] == [("i:0:call:1@1", 3)]
    mapped = run_inline(MAPPED, {"count": 3}, nodes=NODES, context=app, graphs={"double": CHILD})
    assert mapped.run.output == {"results": [0, 2, 4]}
    # an inline run is as deterministic as a worker's: the same input, the same document
    again = run_inline(MAPPED, {"count": 3}, nodes=NODES, context=app, graphs={"double": CHILD})
    assert again.run == mapped.run


def test_the_inline_runner_fails_a_child_node_whose_graph_it_was_not_given() -> None:
    result = run_inline(parent(), {"n": 3}, nodes=NODES, context={"calls": []})
    assert result.run.status is RunStatus.FAILED and result.run.failure is not None
    assert "child_graph_unusable" in str(result.run.failure.details["errors"])


def test_children_end_to_end_on_memory_and_a_sqlite_file(tmp_path: Path) -> None:
    async def scenario(target: Any) -> None:
        async with Docket(target, **e2e.options()) as d:
            await e2e.run_scenario(d)

    asyncio.run(scenario(MemoryBackend()))
    asyncio.run(scenario(f"sqlite:///{tmp_path / 'children.db'}"))


@NODES.node("kids.gate")
def gate(state: NodeState, ctx: NodeContext) -> JSONDict | Failure | Interrupt:
    n = state["n"]
    assert isinstance(n, int)
    if n == 0:
        return Failure("item 0 fails for good", retryable=False)
    if state.get("answer") is None:
        return Interrupt("answer", id=f"ask-{n}")
    return {"twice": n * 2}


GATED = (
    GraphBuilder("gated")
    .input("n", S.integer(), required=True)
    .field("twice", S.integer())
    .field("answer", S.string())
    .node("work", "kids.gate")
    .edge("a", START, "work")
    .edge("b", "work", FINISH)
    .output("twice")
    .build()
)


def test_a_parent_that_fails_cancels_the_children_it_still_waits_for() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(nodes=NODES, context={"calls": []})
        async with docket:
            await docket.save_graph(GATED)
            gated_many = (
                GraphBuilder("gated-many")
                .input("count", S.integer(min=0), required=True)
                .field("items", S.list(S.integer()))
                .field("results", S.list(S.integer()), reducer=R.append())
                .node("split", "kids.split")
                .node(
                    "each",
                    child=ChildSpec(
                        graph="gated", input={"n": "item"}, output={"results": "twice"}
                    ),
                    map=MapSpec(over="items", item="item"),
                )
                .edge("a", START, "split")
                .edge("b", "split", "each")
                .output("results")
                .build()
            )
            ref = await docket.save_graph(gated_many)
            await docket.start_run(ref, {"count": 2}, run_id="g")
            failed = await _settle(docket, "g")
            assert failed.status is RunStatus.FAILED and failed.failure is not None
            assert "child_failed" in str(failed.failure.details["errors"])
            # item 1's child was waiting on its interrupt: nobody waits for it any more
            waiting = await docket.fetch_run("g:1:each[1]:1@2")
            assert waiting.status is RunStatus.CANCELLED
            assert (await docket.fetch_run("g:1:each[0]:1@2")).status is RunStatus.FAILED

    asyncio.run(scenario())


def test_cancelling_a_child_fails_its_parents_attempt_for_good() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(nodes=NODES, context={"calls": []})
        async with docket:
            await docket.save_graph(GATED)
            ref = await docket.save_graph(
                GraphBuilder("one-gated")
                .input("n", S.integer(), required=True)
                .field("result", S.integer())
                .node(
                    "call",
                    child=ChildSpec(graph="gated", input={"n": "n"}, output={"result": "twice"}),
                    retry=RetryPolicy(max_attempts=3),
                )
                .edge("a", START, "call")
                .output("result")
                .build()
            )
            await docket.start_run(ref, {"n": 5}, run_id="c")
            await _settle_until(docket, "c:0:call:1@1", RunStatus.WAITING)
            # the child's interrupt is visible: it waits on the child, not on the parent
            assert (await docket.fetch_run("c")).status is RunStatus.RUNNING
            await docket.cancel_run("c:0:call:1@1")
            parent_run = await docket.fetch_run("c")
            assert parent_run.status is RunStatus.FAILED and parent_run.failure is not None
            assert "child_cancelled" in str(parent_run.failure.details["errors"])

    asyncio.run(scenario())


async def _settle_until(docket: Docket, run_id: str, status: RunStatus) -> Run:
    for _ in range(30):
        await docket.drain_due()
        try:
            run = await docket.fetch_run(run_id)
        except Exception:
            continue
        if run.status is status:
            return run
    raise AssertionError(f"run {run_id} never reached {status}")


def test_a_worker_drains_the_child_it_started_in_the_parents_slot() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(nodes=NODES, context={"calls": []})
        async with docket:
            await docket.save_graph(CHILD)
            ref = await docket.save_graph(parent())
            await docket.start_run(ref, {"n": 2}, run_id="p")
            summary = await docket.drain_due(max_runs=1)  # one claim: the parent's
            assert [o.run_id for o in summary.outcomes] == ["p"]
            # ... yet the child ran in the same drain, and its end reached the parent
            assert (await docket.fetch_run("p:0:call:1@1")).status is RunStatus.DONE
            parent_run = await docket.fetch_run("p")
            assert not parent_run.active_tasks and parent_run.pending_writes == ()
            assert parent_run.step == 1  # the hand-off committed the barrier
            done = await _settle(docket, "p")
            assert done.output == {"result": 4}

    asyncio.run(scenario())


def test_a_hand_off_waits_for_a_worker_holding_the_parent(monkeypatch: Any) -> None:
    from datetime import timedelta

    from docket.contract import ClaimBatch, ClaimPolicy, ClaimRefreshed
    from docket.records import Tenantless
    from docket.runtime import children as children_module

    monkeypatch.setattr(children_module, "_HOLDER_PATIENCE", 120.0)  # never run out here

    async def scenario() -> None:
        docket, backend, clock = memory_docket(nodes=NODES, context={}, child_recheck=2.0)
        async with docket:
            await docket.save_graph(CHILD)
            ref = await docket.save_graph(parent())
            await docket.start_run(ref, {"n": 3}, run_id="p")
            helper = docket._drainer._children

            async def no_hand_off(self: object, owner: object, child: Run) -> None:
                return None

            with monkeypatch.context() as patch:
                patch.setattr(Children, "hand_off", no_hand_off)
                await docket.drain_due()  # the child ends; its hand-off is held back
            child = await docket.fetch_run("p:0:call:1@1")
            assert child.status is RunStatus.DONE
            clock.set(later(clock, 2.5))  # the parent's recheck is due: a worker claims it
            batch = await backend.runs.claim_due(
                ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=30), max_claim_attempts=5)
            )
            assert isinstance(batch, ClaimBatch)
            (lease,) = batch.leases
            owner = Tenantless()
            polls = 0
            inspect = backend.runs.inspect_run

            async def counted(*args: Any) -> Any:
                nonlocal polls
                polls += 1
                return await inspect(*args)

            monkeypatch.setattr(backend.runs, "inspect_run", counted)
            handing = asyncio.ensure_future(helper.hand_off(owner, child))
            while polls < 2 and not handing.done():  # looked at the parent, found it held
                await asyncio.sleep(0.01)
            # the holder still has its claim: the hand-off did not revoke it
            refreshed = await backend.runs.refresh_claim(owner, "p", lease.claim_token)
            assert isinstance(refreshed, ClaimRefreshed)
            assert not handing.done()
            await backend.runs.release_claim(owner, "p", lease.claim_token)
            await asyncio.wait_for(handing, timeout=60)
            handed = await docket.fetch_run("p")
            assert handed.step == 1 and not handed.active_tasks  # the barrier committed

    asyncio.run(scenario())


class _ChildStartsDown(MemoryBackend):
    """A store that is away for child starts (every try answers ``Retryable``) while
    ``down`` is set: what a PostgreSQL or Redis restart looks like to the committer."""

    down = False

    async def initialize(self, owner: Any, proposal: Any, events: Any) -> Any:
        if self.down and "@" in proposal.run.id:
            return Retryable("the store restarts")
        return await super().initialize(owner, proposal, events)

    async def initialize_claimed(
        self, owner: Any, proposal: Any, events: Any, claim_token: Any
    ) -> Any:
        if self.down and "@" in proposal.run.id:
            return Retryable("the store restarts")
        return await super().initialize_claimed(owner, proposal, events, claim_token)


def test_a_store_outage_while_starting_a_child_leaves_it_to_the_recheck() -> None:
    """Found by the Redis chaos campaign: a child whose start outlived the commit policy's
    tries failed its parent's attempt for good (``child_not_started``), so the parent
    failed on a one-second server restart. The child is now started by the recheck."""

    async def scenario() -> None:
        clock = ManualClock(T0)
        backend = _ChildStartsDown(clock=clock)
        docket, _, _ = memory_docket(
            clock=clock,
            backend=backend,
            nodes=NODES,
            context={},
            child_recheck=2.0,
            commit_attempts=2,
            commit_backoff=0.001,
        )
        async with docket:
            await docket.save_graph(CHILD)
            ref = await docket.save_graph(parent())
            await docket.start_run(ref, {"n": 4}, run_id="p")
            backend.down = True
            await docket.drain_due()  # the parent asks for its child; the start fails
            parked = await docket.fetch_run("p")
            assert parked.status is RunStatus.RUNNING, parked.failure
            assert [t.status for t in parked.active_tasks.values()] == ["child_running"]
            with pytest.raises(NotFound):
                await docket.fetch_run("p:0:call:1@1")
            clock.set(later(clock, 2.5))
            await docket.drain_due()  # the recheck: still away, the parent keeps waiting
            assert (await docket.fetch_run("p")).status is RunStatus.RUNNING
            backend.down = False
            clock.set(later(clock, 5.0))
            done = await _settle(docket, "p")
            assert done.status is RunStatus.DONE, done.failure
            assert done.output == {"result": 8}
            events = await _events(docket, "p")
            started = [e for e in events if e.type is EventType.CHILD_STARTED]
            assert len(started) == 1  # asked once; started by the recheck

    asyncio.run(scenario())
