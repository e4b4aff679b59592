"""The worker's pruning loop (docket/runtime/retention.py): off by default, validated
settings, and a worker that prunes finished runs by age — in-process on the memory
backend with a manual clock, and as a real ``docket worker --prune-runs-after``
subprocess on PostgreSQL."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from datetime import timedelta

import pytest

from docket import Docket, errors
from docket.clock import ManualClock
from docket.contract.memory import MemoryBackend
from docket.records import RunStatus
from docket.runtime.retention import Pruner
from docket.settings import Settings
from tests.cli.helpers import ROOT, cli_env, docket_command
from tests.facade.history_app import NODES, ticker
from tests.fuzz.backends import backend_url
from tests.runtime.helpers import T0


def test_retention_is_off_by_default_and_its_settings_are_checked() -> None:
    assert Pruner.of(MemoryBackend(), Settings()) is None
    assert Pruner.of(MemoryBackend(), Settings(prune_runs_after=60)) is not None
    for bad in (
        {"prune_events_after": 0},
        {"prune_runs_after": -1.0},
        {"prune_runs_after": "7d"},
        {"prune_every": 0},
    ):
        with pytest.raises(errors.InvalidSettings):
            Settings(**bad).validate()


async def _until(check: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert callable(check)
        if await check():
            return
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_worker_prunes_finished_runs_by_age_on_the_backend_clock() -> None:
    async def scenario() -> None:
        clock = ManualClock(T0)
        backend = MemoryBackend(clock=clock)
        docket = Docket(
            backend, nodes=NODES, poll_interval=0.05, prune_runs_after=3600, prune_every=0.05
        )
        async with docket, docket.worker():
            run = await docket.start_run(await docket.save_graph(ticker(2)))

            async def finished() -> bool:
                return (await docket.fetch_run(run.id)).status is RunStatus.DONE

            await _until(finished, "the run to finish")
            live = await docket.start_run(
                await docket.save_graph(ticker(2)), start_at=T0 + timedelta(days=9)
            )
            clock.advance(timedelta(minutes=59))  # not old enough yet: passes keep it

            pruner = docket._workers[0]._pruner
            assert pruner is not None
            target = pruner.passes + 2

            async def two_more_passes() -> bool:
                return pruner.passes >= target

            await _until(two_more_passes, "two more passes")
            assert (await docket.fetch_run(run.id)).status is RunStatus.DONE
            clock.advance(timedelta(minutes=2))

            async def gone() -> bool:
                try:
                    await docket.fetch_run(run.id)
                except errors.NotFound:
                    return True
                return False

            await _until(gone, "the finished run to be pruned")
            # a run that has not finished is never pruned by age
            assert (await docket.fetch_run(live.id)).status is RunStatus.RUNNING

    asyncio.run(scenario())


def test_docket_worker_prune_options_on_postgres() -> None:
    url = backend_url("postgres")
    env = cli_env({"DOCKET_BACKEND": url})
    worker = subprocess.Popen(
        [
            *docket_command(),
            "worker",
            "--app",
            "tests.facade.history_app:create",
            "--prune-runs-after",
            "1s",
            "--prune-every",
            "0.2s",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    async def scenario() -> str | None:
        async with Docket(url, nodes=NODES) as docket:
            run = await docket.start_run(await docket.save_graph(ticker(2)))
            deadline = time.monotonic() + 60
            finished = False
            while time.monotonic() < deadline and worker.poll() is None:
                try:
                    found = await docket.fetch_run(run.id)
                except errors.NotFound:
                    return None if finished else "the run vanished before it finished"
                finished = finished or found.status is RunStatus.DONE
                await asyncio.sleep(0.05)
            return f"run {run.id} was not pruned (finished: {finished})"

    try:
        problem = asyncio.run(scenario())
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            out, err = worker.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            out, err = worker.communicate()
    report = f"worker exit {worker.returncode}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert problem is None, f"{problem}\n{report}"
    assert worker.returncode == 0, report
