"""The transition store (``TransitionStore``, ``ChainedCommits``, ``ClaimedStarts``) of
``PostgresBackend``: the three atomic writes of run state.

* **The shared rules.** Transitions run the shared validator first and send the
  canonical bytes it returns, one function call per write (:mod:`docket_postgres._writes`,
  which also groups them). Run rows are locked (``FOR UPDATE``) while a function decides,
  so concurrent writers of one run serialize in the database, whether they are tasks of
  one process or workers on other machines.
* **Refusals named here.** The function writes only if every post-lookup rule holds
  (no recorded transition id, identity, fences, event sequence discipline, identical
  re-sent events); otherwise it writes nothing and answers the facts it read under the
  lock, and ``check_replay``, ``check_identity``, the fences, ``split_events`` and
  ``compare_event`` name the error in the normative order, here in Python.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime

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
from docket.records import DEFAULT_QUEUE, Event, OwnerScope, Run, run_from_json
from docket.values import utc
from docket_postgres._engine import Engine, storable, tenant_key
from docket_postgres._writes import (
    COMMIT_STATEMENT,
    INITIALIZE_QUEUED_STATEMENT,
    INITIALIZE_STATEMENT,
    WriteArgs,
    grouping,
    send_write,
)


def _schedule_args(schedule: Schedule) -> tuple[str, datetime | None]:
    """``(p_schedule, p_wake_at)`` of the commit function."""
    if isinstance(schedule, RetainClaim):
        return "retain", None
    match schedule.wake:
        case Immediate():
            return "immediate", None
        case At(wake_at=moment):
            return "at", utc(moment)
        case External():
            return "external", None
        case Terminal():
            return "terminal", None
    raise AssertionError(f"unvalidated schedule {schedule!r}")  # the validator rejects it


def _stored(data: object, run_id: str) -> Run | Permanent:
    """The stored run a replay answers."""
    if not isinstance(data, bytes | bytearray | memoryview):
        return Permanent(f"the stored run {run_id!r} vanished during a replay")
    try:
        return run_from_json(bytes(data))
    except ValueError as exc:
        return Permanent(f"the stored run document {run_id!r} cannot be read: {exc}")


class PostgresTransitions(ValidatedTransitions):
    """``TransitionStore`` (with ``ChainedCommits`` and ``ClaimedStarts``) over one
    backend's :class:`~docket_postgres._engine.Engine`. ``commit_lanes`` statements of
    each kind go at once before further writes are grouped (0: every write alone)."""

    def __init__(self, engine: Engine, commit_lanes: int) -> None:
        self._engine = engine
        self._group = grouping(engine, COMMIT_STATEMENT, commit_lanes)
        self._init_group = grouping(engine, INITIALIZE_STATEMENT, commit_lanes)
        self._queued_init_group = grouping(engine, INITIALIZE_QUEUED_STATEMENT, commit_lanes)

    @property
    def limits(self) -> Limits:
        return self._engine.limits

    async def drain(self) -> None:
        """Wait until every write queued for a group statement has been sent."""
        for group in (self._group, self._init_group, self._queued_init_group):
            if group is not None:
                await group.drain()

    # -- starts ---------------------------------------------------------------------------------

    async def _publish_start(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidTransition
    ) -> TransitionResult:
        key = tenant_key(owner)
        run = valid.run
        if not storable(key, run.id, run.graph_id, run.graph_hash, proposal.transition_id):
            return Permanent("PostgreSQL text cannot hold NUL characters in ids")
        engine = self._engine
        hashes = [hashlib.sha256(c).digest() for c in valid.event_contents]
        args: WriteArgs = (
            key,
            run.id,
            proposal.transition_id,
            valid.digest,
            run.graph_id,
            run.graph_hash,
            str(run.status),
            run.step,
            run.checkpoint_seq,
            run.event_seq,
            run.started_at,
            run.updated_at,
            run.finished_at,
            valid.run_json,
            str(proposal.checkpoint_type),
            utc(proposal.wake_at),
            valid.claim_token,
        )
        statement, group = INITIALIZE_STATEMENT, self._init_group
        if valid.queue != DEFAULT_QUEUE or valid.priority != 0:
            # Feature.QUEUES (schema 9); a plain start sends what it always sent
            statement, group = INITIALIZE_QUEUED_STATEMENT, self._queued_init_group
            args = (*args, valid.queue, valid.priority)
        events = ([e.seq for e in valid.events], list(valid.event_json), hashes)
        args = (*args, engine.given(None), *events)
        if group is None:
            answer = await send_write(engine, statement, args)
        else:
            answer = await group.submit(args)
        if not isinstance(answer, tuple):
            return answer
        outcome, digest, stored_json, announced = answer
        if outcome == "written":
            engine.announced(announced)
            return valid.run  # what was just stored, checked durable: no decode
        if outcome == "no_graph":
            return NotFound("graph")
        recorded = {proposal.transition_id: str(digest)} if digest is not None else {}
        replay = check_replay(recorded, proposal.transition_id, valid.digest)
        if isinstance(replay, Replay):
            return _stored(stored_json, run.id)
        return replay or Conflict(f"run {run.id!r} already exists")

    # -- commits --------------------------------------------------------------------------------

    async def commit_claimed_chain(
        self, owner: OwnerScope, commits: Sequence[tuple[ClaimedProposal, Sequence[Event]]]
    ) -> list[TransitionResult]:
        """``ChainedCommits``: commits submitted in one turn go in one ``commit_runs``
        statement, in order, which (schema version 4) applies a run's later writes set-wise
        behind its first."""
        return await commit_claimed_in_order(self, owner, commits)

    async def _publish_commit(self, owner: OwnerScope, valid: ValidTransition) -> TransitionResult:
        transition_id, token = valid.transition_id, valid.claim_token
        expected, schedule = valid.expected_checkpoint_seq, valid.schedule
        checkpoint_type = valid.checkpoint_type
        assert expected is not None and schedule is not None  # a commit carries both
        key = tenant_key(owner)
        run = valid.run
        if not storable(key, run.id, transition_id, token):
            return Permanent("PostgreSQL text cannot hold NUL characters in ids")
        engine = self._engine
        hashes = tuple(hashlib.sha256(c).digest() for c in valid.event_contents)
        schedule_name, wake_at = _schedule_args(schedule)
        args: WriteArgs = (
            key,
            run.id,
            transition_id,
            valid.digest,
            run.graph_id,
            run.graph_hash,
            run.started_at,
            expected,
            token is not None,
            token,
            str(run.status),
            run.step,
            run.checkpoint_seq,
            run.event_seq,
            run.updated_at,
            run.finished_at,
            valid.run_json,
            str(checkpoint_type),
            schedule_name,
            wake_at,
            engine.given(None),
            [e.seq for e in valid.events],
            list(valid.event_json),
            list(hashes),
        )
        if self._group is None:
            answer = await send_write(engine, COMMIT_STATEMENT, args)
        else:
            answer = await self._group.submit(args)
        if not isinstance(answer, tuple):
            return answer
        (
            outcome,
            digest,
            graph_id,
            graph_hash,
            started_at,
            checkpoint_seq,
            held,
            event_seq,
            stored,
            stored_json,
            announced,
        ) = answer
        if outcome == "written":
            engine.announced(announced)
            return valid.run  # what was just stored, checked durable: no decode
        if outcome == "not_found":
            return NotFound()
        # Refused: nothing was written. Name the error with the shared rules, in order.
        recorded = {transition_id: str(digest)} if digest is not None else {}
        replay = check_replay(recorded, transition_id, valid.digest)
        if isinstance(replay, Replay):
            return _stored(stored_json, run.id)
        if replay is not None:
            return replay
        identity = Run(  # the stored identity, from its columns (no document decode)
            id=run.id,
            graph_id=str(graph_id),
            graph_hash=str(graph_hash),
            status=run.status,
            started_at=utc(started_at),
            updated_at=utc(started_at),
        )
        broken = check_identity(identity, run)
        if broken is not None:
            return broken
        if int(checkpoint_seq) != expected or (token is not None and not held):
            return StaleCheckpoint()
        split = split_events(int(event_seq), valid)
        if not isinstance(split, tuple):
            return split
        _, old = split
        by_hash = attrs.evolve(valid, event_contents=hashes)
        found: list[bytes | None] = [None if s is None else bytes(s) for s in stored or []]
        for index in old:
            if not compare_event(found[index], by_hash, index):
                return EventConflict(valid.events[index].seq)
        return Permanent(
            f"docket-postgres refused a commit of run {run.id!r} that the shared rules accept "
            "(please report this bug)"
        )
