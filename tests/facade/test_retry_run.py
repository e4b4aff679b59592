"""``Docket.retry_run``: reopening a failed run, on the reference backend (manual clock).

A three-node chain whose middle node raises while the application says it is broken:
the run fails, the "fix" is made, ``retry_run`` reopens it, and it finishes with the
first node run exactly once and the middle one back at attempt 1 (a fresh budget).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from docket import Docket, GraphBuilder, NodeRegistry, SyncDocket, errors
from docket.clock import ManualClock
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.errors import TransitionResult
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import ClaimPolicy, UnclaimedProposal
from docket.graph.model import FINISH, START
from docket.graph.nodes import NodeContext, NodeState, RetryPolicy
from docket.graph.schema import S
from docket.records import Event, EventType, OwnerScope, Run, RunStatus
from docket.values import JSONDict
from tests.runtime.helpers import T0, check_events, later, memory_docket

NODES = NodeRegistry()


def _calls(ctx: NodeContext) -> list[tuple[str, int]]:
    calls = ctx.application["calls"]
    assert isinstance(calls, list)
    return calls


@NODES.node("first")
def first(state: NodeState, ctx: NodeContext) -> JSONDict:
    _calls(ctx).append((ctx.node_id, ctx.attempt))
    return {"a": "first"}


@NODES.node("second")
def second(state: NodeState, ctx: NodeContext) -> JSONDict:
    _calls(ctx).append((ctx.node_id, ctx.attempt))
    if _broken(ctx.application):
        raise RuntimeError("the second node is broken")
    return {"b": f"{state['a']}+second"}


@NODES.node("third")
def third(state: NodeState, ctx: NodeContext) -> JSONDict:
    _calls(ctx).append((ctx.node_id, ctx.attempt))
    return {"c": f"{state['b']}+third"}


@NODES.node("left")
def left(state: NodeState, ctx: NodeContext) -> JSONDict:
    _calls(ctx).append((ctx.node_id, ctx.attempt))
    return {"l": f"{state['a']}+left"}


@NODES.node("joined")
def joined(state: NodeState, ctx: NodeContext) -> JSONDict:
    _calls(ctx).append((ctx.node_id, ctx.attempt))
    return {"c": f"{state['b']}&{state['l']}"}


def fan_out() -> Any:
    """``first`` fans out to ``left`` and ``second`` (one superstep), which join."""
    return (
        GraphBuilder("retry_fan_out")
        .field("a", S.string())
        .field("b", S.string())
        .field("l", S.string())
        .field("c", S.string())
        .node("first", "first")
        .node("left", "left")
        .node("second", "second", retry=RetryPolicy(2, 0))
        .node("joined", "joined")
        .edge("to_first", START, "first")
        .edge("to_left", "first", "left")
        .edge("to_second", "first", "second")
        .fan_in("join", ["left", "second"], "joined")
        .edge("done", "joined", FINISH)
        .output("c")
        .build()
    )


def chain() -> Any:
    return (
        GraphBuilder("retry_chain")
        .field("a", S.string())
        .field("b", S.string())
        .field("c", S.string())
        .node("first", "first")
        .node("second", "second", retry=RetryPolicy(2, 0))
        .node("third", "third")
        .edge("to_first", START, "first")
        .edge("to_second", "first", "second")
        .edge("to_third", "second", "third")
        .edge("done", "third", FINISH)
        .output("c")
        .build()
    )


def _app() -> dict[str, Any]:
    # the Docket copies its context: the flag lives in a shared set, "broken" until fixed
    return {"calls": [], "flags": {"broken"}}


def _broken(app: Any) -> bool:
    return "broken" in app["flags"]


def _fix(app: dict[str, Any]) -> None:
    app["flags"].discard("broken")


async def _settle(docket: Docket, run_id: str) -> Run:
    """Drain until the run stops moving (retry timers here have no backoff)."""
    for _ in range(20):
        await docket.drain_due()
        run = await docket.fetch_run(run_id)
        if run.status is not RunStatus.RUNNING:
            return run
    raise AssertionError(f"run {run_id} never settled")


async def _failed(docket: Docket, app: dict[str, Any], run_id: str = "r") -> Run:
    ref = await docket.save_graph(chain())
    await docket.start_run(ref, run_id=run_id)
    failed = await _settle(docket, run_id)
    assert failed.status is RunStatus.FAILED and failed.failure is not None
    assert app["calls"] == [("first", 1), ("second", 1), ("second", 2)]
    return failed


def test_a_failed_run_is_reopened_and_finishes_without_rerunning_committed_nodes() -> None:
    async def scenario() -> None:
        app = _app()
        docket, _, _ = memory_docket(nodes=NODES, context=app)
        async with docket:
            failed = await _failed(docket, app)
            _fix(app)  # the fix
            reopened = await docket.retry_run("r", reason="fixed the second node")
            assert reopened.status is RunStatus.RUNNING
            assert (reopened.failure, reopened.finished_at) == (None, None)
            assert reopened.checkpoint_seq == failed.checkpoint_seq + 1
            assert reopened.channels == failed.channels and reopened.step == failed.step
            info = await docket.inspect_run("r")
            assert info.wake_at is not None and str(info.latest_checkpoint_type) == (
                "retry_scheduled"
            )
            done = await _settle(docket, "r")
            assert done.status is RunStatus.DONE
            assert done.output == {"c": "first+second+third"}
            assert app["calls"] == [
                ("first", 1),
                ("second", 1),
                ("second", 2),
                ("second", 1),  # a fresh attempt budget
                ("third", 1),
            ]
            events = [e async for e in _events(docket, "r")]
            check_events(done, events)
            (retried,) = [e for e in events if e.type is EventType.RUN_RETRIED]
            assert retried.payload["reason"] == "fixed the second node"
            cleared = retried.payload["failure"]
            assert isinstance(cleared, dict)
            assert failed.failure is not None and cleared["code"] == failed.failure.code
            assert cleared["node_id"] == "second"
            assert retried.step == failed.step and retried.node_id == "second"

    asyncio.run(scenario())


def test_a_retry_does_not_rerun_the_sibling_that_completed_beside_the_failed_node() -> None:
    async def scenario() -> None:
        app = _app()
        docket, _, _ = memory_docket(nodes=NODES, context=app)
        async with docket:
            ref = await docket.save_graph(fan_out())
            await docket.start_run(ref, run_id="f")
            failed = await _settle(docket, "f")
            assert failed.status is RunStatus.FAILED and failed.failure is not None
            assert sorted(app["calls"]) == [("first", 1), ("left", 1), ("second", 1), ("second", 2)]
            # nothing of the failed superstep committed, but left's result is kept
            assert "state:l" not in failed.channels
            assert [(w.node_id, w.value) for w in failed.pending_writes] == [
                ("left", {"l": "first+left"})
            ]
            _fix(app)
            await docket.retry_run("f", reason="fixed the second node")
            app["calls"].clear()
            done = await _settle(docket, "f")
            assert done.status is RunStatus.DONE
            assert done.output == {"c": "first+second&first+left"}
            # second back at attempt 1 (a fresh budget); left does not run again
            assert app["calls"] == [("second", 1), ("joined", 1)]
            events = [e async for e in _events(docket, "f")]
            check_events(done, events)
            completed = [e.node_id for e in events if e.type is EventType.NODE_COMPLETED]
            assert completed.count("left") == 1 and completed.count("second") == 1

    asyncio.run(scenario())


async def _events(docket: Docket, run_id: str) -> Any:
    after = 0
    while True:
        page = await docket.list_events(run_id, after_seq=after, limit=100)
        for event in page.events:
            yield event
        if not page.has_more:
            return
        after = page.next_after_seq


def test_refusals_are_typed_and_write_nothing() -> None:
    async def scenario() -> None:
        app = _app()
        docket, _, _ = memory_docket(nodes=NODES, context=app)
        async with docket:
            failed = await _failed(docket, app)
            for bad in ("", "   ", "x" * 2001, "nul\x00"):
                with pytest.raises(errors.InvalidInput):
                    await docket.retry_run("r", reason=bad)
            assert await docket.fetch_run("r") == failed
            with pytest.raises(errors.NotFound):
                await docket.retry_run("nope")

            await docket.retry_run("r")  # the first operator (no reason)
            reopened = await docket.fetch_run("r")
            with pytest.raises(errors.NotRetryable, match="nothing to retry"):
                await docket.retry_run("r", reason="me too")  # the second operator
            assert await docket.fetch_run("r") == reopened

            _fix(app)
            assert (await _settle(docket, "r")).status is RunStatus.DONE
            with pytest.raises(errors.InactiveRun):
                await docket.retry_run("r")

            ref = await docket.save_graph(chain())
            await docket.start_run(ref, run_id="c")
            with pytest.raises(errors.NotRetryable, match="not poisoned"):
                await docket.retry_run("c")  # running and healthy
            await docket.cancel_run("c")
            with pytest.raises(errors.InactiveRun):
                await docket.retry_run("c")

    asyncio.run(scenario())


class _TwoSignals(MemoryBackend):
    """The reference backend, holding its first two ``commit_unclaimed`` calls (once
    armed) until both have arrived: two operators who both read the failed checkpoint
    propose against it before either commits. Answers are recorded."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.gate = asyncio.Barrier(2)
        self.armed = False
        self.answers: list[object] = []

    async def commit_unclaimed(
        self,
        owner: OwnerScope,
        expected_checkpoint_seq: int,
        proposal: UnclaimedProposal,
        events: Sequence[Event],
    ) -> TransitionResult:
        if self.armed and len(self.answers) < 2:
            await self.gate.wait()
        answer = await super().commit_unclaimed(owner, expected_checkpoint_seq, proposal, events)
        self.answers.append(answer)
        return answer


