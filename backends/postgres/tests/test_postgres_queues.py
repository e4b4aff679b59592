"""Named queues on PostgreSQL (``Feature.QUEUES``, schema version 9), against the real
server the conftest starts and, where an answer is defined, against the memory reference:
claims filtered by queue and taken by priority, the queue and priority a start stores,
the slot ledger, and eight connections racing for a limited queue's slots."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from docket_contract_tests.fixtures import graph_document, graph_ref, init_proposal, new_run
from docket_postgres import PostgresBackend
from docket_postgres.testing import connect as admin

from docket.clock import ManualClock
from docket.contract import ClaimBatch, ClaimClass, ClaimPolicy, Feature, NotFound
from docket.contract.memory import MemoryBackend
from docket.records import (
    TENANTLESS,
    GraphRef,
    GraphVersion,
    OwnerScope,
    QueueConfig,
    RateLimit,
    RunInfo,
    Tenant,
)

Names = Callable[[str], str]
T0 = datetime(2030, 1, 1, tzinfo=UTC)
TTL = timedelta(minutes=5)
Backend = Any  # PostgresBackend or MemoryBackend: the same calls on both


def _policy(limit: int, **changes: Any) -> ClaimPolicy:
    return ClaimPolicy(limit=limit, orphan_ttl=TTL, max_claim_attempts=50, **changes)


async def _start(
    backend: Backend,
    owner: OwnerScope,
    ref: GraphRef,
    run_id: str,
    wake: datetime,
    queue: str = "default",
    priority: int = 0,
) -> None:
    run = new_run(run_id, ref, T0)
    proposal = attrs.evolve(init_proposal(run, wake), queue=queue, priority=priority)
    assert await backend.transitions.initialize(owner, proposal, []) == run


async def _graph(backend: Backend, owners: list[OwnerScope]) -> GraphRef:
    document = graph_document("g")
    ref = graph_ref(document)
    for owner in owners:
        assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
    return ref


def _taken(batch: object) -> list[tuple[str | None, str]]:
    assert isinstance(batch, ClaimBatch), batch
    return [(getattr(x.owner, "id", None), x.run_id) for x in batch.leases]


OWNERS: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b")]
QUEUES = ("default", "billing", "mail")


async def _seed(backend: Backend, rng: random.Random, count: int) -> None:
    """``count`` runs over three owners and queues, with priorities and wakes drawn from
    small sets so that every tie-break is exercised; a few wake in the future."""
    ref = await _graph(backend, OWNERS)
    for i in range(count):
        await _start(
            backend,
            rng.choice(OWNERS),
            ref,
            f"r{rng.randrange(1000):03d}-{i}",
            T0 + timedelta(seconds=rng.choice([-30, -20, -20, -10, 0, 600])),
            queue=rng.choice(QUEUES),
            priority=rng.choice([-100, -3, 0, 0, 0, 5, 100]),
        )


async def _script(backend: Backend, seed: int) -> list[object]:
    """One scripted sequence of claims (classes, limits, preferences, queue filters, an
    expiry in between); the answers, in order."""
    rng = random.Random(seed)
    await _seed(backend, rng, 40)
    answers: list[object] = []
    at = T0
    for step in range(14):
        if step == 6:
            at = T0 + TTL + timedelta(seconds=1)  # the claims so far have expired
        queues = rng.choice([None, None, frozenset({"billing"}), frozenset({"mail", "default"})])
        preference = rng.choice([None, ClaimClass.READY, ClaimClass.EXPIRED])
        limit = rng.choice([1, 1, 2, 3, 5])
        batch = await backend.runs.claim_due(
            _policy(limit, preference=preference, now=at, queues=queues)
        )
        answers.append((step, sorted(queues or ()), limit, _taken(batch)))
    return answers


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_claims_by_queue_and_priority_match_the_reference(
    pg_url: str, schema_name: Names, seed: int
) -> None:
    """The same starts and claims on PostgreSQL and on memory take the same runs in the
    same order: priority first, then the order claims always had, within the queues
    asked for (the reference's order is ``select_claims``')."""

    async def body() -> None:
        clock = ManualClock(T0)
        pg = PostgresBackend(pg_url, schema=schema_name("qdiff"), clock=clock, pool_max_size=2)
        await pg.open()
        try:
            memory = await _script(MemoryBackend(clock=clock), seed)
            clock.set(T0)
            assert await _script(pg, seed) == memory
        finally:
            await pg.close()

    asyncio.run(body())


def test_a_claim_takes_only_the_queues_it_serves(pg_url: str, schema_name: Names) -> None:
    """Blind and fair: a claim for ``{billing}`` takes billing's runs only (highest
    priority first), one for two queues both, and one for every queue the rest."""

    async def body() -> None:
        for policy in ("blind", "fair"):
            backend = PostgresBackend(
                pg_url, schema=schema_name("qfilter"), claim_policy=policy, pool_max_size=2
            )
            await backend.open()
            try:
                assert Feature.QUEUES in backend.capabilities().features
                ref = await _graph(backend, OWNERS)
                due = T0 - timedelta(seconds=1)
                await _start(backend, Tenant("a"), ref, "b1", due, "billing", 1)
                await _start(backend, Tenant("b"), ref, "b2", due, "billing", 7)
                await _start(backend, TENANTLESS, ref, "m1", due, "mail")
                await _start(backend, TENANTLESS, ref, "d1", due)
                await _start(backend, TENANTLESS, ref, "d2", due, priority=9)
                await _start(backend, Tenant("a"), ref, "later", T0 + timedelta(hours=1), "billing")
                billing = frozenset({"billing"})
                got = _taken(await backend.runs.claim_due(_policy(10, now=T0, queues=billing)))
                assert got == [("b", "b2"), ("a", "b1")], policy
                got = _taken(
                    await backend.runs.claim_due(
                        _policy(10, now=T0, queues=frozenset({"mail", "billing"}))
                    )
                )
                assert got == [(None, "m1")], policy
                got = _taken(await backend.runs.claim_due(_policy(10, now=T0)))
                assert got == [(None, "d2"), (None, "d1")], policy
            finally:
                await backend.close()

    asyncio.run(body())


def test_fair_claims_go_round_the_tenants_within_a_priority(
    pg_url: str, schema_name: Names
) -> None:
    """The fair policy serves the highest priority first and shares it among tenants: a
    tenant with one urgent run is not starved by another's many."""

    async def body() -> None:
        backend = PostgresBackend(
            pg_url, schema=schema_name("qfair"), claim_policy="fair", pool_max_size=2
        )
        await backend.open()
        try:
            ref = await _graph(backend, OWNERS)
            due = T0 - timedelta(seconds=10)
            for i in range(5):
                await _start(backend, Tenant("a"), ref, f"a{i}", due + timedelta(seconds=i), "q", 5)
            await _start(backend, Tenant("b"), ref, "b0", due + timedelta(seconds=9), "q", 5)
            await _start(backend, Tenant("b"), ref, "low", due, "q", 0)
            got = _taken(await backend.runs.claim_due(_policy(2, now=T0)))
            assert sorted(got) == [("a", "a0"), ("b", "b0")]
            got = _taken(await backend.runs.claim_due(_policy(10, now=T0)))
            assert got[-1] == ("b", "low") and len(got) == 5
        finally:
            await backend.close()

    asyncio.run(body())


