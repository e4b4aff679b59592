"""The reference backend: complete, in memory, one lock, copies in and out.

It is the executable reading of the contract: every rule lives in the shared validator
(:mod:`docket.contract.validate`) or here, written as plainly as possible. Nothing it
stores is shared with a caller: runs and events are kept as their canonical bytes and
decoded afresh on every read, so mutating a value you passed in or got back changes
nothing stored.

All state sits behind one ``threading.Lock`` and no operation awaits while holding it,
so every operation is atomic and linearizable, whichever threads or event loops call.
The small ``_methods`` marked *seam* exist so the contract kit's negative controls can
break exactly one rule at a time by overriding one of them.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import assert_never

from docket.clock import system_clock
from docket.contract.capabilities import Capabilities, Feature, Limits
from docket.contract.errors import (
    POISON_MAX_ABANDONS,
    POISON_MAX_ATTEMPTS,
    AbandonOutcome,
    ClaimLost,
    ClaimRefreshed,
    Conflict,
    CorruptEventRow,
    CorruptGraph,
    EventConflict,
    GraphContentConflict,
    InactiveRun,
    InvalidGraph,
    NotFound,
    Permanent,
    Poisoned,
    Rescheduled,
    Retryable,
    StaleAbandon,
    StaleCheckpoint,
    TooLarge,
    TransitionResult,
)
from docket.contract.feed import FeedHub
from docket.contract.memory_queues import MemoryAdmissions, MemoryQueues
from docket.contract.memory_retention import prune_rows
from docket.contract.memory_rows import MemoryGraphRow, MemoryRow
from docket.contract.memory_schedules import MemorySchedules
from docket.contract.proposals import (
    AbandonPolicy,
    At,
    ClaimBatch,
    ClaimedProposal,
    ClaimPolicy,
    EventListQuery,
    External,
    GraphListQuery,
    Immediate,
    InitProposal,
    Lease,
    PoisonedClaim,
    RetainClaim,
    RunListQuery,
    Schedule,
    Terminal,
    UnclaimedProposal,
)
from docket.contract.queries import (
    abandon_wake,
    require_abandon_policy,
    require_claim_policy,
    require_event_query,
    require_graph_query,
    require_run_query,
    require_seq,
    select_claims,
)
from docket.contract.registry import BackendFactory
from docket.contract.retention import PruneResult, require_prune_args
from docket.contract.validate import (
    Replay,
    ValidationResult,
    ValidTransition,
    check_identity,
    check_replay,
    compare_event,
    split_events,
    validate_commit_claimed,
    validate_commit_unclaimed,
    validate_graph_save,
    validate_initialize,
    validate_initialize_claimed,
)
from docket.records import (
    CheckpointType,
    Event,
    EventPage,
    GraphRef,
    GraphVersion,
    GraphVersionPage,
    OwnerScope,
    Run,
    RunInfo,
    RunPage,
    RunSummary,
    Scope,
    event_from_json,
    owner_scope,
    require_owner,
    require_scope,
    run_before,
    run_from_json,
    run_order_key,
    scope_admits,
    tenant_id_of,
    version_before,
    version_order_key,
)
from docket.values import JSONDict, utc

_Row = MemoryRow  # the kit's mutants subclass against this name
_GraphRow = MemoryGraphRow

#: The run statuses claim_due may take (a waiting one only by its wake or expired claim).
_CLAIMABLE = frozenset({"running", "waiting"})


class MemoryBackend:
    """The reference double. ``clock`` is its one authoritative clock (tests inject one)."""

    def __init__(
        self, clock: Callable[[], datetime] | None = None, limits: Limits | None = None
    ) -> None:
        self._clock = clock or system_clock
        self._limits = limits or Limits()
        self._lock = threading.Lock()
        self._runs: dict[tuple[str | None, str], _Row] = {}
        self._graphs: dict[tuple[str | None, str, str], _GraphRow] = {}
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.schedules = MemorySchedules(self._clock, self._limits)
        self.feed = FeedHub()  # Feature.STREAMS: notices after each commit, emissions
        self.queues = MemoryQueues(self._clock, self._depth)  # Feature.QUEUES
        self.admissions = MemoryAdmissions(self.queues)  # Feature.ADMISSION

    # -- bundle -------------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        return Capabilities(
            limits=self._limits,
            features=frozenset(
                {
                    Feature.NOTIFY,
                    Feature.REOPEN_FAILED,
                    Feature.PRUNE,
                    Feature.CHILD_RUNS,
                    Feature.TIMERS,
                    Feature.MESSAGES,
                    Feature.SCHEDULES,
                    Feature.STREAMS,
                    Feature.QUEUES,
                    Feature.ADMISSION,
                }
            ),
            name="memory",
        )

    @property
    def graphs(self) -> MemoryBackend:
        return self

    @property
    def runs(self) -> MemoryBackend:
        return self

    @property
    def events(self) -> MemoryBackend:
        return self

    @property
    def transitions(self) -> MemoryBackend:
        return self

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def now(self) -> datetime:
        return self._now(None)

    def _now(self, given: datetime | None) -> datetime:
        return utc(given) if given is not None else utc(self._clock())

    # -- wake-ups -----------------------------------------------------------------------

    async def wait_for_work(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):  # 3.11's wait_for can lose a cancel
                await future
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def _notify(self) -> None:
        """Seam: wake every waiter (called with the lock held)."""
        for loop, future in self._waiters:
            loop.call_soon_threadsafe(_resolve, future)

    def _notify_if_due(self, wake_at: datetime | None) -> None:
        if wake_at is not None and wake_at <= self._now(None):
            self._notify()

    # -- seams --------------------------------------------------------------------------

    def _visible(self, scope: Scope, row_tenant: str | None) -> bool:
        """Seam: whether a row is visible to a scope."""
        return scope_admits(scope, row_tenant)

    def _row(self, owner: OwnerScope, run_id: object) -> _Row | None:
        if not isinstance(run_id, str):
            raise TypeError(f"run_id must be a string, got {type(run_id).__name__}")
        row = self._runs.get((tenant_id_of(owner), run_id))
        return row if row is not None and self._visible(owner, row.tenant) else None

    def _fences_hold(self, row: _Row, expected: int, token: str | None) -> bool:
        """Seam: the checkpoint fence, plus the token fence for claimed commits."""
        if row.run.checkpoint_seq != expected:
            return False
        return token is None or row.claim_token == token

    def _expired(self, row: _Row, now: datetime, ttl: timedelta) -> bool:
        """Seam: a claim is stealable only strictly after the TTL boundary."""
        return row.claimed_at is not None and row.claimed_at < now - ttl

    def _claimable(self, row: _Row) -> bool:
        """Seam: whether ``claim_due`` may take the row when due or expired. A waiting run
        is taken only by its wake (a deadline, a message timeout) or an expired claim; one
        waiting on ``External`` has no wake, so it never is."""
        return row.run.status.value in _CLAIMABLE and not row.poisoned

    def _new_token(self) -> str:
        return secrets.token_urlsafe(18)

    # -- graphs -------------------------------------------------------------------------

    async def save_graph(
        self, owner: OwnerScope, ref: GraphRef, document: JSONDict
    ) -> GraphVersion | InvalidGraph | GraphContentConflict | TooLarge | Retryable | Permanent:
        checked = validate_graph_save(owner, ref, document, self._limits)
        if not isinstance(checked, bytes):
            return checked
        key = (tenant_id_of(owner), ref.graph_id, ref.graph_hash)
        with self._lock:
            stored = self._graphs.get(key)
            if stored is None:
                stored = self._graphs[key] = _GraphRow(checked, self._now(None))
            elif stored.data != checked:
                return GraphContentConflict()
            return GraphVersion(
                ref=GraphRef(ref.graph_id, ref.graph_hash), published_at=stored.published_at
            )

    async def fetch_graph(
        self, owner: OwnerScope, ref: GraphRef
    ) -> JSONDict | NotFound | CorruptGraph:
        require_owner(owner)
        with self._lock:
            stored = self._graphs.get((tenant_id_of(owner), ref.graph_id, ref.graph_hash))
        if stored is None:
            return NotFound("graph")
        document: JSONDict = json.loads(stored.data)
        return document

    def _versions(self, owner: OwnerScope, graph_id: str) -> list[GraphVersion]:
        tenant = tenant_id_of(require_owner(owner))
        versions = [
            GraphVersion(ref=GraphRef(gid, ghash), published_at=row.published_at)
            for (t, gid, ghash), row in self._graphs.items()
            if t == tenant and gid == graph_id
        ]
        versions.sort(key=version_order_key, reverse=True)
        return versions

    async def fetch_latest_graph_ref(self, owner: OwnerScope, graph_id: str) -> GraphRef | NotFound:
        with self._lock:
            versions = self._versions(owner, graph_id)
        return versions[0].ref if versions else NotFound("graph")

    async def list_graph_versions(
        self, owner: OwnerScope, graph_id: str, query: GraphListQuery
    ) -> GraphVersionPage:
        require_graph_query(query)
        with self._lock:
            versions = [
                v for v in self._versions(owner, graph_id) if version_before(v, query.before)
            ]
        return GraphVersionPage.from_candidates(
            versions[: query.limit + 1], query.limit, query.before
        )

    # -- run reads ----------------------------------------------------------------------

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        require_owner(owner)
        with self._lock:
            row = self._row(owner, run_id)
            data = row.run_json if row is not None else None
        return NotFound() if data is None else run_from_json(data)

    def _info(self, row: _Row) -> RunInfo:
        return RunInfo(
            run=run_from_json(row.run_json),
            tenant_id=row.tenant,
            wake_at=row.wake_at,
            claimed_at=row.claimed_at,
            claim_attempts=row.claim_attempts,
            claim_abandons=row.claim_abandons,
            poisoned_at=row.poisoned_at,
            poison_reason=row.poison_reason,
            latest_checkpoint_type=row.latest_checkpoint_type,
            queue=row.queue,
            priority=row.priority,
        )

    async def inspect_run(self, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
        require_owner(owner)
        with self._lock:
            row = self._row(owner, run_id)
            return NotFound() if row is None else self._info(row)

    async def list_runs(self, scope: Scope, query: RunListQuery) -> RunPage:
        require_scope(scope)
        require_run_query(query)
        with self._lock:
            summaries = [
                RunSummary.of(row.run, row.tenant)
                for row in self._runs.values()
                if self._visible(scope, row.tenant)
                and (query.graph_id is None or row.run.graph_id == query.graph_id)
                and (query.graph_hash is None or row.run.graph_hash == query.graph_hash)
                and (query.statuses is None or row.run.status in query.statuses)
            ]
        summaries = [s for s in summaries if run_before(s, query.before)]
        summaries.sort(key=run_order_key, reverse=True)
        return RunPage.from_candidates(summaries[: query.limit + 1], query.limit, query.before)

    # -- events -------------------------------------------------------------------------

    def _decode_event(self, seq: int, data: bytes) -> Event | CorruptEventRow:
        try:
            return event_from_json(data)
        except (ValueError, TypeError, KeyError) as exc:  # unreachable unless memory is corrupted
            return CorruptEventRow(seq, str(exc))

    async def fetch_event(
        self, owner: OwnerScope, run_id: str, seq: int
    ) -> Event | NotFound | CorruptEventRow:
        require_owner(owner)
        require_seq(seq)
        with self._lock:
            row = self._row(owner, run_id)
            stored = row.events.get(seq) if row is not None else None
        return NotFound("event") if stored is None else self._decode_event(seq, stored[0])

    async def fetch_latest_event(
        self, owner: OwnerScope, run_id: str
    ) -> Event | NotFound | CorruptEventRow | None:
        require_owner(owner)
        with self._lock:
            row = self._row(owner, run_id)
            if row is None:
                return NotFound()
            if not row.events:
                return None
            seq = max(row.events)
            data = row.events[seq][0]
        return self._decode_event(seq, data)

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        require_owner(owner)
        require_event_query(query)
        with self._lock:
            row = self._row(owner, run_id)
            if row is None:
                return NotFound()
            seqs = sorted(row.events)
            page = [(s, row.events[s][0]) for s in seqs if s > query.after_seq][: query.limit]
            latest_seq = row.run.event_seq
        events: list[Event] = []
        for seq, data in page:
            decoded = self._decode_event(seq, data)
            if isinstance(decoded, CorruptEventRow):
                return decoded
            events.append(decoded)
        return EventPage.from_candidates(
            events,
            limit=query.limit,
            after_seq=query.after_seq,
            oldest_available_seq=seqs[0] if seqs else None,
            latest_available_seq=seqs[-1] if seqs else None,
            latest_seq=latest_seq,
        )

    # -- claims -------------------------------------------------------------------------

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        require_claim_policy(policy)
        now = self._now(policy.now)
        with self._lock:
            ready: list[tuple[datetime, str, str | None]] = []
            expired: list[tuple[datetime, str, str | None]] = []
            for (tenant, run_id), row in self._runs.items():
                if not self._claimable(row):
                    continue
                if policy.queues is not None and row.queue not in policy.queues:
                    continue
                if row.claim_token is None:
                    if row.wake_at is not None and row.wake_at <= now:
                        ready.append((row.wake_at, run_id, tenant))
                elif self._expired(row, now, policy.orphan_ttl):
                    assert row.claimed_at is not None
                    expired.append((row.claimed_at, run_id, tenant))
            chosen = select_claims(ready, expired, policy.limit, policy.preference, self._priority)
            leases: list[Lease] = []
            poisoned: list[PoisonedClaim] = []
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

    def _priority(self, candidate: tuple[datetime, str, str | None]) -> int:
        return self._runs[(candidate[2], candidate[1])].priority

    def _depth(self, queue: str) -> int:
        """``list_queues``' depth: the queue's unclaimed running runs due now."""
        now = self._now(None)
        with self._lock:
            return sum(1 for row in self._runs.values() if row.queue == queue and row.due(now))

    def _lease(self, row: _Row, now: datetime, policy: ClaimPolicy) -> Lease:
        row.claim_token = self._new_token()
        row.claimed_at = now
        row.wake_at = None
        row.claim_attempts += 1
        return Lease(
            run_id=row.run.id,
            owner=owner_scope(row.tenant),
            graph_id=row.run.graph_id,
            graph_hash=row.run.graph_hash,
            checkpoint_seq=row.run.checkpoint_seq,
            claim_token=row.claim_token,
            claimed_at=now,
            claim_attempt=row.claim_attempts,
            orphan_ttl=policy.orphan_ttl,
        )

    @staticmethod
    def _poison(row: _Row, now: datetime, reason: str) -> None:
        row.claim_token = None
        row.claimed_at = None
        row.wake_at = None
        row.poisoned_at = now
        row.poison_reason = reason

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        require_owner(owner)
        moment = self._now(now)
        with self._lock:
            row = self._row(owner, run_id)
            if row is None or row.claim_token is None or row.claim_token != token:
                return ClaimLost()
            assert row.claimed_at is not None
            row.claimed_at = max(row.claimed_at, moment)
            return ClaimRefreshed(row.claimed_at)

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        require_owner(owner)
        moment = self._now(now)
        with self._lock:
            row = self._row(owner, run_id)
            if row is None or row.claim_token is None or row.claim_token != token:
                return
            row.claim_token = None
            row.claimed_at = None
            row.wake_at = moment
            self._notify()

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        require_owner(owner)
        now = self._now(policy.now)
        require_abandon_policy(policy, now)
        with self._lock:
            row = self._row(owner, run_id)
            if (
                row is None
                or row.claim_token is None
                or row.claim_token != token
                or row.run.checkpoint_seq != policy.expected_checkpoint_seq
            ):
                return StaleAbandon()
            old = row.claim_abandons
            row.claim_token = None
            row.claimed_at = None
            row.claim_attempts = max(row.claim_attempts - 1, 0)
            if not policy.non_poisoning and old >= policy.max_claim_abandons:
                self._poison(row, now, POISON_MAX_ABANDONS)
                return Poisoned(now, POISON_MAX_ABANDONS)
            row.claim_abandons = old + 1
            row.wake_at = abandon_wake(policy, old, now)
            self._notify()
            return Rescheduled(row.wake_at)

    async def retry_poisoned_run(
        self, owner: OwnerScope, run_id: str, now: datetime | None = None
    ) -> Run | NotFound | InactiveRun:
        require_owner(owner)
        moment = self._now(now)
        with self._lock:
            row = self._row(owner, run_id)
            if row is None:
                return NotFound()
            if row.run.status.terminal:
                return InactiveRun()
            if row.poisoned:
                row.poisoned_at = None
                row.poison_reason = None
                row.claim_token = None
                row.claimed_at = None
                row.claim_attempts = 0
                row.claim_abandons = 0
                row.wake_at = moment
                self._notify()
            data = row.run_json
        return run_from_json(data)

    # -- retention ----------------------------------------------------------------------

    async def prune(
        self,
        *,
        event_age: timedelta | None = None,
        run_age: timedelta | None = None,
        batch_size: int = 1000,
        now: datetime | None = None,
    ) -> PruneResult:
        """``Prunable``: events written, and runs finished, more than an age before ``now``.

        A pruned event leaves a hole below the run's ``event_seq``, which stays as it was.
        """
        event_age, run_age, batch_size = require_prune_args(event_age, run_age, batch_size)
        moment = self._now(now)
        with self._lock:
            return prune_rows(self._runs, moment, event_age, run_age, batch_size)

    # -- transitions --------------------------------------------------------------------

    async def initialize(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]
    ) -> TransitionResult:
        valid = validate_initialize(owner, proposal, events, self._limits)
        return self._initialize(owner, proposal, valid)

    async def initialize_claimed(
        self,
        owner: OwnerScope,
        proposal: InitProposal,
        events: Sequence[Event],
        claim_token: str,
    ) -> TransitionResult:
        """``ClaimedStarts``: the run is written claimed by ``claim_token``."""
        valid = validate_initialize_claimed(owner, proposal, events, claim_token, self._limits)
        return self._initialize(owner, proposal, valid)

    def _initialize(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidationResult
    ) -> TransitionResult:
        if not isinstance(valid, ValidTransition):
            return valid
        run = valid.run
        tenant = tenant_id_of(owner)
        with self._lock:
            if (tenant, run.graph_id, run.graph_hash) not in self._graphs:
                return NotFound("graph")
            existing = self._runs.get((tenant, run.id))
            if existing is not None:
                replay = check_replay(existing.transitions, proposal.transition_id, valid.digest)
                if isinstance(replay, Replay):
                    return run_from_json(existing.run_json)
                return replay or Conflict(f"run {run.id!r} already exists")
            row = _Row(
                tenant=tenant,
                run_json=valid.run_json,
                run=run_from_json(valid.run_json),
                latest_checkpoint_type=proposal.checkpoint_type,
                wake_at=utc(proposal.wake_at),
                transitions={proposal.transition_id: valid.digest},
                queue=valid.queue,
                priority=valid.priority,
            )
            if valid.claim_token is not None:  # started claimed: no wake, one attempt
                row.claim_token = valid.claim_token
                row.claimed_at, row.wake_at = row.wake_at, None
                row.claim_attempts = 1
            written = self._now(None)
            for index, event in enumerate(valid.events):
                row.events[event.seq] = (valid.event_json[index], valid.event_contents[index])
                row.event_times[event.seq] = written
            self._runs[(tenant, run.id)] = row
            self._notify_if_due(row.wake_at)
            self.feed.notice(owner, run.id, run.graph_id, 1, run.event_seq)
            return run_from_json(valid.run_json)

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        valid = validate_commit_claimed(owner, proposal, events, self._limits)
        return self._commit(owner, valid) if isinstance(valid, ValidTransition) else valid

    async def commit_unclaimed(
        self,
        owner: OwnerScope,
        expected_checkpoint_seq: int,
        proposal: UnclaimedProposal,
        events: Sequence[Event],
    ) -> TransitionResult:
        valid = validate_commit_unclaimed(
            owner, expected_checkpoint_seq, proposal, events, self._limits
        )
        return self._commit(owner, valid) if isinstance(valid, ValidTransition) else valid

    def _commit(self, owner: OwnerScope, valid: ValidTransition) -> TransitionResult:
        assert valid.expected_checkpoint_seq is not None and valid.schedule is not None
        with self._lock:
            row = self._row(owner, valid.run.id)
            if row is None:
                return NotFound()
            replay = check_replay(row.transitions, valid.transition_id, valid.digest)
            if isinstance(replay, Replay):
                return run_from_json(row.run_json)
            if replay is not None:
                return replay
            broken = check_identity(row.run, valid.run)
            if broken is not None:
                return broken
            if not self._fences_hold(row, valid.expected_checkpoint_seq, valid.claim_token):
                return StaleCheckpoint()
            split = split_events(row.run.event_seq, valid)
            if not isinstance(split, tuple):
                return split
            new, old = split
            for index in old:
                seq = valid.events[index].seq
                stored = row.events.get(seq)
                if not compare_event(stored[1] if stored else None, valid, index):
                    return EventConflict(seq)
            first = row.run.event_seq + 1
            self._apply(row, valid.transition_id, valid.checkpoint_type, valid.schedule, valid, new)
            self.feed.notice(owner, row.run.id, row.run.graph_id, first, row.run.event_seq)
            return run_from_json(valid.run_json)

    def _apply(
        self,
        row: _Row,
        transition_id: str,
        checkpoint_type: CheckpointType,
        schedule: Schedule,
        valid: ValidTransition,
        new: list[int],
    ) -> None:
        """Publish one validated, fenced transition (called with the lock held)."""
        now = self._now(None)
        row.run_json = valid.run_json
        row.run = run_from_json(valid.run_json)
        row.latest_checkpoint_type = checkpoint_type
        row.transitions[transition_id] = valid.digest
        row.claim_attempts = 0
        row.claim_abandons = 0
        row.poisoned_at = None
        row.poison_reason = None
        for index in new:
            row.events[valid.events[index].seq] = (
                valid.event_json[index],
                valid.event_contents[index],
            )
            row.event_times[valid.events[index].seq] = now
        row.ended_at = now if row.run.status.terminal else None
        if isinstance(schedule, RetainClaim):
            # the commit is liveness: a retained claim is as fresh as now, never older
            row.claimed_at = max(row.claimed_at, now) if row.claimed_at else now
            row.wake_at = None
            return
        row.claim_token = None
        row.claimed_at = None
        match schedule.wake:
            case Immediate():
                row.wake_at = now
            case At(wake_at=moment):
                row.wake_at = utc(moment)
            case External() | Terminal():
                row.wake_at = None
            case _:
                assert_never(schedule.wake)
        self._notify_if_due(row.wake_at)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _create(url: str, options: Mapping[str, object]) -> MemoryBackend:
    if url.partition("://")[2].strip("/"):
        raise ValueError(f"memory:// takes no host or path, got {url!r}")
    unknown = set(options) - {"clock", "limits"}
    if unknown:
        raise TypeError(f"memory:// does not take {', '.join(sorted(unknown))}")
    clock = options.get("clock")
    limits = options.get("limits")
    if clock is not None and not callable(clock):
        raise TypeError("clock must be a callable returning an aware datetime")
    if limits is not None and not isinstance(limits, Limits):
        raise TypeError("limits must be docket.contract.Limits")
    return MemoryBackend(clock=clock, limits=limits)


#: Entry point ``docket.backends: memory``; ``memory://`` gives a fresh, empty store.
factory = BackendFactory(
    name="memory",
    schemes=("memory",),
    create=_create,
    description="in-process reference backend (no durability); for tests and examples",
)

__all__ = ["MemoryBackend", "factory"]
