"""The backend contract as typed Protocols (layer 4). Every operation is ``async``.

A backend is one bundle: a :class:`Backend` that hands out its four focused stores.
Stores of different bundles are never mixed, and no transaction crosses the contract:
each operation is atomic on its own.

Single-run operations take an *owner* scope (``Tenantless`` or ``Tenant``): run ids are
unique per owner, so the owner is part of a run's address. ``System`` is accepted only
where no single run is named (``claim_due``, ``list_runs``); a lease carries the owner
of the run it holds, so recovery code always has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol, TypeAlias, runtime_checkable

from docket.contract.capabilities import Capabilities
from docket.contract.errors import (
    AbandonOutcome,
    ClaimLost,
    ClaimRefreshed,
    Conflict,
    CorruptEventRow,
    CorruptGraph,
    GraphContentConflict,
    InactiveRun,
    InvalidGraph,
    NotFound,
    Permanent,
    Retryable,
    StaleCheckpoint,
    TooLarge,
    TransitionResult,
)
from docket.contract.proposals import (
    AbandonPolicy,
    ClaimBatch,
    ClaimedProposal,
    ClaimPolicy,
    EventListQuery,
    GraphListQuery,
    InitProposal,
    RunListQuery,
    UnclaimedProposal,
)
from docket.contract.retention import PruneResult
from docket.records import (
    Admission,
    AdmissionView,
    CronSchedule,
    Emission,
    Event,
    EventPage,
    FeedItem,
    GraphRef,
    GraphVersion,
    GraphVersionPage,
    HeldStart,
    OwnerScope,
    QueueConfig,
    QueueStatus,
    Run,
    RunInfo,
    RunPage,
    ScheduleCursor,
    SchedulePage,
    Scope,
)
from docket.values import JSONDict

GraphSaveResult: TypeAlias = (
    GraphVersion | InvalidGraph | GraphContentConflict | TooLarge | Retryable | Permanent
)


@runtime_checkable
class GraphStore(Protocol):
    """Immutable, content-addressed graph documents, per owner scope."""

    async def save_graph(
        self, owner: OwnerScope, ref: GraphRef, document: JSONDict
    ) -> GraphSaveResult:
        """The stored ``GraphVersion`` (a re-save keeps its first ``published_at``), or
        ``InvalidGraph`` / ``TooLarge`` / ``GraphContentConflict``. No fence: content-addressed.
        Store failures are returned (``Retryable``/``Permanent``). Docs: contract.md#reads."""

    async def fetch_graph(
        self, owner: OwnerScope, ref: GraphRef
    ) -> JSONDict | NotFound | CorruptGraph:
        """The stored document, ``NotFound`` (absent or another scope's) or ``CorruptGraph``.
        No fence. Raises ``StoreError`` on store failures, ``ValueError`` for ``System``.
        Docs: contract.md#reads."""

    async def fetch_latest_graph_ref(self, owner: OwnerScope, graph_id: str) -> GraphRef | NotFound:
        """The newest published version's ref in ``owner``'s scope, or ``NotFound``.
        No fence. Raises ``StoreError`` on store failures, ``ValueError`` for ``System``.
        Docs: contract.md#reads."""

    async def list_graph_versions(
        self, owner: OwnerScope, graph_id: str, query: GraphListQuery
    ) -> GraphVersionPage:
        """One page of versions, newest first (keyset cursor); empty for an unknown graph.
        No fence. Raises ``StoreError`` on store failures, ``ValueError``/``TypeError`` for a
        malformed query or ``System``. Docs: contract.md#reads."""


