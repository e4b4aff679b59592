"""The ticker over a real (memory) store: exactly one run per tick however many tickers
race, catch-up after an outage, overlap policies against real runs, crash repeats."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from docket.contract.protocols import ScheduleStore
from docket.errors import InvalidSettings
from docket.facade import Docket
from docket.records import SCHEDULE_KEY, TENANTLESS, RunStatus
from docket.runtime.graphs import GraphCache
from docket.runtime.lifecycle import random_ids
from docket.runtime.schedules import ScheduleTicker
from docket.settings import Settings
from tests.schedules.helpers import T0, manual_docket, nodes, report_graph


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path | None:
    """Each test on the memory reference store and on a real SQLite file."""
    return None if request.param == "memory" else tmp_path / "schedules.db"


def ticker_of(backend: object) -> ScheduleTicker:
    return ScheduleTicker(
        backend,  # type: ignore[arg-type]
        GraphCache(backend, nodes, executable=False),  # type: ignore[arg-type]
        Settings(),
        ids=random_ids,
    )


async def all_runs(docket: object) -> list[str]:
    page = await docket.list_runs(limit=1000)  # type: ignore[attr-defined]
    return sorted(r.id for r in page.runs)


def test_racing_tickers_start_exactly_one_run_per_tick(store: Path | None) -> None:
    asyncio.run(_racing_tickers_start_exactly_one_run_per_tick(store))


async def _racing_tickers_start_exactly_one_run_per_tick(store: Path | None) -> None:
    docket, backend, clock = manual_docket(sqlite=store)
    async with docket:
        await docket.save_graph(report_graph())
        await docket.create_schedule(
            "every-second", "report", cron="* * * * * *", input={"team": "a"}, overlap="allow"
        )
        tickers = [ticker_of(backend) for _ in range(6)]
        ticks = 40
        for _ in range(ticks):
            clock.advance(timedelta(seconds=1))
            await asyncio.gather(*(t.tick() for t in tickers))
        runs = await all_runs(docket)
        expected = sorted(
            f"every-second@{(T0 + timedelta(seconds=s)).strftime('%Y%m%dT%H%M%SZ')}"
            for s in range(1, ticks + 1)
        )
        assert runs == expected
        started = [r for t in tickers for r in t.report.started]
        assert sorted(started) == expected  # each run written by exactly one ticker
        schedule = await docket.get_schedule("every-second")
        assert schedule.next_tick_at == T0 + timedelta(seconds=ticks + 1)
        run = await docket.fetch_run(expected[0])
        assert run.metadata[SCHEDULE_KEY] == {
            "id": "every-second",
            "tick": "2026-06-01T12:00:01+00:00",
        }


def test_a_crash_between_start_and_advance_repeats_the_tick_and_only_advances(
    store: Path | None,
) -> None:
    asyncio.run(_a_crash_between_start_and_advance_repeats_the_tick_and_only_advances(store))


async def _a_crash_between_start_and_advance_repeats_the_tick_and_only_advances(
    store: Path | None,
) -> None:
    docket, backend, clock = manual_docket(sqlite=store)
    async with docket:
        await docket.save_graph(report_graph())
        await docket.create_schedule("s", "report", cron="* * * * *", input={"team": "a"})
        clock.advance(timedelta(minutes=1))
        before = await docket.get_schedule("s")
        await ticker_of(backend).tick()
        # put the schedule back as if the advance never landed (the run stays)
        stored = await docket.get_schedule("s")
        schedules: ScheduleStore = backend.schedules  # type: ignore[attr-defined]
        await schedules.update_schedule(TENANTLESS, before, stored.version)
        again = ticker_of(backend)
        await again.tick()
        assert again.report.started == []
        assert again.report.already == ["s@20260601T120100Z"]
        assert (await docket.get_schedule("s")).next_tick_at == T0 + timedelta(minutes=2)
        assert await all_runs(docket) == ["s@20260601T120100Z"]


def test_a_ticker_down_for_an_hour_catches_up_per_policy_and_no_further(store: Path | None) -> None:
    asyncio.run(_a_ticker_down_for_an_hour_catches_up_per_policy_and_no_further(store))


async def _a_ticker_down_for_an_hour_catches_up_per_policy_and_no_further(
    store: Path | None,
) -> None:
    docket, backend, clock = manual_docket(sqlite=store)
    async with docket:
        await docket.save_graph(report_graph())
        await docket.create_schedule(
            "none", "report", cron="* * * * *", input={"team": "a"}, overlap="allow"
        )
        await docket.create_schedule(
            "ten",
            "report",
            cron="* * * * *",
            input={"team": "a"},
            overlap="allow",
            catchup=timedelta(minutes=10),
        )
        clock.advance(timedelta(hours=1, seconds=30))
        await ticker_of(backend).tick()
        runs = await all_runs(docket)
        assert [r for r in runs if r.startswith("none@")] == ["none@20260601T130000Z"]
        assert [r for r in runs if r.startswith("ten@")] == [
            f"ten@20260601T12{m:02d}00Z" for m in range(51, 60)
        ] + ["ten@20260601T130000Z"]
        for sid in ("none", "ten"):
            assert (await docket.get_schedule(sid)).next_tick_at == T0 + timedelta(
                hours=1, minutes=1
            )


def test_overlap_skip_and_buffer_one_against_an_unfinished_run(store: Path | None) -> None:
    asyncio.run(_overlap_skip_and_buffer_one_against_an_unfinished_run(store))


async def _overlap_skip_and_buffer_one_against_an_unfinished_run(store: Path | None) -> None:
    docket, backend, clock = manual_docket(sqlite=store)
    async with docket:
        await docket.save_graph(report_graph())
        for sid, overlap in (("skip", "skip"), ("buf", "buffer_one"), ("allow", "allow")):
            await docket.create_schedule(
                sid, "report", cron="* * * * *", input={"team": "a"}, overlap=overlap
            )
        ticker = ticker_of(backend)
        for _ in range(3):  # no worker: each tick's run stays unfinished
            clock.advance(timedelta(minutes=1))
            await ticker.tick()
        runs = await all_runs(docket)
        assert [r for r in runs if r.startswith("skip@")] == ["skip@20260601T120100Z"]
        assert [r for r in runs if r.startswith("allow@")] == [
            f"allow@20260601T12{m:02d}00Z" for m in (1, 2, 3)
        ]
        assert [r for r in runs if r.startswith("buf@")] == ["buf@20260601T120100Z"]
        held = await docket.get_schedule("buf")
        assert held.buffered_tick_at == T0 + timedelta(minutes=2)  # 12:03 was dropped
        # the runs finish: the held tick starts at once, the skipped ones never
        summary = await docket.drain_due()
        assert summary.drained >= 1
        for r in runs:
            assert (await docket.fetch_run(r)).status is RunStatus.DONE
        await ticker.tick()
        runs = await all_runs(docket)
        assert [r for r in runs if r.startswith("buf@")] == [
            "buf@20260601T120100Z",
            "buf@20260601T120200Z",
        ]
        assert [r for r in runs if r.startswith("skip@")] == ["skip@20260601T120100Z"]


def test_a_worker_ticks_and_runs_scheduled_runs(store: Path | None) -> None:
    asyncio.run(_a_worker_ticks_and_runs_scheduled_runs(store))


async def _a_worker_ticks_and_runs_scheduled_runs(store: Path | None) -> None:
    docket, _backend, clock = manual_docket(sqlite=store)
    async with docket:
        await docket.save_graph(report_graph())
        await docket.create_schedule("w", "report", cron="* * * * *", input={"team": "ops"})
        clock.advance(timedelta(minutes=1))
        async with docket.worker():
            run = None
            for _ in range(1200):  # waits on the condition (up to 30 s on a loaded host)
                page = await docket.list_runs(status="done")
                if page.runs:
                    run = page.runs[0]
                    break
                await asyncio.sleep(0.025)
        assert run is not None and run.id == "w@20260601T120100Z"
        assert (await docket.fetch_run(run.id)).output == {"report": "report for ops"}


def test_a_worker_ticks_at_most_every_schedule_poll() -> None:
    async def scenario() -> None:
        docket, _, _ = manual_docket()
        docket = Docket(docket.backend, nodes=nodes, poll_interval=0.01, schedule_poll=3600)
        async with docket:
            worker = docket.worker()
            async with worker:
                for _ in range(3000):  # until the worker has polled many times
                    if worker.stats.polls >= 20:
                        break
                    await asyncio.sleep(0.01)
            assert worker.stats.polls >= 20
            assert worker._ticker is not None and worker._ticker.report.passes == 1

    asyncio.run(scenario())


def test_schedule_poll_must_be_positive_or_none() -> None:
    assert Settings().schedule_interval == Settings().poll_interval
    assert Settings(schedule_poll=0.5).schedule_interval == 0.5
    with pytest.raises(InvalidSettings, match="schedule_poll must be a positive number"):
        Settings(schedule_poll=0).validate()


def test_a_tenants_schedule_starts_its_runs_in_that_tenant(store: Path | None) -> None:
    async def scenario() -> None:
        _, backend, clock = manual_docket(sqlite=store)
        docket = Docket(backend, nodes=nodes, tenant_mode="required")
        async with docket:
            for tenant in ("acme", "globex"):
                await docket.save_graph(report_graph(), tenant_id=tenant)
                await docket.create_schedule(
                    "daily", "report", cron="* * * * *", input={"team": tenant}, tenant_id=tenant
                )
            clock.advance(timedelta(minutes=1))
            await ticker_of(backend).tick()
            for tenant in ("acme", "globex"):
                run = await docket.fetch_run("daily@20260601T120100Z", tenant_id=tenant)
                assert run.input == {"team": tenant}
            everyone = await docket.list_schedules(all_tenants=True)
            assert [(s.id, s.tenant_id) for s in everyone.schedules] == [
                ("daily", "acme"),
                ("daily", "globex"),
            ]

    asyncio.run(scenario())