def test_two_operators_racing_reopen_once_and_the_loser_is_told_why() -> None:
    async def scenario() -> None:
        app = _app()
        backend = _TwoSignals(clock=ManualClock(T0))
        docket, _, _ = memory_docket(backend=backend, nodes=NODES, context=app)
        async with docket:
            failed = await _failed(docket, app)
            backend.armed = True
            answers = await asyncio.gather(
                docket.retry_run("r", reason="one"),
                docket.retry_run("r", reason="two"),
                return_exceptions=True,
            )
            won = [a for a in answers if isinstance(a, Run)]
            lost = [a for a in answers if isinstance(a, BaseException)]
            assert len(won) == 1 and len(lost) == 1, answers
            assert isinstance(lost[0], errors.NotRetryable), lost
            # the loser reached the fence with the failed checkpoint and lost it there
            assert [type(a).__name__ for a in backend.answers] == ["Run", "StaleCheckpoint"]
            stored = await docket.fetch_run("r")
            assert stored == won[0] and stored.checkpoint_seq == failed.checkpoint_seq + 1
            events = [e async for e in _events(docket, "r")]
            assert len([e for e in events if e.type is EventType.RUN_RETRIED]) == 1
            check_events(stored, events)

    asyncio.run(scenario())


class _NoReopen(MemoryBackend):
    """A store written against the contract before reopening existed."""

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return Capabilities(
            limits=caps.limits,
            features=caps.features - {Feature.REOPEN_FAILED},
            name="old-store",
        )


