"""Every proposal the core makes is accepted by a real transition store (runtime-spec §12,
case 44, and the "every proposal passes the shared validator" bar of issue 4)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import attrs
import pytest

from docket.contract.capabilities import Limits
from docket.contract.errors import EventConflict, StaleCheckpoint
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import ClaimBatch, ClaimPolicy, EventListQuery
from docket.contract.validate import ValidTransition, validate_commit_claimed
from docket.core import Dispatch, Moment, advance, claimed_proposal, settle
from docket.records import (
    TENANTLESS,
    Event,
    EventPage,
    Run,
    RunInfo,
    RunStatus,
    event_to_json,
    run_to_json,
)
from docket.runtime.execute import execute
from docket.testing import SequentialIds
from tests.core import fixtures as fx
from tests.core.helpers import inline, resolve


def _stored_events(backend: MemoryBackend, run_id: str) -> list[bytes]:
    page = asyncio.run(backend.events.list_events(TENANTLESS, run_id, EventListQuery(limit=1000)))
    assert isinstance(page, EventPage)
    return [event_to_json(e) for e in page.events]


def _stored_run(backend: MemoryBackend, run_id: str) -> bytes:
    run = asyncio.run(backend.runs.fetch_run(TENANTLESS, run_id))
    assert isinstance(run, Run)
    return run_to_json(run)


@pytest.mark.parametrize("name", sorted(fx.FIXTURES))
def test_every_fixture_commits_through_the_memory_backend(name: str) -> None:
    factory, given, answer = fx.FIXTURES[name]
    graph = factory()
    result = inline(graph, given, max_supersteps=40)  # validate=True, commit_to=True
    history = [result]
    while answer is not None and result.run.status is RunStatus.WAITING:
        (interrupt_id,) = [i for i, s in result.run.interrupts.items() if s.resolved_at is None]
        result = resolve(graph, result, interrupt_id, answer, max_supersteps=40)
        history.append(result)
    assert result.run.status.terminal, (name, result.run.status)
    backend = result.backend
    assert backend is not None
    assert _stored_run(backend, result.run.id) == run_to_json(result.run)
    ours = [event_to_json(e) for h in history for e in h.events]
    assert _stored_events(backend, result.run.id) == ours
    info = asyncio.run(backend.runs.inspect_run(TENANTLESS, result.run.id))
    assert isinstance(info, RunInfo)
    assert (info.wake_at, info.claimed_at) == (None, None)


def _claimed_run(backend: MemoryBackend) -> tuple[Run, str, Moment]:
    """A run initialized in ``backend`` and claimed: the run, the token, its next moment."""
    result = inline(fx.minimal_linear(), {"value": "v"}, max_steps=0, commit_to=backend)
    rtg = result.runtime
    policy = ClaimPolicy(
        limit=1, orphan_ttl=timedelta(minutes=5), max_claim_attempts=10, now=result.run.updated_at
    )
    batch = asyncio.run(backend.runs.claim_due(policy))
    assert isinstance(batch, ClaimBatch) and len(batch.leases) == 1
    step = advance(rtg, result.run, now=result.run.updated_at)
    assert isinstance(step, Dispatch)
    outcomes = asyncio.run(execute(rtg, step.activations))
    moment = settle(rtg, step, outcomes, now=result.run.updated_at, ids=SequentialIds())
    return result.run, batch.leases[0].claim_token, moment


def test_a_wrong_token_is_stale_and_changes_nothing() -> None:
    backend = MemoryBackend()
    before, _token, moment = _claimed_run(backend)
    proposal = claimed_proposal(moment, before.checkpoint_seq, "not-the-token", transition_id="t1")
    answer = asyncio.run(backend.transitions.commit_claimed(TENANTLESS, proposal, moment.events))
    assert isinstance(answer, StaleCheckpoint)
    assert _stored_run(backend, before.id) == run_to_json(before)
    assert len(_stored_events(backend, before.id)) == before.event_seq


def test_conflicting_event_content_is_rejected_and_changes_nothing() -> None:
    backend = MemoryBackend()
    before, token, moment = _claimed_run(backend)
    earlier = asyncio.run(backend.events.fetch_event(TENANTLESS, before.id, 1))
    assert isinstance(earlier, Event)
    forged = attrs.evolve(earlier, payload={"inputs": ["forged"]})
    proposal = claimed_proposal(moment, before.checkpoint_seq, token, transition_id="t1")
    answer = asyncio.run(
        backend.transitions.commit_claimed(TENANTLESS, proposal, (forged, *moment.events))
    )
    assert isinstance(answer, EventConflict) and answer.seq == 1
    assert _stored_run(backend, before.id) == run_to_json(before)
    for _ in range(2):  # the real commit, then its replay (same transition id, same content)
        accepted = asyncio.run(
            backend.transitions.commit_claimed(TENANTLESS, proposal, moment.events)
        )
        assert isinstance(accepted, Run)
        assert run_to_json(accepted) == run_to_json(moment.run)


def test_the_validator_accepts_a_claimed_barrier() -> None:
    backend = MemoryBackend()
    before, token, moment = _claimed_run(backend)
    proposal = claimed_proposal(moment, before.checkpoint_seq, token, transition_id="t1")
    checked = validate_commit_claimed(TENANTLESS, proposal, moment.events, Limits())
    assert isinstance(checked, ValidTransition)
