"""The live feed (``Feature.STREAMS``) on real Redis servers: commit notices published by
the transition scripts, emissions by clients, delivered across connections and Cluster
nodes, per tenant and per prefix, and resumed after a server restart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import timedelta

import pytest
from docket_contract_tests.fixtures import claimed, events_for, successor, unclaimed
from docket_redis import RedisBackend
from docket_redis._feed import notice_tail
from docket_redis.testing import (
    T0,
    RedisCluster,
    RedisServer,
    claim_one,
    opened,
    publish_graph,
    redis_server,
    start_run,
)

from docket.clock import ManualClock
from docket.contract import External, Feature, FeedSubscription, ReleaseClaim, StaleCheckpoint
from docket.records import (
    MAX_EMISSION_BYTES,
    SYSTEM,
    TENANTLESS,
    CommitNotice,
    Emission,
    FeedItem,
    OwnerScope,
    RunStatus,
    Tenant,
    feed_item_from_json,
    feed_item_to_json,
)

WAIT = 15.0


def _url(request: pytest.FixtureRequest, where: str) -> str:
    if where == "single":
        server: RedisServer = request.getfixturevalue("redis_single")
        return server.url
    cluster: RedisCluster = request.getfixturevalue("redis_cluster_nodes")
    return cluster.url


async def _until(
    subscription: FeedSubscription,
    done: Callable[[list[FeedItem]], bool],
    seen: list[FeedItem] | None = None,
) -> list[FeedItem]:
    """Collect items until ``done(items)`` holds; fail with what came after ``WAIT``."""
    items = seen if seen is not None else []
    deadline = time.monotonic() + WAIT
    while not done(items):
        left = deadline - time.monotonic()
        assert left > 0, f"not delivered in {WAIT}s; got {items!r}"
        items.extend(await subscription.get(min(left, 1.0)))
    return items


def _notices(items: Sequence[FeedItem]) -> list[CommitNotice]:
    return [item for item in items if isinstance(item, CommitNotice)]


def _notice(
    tenant_id: str | None, run_id: str | None, graph_id: str | None = None, *seqs: int
) -> CommitNotice:
    first, last = seqs or (0, 0)
    return CommitNotice(
        tenant_id=tenant_id, run_id=run_id, graph_id=graph_id, first_seq=first, last_seq=last
    )


def _emission(owner: OwnerScope, run_id: str, seq: int, data: object) -> Emission:
    return Emission(
        tenant_id=None if owner is TENANTLESS else "someone-else",  # the feed sets it
        run_id=run_id,
        node_id="n",
        task_id="t",
        attempt=1,
        seq=seq,
        kind="token",
        data=data,  # type: ignore[arg-type]
        at=T0,
    )


@pytest.mark.parametrize(
    ("tenant_id", "run_id", "graph_id", "last"),
    [(None, "r", "g", 0), ("acme", "run-1", "graph", 7), ('t\u00e9"n', "r\u2603", 'g"\\', 2**40)],
)
def test_the_notice_the_scripts_publish_is_the_shared_encoding(
    tenant_id: str | None, run_id: str, graph_id: str, last: int
) -> None:
    for first in (1, 9, last + 1):
        notice = _notice(tenant_id, run_id, graph_id, first, last)
        published = b'{"first_seq":%d' % first + notice_tail(tenant_id, run_id, graph_id, last)
        assert published == feed_item_to_json(notice)
        assert feed_item_from_json(published) == notice


@pytest.mark.parametrize("where", ["single", "cluster"])
def test_each_transition_is_noticed_on_another_connection(
    request: pytest.FixtureRequest, where: str, prefix: str
) -> None:
    url = _url(request, where)
    owner = Tenant("acme")

    async def body() -> None:
        clock = ManualClock(T0)
        async with (
            opened(url, prefix, clock=clock) as writer,
            opened(url, prefix, clock=clock) as reader,
        ):
            assert Feature.STREAMS in writer.capabilities().features
            subscription = await reader.feed.subscribe(SYSTEM)
            ref = await publish_graph(writer, owner)
            run = await start_run(writer, owner, "r1", ref, events=2)
            items = await _until(subscription, lambda got: len(_notices(got)) >= 1)
            assert _notices(items) == [_notice("acme", "r1", run.graph_id, 1, 2)]

            lease = await claim_one(writer, T0)
            stale = successor(run, T0, new_events=1)
            refused = await writer.transitions.commit_claimed(
                owner, claimed(stale, "not-the-holder"), events_for(stale, T0, [3])
            )
            assert isinstance(refused, StaleCheckpoint)  # publishes nothing
            step = successor(run, T0, new_events=1)
            assert (
                await writer.transitions.commit_claimed(
                    owner, claimed(step, lease.claim_token), events_for(step, T0, [3])
                )
                == step
            )
            parked = successor(step, T0, new_events=0, status=RunStatus.WAITING)
            assert (
                await writer.transitions.commit_claimed(
                    owner,
                    claimed(parked, lease.claim_token, schedule=ReleaseClaim(External())),
                    [],
                )
                == parked
            )
            nudged = successor(parked, T0, new_events=2, status=RunStatus.RUNNING)
            assert (
                await writer.transitions.commit_unclaimed(
                    owner, parked.checkpoint_seq, unclaimed(nudged), events_for(nudged, T0, [4, 5])
                )
                == nudged
            )
            items = await _until(subscription, lambda got: len(_notices(got)) >= 4, items)
            assert [(n.first_seq, n.last_seq) for n in _notices(items)] == [
                (1, 2),
                (3, 3),
                (4, 3),  # a commit without events: nothing new after 3
                (4, 5),
            ]
            assert {(n.tenant_id, n.run_id) for n in _notices(items)} == {("acme", "r1")}
            await subscription.close()

    asyncio.run(body())


@pytest.mark.parametrize("where", ["single", "cluster"])
def test_tenants_and_prefixes_are_isolated(
    request: pytest.FixtureRequest, where: str, prefix: str
) -> None:
    url = _url(request, where)
    tenants = [Tenant(f"tenant-{i}") for i in range(6)]  # spread over the cluster's nodes

    async def body() -> None:
        async with (
            opened(url, prefix) as writer,
            opened(url, prefix) as reader,
            opened(url, prefix + "x") as stranger,
        ):
            everyone = await reader.feed.subscribe(SYSTEM)
            first = await reader.feed.subscribe(tenants[0])
            nobody = await reader.feed.subscribe(TENANTLESS)
            other = await stranger.feed.subscribe(SYSTEM)
            for owner in tenants:
                ref = await publish_graph(writer, owner)
                await start_run(writer, owner, "r", ref, events=1)
            items = await _until(everyone, lambda got: len(got) >= len(tenants))
            assert sorted(n.tenant_id or "" for n in _notices(items)) == [t.id for t in tenants]
            mine = await _until(first, lambda got: len(got) >= 1)
            # the last tenant's notice is in `everyone`: any item for `first` has arrived too
            assert [n.tenant_id for n in _notices(mine)] == ["tenant-0"]
            assert await nobody.get(0) == []
            assert await other.get(0) == []
            # an emission reaches its tenant's and SYSTEM subscriptions only
            await writer.feed.publish(tenants[1], _emission(tenants[1], "r", 1, "hi"))
            got = await _until(everyone, lambda got: len(got) >= 1, [])
            assert got == [
                Emission(
                    tenant_id="tenant-1",
                    run_id="r",
                    node_id="n",
                    task_id="t",
                    attempt=1,
                    seq=1,
                    kind="token",
                    data="hi",
                    at=T0,
                )
            ]
            assert await first.get(0) == []
            assert await other.get(0) == []
            for subscription in (everyone, first, nobody, other):
                await subscription.close()

    asyncio.run(body())


@pytest.mark.parametrize("where", ["single", "cluster"])
def test_emissions_keep_order_and_64_kib_of_data(
    request: pytest.FixtureRequest, where: str, prefix: str
) -> None:
    url = _url(request, where)
    owner = Tenant("acme")
    # a JSON string of exactly MAX_EMISSION_BYTES canonical bytes (with its quotes)
    largest = "x" * (MAX_EMISSION_BYTES - 2)

    async def body() -> None:
        async with opened(url, prefix) as writer, opened(url, prefix) as reader:
            subscription = await reader.feed.subscribe(owner)
            for seq in range(1, 51):
                await writer.feed.publish(owner, _emission(owner, "r", seq, {"n": seq}))
            await writer.feed.publish(owner, _emission(owner, "r", 51, largest))
            await writer.feed.publish(owner, _emission(owner, "r", 52, largest + "y"))
            items = await _until(subscription, lambda got: len(got) >= 52)
            emissions = [item for item in items if isinstance(item, Emission)]
            assert [e.seq for e in emissions] == list(range(1, 53))
            assert [e.data for e in emissions[:50]] == [{"n": seq} for seq in range(1, 51)]
            assert emissions[50].data == largest
            assert emissions[51].data == {"overflow": True, "bytes": MAX_EMISSION_BYTES + 1}
            with pytest.raises(ValueError):
                await writer.feed.publish(SYSTEM, emissions[0])  # type: ignore[arg-type]
            await subscription.close()

    asyncio.run(body())


def test_a_server_restart_is_announced_and_the_feed_resumes(prefix: str) -> None:
    owner = Tenant("acme")
    with redis_server() as server:

        async def body() -> None:
            clock = ManualClock(T0)
            reader = RedisBackend.from_url(server.url, prefix=prefix, clock=clock)
            await reader.open()
            try:
                subscription = await reader.feed.subscribe(SYSTEM)
                await asyncio.to_thread(server.restart)  # loses everything: no AOF
                items = await _until(
                    subscription, lambda got: _notice(None, None) in got
                )  # the listener came back: re-read everything
                async with opened(server.url, prefix, clock=clock) as writer:
                    ref = await publish_graph(writer, owner)
                    await start_run(writer, owner, "r1", ref, wake_at=T0 + timedelta(hours=1))
                items = await _until(
                    subscription, lambda got: any(n.run_id == "r1" for n in _notices(got)), []
                )
                assert _notice("acme", "r1", "g", 1, 0) in items
                await subscription.close()
            finally:
                await reader.close()

        asyncio.run(body())
