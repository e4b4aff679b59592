"""Named queues on Redis (layout 5), on one server and on a Cluster, against the memory
reference: claims filter by queue and take priority order, inspect_run reports a run's
queue and priority, the queue ledger answers as ``SlotLedger`` does, racing claimers
never exceed a limit, and a layout-4 namespace keeps its runs claimable after migrate."""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest
import redis
from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_redis import SCHEMA_VERSION, RedisBackend, SchemaTooOld
from docket_redis.keys import Namespace
from docket_redis.testing import T0, dump, opened, with_prefix

from docket.clock import ManualClock
from docket.contract import (
    AbandonPolicy,
    ClaimBatch,
    ClaimClass,
    ClaimPolicy,
    ClaimRefreshed,
    Feature,
    NotFound,
    ReleaseClaim,
    Terminal,
)
from docket.contract.memory import MemoryBackend
from docket.records import (
    TENANTLESS,
    OwnerScope,
    QueueConfig,
    QueueStatus,
    RateLimit,
    RunInfo,
    RunStatus,
    Tenant,
)
from docket.values import to_micros

SEC = timedelta(seconds=1)
TTL = timedelta(minutes=5)
OWNERS: list[OwnerScope] = [TENANTLESS, Tenant("acme"), Tenant("c}{")]


@pytest.fixture(params=["single", "cluster"])
def url(request: pytest.FixtureRequest) -> str:
    """The URL of the session's single server, or of its Cluster."""
    fixture = "redis_single" if request.param == "single" else "redis_cluster_nodes"
    server: Any = request.getfixturevalue(fixture)
    return str(server.url)


Backend = RedisBackend | MemoryBackend


async def _publish(backend: Backend, owner: OwnerScope) -> None:
    document = graph_document("g")
    await backend.graphs.save_graph(owner, graph_ref(document), document)


async def _start(
    backend: Backend,
    owner: OwnerScope,
    run_id: str,
    *,
    wake_at: datetime,
    queue: str = "default",
    priority: int = 0,
) -> None:
    ref = graph_ref(graph_document("g"))
    run = new_run(run_id, ref, T0)
    proposal = attrs.evolve(init_proposal(run, wake_at), queue=queue, priority=priority)
    result = await backend.transitions.initialize(owner, proposal, events_for(run, T0, []))
    assert result == run, result


def _claim(limit: int, now: datetime, queues: frozenset[str] | None = None) -> ClaimPolicy:
    return ClaimPolicy(limit=limit, orphan_ttl=TTL, max_claim_attempts=5, now=now, queues=queues)


async def _claim_ids(backend: Backend, policy: ClaimPolicy) -> list[tuple[str, str]]:
    batch = await backend.runs.claim_due(policy)
    assert isinstance(batch, ClaimBatch), batch
    assert not batch.poisoned
    return [(lease.run_id, str(lease.owner)) for lease in batch.leases]


def _both(url: str, prefix: str, clock: ManualClock) -> tuple[RedisBackend, MemoryBackend]:
    return RedisBackend.from_url(with_prefix(url, prefix), clock=clock), MemoryBackend(clock)


# -- claims ---------------------------------------------------------------------------------


#: (run id, queue, priority, seconds after T0 it is due) per owner scope
RUNS = [
    ("a", "default", 0, 1),
    ("b", "default", 5, 3),
    ("c", "billing", 0, 0),
    ("d", "billing", 10, 2),
    ("e", "billing", -3, 0),
    ("f", "mail:eu", 10, 2),  # a queue name may hold ':'
    ("g", "mail:eu", 100, 9),
    ("h", "default", -100, 0),
]


