"""``SQLiteTransitionStore``: the contract's TransitionStore, plus ``ClaimedStarts`` and
``ChainedCommits``.

**The shared rules.** Each transition runs the shared validator first and stores the
canonical bytes it returns; inside its write transaction it applies ``check_replay``,
``check_identity``, the fences, ``split_events`` and ``compare_event`` in the normative
order; any failure rolls back, so nothing is written. A run document is stored in
pieces and a commit rewrites only the pieces that changed (see ``_rows.py``). Writes
queued together share one transaction (group commit, see ``_threads.py``), applied in
the order they came, which is what makes ``commit_claimed_chain`` safe.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Mapping, Sequence

import attrs

from docket.contract import (
    At,
    ClaimedProposal,
    Conflict,
    EventConflict,
    External,
    Immediate,
    InitProposal,
    Limits,
    NotFound,
    Permanent,
    RetainClaim,
    Schedule,
    StaleCheckpoint,
    Terminal,
    TransitionError,
    TransitionResult,
)
from docket.contract.grouping import commit_claimed_in_order
from docket.contract.validate import (
    Replay,
    ValidTransition,
    check_identity,
    check_replay,
    compare_event,
    split_events,
)
from docket.contract.writes import ValidatedTransitions
from docket.records import Event, OwnerScope, RecordDecodeError, Run, RunStatus, run_from_json
from docket.values import from_micros, to_micros
from docket_sqlite._engine import Engine
from docket_sqlite._rows import cut, run_exists, store_pieces, stored_run_json, tenant_key
from docket_sqlite._threads import Done

# A transition job answers the run it wrote, a replay's stored bytes, or a refusal.
_Job = Callable[[sqlite3.Connection], Done[Run | bytes | TransitionError]]


class SQLiteTransitionStore(ValidatedTransitions):
    """The atomic writes of run state (``SQLiteBackend.transitions``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def limits(self) -> Limits:
        return self._engine.limits

    async def commit_claimed_chain(
        self, owner: OwnerScope, commits: Sequence[tuple[ClaimedProposal, Sequence[Event]]]
    ) -> list[TransitionResult]:
        """``ChainedCommits``: its one writer applies queued writes in the order they came."""
        return await commit_claimed_in_order(self, owner, commits)

    # -- the two writes ---------------------------------------------------------------------

    async def _publish_start(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidTransition
    ) -> TransitionResult:
        engine = self._engine
        key = tenant_key(owner)
        run = valid.run
        hashes = _content_hashes(valid)
        token = valid.claim_token
        start_us = to_micros(proposal.wake_at)
        # a claimed start holds its claim from the start's own time, with no wake
        wake_us = start_us if token is None else None
        claimed_us = None if token is None else start_us
        attempts = 0 if token is None else 1
        head, pieces = cut(valid.run_json)

        def job(conn: sqlite3.Connection) -> Done[Run | bytes | TransitionError]:
            graph = conn.execute(
                "SELECT 1 FROM docket_graphs WHERE tenant = ? AND graph_id = ? AND graph_hash = ?",
                (key, run.graph_id, run.graph_hash),
            ).fetchone()
            if graph is None:
                return Done(NotFound("graph"), commit=False)
            if run_exists(conn, key, run.id):
                replay = check_replay(
                    _recorded(conn, key, run.id, proposal.transition_id),
                    proposal.transition_id,
                    valid.digest,
                )
                if isinstance(replay, Replay):
                    return Done(stored_run_json(conn, key, run.id), commit=False)
                return Done(replay or Conflict(f"run {run.id!r} already exists"), commit=False)
            now_us = engine.now_us(None)
            conn.execute(
                "INSERT INTO docket_runs (tenant, run_id, graph_id, graph_hash, status, step, "
                "checkpoint_seq, event_seq, started_at_us, updated_at_us, finished_at_us, "
                "run_json, run_parts, latest_checkpoint_type, wake_at_us, claim_token, "
                "claimed_at_us, claim_attempts, ended_at_us, queue, priority) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    run.id,
                    run.graph_id,
                    run.graph_hash,
                    str(run.status),
                    run.step,
                    run.checkpoint_seq,
                    run.event_seq,
                    to_micros(run.started_at),
                    to_micros(run.updated_at),
                    None if run.finished_at is None else to_micros(run.finished_at),
                    head,
                    len(pieces),
                    str(proposal.checkpoint_type),
                    wake_us,
                    token,
                    claimed_us,
                    attempts,
                    now_us if run.status.terminal else None,
                    valid.queue,  # Feature.QUEUES: operational, beside the document
                    valid.priority,
                ),
            )
            store_pieces(conn, key, run.id, pieces, 0)
            _record(conn, key, run.id, proposal.transition_id, valid.digest)
            _insert_events(conn, key, valid, hashes, range(len(valid.events)), now_us)
            # what was just stored, already checked durable: no decode of its bytes
            due = wake_us is not None and wake_us <= now_us
            notice = (key, run.id, run.graph_id, 1, run.event_seq)
            return Done(valid.run, announce=due, notice=notice)

        return await self._transition(job)

    async def _publish_commit(self, owner: OwnerScope, valid: ValidTransition) -> TransitionResult:
        engine = self._engine
        transition_id, token = valid.transition_id, valid.claim_token
        expected, schedule = valid.expected_checkpoint_seq, valid.schedule
        checkpoint_type = valid.checkpoint_type
        assert expected is not None and schedule is not None  # a commit carries both
        key = tenant_key(owner)
        run = valid.run
        hashes = _content_hashes(valid)
        head, pieces = cut(valid.run_json)

        def job(conn: sqlite3.Connection) -> Done[Run | bytes | TransitionError]:
            row = conn.execute(
                "SELECT graph_id, graph_hash, status, started_at_us, updated_at_us, "
                "checkpoint_seq, event_seq, claim_token, claimed_at_us, run_parts "
                "FROM docket_runs WHERE tenant = ? AND run_id = ?",
                (key, run.id),
            ).fetchone()
            if row is None:
                return Done(NotFound(), commit=False)
            replay = check_replay(
                _recorded(conn, key, run.id, transition_id), transition_id, valid.digest
            )
            if isinstance(replay, Replay):
                return Done(stored_run_json(conn, key, run.id), commit=False)
            if replay is not None:
                return Done(replay, commit=False)
            graph_id, graph_hash, status, started, updated, stored_seq, event_seq = row[:7]
            held, since, stored_parts = row[7:]
            stored = Run(  # the stored identity, from its columns (no document decode)
                id=run.id,
                graph_id=str(graph_id),
                graph_hash=str(graph_hash),
                status=RunStatus(str(status)),
                started_at=from_micros(int(started)),
                updated_at=from_micros(int(updated)),
            )
            broken = check_identity(stored, run)
            if broken is not None:
                return Done(broken, commit=False)
            if int(stored_seq) != expected or (token is not None and held != token):
                return Done(StaleCheckpoint(), commit=False)
            split = split_events(int(event_seq), valid)
            if not isinstance(split, tuple):
                return Done(split, commit=False)
            new, old = split
            for index in old:
                seq = valid.events[index].seq
                found = conn.execute(
                    "SELECT content_sha256 FROM docket_events "
                    "WHERE tenant = ? AND run_id = ? AND seq = ?",
                    (key, run.id, seq),
                ).fetchone()
                if not compare_event(None if found is None else bytes(found[0]), hashes, index):
                    return Done(EventConflict(seq), commit=False)
            now_us = engine.now_us(None)
            claim_token, claimed_at, wake = _schedule_columns(schedule, held, since, now_us)
            cursor = conn.execute(
                "UPDATE docket_runs SET status = ?, step = ?, checkpoint_seq = ?, "
                "event_seq = ?, updated_at_us = ?, finished_at_us = ?, run_json = ?, "
                "run_parts = ?, latest_checkpoint_type = ?, claim_attempts = 0, "
                "claim_abandons = 0, poisoned_at_us = NULL, poison_reason = NULL, claim_token = ?, "
                "claimed_at_us = ?, wake_at_us = ?, ended_at_us = ? "
                "WHERE tenant = ? AND run_id = ? AND checkpoint_seq = ?",
                (
                    str(run.status),
                    run.step,
                    run.checkpoint_seq,
                    run.event_seq,
                    to_micros(run.updated_at),
                    None if run.finished_at is None else to_micros(run.finished_at),
                    head,
                    len(pieces),
                    str(checkpoint_type),
                    claim_token,
                    claimed_at,
                    wake,
                    now_us if run.status.terminal else None,
                    key,
                    run.id,
                    expected,
                ),
            )
            if cursor.rowcount != 1:  # unreachable under the write lock; never publish blind
                return Done(StaleCheckpoint(), commit=False)
            store_pieces(conn, key, run.id, pieces, int(stored_parts))
            _record(conn, key, run.id, transition_id, valid.digest)
            _insert_events(conn, key, valid, hashes, new, now_us)
            notice = (key, run.id, run.graph_id, int(event_seq) + 1, run.event_seq)
            return Done(valid.run, announce=wake is not None and wake <= now_us, notice=notice)

        return await self._transition(job)

    async def _transition(self, job: _Job) -> TransitionResult:
        try:
            found = await self._engine.outcome(job)
        except RecordDecodeError as exc:  # a replay whose stored pieces are incomplete
            return Permanent(f"the stored run document cannot be read: {exc}")
        if not isinstance(found, bytes):  # a fresh commit's run, or a refusal
            return found
        try:
            return run_from_json(found)
        except ValueError as exc:  # only a replay answers stored bytes; they are corrupt
            return Permanent(f"the stored run document cannot be read: {exc}")


