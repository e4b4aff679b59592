"""The worker in one process, on real SQLite files: bounded concurrency, wake-ups,
the claim heartbeat, node timeouts, poison reports and graceful shutdown."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from pathlib import Path

from docket import Docket, errors
from docket.contract.proposals import ClaimPolicy, PoisonedClaim
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.schema import S
from docket.records import EventType, RunStatus
from tests.runtime.helpers import check_events

NODES = NodeRegistry()


@NODES.node("nap")
async def nap(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    """Sleeps ``config["seconds"]``, recording (who, run, attempt) and concurrency."""
    app = ctx.application
    record = app.get("record")
    if isinstance(record, list):
        record.append((app.get("who"), ctx.run_id, ctx.attempt))
    gauge = app.get("gauge")
    if isinstance(gauge, dict):
        gauge["now"] += 1
        gauge["max"] = max(gauge["max"], gauge["now"])
    try:
        seconds = ctx.config.get("seconds", 0.0)
        assert isinstance(seconds, int | float)
        await asyncio.sleep(seconds)
    finally:
        if isinstance(gauge, dict):
            gauge["now"] -= 1
    return {"out": f"slept in {ctx.node_id}"}


def napping(seconds: float, *, steps: int = 1, timeout_ms: int | None = None) -> Graph:
    builder = GraphBuilder(f"nap-{steps}").field("out", S.string())
    previous = START
    for index in range(steps):
        builder.node(f"n{index}", "nap", config={"seconds": seconds}, timeout_ms=timeout_ms)
        builder.edge(f"e{index}", previous, f"n{index}")
        previous = f"n{index}"
    return builder.edge("end", previous, FINISH).output("out").build()


def sqlite(tmp_path: Path, **options: object) -> Docket:
    options.setdefault("nodes", NODES)
    return Docket(f"sqlite:///{tmp_path / 'runs.db'}", **options)  # type: ignore[arg-type]


async def wait_for(predicate: object, timeout: float = 10.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


def test_a_worker_drains_at_most_its_concurrency_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        gauge = {"now": 0, "max": 0}
        async with sqlite(tmp_path, context={"gauge": gauge}, poll_interval=0.2) as docket:
            ref = await docket.save_graph(napping(0.05, steps=2))
            ids = [(await docket.start_run(ref, run_id=f"r{i}")).id for i in range(8)]
            async with docket.worker(concurrency=3) as worker:
                for run_id in ids:
                    assert (await docket.await_run(run_id, timeout=20)).status is RunStatus.DONE
            assert gauge["max"] == 3
            assert worker.stats.outcomes["parked"] == 8 and worker.stats.commits == 8 * 3

    asyncio.run(scenario())


def test_a_run_started_in_the_same_process_is_picked_up_without_a_poll(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with sqlite(tmp_path, poll_interval=30) as docket:
            ref = await docket.save_graph(napping(0))
            async with docket.worker():
                await asyncio.sleep(0.1)  # the worker's first poll found nothing
                started = time.monotonic()
                run = await docket.start_run(ref)
                done = await docket.await_run(run.id, timeout=10, poll_interval=0.01)
                assert done.status is RunStatus.DONE
                assert time.monotonic() - started < 2  # far below the 30 s poll interval

    asyncio.run(scenario())


def test_a_node_running_longer_than_the_claim_ttl_is_not_stolen(tmp_path: Path) -> None:
    """Worker A's node sleeps for more than three TTLs; worker B polls all the while.
    The heartbeat keeps A's claim fresh, so B never takes the run over."""

    async def scenario() -> None:
        record: list[tuple[object, str, int]] = []
        options: dict[str, object] = {"claim_ttl": 0.9, "poll_interval": 0.1}
        a = sqlite(tmp_path, context={"who": "A", "record": record}, **options)
        b = sqlite(tmp_path, context={"who": "B", "record": record}, **options)
        async with a, b:
            ref = await a.save_graph(napping(3.0))
            async with a.worker() as worker_a:
                run = await a.start_run(ref, run_id="long")
                await wait_for(lambda: record)
                claimed = [(await a.inspect_run("long")).claimed_at]
                async with b.worker() as worker_b:
                    while (await a.inspect_run("long")).run.status is RunStatus.RUNNING:
                        info = await a.inspect_run("long")
                        if info.claimed_at is not None and info.claimed_at != claimed[-1]:
                            claimed.append(info.claimed_at)
                        await asyncio.sleep(0.05)
            assert record == [("A", run.id, 1)]  # executed once, by A
            assert worker_b.stats.leases == 0
            assert worker_a.stats.outcomes["parked"] == 1
            assert len(claimed) >= 3  # the heartbeat moved claimed_at forward (~every 0.3 s)
            done = await a.fetch_run("long")
            assert done.status is RunStatus.DONE
            check_events(done, await a.history("long"))

    asyncio.run(scenario())


def test_control_without_a_timely_heartbeat_the_run_is_taken_over(tmp_path: Path) -> None:
    """The control of the test above: A refreshes only every 10 s (its TTL is 30 s) while
    B treats claims older than 0.6 s as dead, so B takes the run over mid-node. (This is
    why every worker sharing a store must use the same ``claim_ttl``.)"""

    async def scenario() -> None:
        record: list[tuple[object, str, int]] = []
        a = sqlite(tmp_path, context={"who": "A", "record": record}, claim_ttl=30)
        b = sqlite(
            tmp_path, context={"who": "B", "record": record}, claim_ttl=0.6, poll_interval=0.1
        )
        async with a, b:
            ref = await a.save_graph(napping(1.5))
            async with a.worker():
                await a.start_run(ref, run_id="long")
                await wait_for(lambda: record)
                async with b.worker():
                    await wait_for(lambda: len(record) == 2)
                    await a.await_run("long", timeout=10)
            assert [who for who, _, _ in record][:2] == ["A", "B"]

    asyncio.run(scenario())


