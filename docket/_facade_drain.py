"""The facade's in-caller worker: ``Docket.drain_due`` claims due runs one at a time and
drains each in the calling task, with no background worker.

The loop lives here and answers the parts of a :class:`~docket.facade.DrainSummary`,
which the Docket builds (the summary's public home is :mod:`docket.facade`).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from docket.contract import errors as contract
from docket.contract.proposals import ClaimBatch, ClaimPolicy, PoisonedClaim
from docket.contract.protocols import Backend
from docket.errors import InvalidOptions, from_contract
from docket.runtime.drain import Drainer, DrainOutcome
from docket.runtime.queues import QueueClaimer
from docket.runtime.worker import claim_span, end_claim_span, report_poisoned
from docket.settings import Settings
from docket.telemetry import Telemetry

__all__ = ["drain_due"]


async def drain_due(
    store: Backend, drainer: Drainer, settings: Settings, telemetry: Telemetry, *, max_runs: int
) -> tuple[tuple[DrainOutcome, ...], tuple[PoisonedClaim, ...], bool]:
    """Drain due runs until none is due or ``max_runs`` drains happened; answers the
    outcomes, the runs found poisoned, and whether it stopped at ``max_runs``."""
    if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
        raise InvalidOptions(f"max_runs must be a positive integer, got {max_runs!r}")
    outcomes: list[DrainOutcome] = []
    poisoned: list[PoisonedClaim] = []
    claimer = QueueClaimer(store, drainer.queues)  # every queue, within their limits
    while len(outcomes) < max_runs:
        policy = ClaimPolicy(
            limit=1,
            orphan_ttl=timedelta(seconds=settings.claim_ttl),
            max_claim_attempts=settings.max_claim_attempts,
        )
        span = claim_span(telemetry, "drain_due")
        try:
            batch = await claimer.claim(policy)
        except BaseException as exc:
            span.fail(exc)
            raise
        end_claim_span(span, batch, 1)
        for poisoned_claim in batch.poisoned if isinstance(batch, ClaimBatch) else ():
            report_poisoned(telemetry, poisoned_claim)
        if isinstance(batch, contract.Retryable):
            await asyncio.sleep(settings.commit_backoff)
            continue
        if not isinstance(batch, ClaimBatch):
            raise from_contract(batch, subject="the due runs")
        poisoned.extend(batch.poisoned)
        if not batch.leases:
            if batch.poisoned:
                continue
            return tuple(outcomes), tuple(poisoned), False
        for lease in batch.leases:
            outcomes.append(await drainer.drain(lease))
            if outcomes[-1].poisoned is not None:  # its hand-back poisoned the run
                poisoned.append(outcomes[-1].poisoned)
    return tuple(outcomes), tuple(poisoned), True
