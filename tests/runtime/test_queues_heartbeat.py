"""A claim's heartbeat and its queue slot: a claim never runs on outside its queue's limit.

A stall past ``orphan_ttl`` lets the slot expire while the claim itself may still be
refreshed (nobody took it). If another claimer took the slot meanwhile, the claim must
end (and be handed back); if the slot is still free, the heartbeat takes it again.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from docket import Docket
from docket.contract.memory import MemoryBackend
from docket.contract.protocols import QueueStore
from docket.proposals import ClaimBatch, ClaimPolicy, Lease
from docket.records import RunInfo
from docket.runtime.heartbeat import Heartbeat
from docket.runtime.queues import QueueView, SlotBook
from tests.runtime.queue_app import NODES, recording, wait_for

TTL = timedelta(seconds=30)


async def _claimed(backend: MemoryBackend) -> tuple[Lease, SlotBook, QueueStore]:
    docket = Docket(backend, nodes=NODES, context={"log": []})
    await docket.open()  # a store handed in stays open; nothing else to close
    await docket.configure_queue("q", execution_limit=1)
    ref = await docket.save_graph(recording(0.0))
    await docket.start_run(ref, queue="q")
    store = backend.queues
    assert await store.acquire_slots("q", ["mine"], TTL) == 1
    batch = await backend.runs.claim_due(
        ClaimPolicy(limit=1, orphan_ttl=TTL, max_claim_attempts=5, queues=frozenset({"q"}))
    )
    assert isinstance(batch, ClaimBatch)
    (lease,) = batch.leases
    slots = SlotBook(QueueView(backend, refresh=0.0))
    slots.hold(lease.claim_token, "q", "mine")
    return lease, slots, store


def test_a_slot_taken_by_another_claimer_ends_the_claim_and_hands_it_back() -> None:
    async def scenario() -> None:
        backend = MemoryBackend()
        lease, slots, store = await _claimed(backend)
        await store.release_slots("q", ["mine"])  # as if it expired in a stall
        assert await store.acquire_slots("q", ["theirs"], TTL) == 1
        beat = Heartbeat(backend, lease, interval=0.01, slots=slots)
        beat.start()
        try:
            await asyncio.wait_for(beat.lost.wait(), timeout=30)
        finally:
            await beat.stop()
        info = await backend.runs.inspect_run(lease.owner, lease.run_id)
        assert isinstance(info, RunInfo)
        assert info.claimed_at is None  # handed back
        (status,) = [s for s in await store.list_queues() if s.config.name == "q"]
        assert status.running == 1  # only the other claimer's slot

    asyncio.run(scenario())


def test_an_expired_slot_still_free_is_taken_again_and_the_claim_goes_on() -> None:
    async def scenario() -> None:
        backend = MemoryBackend()
        lease, slots, store = await _claimed(backend)
        await store.release_slots("q", ["mine"])  # expired, and nobody took its place
        beat = Heartbeat(backend, lease, interval=0.01, slots=slots)
        beat.start()
        try:
            await wait_for(lambda: beat.refreshes >= 3)
        finally:
            await beat.stop()
        assert not beat.lost.is_set()
        assert await store.acquire_slots("q", ["theirs"], TTL) == 0  # ours again

    asyncio.run(scenario())