def test_claims_filter_by_queue_and_take_priority_order_like_the_reference(
    url: str, prefix: str
) -> None:
    clock = ManualClock(T0)
    redis_backend, memory = _both(url, prefix, clock)
    # (demand, queues) per claim, in order; the last ones see expired claims too
    rounds: list[tuple[int, frozenset[str] | None]] = [
        (2, frozenset({"billing"})),
        (1, frozenset({"mail:eu"})),
        (3, frozenset({"default", "mail:eu"})),
        (2, frozenset({"nothing-here"})),
        (4, None),
        (50, None),
    ]

    async def body() -> None:
        await redis_backend.open()
        try:
            answers: dict[str, list[list[tuple[str, str]]]] = {}
            for name, backend in (("redis", redis_backend), ("memory", memory)):
                for owner in OWNERS:
                    await _publish(backend, owner)
                    for run_id, queue, priority, due in RUNS:
                        wake = T0 + due * SEC
                        await _start(
                            backend, owner, run_id, wake_at=wake, queue=queue, priority=priority
                        )
                got = answers.setdefault(name, [])
                now = T0 + 10 * SEC
                for demand, queues in rounds[:4]:
                    got.append(await _claim_ids(backend, _claim(demand, now, queues)))
                # the claims so far expire: both classes, every lane
                later = now + TTL + SEC
                for demand, queues in rounds[4:]:
                    got.append(await _claim_ids(backend, _claim(demand, later, queues)))
            assert answers["redis"] == answers["memory"]
            first = answers["redis"]
            # billing by priority, then due time: d (10), then c and e's tenant order...
            assert [run_id for run_id, _ in first[0]] == ["d", "d"]
            assert [run_id for run_id, _ in first[1]] == ["g"]
            assert first[3] == []
            assert len({item for batch in first for item in batch}) == len(OWNERS) * len(RUNS)
        finally:
            await redis_backend.close()

    asyncio.run(body())


@pytest.mark.parametrize("seed", range(3))
def test_random_claims_with_queues_and_priorities_match_the_reference(
    url: str, prefix: str, seed: int
) -> None:
    """Random lanes, due times, demands, filters and class preferences; claims expire
    and are taken again, so both classes meet across lanes and scopes."""
    rng = random.Random(seed)
    clock = ManualClock(T0)
    redis_backend, memory = _both(url, prefix, clock)
    starts = [
        (
            rng.choice(OWNERS),
            f"r{i}",
            rng.choice(["default", "default", "a", "b:c"]),
            rng.choice([0, 0, 1, -1, 7]),
            rng.randrange(6),
        )
        for i in range(40)
    ]
    claims = [
        (
            rng.choice([1, 1, 2, 3, 5]),
            rng.choice([None, None, frozenset({"a"}), frozenset({"default", "b:c"})]),
            rng.choice([None, ClaimClass.READY, ClaimClass.EXPIRED]),
            rng.choice([0, 1, 2, 200]),  # seconds to advance first (200: claims expire)
        )
        for _ in range(40)
    ]

    async def trace(backend: Backend) -> list[list[tuple[str, str]]]:
        for owner in OWNERS:
            await _publish(backend, owner)
        for owner, run_id, queue, priority, due in starts:
            await _start(
                backend, owner, run_id, wake_at=T0 + due * SEC, queue=queue, priority=priority
            )
        now = T0
        out = []
        for demand, queues, preference, step in claims:
            now += step * SEC
            policy = attrs.evolve(_claim(demand, now, queues), preference=preference)
            out.append(await _claim_ids(backend, policy))
        return out

    async def body() -> None:
        await redis_backend.open()
        try:
            got = await trace(redis_backend)
        finally:
            await redis_backend.close()
        expected = await trace(memory)
        assert got == expected
        assert sum(map(len, expected)) > len(starts)  # some were claimed twice

    asyncio.run(body())