@runtime_checkable
class RunStore(Protocol):
    """Run reads and the claim operations (the only writes outside transitions)."""

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        """The run document, or ``NotFound`` (absent or another owner's).
        No fence. Raises ``StoreError`` on store failures, ``ValueError`` for ``System``.
        Docs: contract.md#reads."""

    async def inspect_run(self, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
        """The run with its operational state (wake, claim time, counters, poison; never the
        token), or ``NotFound``. No fence. Raises ``StoreError`` on store failures,
        ``ValueError`` for ``System``. Docs: contract.md#reads."""

    async def list_runs(self, scope: Scope, query: RunListQuery) -> RunPage:
        """One page of summaries, newest first by ``(started_at, id)``; ``System`` sees all.
        No fence. Raises ``StoreError`` on store failures, ``ValueError``/``TypeError`` for a
        malformed query. Docs: contract.md#reads."""

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        """Leases for due runs, and the runs it poisoned instead (attempts exhausted).
        Each run goes to one caller only: ready, or expired strictly after ``orphan_ttl``.
        Store failures are returned; a malformed policy raises ``ValueError``.
        Docs: contract.md#claims."""

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        """``ClaimRefreshed`` (``claimed_at`` moved forward, never back) while the token holds;
        ``ClaimLost`` after (stolen, revoked by a signal, released, gone). Token fence.
        No slot for store failures: raises ``StoreError``. Docs: contract.md#claims."""

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        """Nothing. With the exact token: claim cleared, due at ``now``, counters kept.
        Token fence: any other token changes nothing.
        Raises ``StoreError`` on store failures. Docs: contract.md#claims."""

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        """``Rescheduled``, ``Poisoned`` (hand-back ``max_claim_abandons`` + 1) or ``StaleAbandon``.
        Token and ``policy.expected_checkpoint_seq`` fence. Raises ``ValueError`` for a
        malformed policy, ``StoreError`` on store failures.
        Docs: contract.md#handing-a-claim-back-abandon_claim (every counter, every case)."""

    async def retry_poisoned_run(
        self, owner: OwnerScope, run_id: str, now: datetime | None = None
    ) -> Run | NotFound | InactiveRun:
        """The run (a poisoned one recovered: counters 0, due at ``now``; a healthy one
        unchanged), ``NotFound``, or ``InactiveRun`` when terminal. No fence.
        Raises ``StoreError`` on store failures. Docs: contract.md#claims."""


@runtime_checkable
class EventStore(Protocol):
    """Event reads. Events are written only inside transitions."""

    async def fetch_event(
        self, owner: OwnerScope, run_id: str, seq: int
    ) -> Event | NotFound | CorruptEventRow:
        """The event, ``NotFound`` (no such run for ``owner``, or no such retained seq) or
        ``CorruptEventRow``. No fence. Raises ``ValueError`` for ``seq < 1`` or ``System``,
        ``StoreError`` on store failures. Docs: contract.md#reads."""

    async def fetch_latest_event(
        self, owner: OwnerScope, run_id: str
    ) -> Event | NotFound | CorruptEventRow | None:
        """The newest retained event, ``None`` for a run without events, ``NotFound`` or
        ``CorruptEventRow``. No fence. Raises ``StoreError`` on store failures,
        ``ValueError`` for ``System``. Docs: contract.md#reads."""

    async def list_events(
        self, owner: OwnerScope, run_id: str, query: EventListQuery
    ) -> EventPage | NotFound | CorruptEventRow:
        """Events after ``query.after_seq``, ascending, with bounds from one snapshot; or
        ``NotFound`` / ``CorruptEventRow``. No fence. Raises ``ValueError`` for a malformed
        query or ``System``, ``StoreError`` on store failures. Docs: contract.md#reads."""


@runtime_checkable
class TransitionStore(Protocol):
    """The three atomic, all-or-nothing writes of run state."""

    async def initialize(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]
    ) -> TransitionResult:
        """The stored run, or one ``TransitionError`` (``Conflict`` when the id is taken).
        Fence: the run id is free in ``owner``'s scope; the same ``transition_id`` replays.
        Store failures are returned. Docs: contract.md#the-three-transitions."""

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        """The stored run, or one ``TransitionError``.
        Fence: stored checkpoint == ``expected_checkpoint_seq`` and token == ``claim_token``,
        else ``StaleCheckpoint``. Store failures are returned.
        Docs: contract.md#the-three-transitions."""

    async def commit_unclaimed(
        self,
        owner: OwnerScope,
        expected_checkpoint_seq: int,
        proposal: UnclaimedProposal,
        events: Sequence[Event],
    ) -> TransitionResult:
        """The stored run, or one ``TransitionError``; any claim is revoked.
        Fence: stored checkpoint == ``expected_checkpoint_seq``, else ``StaleCheckpoint``.
        Store failures are returned. Docs: contract.md#the-three-transitions."""


