"""Draining one lease (runtime-spec §12, cases 55-60), on the reference backend with a
manual clock: the backend's clock is the only clock, so moving it moves everything."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from docket import Docket, Settings
from docket.contract.errors import POISON_MAX_ABANDONS, POISON_MAX_ATTEMPTS
from docket.contract.proposals import ClaimBatch, ClaimPolicy, Lease
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.schema import S
from docket.records import TENANTLESS, EventType, RunStatus
from docket.runtime.drain import DrainOutcome
from tests.core import fixtures as fx
from tests.runtime.helpers import check_events, later, memory_docket

DAY = timedelta(days=1)


async def _claim(docket: Docket, *, now_offset: float = 0.0) -> Lease:
    """Claim the one due run by hand, with the Docket's TTL (as a worker that then dies)."""
    backend = docket.backend
    now = await backend.now() + timedelta(seconds=now_offset)
    ttl = timedelta(seconds=docket.settings.claim_ttl)
    policy = ClaimPolicy(limit=1, orphan_ttl=ttl, max_claim_attempts=5, now=now)
    batch = await backend.runs.claim_due(policy)
    assert isinstance(batch, ClaimBatch) and len(batch.leases) == 1, batch
    return batch.leases[0]


def test_a_drain_commits_every_moment_and_a_retry_park_exits_without_sleeping() -> None:
    async def scenario() -> None:
        docket, _backend, clock = memory_docket()
        async with docket:
            ref = await docket.save_graph(fx.minimal_linear())
            run = await docket.start_run(ref, {"value": "hi"}, run_id="linear")
            summary = await docket.drain_due()
            assert [o.kind for o in summary.outcomes] == ["parked"]
            assert summary.outcomes[0].commits == 2  # step, completion
            assert summary.outcomes[0].detail == "terminal"
            done = await docket.fetch_run(run.id)
            assert done.status is RunStatus.DONE and done.output == {"result": "hi"}
            check_events(done, await docket.history(run.id))
            info = await docket.inspect_run(run.id)
            assert info.claimed_at is None and info.wake_at is None

            # a retry park: committed, wake at the deadline, no claim, and no sleeping
            ref = await docket.save_graph(fx.retry_then_continue(backoff_ms=60_000))
            await docket.start_run(ref, run_id="flaky")
            loop = asyncio.get_running_loop()
            started = loop.time()
            summary = await docket.drain_due()
            assert loop.time() - started < 5  # a 60 s backoff was not slept
            assert [(o.kind, o.detail) for o in summary.outcomes] == [("parked", "at")]
            info = await docket.inspect_run("flaky")
            assert info.latest_checkpoint_type == "retry_scheduled"
            assert info.claimed_at is None
            timer = next(iter(info.run.timers.values())).fires_at
            assert info.wake_at == timer == clock() + timedelta(seconds=60)
            assert (await docket.drain_due()).outcomes == ()  # not due yet

            clock.set(timer)  # the deadline: due by the backend's clock
            summary = await docket.drain_due()
            assert [(o.kind, o.detail) for o in summary.outcomes] == [("parked", "at")]
            clock.set(next(iter((await docket.fetch_run("flaky")).timers.values())).fires_at)
            await docket.drain_due()
            final = await docket.fetch_run("flaky")
            assert final.status is RunStatus.DONE and final.output == {"out": "ok"}
            types = [
                e.metadata["checkpoint_type"]
                for e in await docket.history("flaky")
                if e.type is EventType.CHECKPOINT_COMMITTED
            ]
            assert types == [
                "run_initialized",
                "retry_scheduled",
                "retry_scheduled",
                "step_committed",
                "run_completed",
            ]

    asyncio.run(scenario())


