"""Claimed starts (``ClaimedStarts``) at the key level: a run ``initialize_claimed`` writes
is stored exactly as ``claim_due`` leases one — same run-hash fields, same index
memberships — and is neither announced nor due; its claim expires like any other."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import redis
from docket_contract_tests.fixtures import events_for, init_proposal, new_run
from docket_redis.keys import Namespace, ScopeKeys, index_member
from docket_redis.testing import (
    T0,
    RedisCluster,
    RedisServer,
    claim_one,
    opened,
    publish_graph,
    start_run,
)

from docket.clock import ManualClock
from docket.contract import ClaimBatch, ClaimLost, ClaimPolicy, Conflict
from docket.records import TENANTLESS, OwnerScope, Run, RunInfo, RunStatus, Tenant
from docket.values import to_micros

TTL = timedelta(seconds=60)
US = timedelta(microseconds=1)
EAGER, PLAIN = "run-eager", "run-plain"  # one length: documents differ only in the id


def _claim(now: datetime) -> ClaimPolicy:
    return ClaimPolicy(limit=10, orphan_ttl=TTL, max_claim_attempts=5, now=now)


def _stored(client: Any, keys: ScopeKeys, run: Run) -> dict[str, Any]:
    """What the store holds of ``run`` and where it is indexed, with its run id, claim
    token and listing order masked (the parts two runs may differ in)."""

    def mask(value: bytes) -> bytes:
        return value.replace(run.id.encode(), b"<id>")

    fields = {k: mask(v) for k, v in client.hgetall(keys.run(run.id)).items()}
    if b"token" in fields:
        fields[b"token"] = b"<token>"
    assert fields.pop(b"ord").isdigit()
    summary = client.hget(keys.summaries, run.id)
    assert summary is not None
    member = index_member(to_micros(run.started_at), run.id)
    indexes = {
        "ready": client.zscore(keys.ready, run.id),
        "claimed": client.zscore(keys.claimed, run.id),
        "index": client.zscore(keys.index, member),
        **{
            f"status {status.value}": client.zscore(keys.by_status(status), member)
            for status in RunStatus
        },
        "graph id": client.zscore(keys.by_graph(run.graph_id), member),
        "graph hash": client.zscore(keys.by_hash(run.graph_hash), member),
    }
    return {
        "run": fields,
        "transitions": client.hlen(keys.transitions(run.id)),
        "events": {k: mask(v) for k, v in client.hgetall(keys.events(run.id)).items()},
        "event index": client.zrange(keys.event_index(run.id), 0, -1, withscores=True),
        "summary": summary.partition(b"|")[2],
        "indexes": indexes,
    }


def test_a_claimed_start_is_stored_as_a_claimed_run_and_never_announced(
    redis_single: RedisServer, prefix: str
) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        owner: OwnerScope = Tenant("acme")
        keys = Namespace(prefix).scope(owner)
        client = redis.Redis(host="127.0.0.1", port=redis_single.port)
        async with (
            opened(redis_single.url, prefix, clock=clock) as backend,
            opened(redis_single.url, prefix, clock=clock) as watcher,
        ):
            ref = await publish_graph(backend, owner)
            eager = new_run(EAGER, ref, T0, event_seq=1)
            proposal = init_proposal(eager, T0)  # due now, were it not claimed
            events = events_for(eager, T0, [1])
            waiting = asyncio.create_task(watcher.wait_for_work(0.5))
            await asyncio.sleep(0.05)
            started = await backend.transitions.initialize_claimed(
                owner, proposal, events, "tok-eager"
            )
            assert started == eager
            assert await waiting is False, "a claimed start announced work"
            # the same write is a replay; as a plain start it is a conflict
            again = await backend.transitions.initialize_claimed(
                owner, proposal, events, "tok-eager"
            )
            assert again == eager
            plain_again = await backend.transitions.initialize(owner, proposal, events)
            assert isinstance(plain_again, Conflict)

            info = await backend.runs.inspect_run(owner, EAGER)
            assert isinstance(info, RunInfo)
            assert (info.claimed_at, info.wake_at, info.claim_attempts) == (T0, None, 1)
            # held: not due now, nor at exactly the TTL
            for moment in (T0, T0 + TTL / 2, T0 + TTL):
                assert await backend.runs.claim_due(_claim(moment)) == ClaimBatch(), moment

            # a plain start (which is announced), claimed through claim_due at the same time
            waiting = asyncio.create_task(watcher.wait_for_work(5))
            await asyncio.sleep(0.05)
            plain = await start_run(backend, owner, PLAIN, ref, events=1)
            assert await waiting is True, "a due start is announced"
            lease = await claim_one(backend, T0, orphan_ttl=TTL)
            assert (lease.run_id, lease.claim_attempt, lease.claimed_at) == (PLAIN, 1, T0)

            # the same keys, fields and index memberships, modulo ids and tokens
            claimed_start = _stored(client, keys, eager)
            claimed_later = _stored(client, keys, plain)
            assert claimed_start == claimed_later
            assert claimed_start["indexes"]["ready"] is None
            assert claimed_start["indexes"]["claimed"] == float(to_micros(T0))
            assert claimed_start["run"][b"attempts"] == b"1"
            assert b"wake" not in claimed_start["run"]
            assert client.hget(keys.run(EAGER), "token") == b"tok-eager"

            # past the TTL both are taken over as expired: the second attempt, new tokens
            batch = await backend.runs.claim_due(_claim(T0 + TTL + US))
            assert isinstance(batch, ClaimBatch)
            taken = {lease.run_id: lease for lease in batch.leases}
            assert set(taken) == {EAGER, PLAIN}
            assert taken[EAGER].claim_attempt == taken[PLAIN].claim_attempt == 2
            assert taken[EAGER].claim_token != "tok-eager"
            assert taken[EAGER].checkpoint_seq == eager.checkpoint_seq
            lost = await backend.runs.refresh_claim(owner, EAGER, "tok-eager", T0 + TTL + US)
            assert lost == ClaimLost()
            assert _stored(client, keys, eager) == _stored(client, keys, plain)
        client.close()

    asyncio.run(body())


async def _burst(url: str, prefix: str) -> None:
    """Plain and claimed starts submitted together go in shared pipelines, each stored
    as it would be alone."""
    clock = ManualClock(T0)
    async with opened(url, prefix, clock=clock, commit_lanes=1) as backend:
        owners: list[OwnerScope] = [TENANTLESS, Tenant("acme"), Tenant("zed")]
        refs = {str(owner): await publish_graph(backend, owner) for owner in owners}
        calls = []
        runs: list[tuple[OwnerScope, Run, bool]] = []
        for i in range(12):
            owner = owners[i % 3]
            run = new_run(f"s{i}", refs[str(owner)], T0, event_seq=1)
            proposal, events = init_proposal(run, T0), events_for(run, T0, [1])
            eager = i % 2 == 0
            if eager:
                calls.append(
                    backend.transitions.initialize_claimed(owner, proposal, events, f"tok-{i}")
                )
            else:
                calls.append(backend.transitions.initialize(owner, proposal, events))
            runs.append((owner, run, eager))
        answers = await asyncio.gather(*calls)
        group = backend._engine.starts
        assert group is not None and max(group.batches) > 1, "nothing was grouped"
        assert answers == [run for _, run, _ in runs]
        for owner, run, eager in runs:
            info = await backend.runs.inspect_run(owner, run.id)
            assert isinstance(info, RunInfo)
            assert info.run == run
            assert (info.claimed_at, info.wake_at) == ((T0, None) if eager else (None, T0))
            assert info.claim_attempts == (1 if eager else 0)
        batch = await backend.runs.claim_due(_claim(T0))
        assert isinstance(batch, ClaimBatch)
        assert sorted(lease.run_id for lease in batch.leases) == sorted(
            run.id for _, run, eager in runs if not eager
        )


def test_claimed_starts_are_pipelined_with_plain_starts_on_one_server(
    redis_single: RedisServer, prefix: str
) -> None:
    asyncio.run(_burst(redis_single.url, prefix))


def test_claimed_starts_are_pipelined_with_plain_starts_on_a_cluster(
    redis_cluster_nodes: RedisCluster, prefix: str
) -> None:
    asyncio.run(_burst(redis_cluster_nodes.url, prefix))
