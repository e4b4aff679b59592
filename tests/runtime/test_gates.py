"""The per-node gate (``docket.runtime.gates``): FIFO places, a cancelled wait takes no
place (and hands on one it was just given), and a place given back from another thread
wakes a waiter on its loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from docket.runtime.gates import NodeGate, node_gate


async def _waiting(gate: NodeGate, count: int) -> None:
    for _ in range(1000):  # each turn lets the waiting tasks reach the gate
        if gate.waiting == count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{gate.waiting} waiting, expected {count}")


def test_places_are_given_in_arrival_order() -> None:
    async def scenario() -> list[int]:
        gate, order = NodeGate(1), []
        first = await gate.acquire()

        async def take(i: int) -> None:
            slot = await gate.acquire()
            order.append(i)
            slot.release()

        tasks = [asyncio.create_task(take(i)) for i in range(4)]
        await _waiting(gate, 4)
        first.release()
        await asyncio.gather(*tasks)
        assert (gate.held, gate.waiting) == (0, 0)
        return order

    assert asyncio.run(scenario()) == [0, 1, 2, 3]


def test_a_cancelled_wait_takes_no_place() -> None:
    async def scenario() -> None:
        gate = NodeGate(1)
        first = await gate.acquire()
        waiter = asyncio.create_task(gate.acquire())
        await _waiting(gate, 1)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (gate.held, gate.waiting) == (1, 0)
        first.release()
        first.release()  # idempotent
        assert gate.held == 0

    asyncio.run(scenario())


def test_a_wait_cancelled_just_after_it_was_given_a_place_hands_it_on() -> None:
    async def scenario() -> None:
        gate = NodeGate(1)
        first = await gate.acquire()
        cancelled = asyncio.create_task(gate.acquire())
        await _waiting(gate, 1)
        after = asyncio.create_task(gate.acquire())
        await _waiting(gate, 2)
        first.release()  # the place goes to `cancelled`, woken on a later loop turn ...
        cancelled.cancel()  # ... which is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        slot = await asyncio.wait_for(after, timeout=30)
        assert (gate.held, gate.waiting) == (1, 0)
        slot.release()
        assert gate.held == 0

    asyncio.run(scenario())


def test_a_place_given_back_by_a_thread_wakes_the_waiter() -> None:
    async def scenario() -> None:
        gate = NodeGate(1)
        first = await gate.acquire()
        waiter = asyncio.create_task(gate.acquire())
        await _waiting(gate, 1)
        thread = threading.Thread(target=first.release)
        thread.start()
        slot = await asyncio.wait_for(waiter, timeout=30)
        thread.join()
        assert gate.held == 1
        slot.release()
        assert gate.held == 0

    asyncio.run(scenario())


def test_one_gate_per_graph_version_node_and_limit() -> None:
    gate = node_gate("g@1", "n", 2)
    assert node_gate("g@1", "n", 2) is gate
    assert node_gate("g@2", "n", 2) is not gate
    assert node_gate("g@1", "m", 2) is not gate
