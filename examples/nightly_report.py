"""Nightly report: a cron schedule starts one run per night, through a DST change.

The schedule says "02:00 every night, New York time". The script drives a manual clock
from night to night (so three nights take a second), and an in-process worker — whose
ticker starts each due tick's run — builds the report. On 2026-03-08 New York skips from
02:00 to 03:00: that night's run starts at 03:00 local (07:00 UTC), once. Then the script
triggers one run by hand and shows a paused schedule making up nothing on resume.

    python examples/nightly_report.py
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from docket import (
    FINISH,
    START,
    Docket,
    GraphBuilder,
    NodeContext,
    NodeRegistry,
    NodeState,
    S,
    Update,
)
from docket.clock import ManualClock
from docket.contract.memory import MemoryBackend
from docket.errors import NotFound
from docket.records import SCHEDULE_KEY, Run
from docket.schedules import run_id_for

NEW_YORK = ZoneInfo("America/New_York")
nodes = NodeRegistry()


@nodes.node("report.build")
def build(state: NodeState, ctx: NodeContext) -> Update:
    return Update({"report": f"{state['team']} report of {ctx.run_id}"})


graph = (
    GraphBuilder("nightly-report")
    .input("team", S.string(), required=True)
    .field("report", S.string())
    .node("build", "report.build")
    .edge("begin", START, "build")
    .edge("end", "build", FINISH)
    .output("report")
    .build()
)


async def finished(docket: Docket, run_id: str) -> Run:
    """The run once it is done (the worker's ticker starts it within a poll or two)."""
    for _ in range(600):
        try:
            return await docket.await_run(run_id, timeout=30)
        except NotFound:
            await asyncio.sleep(0.05)  # not started yet: the ticker polls every 50 ms
    raise TimeoutError(f"run {run_id} was never started")


async def main() -> None:
    clock = ManualClock(datetime(2026, 3, 6, 12, 0, tzinfo=UTC))
    backend = MemoryBackend(clock=clock)
    async with Docket(backend, nodes=nodes, poll_interval=0.05, schedule_poll=0.05) as docket:
        await docket.save_graph(graph)
        schedule = await docket.create_schedule(
            "nightly",
            "nightly-report",
            cron="0 2 * * *",
            timezone="America/New_York",
            input={"team": "ops"},
        )
        print(f"schedule {schedule.id}: {schedule.cron} ({schedule.timezone})")
        async with docket.worker():
            for _ in range(3):
                tick = (await docket.get_schedule("nightly")).next_tick_at
                assert tick is not None
                clock.set(tick + timedelta(seconds=1))
                run = await finished(docket, run_id_for("nightly", tick))
                local = tick.astimezone(NEW_YORK)
                when = run.metadata[SCHEDULE_KEY]
                print(f"night {local:%Y-%m-%d %H:%M %Z}: run {run.id} is {run.status} ({when})")
            manual = await docket.trigger_schedule("nightly")
            await finished(docket, manual.id)
            print(f"triggered by hand: run {manual.id.split('_')[0]}_... is done")
            await docket.pause_schedule("nightly")
            clock.advance(timedelta(days=5))
            resumed = await docket.resume_schedule("nightly")
            print(f"resumed after 5 paused days; next tick {resumed.next_tick_at:%Y-%m-%d %H:%MZ}")
        page = await docket.list_runs()
        print(f"{len(page.runs)} runs in all (3 nights + 1 by hand; the pause made up none)")


if __name__ == "__main__":
    asyncio.run(main())
