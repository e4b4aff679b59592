"""Admission limits through the facade (docs/queues.md#admission-limits): a start beyond
a queue's ``admission_limit`` (or its tenant's ``tenant_admission_limit``) is answered
``queued`` and not initialised until an admitted run of the queue ends; finishing runs
promotes held starts by priority, then FIFO; a held run can be inspected, awaited,
cancelled and started again with its idempotency key; a backend without
``Feature.ADMISSION`` refuses the limits and stores nothing."""

from __future__ import annotations

import asyncio

import pytest

from docket import Docket, SyncDocket, errors
from docket.records import QueueConfig, RunStatus
from tests.runtime.admission_app import ADMISSION_KINDS, NoAdmission, ledger, statuses
from tests.runtime.queue_app import NODES, docket_on, overlap, recording


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_two_of_six_run_and_the_rest_are_promoted_by_priority_then_fifo(kind: str) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log) as docket:
            ref = await docket.save_graph(recording(0.0))
            config = await docket.configure_queue("onboarding", admission_limit=2)
            assert config.admission_limit == 2 and config.tenant_admission_limit is None
            priorities = [0, 0, 1, 5, 1, 5]
            runs = [await docket.start_run(ref, queue="onboarding", priority=p) for p in priorities]
            ids = [run.id for run in runs]
            assert [run.status for run in runs] == [RunStatus.RUNNING] * 2 + [RunStatus.QUEUED] * 4
            assert await statuses(docket, ids) == [RunStatus.RUNNING] * 2 + [RunStatus.QUEUED] * 4
            queued = await docket.inspect_run(ids[3])
            assert (queued.queue, queued.priority, queued.run.checkpoint_seq) == (
                "onboarding",
                5,
                0,
            )
            assert (await docket.fetch_run(ids[3])).status is RunStatus.QUEUED
            assert await ledger(docket, "onboarding") == (ids[:2], [ids[3], ids[5], ids[2], ids[4]])
            status = next(s for s in await docket.queues() if s.config.name == "onboarding")
            assert (status.admitted, status.held) == (2, 4)
            # one drain ends one run, which promotes exactly one held start
            promoted: list[str] = []
            known = set(ids[:2])
            while len(known) < len(ids):
                summary = await docket.drain_due(max_runs=1)
                assert summary.drained == 1
                started = [
                    run_id
                    for run_id, status in zip(ids, await statuses(docket, ids), strict=True)
                    if status is not RunStatus.QUEUED and run_id not in known
                ]
                assert len(started) == 1, started
                promoted += started
                known.update(started)
            assert promoted == [ids[3], ids[5], ids[2], ids[4]]
            while (await docket.drain_due()).drained:
                pass
            assert await statuses(docket, ids) == [RunStatus.DONE] * 6
            assert await ledger(docket, "onboarding") == ([], [])

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_a_worker_never_runs_more_than_the_limit_and_every_run_completes(kind: str) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log, concurrency=6) as docket:
            ref = await docket.save_graph(recording(0.1))
            await docket.configure_queue("onboarding", admission_limit=2)
            runs = [await docket.start_run(ref, queue="onboarding") for _ in range(6)]
            async with docket.worker():
                for run in runs:
                    assert (await docket.await_run(run.id, timeout=60)).status is RunStatus.DONE
            assert overlap(log) == 2, log
            assert await ledger(docket, "onboarding") == ([], [])

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_each_tenant_has_its_own_cap_within_the_queue(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, [], tenant_mode="required") as docket:
            ref = await docket.save_graph(recording(0.0), tenant_id="a")
            await docket.save_graph(recording(0.0), tenant_id="b")
            await docket.configure_queue("onb", admission_limit=3, tenant_admission_limit=1)
            a1 = await docket.start_run(ref, queue="onb", tenant_id="a")
            a2 = await docket.start_run(ref, queue="onb", tenant_id="a")
            b1 = await docket.start_run(ref, queue="onb", tenant_id="b")
            assert [a1.status, a2.status, b1.status] == [
                RunStatus.RUNNING,
                RunStatus.QUEUED,
                RunStatus.RUNNING,
            ]
            info = await docket.inspect_run(a2.id, tenant_id="a")
            assert (info.run.status, info.tenant_id) == (RunStatus.QUEUED, "a")
            with pytest.raises(errors.NotFound):  # another tenant's queued run is not seen
                await docket.inspect_run(a2.id, tenant_id="b")
            status = next(s for s in await docket.queues() if s.config.name == "onb")
            assert (status.admitted, status.held) == (2, 1)
            await docket.cancel_run(b1.id, tenant_id="b")  # b's end frees nothing for a
            assert (await docket.inspect_run(a2.id, tenant_id="a")).run.status is RunStatus.QUEUED
            await docket.cancel_run(a1.id, tenant_id="a")  # a's does
            after = await docket.inspect_run(a2.id, tenant_id="a")
            assert (after.run.status, after.run.checkpoint_seq) == (RunStatus.RUNNING, 1)

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_a_held_run_can_be_cancelled_and_never_runs(kind: str) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("onb", admission_limit=1)
            first = await docket.start_run(ref, queue="onb")
            held = await docket.start_run(ref, queue="onb")
            last = await docket.start_run(ref, queue="onb")
            with pytest.raises(errors.InactiveRun) as refused:
                await docket.send(held.id, "topic", {"x": 1})
            assert refused.value.details["status"] == "queued"
            cancelled = await docket.cancel_run(held.id)
            assert (cancelled.id, cancelled.status) == (held.id, RunStatus.CANCELLED)
            with pytest.raises(errors.NotFound):  # it never existed: nothing is stored
                await docket.inspect_run(held.id)
            assert await ledger(docket, "onb") == ([first.id], [last.id])
            # cancelling the admitted run frees its count: the next held start begins
            assert (await docket.cancel_run(first.id)).status is RunStatus.CANCELLED
            assert (await docket.inspect_run(last.id)).run.status is RunStatus.RUNNING
            while (await docket.drain_due()).drained:
                pass
            assert [run_id for kind_, run_id in log if kind_ == "start"] == [last.id]

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_a_keyed_start_again_while_held_answers_the_held_run(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, []) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("onb", admission_limit=1)
            await docket.start_run(ref, queue="onb")
            keyed = await docket.start_run(ref, {}, queue="onb", idempotency_key="k")
            again = await docket.start_run(ref, queue="onb", idempotency_key="k", priority=9)
            assert (keyed.id, again.id) == ("k", "k")
            assert again.status is RunStatus.QUEUED
            _, held = await ledger(docket, "onb")
            assert held == ["k"]
            assert (await docket.admissions("onb")).held[0].priority == 0  # the first start's
            with pytest.raises(errors.Conflict):  # run_id= of a queued start is taken
                await docket.start_run(ref, queue="onb", run_id="k")
            while (await docket.drain_due()).drained:
                pass
            assert (await docket.inspect_run("k")).run.status is RunStatus.DONE
            blocker = await docket.start_run(ref, queue="onb")  # the queue is at its cap
            done = await docket.start_run(ref, queue="onb", idempotency_key="k")
            assert (done.id, done.status) == ("k", RunStatus.DONE)
            with pytest.raises(errors.Conflict):  # a run id in use is neither counted nor held
                await docket.start_run(ref, queue="onb", run_id="k")
            assert await ledger(docket, "onb") == ([blocker.id], [])

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_await_run_waits_for_a_queued_run(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, []) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("onb", admission_limit=1)
            await docket.start_run(ref, queue="onb")
            held = await docket.start_run(ref, queue="onb")
            with pytest.raises(errors.AwaitTimeout) as timed_out:
                await docket.await_run(held.id, timeout=0)
            assert timed_out.value.details["status"] == "queued"
            async with docket.worker():
                assert (await docket.await_run(held.id, timeout=60)).status is RunStatus.DONE

    asyncio.run(scenario())