def test_inspect_reports_the_queue_and_priority_a_start_stored(
    pg_url: str, schema_name: Names
) -> None:
    """Alone and group-committed (several starts at once), a start keeps its queue and
    priority; plain starts report the defaults; claims and commits leave them alone."""

    async def body() -> None:
        backend = PostgresBackend(pg_url, schema=schema_name("qinspect"), pool_max_size=2)
        await backend.open()
        try:
            ref = await _graph(backend, OWNERS)
            wanted = {f"r{i}": (QUEUES[i % 3], (i % 5) - 2) for i in range(12)}
            await asyncio.gather(
                *(
                    _start(backend, Tenant("a"), ref, run_id, T0, queue, priority)
                    for run_id, (queue, priority) in wanted.items()
                )
            )
            await backend.runs.claim_due(_policy(20, now=T0 + timedelta(seconds=1)))
            for run_id, (queue, priority) in wanted.items():
                info = await backend.runs.inspect_run(Tenant("a"), run_id)
                assert isinstance(info, RunInfo)
                assert (info.queue, info.priority) == (queue, priority), run_id
        finally:
            await backend.close()

    asyncio.run(body())


# -- the ledger -------------------------------------------------------------------------------


async def _ledger_script(backend: Backend, clock: ManualClock) -> list[object]:
    """Configs, grants, renewals, expiries, releases and refunds; every answer."""
    queues = backend.queues
    out: list[object] = [await queues.fetch_queue("default"), await queues.fetch_queue("nope")]
    out.append(await queues.acquire_slots("nope", ["x"], TTL))
    out.append(await queues.acquire_slots("default", ["d1", "d2"], TTL))
    limited = QueueConfig(
        name="api", execution_limit=3, rate=RateLimit(count=4, period=timedelta(seconds=8))
    )
    out.append(await queues.set_queue(limited))
    out.append(await queues.acquire_slots("api", ["a", "b"], TTL))
    out.append(await queues.acquire_slots("api", ["b", "c", "d"], TTL))  # b held; 1 fits
    out.append(await queues.list_queues())
    clock.advance(timedelta(seconds=2))
    out.append(await queues.renew_slots("api", ["a", "zz"], TTL))
    await queues.release_slots("api", ["b", "c"], refund=True)
    out.append(await queues.acquire_slots("api", ["e", "f", "g"], TTL))  # tokens: 2 + refund
    out.append(await queues.list_queues())
    clock.advance(TTL - timedelta(seconds=2))  # b, c released; e, f held; a renewed
    out.append(await queues.acquire_slots("api", ["h"], TTL))
    clock.advance(timedelta(seconds=3))  # e and f expired strictly after their time
    out.append(await queues.list_queues())
    out.append(await queues.acquire_slots("api", ["i", "j", "k"], TTL))
    out.append(await queues.set_queue(attrs.evolve(limited, execution_limit=1, paused=False)))
    out.append(await queues.acquire_slots("api", ["l"], TTL))
    out.append(await queues.set_queue(attrs.evolve(limited, rate=None, paused=True)))
    out.append(await queues.acquire_slots("api", ["m"], TTL))
    out.append(await queues.set_queue(QueueConfig(name="api", execution_limit=9)))
    out.append(await queues.acquire_slots("api", ["n", "o"], TTL, now=T0 + timedelta(hours=1)))
    out.append(await queues.renew_slots("api", ["n"], TTL, now=T0 + timedelta(hours=2)))
    await queues.release_slots("api", ["n", "o", "unknown"])
    out.append(await queues.list_queues())
    bad_calls: list[Callable[[], Awaitable[object]]] = [
        lambda: queues.acquire_slots("api", [], TTL),
        lambda: queues.acquire_slots("api", ["x", "x"], TTL),
        lambda: queues.acquire_slots("bad name", ["x"], TTL),
        lambda: queues.renew_slots("api", ["x"], -TTL),
        lambda: queues.set_queue(QueueConfig(name="api", execution_limit=0)),
        lambda: queues.fetch_queue(""),
    ]
    for bad in bad_calls:
        with pytest.raises(ValueError):
            await bad()
    out.append(await queues.list_queues())  # the refused calls changed nothing
    return out


