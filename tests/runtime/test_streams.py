"""The runtime under the streams: the emission pump, ``ctx.emit``, and a stream that
outlives a broken feed subscription (docket/runtime/emissions.py, streams.py)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from docket import Docket, errors
from docket.contract.errors import Retryable, StoreError
from docket.contract.feed import FeedHub
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import EventListQuery
from docket.contract.protocols import FeedSubscription
from docket.core.plan import Activation
from docket.graph.nodes import NodeContext, RetryPolicy
from docket.records import (
    TENANTLESS,
    Emission,
    Event,
    EventPage,
    EventsPruned,
    FeedItem,
    OwnerScope,
    Scope,
    Tenant,
)
from docket.runtime.emissions import EmissionPump
from docket.runtime.streams import StreamTimes, follow_run
from docket.values import NonDurableValue
from tests.facade.test_streams import NODES, Gates, story_graph

WAIT = 30.0


class HeldFeed:
    """A feed whose publish waits until the test lets it go (a slow or stuck store)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.published: list[tuple[OwnerScope, Emission]] = []

    async def subscribe(self, scope: Scope) -> Any:
        raise NotImplementedError

    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        await self.release.wait()
        self.published.append((owner, emission))


def activation(run_id: str = "r1", attempt: int = 2) -> Activation:
    return Activation(
        run_id=run_id,
        task_id=f"{run_id}:1:talk",
        node_id="talk",
        step=1,
        attempt=attempt,
        idempotency_key=f"{run_id}:1:talk:{attempt}",
        snapshot={},
        source_versions={},
        config={},
        timeout_ms=1000,
        retry=RetryPolicy(),
    )


def test_the_pump_publishes_in_order_from_threads_and_drops_past_its_bound() -> None:
    async def scenario() -> None:
        feed = HeldFeed()
        pump = EmissionPump(feed, limit=3)
        emit = pump.emitter(Tenant("acme"), activation())
        sent = threading.Thread(target=lambda: [emit(f"w{i}", "token") for i in range(1, 6)])
        sent.start()
        await asyncio.to_thread(sent.join, WAIT)
        # the publisher holds the first while the queue keeps 3: one more, then full
        async with asyncio.timeout(WAIT):
            while pump.stats.dropped + len(pump._queue) < 4:
                await asyncio.sleep(0.01)
        feed.release.set()
        async with asyncio.timeout(WAIT):
            while pump.stats.published < 5 - pump.stats.dropped:
                await asyncio.sleep(0.01)
        await pump.flush(WAIT)
        got = [e for _, e in feed.published]
        assert pump.stats.dropped >= 1 and len(got) + pump.stats.dropped == 5
        seqs = [e.seq for e in got]
        assert seqs == sorted(seqs) and seqs[0] == 1  # in order; a dropped one leaves a gap
        assert [e.data for e in got] == [f"w{s}" for s in seqs]
        assert {(e.tenant_id, e.run_id, e.node_id, e.attempt, e.kind) for e in got} == {
            ("acme", "r1", "talk", 2, "token")
        }
        assert {owner for owner, _ in feed.published} == {Tenant("acme")}

    asyncio.run(scenario())


def test_a_failed_publish_is_counted_and_the_pump_goes_on() -> None:
    class Failing(HeldFeed):
        async def publish(self, owner: OwnerScope, emission: Emission) -> None:
            if emission.seq == 1:
                raise StoreError(Retryable("the store is down"))
            self.published.append((owner, emission))

    async def scenario() -> None:
        feed = Failing()
        pump = EmissionPump(feed)
        emit = pump.emitter(TENANTLESS, activation())
        emit("a", "token")
        emit("b", "token")
        async with asyncio.timeout(WAIT):
            while pump.stats.published + pump.stats.failed < 2:
                await asyncio.sleep(0.01)
        assert pump.stats.failed == 1
        assert [e.data for _, e in feed.published] == ["b"]

    asyncio.run(scenario())


