"""SampledClock: a server's clock read now and then, carried forward on the monotonic clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from docket.contract.clock import SampledClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Server:
    """A fake *server clock* (not a backend): what the sampled clock reads, and how often."""

    def __init__(self, local: list[float]) -> None:
        self.time = T0
        self.reads = 0
        self.local = local  # the local monotonic clock, moved by the test
        self.round_trip = 0.0

    async def read(self) -> datetime:
        self.reads += 1
        self.local[0] += self.round_trip / 2
        seen = self.time
        self.local[0] += self.round_trip / 2
        return seen


def clock_pair(resync: float = 1.0) -> tuple[SampledClock, Server, list[float]]:
    local = [100.0]
    server = Server(local)
    return SampledClock(server.read, resync=resync, monotonic=lambda: local[0]), server, local


def test_reads_the_server_once_per_resync_and_carries_forward_between() -> None:
    clock, server, local = clock_pair(resync=1.0)
    assert asyncio.run(clock.now()) == T0
    local[0] += 0.25
    server.time = T0 + timedelta(seconds=0.25)
    assert asyncio.run(clock.now()) == T0 + timedelta(seconds=0.25)
    assert server.reads == 1
    local[0] += 0.80  # 1.05 s since the read: read again
    server.time = T0 + timedelta(seconds=7)  # the server's clock was stepped forward
    assert asyncio.run(clock.now()) == T0 + timedelta(seconds=7)
    assert server.reads == 2


def test_anchors_where_the_answer_arrived_so_it_never_runs_ahead() -> None:
    clock, server, local = clock_pair()
    server.round_trip = 0.010
    assert asyncio.run(clock.now()) == T0  # right after a read: the server's answer
    local[0] += 0.3
    server.time = T0 + timedelta(seconds=0.305)  # it read its clock mid-trip, 5 ms on
    assert asyncio.run(clock.now()) == T0 + timedelta(seconds=0.3)  # lags, never ahead


def test_never_steps_back_a_little_but_follows_a_real_step_back() -> None:
    clock, server, local = clock_pair(resync=1.0)
    asyncio.run(clock.now())
    local[0] += 1.5
    ahead = asyncio.run(clock.now())  # re-read: server still says T0 (it drifted behind)
    assert ahead == T0  # the re-read anchors there ...
    local[0] += 0.5
    carried = asyncio.run(clock.now())
    assert carried == T0 + timedelta(seconds=0.5)
    local[0] += 0.6
    server.time = T0 + timedelta(seconds=0.3)  # re-read lands behind the last reading
    assert asyncio.run(clock.now()) == carried  # held there, not moved back
    assert server.reads == 3
    local[0] += 1.1
    server.time = T0 - timedelta(hours=1)  # set back for real: followed
    assert asyncio.run(clock.now()) == T0 - timedelta(hours=1)


def test_resync_zero_reads_every_time_and_bad_resync_is_refused() -> None:
    clock, server, _ = clock_pair(resync=0)
    for _ in range(3):
        asyncio.run(clock.now())
    assert server.reads == 3
    with pytest.raises(ValueError):
        SampledClock(server.read, resync=-1)
    with pytest.raises(ValueError):
        SampledClock(server.read, resync=float("nan"))


def test_a_failed_resync_carries_the_last_reading_forward_within_hold() -> None:
    """A worker re-reading the clock after executing a node meets a dropped connection:
    the reading goes on from the last anchor (so the work is not thrown away), and the next
    call reads the server again. Past ``hold``, or for a permanent error, it raises."""
    from docket.contract.errors import PermanentStoreError, RetryableStoreError

    local = [100.0]
    server = Server(local)
    failure: list[Exception] = []

    async def read() -> datetime:
        if failure:
            raise failure.pop()
        return await server.read()

    clock = SampledClock(read, resync=1.0, hold=10.0, monotonic=lambda: local[0])
    assert asyncio.run(clock.now()) == T0
    local[0] += 3.0
    failure.append(RetryableStoreError("connection dropped"))
    assert asyncio.run(clock.now()) == T0 + timedelta(seconds=3)
    assert not failure  # it did try to re-read
    server.time = T0 + timedelta(seconds=5)
    assert asyncio.run(clock.now()) == T0 + timedelta(seconds=5)  # read again, next call
    local[0] += 3.0
    failure.append(PermanentStoreError("schema gone"))
    with pytest.raises(PermanentStoreError):
        asyncio.run(clock.now())
    local[0] += 20.0
    failure.append(RetryableStoreError("still down"))
    with pytest.raises(RetryableStoreError):
        asyncio.run(clock.now())
    with pytest.raises(ValueError, match="hold"):
        SampledClock(read, hold=-1)
