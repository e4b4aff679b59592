"""Eager starts: a run started through a Docket whose running worker has a free slot is
written already claimed by that worker (``ClaimedStarts``) and drained at once, with no
wake-up and no ``claim_due`` in between. Otherwise — no worker, no free slot, a stopping
worker, ``eager_starts=False``, or a store without the member — the start is plain."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from docket import Docket, errors
from docket.contract.errors import TransitionResult
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import ClaimBatch, ClaimPolicy, InitProposal
from docket.records import Event, OwnerScope, RunStatus
from tests.runtime.helpers import check_events
from tests.runtime.test_worker import NODES, napping, wait_for


class CountingBackend(MemoryBackend):
    """The reference backend on the system clock, counting starts and claims."""

    def __init__(self) -> None:
        super().__init__()
        self.plain_starts = 0
        self.claimed_starts = 0
        self.claimed_by_poll: list[str] = []

    async def initialize(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]
    ) -> TransitionResult:
        self.plain_starts += 1
        return await super().initialize(owner, proposal, events)

    async def initialize_claimed(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event], claim_token: str
    ) -> TransitionResult:
        self.claimed_starts += 1
        return await super().initialize_claimed(owner, proposal, events, claim_token)

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch:
        batch = await super().claim_due(policy)
        assert isinstance(batch, ClaimBatch)
        self.claimed_by_poll.extend(lease.run_id for lease in batch.leases)
        return batch


class WithoutClaimedStarts(CountingBackend):
    """A store that does not declare the optional member (None: Protocols read it so)."""

    initialize_claimed = None  # type: ignore[assignment]


def _docket(backend: MemoryBackend, **options: object) -> Docket:
    options.setdefault("nodes", NODES)
    options.setdefault("poll_interval", 30.0)  # a poll would show in the test's timing
    return Docket(backend, **options)  # type: ignore[arg-type]


def test_a_run_started_beside_a_worker_with_room_is_drained_without_a_claim() -> None:
    async def scenario() -> None:
        backend = CountingBackend()
        async with _docket(backend) as docket:
            ref = await docket.save_graph(napping(0, steps=3))
            async with docket.worker(concurrency=4) as worker:
                await wait_for(lambda: worker.stats.polls >= 1)  # its first poll: nothing
                ids = [(await docket.start_run(ref, run_id=f"r{i}")).id for i in range(4)]
                for run_id in ids:
                    done = await docket.await_run(run_id, timeout=5, poll_interval=0.005)
                    assert done.status is RunStatus.DONE
                    check_events(done, await docket.history(run_id))
                assert worker.stats.eager_starts == 4
                await wait_for(lambda: worker.stats.outcomes["parked"] == 4)
            assert (backend.claimed_starts, backend.plain_starts) == (4, 0)
            assert backend.claimed_by_poll == []  # no run waited for a poll or a wake-up
            info = await docket.inspect_run("r0")
            assert info.claim_attempts == 0 and info.claimed_at is None  # finished cleanly

    asyncio.run(scenario())


def test_without_a_free_slot_the_start_is_plain_and_claimed_later() -> None:
    async def scenario() -> None:
        backend = CountingBackend()
        async with _docket(backend, poll_interval=0.05) as docket:
            ref = await docket.save_graph(napping(0.3))
            async with docket.worker(concurrency=1) as worker:
                await docket.start_run(ref, run_id="first")  # takes the only slot
                await docket.start_run(ref, run_id="second")  # no room: a plain start
                assert worker.stats.eager_starts == 1
                for run_id in ("first", "second"):
                    done = await docket.await_run(run_id, timeout=5, poll_interval=0.01)
                    assert done.status is RunStatus.DONE
            assert (backend.claimed_starts, backend.plain_starts) == (1, 1)
            assert backend.claimed_by_poll == ["second"]

    asyncio.run(scenario())


@pytest.mark.parametrize("how", ["setting", "no member", "no worker", "stopping"])
def test_plain_starts_when_eager_starts_do_not_apply(how: str) -> None:
    async def scenario() -> None:
        backend = WithoutClaimedStarts() if how == "no member" else CountingBackend()
        options: dict[str, object] = {"poll_interval": 0.05}
        if how == "setting":
            options["eager_starts"] = False
        async with _docket(backend, **options) as docket:
            ref = await docket.save_graph(napping(0))
            worker = docket.worker()
            if how != "no worker":
                worker.start()
                if how == "stopping":
                    worker.request_stop()
            run = await docket.start_run(ref, run_id="r")
            assert run.status is RunStatus.RUNNING
            assert (backend.claimed_starts, backend.plain_starts) == (0, 1)
            assert worker.stats.eager_starts == 0
            info = await docket.inspect_run("r")
            if how in ("setting", "no member"):  # the worker claims it through claim_due
                done = await docket.await_run("r", timeout=5, poll_interval=0.01)
                assert done.status is RunStatus.DONE
                assert backend.claimed_by_poll == ["r"]
            else:  # nobody drains it: due, unclaimed
                assert info.claimed_at is None and info.wake_at is not None
            await worker.stop()

    asyncio.run(scenario())


def test_a_refused_start_gives_the_slot_back() -> None:
    async def scenario() -> None:
        backend = CountingBackend()
        async with _docket(backend) as docket:
            ref = await docket.save_graph(napping(0.2))
            async with docket.worker(concurrency=1) as worker:
                await docket.start_run(ref, run_id="taken")
                await docket.await_run("taken", timeout=5, poll_interval=0.01)
                with pytest.raises(errors.Conflict):
                    await docket.start_run(ref, run_id="taken")
                assert worker.stats.eager_starts == 1
                # the slot promised to the refused start is free again: the next start
                # is eager too
                await docket.start_run(ref, run_id="next")
                assert worker.stats.eager_starts == 2
                await docket.await_run("next", timeout=5, poll_interval=0.01)
            assert backend.claimed_by_poll == []

    asyncio.run(scenario())


def test_a_claimed_start_whose_process_died_is_taken_over_after_the_ttl() -> None:
    """The start wrote the run claimed and its process died before draining it: another
    worker takes it over as an expired claim once ``claim_ttl`` passes, as it would any
    dead worker's run."""

    async def scenario() -> None:
        backend = CountingBackend()
        a = _docket(backend, claim_ttl=0.3, shutdown_timeout=0.05)
        b = _docket(backend, claim_ttl=0.3, poll_interval=0.05)
        async with a, b:
            ref = await a.save_graph(napping(0))
            async with a.worker() as dying:
                # died between the start's commit and its drain
                setattr(dying, "adopt", lambda *_: None)  # noqa: B010
                await a.start_run(ref, run_id="orphan")
            assert backend.claimed_starts == 1
            info = await a.inspect_run("orphan")
            assert info.claimed_at is not None and info.wake_at is None
            assert info.claim_attempts == 1
            async with b.worker() as taker:
                done = await b.await_run("orphan", timeout=5, poll_interval=0.01)
            assert done.status is RunStatus.DONE
            assert backend.claimed_by_poll == ["orphan"] and taker.stats.leases == 1
            check_events(done, await b.history("orphan"))

    asyncio.run(scenario())
