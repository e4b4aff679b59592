"""``RedisTransitions``: the transition store (``TransitionStore``, ``ClaimedStarts``,
``ChainedCommits``) of a ``RedisBackend``.

**Validation in Python, decisions in Lua.** Every transition runs the shared validator
first and sends the canonical bytes it returned. The script (``lua/initialize.lua``,
``lua/commit.lua``) then looks the run up, checks the replay, the immutable identity,
the fences, the event sequence and re-sent event content — in the contract's order,
every check before the first write, because a Lua error does not roll back. A refused
transition answers a code; Python turns it into the contract's error with the shared
helpers (``check_replay``, ``check_identity``, ``split_events``), so messages are the
reference's.

Each script that writes also indexes what retention needs (when the events were
written, when a run finished) and publishes the commit notice of the feed
(:mod:`docket_redis._feed`). Commits and starts go through the engine's group commit;
a commit of a long document sends only the pieces that changed since the document this
backend last stored or read (:class:`~docket_redis._documents.KnownDocuments`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import attrs

from docket.contract import (
    At,
    ClaimedProposal,
    Conflict,
    EventConflict,
    External,
    Immediate,
    InitProposal,
    InvalidTransition,
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
    ValidTransition,
    check_identity,
    check_replay,
    split_events,
)
from docket.contract.writes import ValidatedTransitions
from docket.records import Event, OwnerScope, Run, RunStatus, run_from_json, tenant_id_of
from docket.values import from_micros, to_micros
from docket_redis._codec import code, encode_summary, text
from docket_redis._documents import long_document
from docket_redis._engine import Call, RedisEngine
from docket_redis._feed import notice_tail
from docket_redis.errors import StoreError
from docket_redis.keys import STATUS_ORDER, index_member


def _schedule_args(schedule: Schedule) -> tuple[str, str]:
    """``(kind, wake us)`` as ``commit.lua`` expects them."""
    if isinstance(schedule, RetainClaim):
        return "retain", ""
    match schedule.wake:
        case Immediate():
            return "immediate", ""
        case At(wake_at=moment):
            return "at", str(to_micros(moment))
        case External() | Terminal():
            return "none", ""
    raise AssertionError(f"unvalidated schedule {schedule!r}")  # the validator rejects it


def _event_args(valid: ValidTransition) -> list[str | bytes]:
    """``seq``, JSON and content digest of each event, as the scripts take them."""
    out: list[str | bytes] = []
    for index in range(len(valid.events)):
        out.append(str(valid.events[index].seq))
        out.append(valid.event_json[index])
        out.append(hashlib.sha256(valid.event_contents[index]).hexdigest())
    return out


class RedisTransitions(ValidatedTransitions):
    """The three atomic, all-or-nothing writes of run state, plus claimed starts and
    chained commits."""

    def __init__(self, engine: RedisEngine) -> None:
        self._engine = engine

    @property
    def limits(self) -> Limits:
        return self._engine.limits

    async def commit_claimed_chain(
        self, owner: OwnerScope, commits: Sequence[tuple[ClaimedProposal, Sequence[Event]]]
    ) -> list[TransitionResult]:
        """``ChainedCommits``: the group commit sends scripts queued in one turn as one
        pipeline, run in order."""
        return await commit_claimed_in_order(self, owner, commits)

    async def _publish_start(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidTransition
    ) -> TransitionResult:
        engine = self._engine
        ns = engine.ns
        scope = ns.scope(owner)
        run = valid.run
        token = valid.claim_token
        started = to_micros(run.started_at)
        # On a single server the script registers the scope and takes the listing order
        # itself (one call); a cluster keeps those keys on other slots, so ask first.
        folded = not engine.target.cluster
        try:
            order = scope.part if folded else str(await engine.register(scope, order=True))
            call: Call = (
                [
                    scope.graph(run.graph_id),
                    scope.run(run.id),
                    scope.transitions(run.id),
                    scope.events(run.id),
                    scope.event_index(run.id),
                    scope.ready,
                    scope.summaries,
                    scope.index,
                    scope.by_status(RunStatus.RUNNING),
                    scope.by_graph(run.graph_id),
                    scope.by_hash(run.graph_hash),
                    scope.claimed,
                    scope.written,
                    scope.commits_written(run.id),
                    scope.finished,
                    *((ns.registry, ns.order) if folded else ()),
                ],
                [
                    f"d:{run.graph_hash}",
                    proposal.transition_id,
                    valid.digest,
                    valid.run_json,
                    run.graph_id,
                    run.graph_hash,
                    run.status.value,
                    str(run.checkpoint_seq),
                    str(run.event_seq),
                    str(started),
                    str(to_micros(proposal.wake_at)),
                    engine.now_arg(None),
                    ns.channel,
                    index_member(started, run.id),
                    encode_summary(run),
                    run.id,
                    proposal.checkpoint_type.value,
                    order,
                    token or "",
                    str(len(valid.events)),
                    *_event_args(valid),
                    valid.queue,  # layout 5: the run's lane (lua/lanes.lua)
                    str(valid.priority),
                    ns.feed,
                    notice_tail(tenant_id_of(owner), run.id, run.graph_id, run.event_seq),
                ],
            )
            reply = await engine.grouped(engine.starts, "initialize", call)
        except StoreError as exc:
            return exc.outcome
        answer = code(reply)
        if answer == "OK":
            if folded:
                engine.registered.add(scope.part)
            if token is not None:  # its holder commits next: patch against this document
                pieces = long_document(valid.run_json)
                engine.documents.remember(scope.part, run.id, run.checkpoint_seq, pieces)
            return valid.run  # what was just stored, checked durable: no decode
        if answer == "NOT_FOUND_GRAPH":
            return NotFound("graph")
        if answer == "EXISTS":
            return Conflict(f"run {run.id!r} already exists")
        return _answer(answer, reply, proposal.transition_id, valid)

    async def _publish_commit(self, owner: OwnerScope, valid: ValidTransition) -> TransitionResult:
        transition_id, token = valid.transition_id, valid.claim_token
        expected, schedule = valid.expected_checkpoint_seq, valid.schedule
        checkpoint_type = valid.checkpoint_type
        assert expected is not None and schedule is not None  # a commit carries both
        engine = self._engine
        documents = engine.documents
        scope = engine.ns.scope(owner)
        run = valid.run
        kind, wake = _schedule_args(schedule)
        pieces = long_document(valid.run_json)
        patch = documents.patch(scope.part, run.id, expected, pieces)
        call: Call = (
            [
                scope.run(run.id),
                scope.transitions(run.id),
                scope.events(run.id),
                scope.event_index(run.id),
                scope.ready,
                scope.claimed,
                scope.summaries,
                *(scope.by_status(status) for status in STATUS_ORDER),
                scope.written,
                scope.commits_written(run.id),
                scope.finished,
            ],
            [
                transition_id,
                valid.digest,
                str(expected),
                token or "",
                run.graph_id,
                run.graph_hash,
                str(to_micros(run.started_at)),
                b"" if patch else valid.run_json,
                run.status.value,
                str(run.checkpoint_seq),
                str(run.event_seq),
                checkpoint_type.value,
                kind,
                wake,
                engine.now_arg(None),
                engine.ns.channel,
                index_member(to_micros(run.started_at), run.id),
                encode_summary(run),
                run.id,
                str(len(valid.events)),
                *_event_args(valid),
                *patch,
                engine.ns.feed,
                notice_tail(tenant_id_of(owner), run.id, run.graph_id, run.event_seq),
            ],
        )
        try:
            reply = await engine.grouped(engine.commits, "commit", call)
        except StoreError as exc:
            return exc.outcome
        answer = code(reply)
        if answer == "OK":
            if run.status.terminal:
                documents.forget(scope.part, run.id)
            else:
                documents.remember(scope.part, run.id, run.checkpoint_seq, pieces)
            return valid.run  # what was just stored, checked durable: no decode
        if answer == "REPATCH":  # the pieces it was sent against are not the stored ones
            documents.forget(scope.part, run.id)
            return await self._publish_commit(owner, valid)
        if answer == "NOT_FOUND":
            return NotFound()
        if answer == "STALE":
            return StaleCheckpoint()
        if answer == "EVENT_CONFLICT":
            return EventConflict(int(text(reply[1])))
        if answer == "IDENTITY":
            return _identity(reply, run)
        if answer == "SPLIT":
            split = split_events(int(text(reply[1])), valid)
            if isinstance(split, InvalidTransition):
                return split
            return Permanent(f"the store refused the event sequences of {split!r}")
        return _answer(answer, reply, transition_id, valid)


def _identity(reply: list[Any], run: Run) -> TransitionResult:
    """``commit.lua`` found a different stored identity: the contract's answer for it."""
    graph_id, graph_hash, started = reply[1:4]
    if graph_id is None or graph_hash is None or started is None:
        return Permanent(f"run {run.id!r} is stored without its identity")
    stored = attrs.evolve(
        run,
        graph_id=text(graph_id),
        graph_hash=text(graph_hash),
        started_at=from_micros(int(text(started))),
    )
    broken = check_identity(stored, run)
    return broken or Permanent("the store reported an identity change it does not have")


def _answer(
    answer: str, reply: list[Any], transition_id: str, valid: ValidTransition
) -> TransitionResult:
    """The answers both transition scripts share: replay, reused id, corruption."""
    if answer == "REPLAY":
        try:
            return run_from_json(reply[1])
        except (ValueError, TypeError, KeyError) as exc:
            return Permanent(f"the stored run document cannot be read: {exc}")
    if answer == "TX_CONFLICT":
        found = check_replay({transition_id: text(reply[1])}, transition_id, valid.digest)
        if isinstance(found, Conflict):
            return found
        return Permanent("the store reported a transition conflict it does not have")
    if answer == "CORRUPT":
        return Permanent(f"corrupt data in redis: {text(reply[1])}")
    return Permanent(f"unexpected script answer {reply!r}")