# -- statements ---------------------------------------------------------------------------------


def _recorded(
    conn: sqlite3.Connection, key: str, run_id: str, transition_id: str
) -> Mapping[str, str]:
    """The digest committed under ``transition_id`` for this run, as ``check_replay`` wants."""
    row = conn.execute(
        "SELECT digest FROM docket_transitions "
        "WHERE tenant = ? AND run_id = ? AND transition_id = ?",
        (key, run_id, transition_id),
    ).fetchone()
    return {} if row is None else {transition_id: str(row[0])}


def _record(
    conn: sqlite3.Connection, key: str, run_id: str, transition_id: str, digest: str
) -> None:
    conn.execute(
        "INSERT INTO docket_transitions (tenant, run_id, transition_id, digest) "
        "VALUES (?, ?, ?, ?)",
        (key, run_id, transition_id, digest),
    )


def _content_hashes(valid: ValidTransition) -> ValidTransition:
    """``valid`` with each event's canonical content replaced by its SHA-256.

    The store keeps the digest of an event's content rather than a second copy of it;
    comparing digests with the shared ``compare_event`` is comparing contents.
    """
    return attrs.evolve(
        valid,
        event_contents=tuple(hashlib.sha256(c).digest() for c in valid.event_contents),
    )


def _insert_events(
    conn: sqlite3.Connection,
    key: str,
    valid: ValidTransition,
    hashes: ValidTransition,
    indices: Sequence[int],
    written_us: int,
) -> None:
    conn.executemany(
        "INSERT INTO docket_events "
        "(tenant, run_id, seq, event_json, content_sha256, written_at_us) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [
            (
                key,
                valid.run.id,
                valid.events[i].seq,
                valid.event_json[i],
                hashes.event_contents[i],
                written_us,
            )
            for i in indices
        ],
    )


def _schedule_columns(
    schedule: Schedule, held: object, since: object, now_us: int
) -> tuple[object, int | None, int | None]:
    """``(claim_token, claimed_at_us, wake_at_us)`` after a commit with ``schedule``."""
    if isinstance(schedule, RetainClaim):
        # the commit is liveness: a retained claim is as fresh as now, and never older
        claimed_at = now_us if not isinstance(since, int) else max(since, now_us)
        return held, claimed_at, None
    match schedule.wake:
        case Immediate():
            return None, None, now_us
        case At(wake_at=moment):
            return None, None, to_micros(moment)
        case External() | Terminal():
            return None, None, None
    raise AssertionError(f"unvalidated schedule {schedule!r}")  # the validator rejects it


__all__ = ["SQLiteTransitionStore"]