def test_the_ledger_answers_as_the_reference(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        memory = await _ledger_script(MemoryBackend(clock=clock), clock)
        clock.set(T0)
        pg = PostgresBackend(pg_url, schema=schema_name("qledger"), clock=clock, pool_max_size=2)
        await pg.open()
        try:
            got = await _ledger_script(pg, clock)
        finally:
            await pg.close()
        assert got == memory
        assert memory[1] == NotFound("queue") and memory[5] == 2 and memory[6] == 1

    asyncio.run(body())


def test_the_ledger_runs_on_the_database_clock(pg_url: str, schema_name: Names) -> None:
    """Without a test clock the slots expire by the server's ``clock_timestamp()``."""

    async def body() -> None:
        backend = PostgresBackend(pg_url, schema=schema_name("qclock"), pool_max_size=2)
        await backend.open()
        try:
            queues = backend.queues
            await queues.set_queue(QueueConfig(name="one", execution_limit=1))
            assert await queues.acquire_slots("one", ["a"], timedelta(0)) == 1
            conn = await admin(pg_url)
            try:
                await conn.execute("SELECT pg_sleep(0.01)")
            finally:
                await conn.close()
            assert await queues.acquire_slots("one", ["b"], TTL) == 1  # a expired
            assert await queues.acquire_slots("one", ["c"], TTL) == 0
            (status,) = [s for s in await queues.list_queues() if s.config.name == "one"]
            assert status.running == 1
        finally:
            await backend.close()

    asyncio.run(body())


def test_list_queues_reports_depth_from_the_runs(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        answers = []
        for backend in (
            MemoryBackend(clock=clock),
            PostgresBackend(pg_url, schema=schema_name("qdepth"), clock=clock, pool_max_size=2),
        ):
            if isinstance(backend, PostgresBackend):
                await backend.open()
            try:
                await _seed(backend, random.Random(7), 30)
                for name in ("zeta", "mail", "billing"):
                    await backend.queues.set_queue(QueueConfig(name=name, execution_limit=2))
                await backend.runs.claim_due(_policy(4, now=T0, queues=frozenset({"mail"})))
                answers.append(await backend.queues.list_queues())
            finally:
                if isinstance(backend, PostgresBackend):
                    await backend.close()
        assert answers[0] == answers[1]
        assert [s.config.name for s in answers[0]] == ["billing", "default", "mail", "zeta"]
        assert all(s.depth > 0 for s in answers[0][:3]), answers[0]

    asyncio.run(body())


def test_eight_racing_connections_never_exceed_the_limit(pg_url: str, schema_name: Names) -> None:
    """Eight backends (eight connections) ask for slots of a queue limited to 3 at once,
    50 rounds, holding what they got across rounds and releasing some at random: the
    grants held never exceed the limit, and the table agrees."""

    async def body() -> None:
        schema = schema_name("qrace")
        backends = [PostgresBackend(pg_url, schema=schema, pool_max_size=1) for _ in range(8)]
        for backend in backends:
            await backend.open()
        try:
            await backends[0].queues.set_queue(QueueConfig(name="q", execution_limit=3))
            rng = random.Random(25)
            held: dict[int, list[str]] = {i: [] for i in range(8)}

            async def ask(i: int, round_: int) -> None:
                queues = backends[i].queues
                mine = held[i]
                if mine and rng.random() < 0.5:
                    await queues.release_slots("q", mine[:1])
                    del mine[:1]
                wanted = [f"w{i}-{round_}-{k}" for k in range(2)]
                got = await queues.acquire_slots("q", wanted, timedelta(hours=1))
                mine.extend(wanted[:got])

            conn = await admin(pg_url)
            try:
                for round_ in range(50):
                    await asyncio.gather(*(ask(i, round_) for i in range(8)))
                    total = sum(len(v) for v in held.values())
                    assert total <= 3, (round_, held)
                    cur = await conn.execute(
                        f'SELECT count(*) FROM "{schema}".queue_slots WHERE queue = %s', ("q",)
                    )
                    row = await cur.fetchone()
                    assert row is not None and row[0] == total, (round_, row, held)
                    assert total == 3  # always full: a released slot is taken again at once
            finally:
                await conn.close()
        finally:
            for backend in backends:
                await backend.close()

    asyncio.run(body())