@runtime_checkable
class Backend(Protocol):
    """One backend bundle: capabilities, the four stores, a clock, wake-ups, lifecycle."""

    def capabilities(self) -> Capabilities: ...

    @property
    def graphs(self) -> GraphStore: ...

    @property
    def runs(self) -> RunStore: ...

    @property
    def events(self) -> EventStore: ...

    @property
    def transitions(self) -> TransitionStore: ...

    async def open(self) -> None:
        """Acquire resources (connections, files); idempotent."""

    async def close(self) -> None:
        """Release resources; idempotent."""

    async def now(self) -> datetime:
        """The backend's one authoritative clock (the database's, where there is one)."""

    async def wait_for_work(self, timeout: float) -> bool:
        """Wait until the backend announces newly due work, or ``timeout`` seconds pass.

        Returns ``True`` when woken by an announcement made after the call began. Work
        becomes due, and is announced, on ``initialize``, on a release whose wake is
        already due, on ``release_claim``, on an abandon, and on ``retry_poisoned_run``.
        Polling stays the fallback: a worker always also re-polls on timeout.
        """


@runtime_checkable
class Migratable(Protocol):
    """Optional: a backend with a versioned schema that operators upgrade explicitly.

    Opening a store written by a *newer* schema must fail without changing anything;
    ``migrate`` applies the pending migrations in order, atomically where the database
    allows, and returns ``(from_version, to_version)``. ``docket migrate`` drives this.
    """

    async def schema_versions(self) -> tuple[int | None, int]:
        """``(stored, supported)``; ``stored`` is ``None`` for an empty store."""

    async def migrate(self) -> tuple[int | None, int]: ...

    def schema_sql(self) -> str:
        """The DDL ``migrate`` would apply to an empty store, for teams that run it."""


@runtime_checkable
class ClaimedRuns(Protocol):
    """Optional on a backend's run store: the run document its ``claim_due`` read with a
    lease, handed out once to the lease's holder (``None``: not kept, read the run).

    The document is the run at the lease's checkpoint, as ``fetch_run`` would have read
    it right after the claim; a signal committed since is caught by the commit's fence,
    as it would be after a read. Saves the drain one round trip per claimed run
    (:class:`docket.contract.claimed.ClaimedRunDocuments` keeps them)."""

    async def claimed_run(self, owner: OwnerScope, run_id: str, token: str) -> Run | None: ...


@runtime_checkable
class SampledNow(Protocol):
    """Optional on a backend whose clock is a server's: a cheap reading of that clock.

    ``now()`` reads the server's clock (a round trip) and is exact. ``sampled_now()``
    reads it at most now and then and carries it forward on the local monotonic clock
    (:class:`docket.contract.clock.SampledClock`): it may lag the server by a round trip
    but never runs ahead of it. The worker stamps supersteps with it; anything that must
    be ordered against the server's own stamps uses ``now()``."""

    async def sampled_now(self) -> datetime: ...


