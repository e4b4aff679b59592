"""The fused claim of a limited queue on PostgreSQL (``claim_with_slots``,
``SlotClaims``; issue #25): the same answers as the three calls it replaces on the memory
reference, one store call per claimer round with the ended claims' slots carried in it,
and bad input refused with nothing changed."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from docket_contract_tests.fixtures import graph_document, graph_ref, init_proposal, new_run
from docket_postgres import PostgresBackend

from docket.clock import ManualClock
from docket.contract import ClaimBatch, ClaimPolicy
from docket.contract.memory import MemoryBackend
from docket.contract.protocols import SlotClaims
from docket.records import TENANTLESS, GraphVersion, QueueConfig, RateLimit
from docket.runtime.queues import QueueClaimer, QueueRuntime, claim_with_slots

Names = Callable[[str], str]
T0 = datetime(2030, 1, 1, tzinfo=UTC)
TTL = timedelta(minutes=5)
Backend = Any  # PostgresBackend or MemoryBackend


def _policy(limit: int, at: datetime) -> ClaimPolicy:
    return ClaimPolicy(limit=limit, orphan_ttl=TTL, max_claim_attempts=50, now=at)


async def _seed(backend: Backend, queue: str, count: int, due: datetime = T0) -> None:
    document = graph_document("g")
    ref = graph_ref(document)
    assert isinstance(await backend.graphs.save_graph(TENANTLESS, ref, document), GraphVersion)
    for i in range(count):
        run = new_run(f"{queue}-{i:02d}", ref, T0)
        wake = due - timedelta(seconds=60 - i)
        proposal = attrs.evolve(init_proposal(run, wake), queue=queue, priority=i % 3 - 1)
        assert await backend.transitions.initialize(TENANTLESS, proposal, []) == run
    other = new_run("other", ref, T0)
    assert await backend.transitions.initialize(TENANTLESS, init_proposal(other, due), []) == other


async def _running(backend: Backend, name: str) -> int:
    (status,) = [s for s in await backend.queues.list_queues() if s.config.name == name]
    return int(status.running)


Answer = tuple[int, list[str] | None, int]


async def _script(backend: Backend, clock: ManualClock, fused: bool) -> list[Answer]:
    """Claims in a queue limited to 3 with a rate of 4 a minute: the fused claim on
    PostgreSQL, the three calls on memory; releases carried (or sent) in between."""
    rate = RateLimit(count=4, period=timedelta(minutes=1))
    config = QueueConfig(name="api", execution_limit=3, rate=rate)
    await backend.queues.set_queue(config)
    await _seed(backend, "api", 5)
    answers: list[Answer] = []
    held: list[str] = []
    steps = [
        (0, 2, []),  # 2 claimed, 2 tokens left
        (1, 5, []),  # 1 slot left under the limit
        (2, 2, [0]),  # one released: 1 slot, 1 token
        (3, 3, [1, 2]),  # no token left: nothing granted, the releases still happen
        (40, 3, []),  # 40 s on: tokens for the one run left
        (41, 3, []),  # none left to claim: granted, unused, refunded
        (400, 3, []),  # every slot and claim expired: the orphans are claimed again
    ]
    for index, (seconds, want, release) in enumerate(steps):
        at = T0 + timedelta(seconds=seconds)
        clock.set(at)  # the composed calls read the backend's clock
        holders = [f"h{index}-{n}" for n in range(want)]
        freed = [held[n] for n in release]
        if fused:
            got = await backend.queues.claim_with_slots(_policy(99, at), "api", holders, freed)
        else:
            if freed:
                await backend.queues.release_slots("api", freed)
            got = await claim_with_slots(backend.queues, backend, _policy(99, at), "api", holders)
        leases = None if got is None else [x.run_id for x in _batch(got).leases]
        held.extend(holders[: len(leases or [])])
        answers.append((index, leases, await _running(backend, "api")))
    return answers


def _batch(got: object) -> ClaimBatch:
    assert isinstance(got, ClaimBatch), got
    return got


def test_the_fused_claim_answers_as_the_three_calls_on_the_reference(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        memory = MemoryBackend(clock=clock)
        expected = await _script(memory, clock, fused=False)
        clock.set(T0)
        pg = PostgresBackend(pg_url, schema=schema_name("qfused"), clock=clock, pool_max_size=2)
        await pg.open()
        try:
            assert isinstance(pg.queues, SlotClaims)
            assert not isinstance(memory.queues, SlotClaims)  # memory composes the calls
            assert await _script(pg, clock, fused=True) == expected
            claimed = [None if ids is None else len(ids) for _, ids, _ in expected]
            assert claimed == [2, 1, 1, None, 1, 0, 3]  # what the script is about
        finally:
            await pg.close()

    asyncio.run(body())


def test_bad_input_is_refused_and_changes_nothing(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        pg = PostgresBackend(pg_url, schema=schema_name("qfbad"), pool_max_size=2)
        await pg.open()
        try:
            await pg.queues.set_queue(QueueConfig(name="api", execution_limit=2))
            await _seed(pg, "api", 2, due=datetime.now(UTC))
            assert await pg.queues.acquire_slots("api", ["mine"], TTL) == 1
            policy = ClaimPolicy(limit=5, orphan_ttl=TTL, max_claim_attempts=50)
            bad = [
                (policy, "api", [], []),
                (policy, "api", ["x", "x"], []),
                (policy, "api", ["x"], ["x"]),  # released and requested
                (policy, "bad name", ["x"], []),
                (attrs.evolve(policy, orphan_ttl=timedelta(seconds=-1)), "api", ["x"], []),
            ]
            for args in bad:
                with pytest.raises(ValueError):
                    await pg.queues.claim_with_slots(*args)
            assert await _running(pg, "api") == 1  # "mine" still held, nothing claimed
            assert await pg.queues.claim_with_slots(policy, "nope", ["x"], []) is None
            await pg.queues.set_queue(QueueConfig(name="api", execution_limit=2, paused=True))
            assert await pg.queues.claim_with_slots(policy, "api", ["x"], ["mine"]) is None
            assert await _running(pg, "api") == 0  # the release went through all the same
        finally:
            await pg.close()

    asyncio.run(body())


class _Counted:
    """Counts the calls made through the queue store (the real one underneath)."""

    def __init__(self, inner: object, calls: Counter[str]) -> None:
        self._inner = inner
        self._calls = calls

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: object, **kwargs: object) -> object:
            self._calls[name] += 1
            return attr(*args, **kwargs)

        return call


class _CountedBackend:
    def __init__(self, inner: PostgresBackend) -> None:
        self.calls: Counter[str] = Counter()
        self._inner = inner
        self.runs = _Counted(inner.runs, self.calls)
        self.queues = _Counted(inner.queues, self.calls)

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


def test_a_round_is_one_fused_call_that_carries_the_ended_claims_slots(
    pg_url: str, schema_name: Names
) -> None:
    """While a worker dispatches, an ended claim's slot waits for the next round in its
    queue (one transaction for both); with no round it goes alone, promptly, and the
    last worker to stop sends what is left."""

    async def body() -> None:
        pg = PostgresBackend(pg_url, schema=schema_name("qfround"), pool_max_size=2)
        await pg.open()
        try:
            await pg.queues.set_queue(QueueConfig(name="api", execution_limit=2))
            await _seed(pg, "api", 5, due=datetime.now(UTC))  # the database's clock
            counted = _CountedBackend(pg)
            queues = QueueRuntime(counted, refresh=3600.0)  # type: ignore[arg-type]
            claimer = QueueClaimer(counted, queues, served={"api"})  # type: ignore[arg-type]
            policy = ClaimPolicy(limit=3, orphan_ttl=TTL, max_claim_attempts=50)
            first = _batch(await claimer.claim(policy))
            assert len(first.leases) == 2  # the limit
            assert counted.calls == Counter({"queue_configs": 1, "claim_with_slots": 1})
            assert await _running(pg, "api") == 2

            queues.slots.start_carrying()
            await queues.slots.release(first.leases[0])
            assert counted.calls["release_slots"] == 0  # noted, not sent
            second = _batch(await claimer.claim(policy))
            assert len(second.leases) == 1  # the carried slot was free for it
            assert counted.calls == Counter({"queue_configs": 1, "claim_with_slots": 2})
            assert await _running(pg, "api") == 2

            await queues.slots.release(first.leases[1])  # no round follows: sent alone
            for _ in range(600):
                if await _running(pg, "api") == 1:
                    break
                await asyncio.sleep(0.01)  # polling the store for the condition
            assert await _running(pg, "api") == 1
            assert counted.calls["release_slots"] == 1

            await queues.slots.release(second.leases[0])
            await queues.slots.stop_carrying()  # the last carrier sends it now
            assert await _running(pg, "api") == 0
            assert counted.calls["release_slots"] == 2
        finally:
            await pg.close()

    asyncio.run(body())


class _Gated:
    """The queue store, but the first ``release_slots`` waits for ``go`` (a timed send of
    noted releases caught in flight)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.releases = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def claim_with_slots(self, *args: Any) -> object:
        return await self._inner.claim_with_slots(*args)

    async def release_slots(self, *args: Any, **kwargs: Any) -> None:
        self.releases += 1
        if self.releases == 1:
            self.entered.set()
            await self.go.wait()
        await self._inner.release_slots(*args, **kwargs)


