"""A task cancelled while it talks to Redis stops (docket_redis.transport.keep_cancel).

redis-py can swallow a cancellation that lands in one of its own waits (Python 3.11's
``wait_for`` race while a connection is made): the task then runs on as if it had never
been cancelled. A stream following a run on Redis could not be stopped that way; it
went on re-reading forever. Without ``keep_cancel`` most of the rounds below lose
their cancel."""

from __future__ import annotations

import asyncio

import pytest
from docket_redis.testing import RedisCluster, RedisServer, opened, publish_graph, start_run

from docket.contract import EventListQuery
from docket.records import TENANTLESS

ROUNDS = 60
STOP_WITHIN = 10.0  # seconds: generous for a loaded machine; a lost cancel never stops


@pytest.mark.parametrize("where", ["single", "cluster"])
def test_a_cancelled_reader_stops(request: pytest.FixtureRequest, where: str, prefix: str) -> None:
    if where == "single":
        server: RedisServer = request.getfixturevalue("redis_single")
        url = server.url
    else:
        cluster: RedisCluster = request.getfixturevalue("redis_cluster_nodes")
        url = cluster.url

    async def body() -> None:
        async with opened(url, prefix) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            await start_run(backend, TENANTLESS, "reader", ref, events=3)
            query = EventListQuery(after_seq=0, limit=10)
            reads = [0] * ROUNDS
            lost: list[str] = []
            for index in range(ROUNDS):

                async def read_forever(index: int = index) -> None:
                    while True:
                        await backend.events.list_events(TENANTLESS, "reader", query)
                        reads[index] += 1

                task = asyncio.create_task(read_forever())
                await asyncio.sleep(0.001 * (index % 7))  # land the cancel at varied points
                task.cancel()
                done, _ = await asyncio.wait({task}, timeout=STOP_WITHIN)
                if not done:
                    lost.append(f"round {index} still running after {reads[index]} reads")
                    while not task.done():  # stop it for good before the next round
                        task.cancel()
                        await asyncio.wait({task}, timeout=0.5)
                elif not task.cancelled():
                    lost.append(f"round {index} ended with {task.exception()!r}")
            assert not lost, f"{len(lost)} of {ROUNDS} cancels lost: {lost[:5]}"

    asyncio.run(body())