@runtime_checkable
class ChainedCommits(Protocol):
    """Optional on a transition store: claimed commits of one run sent back to back.

    ``commit_claimed_chain(owner, commits)`` sends each ``(proposal, events)`` exactly as
    ``commit_claimed`` would send it alone, in the given order and without waiting for the
    answers in between, and answers each as ``commit_claimed`` would (an unknown outcome
    as ``Retryable``). A later commit is fenced on an earlier one's checkpoint, so it can
    only land after it: if it reaches the store first, or the earlier one does not land,
    it is refused (``StaleCheckpoint``) and nothing is applied for it. The worker uses it
    to send a run's completion behind its last superstep, saving the completion a round
    trip of its own; a store that applies writes in the order they were submitted (one
    batch of a :class:`~docket.contract.grouping.GroupCommit`, a single writer's queue)
    gets it from :func:`~docket.contract.grouping.commit_claimed_in_order`."""

    async def commit_claimed_chain(
        self, owner: OwnerScope, commits: Sequence[tuple[ClaimedProposal, Sequence[Event]]]
    ) -> list[TransitionResult]: ...


@runtime_checkable
class ClaimedStarts(Protocol):
    """Optional on a transition store: a run started already claimed.

    ``initialize_claimed(owner, proposal, events, claim_token)`` is ``initialize`` (same
    checks, same answers) except that a run it writes is stored claimed by
    ``claim_token``: claimed at ``proposal.wake_at`` (the start's own time, on the store's
    clock, as the runtime builds it), its first claim attempt counted (as ``claim_due``
    would count it), no wake, and no wake-up announced. The claim then
    behaves like one ``claim_due`` handed out: refreshed, released or abandoned by its
    token, claimable by others as *expired* once ``orphan_ttl`` passes without a commit
    or refresh. The token is part of the write, so a re-send under the same
    ``transition_id`` answers as a replay only with the same token (and never for a
    plain ``initialize``); a replay answers the stored run, whose claim may have moved on
    since. A worker starting a run it has room for uses it to skip the announce and claim
    round trips (an *eager start*)."""

    async def initialize_claimed(
        self,
        owner: OwnerScope,
        proposal: InitProposal,
        events: Sequence[Event],
        claim_token: str,
    ) -> TransitionResult: ...


@runtime_checkable
class Prunable(Protocol):
    """Optional on a backend that declares ``Feature.PRUNE``: retention, one bounded pass.

    ``prune`` deletes up to ``batch_size`` events written more than ``event_age`` ago (of
    any run, live ones included) and up to ``batch_size`` runs that finished more than
    ``run_age`` ago, with their events and transition records; ``None`` skips that kind.
    Ages are measured on the backend's clock from ``now`` (``None``: the clock's now); a
    row exactly at the boundary survives. Bad arguments raise ``ValueError`` and change
    nothing. Retention never changes sequence arithmetic: ``event_seq`` stays, readers see
    the hole (``EventPage.oldest_available_seq``), a re-sent pruned event is dropped.
    """

    async def prune(
        self,
        *,
        event_age: timedelta | None = None,
        run_age: timedelta | None = None,
        batch_size: int = 1000,
        now: datetime | None = None,
    ) -> PruneResult: ...