def test_inspect_run_reports_queue_and_priority_and_lanes_empty_when_runs_leave(
    url: str, prefix: str
) -> None:
    clock = ManualClock(T0)
    ns = Namespace(prefix)

    async def body() -> None:
        async with opened(url, prefix, clock=clock) as backend:
            owner = Tenant("acme")
            await _publish(backend, owner)
            await _start(backend, owner, "q", wake_at=T0, queue="billing", priority=-7)
            await _start(backend, owner, "plain", wake_at=T0)
            info = await backend.runs.inspect_run(owner, "q")
            assert isinstance(info, RunInfo)
            assert (info.queue, info.priority) == ("billing", -7)
            info = await backend.runs.inspect_run(owner, "plain")
            assert isinstance(info, RunInfo)
            assert (info.queue, info.priority) == ("default", 0)
            keys = ns.scope(owner)
            node = _client_for(url, keys.lanes)
            try:
                assert node.smembers(keys.lanes) == {b"billing:-7"}
                # lease it, then commit it done: its lane empties and is no longer listed
                batch = await backend.runs.claim_due(_claim(5, T0, frozenset({"billing"})))
                assert isinstance(batch, ClaimBatch) and len(batch.leases) == 1
                lease = batch.leases[0]
                assert node.zcard(f"{keys.claimed}:billing:-7") == 1
                run = await backend.runs.fetch_run(owner, "q")
                assert not isinstance(run, NotFound)
                done = successor(run, T0, status=RunStatus.DONE)
                proposal = claimed(done, lease.claim_token, schedule=ReleaseClaim(Terminal()))
                assert await backend.transitions.commit_claimed(owner, proposal, []) == done
                assert node.smembers(keys.lanes) == set()
                assert node.exists(f"{keys.ready}:billing:-7", f"{keys.claimed}:billing:-7") == 0
                info = await backend.runs.inspect_run(owner, "q")  # a commit keeps them
                assert isinstance(info, RunInfo)
                assert (info.queue, info.priority) == ("billing", -7)
            finally:
                node.close()

    asyncio.run(body())


def test_every_script_that_moves_a_run_keeps_it_in_its_lane(url: str, prefix: str) -> None:
    """claim, refresh, release, abandon, poison, retry_poisoned: the run stays findable
    by its queue only, and ``T:lanes`` lists its lane exactly while it holds a run."""
    clock = ManualClock(T0)
    ns = Namespace(prefix)
    owner = Tenant("c}{")
    keys = ns.scope(owner)
    lane = "mail:eu:5"

    async def body() -> None:
        node = _client_for(url, keys.lanes)
        async with opened(url, prefix, clock=clock) as backend:
            runs = backend.runs

            async def claim(queues: frozenset[str] | None) -> list[Any]:
                batch = await runs.claim_due(_claim(5, clock(), queues))
                assert isinstance(batch, ClaimBatch)
                return list(batch.leases)

            def where() -> tuple[float | None, float | None, set[bytes]]:
                return (
                    node.zscore(f"{keys.ready}:{lane}", "r"),
                    node.zscore(f"{keys.claimed}:{lane}", "r"),
                    node.smembers(keys.lanes),
                )

            try:
                await _publish(backend, owner)
                await _start(backend, owner, "r", wake_at=T0, queue="mail:eu", priority=5)
                assert where() == (float(to_micros(T0)), None, {lane.encode()})
                assert await claim(frozenset({"default", "mail"})) == []
                (lease,) = await claim(frozenset({"mail:eu"}))
                assert where()[:2] == (None, float(to_micros(T0)))
                clock.advance(SEC)
                refreshed = await runs.refresh_claim(owner, "r", lease.claim_token)
                assert refreshed == ClaimRefreshed(T0 + SEC)
                assert where()[1] == float(to_micros(T0 + SEC))
                await runs.release_claim(owner, "r", lease.claim_token)
                assert where() == (float(to_micros(T0 + SEC)), None, {lane.encode()})
                for _ in range(2):  # abandoned once (rescheduled), then poisoned
                    (lease,) = await claim(None)
                    policy = AbandonPolicy(
                        expected_checkpoint_seq=1, retry_at=clock(), max_claim_abandons=1
                    )
                    await runs.abandon_claim(owner, "r", lease.claim_token, policy)
                assert where() == (None, None, set())
                info = await runs.inspect_run(owner, "r")
                assert isinstance(info, RunInfo) and info.poisoned
                assert (info.queue, info.priority) == ("mail:eu", 5)
                assert not isinstance(await runs.retry_poisoned_run(owner, "r"), NotFound)
                assert where() == (float(to_micros(clock())), None, {lane.encode()})
                assert await claim(frozenset({"default"})) == []
                assert [x.run_id for x in await claim(frozenset({"mail:eu"}))] == ["r"]
            finally:
                node.close()

    asyncio.run(body())


