"""Cross-worker limits on node attempts: a node's ``limiter`` policy (layer: runtime).

A node whose policies name a limiter (``"limiter": "llm"``) runs each attempt under one
slot of that queue's ledger (:mod:`docket.contract.queues`, ``Feature.QUEUES``): the
queue's ``execution_limit`` caps how many such attempts run at once across every worker,
its ``rate`` how many start per period, and pausing it holds new attempts back. The
limiter is an ordinary queue config; nothing here is new to a backend.

Per claim, :class:`ClaimLimits` takes the slots of its attempts:

* before an attempt runs, :meth:`ClaimLimits.acquire` takes one slot under a fresh holder
  id, asking again after a short backoff (:func:`backoff`: one token's refill time from the
  rate, else a doubling pause; bounded by :data:`MAX_BACKOFF`, jittered) while none is
  granted — or at once when an attempt of this process releases a slot of the same
  limiter. The drain's heartbeat keeps the claim alive meanwhile, and the first refusal
  is logged; the grant after a wait emits ``docket.node.limited`` (``duration``: the
  seconds waited; ``refusals``; ``limiter``, ``run_id``, ``node_id``, ``task_id``,
  ``attempt``);
* the heartbeat renews every held slot with the claim (:meth:`ClaimLimits.renew`); a slot
  that expired in a stall and cannot be taken again ends the claim, as a queue slot does;
* the attempt's end releases its slot without refund (it was used), whatever the outcome;
  a crashed worker's slots expire after the claim ttl.

A limiter the process's queue view knows to be unlimited needs no slot: its attempts
cost nothing (a limit set on it takes effect within ``queue_refresh``, as for claims).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from collections import deque
from collections.abc import Mapping
from datetime import timedelta
from typing import Final

from docket.core.plan import Activation
from docket.records import QueueConfig
from docket.runtime.queues import QueueView, new_holder
from docket.telemetry import Measurements, Metadata, Telemetry, stamp_logger

__all__ = ["MAX_BACKOFF", "ClaimLimits", "LimiterUnavailable", "backoff"]

log = stamp_logger(logging.getLogger("docket.worker"))

#: The longest pause between two asks for a slot, whatever the rate (a rate of one per
#: minute is still asked about every second: a slot freed by an execution limit is not
#: announced).
MAX_BACKOFF: Final = 1.0
#: The shortest pause (a very fast rate would otherwise make the waiters spin).
MIN_BACKOFF: Final = 0.005
#: The first pause when no rate says when a slot comes back (an execution limit: a slot
#: frees when some attempt ends); doubled per refusal up to MAX_BACKOFF.
FIRST_BACKOFF: Final = 0.02


class LimiterUnavailable(Exception):
    """The backend cannot hold a limiter's slots (no ``Feature.QUEUES``); refused at
    publish and start, so only a graph stored behind the facade's back meets it."""


def backoff(config: QueueConfig | None, refusals: int, jitter: float = 1.0) -> float:
    """Seconds before asking again after ``refusals`` (>= 1) refusals in a row.

    With only a rate, one token's refill time (``period / count``); with an execution
    limit (whose slots free when attempts end, unannounced) or an unknown config, at least
    a doubling pause from :data:`FIRST_BACKOFF`. Bounded to ``[MIN_BACKOFF, MAX_BACKOFF]``,
    then multiplied by ``jitter`` (the caller's draw in ``[1, 1.5)``, so waiters of many
    workers spread out).
    """
    base = 0.0
    if config is not None and config.rate is not None:
        base = 1.0 / config.rate.per_second
    if config is None or config.rate is None or config.execution_limit is not None:
        base = max(base, FIRST_BACKOFF * 2 ** min(max(refusals - 1, 0), 10))
    return min(MAX_BACKOFF, max(MIN_BACKOFF, base)) * jitter


