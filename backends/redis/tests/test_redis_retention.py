"""Retention (``Feature.PRUNE``) on real Redis servers, beyond the kit's cases: passes
bounded across scopes on every Cluster node, a commit's range cut short by the batch,
nothing of a pruned run left behind, the live run kept, the pruning lock."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
import redis
from docket_contract_tests.fixtures import events_for, successor, unclaimed
from docket_redis import RedisBackend
from docket_redis.keys import Namespace
from docket_redis.testing import (
    T0,
    RedisCluster,
    RedisServer,
    dump,
    opened,
    publish_graph,
    start_run,
)

from docket.clock import ManualClock
from docket.contract import EventListQuery, NotFound, PruneResult, RunListQuery, Terminal
from docket.records import SYSTEM, EventPage, GraphRef, OwnerScope, Run, RunStatus, Tenant

HOUR = timedelta(hours=1)
US = timedelta(microseconds=1)
LATER = T0 + timedelta(days=1)  # no run of these tests is due before then


def _where(request: pytest.FixtureRequest, where: str) -> tuple[str, list[int]]:
    if where == "single":
        server: RedisServer = request.getfixturevalue("redis_single")
        return server.url, [server.port]
    cluster: RedisCluster = request.getfixturevalue("redis_cluster_nodes")
    return cluster.url, cluster.ports


async def _finish(
    backend: RedisBackend, owner: OwnerScope, run: Run, at: datetime, events: int = 1
) -> Run:
    """Commit ``run`` (unclaimed) to done at ``at`` with ``events`` more events."""
    done = successor(run, at, new_events=events, status=RunStatus.DONE)
    seqs = range(run.event_seq + 1, run.event_seq + events + 1)
    got = await backend.transitions.commit_unclaimed(
        owner, run.checkpoint_seq, unclaimed(done, wake=Terminal()), events_for(done, at, seqs)
    )
    assert got == done
    return done


async def _page(backend: RedisBackend, owner: OwnerScope, run_id: str) -> EventPage:
    page = await backend.events.list_events(owner, run_id, EventListQuery(after_seq=0, limit=100))
    assert isinstance(page, EventPage)
    return page


@pytest.mark.parametrize("where", ["single", "cluster"])
def test_passes_are_bounded_across_scopes_and_leave_nothing_of_a_pruned_run(
    request: pytest.FixtureRequest, where: str, prefix: str
) -> None:
    url, ports = _where(request, where)
    tenants: list[OwnerScope] = [Tenant(f"tenant-{i}") for i in range(6)]  # every node
    clock = ManualClock(T0)

    async def body() -> None:
        async with opened(url, prefix, clock=clock) as backend:
            refs: dict[OwnerScope, GraphRef] = {}
            for owner in tenants:
                refs[owner] = await publish_graph(backend, owner)
                await start_run(backend, owner, "live", refs[owner], wake_at=LATER, events=2)
                old = await start_run(backend, owner, "old", refs[owner], wake_at=LATER, events=1)
                await _finish(backend, owner, old, T0)
            kept = dump(ports, prefix)
            clock.advance(HOUR)
            # written after the cut: kept by every pass below
            fresh = await start_run(backend, tenants[0], "fresh", refs[tenants[0]], wake_at=LATER)
            await _finish(backend, tenants[0], fresh, T0 + HOUR)

            cut = T0 + HOUR + US  # T0's rows are older than an hour, T0 + 1h's are not
            assert await backend.prune(event_age=HOUR, batch_size=5, now=cut) == PruneResult(
                True, 5, 0
            )
            total = 5
            while (step := await backend.prune(event_age=HOUR, batch_size=5, now=cut)).events:
                assert step.events <= 5
                total += step.events
            assert total == len(tenants) * 4  # live 1..2 and old 1..2 of each tenant
            for owner in tenants:
                live_page = await _page(backend, owner, "live")
                assert (live_page.events, live_page.latest_seq) == ((), 2)
                assert (await _page(backend, owner, "old")).latest_seq == 2
            assert [e.seq for e in (await _page(backend, tenants[0], "fresh")).events] == [1]

            assert await backend.prune(run_age=HOUR, batch_size=4, now=cut) == PruneResult(
                True, 0, 4
            )
            assert await backend.prune(run_age=HOUR, batch_size=4, now=cut) == PruneResult(
                True, 0, 2
            )
            assert await backend.prune(run_age=HOUR, now=cut) == PruneResult(True, 0, 0)
            for owner in tenants:
                assert isinstance(await backend.runs.fetch_run(owner, "old"), NotFound)
                assert isinstance(
                    await backend.events.list_events(
                        owner, "old", EventListQuery(after_seq=0, limit=10)
                    ),
                    NotFound,
                )
                kept_run = await backend.runs.fetch_run(owner, "live")
                assert isinstance(kept_run, Run) and kept_run.status is RunStatus.RUNNING
            page = await backend.runs.list_runs(SYSTEM, RunListQuery(limit=100))
            assert sorted((r.tenant_id or "", r.id) for r in page.runs) == sorted(
                [(t.id, "live") for t in tenants if isinstance(t, Tenant)] + [("tenant-0", "fresh")]
            )
            done = RunListQuery(limit=100, statuses=frozenset({RunStatus.DONE}))
            page = await backend.runs.list_runs(SYSTEM, done)
            assert [(r.tenant_id, r.id) for r in page.runs] == [("tenant-0", "fresh")]
            # nothing of an "old" run is left: no key, no index entry
            left = dump(ports, prefix)
            for key, (kind, value) in left.items():
                assert b":old" not in key, key
                if kind == b"zset":  # run ids, or index members ending in ':<run id>'
                    assert not [m for m, _ in value if m == b"old" or m.endswith(b":old")], key
                elif kind == b"hash":  # summaries: run id -> summary
                    assert b"old" not in value, key
            assert [key for key in kept if key.endswith(b":r:old")]  # there were some

    asyncio.run(body())


def test_a_commit_cut_short_by_the_batch_keeps_the_rest_of_its_range(
    redis_single: RedisServer, prefix: str
) -> None:
    owner = Tenant("acme")
    clock = ManualClock(T0)

    async def body() -> None:
        async with opened(redis_single.url, prefix, clock=clock) as backend:
            ref = await publish_graph(backend, owner)
            run = await start_run(backend, owner, "r", ref, wake_at=LATER, events=5)
            clock.advance(HOUR)
            nxt = successor(run, T0 + HOUR, new_events=1)
            got = await backend.transitions.commit_unclaimed(
                owner, run.checkpoint_seq, unclaimed(nxt), events_for(nxt, T0 + HOUR, [6])
            )
            assert got == nxt
            cut = T0 + HOUR
            assert await backend.prune(event_age=HOUR, batch_size=2, now=cut + US) == PruneResult(
                True, 2, 0
            )
            page = await _page(backend, owner, "r")
            assert ([e.seq for e in page.events], page.oldest_available_seq) == ([3, 4, 5, 6], 3)
            # the rest of the first commit keeps its time: the second commit's event stays
            assert await backend.prune(event_age=HOUR, batch_size=9, now=cut + US) == PruneResult(
                True, 3, 0
            )
            assert [e.seq for e in (await _page(backend, owner, "r")).events] == [6]
            assert await backend.prune(event_age=HOUR, now=cut + HOUR) == PruneResult(True, 0, 0)
            assert await backend.prune(event_age=HOUR, now=cut + HOUR + US) == PruneResult(
                True, 1, 0
            )
            page = await _page(backend, owner, "r")
            assert (page.events, page.latest_seq, page.oldest_available_seq) == ((), 6, None)

    asyncio.run(body())


def test_a_pass_while_another_pruner_holds_the_lock_does_nothing(
    redis_single: RedisServer, prefix: str
) -> None:
    owner = Tenant("acme")
    client = redis.Redis(host="127.0.0.1", port=redis_single.port)

    async def body() -> None:
        async with opened(redis_single.url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, owner)
            await start_run(backend, owner, "r", ref, wake_at=LATER, events=2)
            lock = Namespace(prefix).prune_lock
            client.set(lock, "someone-else")
            before = dump([redis_single.port], prefix)
            cut = T0 + HOUR + US
            assert await backend.prune(event_age=HOUR, now=cut) == PruneResult(False, 0, 0)
            assert dump([redis_single.port], prefix) == before
            assert client.get(lock) == b"someone-else"  # not released by the refused pass
            client.delete(lock)
            assert await backend.prune(event_age=HOUR, now=cut) == PruneResult(True, 2, 0)
            assert client.exists(lock) == 0  # released after the pass

    try:
        asyncio.run(body())
    finally:
        client.close()


def test_a_reopened_failed_run_is_live_again_and_never_pruned_as_finished(
    redis_single: RedisServer, prefix: str
) -> None:
    owner = Tenant("acme")
    clock = ManualClock(T0)

    async def body() -> None:
        async with opened(redis_single.url, prefix, clock=clock) as backend:
            ref = await publish_graph(backend, owner)
            run = await start_run(backend, owner, "r", ref, wake_at=LATER)
            failed = successor(run, T0, status=RunStatus.FAILED)
            got = await backend.transitions.commit_unclaimed(
                owner, run.checkpoint_seq, unclaimed(failed, wake=Terminal()), []
            )
            assert got == failed
            reopened = successor(failed, T0, status=RunStatus.RUNNING, failure=None)
            got = await backend.transitions.commit_unclaimed(
                owner, failed.checkpoint_seq, unclaimed(reopened), []
            )
            assert got == reopened
            # out of the finished index (a pass would otherwise re-read it every time)
            finished = Namespace(prefix).scope(owner).finished
            client = redis.Redis(host="127.0.0.1", port=redis_single.port)
            try:
                assert client.zscore(finished, "r") is None
            finally:
                client.close()
            assert await backend.prune(run_age=HOUR, now=T0 + HOUR + US) == PruneResult(True, 0, 0)
            assert await backend.runs.fetch_run(owner, "r") == reopened
            # and when it finishes again, it is indexed from that second end
            clock.advance(2 * HOUR)
            done = successor(reopened, T0 + 2 * HOUR, status=RunStatus.DONE)
            got = await backend.transitions.commit_unclaimed(
                owner, reopened.checkpoint_seq, unclaimed(done, wake=Terminal()), []
            )
            assert got == done
            cut = T0 + 3 * HOUR
            assert await backend.prune(run_age=HOUR, now=cut) == PruneResult(True, 0, 0)
            assert await backend.prune(run_age=HOUR, now=cut + US) == PruneResult(True, 0, 1)

    asyncio.run(body())
