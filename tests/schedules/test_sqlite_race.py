"""Several processes ticking one SQLite file: every per-second tick gets exactly one run,
written by exactly one process (the run id and the version fence, across processes)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from docket.facade import Docket
from docket.schedules import run_id_for
from tests.schedules.helpers import nodes, report_graph

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = 4
SECONDS = 4.0


def test_ticker_processes_on_one_sqlite_file_start_one_run_per_tick(tmp_path: Path) -> None:
    db = tmp_path / "race.db"

    async def create() -> None:
        async with Docket(f"sqlite:///{db}", nodes=nodes) as docket:
            await docket.save_graph(report_graph())
            # catch-up of an hour and overlap allow: a process held up on a loaded host
            # still starts every tick, so the runs must cover every second exactly
            await docket.create_schedule(
                "race",
                "report",
                cron="* * * * * *",
                input={"team": "a"},
                overlap="allow",
                catchup=timedelta(hours=1),
            )

    asyncio.run(create())
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.schedules.sqlite_ticker", str(db), str(SECONDS)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    outputs = [child.communicate(timeout=120) for child in children]
    failures = [
        f"process {i}: exit {child.returncode}\nstderr tail: {err[-2000:]}"
        for i, (child, (_, err)) in enumerate(zip(children, outputs, strict=True))
        if child.returncode != 0
    ]
    assert not failures, "\n".join(failures)
    started = [json.loads(out.splitlines()[-1])["started"] for out, _ in outputs]

    async def read() -> tuple[list[str], list[str]]:
        async with Docket(f"sqlite:///{db}", nodes=nodes) as docket:
            schedule = await docket.get_schedule("race")
            assert schedule.last_tick_at is not None
            first = schedule.created_at.replace(microsecond=0) + timedelta(seconds=1)
            ticks = int((schedule.last_tick_at - first).total_seconds()) + 1
            expected = [run_id_for("race", first + timedelta(seconds=s)) for s in range(ticks)]
            page = await docket.list_runs(limit=1000)
            return expected, sorted(r.id for r in page.runs)

    expected, runs = asyncio.run(read())
    assert len(expected) >= 2, f"only {len(expected)} ticks in {SECONDS} s"
    assert runs == expected
    written = [run_id for per_process in started for run_id in per_process]
    assert sorted(written) == expected, f"per process: {[len(s) for s in started]}"
