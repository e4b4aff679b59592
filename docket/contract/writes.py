"""``ValidatedTransitions``: the transition store's front half, written once.

Every backend's ``initialize`` / ``initialize_claimed`` / ``commit_claimed`` /
``commit_unclaimed`` does the same first step: run the shared validator
(:mod:`docket.contract.validate`) and answer its refusal unchanged, so that refusals and
their messages are the reference's everywhere. A backend subclasses this and writes only
its native, atomic publication of a :class:`ValidTransition`: ``_publish_start`` and
``_publish_commit``. A backend that cannot honour ``ValidTransition.claim_token`` on a
start (``ClaimedStarts``) should not inherit from this class, or must refuse it there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from docket.contract.capabilities import Limits
from docket.contract.errors import TransitionResult
from docket.contract.validate import (
    ValidationResult,
    ValidTransition,
    validate_commit_claimed,
    validate_commit_unclaimed,
    validate_initialize,
    validate_initialize_claimed,
)
from docket.proposals import ClaimedProposal, InitProposal, UnclaimedProposal
from docket.records import Event, OwnerScope

__all__ = ["ValidatedTransitions"]


class ValidatedTransitions(ABC):
    """A transition store that validates every proposal before its backend sees it."""

    @property
    @abstractmethod
    def limits(self) -> Limits:
        """The limits the validator holds proposals to (the backend's capabilities')."""

    @abstractmethod
    async def _publish_start(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidTransition
    ) -> TransitionResult:
        """Write a new run, its events and its wake in one atomic write (claimed by
        ``valid.claim_token`` when it is set), after the lookups the validator cannot
        do: the graph exists, the run does not (or this is a replay)."""

    @abstractmethod
    async def _publish_commit(self, owner: OwnerScope, valid: ValidTransition) -> TransitionResult:
        """Write a claimed (``valid.claim_token`` set) or unclaimed commit in one atomic
        write, after the replay, identity, fence and event-sequence checks."""

    async def initialize(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]
    ) -> TransitionResult:
        valid = validate_initialize(owner, proposal, events, self.limits)
        return await self._start(owner, proposal, valid)

    async def initialize_claimed(
        self,
        owner: OwnerScope,
        proposal: InitProposal,
        events: Sequence[Event],
        claim_token: str,
    ) -> TransitionResult:
        """``ClaimedStarts``: the run is written claimed by ``claim_token`` (claimed at
        ``proposal.wake_at``, one claim attempt, no wake, nothing announced)."""
        valid = validate_initialize_claimed(owner, proposal, events, claim_token, self.limits)
        return await self._start(owner, proposal, valid)

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        valid = validate_commit_claimed(owner, proposal, events, self.limits)
        if not isinstance(valid, ValidTransition):
            return valid
        return await self._publish_commit(owner, valid)

    async def commit_unclaimed(
        self,
        owner: OwnerScope,
        expected_checkpoint_seq: int,
        proposal: UnclaimedProposal,
        events: Sequence[Event],
    ) -> TransitionResult:
        valid = validate_commit_unclaimed(
            owner, expected_checkpoint_seq, proposal, events, self.limits
        )
        if not isinstance(valid, ValidTransition):
            return valid
        return await self._publish_commit(owner, valid)

    async def _start(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidationResult
    ) -> TransitionResult:
        if not isinstance(valid, ValidTransition):
            return valid
        return await self._publish_start(owner, proposal, valid)
