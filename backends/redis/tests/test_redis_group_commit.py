"""Group commit on Redis: commits that queue while the lanes are busy go as one pipeline per
node, and each still gets exactly the answer it would get alone — on one server and on a
Cluster, with the script cache flushed first (every pipelined ``EVALSHA`` meets NOSCRIPT).

``commit_lanes=1`` makes grouping certain: a burst submitted at once goes as one batch
(the lane takes what was submitted in its turn of the event loop), and what queues behind
a busy lane goes together.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import attrs
import pytest
import redis
from docket_contract_tests.fixtures import claimed, events_for, successor
from docket_redis import RedisBackend
from docket_redis.errors import PermanentStoreError
from docket_redis.testing import T0, RedisCluster, RedisServer, opened, publish_graph, start_run
from docket_redis.transport import Script, pack

from docket.clock import ManualClock
from docket.contract import ClaimBatch, ClaimPolicy, Conflict, NotFound, StaleCheckpoint
from docket.contract.grouping import GroupCommit
from docket.records import TENANTLESS, OwnerScope, Run, Tenant


def _grouped(backend: RedisBackend, which: str = "commits") -> dict[int, int]:
    """The backend's batches sent by size, asserting some write went with another."""
    group: GroupCommit[Any, Any] | None = getattr(backend._engine, which)
    assert group is not None
    assert max(group.batches) > 1, f"nothing was grouped: {dict(group.batches)}"
    return dict(group.batches)


def _check_answers(answers: Sequence[object], expected: Sequence[object]) -> None:
    """Each answer is the expected value, or an instance of the expected error type."""
    for answer, want in zip(answers, expected, strict=True):
        if isinstance(want, type):
            assert isinstance(answer, want), (answer, want)
        else:
            assert answer == want


async def _burst(url: str, prefix: str, ports: list[int]) -> None:
    clock = ManualClock(T0)
    async with opened(url, prefix, clock=clock, commit_lanes=1) as backend:
        owners: list[OwnerScope] = [TENANTLESS if i % 3 == 0 else Tenant(f"t{i}") for i in range(9)]
        runs: dict[str, tuple[OwnerScope, Run]] = {}
        for i, owner in enumerate(owners):
            run_id = f"r{i}"
            ref = await publish_graph(backend, owner)
            runs[run_id] = (owner, await start_run(backend, owner, run_id, ref, events=1))
        batch = await backend.runs.claim_due(
            ClaimPolicy(limit=20, orphan_ttl=timedelta(minutes=5), max_claim_attempts=3)
        )
        assert isinstance(batch, ClaimBatch) and len(batch.leases) == len(owners)
        tokens = {lease.run_id: lease.claim_token for lease in batch.leases}
        for port in ports:  # every EVALSHA of the pipelines will meet NOSCRIPT
            client = redis.Redis(host="127.0.0.1", port=port)
            client.script_flush()
            client.close()
        calls = []
        expected: list[object] = []
        for run_id, (owner, run) in runs.items():
            nxt = successor(run, T0, new_events=2)
            evs = events_for(nxt, T0, [2, 3])
            want: object
            if run_id == "r4":  # a stale fence
                ahead = attrs.evolve(nxt, checkpoint_seq=run.checkpoint_seq + 5)
                proposal, want = claimed(ahead, tokens[run_id]), StaleCheckpoint
            elif run_id == "r5":  # someone else's claim token
                proposal, want = claimed(nxt, "not-the-token"), StaleCheckpoint
            else:
                proposal, want = claimed(nxt, tokens[run_id]), nxt
            calls.append(backend.transitions.commit_claimed(owner, proposal, evs))
            expected.append(want)
            if run_id == "r7":  # the same proposal twice in one burst: then a replay
                calls.append(backend.transitions.commit_claimed(owner, proposal, evs))
                expected.append(nxt)
        ghost_owner, ghost_run = runs["r8"]
        ghost = claimed(attrs.evolve(successor(ghost_run, T0), id="ghost"), tokens["r8"])
        calls.append(backend.transitions.commit_claimed(ghost_owner, ghost, []))
        expected.append(NotFound)
        answers = await asyncio.gather(*calls)
        _grouped(backend)
        _check_answers(answers, expected)
        for run_id, (owner, run) in runs.items():  # read back
            stored = await backend.runs.fetch_run(owner, run_id)
            assert isinstance(stored, Run)
            refused = run_id in ("r4", "r5")
            assert stored.checkpoint_seq == run.checkpoint_seq + (0 if refused else 1), run_id
            assert stored.event_seq == (1 if refused else 3), run_id


def test_a_burst_of_commits_is_pipelined_on_one_server(
    redis_single: RedisServer, prefix: str
) -> None:
    asyncio.run(_burst(redis_single.url, prefix, [redis_single.port]))


def test_a_burst_of_commits_is_pipelined_per_master_on_a_cluster(
    redis_cluster_nodes: RedisCluster, prefix: str
) -> None:
    asyncio.run(_burst(redis_cluster_nodes.url, prefix, list(redis_cluster_nodes.ports)))