def _client_for(url: str, key: str) -> Any:
    """A client for the node serving ``key`` (single server or cluster)."""
    if "cluster" in url:
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(url.split("?")[0].replace("redis+cluster", "redis"))
    return redis.Redis.from_url(url.split("?")[0])


# -- the ledger -----------------------------------------------------------------------------

Step = Callable[[Any, ManualClock], Awaitable[Any]]


def _ledger_script() -> list[Step]:
    """A scripted sequence of queue operations; each answers something to compare."""
    q = "llm"
    slow = RateLimit(count=3, period=7 * SEC)  # 3/7 per second: inexact in binary

    def at(clock: ManualClock) -> datetime:
        return clock()

    async def advance(us: int, store: Any, clock: ManualClock) -> None:
        clock.advance(timedelta(microseconds=us))

    steps: list[Step] = [
        lambda s, c: s.fetch_queue(q),
        lambda s, c: s.acquire_slots(q, ["x"], TTL),  # unknown queue: nothing
        lambda s, c: s.list_queues(),
        lambda s, c: s.acquire_slots("default", ["d1", "d2"], TTL, at(c)),
        lambda s, c: s.set_queue(QueueConfig(name=q, execution_limit=4, rate=slow)),
        lambda s, c: s.fetch_queue(q),
        lambda s, c: s.acquire_slots(q, ["a", "b"], 2 * SEC, at(c)),
        lambda s, c: s.acquire_slots(q, ["a", "c", "d"], 2 * SEC, at(c)),  # 'a' held; 1 token
        lambda s, c: s.list_queues(),
        lambda s, c: s.renew_slots(q, ["b", "zz"], 5 * SEC, at(c)),  # b: until T0 + 5 s
        lambda s, c: advance(2_333_333, s, c),  # 3/7 * 2.333333 s: just under one token
        lambda s, c: s.acquire_slots(q, ["e"], 2 * SEC, at(c)),
        lambda s, c: advance(1, s, c),  # and now just over it
        lambda s, c: s.acquire_slots(q, ["e", "f"], 2 * SEC, at(c)),
        lambda s, c: s.renew_slots(q, ["a", "b", "zz"], 10 * SEC, at(c)),
        lambda s, c: advance(2_000_000 - 1, s, c),
        lambda s, c: s.list_queues(),  # a, b renewed; c expires exactly now: still held
        lambda s, c: advance(1, s, c),
        lambda s, c: s.list_queues(),  # c, e free strictly after their expiry
        lambda s, c: s.release_slots(q, ["a", "c", "nobody"], True),
        lambda s, c: s.acquire_slots(q, ["g", "h", "i", "j"], TTL, at(c)),
        lambda s, c: s.set_queue(QueueConfig(name=q, execution_limit=1, rate=slow)),
        lambda s, c: s.acquire_slots(q, ["k"], TTL, at(c)),  # over the lowered limit
        lambda s, c: s.release_slots(q, ["b", "g", "h", "i", "j"], True),
        lambda s, c: s.set_queue(
            QueueConfig(name=q, execution_limit=9, rate=RateLimit(count=2, period=SEC))
        ),
        lambda s, c: s.acquire_slots(q, ["l", "m", "n"], TTL, at(c)),
        lambda s, c: advance(123_457, s, c),
        lambda s, c: s.set_queue(QueueConfig(name=q, paused=True)),
        lambda s, c: s.acquire_slots(q, ["o"], TTL, at(c)),
        lambda s, c: s.set_queue(QueueConfig(name=q, rate=RateLimit(count=5, period=3 * SEC))),
        lambda s, c: s.acquire_slots(q, ["p", "q", "r", "s", "t", "u"], TTL, at(c)),
        lambda s, c: advance(-5_000_000, s, c),  # a clock that went back refills nothing
        lambda s, c: s.acquire_slots(q, ["v"], TTL, at(c)),
        lambda s, c: advance(9_000_000, s, c),
        lambda s, c: s.release_slots(q, ["p", "q"], True),
        lambda s, c: s.acquire_slots(q, ["w", "x", "y", "z"], TTL, at(c)),
        lambda s, c: s.set_queue(QueueConfig(name="default", execution_limit=2)),
        lambda s, c: s.acquire_slots("default", ["d3"], TTL, at(c)),
        lambda s, c: s.renew_slots("unknown", ["d1"], TTL, at(c)),
        lambda s, c: s.release_slots("default", ["d1"]),
        lambda s, c: s.acquire_slots("default", ["d3", "d4"], TTL, at(c)),
        lambda s, c: s.list_queues(),
        lambda s, c: s.fetch_queue("default"),
        lambda s, c: s.fetch_queue("nope"),
    ]
    return steps