class _Wakeups:
    """This process's waiters per limiter (one per queue view, so per ``Docket``): a slot
    released here wakes the longest waiter at once instead of after its pause. Waiters
    on other workers learn of it on their next ask."""

    def __init__(self) -> None:
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    def register(self, limiter: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(limiter, deque()).append(future)
        return future

    def forget(self, limiter: str, future: asyncio.Future[None]) -> None:
        waiting = self._waiting.get(limiter)
        if waiting is not None and future in waiting:
            waiting.remove(future)
            if not waiting:
                del self._waiting[limiter]

    def released(self, limiter: str) -> None:
        waiting = self._waiting.get(limiter)
        while waiting:
            future = waiting.popleft()
            if not future.done():
                future.set_result(None)
                break
        if waiting is not None and not waiting:
            del self._waiting[limiter]


_wakeups: Final[weakref.WeakKeyDictionary[QueueView, _Wakeups]] = weakref.WeakKeyDictionary()


def _wakeups_of(view: QueueView) -> _Wakeups:
    found = _wakeups.get(view)
    if found is None:
        found = _wakeups[view] = _Wakeups()
    return found


class ClaimLimits:
    """The limiter slots one claim's attempts hold (holder id -> limiter queue).

    ``ttl``: how long a slot stays held unrenewed (the claim's ``orphan_ttl``: a crashed
    worker's slots come back with its claims)."""

    def __init__(self, view: QueueView, ttl: timedelta, telemetry: Telemetry | None = None) -> None:
        self._view = view
        self._ttl = ttl
        self._telemetry = telemetry
        self._held: dict[str, str] = {}
        self._wakeups = _wakeups_of(view)

    @property
    def held(self) -> Mapping[str, str]:
        """Slots held now, holder id -> limiter (for tests and diagnostics)."""
        return dict(self._held)

    async def acquire(self, limiter: str, activation: Activation) -> str | None:
        """Wait for a slot of ``limiter`` for ``activation``: its holder id, or ``None``
        when the limiter is unlimited (no slot needed). Cancelling the wait takes none.
        ``LimiterUnavailable`` on a backend without queues."""
        store = self._view.store
        if store is None:
            raise LimiterUnavailable(
                f"node {activation.node_id!r} names limiter {limiter!r}, but this backend "
                "does not declare named queues"
            )
        refusals = 0
        waited_from = 0.0
        while True:
            config = await self._config(limiter)
            if config is not None and not config.limited:
                return None
            holder = new_holder()
            # registered before asking: a release here while we ask wakes us at once
            wake = self._wakeups.register(limiter)
            try:
                granted = await store.acquire_slots(limiter, [holder], self._ttl)
            except asyncio.CancelledError:
                self._wakeups.forget(limiter, wake)
                # the store may have granted it as we were cancelled: give it back
                await asyncio.shield(self._forget(limiter, holder, refund=True))
                raise
            except Exception as exc:
                log.warning("taking a slot of limiter %s failed: %s", limiter, exc)
                granted = 0
            if granted:
                self._wakeups.forget(limiter, wake)
                self._held[holder] = limiter
                if refusals:
                    self._waited(limiter, activation, time.monotonic() - waited_from, refusals)
                return holder
            if not refusals:
                waited_from = time.monotonic()
                log.info(
                    "node %s attempt %d waits for a slot of limiter %s%s",
                    activation.node_id,
                    activation.attempt,
                    limiter,
                    "" if config is not None else " (a queue this worker does not know yet)",
                )
            refusals += 1
            try:
                async with asyncio.timeout(backoff(config, refusals, random.uniform(1.0, 1.5))):
                    await asyncio.shield(wake)  # a slot released in this process, or the pause
            except TimeoutError:
                pass
            finally:
                self._wakeups.forget(limiter, wake)

    async def release(self, holder: str) -> None:
        """Free an attempt's slot (the attempt ended; its rate token stays spent)."""
        limiter = self._held.pop(holder, None)
        if limiter is not None:
            await self._forget(limiter, holder, refund=False)
            self._wakeups.released(limiter)

    async def renew(self) -> bool:
        """Move every held slot's expiry on by the ttl (with the claim's heartbeat).
        ``False`` when a slot had expired (a stall) and could not be taken again: the
        claim must not go on running over the limit. A store failure answers ``True``
        (best effort: the next beat tries again)."""
        store = self._view.store
        if store is None or not self._held:
            return True
        by_limiter: dict[str, list[str]] = {}
        for holder, limiter in self._held.items():
            by_limiter.setdefault(limiter, []).append(holder)
        for limiter, holders in sorted(by_limiter.items()):
            try:
                renewed = await store.renew_slots(limiter, holders, self._ttl)
                if renewed >= len(holders):
                    continue
                # some expired: take them again if the limiter has room (held ones are
                # not granted twice), else running on would exceed the limit
                live = [h for h in holders if h in self._held]  # not released meanwhile
                taken = await store.acquire_slots(limiter, live, self._ttl) if live else 0
                gone = [h for h in live if h not in self._held]
                if gone:  # released while we asked: do not keep what we just took back
                    await store.release_slots(limiter, gone)
                if renewed + taken < len(live):
                    return False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("renewing the slots of limiter %s failed: %s", limiter, exc)
        return True

    async def _config(self, limiter: str) -> QueueConfig | None:
        try:
            return await self._view.config(limiter)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # no view yet: ask the ledger, which knows the limits
            log.warning("reading the queue configs failed (%s); asking the ledger", exc)
            return None

    async def _forget(self, limiter: str, holder: str, *, refund: bool) -> None:
        store = self._view.store
        if store is None:
            return
        try:
            await store.release_slots(limiter, [holder], refund=refund)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # it expires after the ttl
            log.warning("releasing a slot of limiter %s failed: %s", limiter, exc)

    def _waited(self, limiter: str, activation: Activation, waited: float, refusals: int) -> None:
        log.info(
            "node %s attempt %d got a slot of limiter %s after %.3f s",
            activation.node_id,
            activation.attempt,
            limiter,
            waited,
        )
        if self._telemetry:
            measurements: Measurements = {"duration": waited, "refusals": refusals}
            metadata: Metadata = {
                "run_id": activation.run_id,
                "node_id": activation.node_id,
                "task_id": activation.task_id,
                "attempt": activation.attempt,
                "limiter": limiter,
            }
            self._telemetry.emit("docket.node.limited", measurements, metadata)