def test_a_signal_between_claim_and_read_loses_the_fence() -> None:
    seen: list[str] = []

    async def scenario() -> None:
        docket, _backend, _ = memory_docket(
            observers=[lambda checkpoint, _ctx: seen.append(str(checkpoint.type))]
        )
        async with docket:
            ref = await docket.save_graph(fx.minimal_linear())
            await docket.start_run(ref, {"value": "x"}, run_id="r")
            lease = await _claim(docket)
            cancelled = await docket.cancel_run("r")
            outcome = await docket._drainer.drain(lease)
            assert outcome == DrainOutcome(kind="fence_lost", run_id="r")
            assert await docket.fetch_run("r") == cancelled
            await asyncio.sleep(0.05)  # observers run in tasks
        # nothing from the drain (deliveries run in threads: their order is not promised)
        assert sorted(seen) == ["run_cancelled", "run_initialized"]

    asyncio.run(scenario())


def test_a_stale_commit_is_discarded_and_changes_nothing() -> None:
    """While the node runs, the claim expires and another claimant takes the run: the
    first drain's commit meets StaleCheckpoint, is discarded, and the run is untouched."""
    nodes = NodeRegistry()
    stolen: list[Lease] = []

    @nodes.node("steal")
    async def steal(state: NodeState, ctx: NodeContext) -> dict[str, str]:
        holder = ctx.application["docket"]
        assert isinstance(holder, list)
        docket = holder[0]
        assert isinstance(docket, Docket)
        if not stolen:
            stolen.append(await _claim(docket, now_offset=3600))  # the claim has expired
        return {"out": "first"}

    graph = (
        GraphBuilder("stale")
        .field("out", S.string())
        .node("n", "steal")
        .edge("go", START, "n")
        .edge("end", "n", FINISH)
        .build()
    )

    async def scenario() -> None:
        holder: list[Docket] = []
        docket, _backend, _ = memory_docket(nodes=nodes, context={"docket": holder})
        holder.append(docket)
        async with docket:
            ref = await docket.save_graph(graph)
            await docket.start_run(ref, run_id="r")
            before = await docket.fetch_run("r")
            summary = await docket.drain_due()
            assert [(o.kind, o.detail) for o in summary.outcomes] == [
                ("discarded", "StaleCheckpoint")
            ]
            assert await docket.fetch_run("r") == before
            info = await docket.inspect_run("r")
            assert info.claimed_at == stolen[0].claimed_at  # the thief still holds it

    asyncio.run(scenario())


def test_the_drain_budget_yields_after_max_moments() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(drain_max_moments=4)
        async with docket:
            ref = await docket.save_graph(fx.endless_cycle())
            await docket.start_run(ref, run_id="loop")
            summary = await docket.drain_due(max_runs=1)
            (outcome,) = summary.outcomes
            assert (outcome.kind, outcome.detail, outcome.commits, outcome.yielded) == (
                "parked",
                "immediate",
                4,
                True,
            )
            assert summary.limit_reached
            info = await docket.inspect_run("loop")
            assert info.run.checkpoint_seq == 5 and info.run.status is RunStatus.RUNNING
            last = (await docket.history("loop"))[-1]
            assert last.metadata["checkpoint_type"] == "step_committed"
            assert last.metadata["wake_disposition"] == "immediate"
            assert last.metadata["park_reason"] == "drain_budget"
            assert info.wake_at is not None and info.claimed_at is None
            again = await docket.drain_due(max_runs=1)  # re-claimable, and it progresses
            assert again.outcomes[0].commits == 4
            assert (await docket.fetch_run("loop")).checkpoint_seq == 9

    asyncio.run(scenario())


def test_the_elapsed_budget_yields_at_the_first_boundary_and_a_terminal_moment_wins() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(drain_max_seconds=1e-9)
        async with docket:
            ref = await docket.save_graph(fx.endless_cycle())
            await docket.start_run(ref, run_id="loop")
            (outcome,) = (await docket.drain_due(max_runs=1)).outcomes
            assert (outcome.commits, outcome.detail, outcome.yielded) == (1, "immediate", True)

            # the completion at the boundary is not rewritten
            await docket.cancel_run("loop")
            ref = await docket.save_graph(fx.minimal_linear())
            await docket.start_run(ref, {"value": "v"}, run_id="short")
            outcomes: list[DrainOutcome] = []
            for _ in range(3):
                summary = await docket.drain_due(max_runs=1)
                outcomes += [o for o in summary.outcomes if o.run_id == "short"]
                if (await docket.fetch_run("short")).status is RunStatus.DONE:
                    break
            assert [(o.detail, o.yielded) for o in outcomes] == [
                ("immediate", True),
                ("terminal", False),
            ]

    asyncio.run(scenario())


