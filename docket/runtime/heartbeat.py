"""``Heartbeat``: keeps one claim alive while its run is drained.

Every ``interval`` seconds it refreshes the claim (``refresh_claim``), and the claim's
queue slot with it when it holds one (``renew_slots``: docket/runtime/queues.py). A refresh that
fails for a transient reason is retried on the next beat; an answer of ``ClaimLost`` (the
run was cancelled, or another worker took the claim over after it expired) sets ``lost``
and cancels the node work in flight, whose results could no longer be committed. A
queue slot that expired in a stall and cannot be taken again ends the claim the same way
(and hands it back with ``release_claim``): running on would exceed the queue's limit.
The limiter slots of the claim's running attempts (``docket.runtime.limiters``) are
renewed with each beat too, under the same rule.
"""

from __future__ import annotations

import asyncio
import logging

from docket.contract.errors import ClaimLost
from docket.contract.proposals import Lease
from docket.contract.protocols import Backend
from docket.runtime.limiters import ClaimLimits
from docket.runtime.queues import SlotBook
from docket.telemetry import stamp_logger

__all__ = ["Heartbeat"]

log = stamp_logger(logging.getLogger("docket.worker"))


class Heartbeat:
    """Refreshes one claim every ``interval`` seconds until stopped or the claim is lost."""

    def __init__(
        self,
        backend: Backend,
        lease: Lease,
        interval: float,
        slots: SlotBook | None = None,
        limits: ClaimLimits | None = None,
    ) -> None:
        self._backend = backend
        #: The limiter slots of the claim's attempts, renewed with each beat as well.
        self.limits = limits
        self._slots = slots  # a claim in a limited queue renews its slot with each beat
        self._lease = lease
        self._interval = interval
        self.lost = asyncio.Event()
        self.refreshes = 0
        self._task: asyncio.Task[None] | None = None
        # The node work in flight, cancelled the moment the claim is lost (cheaper per
        # superstep than a waiter task racing it).
        self.work: asyncio.Future[object] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._beat())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # wait, not ``await task`` under suppress(CancelledError): that would also
            # swallow a cancellation of the caller itself
            await asyncio.wait({task})

    async def _beat(self) -> None:
        lease = self._lease
        while True:
            await asyncio.sleep(self._interval)
            # the slot first: the claim must never outlive it (a slot that expired in a
            # stall and went to another claimer would let this claim exceed the limit)
            slots = self._slots
            if slots is not None and slots.holds(lease) and not await slots.renew(lease):
                log.warning(
                    "the queue slot of run %s expired and is taken; handing the claim back",
                    lease.run_id,
                )
                self._give_up()
                await self._hand_back()
                return
            if self.limits is not None and not await self.limits.renew():
                log.warning(
                    "a limiter slot of run %s expired and is taken; handing the claim back",
                    lease.run_id,
                )
                self._give_up()
                await self._hand_back()
                return
            try:
                answer = await self._backend.runs.refresh_claim(
                    lease.owner, lease.run_id, lease.claim_token
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # transient: the next beat tries again
                log.warning("refreshing the claim on %s failed: %s", lease.run_id, exc)
                continue
            if isinstance(answer, ClaimLost):
                log.info("claim on run %s was lost; stopping its drain", lease.run_id)
                self._give_up()
                return
            self.refreshes += 1

    def _give_up(self) -> None:
        self.lost.set()
        if self.work is not None:
            self.work.cancel()

    async def _hand_back(self) -> None:
        """Release the claim (due again at once, for whoever gets a slot). Best effort: a
        claim not released is recovered after ``orphan_ttl``."""
        lease = self._lease
        try:
            await self._backend.runs.release_claim(lease.owner, lease.run_id, lease.claim_token)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("handing back the claim on %s failed: %s", lease.run_id, exc)