def test_a_lost_claim_stops_the_drain_and_cancels_its_node_without_committing(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        record: list[tuple[object, str, int]] = []
        async with sqlite(tmp_path, context={"record": record}, claim_ttl=0.3) as docket:
            ref = await docket.save_graph(napping(30))
            async with docket.worker() as worker:
                await docket.start_run(ref, run_id="r")
                await wait_for(lambda: record)
                cancelled = await docket.cancel_run("r")  # revokes the worker's claim
                started = time.monotonic()
                await wait_for(lambda: worker.stats.outcomes["claim_lost"] == 1, timeout=5)
                assert time.monotonic() - started < 1  # noticed at the next heartbeat
                assert worker.in_flight == 0  # the 30 s node was cancelled
            assert await docket.fetch_run("r") == cancelled
            assert cancelled.checkpoint_seq == 2

    asyncio.run(scenario())


def test_node_timeouts_default_to_the_host_setting_and_fail_the_attempt(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with sqlite(tmp_path, node_timeout=0.1, max_attempt_time=0.5) as docket:
            ref = await docket.save_graph(napping(5.0))
            async with docket.worker():
                run = await docket.start_run(ref)
                started = time.monotonic()
                failed = await docket.await_run(run.id, timeout=10)
            assert time.monotonic() - started < 3
            assert failed.status is RunStatus.FAILED
            assert failed.failure is not None and "timeout" in str(failed.failure.details)
            node_failed = [
                e for e in await docket.history(run.id) if e.type is EventType.NODE_FAILED
            ]
            assert len(node_failed) == 1

            with_own = await docket.save_graph(napping(5.0, timeout_ms=1_000))
            try:
                await docket.start_run(with_own)
            except errors.IncompatibleExecutionPolicy as exc:
                assert exc.details["max_attempt_elapsed_ms"] == 500
            else:
                raise AssertionError("a node timeout above the host maximum must be refused")

    asyncio.run(scenario())


def test_a_worker_reports_runs_it_finds_poisoned(tmp_path: Path) -> None:
    async def scenario() -> None:
        poisoned: list[PoisonedClaim] = []
        async with sqlite(
            tmp_path,
            claim_ttl=0.2,
            poll_interval=0.1,
            max_claim_attempts=1,
            on_poisoned=poisoned.append,
        ) as docket:
            ref = await docket.save_graph(napping(0))
            await docket.start_run(ref, run_id="doomed")
            policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=0.2), max_claim_attempts=1)
            batch = await docket.backend.runs.claim_due(policy)  # a worker that then dies
            assert len(getattr(batch, "leases", ())) == 1
            async with docket.worker() as worker:
                await wait_for(lambda: poisoned)
            assert [(p.run_id, p.poison_reason) for p in poisoned] == [
                ("doomed", "max_claim_attempts_exceeded")
            ]
            assert worker.stats.poisoned == 1
            try:
                await docket.await_run("doomed", timeout=100)
            except errors.RunPoisoned as exc:
                assert exc.info.poisoned
            else:
                raise AssertionError("await_run must raise RunPoisoned")

    asyncio.run(scenario())


def test_a_stopping_worker_lets_the_superstep_finish_and_yields_the_run(tmp_path: Path) -> None:
    async def scenario() -> None:
        record: list[tuple[object, str, int]] = []
        async with sqlite(tmp_path, context={"record": record}, shutdown_timeout=10) as docket:
            ref = await docket.save_graph(napping(0.3, steps=3))
            worker = docket.worker()
            worker.start()
            await docket.start_run(ref, run_id="r")
            await wait_for(lambda: record)
            await worker.stop()
            assert worker.stats.released_at_shutdown == 0
            info = await docket.inspect_run("r")
            assert info.run.status is RunStatus.RUNNING and info.run.checkpoint_seq == 2
            assert info.claimed_at is None and info.wake_at is not None  # due again now
            last = (await docket.history("r"))[-1]
            assert last.metadata["park_reason"] == "drain_budget"
            await docket.start_run(ref, run_id="after-stop")
            await asyncio.sleep(0.1)
            assert (await docket.inspect_run("after-stop")).claimed_at is None
            async with docket.worker():
                assert (await docket.await_run("r", timeout=10)).status is RunStatus.DONE
            assert [r[1] for r in record].count("r") == 3  # no superstep ran twice

    asyncio.run(scenario())


def test_a_stopping_worker_cancels_work_past_the_bound_and_releases_the_claim(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        record: list[tuple[object, str, int]] = []
        async with sqlite(tmp_path, context={"record": record}, shutdown_timeout=0.2) as docket:
            ref = await docket.save_graph(napping(30))
            worker = docket.worker()
            worker.start()
            await docket.start_run(ref, run_id="slow")
            await wait_for(lambda: record)
            started = time.monotonic()
            await worker.stop()
            assert time.monotonic() - started < 2
            assert worker.stats.released_at_shutdown == 1
            info = await docket.inspect_run("slow")
            assert info.claimed_at is None and info.wake_at is not None
            assert info.run.checkpoint_seq == 1 and info.run.status is RunStatus.RUNNING

    asyncio.run(scenario())
