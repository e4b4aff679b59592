"""Redis Cluster specifics: scopes spread over the masters, each script on one slot,
claims and SYSTEM listings across nodes, wake-ups from any node, script reload."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import redis
from docket_contract_tests.fixtures import claimed, successor
from docket_redis.keys import Namespace
from docket_redis.testing import T0, RedisCluster, opened, publish_graph, start_run
from redis.crc import key_slot

from docket.clock import ManualClock
from docket.contract import ClaimBatch, ClaimPolicy, ReleaseClaim, RunListQuery, Terminal
from docket.records import SYSTEM, OwnerScope, RunStatus, Tenant


def _node_of_slot(cluster: RedisCluster) -> dict[int, int]:
    """slot -> port of the master serving it."""
    client = redis.Redis(host="127.0.0.1", port=cluster.ports[0])
    try:
        owner: dict[int, int] = {}
        for start, end, master, *_ in client.execute_command("CLUSTER SLOTS"):  # type: ignore[no-untyped-call]
            for slot in range(int(start), int(end) + 1):
                owner[slot] = int(master[1])
        return owner
    finally:
        client.close()


def test_tenants_spread_over_the_masters(redis_cluster_nodes: RedisCluster, prefix: str) -> None:
    clock = ManualClock(T0)
    tenants: list[OwnerScope] = [Tenant(f"tenant-{i}") for i in range(12)]
    slots = _node_of_slot(redis_cluster_nodes)

    async def body() -> None:
        async with opened(redis_cluster_nodes.url, prefix, clock=clock) as backend:
            for index, owner in enumerate(tenants):
                ref = await publish_graph(backend, owner)
                await start_run(
                    backend, owner, "run", ref, wake_at=T0 + timedelta(seconds=index % 4)
                )
            # every key of one scope is on one slot; the scopes use every master
            ns = Namespace(prefix)
            ports = set()
            for owner in tenants:
                keys = ns.scope(owner)
                names = [keys.run("run"), keys.events("run"), keys.ready, keys.summaries]
                assert len({key_slot(n.encode()) for n in names}) == 1
                ports.add(slots[key_slot(keys.ready.encode())])
            assert ports == set(redis_cluster_nodes.ports)
            # one claim over all masters, in (wake, run id, tenant) order
            batch = await backend.runs.claim_due(
                ClaimPolicy(limit=5, orphan_ttl=timedelta(minutes=1), max_claim_attempts=3, now=T0)
            )
            assert isinstance(batch, ClaimBatch)
            due_first = sorted(str(o) for i, o in enumerate(tenants) if i % 4 == 0)
            assert [str(lease.owner) for lease in batch.leases] == due_first
            # a SYSTEM listing merges every master's scopes, newest first
            listed = await backend.runs.list_runs(SYSTEM, RunListQuery(limit=100))
            assert len(listed.runs) == len(tenants)
            # a release announced on one master wakes a waiter subscribed through another
            lease = batch.leases[-1]
            waiting = asyncio.create_task(backend.wait_for_work(5))
            await asyncio.sleep(0.05)
            started = time.monotonic()
            await backend.runs.release_claim(lease.owner, lease.run_id, lease.claim_token)
            assert await waiting is True
            assert time.monotonic() - started < 0.5

    asyncio.run(body())


def test_scripts_reload_on_every_master(redis_cluster_nodes: RedisCluster, prefix: str) -> None:
    clock = ManualClock(T0)

    async def body() -> None:
        async with opened(redis_cluster_nodes.url, prefix, clock=clock) as backend:
            owners: list[OwnerScope] = [Tenant(f"x{i}") for i in range(6)]
            runs = {}
            for owner in owners:
                runs[str(owner)] = await start_run(
                    backend, owner, "r", await publish_graph(backend, owner)
                )
            for port in redis_cluster_nodes.ports:
                client = redis.Redis(host="127.0.0.1", port=port)
                client.script_flush()
                client.close()
            batch = await backend.runs.claim_due(
                ClaimPolicy(limit=10, orphan_ttl=timedelta(minutes=1), max_claim_attempts=3)
            )
            assert isinstance(batch, ClaimBatch) and len(batch.leases) == len(owners)
            for lease in batch.leases:
                run = runs[str(lease.owner)]
                done = successor(run, T0, status=RunStatus.DONE)
                proposal = claimed(done, lease.claim_token, schedule=ReleaseClaim(Terminal()))
                answer = await backend.transitions.commit_claimed(lease.owner, proposal, [])
                assert answer == done

    asyncio.run(body())