def test_a_backend_without_admission_refuses_the_limits_and_stores_nothing() -> None:
    async def scenario() -> None:
        async with Docket(NoAdmission(), nodes=NODES, context={"log": []}) as docket:
            for limits in ({"admission_limit": 2}, {"tenant_admission_limit": 1}):
                with pytest.raises(errors.Unsupported) as refused:
                    await docket.configure_queue("onb", **limits)  # type: ignore[arg-type]
                assert refused.value.details["feature"] == "admission"
                with pytest.raises(errors.NotFound):
                    await docket.queue("onb")
            with pytest.raises(errors.Unsupported):
                await docket.admissions("default")
            # None (no limit) and the other fields work as before
            config = await docket.configure_queue("onb", admission_limit=None, execution_limit=2)
            assert config == QueueConfig(name="onb", execution_limit=2)
            limited = QueueConfig(name="other", tenant_admission_limit=1)
            await docket.backend.queues.set_queue(limited)  # type: ignore[attr-defined]
            ref = await docket.save_graph(recording(0.0))
            run = await docket.start_run(ref, queue="onb")
            assert run.status is RunStatus.RUNNING
            assert "docket.admission" not in run.metadata
            # a limit stored by other means is refused at start, not ignored
            with pytest.raises(errors.Unsupported):
                await docket.start_run(ref, queue="other", run_id="never")
            with pytest.raises(errors.NotFound):
                await docket.inspect_run("never")

    asyncio.run(scenario())


def test_limits_are_kept_unless_changed_and_bad_values_store_nothing() -> None:
    async def scenario() -> None:
        async with Docket("memory://", nodes=NODES, context={"log": []}) as docket:
            await docket.configure_queue("onb", admission_limit=2, tenant_admission_limit=1)
            kept = await docket.configure_queue("onb", execution_limit=3)
            assert (kept.admission_limit, kept.tenant_admission_limit) == (2, 1)
            for bad in (0, -1, True, "2"):
                with pytest.raises(errors.InvalidOptions):
                    await docket.configure_queue("onb", admission_limit=bad)  # type: ignore[arg-type]
            assert await docket.queue("onb") == kept
            lifted = await docket.configure_queue("onb", admission_limit=None)
            assert (lifted.admission_limit, lifted.tenant_admission_limit) == (None, 1)

    asyncio.run(scenario())


def test_the_blocking_twin_configures_limits_and_lists_the_ledger() -> None:
    with SyncDocket("memory://", nodes=NODES, context={"log": []}) as docket:
        ref = docket.save_graph(recording(0.0))
        config = docket.configure_queue("onb", admission_limit=1, tenant_admission_limit=1)
        assert (config.admission_limit, config.tenant_admission_limit) == (1, 1)
        first = docket.start_run(ref, queue="onb")
        held = docket.start_run(ref, queue="onb")
        assert held.status is RunStatus.QUEUED
        view = docket.admissions("onb")
        assert [s.run_id for s in view.admitted] == [first.id]
        assert [s.run_id for s in view.held] == [held.id]


def test_listing_queued_runs_points_to_the_admission_ledger() -> None:
    async def body() -> None:
        async with Docket("memory://") as docket:
            with pytest.raises(errors.InvalidOptions, match=r"admissions\(queue\)"):
                await docket.list_runs(status=["running", "queued"])

    asyncio.run(body())
