"""Negative controls: the reference memory backend with exactly one bug each.

Every mutant is a :class:`~docket.contract.memory.MemoryBackend` subclass that breaks one
rule of the contract, and names the invariant ids whose cases are meant to catch it.
Each is exposed as a factory callable, so the kit can be pointed at it::

    pytest --pyargs docket_contract_tests \\
        --docket-backend-factory docket_contract_tests.mutants:no_token_fence

``python -m docket_contract_tests.negative`` runs the whole kit against every mutant
and fails unless each one is caught.

Where the memory backend has a seam for the rule (``_fences_hold``, ``_expired``,
``_visible``, ``_row``, ``_notify``) the mutant overrides just that. Where it has none,
the mutant runs :class:`_Reference`'s copy of the commit (or claim) path with one switch
flipped; ``control`` is that copy with every switch off, and must pass the kit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import ClassVar

import attrs

from docket.clock import Clock
from docket.contract import (
    AbandonOutcome,
    AbandonPolicy,
    ClaimBatch,
    ClaimedProposal,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    Conflict,
    CorruptEventRow,
    EventConflict,
    EventListQuery,
    Lease,
    Limits,
    NotFound,
    Permanent,
    PoisonedClaim,
    PruneResult,
    Retryable,
    RunListQuery,
    StaleCheckpoint,
    TransitionResult,
    UnclaimedProposal,
)
from docket.contract.capabilities import Capabilities
from docket.contract.errors import POISON_MAX_ATTEMPTS
from docket.contract.memory import MemoryBackend, _Row
from docket.contract.proposals import (
    At,
    ClaimClass,
    InitProposal,
    RetainClaim,
    Schedule,
)
from docket.contract.queries import require_claim_policy, select_claims
from docket.contract.validate import (
    Replay,
    ValidTransition,
    check_identity,
    check_replay,
    compare_event,
    split_events,
)
from docket.records import (
    CheckpointType,
    Event,
    EventPage,
    OwnerScope,
    Run,
    RunPage,
    RunSummary,
    Scope,
    owner_scope,
    require_owner,
    run_from_json,
    tenant_id_of,
)

Candidate = tuple[datetime, str, str | None]


class _Reference(MemoryBackend):
    """The memory backend with its commit and claim paths restated, each rule a switch.

    With every switch off this behaves exactly like :class:`MemoryBackend` (the
    ``control`` factory proves it by passing the kit).
    """

    bug: ClassVar[str] = "none (control)"
    catches: ClassVar[tuple[str, ...]] = ()

    # commit-path switches
    events_before_fence: ClassVar[bool] = False  # publish new events, then check the fences
    compare_before_fence: ClassVar[bool] = False  # compare re-sent events before the fences
    identity_after_fence: ClassVar[bool] = False  # fences before immutable identity
    replay_is_stale: ClassVar[bool] = False  # an identical replay answers StaleCheckpoint
    overwrite_events: ClassVar[bool] = False  # different content at a stored seq replaces it
    signal_keeps_claim: ClassVar[bool] = False  # commit_unclaimed leaves the claim in place
    signal_keeps_poison: ClassVar[bool] = False  # commit_unclaimed leaves the poison in place
    content_is_authority: ClassVar[bool] = False  # a fenced-out copy of the stored run wins
    reinsert_pruned: ClassVar[bool] = False  # a re-sent pruned event is written back
    # claim-path switches
    yield_between_select_and_lease: ClassVar[bool] = False  # no atomic select-and-lease

    # -- commits ----------------------------------------------------------------------------

    def _commit(self, owner: OwnerScope, valid: ValidTransition) -> TransitionResult:
        transition_id, token = valid.transition_id, valid.claim_token
        expected, schedule = valid.expected_checkpoint_seq, valid.schedule
        assert expected is not None and schedule is not None
        with self._lock:
            row = self._lookup_for_commit(owner, valid.run.id)
            if row is None:
                return NotFound()
            replay = check_replay(row.transitions, transition_id, valid.digest)
            if isinstance(replay, Replay):
                if self.replay_is_stale:
                    return StaleCheckpoint()
                return run_from_json(row.run_json)
            if replay is not None:
                return replay
            if not self.identity_after_fence:
                broken = check_identity(row.run, valid.run)
                if broken is not None:
                    return broken
            split = split_events(row.run.event_seq, valid)
            if self.events_before_fence and isinstance(split, tuple):
                for index in split[0]:
                    seq = valid.events[index].seq
                    row.events.setdefault(
                        seq, (valid.event_json[index], valid.event_contents[index])
                    )
            if self.compare_before_fence and isinstance(split, tuple):
                conflict = self._conflict(row, valid, split[1])
                if conflict is not None:
                    return conflict
            if not self._fences_hold(row, expected, token):
                if self.content_is_authority and self._same_as_stored(row, valid):
                    return run_from_json(row.run_json)
                return StaleCheckpoint()
            if self.identity_after_fence:
                broken = check_identity(row.run, valid.run)
                if broken is not None:
                    return broken
            if not isinstance(split, tuple):
                return split
            new, old = split
            conflict = self._conflict(row, valid, old)
            if conflict is not None:
                if not self.overwrite_events:
                    return conflict
                for index in old:
                    seq = valid.events[index].seq
                    row.events[seq] = (valid.event_json[index], valid.event_contents[index])
            kept = (row.claim_token, row.claimed_at, row.poisoned_at, row.poison_reason)
            first = row.run.event_seq + 1
            self._apply(row, transition_id, valid.checkpoint_type, schedule, valid, new)
            self._announce(owner, row, first)
            for index in old if self.reinsert_pruned else ():
                seq = valid.events[index].seq
                row.events.setdefault(seq, (valid.event_json[index], valid.event_contents[index]))
            if token is None and self.signal_keeps_claim and kept[0] is not None:
                row.claim_token, row.claimed_at = kept[0], kept[1]
            if token is None and self.signal_keeps_poison and kept[2] is not None:
                row.poisoned_at, row.poison_reason = kept[2], kept[3]
            return run_from_json(valid.run_json)

    def _announce(self, owner: OwnerScope, row: _Row, first: int) -> None:
        """The commit notice of a written transition (``Feature.STREAMS``), as the memory
        backend sends it."""
        self.feed.notice(owner, row.run.id, row.run.graph_id, first, row.run.event_seq)

    @staticmethod
    def _same_as_stored(row: _Row, valid: ValidTransition) -> bool:
        """Whether the proposal repeats the stored run document and events byte for byte."""
        return valid.run_json == row.run_json and all(
            row.events.get(e.seq, (b"", b""))[1] == valid.event_contents[i]
            for i, e in enumerate(valid.events)
        )

    def _conflict(self, row: _Row, valid: ValidTransition, old: list[int]) -> EventConflict | None:
        for index in old:
            seq = valid.events[index].seq
            stored = row.events.get(seq)
            if not compare_event(stored[1] if stored else None, valid, index):
                return EventConflict(seq)
        return None

    def _lookup_for_commit(self, owner: OwnerScope, run_id: str) -> _Row | None:
        return self._row(owner, run_id)

    # -- claims -----------------------------------------------------------------------------

    def _select(
        self,
        ready: list[Candidate],
        expired: list[Candidate],
        limit: int,
        preference: ClaimClass | None,
    ) -> list[Candidate]:
        """Which candidates one claim takes (the shared order, unless a mutant breaks it)."""
        return select_claims(ready, expired, limit, preference, self._priority)

    def _in_queues(self, row: _Row, policy: ClaimPolicy, ready: bool) -> bool:
        """``ClaimPolicy.queues`` (``Feature.QUEUES``): whether the claim may take ``row``
        (``ready``: it is due, not an expired claim)."""
        return policy.queues is None or row.queue in policy.queues

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        require_claim_policy(policy)
        now = self._now(policy.now)
        with self._lock:
            ready: list[Candidate] = []
            expired: list[Candidate] = []
            for (tenant, run_id), row in self._runs.items():
                if not self._claimable(row):
                    continue
                if not self._in_queues(row, policy, row.claim_token is None):
                    continue
                if row.claim_token is None:
                    if row.wake_at is not None and row.wake_at <= now:
                        ready.append((row.wake_at, run_id, tenant))
                elif self._expired(row, now, policy.orphan_ttl):
                    assert row.claimed_at is not None
                    expired.append((row.claimed_at, run_id, tenant))
            chosen = self._select(ready, expired, policy.limit, policy.preference)
        if self.yield_between_select_and_lease:
            await asyncio.sleep(0)  # the bug: another claimant may select the same rows
        leases: list[Lease] = []
        poisoned: list[PoisonedClaim] = []
        with self._lock:
            for _, run_id, tenant in chosen:
                row = self._runs[(tenant, run_id)]
                if row.claim_attempts < policy.max_claim_attempts:
                    leases.append(self._lease(row, now, policy))
                else:
                    self._poison(row, now, POISON_MAX_ATTEMPTS)
                    poisoned.append(
                        PoisonedClaim(
                            run_id=run_id,
                            owner=owner_scope(tenant),
                            poisoned_at=now,
                            poison_reason=POISON_MAX_ATTEMPTS,
                        )
                    )
        return ClaimBatch(tuple(leases), tuple(poisoned))


# -- seam-only mutants --------------------------------------------------------------------------


class NoTokenFence(_Reference):
    bug = "claimed commits ignore the claim token (checkpoint fence only)"
    catches = ("TRANSITION-CLAIMED-FENCES", "RACE-COMMIT-VS-STEAL")

    def _fences_hold(self, row: _Row, expected: int, token: str | None) -> bool:
        return row.run.checkpoint_seq == expected


class NoCheckpointFence(_Reference):
    bug = "commits ignore the expected checkpoint sequence (token fence only)"
    catches = ("TRANSITION-UNCLAIMED-CAS", "TRANSITION-UNCLAIMED-RACE")

    def _fences_hold(self, row: _Row, expected: int, token: str | None) -> bool:
        return token is None or row.claim_token == token


class TtlOffByOne(_Reference):
    bug = "a claim is stealable at the TTL boundary (<= instead of <)"
    catches = ("CLAIM-TTL-BOUNDARY",)

    def _expired(self, row: _Row, now: datetime, ttl: timedelta) -> bool:
        return row.claimed_at is not None and row.claimed_at <= now - ttl


class TenantlessSeesTenants(_Reference):
    bug = "list_runs(Tenantless) also lists every tenant's runs"
    catches = ("SCOPE-OWNER-ISOLATION",)

    def _visible(self, scope: Scope, row_tenant: str | None) -> bool:
        return True if scope == owner_scope(None) else super()._visible(scope, row_tenant)


class SummaryByRunId(_Reference):
    bug = "list_runs reads summary columns by run id alone (the last-written owner's run)"
    catches = ("OWNER-SCOPED-SUMMARIES",)

    async def list_runs(self, scope: Scope, query: RunListQuery) -> RunPage:
        page = await super().list_runs(scope, query)
        with self._lock:
            by_id = {run_id: row.run for (_, run_id), row in self._runs.items()}
        runs = tuple(RunSummary.of(by_id[s.id], s.tenant_id) for s in page.runs)
        return attrs.evolve(page, runs=runs)


class LostWake(_Reference):
    bug = "release_claim does not announce the run it made due"
    catches = ("WAKE-NOTIFY",)

    _muted = False

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        self._muted = True
        try:
            await super().release_claim(owner, run_id, token, now)
        finally:
            self._muted = False

    def _notify(self) -> None:
        if not self._muted:
            super()._notify()


class _Leaky(_Reference):
    """Run lookups that fall back to any tenant's run with the id, while ``_leak`` is on."""

    _leak = False

    def _row(self, owner: OwnerScope, run_id: object) -> _Row | None:
        row = super()._row(owner, run_id)
        if row is None and self._leak:
            row = next((r for (_, rid), r in self._runs.items() if rid == run_id), None)
        return row


