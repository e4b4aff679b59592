"""A map graph whose item 1 fails once, driven on a SQLite file with a manual clock: the
CLI and console tests of a map's items read the run at each stage (parked, then done)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from docket_sqlite import SQLiteBackend

from docket import FINISH, START, Docket, GraphBuilder, NodeContext, NodeRegistry, NodeState, R, S
from docket.clock import ManualClock
from docket.graph.maps import MapSpec
from docket.graph.nodes import RetryPolicy
from docket.records import Run, RunStatus
from docket.values import JSONDict

NODES = NodeRegistry()
BACKOFF: Final = timedelta(minutes=10)
RUN_ID: Final = "squares-1"


@NODES.node("squares.split")
def split(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"items": list(range(int(str(state["count"]))))}


@NODES.node("squares.square")
def square(state: NodeState, ctx: NodeContext) -> JSONDict:
    if ctx.item_index == 1 and ctx.attempt == 1:
        raise RuntimeError("item 1 fails once")
    item = ctx.item
    assert isinstance(item, int)
    return {"squares": item * item}


GRAPH = (
    GraphBuilder("squares")
    .input("count", S.integer(min=0), required=True)
    .field("items", S.list(S.integer()))
    .field("squares", S.list(S.integer()), reducer=R.append())
    .node("split", "squares.split")
    .node(
        "square",
        "squares.square",
        map=MapSpec(over="items", item="n"),
        retry=RetryPolicy(max_attempts=2, backoff_ms=int(BACKOFF.total_seconds() * 1000)),
    )
    .edge("a", START, "split")
    .edge("b", "split", "square")
    .edge("c", "square", FINISH)
    .output("squares")
    .build()
)


class MapRun:
    """The run's stages; every stage opens its own ``Docket`` on the same file."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.url = f"sqlite:///{db}"
        self.clock = ManualClock(datetime.now(UTC))

    async def _drain(self, docket: Docket, until: RunStatus | None) -> Run:
        # each drain takes what is due; the run settles in a few (no sleeping)
        for _ in range(10):
            await docket.drain_due()
            run = await docket.fetch_run(RUN_ID)
            if until is None and run.active_tasks:  # parked for item 1's retry
                return run
            if until is not None and run.status is until:
                return run
        raise AssertionError(f"run {RUN_ID} did not settle: {run.status}, {run.active_tasks}")

    def parked(self, count: int = 4) -> Run:
        """Start the run and drain until item 1 waits for its retry."""

        async def go() -> Run:
            async with Docket(SQLiteBackend(self.db, clock=self.clock), nodes=NODES) as docket:
                ref = await docket.save_graph(GRAPH)
                await docket.start_run(ref, {"count": count}, run_id=RUN_ID)
                return await self._drain(docket, None)

        return asyncio.run(go())

    def finished(self) -> Run:
        """Move the clock past the backoff and drain until the run is done."""

        async def go() -> Run:
            self.clock.advance(BACKOFF + timedelta(seconds=1))
            async with Docket(SQLiteBackend(self.db, clock=self.clock), nodes=NODES) as docket:
                return await self._drain(docket, RunStatus.DONE)

        return asyncio.run(go())
