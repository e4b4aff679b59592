"""A drain reads the store's clock once per superstep (a round trip on server backends).

The first superstep starts at the claim's own store timestamp; each later one starts at
the time the previous superstep settled. The clock here ticks a millisecond per read, so
every read is visible in the stored timestamps.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from docket import FINISH, START, GraphBuilder, NodeRegistry
from docket.contract.memory import MemoryBackend
from docket.graph.nodes import NodeContext, NodeState
from docket.graph.schema import S
from docket.records import RunStatus
from docket.values import JSONDict
from tests.runtime.helpers import check_events, memory_docket

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
NODES = NodeRegistry()
CHAIN = 10


@NODES.node("step")
def step(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"count": int(str(state.get("count", 0))) + 1}


class TickingClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


class CountingBackend(MemoryBackend):
    """The reference backend, counting how often the runtime asks for the time."""

    reads = 0

    async def now(self) -> datetime:
        self.reads += 1
        return await super().now()


def chain() -> GraphBuilder:
    builder = GraphBuilder("chain").field("count", S.integer())
    for i in range(CHAIN):
        builder.node(f"n{i}", "step")
    builder.edge("start", START, "n0").edge("done", f"n{CHAIN - 1}", FINISH)
    for i in range(CHAIN - 1):
        builder.edge(f"e{i}", f"n{i}", f"n{i + 1}")
    return builder.output("count")


def test_a_drain_reads_the_store_clock_once_per_superstep() -> None:
    async def scenario() -> None:
        clock = TickingClock()
        backend = CountingBackend(clock=clock)
        docket, _, _ = memory_docket(backend=backend, nodes=NODES)
        async with docket:
            ref = await docket.save_graph(chain().build())
            await docket.start_run(ref, {}, run_id="chain")
            before = backend.reads
            summary = await docket.drain_due()
            reads = backend.reads - before
            assert [o.kind for o in summary.outcomes] == ["parked"]
            done = await docket.fetch_run("chain")
            assert done.status is RunStatus.DONE and done.output == {"count": CHAIN}
            # one read per superstep with node work (before: two), plus at most the claim's
            assert CHAIN <= reads <= CHAIN + 2, reads
            events = await docket.history("chain")
            check_events(done, events)
            stamps = [e.timestamp for e in events]
            assert stamps == sorted(stamps), "time never goes backwards within a run"
            # every stamp is a reading of the store's clock, never invented
            assert all(T0 < stamp <= clock.now for stamp in stamps)

    asyncio.run(scenario())
