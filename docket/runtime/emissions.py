"""The emission pump: what ``ctx.emit`` sends reaches the backend's feed from here.

A node's ``ctx.emit(data, kind)`` must never block or fail the node, and sync nodes call
it from their worker threads. So an emission is stamped (tenant, task, attempt, a ``seq``
counting the attempt's emissions from 1, the wall-clock time) and put in one bounded
queue per :class:`EmissionPump` under a lock, and a single task on the worker's loop
publishes the queue in order (``backend.feed.publish``): emissions leave in the order
they were made. A full queue drops the new emission and counts it (``stats.dropped``);
its ``seq`` is spent, so a reader sees the gap. A failed publish is counted and
forgotten. Before a drain commits the outcomes of the attempts it ran, it waits (up to
``EMISSION_FLUSH``) for the queue to be published, so a follower sees an attempt's
emissions before the events of its outcome. Emissions are never stored anywhere.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Final

import attrs

from docket.clock import system_clock
from docket.contract.protocols import EventFeed
from docket.core.plan import Activation
from docket.records import Emission, OwnerScope, tenant_id_of
from docket.values import JSONValue

__all__ = ["EMISSION_FLUSH", "EMISSION_QUEUE", "EmissionPump", "EmissionStats", "Emitter"]

log = logging.getLogger("docket.emissions")

#: Emissions a pump holds before it drops new ones.
EMISSION_QUEUE: Final = 1_000
#: Seconds a drain waits for its emissions to be published before it commits.
EMISSION_FLUSH: Final = 1.0

Emitter = Callable[[JSONValue, str], None]


@attrs.define
class EmissionStats:
    """What a pump did: emissions handed to the feed, dropped on a full queue, and
    whose publish failed."""

    published: int = 0
    dropped: int = 0
    failed: int = 0


class EmissionPump:
    """One bounded queue of emissions and the task that publishes it."""

    def __init__(
        self,
        feed: EventFeed,
        *,
        limit: int = EMISSION_QUEUE,
        clock: Callable[[], datetime] = system_clock,
    ) -> None:
        self._feed = feed
        self._limit = limit
        self._clock = clock
        self._lock = threading.Lock()
        self._queue: collections.deque[tuple[OwnerScope, Emission]] = collections.deque()
        self._scheduled = False  # a publishing task is due or running
        self._task: asyncio.Task[None] | None = None
        self.stats = EmissionStats()

    def emitter(self, owner: OwnerScope, activation: Activation) -> Emitter:
        """The ``ctx.emit`` sender of one attempt (call on the worker's loop; the sender
        itself may be called from any thread)."""
        loop = asyncio.get_running_loop()
        tenant = tenant_id_of(owner)
        counter = [0]

        def emit(data: JSONValue, kind: str) -> None:
            with self._lock:
                counter[0] += 1
                if len(self._queue) >= self._limit:
                    self.stats.dropped += 1
                    return
                emission = Emission(
                    tenant_id=tenant,
                    run_id=activation.run_id,
                    node_id=activation.node_id,
                    task_id=activation.task_id,
                    attempt=activation.attempt,
                    seq=counter[0],
                    kind=kind,
                    data=data,
                    at=self._clock(),
                )
                self._queue.append((owner, emission))
                if self._scheduled:
                    return
                self._scheduled = True
            try:
                loop.call_soon_threadsafe(self._start)
            except RuntimeError:  # the loop closed: the worker is gone, so is the emission
                with self._lock:
                    self._scheduled = False

        return emit

    def _start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._publish(), name="emissions")

    async def _publish(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._queue:
                        self._scheduled = False
                        return
                    owner, emission = self._queue.popleft()
                try:
                    await self._feed.publish(owner, emission)
                    self.stats.published += 1
                except Exception as exc:  # best effort: a lost emission is not an error
                    self.stats.failed += 1
                    log.debug("an emission of run %s was not published: %s", emission.run_id, exc)
        finally:
            with self._lock:
                if self._scheduled and self._task is asyncio.current_task():
                    self._scheduled = False  # cancelled: the next emission starts a task

    async def flush(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the queue to be published (a worker stopping)."""
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):  # 3.11's wait_for can lose a cancel
                    await asyncio.shield(task)