def _comparable(answer: Any) -> Any:
    if isinstance(answer, NotFound):
        return "not found"
    if isinstance(answer, list | tuple) and answer and isinstance(answer[0], QueueStatus):
        return [(s.config, s.running, s.depth) for s in answer]
    return answer


def test_the_ledger_answers_as_the_reference_for_a_scripted_sequence(url: str, prefix: str) -> None:
    async def trace(backend: Backend, clock: ManualClock) -> list[Any]:
        out = []
        for step in _ledger_script():
            out.append(_comparable(await step(backend.queues, clock)))
        return out

    async def body() -> None:
        redis_clock, memory_clock = ManualClock(T0), ManualClock(T0)
        memory = MemoryBackend(memory_clock)
        expected = await trace(memory, memory_clock)
        async with opened(url, prefix, clock=redis_clock) as backend:
            assert Feature.QUEUES in backend.capabilities().features
            got = await trace(backend, redis_clock)
        assert got == expected
        assert 0 in expected and 1 in expected and 2 in expected  # the script grants variously

    asyncio.run(body())


def test_bad_ledger_calls_raise_and_change_nothing(url: str, prefix: str) -> None:
    async def body() -> None:
        async with opened(url, prefix) as backend:
            queues = backend.queues
            await queues.set_queue(QueueConfig(name="q", execution_limit=1))
            before = await queues.list_queues()
            with pytest.raises(ValueError):
                await queues.set_queue(QueueConfig(name="q", execution_limit=0))
            with pytest.raises(ValueError):
                await queues.set_queue(QueueConfig(name="bad name"))
            with pytest.raises(ValueError):
                await queues.acquire_slots("q", ["a", "a"], TTL)
            with pytest.raises(ValueError):
                await queues.acquire_slots("q", [], TTL)
            with pytest.raises(ValueError):
                await queues.renew_slots("q", ["a"], -SEC)
            with pytest.raises(ValueError):
                await queues.fetch_queue("{x}")
            assert await queues.list_queues() == before
            assert await queues.fetch_queue("q") == QueueConfig(name="q", execution_limit=1)

    asyncio.run(body())


def test_list_queues_counts_due_runs_of_each_queue_across_scopes(url: str, prefix: str) -> None:
    clock = ManualClock(T0)

    async def body() -> None:
        async with opened(url, prefix, clock=clock) as backend:
            for owner in OWNERS:
                await _publish(backend, owner)
                await _start(backend, owner, "a", wake_at=T0, queue="billing", priority=3)
                await _start(backend, owner, "b", wake_at=T0, queue="billing")
                await _start(backend, owner, "c", wake_at=T0 + SEC, queue="billing")  # not due
                await _start(backend, owner, "d", wake_at=T0)
            await backend.queues.set_queue(QueueConfig(name="billing", execution_limit=2))
            await backend.queues.set_queue(QueueConfig(name="idle"))
            assert await backend.queues.acquire_slots("billing", ["s"], TTL) == 1
            got = [(s.config.name, s.running, s.depth) for s in await backend.queues.list_queues()]
            assert got == [("billing", 1, 6), ("default", 0, 3), ("idle", 0, 0)]

    asyncio.run(body())