class TenantLeakOnRead(_Leaky):
    bug = "run and event reads fall back to another tenant's run with the same id"
    catches = ("SCOPE-OWNER-ISOLATION",)

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        self._leak = True
        try:
            return await super().fetch_run(owner, run_id)
        finally:
            self._leak = False

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        self._leak = True
        try:
            return await super().list_events(owner, run_id, query)
        finally:
            self._leak = False


class TenantLeakOnWrite(_Leaky):
    bug = "commits fall back to another tenant's run with the same id"
    catches = ("OWNER-SCOPED-RUN-IDS", "TRANSITION-UNCLAIMED-CAS")

    def _lookup_for_commit(self, owner: OwnerScope, run_id: str) -> _Row | None:
        self._leak = True
        try:
            return self._row(owner, run_id)
        finally:
            self._leak = False


class GlobalRunIds(_Reference):
    bug = "initialize refuses a run id another tenant uses (a cross-tenant oracle)"
    catches = ("OWNER-SCOPED-RUN-IDS", "TRANSITION-INITIALIZE-TENANCY")

    async def initialize(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]
    ) -> TransitionResult:
        run = getattr(proposal, "run", None)
        run_id = getattr(run, "id", None)
        with self._lock:
            taken = any(
                rid == run_id and tenant != tenant_id_of(require_owner(owner))
                for (tenant, rid) in self._runs
            )
        if taken:
            return Conflict(f"run {run_id!r} already exists")
        return await super().initialize(owner, proposal, events)


