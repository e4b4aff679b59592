"""The claim rounds of ``docket.runtime.queues.QueueClaimer`` counted call by call on the
memory reference backend: without a limited queue among those served a round is exactly
one ``claim_due`` (the configs are read at most once per ``queue_refresh``); a limited
queue costs one ``acquire_slots``, a ``claim_due`` of that queue, and a refund of the
slots it did not use."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

from docket import Docket
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import ClaimBatch, ClaimPolicy
from docket.runtime.queues import QueueClaimer, QueueRuntime
from tests.runtime.queue_app import NODES, recording


class Counted:
    """Counts the calls made through an object's attributes (a store of the backend)."""

    def __init__(self, inner: object, calls: Counter[str], log: list[object]) -> None:
        self._inner = inner
        self._calls = calls
        self._log = log

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: object, **kwargs: object) -> object:
            self._calls[name] += 1
            if name == "claim_due":
                self._log.append(args[0])
            return attr(*args, **kwargs)

        return call


class CountedBackend:
    def __init__(self, inner: MemoryBackend) -> None:
        self.calls: Counter[str] = Counter()
        self.policies: list[object] = []
        self._inner = inner
        self.runs = Counted(inner.runs, self.calls, self.policies)
        self.queues = Counted(inner.queues, self.calls, self.policies)

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


POLICY = ClaimPolicy(limit=8, orphan_ttl=timedelta(seconds=30), max_claim_attempts=5)


def test_without_a_limited_queue_a_round_is_one_claim_due() -> None:
    async def scenario() -> None:
        memory = MemoryBackend()
        async with Docket(memory, nodes=NODES, context={"log": []}) as docket:
            await docket.configure_queue("wide")  # configured, not limited
            ref = await docket.save_graph(recording(0.0))
            for queue in ("wide", "default"):
                await docket.start_run(ref, queue=queue)
            counted = CountedBackend(memory)
            claimer = QueueClaimer(counted, QueueRuntime(counted, refresh=3600.0))  # type: ignore[arg-type]
            first = await claimer.claim(POLICY)
            assert isinstance(first, ClaimBatch) and len(first.leases) == 2
            for _ in range(4):
                await claimer.claim(POLICY)
            assert counted.calls == Counter({"claim_due": 5, "list_queues": 1})
            assert all(p == POLICY for p in counted.policies)  # every queue: queues=None

    asyncio.run(scenario())


def test_a_limited_queue_takes_slots_claims_in_it_and_refunds_the_rest() -> None:
    async def scenario() -> None:
        memory = MemoryBackend()
        async with Docket(memory, nodes=NODES, context={"log": []}) as docket:
            await docket.configure_queue("tight", execution_limit=3)
            ref = await docket.save_graph(recording(0.0))
            await docket.start_run(ref, queue="tight")  # one run for three slots
            plain = await docket.start_run(ref)
            counted = CountedBackend(memory)
            queues = QueueRuntime(counted, refresh=3600.0)  # type: ignore[arg-type]
            claimer = QueueClaimer(counted, queues)  # type: ignore[arg-type]
            batch = await claimer.claim(POLICY)
            assert isinstance(batch, ClaimBatch) and len(batch.leases) == 2
            assert counted.calls == Counter(
                {"list_queues": 1, "acquire_slots": 1, "claim_due": 2, "release_slots": 1}
            )
            tight, rest = counted.policies
            assert isinstance(tight, ClaimPolicy) and isinstance(rest, ClaimPolicy)
            assert (tight.queues, tight.limit) == (frozenset({"tight"}), 3)
            assert (rest.queues, rest.limit) == (frozenset({"default"}), 7)
            assert len(queues.slots) == 1  # the one claim in "tight" holds one slot
            assert [s.running for s in await docket.queues() if s.config.name == "tight"] == [1]
            (held,) = [lease for lease in batch.leases if lease.run_id != plain.id]
            await queues.slots.release(held)
            await queues.slots.release(held)  # at most one release per claim
            assert counted.calls["release_slots"] == 2
            assert [s.running for s in await docket.queues() if s.config.name == "tight"] == [0]

    asyncio.run(scenario())
