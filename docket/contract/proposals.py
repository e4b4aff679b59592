"""Proposals, schedules, claim policies, leases and queries: the contract's data types.

Defined in :mod:`docket.proposals` (layer 1, beside the records) so the core can use them
without importing the contract; this module is where backends import them from, and
stays that published path.
"""

from docket.proposals import (
    WAKE_STATUSES,
    AbandonPolicy,
    At,
    Backoff,
    ClaimBatch,
    ClaimClass,
    ClaimedProposal,
    ClaimPolicy,
    EventListQuery,
    External,
    GraphListQuery,
    Immediate,
    InitProposal,
    Lease,
    PoisonedClaim,
    Proposal,
    ReleaseClaim,
    RetainClaim,
    RunListQuery,
    Schedule,
    Terminal,
    UnclaimedProposal,
    Wake,
)

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
