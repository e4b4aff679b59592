"""Per-node concurrency gates: at most ``max_concurrency`` attempts of a node at once in
one process (layer: runtime).

A node's ``max_concurrency`` policy (``docket.graph._policies``) protects a resource local
to the worker process — a GPU, a rate-limited local client — so its gate is **per process**:
every worker and every ``Docket`` of the process share one gate per (graph version, node).
Two versions of a graph, or two graphs running the same implementation, have separate
gates; an application that needs one limit across them guards the resource itself.

An attempt over the limit waits its turn (first come, first served) inside the worker,
holding its claim, which the drain's heartbeat keeps refreshed as for any running attempt;
waiting never fails or releases it. Its timeout starts when it gets a slot.

The gate is a counting semaphore built on a ``threading.Lock`` rather than an
``asyncio.Semaphore``: workers of one process may run on different event loops, and a sync
node's slot is released by its thread when the node returns — after a timeout too, since a
thread cannot be stopped and the slot must stay taken while it runs. Waiters are woken on
their own loop with ``call_soon_threadsafe``. Nodes without the policy never touch a gate.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections import deque
from typing import Final, TypeVar

__all__ = ["NodeGate", "Slot", "node_gate"]

_T = TypeVar("_T")


class _Waiter:
    __slots__ = ("future", "granted", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.granted = False  # a releasing slot was handed to this waiter


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Slot:
    """One held place in a gate. :meth:`release` gives it back once (thread-safe); after
    :meth:`hold_until` only the end of that future does."""

    __slots__ = ("_gate", "_lock", "_pinned", "_released")

    def __init__(self, gate: NodeGate) -> None:
        self._gate = gate
        self._lock = threading.Lock()
        self._pinned = False
        self._released = False

    def hold_until(self, future: concurrent.futures.Future[_T]) -> None:
        """Keep the place until ``future`` (a sync node's thread) is done or cancelled."""
        with self._lock:
            self._pinned = True
        future.add_done_callback(self._end)

    def release(self) -> None:
        with self._lock:
            if self._released or self._pinned:
                return
            self._released = True
        self._gate._release()

    def _end(self, _: object) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._gate._release()


class NodeGate:
    """A FIFO counting semaphore usable from any event loop and released from any thread."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._held = 0
        self._waiters: deque[_Waiter] = deque()

    @property
    def held(self) -> int:
        """Places taken now (for tests and diagnostics)."""
        with self._lock:
            return self._held

    @property
    def waiting(self) -> int:
        """Attempts waiting for a place now (for tests and diagnostics)."""
        with self._lock:
            return len(self._waiters)

    async def acquire(self) -> Slot:
        """Wait for a place; cancelling the wait takes none (or hands on one just given)."""
        with self._lock:
            if self._held < self.limit and not self._waiters:
                self._held += 1
                return Slot(self)
            waiter = _Waiter(asyncio.get_running_loop())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except BaseException:
            with self._lock:
                granted = waiter.granted
                if not granted:
                    self._waiters.remove(waiter)
            if granted:  # a place was passed to us as we were cancelled: pass it on
                self._release()
            raise
        return Slot(self)

    def _release(self) -> None:
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                try:
                    waiter.loop.call_soon_threadsafe(_wake, waiter.future)
                except RuntimeError:  # its loop is closed: nobody is waiting there any more
                    continue
                waiter.granted = True  # the place passes on; the count is unchanged
                return
            self._held -= 1


_gates: Final[weakref.WeakValueDictionary[tuple[str, str, int], NodeGate]] = (
    weakref.WeakValueDictionary()
)
_gates_lock: Final = threading.Lock()


def node_gate(graph_version: str, node_id: str, limit: int) -> NodeGate:
    """The process's gate of ``node_id`` in ``graph_version`` (a runtime graph's ``id``).

    Kept only while someone holds or waits on it (a weak map): an idle gate has nothing
    to remember, so a later attempt may get a fresh one.
    """
    key = (graph_version, node_id, limit)
    with _gates_lock:
        gate = _gates.get(key)
        if gate is None:
            gate = _gates[key] = NodeGate(limit)
        return gate
