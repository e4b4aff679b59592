"""The fused claim of a limited queue on SQLite (``claim_with_slots``, ``SlotClaims``;
issue #25): one write instead of the three the runtime composes otherwise, with the same
answers as those three calls on the memory reference, and bad input refused with nothing
changed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from docket_contract_tests.fixtures import graph_document, graph_ref, init_proposal, new_run
from docket_sqlite import SQLiteBackend

from docket.clock import ManualClock
from docket.contract import ClaimBatch, ClaimPolicy
from docket.contract.memory import MemoryBackend
from docket.contract.protocols import SlotClaims
from docket.records import TENANTLESS, GraphVersion, QueueConfig, RateLimit
from docket.runtime.queues import claim_with_slots

T0 = datetime(2030, 1, 1, tzinfo=UTC)
TTL = timedelta(minutes=5)
Answer = tuple[int, list[str] | None, int]


def _policy(limit: int, at: datetime) -> ClaimPolicy:
    return ClaimPolicy(limit=limit, orphan_ttl=TTL, max_claim_attempts=50, now=at)


async def _seed(backend: Any, queue: str, count: int) -> None:
    document = graph_document("g")
    ref = graph_ref(document)
    assert isinstance(await backend.graphs.save_graph(TENANTLESS, ref, document), GraphVersion)
    for i in range(count):
        run = new_run(f"{queue}-{i:02d}", ref, T0)
        wake = T0 - timedelta(seconds=60 - i)
        proposal = attrs.evolve(init_proposal(run, wake), queue=queue, priority=i % 3 - 1)
        assert await backend.transitions.initialize(TENANTLESS, proposal, []) == run
    other = new_run("other", ref, T0)
    assert await backend.transitions.initialize(TENANTLESS, init_proposal(other, T0), []) == other


async def _running(backend: Any, name: str) -> int:
    (status,) = [s for s in await backend.queues.list_queues() if s.config.name == name]
    return int(status.running)


def _batch(got: object) -> ClaimBatch:
    assert isinstance(got, ClaimBatch), got
    return got


async def _script(backend: Any, clock: ManualClock, fused: bool) -> list[Answer]:
    """Claims in a queue limited to 3 with a rate of 4 a minute, releases carried (or
    sent) in between: the fused claim on SQLite, the three calls on memory."""
    rate = RateLimit(count=4, period=timedelta(minutes=1))
    await backend.queues.set_queue(QueueConfig(name="api", execution_limit=3, rate=rate))
    await _seed(backend, "api", 5)
    answers: list[Answer] = []
    held: list[str] = []
    steps = [(0, 2, []), (1, 5, []), (2, 2, [0]), (3, 3, [1, 2]), (40, 3, []), (41, 3, [])]
    for index, (seconds, want, release) in enumerate(steps):
        at = T0 + timedelta(seconds=seconds)
        clock.set(at)
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


def test_the_fused_claim_answers_as_the_three_calls_on_the_reference(tmp_path: Path) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        memory = MemoryBackend(clock=clock)
        expected = await _script(memory, clock, fused=False)
        clock.set(T0)
        lite = SQLiteBackend(tmp_path / "fused.db", clock=clock)
        try:
            assert isinstance(lite.queues, SlotClaims)
            assert await _script(lite, clock, fused=True) == expected
            claimed = [None if ids is None else len(ids) for _, ids, _ in expected]
            assert claimed == [2, 1, 1, None, 1, 0]  # what the script is about
        finally:
            await lite.close()

    asyncio.run(body())


def test_bad_input_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        lite = SQLiteBackend(tmp_path / "bad.db", clock=clock)
        try:
            await lite.queues.set_queue(QueueConfig(name="api", execution_limit=2))
            await _seed(lite, "api", 2)
            assert await lite.queues.acquire_slots("api", ["mine"], TTL) == 1
            policy = _policy(5, T0)
            bad = [
                (policy, "api", [], []),
                (policy, "api", ["x", "x"], []),
                (policy, "api", ["x"], ["x"]),  # released and requested
                (policy, "bad name", ["x"], []),
                (attrs.evolve(policy, orphan_ttl=timedelta(seconds=-1)), "api", ["x"], []),
            ]
            for args in bad:
                with pytest.raises(ValueError):
                    await lite.queues.claim_with_slots(*args)
            assert await _running(lite, "api") == 1  # "mine" still held, nothing claimed
            assert await lite.queues.claim_with_slots(policy, "nope", ["x"], []) is None
            await lite.queues.set_queue(QueueConfig(name="api", execution_limit=2, paused=True))
            assert await lite.queues.claim_with_slots(policy, "api", ["x"], ["mine"]) is None
            assert await _running(lite, "api") == 0  # the release went through all the same
        finally:
            await lite.close()

    asyncio.run(body())