def test_a_claim_with_nothing_due_is_deferred_without_counting_towards_poison() -> None:
    async def scenario() -> None:
        docket, backend, clock = memory_docket(max_claim_abandons=1)
        async with docket:
            ref = await docket.save_graph(fx.retry_then_continue(backoff_ms=60_000))
            await docket.start_run(ref, run_id="r")
            await docket.drain_due()  # commits the retry park: wake at the deadline
            deadline = (await docket.inspect_run("r")).wake_at
            assert deadline is not None
            for round_ in range(3):  # more deferrals than max_claim_abandons: no poison
                lease = await _claim(docket, now_offset=3600)  # claimed early...
                await backend.runs.release_claim(TENANTLESS, "r", lease.claim_token, now=clock())
                summary = await docket.drain_due()  # ...and due "now" before the timer
                assert [o.kind for o in summary.outcomes] == ["deferred"]
                info = await docket.inspect_run("r")
                assert info.wake_at == deadline and info.claimed_at is None
                assert info.claim_abandons == round_ + 1 and not info.poisoned
            assert (await docket.fetch_run("r")).checkpoint_seq == 2  # nothing committed

    asyncio.run(scenario())


def test_a_killed_drain_is_recovered_after_the_ttl_from_the_last_commit() -> None:
    release = asyncio.Event
    calls: list[tuple[str, int]] = []
    nodes = NodeRegistry()

    @nodes.node("step")
    async def step(state: NodeState, ctx: NodeContext) -> dict[str, int]:
        calls.append((ctx.node_id, ctx.attempt))
        gate = ctx.application.get("gate")
        if ctx.node_id == "b" and isinstance(gate, release) and not gate.is_set():
            await gate.wait()  # the first worker "dies" here
        return {"n": int(str(state.get("n", 0))) + 1}

    graph = (
        GraphBuilder("three")
        .field("n", S.integer())
        .node("a", "step")
        .node("b", "step")
        .node("c", "step")
        .edge("go", START, "a")
        .edge("ab", "a", "b")
        .edge("bc", "b", "c")
        .edge("end", "c", FINISH)
        .output("n")
        .build()
    )

    async def scenario() -> None:
        gate = asyncio.Event()
        docket, _backend, clock = memory_docket(nodes=nodes, context={"gate": gate}, claim_ttl=30)
        async with docket:
            ref = await docket.save_graph(graph)
            await docket.start_run(ref, run_id="r")
            lease = await _claim(docket)
            first = asyncio.ensure_future(docket._drainer.drain(lease))
            while ("b", 1) not in calls:
                await asyncio.sleep(0.001)
            first.cancel()  # the worker dies mid-superstep: no release, the claim stays
            await asyncio.gather(first, return_exceptions=True)
            gate.set()
            info = await docket.inspect_run("r")
            assert info.claimed_at is not None and info.run.checkpoint_seq == 2
            assert (await docket.drain_due()).outcomes == ()  # the claim is still held
            later(clock, 30)
            assert (await docket.drain_due()).outcomes == ()  # exactly at the TTL: held
            later(clock, 0.001)
            summary = await docket.drain_due()  # past the TTL: stolen and resumed
            assert [o.kind for o in summary.outcomes] == ["parked"]
            final = await docket.fetch_run("r")
            assert final.status is RunStatus.DONE and final.output == {"n": 3}
            assert calls == [("a", 1), ("b", 1), ("b", 1), ("c", 1)]  # a not repeated
            check_events(final, await docket.history("r"))

    asyncio.run(scenario())