def test_a_stop_during_a_timed_send_still_releases_every_noted_slot(
    pg_url: str, schema_name: Names
) -> None:
    """The last worker's stop cancels the timed send of noted releases; what that send
    had not done is sent by the stop (it was lost, and the slot held until its TTL)."""

    async def body() -> None:
        pg = PostgresBackend(pg_url, schema=schema_name("qfstop"), pool_max_size=2)
        await pg.open()
        try:
            await pg.queues.set_queue(QueueConfig(name="api", execution_limit=2))
            await _seed(pg, "api", 1, due=datetime.now(UTC))
            gated = _Gated(pg.queues)
            backend = _CountedBackend(pg)
            backend.queues = gated  # type: ignore[assignment]
            queues = QueueRuntime(backend, refresh=3600.0)  # type: ignore[arg-type]
            claimer = QueueClaimer(backend, queues, served={"api"})  # type: ignore[arg-type]
            policy = ClaimPolicy(limit=1, orphan_ttl=TTL, max_claim_attempts=50)
            (lease,) = _batch(await claimer.claim(policy)).leases
            queues.slots.start_carrying()
            await queues.slots.release(lease)  # noted; the timed send starts and is held
            await asyncio.wait_for(gated.entered.wait(), timeout=60)
            await queues.slots.stop_carrying()  # cancels the held send, then sends
            assert await _running(pg, "api") == 0
            assert gated.releases == 2
        finally:
            await pg.close()

    asyncio.run(body())
