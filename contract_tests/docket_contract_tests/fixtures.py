"""Builders for graphs, runs, events, proposals and claims (ids namespaced by the case).

Defaults follow the Elixir suite: a new run is ``running`` with ``checkpoint_seq 1`` and
``event_seq 0``; claims use ``limit 1``, a 60 s TTL and 3 attempts; claimed proposals
``retain_claim`` with a ``step_committed`` checkpoint. Every proposal gets a fresh
``transition_id`` unless one is given.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from docket.contract import (
    ClaimedProposal,
    Conflict,
    Immediate,
    InitProposal,
    Lease,
    ReleaseClaim,
    RetainClaim,
    Schedule,
    UnclaimedProposal,
    Wake,
)
from docket.contract.validate import graph_document_id
from docket.records import (
    CheckpointType,
    Event,
    EventType,
    GraphRef,
    GraphVersion,
    OwnerScope,
    Run,
    RunFailure,
    RunStatus,
)
from docket.values import JSONDict, content_hash
from docket_contract_tests.kit import Kit


def junk(value: object) -> Any:
    """Mark a deliberately ill-typed argument (the kit feeds junk to check rejections)."""
    return value


def tid() -> str:
    """A fresh transition id."""
    return uuid.uuid4().hex


# -- graphs ---------------------------------------------------------------------------------


def graph_document(graph_id: str, variant: int = 0, pad: str = "") -> JSONDict:
    """A small graph envelope (``{"docket", "kind", "graph"}``) naming ``graph_id``.

    The store checks only the envelope's declared id and the content hash, so the inner
    document need not compile.
    """
    graph: JSONDict = {
        "id": graph_id,
        "schema_version": 1,
        "nodes": [{"id": "start", "impl": "noop"}, {"id": "finish", "impl": "noop"}],
        "edges": [{"from": "start", "to": "finish"}],
        "variant": variant,
    }
    if pad:
        graph["pad"] = pad
    return {"docket": 1, "kind": "graph", "graph": graph}


def graph_ref(document: JSONDict) -> GraphRef:
    graph_id = graph_document_id(document)
    assert isinstance(graph_id, str)
    return GraphRef(graph_id, content_hash(document))


async def save_graph(
    kit: Kit, owner: OwnerScope, label: str = "g", variant: int = 0, backend: Any = None
) -> GraphRef:
    """Publish a graph version in ``owner``'s scope; it must succeed."""
    document = graph_document(kit.name(label), variant)
    ref = graph_ref(document)
    saved = await (backend or kit.b).graphs.save_graph(owner, ref, document)
    version = kit.isa(saved, GraphVersion, f"save_graph({owner}, {ref})")
    kit.eq(version.ref, ref, "save_graph returns the saved ref")
    return ref


# -- runs and events ------------------------------------------------------------------------


def new_run(
    run_id: str,
    ref: GraphRef,
    at: datetime,
    *,
    checkpoint_seq: int = 1,
    event_seq: int = 0,
    status: RunStatus = RunStatus.RUNNING,
    input: JSONDict | None = None,
    metadata: JSONDict | None = None,
) -> Run:
    return Run(
        id=run_id,
        graph_id=ref.graph_id,
        graph_hash=ref.graph_hash,
        status=status,
        started_at=at,
        updated_at=at,
        input=dict(input) if input is not None else {"question": "why?", "n": 1},
        checkpoint_seq=checkpoint_seq,
        event_seq=event_seq,
        metadata=dict(metadata) if metadata is not None else {},
    )


def event(
    run_id: str,
    seq: int,
    at: datetime,
    *,
    type: EventType = EventType.CHECKPOINT_COMMITTED,
    step: int = 0,
    payload: JSONDict | None = None,
    metadata: JSONDict | None = None,
    node_id: str | None = None,
) -> Event:
    return Event(
        run_id=run_id,
        seq=seq,
        type=type,
        step=step,
        timestamp=at,
        node_id=node_id,
        payload=dict(payload) if payload is not None else {"seq": seq},
        metadata=dict(metadata) if metadata is not None else {},
    )


def events_for(run: Run, at: datetime, seqs: Sequence[int], **options: Any) -> list[Event]:
    return [event(run.id, seq, at, **options) for seq in seqs]


def successor(
    run: Run,
    at: datetime,
    *,
    new_events: int = 0,
    status: RunStatus | None = None,
    **changes: Any,
) -> Run:
    """The next committed value of ``run``: checkpoint + 1, ``new_events`` more events."""
    status = status or run.status
    finished = at if status.terminal else None
    extra: dict[str, Any] = {}
    if status is RunStatus.FAILED:
        extra["failure"] = RunFailure(code="boom", message="the node failed")
    if status is RunStatus.DONE:
        extra["output"] = {"answer": 42}
    return attrs.evolve(
        run,
        status=status,
        step=run.step + 1,
        checkpoint_seq=run.checkpoint_seq + 1,
        event_seq=run.event_seq + new_events,
        updated_at=at,
        finished_at=finished,
        **{**extra, **changes},
    )