# -- commit-path mutants ------------------------------------------------------------------------


class PartialPublish(_Reference):
    bug = "new events are written before the fences are checked (kept on StaleCheckpoint)"
    catches = ("TRANSITION-CLAIMED-FENCES", "TRANSITION-CONCURRENT-SAME-FENCE")
    events_before_fence = True


class EventsComparedBeforeFence(_Reference):
    bug = "re-sent events are compared before the fences (a race loser sees EventConflict)"
    catches = ("TRANSITION-CONCURRENT-SAME-FENCE", "TRANSITION-UNCLAIMED-RACE")
    compare_before_fence = True


class FenceBeforeIdentity(_Reference):
    bug = "fences are checked before immutable identity (stale wins over invalid)"
    catches = ("TRANSITION-CLAIMED-FENCES", "TRANSITION-CLAIMED-TENANCY-IDENTITY")
    identity_after_fence = True


class NonIdempotentReplay(_Reference):
    bug = "an identical replay of a committed transition answers StaleCheckpoint"
    catches = ("TRANSITION-ID-REPLAY",)
    replay_is_stale = True


class EventOverwrite(_Reference):
    bug = "different content at a stored event seq is accepted and replaces the event"
    catches = ("TRANSITION-EVENT-CANONICAL", "TRANSITION-UNCLAIMED-CAS")
    overwrite_events = True