def test_a_backend_without_the_feature_is_refused_before_anything_is_written() -> None:
    async def scenario() -> None:
        app = _app()
        backend = _NoReopen()
        docket, _, _ = memory_docket(backend=backend, nodes=NODES, context=app)
        async with docket:
            failed = await _failed(docket, app)
            with pytest.raises(errors.Unsupported, match="reopen_failed") as refused:
                await docket.retry_run("r", reason="fixed")
            assert refused.value.details == {"feature": "reopen_failed"}
            assert await docket.fetch_run("r") == failed
            assert (await docket.inspect_run("r")).wake_at is None

    asyncio.run(scenario())


def test_the_sync_docket_retries_a_failed_run() -> None:
    app = _app()
    with SyncDocket(MemoryBackend(), nodes=NODES, context=app) as sync:
        ref = sync.save_graph(chain())
        sync.start_run(ref, run_id="r")
        for _ in range(20):
            sync.drain_due()
            if sync.fetch_run("r").status is RunStatus.FAILED:
                break
        assert sync.fetch_run("r").status is RunStatus.FAILED
        _fix(app)
        assert sync.retry_run("r", reason="fixed").status is RunStatus.RUNNING
        with pytest.raises(errors.NotRetryable):
            sync.retry_run("r")


def test_retry_run_also_makes_a_poisoned_run_due_again_once() -> None:
    async def scenario() -> None:
        app = _app()
        _fix(app)
        docket, backend, clock = memory_docket(
            nodes=NODES, context=app, max_claim_attempts=1, claim_ttl=5
        )
        async with docket:
            ref = await docket.save_graph(chain())
            await docket.start_run(ref, run_id="p")
            policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=5), max_claim_attempts=1)
            await backend.runs.claim_due(policy)  # a worker that dies
            later(clock, 6)
            assert [p.run_id for p in (await docket.drain_due()).poisoned] == ["p"]
            before = await docket.fetch_run("p")
            again = await docket.retry_run("p", reason="restarted the workers")
            assert again == before  # the document is untouched; only operational state
            info = await docket.inspect_run("p")
            assert not info.poisoned and info.wake_at is not None
            with pytest.raises(errors.NotRetryable, match="not poisoned"):
                await docket.retry_run("p")  # a second operator
            assert (await _settle(docket, "p")).status is RunStatus.DONE

    asyncio.run(scenario())
