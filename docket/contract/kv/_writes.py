"""The adapter's writes, each one transaction body: ``(tx, ...) -> answer``.

They follow ``docket.contract.memory`` step for step (the shared validator has already
run): lookup, :func:`check_replay`, :func:`check_identity`, fences, :func:`split_events`
and :func:`compare_event`, then the publish. Every decision is made before the first
write, so a refusal leaves nothing behind even in a store whose transactions would
commit a partial body.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime, timedelta

import attrs

from docket.contract.errors import (
    POISON_MAX_ABANDONS,
    POISON_MAX_ATTEMPTS,
    AbandonOutcome,
    ClaimLost,
    ClaimRefreshed,
    Conflict,
    EventConflict,
    GraphContentConflict,
    InactiveRun,
    NotFound,
    Poisoned,
    Rescheduled,
    StaleAbandon,
    StaleCheckpoint,
    TransitionResult,
)
from docket.contract.kv._keys import (
    CLAIMED,
    DIGEST_BYTES,
    DOC,
    DUE,
    EVENT,
    GRAPH,
    OWNER_RUNS,
    RUNS,
    TRANSITION,
    VERSION,
    Head,
    graph_handle,
    owner_handle,
    read_time8,
    run_handle,
    seq8,
    text,
    time8,
    untext,
)
from docket.contract.kv._tx import Tx, index_keys
from docket.contract.proposals import (
    AbandonPolicy,
    At,
    ClaimBatch,
    ClaimPolicy,
    Immediate,
    Lease,
    PoisonedClaim,
    RetainClaim,
)
from docket.contract.queries import abandon_wake, select_claims
from docket.contract.validate import (
    Replay,
    ValidTransition,
    check_identity,
    check_replay,
    compare_event,
    split_events,
)
from docket.records import (
    GraphRef,
    GraphVersion,
    OwnerScope,
    Run,
    owner_scope,
    run_from_json,
    tenant_id_of,
)
from docket.values import utc

# -- graphs ---------------------------------------------------------------------------------


def save_graph(
    tx: Tx, owner: OwnerScope, ref: GraphRef, data: bytes, now: datetime
) -> GraphVersion | GraphContentConflict:
    handle = graph_handle(owner, ref.graph_id)
    key = GRAPH + handle + text(ref.graph_hash)
    stored = tx.get(key)
    if stored is None:
        tx.put(key, time8(now) + data)
        tx.put(VERSION + handle + time8(now) + text(ref.graph_hash))
        published = now
    elif stored[8:] != data:
        return GraphContentConflict()
    else:
        published = read_time8(stored)
    return GraphVersion(ref=GraphRef(ref.graph_id, ref.graph_hash), published_at=published)


# -- transitions ----------------------------------------------------------------------------


def _replay(tx: Tx, handle: bytes, valid: ValidTransition) -> Replay | Conflict | None:
    digest = tx.get(TRANSITION + handle + text(valid.transition_id))
    committed = {} if digest is None else {valid.transition_id: digest.decode()}
    return check_replay(committed, valid.transition_id, valid.digest)


def _put_events(tx: Tx, handle: bytes, valid: ValidTransition, indices: list[int]) -> None:
    for index in indices:
        content = hashlib.sha256(valid.event_contents[index]).digest()
        key = EVENT + handle + seq8(valid.events[index].seq)
        tx.put(key, content + valid.event_json[index])


def initialize(
    tx: Tx, owner: OwnerScope, valid: ValidTransition, now: datetime
) -> TransitionResult:
    run = valid.run
    if tx.get(GRAPH + graph_handle(owner, run.graph_id) + text(run.graph_hash)) is None:
        return NotFound("graph")
    handle = run_handle(owner, run.id)
    if tx.head(handle) is not None:
        replay = _replay(tx, handle, valid)
        if isinstance(replay, Replay):
            return run_from_json(tx.doc(handle))
        return replay or Conflict(f"run {run.id!r} already exists")
    head = Head.of(run, tenant_id_of(owner), valid.checkpoint_type)
    assert valid.wake_at is not None
    if valid.claim_token is not None:  # started claimed: no wake, one attempt counted
        head.claim_token, head.claimed_at, head.claim_attempts = (
            valid.claim_token,
            utc(valid.wake_at),
            1,
        )
    else:
        head.wake_at = utc(valid.wake_at)
        tx.announce = head.wake_at <= now
    tx.save(handle, head)
    tx.put(DOC + handle, valid.run_json)
    tx.put(TRANSITION + handle + text(valid.transition_id), valid.digest.encode())
    started = time8(run.started_at) + text(run.id)
    tx.put(RUNS + started + handle)
    tx.put(OWNER_RUNS + owner_handle(owner) + started, handle)
    _put_events(tx, handle, valid, list(range(len(valid.events))))
    return run_from_json(valid.run_json)


def commit(tx: Tx, owner: OwnerScope, valid: ValidTransition, now: datetime) -> TransitionResult:
    assert valid.expected_checkpoint_seq is not None and valid.schedule is not None
    handle = run_handle(owner, valid.run.id)
    head = tx.head(handle)
    if head is None:
        return NotFound()
    replay = _replay(tx, handle, valid)
    if isinstance(replay, Replay):
        return run_from_json(tx.doc(handle))
    if replay is not None:
        return replay
    # The head keeps the identity; check_identity compares only immutable_identity.
    stored = attrs.evolve(
        valid.run, graph_id=head.graph_id, graph_hash=head.graph_hash, started_at=head.started_at
    )
    broken = check_identity(stored, valid.run)
    if broken is not None:
        return broken
    if head.checkpoint_seq != valid.expected_checkpoint_seq or (
        valid.claim_token is not None and head.claim_token != valid.claim_token
    ):
        return StaleCheckpoint()
    split = split_events(head.event_seq, valid)
    if not isinstance(split, tuple):
        return split
    new, old = split
    if old:  # stored events keep the SHA-256 of their content: compare digest to digest
        hashed = attrs.evolve(
            valid, event_contents=tuple(hashlib.sha256(c).digest() for c in valid.event_contents)
        )
        for index in old:
            stored_event = tx.get(EVENT + handle + seq8(valid.events[index].seq))
            if not compare_event(stored_event[:32] if stored_event else None, hashed, index):
                return EventConflict(valid.events[index].seq)
    before = index_keys(handle, head)
    head.advance(valid.run, valid.checkpoint_type)
    if isinstance(valid.schedule, RetainClaim):
        # the commit is liveness: a retained claim is as fresh as now, never older
        head.claimed_at = max(head.claimed_at, now) if head.claimed_at else now
        head.wake_at = None
    else:
        head.claim_token = head.claimed_at = None
        match valid.schedule.wake:
            case Immediate():
                head.wake_at = now
            case At(wake_at=moment):
                head.wake_at = utc(moment)
            case _:
                head.wake_at = None
        tx.announce = head.wake_at is not None and head.wake_at <= now
    tx.save(handle, head, before)
    tx.put(DOC + handle, valid.run_json)
    tx.put(TRANSITION + handle + text(valid.transition_id), valid.digest.encode())
    _put_events(tx, handle, valid, new)
    return run_from_json(valid.run_json)


# -- claims ---------------------------------------------------------------------------------

Candidate = tuple[datetime, str, str | None]


def _candidates(
    tx: Tx, tag: bytes, end: datetime, limit: int, found: dict[Candidate, tuple[bytes, Head]]
) -> list[Candidate]:
    """Up to ``limit`` entries of the due or claim index before ``end``, oldest first, plus
    any that tie with the last on ``(time, run_id)``: the index orders those by digest,
    ``select_claims`` by tenant, so it must see them all."""
    out: list[Candidate] = []
    last: bytes | None = None
    entries = tx.scan(tag, tag + time8(end))
    try:
        for key, _ in entries:
            order, handle = key[:-DIGEST_BYTES], key[-DIGEST_BYTES:]
            if len(out) >= limit and order != last:
                break
            last = order
            head = tx.head(handle)
            if head is not None:
                candidate = (read_time8(key[1:9]), untext(order[9:]), head.tenant)
                found[candidate] = (handle, head)
                out.append(candidate)
    finally:
        entries.close()  # no cursor may stay open while the claims are written
    return out


def claim_due(
    tx: Tx, policy: ClaimPolicy, now: datetime, new_token: Callable[[], str]
) -> ClaimBatch:
    found: dict[Candidate, tuple[bytes, Head]] = {}
    # ready: wake_at <= now (the end is exclusive, so one microsecond past now)
    ready = _candidates(tx, DUE, now + timedelta(microseconds=1), policy.limit, found)
    # expired: claimed_at < now - orphan_ttl, strictly: the boundary is the holder's
    expired = _candidates(tx, CLAIMED, now - policy.orphan_ttl, policy.limit, found)
    leases: list[Lease] = []
    poisoned: list[PoisonedClaim] = []
    for candidate in select_claims(ready, expired, policy.limit, policy.preference):
        handle, head = found[candidate]
        before = index_keys(handle, head)
        if head.claim_attempts < policy.max_claim_attempts:
            head.claim_token, head.claimed_at, head.wake_at = new_token(), now, None
            head.claim_attempts += 1
            leases.append(
                Lease(
                    run_id=head.run_id,
                    owner=owner_scope(head.tenant),
                    graph_id=head.graph_id,
                    graph_hash=head.graph_hash,
                    checkpoint_seq=head.checkpoint_seq,
                    claim_token=head.claim_token,
                    claimed_at=now,
                    claim_attempt=head.claim_attempts,
                    orphan_ttl=policy.orphan_ttl,
                )
            )
        else:
            _poison(head, now, POISON_MAX_ATTEMPTS)
            poisoned.append(
                PoisonedClaim(
                    run_id=head.run_id,
                    owner=owner_scope(head.tenant),
                    poisoned_at=now,
                    poison_reason=POISON_MAX_ATTEMPTS,
                )
            )
        tx.save(handle, head, before)
    return ClaimBatch(tuple(leases), tuple(poisoned))


def _poison(head: Head, now: datetime, reason: str) -> None:
    head.claim_token = head.claimed_at = head.wake_at = None
    head.poisoned_at, head.poison_reason = now, reason


def _held(tx: Tx, owner: OwnerScope, run_id: str, token: str) -> tuple[bytes, Head] | None:
    handle = run_handle(owner, run_id)
    head = tx.head(handle)
    if head is None or head.claim_token is None or head.claim_token != token:
        return None
    return handle, head


def refresh_claim(
    tx: Tx, owner: OwnerScope, run_id: str, token: str, now: datetime
) -> ClaimRefreshed | ClaimLost:
    held = _held(tx, owner, run_id, token)
    if held is None:
        return ClaimLost()
    handle, head = held
    assert head.claimed_at is not None
    if now > head.claimed_at:  # never backwards
        before = index_keys(handle, head)
        head.claimed_at = now
        tx.save(handle, head, before)
    return ClaimRefreshed(head.claimed_at)


def release_claim(tx: Tx, owner: OwnerScope, run_id: str, token: str, now: datetime) -> None:
    held = _held(tx, owner, run_id, token)
    if held is None:
        return
    handle, head = held
    before = index_keys(handle, head)
    head.claim_token = head.claimed_at = None
    head.wake_at = now
    tx.save(handle, head, before)
    tx.announce = True


def abandon_claim(
    tx: Tx, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy, now: datetime
) -> AbandonOutcome:
    held = _held(tx, owner, run_id, token)
    if held is None or held[1].checkpoint_seq != policy.expected_checkpoint_seq:
        return StaleAbandon()
    handle, head = held
    before = index_keys(handle, head)
    old = head.claim_abandons
    head.claim_token = head.claimed_at = None
    head.claim_attempts = max(head.claim_attempts - 1, 0)
    if not policy.non_poisoning and old >= policy.max_claim_abandons:
        _poison(head, now, POISON_MAX_ABANDONS)
        tx.save(handle, head, before)
        return Poisoned(now, POISON_MAX_ABANDONS)
    head.claim_abandons = old + 1
    head.wake_at = abandon_wake(policy, old, now)
    tx.save(handle, head, before)
    tx.announce = True
    return Rescheduled(head.wake_at)


def retry_poisoned_run(
    tx: Tx, owner: OwnerScope, run_id: str, now: datetime
) -> Run | NotFound | InactiveRun:
    handle = run_handle(owner, run_id)
    head = tx.head(handle)
    if head is None:
        return NotFound()
    if head.status.terminal:
        return InactiveRun()
    if head.poisoned_at is not None:
        before = index_keys(handle, head)
        head.poisoned_at = head.poison_reason = head.claim_token = head.claimed_at = None
        head.claim_attempts = head.claim_abandons = 0
        head.wake_at = now
        tx.save(handle, head, before)
        tx.announce = True
    return run_from_json(tx.doc(handle))


__all__ = [
    "abandon_claim",
    "claim_due",
    "commit",
    "initialize",
    "refresh_claim",
    "release_claim",
    "retry_poisoned_run",
    "save_graph",
]