def test_claims_without_progress_poison_the_run_on_the_next_need() -> None:
    async def scenario() -> None:
        docket, _backend, clock = memory_docket(max_claim_attempts=2, claim_ttl=10)
        async with docket:
            ref = await docket.save_graph(fx.minimal_linear())
            await docket.start_run(ref, {"value": "v"}, run_id="r")
            for attempt in (1, 2):  # two claims whose workers die before committing
                lease = await _claim(docket)
                assert lease.claim_attempt == attempt
                later(clock, 11)
            summary = await docket.drain_due()
            assert summary.outcomes == ()
            assert [(p.run_id, p.poison_reason) for p in summary.poisoned] == [
                ("r", POISON_MAX_ATTEMPTS)
            ]
            info = await docket.inspect_run("r")
            assert info.poisoned and info.wake_at is None and info.claimed_at is None
            await docket.retry_poisoned_run("r")
            await docket.drain_due()
            assert (await docket.fetch_run("r")).status is RunStatus.DONE

    asyncio.run(scenario())


def test_a_graph_this_worker_cannot_compile_is_handed_back_then_poisoned() -> None:
    async def scenario() -> None:
        publisher, backend, clock = memory_docket()
        lacking = Docket(backend, nodes=NodeRegistry(), max_claim_abandons=2)
        async with publisher, lacking:
            ref = await publisher.save_graph(fx.minimal_linear())
            await publisher.start_run(ref, {"value": "v"}, run_id="r")
            await lacking.start_run(ref, {"value": "v"}, run_id="r2")  # starting needs no code
            kinds: list[str] = []
            for _ in range(3):
                now = clock()
                summary = await lacking.drain_due(max_runs=2)
                kinds += [o.detail.split(":")[0] for o in summary.outcomes if o.run_id == "r"]
                info = await lacking.inspect_run("r")
                if info.poisoned:
                    break
                assert info.wake_at is not None and info.wake_at >= now + timedelta(seconds=5)
                later(clock, 11)
            assert kinds == ["rescheduled", "rescheduled", "poisoned"]
            assert "r" in [p.run_id for p in summary.poisoned]  # a hand-back poisoned it
            info = await lacking.inspect_run("r")
            assert info.poison_reason == POISON_MAX_ABANDONS
            assert lacking.graph_cache.compiles == 1  # the failure is cached per process
            await publisher.retry_poisoned_run("r")
            await publisher.drain_due()  # a worker that has the code finishes it
            assert (await publisher.fetch_run("r")).status is RunStatus.DONE

    asyncio.run(scenario())


def test_node_timeouts_above_the_host_maximum_are_handed_back_without_poisoning() -> None:
    graph = fx.single_node("noop", timeout_ms=5_000)

    async def scenario() -> None:
        tolerant, backend, clock = memory_docket()
        strict = Docket(
            backend,
            nodes=fx.NODES,
            settings=Settings(node_timeout=1, max_attempt_time=2, max_claim_abandons=1),
        )
        async with tolerant, strict:
            ref = await tolerant.save_graph(graph)
            await tolerant.start_run(ref, run_id="r")
            with pytest.raises(Exception) as refused:
                await strict.start_run(ref, run_id="r2")
            assert type(refused.value).__name__ == "IncompatibleExecutionPolicy"
            delays = []
            for _ in range(4):
                now = clock()
                summary = await strict.drain_due()
                assert [o.kind for o in summary.outcomes] == ["host_incompatible"]
                info = await strict.inspect_run("r")
                assert not info.poisoned and info.wake_at is not None
                delays.append((info.wake_at - now).total_seconds())
                clock.set(info.wake_at)
            assert delays == [30, 60, 120, 240]
            await tolerant.drain_due()
            assert (await tolerant.fetch_run("r")).status is RunStatus.DONE

    asyncio.run(scenario())