class SignalKeepsClaim(_Reference):
    bug = "commit_unclaimed does not revoke the current claim"
    catches = ("TRANSITION-UNCLAIMED-CAS", "RACE-UNCLAIMED-VS-CLAIMED")
    signal_keeps_claim = True


class SignalKeepsPoison(_Reference):
    bug = "commit_unclaimed does not clear the poison"
    catches = ("SIGNAL-CLEARS-POISON",)
    signal_keeps_poison = True


class ContentIsAuthority(_Reference):
    bug = "a fenced-out commit identical to the stored run is answered as if it were a replay"
    catches = ("CONTENT-NOT-AUTHORITY",)
    content_is_authority = True


class PrunedResendReinserted(_Reference):
    bug = "a re-sent event that retention pruned is written back into the hole"
    catches = ("RETENTION-SEQ-ARITHMETIC",)
    reinsert_pruned = True


class PruneAtBoundary(_Reference):
    bug = "prune deletes rows exactly at the age boundary (<= instead of <)"
    catches = ("FEATURE-PRUNE",)

    async def prune(
        self,
        *,
        event_age: timedelta | None = None,
        run_age: timedelta | None = None,
        batch_size: int = 1000,
        now: datetime | None = None,
    ) -> PruneResult:
        later = self._now(now) + timedelta(microseconds=1)
        return await super().prune(
            event_age=event_age, run_age=run_age, batch_size=batch_size, now=later
        )


