"""A worker's optional pruning loop: retention by age, on the backend's own clock.

Off by default. With ``Settings.prune_events_after`` and/or ``prune_runs_after`` (seconds)
set, a worker runs one retention pass every ``prune_every`` seconds, in a task of its own
(a slow store must not hold up claiming): ``prune`` batches until one deletes less than a
full batch (at most :data:`MAX_BATCHES_PER_PASS`, so one pass is bounded). Several
workers may prune at once: a backend serialises or tolerates concurrent passes (the
``Prunable`` contract), so every worker of a fleet can carry the same settings.

A backend without ``prune`` is reported once in the log and left alone: retention is
housekeeping, never a reason for a worker to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta
from typing import Final

from docket.contract.protocols import Backend, Prunable
from docket.contract.retention import PruneResult
from docket.settings import Settings

__all__ = ["BATCH_SIZE", "MAX_BATCHES_PER_PASS", "Pruner"]

log = logging.getLogger("docket.retention")

#: Rows of each kind one ``prune`` call deletes at most.
BATCH_SIZE: Final = 1000
#: Calls of one pass at most (a backlog is worked off over several passes).
MAX_BATCHES_PER_PASS: Final = 100


class Pruner:
    """The retention passes of one worker (see the module docstring)."""

    def __init__(self, backend: Prunable, settings: Settings) -> None:
        self._backend = backend
        self._events = _age(settings.prune_events_after)
        self._runs = _age(settings.prune_runs_after)
        self._every = settings.prune_every
        self._task: asyncio.Task[PruneResult | None] | None = None
        self._started_at: float | None = None  # monotonic start of the last pass
        self.passes = 0
        self.pruned_events = 0
        self.pruned_runs = 0

    @classmethod
    def of(cls, backend: Backend, settings: Settings) -> Pruner | None:
        """The pruner ``settings`` ask for, or ``None`` (off, or a backend without
        ``prune``: logged)."""
        if settings.prune_events_after is None and settings.prune_runs_after is None:
            return None
        if not isinstance(backend, Prunable):
            log.warning(
                "retention is configured (prune_events_after/prune_runs_after) but %r has "
                "no prune operation: nothing will be pruned",
                backend,
            )
            return None
        return cls(backend, settings)

    def maybe_start(self, now: float) -> None:
        """Start a pass unless one runs or the last began under ``prune_every`` ago."""
        if self._task is not None and not self._task.done():
            return
        if self._started_at is not None and now - self._started_at < self._every:
            return
        self._started_at = now
        self._task = asyncio.ensure_future(self.run_pass())

    async def run_pass(self) -> PruneResult | None:
        """One pass: batches until a short one; ``None`` when the store failed (logged,
        tried again next time)."""
        events = runs = 0
        ran = False
        try:
            for _ in range(MAX_BATCHES_PER_PASS):
                result = await self._backend.prune(
                    event_age=self._events, run_age=self._runs, batch_size=BATCH_SIZE
                )
                ran = ran or result.ran
                events += result.events
                runs += result.runs
                if not result.ran or (result.events < BATCH_SIZE and result.runs < BATCH_SIZE):
                    break
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("a retention pass failed (%s); trying again in %s s", exc, self._every)
            return None
        self.passes += 1
        self.pruned_events += events
        self.pruned_runs += runs
        if events or runs:
            log.info("retention pruned %d events and %d finished runs", events, runs)
        return PruneResult(ran=ran, events=events, runs=runs)

    async def stop(self) -> None:
        """Cancel a pass in progress (each batch is its own transaction: nothing half)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(self._task, return_exceptions=True)


def _age(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)
