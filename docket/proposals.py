"""Proposals, schedules, claim policies, leases and queries (layer 1): data only.

The contract (layer 4) is written in these types and re-exports them from
``docket.contract.proposals``, where backends import them; they live here, beside the
records they are made of, so the core (layer 3) can build proposals and read wakes
without importing the contract."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import TypeAlias

import attrs

from docket.records import (
    DEFAULT_QUEUE,
    CheckpointType,
    GraphVersionCursor,
    OwnerScope,
    Run,
    RunCursor,
    RunStatus,
)

# -- schedules ------------------------------------------------------------------------------


@attrs.frozen
class Immediate:
    """Due now (by the backend's clock)."""


@attrs.frozen
class At:
    """Due at ``wake_at`` (a retry backoff, a timer)."""

    wake_at: datetime


@attrs.frozen
class External:
    """Parked until a signal (an interrupt resolution or a cancel) arrives."""


@attrs.frozen
class Terminal:
    """Finished: never due again."""


Wake: TypeAlias = Immediate | At | External | Terminal


@attrs.frozen
class RetainClaim:
    """Keep the claim and go on working (refreshes ``claimed_at``)."""


@attrs.frozen
class ReleaseClaim:
    """Give the claim up and set the run's next wake."""

    wake: Wake


Schedule: TypeAlias = RetainClaim | ReleaseClaim

# -- proposals ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class InitProposal:
    transition_id: str
    run: Run
    wake_at: datetime
    checkpoint_type: CheckpointType = CheckpointType.RUN_INITIALIZED
    # Feature.QUEUES: the named queue the run waits in and its priority there (higher is
    # claimed first). Operational state, kept beside the run, never in its document.
    queue: str = DEFAULT_QUEUE
    priority: int = 0


@attrs.frozen(kw_only=True)
class ClaimedProposal:
    transition_id: str
    run: Run
    expected_checkpoint_seq: int
    claim_token: str
    checkpoint_type: CheckpointType
    schedule: Schedule


@attrs.frozen(kw_only=True)
class UnclaimedProposal:
    transition_id: str
    run: Run
    checkpoint_type: CheckpointType
    schedule: ReleaseClaim


Proposal: TypeAlias = InitProposal | ClaimedProposal | UnclaimedProposal

#: Which run statuses each wake may accompany.
WAKE_STATUSES: dict[type, frozenset[RunStatus]] = {
    Immediate: frozenset({RunStatus.RUNNING}),
    # a waiting run is due at a time only for durable time (a deadline, a message wait that
    # gives up): backends that declare Feature.TIMERS claim it then
    At: frozenset({RunStatus.RUNNING, RunStatus.WAITING}),
    External: frozenset({RunStatus.WAITING}),
    Terminal: frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED}),
}

# -- claims ---------------------------------------------------------------------------------


class ClaimClass(StrEnum):
    READY = "ready"
    EXPIRED = "expired"


@attrs.frozen(kw_only=True)
class ClaimPolicy:
    """What ``claim_due`` may take. ``now=None`` means the backend's own clock."""

    limit: int
    orphan_ttl: timedelta
    max_claim_attempts: int
    preference: ClaimClass | None = None
    now: datetime | None = None
    # Feature.QUEUES: take only runs of these queues (None: of every queue)
    queues: frozenset[str] | None = None


@attrs.frozen(kw_only=True)
class Lease:
    """One claimed run. The token is the authority to commit it."""

    run_id: str
    owner: OwnerScope
    graph_id: str
    graph_hash: str
    checkpoint_seq: int
    claim_token: str
    claimed_at: datetime
    claim_attempt: int
    orphan_ttl: timedelta


@attrs.frozen(kw_only=True)
class PoisonedClaim:
    """A candidate that ran out of claim attempts and was poisoned instead of leased."""

    run_id: str
    owner: OwnerScope
    poisoned_at: datetime
    poison_reason: str


@attrs.frozen
class ClaimBatch:
    leases: tuple[Lease, ...] = ()
    poisoned: tuple[PoisonedClaim, ...] = ()


@attrs.frozen(kw_only=True)
class Backoff:
    base: timedelta
    cap: timedelta


@attrs.frozen(kw_only=True)
class AbandonPolicy:
    """A pre-execution hand-back. ``now=None`` means the backend's own clock."""

    expected_checkpoint_seq: int
    retry_at: datetime
    max_claim_abandons: int
    non_poisoning: bool = False
    backoff: Backoff | None = None
    now: datetime | None = None


# -- queries --------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class RunListQuery:
    limit: int = 50
    before: RunCursor | None = None
    graph_id: str | None = None
    graph_hash: str | None = None
    statuses: frozenset[RunStatus] | None = None


@attrs.frozen(kw_only=True)
class EventListQuery:
    after_seq: int = 0
    limit: int = 100


@attrs.frozen(kw_only=True)
class GraphListQuery:
    limit: int = 50
    before: GraphVersionCursor | None = None


__all__ = [
    "WAKE_STATUSES",
    "AbandonPolicy",
    "At",
    "Backoff",
    "ClaimBatch",
    "ClaimClass",
    "ClaimPolicy",
    "ClaimedProposal",
    "EventListQuery",
    "External",
    "GraphListQuery",
    "Immediate",
    "InitProposal",
    "Lease",
    "PoisonedClaim",
    "Proposal",
    "ReleaseClaim",
    "RetainClaim",
    "RunListQuery",
    "Schedule",
    "Terminal",
    "UnclaimedProposal",
    "Wake",
]