class ValidationAfterLookup(_Reference):
    bug = "commits look the run up before validating (a malformed ghost proposal is NotFound)"
    catches = ("TRANSITION-CLAIMED-TENANCY-IDENTITY", "BAD-INPUT-CHANGES-NOTHING")

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        run_id = getattr(getattr(proposal, "run", None), "id", None)
        if isinstance(run_id, str):
            with self._lock:
                if self._row(owner, run_id) is None:
                    return NotFound()
        return await super().commit_claimed(owner, proposal, events)

    async def commit_unclaimed(
        self,
        owner: OwnerScope,
        expected_checkpoint_seq: int,
        proposal: UnclaimedProposal,
        events: Sequence[Event],
    ) -> TransitionResult:
        run_id = getattr(getattr(proposal, "run", None), "id", None)
        if isinstance(run_id, str):
            with self._lock:
                if self._row(owner, run_id) is None:
                    return NotFound()
        return await super().commit_unclaimed(owner, expected_checkpoint_seq, proposal, events)


# -- claim-path mutants -------------------------------------------------------------------------


class DoubleClaim(_Reference):
    bug = "claim_due yields between selecting and leasing (no atomic select-and-lease)"
    catches = ("CLAIM-CONCURRENT-EXCLUSIVE",)
    yield_between_select_and_lease = True


class NoClassReservation(_Reference):
    bug = "claim_due takes the oldest candidates without reserving an outcome per class"
    catches = ("CLAIM-READY-EXPIRED-CLASSES",)

    def _select(
        self,
        ready: list[Candidate],
        expired: list[Candidate],
        limit: int,
        preference: ClaimClass | None,
    ) -> list[Candidate]:
        if limit == 1:  # keep the demand-1 preference rules: only the reservation is broken
            return select_claims(ready, expired, limit, preference)
        return sorted([*ready, *expired], key=lambda c: (c[0], c[1], c[2] or ""))[:limit]


class PreferenceIgnored(_Reference):
    bug = "a demand-1 claim ignores the preferred class"
    catches = ("CLAIM-DEMAND1-PREFERENCE",)

    def _select(
        self,
        ready: list[Candidate],
        expired: list[Candidate],
        limit: int,
        preference: ClaimClass | None,
    ) -> list[Candidate]:
        return select_claims(ready, expired, limit, None)


class PoisonNeverReached(_Reference):
    bug = "claim_due never poisons (max_claim_attempts is not enforced)"
    catches = ("CLAIM-MAX-ATTEMPTS-POISON",)

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        require_claim_policy(policy)
        return await super().claim_due(attrs.evolve(policy, max_claim_attempts=1 << 62))


class RefreshRegresses(_Reference):
    bug = "refresh_claim sets claimed_at to its now even when that is earlier"
    catches = ("RUN-CLAIM-LIVENESS-RECOVERY",)

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        require_owner(owner)
        moment = self._now(now)
        with self._lock:
            row = self._row(owner, run_id)
            if row is None or row.claim_token is None or row.claim_token != token:
                return ClaimLost()
            row.claimed_at = moment
            return ClaimRefreshed(moment)


class ReleaseUsesBackendClock(_Reference):
    bug = "release_claim stamps wake_at with the backend clock, ignoring the given now"
    catches = ("RUN-CLAIM-LIVENESS-RECOVERY",)

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        await super().release_claim(owner, run_id, token, None)


