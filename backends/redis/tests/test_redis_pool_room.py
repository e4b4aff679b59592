"""More callers than the connection pool holds queue for a connection instead of failing.

redis-py refuses a connection past the pool's limit at once (``MaxConnectionsError``); a
hundred streams re-reading after one commit, or a wide worker, would have had commands
fail that only needed to wait (docket_redis.transport._with_room)."""

from __future__ import annotations

import asyncio

import pytest
from docket_redis.testing import RedisCluster, RedisServer, opened, publish_graph, start_run

from docket.contract import EventListQuery
from docket.records import TENANTLESS, EventPage

CALLERS = 250  # the pool holds 100 (redis-py's default)


@pytest.mark.parametrize("where", ["single", "cluster"])
def test_callers_beyond_the_pool_wait_for_a_connection(
    request: pytest.FixtureRequest, where: str, prefix: str
) -> None:
    if where == "single":
        server: RedisServer = request.getfixturevalue("redis_single")
        url = server.url
    else:
        cluster: RedisCluster = request.getfixturevalue("redis_cluster_nodes")
        url = cluster.url

    async def body() -> None:
        async with opened(url, prefix) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            await start_run(backend, TENANTLESS, "crowded", ref, events=3)
            query = EventListQuery(after_seq=0, limit=10)
            pages = await asyncio.gather(
                *(backend.events.list_events(TENANTLESS, "crowded", query) for _ in range(CALLERS))
            )
            assert all(isinstance(p, EventPage) and len(p.events) == 3 for p in pages)

    asyncio.run(body())