@runtime_checkable
class ScheduleStore(Protocol):
    """Optional (``Feature.SCHEDULES``): cron schedules, per owner scope, as ``backend.schedules``.

    The store keeps :class:`~docket.records.CronSchedule` documents and indexes their
    ``due_at``; it never interprets the cron expression (the runtime does). Every change
    after the create is fenced on the schedule's ``version`` and stores ``version + 1``.
    A schedule's run is started with ``initialize`` under a run id derived from the schedule
    and its tick, which is what makes a tick start at most one run however many tickers
    race (docs/contract.md#schedules)."""

    async def create_schedule(
        self, owner: OwnerScope, schedule: CronSchedule
    ) -> CronSchedule | Conflict | TooLarge:
        """The stored schedule (``version`` 1, ``tenant_id`` set from ``owner``), or
        ``Conflict`` when the id is taken in ``owner``'s scope. Raises ``ValueError`` for
        ``System``, ``StoreError`` on store failures."""

    async def update_schedule(
        self, owner: OwnerScope, schedule: CronSchedule, expected_version: int
    ) -> CronSchedule | NotFound | StaleCheckpoint | TooLarge:
        """The stored schedule (``version = expected_version + 1``; id, ``created_at`` and
        ``tenant_id`` kept from the stored one), ``NotFound``, or ``StaleCheckpoint`` when
        the stored version is not ``expected_version``. Raises ``StoreError``."""

    async def fetch_schedule(self, owner: OwnerScope, schedule_id: str) -> CronSchedule | NotFound:
        """The stored schedule or ``NotFound`` (absent or another scope's)."""

    async def delete_schedule(self, owner: OwnerScope, schedule_id: str) -> bool:
        """Whether a schedule was deleted (the runs it started are kept)."""

    async def list_schedules(
        self, scope: Scope, after: ScheduleCursor | None = None, limit: int = 100
    ) -> SchedulePage:
        """One page ascending by ``(id, tenant_id or "")`` after ``after``; ``System`` sees
        every tenant's. Raises ``ValueError`` for ``limit < 1``."""

    async def due_schedules(
        self, now: datetime | None = None, limit: int = 100
    ) -> tuple[CronSchedule, ...]:
        """Up to ``limit`` schedules of any tenant whose ``due_at`` is at or before ``now``
        (``None``: the backend's clock), oldest ``due_at`` first. Reading only: whoever
        acts on one fences its change on the version it read."""


@runtime_checkable
class FeedSubscription(Protocol):
    """One subscriber's view of a backend's feed (``EventFeed.subscribe``)."""

    async def get(self, timeout: float) -> Sequence[FeedItem]:
        """The items received since the last call, in arrival order; waits up to
        ``timeout`` seconds for the first (``[]`` when none came). A notice with
        ``run_id=None`` means "re-read everything you follow" (items may have been lost).
        Raises ``StoreError`` when the subscription broke (the reader subscribes again
        and re-reads the store); ``ValueError`` for a negative timeout."""

    async def close(self) -> None:
        """Stop receiving; idempotent."""


@runtime_checkable
class EventFeed(Protocol):
    """Optional (``Feature.STREAMS``): the backend's push channel, as ``backend.feed``.

    After each ``initialize``, ``initialize_claimed``, ``commit_claimed`` and
    ``commit_unclaimed`` that writes, every subscription whose scope admits the run's
    tenant receives a :class:`~docket.records.CommitNotice` for it, never before the
    commit is readable through the stores (docs/contract.md#feed). Delivery is best
    effort and at least as fresh as a poll: readers re-read the store from their own
    cursor, so a lost or repeated notice costs latency, not correctness. Emissions are
    ephemeral, ordered per publisher, and bounded by ``MAX_EMISSION_BYTES`` (larger data
    arrives as an overflow marker)."""

    async def subscribe(self, scope: Scope) -> FeedSubscription:
        """A subscription receiving items published after this returns; ``System`` sees
        every tenant's. Raises ``StoreError`` when the store is unreachable."""

    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        """Send ``emission`` (tenant taken from ``owner``) to the subscriptions of its
        scope; best effort. Raises ``ValueError`` for ``System``, ``StoreError`` when the
        store is unreachable."""


