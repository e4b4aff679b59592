"""Child runs on a real Redis server and a real Redis Cluster: the shared end-to-end
scenario (tests/runtime/child_scenarios.py) through a real worker. On the Cluster the
parent and its children share the tenant's hash slot, but nothing relies on it: each
step of the protocol is a commit of one run."""

from __future__ import annotations

import asyncio

from docket_redis.testing import RedisCluster, RedisServer, with_prefix

from docket import Docket
from tests.runtime import child_scenarios as e2e


def _run(url: str) -> None:
    async def scenario() -> None:
        async with Docket(url, **e2e.options()) as d:
            await e2e.run_scenario(d)

    asyncio.run(scenario())


def test_children_end_to_end_on_redis(redis_single: RedisServer, prefix: str) -> None:
    _run(with_prefix(redis_single.url, prefix))


def test_children_end_to_end_on_a_redis_cluster(
    redis_cluster_nodes: RedisCluster, prefix: str
) -> None:
    _run(with_prefix(redis_cluster_nodes.url, prefix))