def test_emit_checks_its_data_and_kind_and_copies_the_data() -> None:
    sent: list[tuple[object, str]] = []
    ctx = NodeContext(
        run_id="r", node_id="n", step=1, attempt=1, emitter=lambda d, k: sent.append((d, k))
    )
    data: dict[str, Any] = {"tokens": ["a"]}
    ctx.emit(data)
    data["tokens"].append("b")  # the node changes its value after sending it
    assert sent == [({"tokens": ["a"]}, "custom")]
    with pytest.raises(NonDurableValue):
        ctx.emit({"when": object()})
    with pytest.raises(TypeError):
        ctx.emit("x", kind=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ctx.emit("x", kind="")
    assert len(sent) == 1
    # without a feed there is no emitter: the same checks, then nothing
    quiet = NodeContext(run_id="r", node_id="n", step=1, attempt=1)
    quiet.emit("x", kind="token")
    with pytest.raises(NonDurableValue):
        quiet.emit(float("nan"))


class BreakingSubscription:
    """A real hub subscription whose first ``get`` fails as a dropped connection would."""

    def __init__(self, inner: FeedSubscription, broken: list[int]) -> None:
        self._inner = inner
        self._broken = broken

    async def get(self, timeout: float) -> Sequence[FeedItem]:
        if not self._broken:
            self._broken.append(1)
            raise StoreError(Retryable("connection reset"))
        return await self._inner.get(timeout)

    async def close(self) -> None:
        await self._inner.close()


class BreakingFeed:
    def __init__(self, hub: FeedHub) -> None:
        self.hub = hub
        self.broken: list[int] = []
        self.subscriptions = 0

    async def subscribe(self, scope: Scope) -> Any:
        self.subscriptions += 1
        return BreakingSubscription(await self.hub.subscribe(scope), self.broken)

    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        await self.hub.publish(owner, emission)


def test_a_stream_subscribes_again_when_its_feed_breaks_with_no_gap_or_duplicate() -> None:
    gates = Gates()
    gates.go.set()

    async def scenario() -> None:
        backend = MemoryBackend()
        async with Docket(backend, nodes=NODES, context={"gates": gates}) as docket:
            ref = await docket.save_graph(story_graph())
            run = await docket.start_run(ref, {"topic": "otters"})
            feed = BreakingFeed(backend.feed)
            items: list[Any] = []
            stream = follow_run(
                backend,
                TENANTLESS,
                run.id,
                feed=feed,
                times=StreamTimes(reread=WAIT, poll_min=0.01, poll_max=0.05),
            )
            async with docket.worker(), asyncio.timeout(WAIT):
                async for item in stream:
                    items.append(item)
                    gates.finish.set()
            history = await docket.history(run.id)
        assert feed.broken == [1] and feed.subscriptions == 2
        assert [i for i in items if isinstance(i, Event)] == list(history)
        assert backend.feed.subscribers == 0

    asyncio.run(scenario())


class FlakyReads(MemoryBackend):
    """A real memory backend whose event reads fail while ``down`` (a server restarting)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = 0  # reads still to fail
        self.failed = 0

    async def list_events(self, owner: OwnerScope, run_id: str, query: EventListQuery) -> Any:
        if self.down:
            self.down -= 1
            self.failed += 1
            raise StoreError(Retryable("server restarting"))
        return await super().list_events(owner, run_id, query)


def test_a_stream_waits_out_failing_reads_and_a_closed_docket_ends_it() -> None:
    gates = Gates()
    gates.go.set()

    async def scenario() -> None:
        backend = FlakyReads()
        docket = Docket(backend, nodes=NODES, context={"gates": gates})
        docket.stream_times = StreamTimes(reread=WAIT, poll_min=0.01, poll_max=0.05)
        async with docket:
            ref = await docket.save_graph(story_graph())
            run = await docket.start_run(ref, {"topic": "otters"})
            items: list[Any] = []
            async with docket.worker(), asyncio.timeout(WAIT), docket.stream(run.id) as stream:
                async for item in stream:
                    items.append(item)
                    if len(items) == 2:
                        backend.down = 3  # the next reads fail: the stream waits them out
                    gates.finish.set()
            history = await docket.history(run.id)
            assert backend.failed == 3
            assert [i for i in items if isinstance(i, Event)] == list(history)
            waiting = docket.stream(run.id, until_finished=False, after_seq=history[-1].seq)
            backend.down = 1_000_000
            reader = asyncio.create_task(anext(waiting))
            async with asyncio.timeout(WAIT):
                while backend.failed < 5:
                    await asyncio.sleep(0.01)
        # the Docket closed under the stream: its next failed read ends it
        with pytest.raises(errors.RuntimeUnavailable):
            async with asyncio.timeout(WAIT):
                await reader
        assert backend.feed.subscribers == 0

    asyncio.run(scenario())


class Holey(MemoryBackend):
    """A real memory backend whose event pages leave out ``holes`` (as if retention had
    removed those events in the middle of a history, which age-based pruning never does,
    but a stream must not care)."""

    holes: frozenset[int] = frozenset()

    async def list_events(self, owner: OwnerScope, run_id: str, query: EventListQuery) -> Any:
        full = await super().list_events(
            owner, run_id, EventListQuery(after_seq=query.after_seq, limit=1000)
        )
        assert isinstance(full, EventPage)
        kept = [e for e in full.events if e.seq not in self.holes]
        return EventPage.from_candidates(
            kept,
            limit=query.limit,
            after_seq=query.after_seq,
            oldest_available_seq=kept[0].seq if kept else None,
            latest_available_seq=kept[-1].seq if kept else None,
            latest_seq=full.latest_seq,
        )


def test_pruned_stretches_inside_pages_and_at_the_end_are_each_said_once() -> None:
    gates = Gates()
    gates.go.set()
    gates.finish.set()

    async def scenario() -> None:
        backend = Holey()
        async with Docket(backend, nodes=NODES, context={"gates": gates}) as docket:
            ref = await docket.save_graph(story_graph())
            async with docket.worker():
                run = await docket.start_run(ref, {"topic": "otters"})
                run = await docket.await_run(run.id, timeout=WAIT)
            history = {e.seq: e for e in await docket.history(run.id)}
            last = run.event_seq
            backend.holes = frozenset({3, 4, 7, last})
            gone = functools.partial(EventsPruned, run_id=run.id)
            want: list[object] = [history[1], history[2], gone(first_seq=3, last_seq=4)]
            want += [history[5], history[6], gone(first_seq=7, last_seq=7)]
            want += [history[s] for s in range(8, last)]
            want += [gone(first_seq=last, last_seq=last)]
            for page in (1, 2, 3, 500):
                times = StreamTimes(page=page)
                items = follow_run(backend, TENANTLESS, run.id, feed=None, times=times)
                got = [i async for i in items]
                assert got == want, page

    asyncio.run(scenario())


class CountedReads(MemoryBackend):
    """A real memory backend that counts its event reads."""

    reads = 0

    async def list_events(self, owner: OwnerScope, run_id: str, query: EventListQuery) -> Any:
        self.reads += 1
        return await super().list_events(owner, run_id, query)


def test_a_followed_commit_costs_one_store_read() -> None:
    """A notice is answered by one read after the cursor, not by that read plus a second
    one at the top of the loop (which doubled the reads of a hundred followers)."""
    commits = 20

    async def scenario() -> None:
        backend = CountedReads()
        async with Docket(backend, nodes=NODES) as docket:
            ref = await docket.save_graph(story_graph())
            run = await docket.start_run(ref, {"topic": "otters"})
            seen: list[int] = []
            moved = asyncio.Event()

            async def follow() -> None:  # a follower that is always waiting, as in an app
                stream = docket.stream(run.id, after_seq=run.event_seq, until_finished=False)
                async with stream:
                    async for item in stream:
                        if isinstance(item, Event):
                            seen.append(item.seq)
                            moved.set()

            follower = asyncio.create_task(follow())
            async with asyncio.timeout(WAIT):
                while backend.feed.subscribers == 0:
                    await asyncio.sleep(0.01)
                for k in range(commits):
                    if k == 1:
                        backend.reads = 0  # count from the second commit on
                    await docket.send(run.id, "note", {"k": k})
                    latest = (await docket.fetch_run(run.id)).event_seq
                    while not seen or seen[-1] < latest:
                        moved.clear()
                        await moved.wait()
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            assert len(seen) == len(set(seen))
            assert backend.reads <= commits, f"{backend.reads} reads for {commits - 1} commits"

    asyncio.run(scenario())


def test_a_subscription_wait_keeps_a_cancel_that_lands_as_an_item_arrives() -> None:
    """Python 3.11's ``wait_for`` returns the result, dropping the cancel, when both
    land in one loop turn; the stream waiting in ``get`` then could not be stopped."""

    async def scenario() -> None:
        hub = FeedHub()
        subscription = hub.open(TENANTLESS)
        lost: list[int] = []
        for turns in range(8):
            waiter = asyncio.create_task(subscription.get(WAIT))
            await asyncio.sleep(0)  # the waiter is waiting
            hub.notice(TENANTLESS, "r1", "g", 1, 1)
            for _ in range(turns):  # let the wake-up travel part of the way
                await asyncio.sleep(0)
            if waiter.done():  # it took the item before the cancel: nothing to keep
                await subscription.get(0)
                continue
            waiter.cancel()  # requested while the task has not finished: it must win
            done, _ = await asyncio.wait({waiter}, timeout=WAIT)
            assert done
            if not waiter.cancelled():
                lost.append(turns)
            await subscription.get(0)  # drain whatever arrived
        await subscription.close()
        assert not lost, f"cancels lost after {lost} loop turns"

    asyncio.run(scenario())