class AbandonIgnoresCheckpoint(_Reference):
    bug = "abandon_claim matches on the token alone (ignores the expected checkpoint)"
    catches = ("RUN-CLAIM-LIVENESS-RECOVERY",)

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        with self._lock:
            row = self._row(require_owner(owner), run_id)
            seq = row.run.checkpoint_seq if row is not None else None
        if seq is not None and isinstance(policy, AbandonPolicy):
            policy = attrs.evolve(policy, expected_checkpoint_seq=seq)
        return await super().abandon_claim(owner, run_id, token, policy)


# -- read-path mutants ----------------------------------------------------------------------------


class CursorSkipsRow(_Reference):
    bug = "list_events skips the first event after a non-zero cursor"
    catches = ("EVENT-CURSOR-GAPS", "EVENT-PAGING-LIMITS")

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        if isinstance(query, EventListQuery) and query.after_seq > 0:
            query = attrs.evolve(query, after_seq=query.after_seq + 1)
        return await super().list_events(owner, run_id, query)


class CopyLeak(_Reference):
    bug = "fetch_run hands out the stored run object itself"
    catches = ("COPY-ISOLATION",)

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        require_owner(owner)
        with self._lock:
            row = self._row(owner, run_id)
            return NotFound() if row is None else row.run


class IgnoresDeclaredLimits(_Reference):
    bug = "declares the configured limits but validates against the defaults"
    catches = ("LIMITS-TOO-LARGE",)

    def __init__(self, clock: Clock | None = None, limits: Limits | None = None) -> None:
        super().__init__(clock=clock, limits=None)
        self._declared = limits or Limits()

    def capabilities(self) -> Capabilities:
        return attrs.evolve(super().capabilities(), limits=self._declared)


class WrongScheduleWake(_Reference):
    bug = "release(At(t)) commits are stored as due immediately"
    catches = ("TRANSITION-CLAIMED-SCHEDULES",)

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
        if not isinstance(schedule, RetainClaim) and isinstance(schedule.wake, At):
            row.wake_at = self._now(None)


class ClaimedStartUnclaimed(_Reference):
    bug = "initialize_claimed stores a plain, due run (the token is dropped)"
    catches = ("CLAIMED-START",)

    async def initialize_claimed(
        self,
        owner: OwnerScope,
        proposal: InitProposal,
        events: Sequence[Event],
        claim_token: str,
    ) -> TransitionResult:
        answer = await super().initialize_claimed(owner, proposal, events, claim_token)
        with self._lock:
            row = self._runs.get((tenant_id_of(owner), proposal.run.id))
            if isinstance(answer, Run) and row is not None and row.claim_token == claim_token:
                row.claim_token, row.claimed_at, row.wake_at = None, None, row.claimed_at
                row.claim_attempts = 0
        return answer


class ReopenNeverDue(_Reference):
    bug = "a failed run committed back to running keeps a finished run's state (never due)"
    catches = ("T-REOPEN-1", "T-REOPEN-2")

    def _apply(
        self,
        row: _Row,
        transition_id: str,
        checkpoint_type: CheckpointType,
        schedule: Schedule,
        valid: ValidTransition,
        new: list[int],
    ) -> None:
        was_finished = row.run.status.terminal
        super()._apply(row, transition_id, checkpoint_type, schedule, valid, new)
        if was_finished and not row.run.status.terminal:
            row.wake_at = None  # the bug: like a store that dropped the finished run's row


# -- the registry -------------------------------------------------------------------------------

Factory = Callable[..., MemoryBackend]


def _factory(kind: type[_Reference]) -> Factory:
    def build(clock: Clock | None = None, limits: Limits | None = None) -> MemoryBackend:
        return kind(clock=clock, limits=limits)

    build.__name__ = build.__qualname__ = kind.__name__
    build.__doc__ = kind.bug
    return build