@runtime_checkable
class QueueStore(Protocol):
    """Optional (``Feature.QUEUES``): named queues' configs and their slot ledger, as
    ``backend.queues``. Queues are namespace-wide (not per owner scope).

    The ledger enforces a queue's limits for every claimer: before claiming in a limited
    queue (:attr:`QueueConfig.limited`), a claimer takes slots with ``acquire_slots``
    under holder ids of its own, claims at most that many runs with
    ``ClaimPolicy.queues = {queue}``, and gives back the slots it did not use
    (``release_slots(..., refund=True)``). A slot is held until its claim ends
    (``release_slots``) or its ``expires_at`` passes, which ``renew_slots`` moves forward
    with the claim's heartbeat; an expired slot no longer counts, so a crashed claimer
    costs capacity for one ``orphan_ttl`` at most. Every operation on one queue is atomic
    against every other on it. The grant rule is :func:`docket.contract.queues.grant`
    (docs/contract.md#queues)."""

    async def set_queue(self, config: QueueConfig) -> QueueConfig:
        """Create or replace a queue's config; its held slots and rate tokens are kept
        (a lower limit lets held claims finish, and grants nothing until under it).
        Raises ``ValueError`` for an invalid config (``queue_config_problems``), changing
        nothing, and ``StoreError`` on store failures."""

    async def fetch_queue(self, name: str) -> QueueConfig | NotFound:
        """The stored config, ``NotFound`` for an unknown queue. ``"default"`` is always
        found (unlimited until configured). Raises ``ValueError`` for a malformed name."""

    async def queue_configs(self) -> Sequence[QueueConfig]:
        """Every configured queue's config (and ``"default"``), by name, and nothing else:
        the cheap read a claimer repeats every second to see limit changes."""

    async def list_queues(self) -> Sequence[QueueStatus]:
        """Every configured queue (and ``"default"``), by name, with the slots held now
        (live holders) and its depth (unclaimed running runs due now, every scope)."""

    async def acquire_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        """How many of ``holders`` were granted, in order: the first ``n`` of those not
        already held are recorded as held until ``now + ttl`` (``now=None``: the
        backend's clock). ``n`` is the :func:`~docket.contract.queues.grant` of the
        queue's config, its live slots and its rate bucket (tokens are taken for each
        grant). An unknown queue grants nothing.
        Raises ``ValueError`` for a malformed name, duplicate or empty holders, or a
        negative ``ttl``, changing nothing."""

    async def renew_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        """Move the expiry of those of ``holders`` still held to ``now + ttl``; answers how
        many were still held (an expired or released slot is not revived)."""

    async def release_slots(self, name: str, holders: Sequence[str], refund: bool = False) -> None:
        """Free those of ``holders`` still held (unknown ones are ignored). ``refund``:
        they were never used for a claim, so their rate tokens go back to the bucket
        (capped at its size)."""


class AdmissionStore(Protocol):
    """Optional (``Feature.ADMISSION``, which needs ``Feature.QUEUES``): the admission
    ledger of queues whose config sets ``admission_limit`` or ``tenant_admission_limit``,
    as ``backend.admissions``. It reads each queue's config from the same storage as
    ``backend.queues``, and every operation on one queue is atomic against every other
    on it (and against ``set_queue``). The rules are :mod:`docket.contract.admission`
    (docs/contract.md#admission).

    The store never initialises a run: it answers which starts may be initialised, and
    keeps the opaque ``start`` of each until its run finishes, so a caller that crashed
    after a promotion can be replaced by another that reads it back (``admissions``)."""

    async def admit(
        self,
        name: str,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime | None = None,
    ) -> Admission | NotFound:
        """Admit or hold one start (see :class:`~docket.contract.admission.AdmissionBook`):
        ``ADMITTED`` when the caller may initialise it now, ``HELD`` when the store keeps
        it. A run id the queue's ledger already has answers its state, changing nothing.
        ``NotFound(what=queue)`` for an unknown queue, storing nothing; ``"default"`` is
        always known (a start there is admitted and counted, as in any queue). Raises
        ``ValueError`` for malformed arguments (``require_admit_request``)."""

    async def finish_admitted(
        self, name: str, run_ids: Sequence[str], now: datetime | None = None
    ) -> Sequence[HeldStart]:
        """Forget those of ``run_ids`` admitted in the queue (their runs finished; unknown
        ones are ignored), then promote held starts while the limits allow. Answers the
        promoted starts, in promotion order: the caller initialises them. An unknown
        queue answers ``[]``, as :meth:`promote_held` does."""

    async def promote_held(self, name: str, now: datetime | None = None) -> Sequence[HeldStart]:
        """Promote held starts while the limits allow (after a limit was raised, or to
        finish a promotion a crashed caller began); answers them in promotion order."""

    async def drop_held(self, name: str, run_id: str) -> HeldStart | None:
        """Remove a held (not admitted) start, answering it; ``None`` if the queue holds
        no such start. A cancelled start is dropped this way."""

    async def held_start(self, run_id: str, tenant: str | None) -> HeldStart | None:
        """The start of ``run_id`` (of that tenant) in any queue's ledger, held or
        admitted, or ``None``: how a run that is not initialised yet is found."""

    async def admissions(self, name: str, limit: int = 1000) -> AdmissionView:
        """The queue's ledger: admitted starts by ``seq`` and held ones in promotion
        order, at most ``limit`` of each (an unknown queue's is empty)."""


