"""Layout 3 (durable time and schedules): a layout-2 namespace is refused untouched until
``migrate``, which rewrites no data; afterwards its runs read and claim as before and
the new parts (a waiting run due at a time, schedules) work on it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import redis
from docket_contract_tests.fixtures import claimed, successor
from docket_redis import SCHEMA_VERSION, RedisBackend, SchemaTooOld
from docket_redis.keys import Namespace
from docket_redis.testing import (
    T0,
    RedisServer,
    claim_one,
    dump,
    opened,
    publish_graph,
    start_run,
    with_prefix,
)

from docket.clock import ManualClock
from docket.contract import At, ReleaseClaim
from docket.records import TENANTLESS, CronSchedule, RunStatus, Tenant


def test_a_layout_2_namespace_is_refused_until_migrated_then_gains_time_and_schedules(
    redis_single: RedisServer, prefix: str
) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_single.port)
    schema = Namespace(prefix).schema
    owner = Tenant("acme")

    async def body() -> None:
        # what layout 2 stored: runs in the same keys, no schedule keys
        async with opened(redis_single.url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, owner)
            run = await start_run(backend, owner, "r1", ref)
            later = await start_run(backend, owner, "r2", ref, wake_at=T0 + timedelta(hours=1))
        client.set(schema, "2")
        before = dump([redis_single.port], prefix)

        old = RedisBackend.from_url(with_prefix(redis_single.url, prefix))
        with pytest.raises(SchemaTooOld) as refused:
            await old.open()
        await old.close()
        assert "docket migrate" in refused.value.advice()
        assert client.get(schema) == b"2"
        assert dump([redis_single.port], prefix) == before

        migrated = RedisBackend.from_url(with_prefix(redis_single.url, prefix))
        assert await migrated.migrate() == (2, SCHEMA_VERSION)
        await migrated.close()
        assert client.get(schema) == str(SCHEMA_VERSION).encode()
        assert dump([redis_single.port], prefix) == before  # no data rewritten

        async with opened(redis_single.url, prefix, clock=ManualClock(T0)) as backend:
            assert await backend.runs.fetch_run(owner, "r2") == later
            lease = await claim_one(backend, T0, orphan_ttl=timedelta(seconds=30))
            assert lease.run_id == "r1"
            deadline = T0 + timedelta(minutes=5)
            parked = successor(run, T0, status=RunStatus.WAITING)
            proposal = claimed(parked, lease.claim_token, schedule=ReleaseClaim(At(deadline)))
            assert await backend.transitions.commit_claimed(owner, proposal, []) == parked
            woken = await claim_one(backend, deadline)
            assert woken.run_id == "r1"
            made = await backend.schedules.create_schedule(
                TENANTLESS,
                CronSchedule(
                    id="nightly", graph_id="g", cron="0 3 * * *", created_at=T0, updated_at=T0
                ),
            )
            assert isinstance(made, CronSchedule)
            assert await backend.schedules.fetch_schedule(TENANTLESS, "nightly") == made

    try:
        asyncio.run(body())
    finally:
        client.close()


def test_layout_1_migrates_straight_to_the_current_one(
    redis_single: RedisServer, prefix: str
) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_single.port)
    schema = Namespace(prefix).schema

    async def body() -> None:
        async with opened(redis_single.url, prefix):
            pass
        client.set(schema, "1")
        backend = RedisBackend.from_url(with_prefix(redis_single.url, prefix))
        assert await backend.migrate() == (1, SCHEMA_VERSION)
        await backend.close()
        assert client.get(schema) == str(SCHEMA_VERSION).encode()

    try:
        asyncio.run(body())
    finally:
        client.close()
