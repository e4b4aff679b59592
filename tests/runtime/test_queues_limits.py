"""Named queues' limits hold for real workers (docket/runtime/queues.py), on every
backend that declares ``Feature.QUEUES``: an execution limit is never exceeded by a
worker with more slots, slots go back when claims end, a paused queue starts nothing
until resumed, priorities order the claims, a limit changed while the worker runs takes
effect, and a slot held past the claim TTL is renewed by the claim's heartbeat."""

from __future__ import annotations

import asyncio

import pytest

from docket import errors
from docket.records import RunStatus
from tests.runtime.queue_app import (
    QUEUE_KINDS,
    docket_on,
    overlap,
    recording,
    running,
    starts,
    wait_for,
)

pytestmark = pytest.mark.parametrize("kind", QUEUE_KINDS)


def test_a_limit_of_two_holds_for_a_worker_of_eight_and_every_slot_comes_back(kind: str) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log) as docket:
            ref = await docket.save_graph(recording(0.05))
            await docket.configure_queue("billing", execution_limit=2)
            async with docket.worker(concurrency=8):
                # started with the worker running: eager starts take slots too
                ids = [(await docket.start_run(ref, queue="billing")).id for _ in range(20)]
                for run_id in ids:
                    done = await docket.await_run(run_id, timeout=60)
                    assert done.status is RunStatus.DONE
                assert overlap(log) == 2, log
                await wait_for(lambda: len(log) == 40)
            assert sorted(starts(log)) == sorted(ids)
            assert await running(docket, "billing") == 0

    asyncio.run(scenario())


def test_the_unlimited_queues_are_served_beside_a_full_limited_one(kind: str) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log) as docket:
            await docket.configure_queue("one", execution_limit=1)
            slow = await docket.save_graph(recording(0.3, graph_id="slow"))
            fast = await docket.save_graph(recording(0.0, graph_id="fast"))
            held = [(await docket.start_run(slow, queue="one")).id for _ in range(3)]
            others = [(await docket.start_run(fast)).id for _ in range(6)]
            async with docket.worker(concurrency=4):
                for run_id in others:  # not held up behind the limited queue
                    await docket.await_run(run_id, timeout=60)
                for run_id in held:
                    await docket.await_run(run_id, timeout=60)
            slow_log = [entry for entry in log if entry[1] in held]
            assert overlap(slow_log) == 1, log
            assert await running(docket, "one") == 0

    asyncio.run(scenario())


def test_a_paused_queue_starts_nothing_until_it_is_resumed(kind: str) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("held", paused=True)
            ids = [(await docket.start_run(ref, queue="held")).id for _ in range(3)]
            async with docket.worker(concurrency=4) as worker:
                polls = worker.stats.polls
                await wait_for(lambda: worker.stats.polls >= polls + 5)
                assert log == []
                drained = await docket.drain_due()
                assert drained.drained == 0 and log == []
                await docket.resume_queue("held")
                for run_id in ids:
                    done = await docket.await_run(run_id, timeout=60)
                    assert done.status is RunStatus.DONE
            assert sorted(starts(log)) == sorted(ids)

    asyncio.run(scenario())


def test_with_one_slot_the_higher_priority_starts_first(kind: str) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("ranked")
            for rank in (0, 5, -3, 10, 5):
                await docket.start_run(
                    ref, queue="ranked", priority=rank, run_id=f"p{rank}_{len(log)}"
                )
                log.append(("started", f"{rank}"))
            log.clear()
            async with docket.worker(concurrency=1):
                await wait_for(lambda: len(starts(log)) == 5)
            ranks = [int(run_id[1:].split("_")[0]) for run_id in starts(log)]
            assert ranks == [10, 5, 5, 0, -3], log

    asyncio.run(scenario())


def test_a_limit_raised_while_the_worker_runs_takes_effect(kind: str) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log) as docket:
            ref = await docket.save_graph(recording(0.3))
            await docket.configure_queue("grow", execution_limit=1)
            ids = [(await docket.start_run(ref, queue="grow")).id for _ in range(12)]
            async with docket.worker(concurrency=8):
                await wait_for(lambda: len(starts(log)) >= 2)
                before = list(log)
                await docket.configure_queue("grow", execution_limit=3)
                log.append(("limit", "3"))
                for run_id in ids:
                    await docket.await_run(run_id, timeout=60)
            cut = log.index(("limit", "3"))
            assert overlap(before) == 1 and overlap(log[:cut]) == 1, log
            assert overlap(log) == 3, log
            assert await running(docket, "grow") == 0

    asyncio.run(scenario())


def test_a_claim_longer_than_its_ttl_keeps_its_slot(kind: str) -> None:
    """Without the heartbeat renewing the slot, it would expire after the TTL and the
    worker's next poll would start the second run beside the first."""

    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log, claim_ttl=0.6) as docket:
            ref = await docket.save_graph(recording(2.0))
            await docket.configure_queue("long", execution_limit=1)
            ids = [(await docket.start_run(ref, queue="long")).id for _ in range(2)]
            async with docket.worker(concurrency=4) as worker:
                for run_id in ids:
                    await docket.await_run(run_id, timeout=60)
            assert overlap(log) == 1, log
            assert worker.stats.outcomes["parked"] == 2
            assert await running(docket, "long") == 0

    asyncio.run(scenario())


def test_a_worker_serves_only_its_queues_and_refuses_an_unknown_one(kind: str) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("mine")
            await docket.configure_queue("theirs")
            mine = (await docket.start_run(ref, queue="mine")).id
            theirs = (await docket.start_run(ref, queue="theirs")).id
            plain = (await docket.start_run(ref)).id
            async with docket.worker(queues={"mine"}) as worker:
                await docket.await_run(mine, timeout=60)
                polls = worker.stats.polls
                await wait_for(lambda: worker.stats.polls >= polls + 3)
                # a run started here goes to this worker only if it serves the queue
                late = (await docket.start_run(ref, queue="theirs")).id
                await wait_for(lambda: worker.stats.polls >= polls + 6)
            assert starts(log) == [mine]
            assert worker.stats.eager_starts == 0
            for run_id in (theirs, plain, late):
                assert (await docket.fetch_run(run_id)).status is RunStatus.RUNNING
            with pytest.raises(errors.NotFound) as caught:
                async with docket.worker(queues={"mine", "nope"}):
                    pass
            assert caught.value.details["what"] == "queue"
            with pytest.raises(errors.InvalidOptions):
                docket.worker(queues="mine")

    asyncio.run(scenario())
