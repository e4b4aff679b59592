"""``reopen_failed_run``: the pure mutation behind an operator's retry of a failed run."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import attrs
import pytest

from docket.contract import Immediate, StaleCheckpoint
from docket.core import Dispatch, Park, ParkReason, advance, cancel_run, unclaimed_proposal
from docket.core.errors import InvalidInput, NotRetryable, TerminalRun, UnusableRun
from docket.core.finish import AttemptFailure, superstep_failure
from docket.core.moment import Moment
from docket.core.reopen import MAX_REASON_CHARS, reopen_failed_run
from docket.records import TENANTLESS, CheckpointType, EventType, RunStatus, run_problems
from tests.core import fixtures as fx
from tests.core.helpers import inline


def test_a_failed_run_reopens_at_its_last_checkpoint_with_a_fresh_budget() -> None:
    result = inline(fx.parallel_failure())
    failed = result.run
    assert failed.failure is not None
    now = failed.updated_at + timedelta(seconds=5)
    moment = reopen_failed_run(failed, reason="fixed it", now=now)
    assert not isinstance(moment, Exception)
    run = moment.run
    assert run_problems(run) == []
    assert (run.status, run.failure, run.finished_at) == (RunStatus.RUNNING, None, None)
    assert run.channels == failed.channels and run.step == failed.step
    assert run.changed_channels == failed.changed_channels
    assert run.checkpoint_seq == failed.checkpoint_seq + 1 and run.updated_at == now
    assert moment.checkpoint_type is CheckpointType.RETRY_SCHEDULED
    assert moment.disposition == Park(Immediate(), ParkReason.RUN_RETRIED)
    retried, mark = moment.events
    assert retried.type is EventType.RUN_RETRIED and retried.step == failed.step
    assert retried.payload["reason"] == "fixed it"
    assert retried.payload["failure"] == {
        "code": failed.failure.code,
        "message": failed.failure.message,
        "node_id": failed.failure.node_id,
        "details": failed.failure.details,
    }
    assert mark.type is EventType.CHECKPOINT_COMMITTED
    assert mark.metadata["park_reason"] == "run_retried"

    # the sibling that completed beside the failing node kept its write on the failed
    # run and keeps it reopened; only the failing node is planned again, at attempt 1
    ok_task = f"{failed.id}:{failed.step}:ok_node"
    assert [(w.task_id, w.value) for w in failed.pending_writes] == [(ok_task, {"ok_out": "ok"})]
    assert run.pending_writes == failed.pending_writes
    assert (run.active_tasks, run.timers) == ({}, {})
    step = advance(result.runtime, run, now=now)
    assert isinstance(step, Dispatch) and not step.resumed
    assert [(a.node_id, a.attempt) for a in step.activations] == [("failing_node", 1)]
    assert [a.task_id for a in step.activations] == [f"{failed.id}:{failed.step}:failing_node"]
    # a store accepts it; a second proposal computed from the same failed checkpoint
    # (another operator) loses the fence and changes nothing
    backend = result.backend
    assert backend is not None

    async def commit_twice() -> None:
        first = unclaimed_proposal(moment, transition_id="t-one")
        stored = await backend.transitions.commit_unclaimed(
            TENANTLESS, failed.checkpoint_seq, first, moment.events
        )
        assert stored == run
        other = reopen_failed_run(failed, reason="me too", now=now)
        assert not isinstance(other, Exception)
        second = unclaimed_proposal(other, transition_id="t-two")
        lost = await backend.transitions.commit_unclaimed(
            TENANTLESS, failed.checkpoint_seq, second, other.events
        )
        assert isinstance(lost, StaleCheckpoint)
        assert await backend.runs.fetch_run(TENANTLESS, failed.id) == run
        # and re-evaluated on what is now committed, the mutation says why
        assert isinstance(reopen_failed_run(run, reason="me too", now=now), NotRetryable)

    asyncio.run(commit_twice())


def test_only_a_failed_run_reopens() -> None:
    failed = inline(fx.parallel_failure()).run
    now = failed.updated_at
    done = inline(fx.minimal_linear(), {"value": "v"}).run
    assert done.status is RunStatus.DONE
    refused = reopen_failed_run(done, reason=None, now=now)
    assert isinstance(refused, TerminalRun) and "done" in refused.message
    running = attrs.evolve(failed, status=RunStatus.RUNNING, failure=None, finished_at=None)
    cancelled = cancel_run(running, now=now)
    assert not isinstance(cancelled, Exception) and hasattr(cancelled, "run")
    assert isinstance(reopen_failed_run(cancelled.run, reason=None, now=now), TerminalRun)
    not_failed = reopen_failed_run(running, reason=None, now=now)
    assert isinstance(not_failed, NotRetryable)
    assert not_failed.details == {"status": "running"}
    created = attrs.evolve(running, status=RunStatus.CREATED)
    assert isinstance(reopen_failed_run(created, reason=None, now=now), UnusableRun)
    waiting = attrs.evolve(running, status=RunStatus.WAITING)
    assert isinstance(reopen_failed_run(waiting, reason=None, now=now), NotRetryable)


@pytest.mark.parametrize("reason", ["", " \n", "x" * (MAX_REASON_CHARS + 1), "a\x00b", "\ud800", 7])
def test_a_bad_reason_is_invalid_input(reason: object) -> None:
    failed = inline(fx.parallel_failure()).run
    # a reason of the wrong type (7) is part of what the edge must refuse
    refused = reopen_failed_run(failed, reason=reason, now=failed.updated_at)  # type: ignore[arg-type]
    assert isinstance(refused, InvalidInput) and refused.reasons


def test_a_reason_is_optional() -> None:
    failed = inline(fx.parallel_failure()).run
    moment = reopen_failed_run(failed, reason=None, now=failed.updated_at)
    assert not isinstance(moment, Exception)
    assert moment.events[0].payload["reason"] is None


def test_a_failed_nodes_own_write_is_never_kept() -> None:
    # parked: steady finished (pending write), flaky waits for its second attempt
    parked = inline(fx.parallel_retry(backoff_ms=5_000), commit_to=None).checkpoints[1].run
    (steady,) = parked.pending_writes
    now = parked.updated_at

    def failing(node_id: str) -> AttemptFailure:
        return AttemptFailure(node_id=node_id, task_id=f"t:{node_id}", attempt=1, reason="x")

    # flaky failed for good: steady's result stays for a retry
    assert superstep_failure(parked, (), [failing("flaky")], now).run.pending_writes == (steady,)
    # the barrier rejected steady's write itself: it must run again, so nothing is kept
    assert superstep_failure(parked, (), [failing("steady")], now).run.pending_writes == ()


def test_writes_covering_every_planned_node_fail_the_reopened_run() -> None:
    result = inline(fx.parallel_failure())
    reopened = reopen_failed_run(result.run, reason=None, now=result.run.updated_at)
    assert not isinstance(reopened, Exception)
    (ok,) = reopened.run.pending_writes
    failing = attrs.evolve(ok, node_id="failing_node", task_id=ok.task_id.replace("ok", "failing"))
    both = attrs.evolve(reopened.run, pending_writes=(failing, ok))
    assert run_problems(both) == []
    step = advance(result.runtime, both, now=both.updated_at)
    assert isinstance(step, Moment) and step.run.failure is not None
    assert step.run.failure.code == "invalid_run" and step.run.pending_writes == ()