def test_commit_lanes_zero_sends_alone_and_bad_values_are_refused(
    redis_single: RedisServer, prefix: str
) -> None:
    async def body() -> None:
        async with opened(redis_single.url, prefix, commit_lanes=0) as backend:
            assert backend._engine.commits is None
            ref = await publish_graph(backend, TENANTLESS)
            run = await start_run(backend, TENANTLESS, "solo", ref)
            batch = await backend.runs.claim_due(
                ClaimPolicy(limit=1, orphan_ttl=timedelta(minutes=5), max_claim_attempts=3)
            )
            assert isinstance(batch, ClaimBatch)
            proposal = claimed(successor(run, T0), batch.leases[0].claim_token)
            got = await backend.transitions.commit_claimed(TENANTLESS, proposal, [])
            assert got == proposal.run

    asyncio.run(body())
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError):
            RedisBackend.from_url(redis_single.url, commit_lanes=bad)


def _script(body: bytes) -> Script:
    return Script(name="test", body=body, sha=hashlib.sha1(body).hexdigest())


async def _pipelined_answers(url: str, prefix: str, ports: list[int]) -> None:
    async with opened(url, prefix) as backend:
        transport = backend._engine.transport
        echo = _script(b"return ARGV[1]")
        failing = _script(b"return redis.error_reply('ERR no such thing')")
        for port in ports:  # never loaded: every pipelined EVALSHA meets NOSCRIPT
            client = redis.Redis(host="127.0.0.1", port=port)
            client.script_flush()
            client.close()
        calls: list[tuple[list[str], list[str | bytes]]] = [
            ([f"{prefix}:{{k{i}}}"], [f"v{i}"]) for i in range(12)
        ]
        answers = await transport.eval_many(echo, calls)
        assert [bytes(a) for a in answers] == [f"v{i}".encode() for i in range(12)]
        again = await transport.eval_many(echo, calls)  # now cached: EVALSHA answers
        assert again == answers
        refused = await transport.eval_many(failing, calls[:3])
        assert all(isinstance(a, PermanentStoreError) for a in refused), refused
        assert "no such thing" in str(refused[0])


def test_pipelined_scripts_answer_in_order_on_one_server(
    redis_single: RedisServer, prefix: str
) -> None:
    asyncio.run(_pipelined_answers(redis_single.url, prefix, [redis_single.port]))


def test_pipelined_scripts_answer_in_order_on_a_cluster(
    redis_cluster_nodes: RedisCluster, prefix: str
) -> None:
    asyncio.run(
        _pipelined_answers(redis_cluster_nodes.url, prefix, list(redis_cluster_nodes.ports))
    )


@pytest.mark.parametrize(
    "commands",
    [
        [("SET", "k", "v")],
        [("EVALSHA", "abc", 2, "k1", "k2", b"\x00\xff\r\n", "é" * 3000, 12345, -5, 0)],
        [("GET", "x" * 7000)],
        [("A", "b"), ("C", 1), ("EVALSHA", "s", 1, "{k}", b"")],
    ],
)
def test_pack_makes_the_drivers_bytes(commands: list[tuple[str | bytes | int, ...]]) -> None:
    from redis.asyncio.connection import Connection

    theirs = b"".join(Connection().pack_commands(commands))
    assert pack(commands) == theirs


def test_pack_refuses_what_redis_cannot_take() -> None:
    for bad in (True, 1.5, None):
        with pytest.raises(TypeError):
            pack([("SET", "k", bad)])  # type: ignore[list-item]  # bad on purpose


async def _starts(url: str, prefix: str) -> None:
    from docket_contract_tests.fixtures import init_proposal, new_run

    clock = ManualClock(T0)
    async with opened(url, prefix, clock=clock, commit_lanes=1) as backend:
        owners: list[OwnerScope] = [TENANTLESS, Tenant("acme"), Tenant("zed")]
        refs = {str(owner): await publish_graph(backend, owner) for owner in owners}
        calls = []
        expected: list[object] = []
        proposals = []
        for i in range(9):
            owner = owners[i % 3]
            fresh = new_run(f"s{i}", refs[str(owner)], T0, event_seq=1)
            proposals.append((owner, init_proposal(fresh, T0), events_for(fresh, T0, [1])))
            calls.append(backend.transitions.initialize(*proposals[-1]))
            expected.append(fresh)
        owner, proposal, evs = proposals[4]
        calls.append(backend.transitions.initialize(owner, proposal, evs))  # a replay
        taken = init_proposal(attrs.evolve(proposal.run, input={"other": 1}), T0)
        calls.append(backend.transitions.initialize(owner, taken, evs))  # same id, other input
        answers = await asyncio.gather(*calls)
        _grouped(backend, "starts")
        for i, (answer, want) in enumerate(zip(answers, expected, strict=False)):
            if i != 4:
                assert answer == want
        # Two different starts of run s4 race (on a cluster each first takes a creation
        # number, so either may reach the script first): exactly one wins, the original
        # and its replay answer alike, the loser is told Conflict.
        original, replay, rival = answers[4], answers[9], answers[10]
        stored = await backend.runs.fetch_run(owner, proposal.run.id)
        if stored == proposal.run:
            assert original == replay == proposal.run
            assert isinstance(rival, Conflict)
        else:
            assert stored == taken.run == rival
            assert isinstance(original, Conflict) and isinstance(replay, Conflict)
        for i, (owner, proposal, _) in enumerate(proposals):
            if i != 4:
                assert await backend.runs.fetch_run(owner, proposal.run.id) == proposal.run


def test_a_burst_of_run_starts_is_pipelined_on_one_server(
    redis_single: RedisServer, prefix: str
) -> None:
    asyncio.run(_starts(redis_single.url, prefix))


def test_a_burst_of_run_starts_is_pipelined_on_a_cluster(
    redis_cluster_nodes: RedisCluster, prefix: str
) -> None:
    asyncio.run(_starts(redis_cluster_nodes.url, prefix))