control = _factory(_Reference)
no_token_fence = _factory(NoTokenFence)
no_checkpoint_fence = _factory(NoCheckpointFence)
partial_publish = _factory(PartialPublish)
tenant_leak_on_read = _factory(TenantLeakOnRead)
tenant_leak_on_write = _factory(TenantLeakOnWrite)
tenantless_sees_tenants = _factory(TenantlessSeesTenants)
global_run_ids = _factory(GlobalRunIds)
event_overwrite = _factory(EventOverwrite)
non_idempotent_replay = _factory(NonIdempotentReplay)
lost_wake = _factory(LostWake)
double_claim = _factory(DoubleClaim)
ttl_off_by_one = _factory(TtlOffByOne)
poison_never_reached = _factory(PoisonNeverReached)
cursor_skips_row = _factory(CursorSkipsRow)
refresh_regresses = _factory(RefreshRegresses)
fence_before_identity = _factory(FenceBeforeIdentity)
events_compared_before_fence = _factory(EventsComparedBeforeFence)
validation_after_lookup = _factory(ValidationAfterLookup)
copy_leak = _factory(CopyLeak)
signal_keeps_claim = _factory(SignalKeepsClaim)
signal_keeps_poison = _factory(SignalKeepsPoison)
no_class_reservation = _factory(NoClassReservation)
preference_ignored = _factory(PreferenceIgnored)
release_uses_backend_clock = _factory(ReleaseUsesBackendClock)
abandon_ignores_checkpoint = _factory(AbandonIgnoresCheckpoint)
ignores_declared_limits = _factory(IgnoresDeclaredLimits)
wrong_schedule_wake = _factory(WrongScheduleWake)
claimed_start_unclaimed = _factory(ClaimedStartUnclaimed)
reopen_never_due = _factory(ReopenNeverDue)
content_is_authority = _factory(ContentIsAuthority)
summary_by_run_id = _factory(SummaryByRunId)
pruned_resend_reinserted = _factory(PrunedResendReinserted)
prune_at_boundary = _factory(PruneAtBoundary)

#: Every mutant by factory name (the ``control`` is not a mutant: it must pass).
MUTANTS: dict[str, type[_Reference]] = {
    "no_token_fence": NoTokenFence,
    "no_checkpoint_fence": NoCheckpointFence,
    "partial_publish": PartialPublish,
    "tenant_leak_on_read": TenantLeakOnRead,
    "tenant_leak_on_write": TenantLeakOnWrite,
    "tenantless_sees_tenants": TenantlessSeesTenants,
    "global_run_ids": GlobalRunIds,
    "event_overwrite": EventOverwrite,
    "non_idempotent_replay": NonIdempotentReplay,
    "lost_wake": LostWake,
    "double_claim": DoubleClaim,
    "ttl_off_by_one": TtlOffByOne,
    "poison_never_reached": PoisonNeverReached,
    "cursor_skips_row": CursorSkipsRow,
    "refresh_regresses": RefreshRegresses,
    "fence_before_identity": FenceBeforeIdentity,
    "events_compared_before_fence": EventsComparedBeforeFence,
    "validation_after_lookup": ValidationAfterLookup,
    "copy_leak": CopyLeak,
    "signal_keeps_claim": SignalKeepsClaim,
    "signal_keeps_poison": SignalKeepsPoison,
    "no_class_reservation": NoClassReservation,
    "preference_ignored": PreferenceIgnored,
    "release_uses_backend_clock": ReleaseUsesBackendClock,
    "abandon_ignores_checkpoint": AbandonIgnoresCheckpoint,
    "ignores_declared_limits": IgnoresDeclaredLimits,
    "wrong_schedule_wake": WrongScheduleWake,
    "claimed_start_unclaimed": ClaimedStartUnclaimed,
    "reopen_never_due": ReopenNeverDue,
    "content_is_authority": ContentIsAuthority,
    "summary_by_run_id": SummaryByRunId,
    "pruned_resend_reinserted": PrunedResendReinserted,
    "prune_at_boundary": PruneAtBoundary,
}

__all__ = ["MUTANTS", "control", *MUTANTS]