WAKE_STATUS: dict[str, RunStatus] = {
    "Immediate": RunStatus.RUNNING,
    "At": RunStatus.RUNNING,
    "External": RunStatus.WAITING,
    "Terminal": RunStatus.DONE,
}


# -- proposals ------------------------------------------------------------------------------


def init_proposal(run: Run, wake_at: datetime, transition_id: str | None = None) -> InitProposal:
    return InitProposal(transition_id=transition_id or tid(), run=run, wake_at=wake_at)


def claimed(
    run: Run,
    token: str,
    *,
    schedule: Schedule | None = None,
    checkpoint_type: CheckpointType = CheckpointType.STEP_COMMITTED,
    transition_id: str | None = None,
    expected: int | None = None,
) -> ClaimedProposal:
    return ClaimedProposal(
        transition_id=transition_id or tid(),
        run=run,
        expected_checkpoint_seq=run.checkpoint_seq - 1 if expected is None else expected,
        claim_token=token,
        checkpoint_type=checkpoint_type,
        schedule=schedule if schedule is not None else RetainClaim(),
    )


def unclaimed(
    run: Run,
    *,
    wake: Wake | None = None,
    checkpoint_type: CheckpointType = CheckpointType.STEP_COMMITTED,
    transition_id: str | None = None,
) -> UnclaimedProposal:
    return UnclaimedProposal(
        transition_id=transition_id or tid(),
        run=run,
        checkpoint_type=checkpoint_type,
        schedule=ReleaseClaim(wake if wake is not None else Immediate()),
    )


# -- seeding --------------------------------------------------------------------------------


async def seed(
    kit: Kit,
    owner: OwnerScope,
    run_id: str | None = None,
    *,
    wake_at: datetime | None = None,
    started_at: datetime | None = None,
    events: int = 0,
    ref: GraphRef | None = None,
    input: JSONDict | None = None,
    backend: Any = None,
) -> Run:
    """Save a graph (unless ``ref``) and initialize one run; it must succeed."""
    store = backend or kit.b
    ref = ref or await save_graph(kit, owner, backend=store)
    run_id = run_id or kit.fresh("run")
    start = started_at or kit.t0
    run = new_run(run_id, ref, start, event_seq=events, input=input)
    evs = events_for(run, start, range(1, events + 1))
    result = await store.transitions.initialize(owner, init_proposal(run, wake_at or kit.t0), evs)
    if isinstance(result, Conflict):
        kit.fail(f"initialize({owner}, {run_id!r}) in a fresh store: {result}")
    stored = kit.isa(result, Run, f"initialize({owner}, {run_id!r})")
    kit.eq(stored, run, "initialize returns the proposed run")
    return run


async def seed_claimed(
    kit: Kit,
    owner: OwnerScope,
    run_id: str | None = None,
    *,
    now: datetime | None = None,
    events: int = 0,
    ttl: timedelta = timedelta(seconds=60),
) -> tuple[Run, Lease]:
    """A run, claimed at ``now`` (default ``t0``); the only due run of the case."""
    now = now or kit.t0
    run = await seed(kit, owner, run_id, wake_at=now, events=events)
    lease = await kit.claim_one(now, run.id, ttl=ttl)
    return run, lease


async def commit_claimed_ok(
    kit: Kit,
    owner: OwnerScope,
    proposal: ClaimedProposal,
    events: Sequence[Event] = (),
) -> Run:
    result = await kit.b.transitions.commit_claimed(owner, proposal, events)
    stored = kit.isa(result, Run, "commit_claimed")
    kit.eq(stored, proposal.run, "commit_claimed returns the proposed run")
    return stored


async def commit_unclaimed_ok(
    kit: Kit,
    owner: OwnerScope,
    proposal: UnclaimedProposal,
    events: Sequence[Event] = (),
) -> Run:
    result = await kit.b.transitions.commit_unclaimed(
        owner, proposal.run.checkpoint_seq - 1, proposal, events
    )
    stored = kit.isa(result, Run, "commit_unclaimed")
    kit.eq(stored, proposal.run, "commit_unclaimed returns the proposed run")
    return stored


__all__ = [
    "WAKE_STATUS",
    "claimed",
    "commit_claimed_ok",
    "commit_unclaimed_ok",
    "event",
    "events_for",
    "graph_document",
    "graph_ref",
    "init_proposal",
    "junk",
    "new_run",
    "save_graph",
    "seed",
    "seed_claimed",
    "successor",
    "tid",
    "unclaimed",
]