def test_eight_racing_claimers_never_exceed_the_limit(url: str, prefix: str) -> None:
    """8 clients (own connections, the server's clock) race acquire_slots, 50 rounds."""
    limit, clients, rounds = 3, 8, 50

    async def body() -> None:
        backends = [RedisBackend.from_url(with_prefix(url, prefix)) for _ in range(clients)]
        for backend in backends:
            await backend.open()
        try:
            await backends[0].queues.set_queue(QueueConfig(name="q", execution_limit=limit))
            for round_no in range(rounds):
                wants = [1 + (round_no + i) % 3 for i in range(clients)]
                holders = [
                    [f"{round_no}-{i}-{k}-{secrets.token_hex(3)}" for k in range(want)]
                    for i, want in enumerate(wants)
                ]
                granted = await asyncio.gather(
                    *(
                        b.queues.acquire_slots("q", h, timedelta(minutes=1))
                        for b, h in zip(backends, holders, strict=True)
                    )
                )
                status = {s.config.name: s for s in await backends[0].queues.list_queues()}
                assert sum(granted) == limit, (round_no, granted)
                assert status["q"].running == limit
                await asyncio.gather(
                    *(
                        b.queues.release_slots("q", h[:n])
                        for b, h, n in zip(backends, holders, granted, strict=True)
                    )
                )
            status = {s.config.name: s for s in await backends[0].queues.list_queues()}
            assert status["q"].running == 0
        finally:
            for backend in backends:
                await backend.close()

    asyncio.run(body())


# -- layout 4 -> 5 --------------------------------------------------------------------------


def test_layout_is_version_5() -> None:
    assert SCHEMA_VERSION == 5


def test_a_layout_4_namespace_migrates_untouched_and_its_runs_stay_claimable(
    url: str, prefix: str, request: pytest.FixtureRequest
) -> None:
    clock = ManualClock(T0)
    ns = Namespace(prefix)
    server: Any = request.getfixturevalue(
        "redis_cluster_nodes" if "cluster" in url else "redis_single"
    )
    ports = list(getattr(server, "ports", None) or [server.port])

    async def body() -> None:
        async with opened(url, prefix, clock=clock) as backend:
            for owner in OWNERS:
                await _publish(backend, owner)
                await _start(backend, owner, "old", wake_at=T0)  # what layout 4 wrote
        schema = _client_for(url, ns.schema)
        try:
            schema.set(ns.schema, "4")
            before = dump(ports, prefix)
            old = RedisBackend.from_url(with_prefix(url, prefix), clock=clock)
            with pytest.raises(SchemaTooOld):
                await old.open()
            await old.close()
            assert await old.migrate() == (4, 5)
            await old.close()
            after = dump(ports, prefix)
            assert after == before  # nothing rewritten, nothing added
            assert schema.get(ns.schema) == b"5"
        finally:
            schema.close()
        async with opened(url, prefix, clock=clock) as backend:
            for owner in OWNERS:
                info = await backend.runs.inspect_run(owner, "old")
                assert isinstance(info, RunInfo)
                assert (info.queue, info.priority) == ("default", 0)
            await _start(backend, TENANTLESS, "new", wake_at=T0, queue="default", priority=1)
            got = await _claim_ids(backend, _claim(10, T0, frozenset({"default"})))
            assert got[0] == ("new", str(TENANTLESS))  # priority first
            assert sorted(got[1:]) == sorted(("old", str(owner)) for owner in OWNERS)

    asyncio.run(body())
