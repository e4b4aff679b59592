"""Layout 4 (retention indexes, feed notices): a layout-3 namespace is refused untouched
until ``migrate``, which indexes its runs as written and ended at the migration — so
retention never deletes one earlier than its age asks — and rewrites nothing else."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import redis
from docket_contract_tests.fixtures import events_for, successor, unclaimed
from docket_redis import SCHEMA_VERSION, RedisBackend, SchemaTooOld
from docket_redis.keys import Namespace
from docket_redis.testing import (
    T0,
    RedisServer,
    dump,
    opened,
    publish_graph,
    start_run,
    with_prefix,
)

from docket.clock import ManualClock
from docket.contract import EventListQuery, NotFound, PruneResult, Terminal
from docket.records import SYSTEM, TENANTLESS, EventPage, OwnerScope, RunStatus, Tenant

HOUR = timedelta(hours=1)
US = timedelta(microseconds=1)


def test_a_layout_3_namespace_is_refused_until_migrated_then_indexed_for_retention(
    redis_single: RedisServer, prefix: str
) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_single.port)
    ns = Namespace(prefix)
    owners: list[OwnerScope] = [TENANTLESS, Tenant("acme")]
    clock = ManualClock(T0)
    later = T0 + timedelta(days=30)

    async def body() -> None:
        async with opened(redis_single.url, prefix, clock=clock) as backend:
            for owner in owners:
                ref = await publish_graph(backend, owner)
                await start_run(backend, owner, "live", ref, wake_at=later, events=3)
                old = await start_run(backend, owner, "old", ref, wake_at=later, events=1)
                done = successor(old, T0, new_events=1, status=RunStatus.DONE)
                got = await backend.transitions.commit_unclaimed(
                    owner, 1, unclaimed(done, wake=Terminal()), events_for(done, T0, [2])
                )
                assert got == done
        # what layout 3 stored: the same keys without the retention indexes
        for owner in owners:
            scope = ns.scope(owner)
            client.delete(
                scope.written,
                scope.finished,
                scope.commits_written("live"),
                scope.commits_written("old"),
            )
        client.set(ns.schema, "3")
        before = dump([redis_single.port], prefix)

        old_release = RedisBackend.from_url(with_prefix(redis_single.url, prefix))
        with pytest.raises(SchemaTooOld):
            await old_release.open()
        await old_release.close()
        assert client.get(ns.schema) == b"3"
        assert dump([redis_single.port], prefix) == before

        clock.advance(HOUR)  # the migration happens an hour after the runs were written
        migrating = RedisBackend.from_url(with_prefix(redis_single.url, prefix), clock=clock)
        assert await migrating.migrate() == (3, SCHEMA_VERSION)  # layout 5 moves no key
        assert await migrating.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)  # nothing to do
        await migrating.close()
        after = dump([redis_single.port], prefix)
        added = {key for key in after if key not in before}
        assert {key for key in before if after[key] != before[key]} == set()
        assert added == {
            k.encode()
            for owner in owners
            for k in (
                ns.scope(owner).written,
                ns.scope(owner).finished,
                ns.scope(owner).commits_written("live"),
                ns.scope(owner).commits_written("old"),
            )
        }

        async with opened(redis_single.url, prefix, clock=clock) as backend:
            # measured from the migration, not from when they were written: nothing yet
            at_migration = T0 + HOUR
            pruned = await backend.prune(event_age=HOUR, run_age=HOUR, now=at_migration + HOUR)
            assert pruned == PruneResult(True, 0, 0)
            pruned = await backend.prune(event_age=HOUR, now=at_migration + HOUR + US)
            assert pruned == PruneResult(True, 2 * (3 + 2), 0)
            pruned = await backend.prune(run_age=HOUR, now=at_migration + HOUR + US)
            assert pruned == PruneResult(True, 0, 2)
            for owner in owners:
                assert isinstance(await backend.runs.fetch_run(owner, "old"), NotFound)
                page = await backend.events.list_events(
                    owner, "live", EventListQuery(after_seq=0, limit=10)
                )
                assert isinstance(page, EventPage)
                assert (page.events, page.latest_seq) == ((), 3)
            # and the namespace works as layout 4: new commits are indexed and noticed
            subscription = await backend.feed.subscribe(SYSTEM)
            ref = await publish_graph(backend, TENANTLESS, "h")
            await start_run(backend, TENANTLESS, "new", ref, wake_at=later, events=1)
            items = await subscription.get(10)
            assert [getattr(item, "run_id", None) for item in items] == ["new"]
            await subscription.close()

    try:
        asyncio.run(body())
    finally:
        client.close()
