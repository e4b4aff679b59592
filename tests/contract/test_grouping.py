"""GroupCommit on its own: grouping behind busy lanes, answers in order, errors to the whole
batch, and a cancelled caller that never cancels the rest of its batch."""

from __future__ import annotations

import asyncio

import pytest

from docket.contract.grouping import GroupCommit


class Store:
    """A stand-in write target (not a backend): holds each batch until released."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[list[int]] = []
        self.release = asyncio.Event()
        self.fail = fail

    async def send(self, batch: list[int]) -> list[int]:
        self.sent.append(batch)
        await self.release.wait()
        if self.fail:
            raise RuntimeError("the store refused the batch")
        return [write * 10 for write in batch]


def test_writes_behind_a_busy_lane_go_together_and_answer_in_order() -> None:
    async def body() -> None:
        store = Store()
        group = GroupCommit(store.send, lanes=1, limit=3)
        first = asyncio.ensure_future(group.submit(0))
        while not group.batches:  # the store is idle: it goes at once, alone
            await asyncio.sleep(0)
        calls = [asyncio.ensure_future(group.submit(i)) for i in range(1, 6)]
        await asyncio.sleep(0)
        store.release.set()
        assert await asyncio.gather(first, *calls) == [0, 10, 20, 30, 40, 50]
        assert store.sent == [[0], [1, 2, 3], [4, 5]]  # alone first, then up to the limit
        assert group.batches == {1: 1, 3: 1, 2: 1}

    asyncio.run(body())


def test_writes_of_one_turn_of_the_loop_go_together() -> None:
    """A lane takes its batch when its task first runs, so writes submitted in the same
    turn of the event loop as the one that started it go with it (up to the limit)."""

    async def body() -> None:
        store = Store()
        group = GroupCommit(store.send, lanes=1, limit=4)
        calls = [asyncio.ensure_future(group.submit(i)) for i in range(6)]
        await asyncio.sleep(0)
        store.release.set()
        assert await asyncio.gather(*calls) == [0, 10, 20, 30, 40, 50]
        assert store.sent == [[0, 1, 2, 3], [4, 5]]
        lanes = GroupCommit(store.send, lanes=3, limit=2)
        more = [asyncio.ensure_future(lanes.submit(i)) for i in range(5)]
        assert await asyncio.gather(*more) == [0, 10, 20, 30, 40]
        # three lanes free: one per full batch, no lane left without writes
        assert store.sent[2:] == [[0, 1], [2, 3], [4]]
        assert lanes.batches == {2: 2, 1: 1}

    asyncio.run(body())


def test_a_failed_batch_fails_each_of_its_writes() -> None:
    async def body() -> None:
        store = Store(fail=True)
        group = GroupCommit(store.send, lanes=2)
        calls = [asyncio.ensure_future(group.submit(i)) for i in range(4)]
        await asyncio.sleep(0)
        store.release.set()
        answers = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(a, RuntimeError) for a in answers), answers

    asyncio.run(body())


def test_a_cancelled_caller_leaves_the_rest_of_its_batch_alone() -> None:
    async def body() -> None:
        store = Store()
        group = GroupCommit(store.send, lanes=1)
        blocker = asyncio.ensure_future(group.submit(0))  # holds the only lane
        await asyncio.sleep(0)
        first, second, third = (asyncio.ensure_future(group.submit(i)) for i in (1, 2, 3))
        await asyncio.sleep(0)  # the three queue, to go as one batch
        first.cancel()  # its caller goes away; the batch must still go, whole
        store.release.set()
        assert list(await asyncio.gather(blocker, second, third)) == [0, 20, 30]
        with pytest.raises(asyncio.CancelledError):
            await first
        await group.drain()
        assert store.sent == [[0], [1, 2, 3]]

    asyncio.run(body())


def test_bad_lanes_and_limits_are_refused() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError):
            GroupCommit(Store().send, lanes=bad)  # type: ignore[arg-type]  # refused at run time
        with pytest.raises(ValueError):
            GroupCommit(Store().send, limit=bad)  # type: ignore[arg-type]  # refused at run time
