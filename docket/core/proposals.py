"""From a moment to the contract's proposals (pure).

The schedule mapping (runtime-spec §5.3): a ``Continue`` moment keeps the claim when the
commit is claimed and releases it for an immediate wake when it is not; every ``Park``
releases the claim with its own wake (``Immediate``, ``At(t)``, ``External``,
``Terminal``). A new run has no schedule but a ``wake_at``: ``proposed_at`` for a moment
that can go on at once, the timer for ``At``.

Every proposal carries the caller's ``transition_id`` (take it from the id generator,
kind ``"transition"``): it is what makes replaying an ambiguous commit safe, so it must
differ between two different proposals even for the same checkpoint sequence.
"""

from __future__ import annotations

from datetime import datetime
from typing import assert_never

from docket.core.moment import Continue, Disposition, Moment, Park, due_wake
from docket.proposals import (
    At,
    ClaimedProposal,
    External,
    Immediate,
    InitProposal,
    ReleaseClaim,
    RetainClaim,
    Schedule,
    Terminal,
    UnclaimedProposal,
)

__all__ = [
    "claimed_proposal",
    "init_proposal",
    "initial_wake",
    "schedule_for",
    "unclaimed_proposal",
]


def schedule_for(disposition: Disposition, *, claimed: bool) -> Schedule:
    match disposition:
        case Continue():
            return RetainClaim() if claimed else ReleaseClaim(Immediate())
        case Park(wake=wake):
            return ReleaseClaim(wake)
        case _:
            assert_never(disposition)


def initial_wake(moment: Moment) -> datetime | None:
    """When a newly initialized run is due (``None``: it waits for a signal or is over)."""
    wake = due_wake(moment.disposition)
    match wake:
        case Immediate():
            return moment.proposed_at
        case At(wake_at=when):
            return when
        case External() | Terminal():
            return None
        case _:
            assert_never(wake)


def init_proposal(moment: Moment, *, transition_id: str) -> InitProposal:
    """The ``initialize`` proposal of a fresh run's first moment."""
    wake_at = initial_wake(moment)
    if wake_at is None:
        raise ValueError("a new run must be due at some time; this moment parks it for good")
    return InitProposal(
        transition_id=transition_id,
        run=moment.run,
        wake_at=wake_at,
        checkpoint_type=moment.checkpoint_type,
    )


def claimed_proposal(
    moment: Moment, expected_seq: int, token: str, *, transition_id: str
) -> ClaimedProposal:
    """The ``commit_claimed`` proposal of a moment computed under a claim."""
    return ClaimedProposal(
        transition_id=transition_id,
        run=moment.run,
        expected_checkpoint_seq=expected_seq,
        claim_token=token,
        checkpoint_type=moment.checkpoint_type,
        schedule=schedule_for(moment.disposition, claimed=True),
    )


def unclaimed_proposal(moment: Moment, *, transition_id: str) -> UnclaimedProposal:
    """The ``commit_unclaimed`` proposal of a signal's moment (expected sequence is
    ``moment.run.checkpoint_seq - 1``, passed to the store separately)."""
    schedule = schedule_for(moment.disposition, claimed=False)
    assert isinstance(schedule, ReleaseClaim)  # unclaimed commits never retain
    return UnclaimedProposal(
        transition_id=transition_id,
        run=moment.run,
        checkpoint_type=moment.checkpoint_type,
        schedule=schedule,
    )
