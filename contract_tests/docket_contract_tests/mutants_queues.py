"""Negative controls for named queues (QUEUE-*): ledgers, claims and starts that keep a
queue's rules almost, but not exactly.

Like :mod:`.mutants` — whose ``_Reference`` copy of the memory backend these extend —
each class breaks exactly one rule, names the invariant ids meant to catch it, and is
exposed as a factory::

    pytest --pyargs docket_contract_tests \\
        --docket-backend-factory docket_contract_tests.mutants_queues:limit_off_by_one

``python -m docket_contract_tests.negative`` runs them with the others. The ledger bugs
swap in a :class:`~docket.contract.queues.SlotLedger` with one rule broken (``ledger``);
the store bugs a :class:`~docket.contract.memory_queues.MemoryQueues` (``store``); the
claim and start bugs override the reference's seams (``_in_queues``, ``_select``,
``_apply``, ``initialize``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import ClassVar

import attrs

from docket.contract import NotFound, Permanent, Retryable, TransitionResult
from docket.contract.capabilities import Limits
from docket.contract.memory import _Row
from docket.contract.memory_queues import MemoryAdmissions, MemoryQueues
from docket.contract.proposals import (
    ClaimBatch,
    ClaimClass,
    ClaimPolicy,
    InitProposal,
    Schedule,
)
from docket.contract.queries import select_claims
from docket.contract.queues import (
    SlotLedger,
    default_config,
    require_queue_config,
    require_queue_name,
)
from docket.contract.validate import ValidTransition
from docket.records import (
    DEFAULT_QUEUE,
    CheckpointType,
    Event,
    OwnerScope,
    QueueConfig,
    Run,
    RunStatus,
    priority_problem,
    queue_name_problem,
    tenant_id_of,
)
from docket_contract_tests.mutants import Candidate, _factory, _Reference

# -- ledgers --------------------------------------------------------------------------------


class _OffByOneLedger(SlotLedger):
    def acquire(self, holders: Sequence[str], ttl: timedelta, now: datetime) -> int:
        real = self.config
        if real.execution_limit is not None:  # the bug: one more than the limit
            self.config = attrs.evolve(real, execution_limit=real.execution_limit + 1)
        try:
            return super().acquire(holders, ttl, now)
        finally:
            self.config = real


class _NeverExpiresLedger(SlotLedger):
    def live(self, now: datetime) -> int:
        return len(self.holders)  # the bug: an expired slot still counts until released


class _EarlyExpiryLedger(SlotLedger):
    def live(self, now: datetime) -> int:
        for holder in [h for h, at in self.holders.items() if at <= now]:  # the bug: <=
            del self.holders[holder]
        return len(self.holders)


class _RevivingLedger(SlotLedger):
    def renew(self, holders: Sequence[str], ttl: timedelta, now: datetime) -> int:
        # the bug: expired slots not yet swept are renewed as if still held
        held = [h for h in holders if h in self.holders]
        for holder in held:
            self.holders[holder] = now + ttl
        return len(held)


class _NoRefillLedger(SlotLedger):
    def _refill(self, now: datetime) -> None:
        if self.refilled_at is not None:  # the bug: time passes, no token comes back
            self.refilled_at = max(self.refilled_at, now)


class _OverflowingLedger(SlotLedger):
    def _refill(self, now: datetime) -> None:
        rate = self.config.rate
        if rate is not None and self.refilled_at is not None:
            elapsed = max(0.0, (now - self.refilled_at).total_seconds())
            self.tokens += elapsed * rate.per_second  # the bug: no cap at rate.count
            self.refilled_at = max(self.refilled_at, now)


class _NoRefundLedger(SlotLedger):
    def release(self, holders: Sequence[str], refund: bool, now: datetime) -> None:
        super().release(holders, False, now)  # the bug: unused slots keep their tokens


class _TokensPerAskLedger(SlotLedger):
    def acquire(self, holders: Sequence[str], ttl: timedelta, now: datetime) -> int:
        asked = len([h for h in holders if h not in self.holders])
        granted = super().acquire(holders, ttl, now)
        if self.config.rate is not None:  # the bug: a token per slot asked, not granted
            self.tokens -= asked - granted
        return granted


class _PauseBlindLedger(SlotLedger):
    def acquire(self, holders: Sequence[str], ttl: timedelta, now: datetime) -> int:
        real = self.config
        self.config = attrs.evolve(real, paused=False)  # the bug: a pause grants as usual
        try:
            return super().acquire(holders, ttl, now)
        finally:
            self.config = real


class _RefillingLedger(SlotLedger):
    def reconfigure(self, config: QueueConfig, now: datetime) -> None:
        super().reconfigure(config, now)
        if config.rate is not None:  # the bug: every set_queue fills the bucket
            self.tokens = float(config.rate.count)


# -- stores ---------------------------------------------------------------------------------


class _Queues(MemoryQueues):
    """The reference queue store, its ledgers of class ``ledger``."""

    ledger: ClassVar[type[SlotLedger]] = SlotLedger

    def _ledger(self, name: str, now: datetime) -> SlotLedger | None:
        ledger = self._ledgers.get(name)
        if ledger is None and name == DEFAULT_QUEUE:
            ledger = self._ledgers[name] = self.ledger.new(default_config(), now)
        return ledger

    async def set_queue(self, config: QueueConfig) -> QueueConfig:
        require_queue_config(config)
        now = self._clock()
        with self._lock:
            ledger = self._ledgers.get(config.name)
            if ledger is None:
                self._ledgers[config.name] = self.ledger.new(config, now)
            else:
                ledger.reconfigure(config, now)
        return config


class _ResettingQueues(_Queues):
    async def set_queue(self, config: QueueConfig) -> QueueConfig:
        require_queue_config(config)
        with self._lock:  # the bug: a new config starts a new ledger, dropping held slots
            self._ledgers[config.name] = self.ledger.new(config, self._clock())
        return config


class _AnyQueueFound(_Queues):
    async def fetch_queue(self, name: str) -> QueueConfig | NotFound:
        found = await super().fetch_queue(name)
        # the bug: an unknown queue reads as an unlimited one
        return default_config(name) if isinstance(found, NotFound) else found


class _DedupingQueues(_Queues):
    async def acquire_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        # the bug: duplicate holders are dropped silently instead of refused
        return await super().acquire_slots(name, list(dict.fromkeys(holders)), ttl, now)


class _UncheckedQueues(_Queues):
    async def set_queue(self, config: QueueConfig) -> QueueConfig:
        require_queue_name(config.name)
        now = self._clock()
        with self._lock:  # the bug: limits and rate are stored unchecked
            ledger = self._ledgers.get(config.name)
            if ledger is None:
                self._ledgers[config.name] = self.ledger.new(config, now)
            else:
                ledger.config = config
        return config


class _StaleConfigs(_Queues):
    async def queue_configs(self) -> Sequence[QueueConfig]:
        # the bug: the claimer's cheap read leaves out the paused flag it must honour
        return [attrs.evolve(c, paused=False) for c in await super().queue_configs()]


class _OverClaimingFused(_Queues):
    """Offers the optional fused claim (``SlotClaims``), composed of the three calls."""

    claim: Callable[[ClaimPolicy], Awaitable[ClaimBatch | Retryable | Permanent]]

    async def claim_with_slots(
        self,
        policy: ClaimPolicy,
        name: str,
        holders: Sequence[str],
        release: Sequence[str] = (),
    ) -> ClaimBatch | Retryable | Permanent | None:
        if release:
            await self.release_slots(name, release)
        granted = await self.acquire_slots(name, holders, policy.orphan_ttl, policy.now)
        if not granted:
            return None
        # the bug: claims as many runs as slots were asked for, not as were granted
        batch = await self.claim(attrs.evolve(policy, limit=len(holders), queues=frozenset({name})))
        used = len(batch.leases) if isinstance(batch, ClaimBatch) else 0
        if used < granted:
            await self.release_slots(name, holders[used:granted], refund=True)
        return batch


class _WithQueues(_Reference):
    """The reference backend with another queue store (``store``) and ledger class."""

    store: ClassVar[type[_Queues]] = _Queues
    ledger: ClassVar[type[SlotLedger]] = SlotLedger

    def __init__(
        self, clock: Callable[[], datetime] | None = None, limits: Limits | None = None
    ) -> None:
        super().__init__(clock=clock, limits=limits)
        kind = type("Queues", (self.store,), {"ledger": self.ledger})
        self.queues = kind(self._clock, self._depth)
        self.admissions = MemoryAdmissions(self.queues)  # the ledger reads these configs


# -- ledger mutants -------------------------------------------------------------------------


class LimitOffByOne(_WithQueues):
    bug = "acquire_slots grants one slot more than the execution limit"
    catches = ("QUEUE-LIMIT",)
    ledger = _OffByOneLedger


class ExpiredSlotCounted(_WithQueues):
    bug = "a slot past its expires_at still counts against the limit until released"
    catches = ("QUEUE-SLOT-RETURN",)
    ledger = _NeverExpiresLedger


class SlotFreedAtExpiry(_WithQueues):
    bug = "a slot is free at its expires_at, not strictly after it"
    catches = ("QUEUE-SLOT-RETURN",)
    ledger = _EarlyExpiryLedger


class RenewRevivesExpired(_WithQueues):
    bug = "renew_slots moves the expiry of a slot that had already expired"
    catches = ("QUEUE-SLOT-RETURN",)
    ledger = _RevivingLedger


class RateNeverRefills(_WithQueues):
    bug = "the rate bucket never refills with time (only refunds put tokens back)"
    catches = ("QUEUE-RATE",)
    ledger = _NoRefillLedger


class RateOverCap(_WithQueues):
    bug = "the rate bucket refills past rate.count after a quiet period"
    catches = ("QUEUE-RATE",)
    ledger = _OverflowingLedger


class RefundIgnored(_WithQueues):
    bug = "release_slots(refund=True) does not put the unused slots' tokens back"
    catches = ("QUEUE-RATE",)
    ledger = _NoRefundLedger


class TokensPerAsk(_WithQueues):
    bug = "acquire_slots takes a token per slot asked for, not per slot granted"
    catches = ("QUEUE-RATE",)
    ledger = _TokensPerAskLedger


class PauseIgnored(_WithQueues):
    bug = "a paused queue grants slots like an unpaused one"
    catches = ("QUEUE-PAUSE",)
    ledger = _PauseBlindLedger


class ReconfigureRefills(_WithQueues):
    bug = "set_queue fills the rate bucket again, whatever was taken"
    catches = ("QUEUE-CONFIG",)
    ledger = _RefillingLedger


# -- store mutants --------------------------------------------------------------------------


class ReconfigureDropsSlots(_WithQueues):
    bug = "set_queue of a configured queue starts a new ledger: held slots are forgotten"
    catches = ("QUEUE-CONFIG", "QUEUE-PAUSE")
    store = _ResettingQueues


class UnknownQueueFound(_WithQueues):
    bug = "fetch_queue answers an unlimited config for a queue never configured"
    catches = ("QUEUE-CONFIG",)
    store = _AnyQueueFound


class DuplicateHoldersAccepted(_WithQueues):
    bug = "acquire_slots drops duplicate holders instead of raising ValueError"
    catches = ("QUEUE-BAD-INPUT",)
    store = _DedupingQueues


class BadConfigStored(_WithQueues):
    bug = "set_queue stores a config with a zero limit or a bad rate"
    catches = ("QUEUE-BAD-INPUT",)
    store = _UncheckedQueues


class ConfigsUnpaused(_WithQueues):
    bug = "queue_configs reports a paused queue as running (differs from list_queues)"
    catches = ("QUEUE-CONFIG",)
    store = _StaleConfigs


class FusedClaimOverGrant(_WithQueues):
    bug = "the fused claim (claim_with_slots) claims as many runs as asked, over the grant"
    catches = ("QUEUE-FUSED",)
    store = _OverClaimingFused

    def __init__(
        self, clock: Callable[[], datetime] | None = None, limits: Limits | None = None
    ) -> None:
        super().__init__(clock=clock, limits=limits)
        assert isinstance(self.queues, _OverClaimingFused)
        self.queues.claim = self.claim_due


class DepthCountsClaimed(_WithQueues):
    bug = "list_queues' depth counts claimed runs as waiting"
    catches = ("QUEUE-CONFIG",)

    def _depth(self, queue: str) -> int:
        now = self._now(None)
        with self._lock:
            return sum(
                1
                for row in self._runs.values()
                if row.queue == queue
                and row.run.status is RunStatus.RUNNING
                and not row.poisoned
                and (row.claim_token is not None or (row.wake_at or now) <= now)
            )


# -- claim and start mutants ----------------------------------------------------------------


class QueueFilterIgnored(_WithQueues):
    bug = "claim_due ignores ClaimPolicy.queues"
    catches = ("QUEUE-FILTER",)

    def _in_queues(self, row: _Row, policy: ClaimPolicy, ready: bool) -> bool:
        return True


class ExpiredClaimsUnfiltered(_WithQueues):
    bug = "claim_due filters due runs by queue but takes any queue's expired claims"
    catches = ("QUEUE-FILTER",)

    def _in_queues(self, row: _Row, policy: ClaimPolicy, ready: bool) -> bool:
        return not ready or super()._in_queues(row, policy, ready)


class PriorityIgnored(_WithQueues):
    bug = "claim_due takes runs by due time alone, whatever their priority"
    catches = ("QUEUE-PRIORITY",)

    def _select(
        self,
        ready: list[Candidate],
        expired: list[Candidate],
        limit: int,
        preference: ClaimClass | None,
    ) -> list[Candidate]:
        return select_claims(ready, expired, limit, preference)  # the bug: no priority


class FifoReversed(_WithQueues):
    bug = "within one priority, claim_due takes the latest due run first"
    catches = ("QUEUE-FIFO",)

    def _select(
        self,
        ready: list[Candidate],
        expired: list[Candidate],
        limit: int,
        preference: ClaimClass | None,
    ) -> list[Candidate]:
        merged = [*ready, *expired]
        return sorted(merged, key=lambda c: (-self._priority(c), -c[0].timestamp(), c[1]))[:limit]


class QueueLostOnCommit(_WithQueues):
    bug = "a commit writes the run back in the default queue at priority 0"
    catches = ("QUEUE-START",)

    def _apply(
        self,
        row: _Row,
        transition_id: str,
        checkpoint_type: CheckpointType,
        schedule: Schedule,
        valid: ValidTransition,
        new: list[int],
    ) -> None:
        super()._apply(row, transition_id, checkpoint_type, schedule, valid, new)
        row.queue, row.priority = DEFAULT_QUEUE, 0  # the bug: like an upsert of every column


class BadQueueStoredAsDefault(_WithQueues):
    bug = "initialize with a malformed queue or priority starts the run in 'default' at 0"
    catches = ("QUEUE-START",)

    async def initialize(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]
    ) -> TransitionResult:
        if queue_name_problem(proposal.queue) or priority_problem(proposal.priority):
            proposal = attrs.evolve(proposal, queue=DEFAULT_QUEUE, priority=0)
        return await super().initialize(owner, proposal, events)


class QueueNotStored(_WithQueues):
    bug = "initialize accepts a queue and a priority but keeps neither"
    catches = ("QUEUE-START", "QUEUE-FILTER", "QUEUE-PRIORITY")

    async def initialize(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]
    ) -> TransitionResult:
        answer = await super().initialize(owner, proposal, events)
        if isinstance(answer, Run):
            with self._lock:
                row = self._runs.get((tenant_id_of(owner), proposal.run.id))
                if row is not None:
                    row.queue, row.priority = DEFAULT_QUEUE, 0
        return answer


limit_off_by_one = _factory(LimitOffByOne)
expired_slot_counted = _factory(ExpiredSlotCounted)
slot_freed_at_expiry = _factory(SlotFreedAtExpiry)
renew_revives_expired = _factory(RenewRevivesExpired)
rate_never_refills = _factory(RateNeverRefills)
rate_over_cap = _factory(RateOverCap)
refund_ignored = _factory(RefundIgnored)
tokens_per_ask = _factory(TokensPerAsk)
pause_ignored = _factory(PauseIgnored)
reconfigure_refills = _factory(ReconfigureRefills)
reconfigure_drops_slots = _factory(ReconfigureDropsSlots)
unknown_queue_found = _factory(UnknownQueueFound)
duplicate_holders_accepted = _factory(DuplicateHoldersAccepted)
bad_config_stored = _factory(BadConfigStored)
depth_counts_claimed = _factory(DepthCountsClaimed)
queue_filter_ignored = _factory(QueueFilterIgnored)
expired_claims_unfiltered = _factory(ExpiredClaimsUnfiltered)
priority_ignored = _factory(PriorityIgnored)
fifo_reversed = _factory(FifoReversed)
queue_lost_on_commit = _factory(QueueLostOnCommit)
bad_queue_stored_as_default = _factory(BadQueueStoredAsDefault)
queue_not_stored = _factory(QueueNotStored)
configs_unpaused = _factory(ConfigsUnpaused)
fused_claim_over_grant = _factory(FusedClaimOverGrant)

#: These mutants by factory name (all of them must be caught).
QUEUE_MUTANTS: dict[str, type[_Reference]] = {
    "limit_off_by_one": LimitOffByOne,
    "expired_slot_counted": ExpiredSlotCounted,
    "slot_freed_at_expiry": SlotFreedAtExpiry,
    "renew_revives_expired": RenewRevivesExpired,
    "rate_never_refills": RateNeverRefills,
    "rate_over_cap": RateOverCap,
    "refund_ignored": RefundIgnored,
    "tokens_per_ask": TokensPerAsk,
    "pause_ignored": PauseIgnored,
    "reconfigure_refills": ReconfigureRefills,
    "reconfigure_drops_slots": ReconfigureDropsSlots,
    "unknown_queue_found": UnknownQueueFound,
    "duplicate_holders_accepted": DuplicateHoldersAccepted,
    "bad_config_stored": BadConfigStored,
    "depth_counts_claimed": DepthCountsClaimed,
    "queue_filter_ignored": QueueFilterIgnored,
    "expired_claims_unfiltered": ExpiredClaimsUnfiltered,
    "priority_ignored": PriorityIgnored,
    "fifo_reversed": FifoReversed,
    "queue_lost_on_commit": QueueLostOnCommit,
    "bad_queue_stored_as_default": BadQueueStoredAsDefault,
    "queue_not_stored": QueueNotStored,
    "configs_unpaused": ConfigsUnpaused,
    "fused_claim_over_grant": FusedClaimOverGrant,
}

__all__ = ["QUEUE_MUTANTS", *QUEUE_MUTANTS]