@runtime_checkable
class SlotClaims(Protocol):
    """Optional on a queue store: a limited queue's claim in one atomic operation (what
    ``acquire_slots``, ``claim_due`` and ``release_slots`` do in three; docs/contract.md#queues).

    ``claim_with_slots(policy, name, holders, release)``, atomically against every other
    operation on queue ``name``: frees ``release`` (slots of claims that ended, as
    ``release_slots`` without refund; unknown ones ignored); takes
    :func:`~docket.contract.queues.grant` of ``len(holders)`` as ``acquire_slots`` would
    (holders already held are skipped); claims at most that many runs exactly as
    ``claim_due(attrs.evolve(policy, limit=granted, queues={name}))``; and holds a slot,
    until ``now + policy.orphan_ttl``, for the ``i``-th lease under the ``i``-th granted
    holder, taking rate tokens for those only (the rest are as if refunded). Answers
    ``None`` when nothing was granted (no claim was made; the releases happened), else
    the claim's ``ClaimBatch`` or refusal (a refusal changes nothing: not even the
    releases). Raises ``ValueError`` for a malformed name, holders or policy, or a
    holder both released and requested, changing nothing."""

    async def claim_with_slots(
        self,
        policy: ClaimPolicy,
        name: str,
        holders: Sequence[str],
        release: Sequence[str] = (),
    ) -> ClaimBatch | Retryable | Permanent | None: ...


STORE_PROTOCOLS: dict[str, type] = {
    "graphs": GraphStore,
    "runs": RunStore,
    "events": EventStore,
    "transitions": TransitionStore,
}

#: Optional members negotiation checks when present: accessor ("" = the bundle itself).
OPTIONAL_PROTOCOLS: dict[str, tuple[type, ...]] = {
    "transitions": (ClaimedStarts, ChainedCommits),
    "runs": (ClaimedRuns,),
    "queues": (SlotClaims,),
    "": (SampledNow, Migratable, Prunable),
}

#: Optional stores a backend bundle may hand out, by accessor, and the feature declaring it.
OPTIONAL_STORES: dict[str, tuple[type, str]] = {
    "schedules": (ScheduleStore, "schedules"),
    "feed": (EventFeed, "streams"),
    "queues": (QueueStore, "queues"),
    "admissions": (AdmissionStore, "admission"),
}

__all__ = [
    "OPTIONAL_PROTOCOLS",
    "OPTIONAL_STORES",
    "STORE_PROTOCOLS",
    "AdmissionStore",
    "Backend",
    "ChainedCommits",
    "ClaimedRuns",
    "ClaimedStarts",
    "EventFeed",
    "EventStore",
    "FeedSubscription",
    "GraphSaveResult",
    "GraphStore",
    "Migratable",
    "Prunable",
    "QueueStore",
    "RunStore",
    "SampledNow",
    "ScheduleStore",
    "SlotClaims",
    "TransitionStore",
]
