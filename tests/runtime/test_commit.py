"""Commit discipline: an ambiguous commit is replayed with the same proposal; a signal
that loses the checkpoint race is read and evaluated again (bounded).

The backends here are the reference backend with one fault injected (the way the
contract kit's negative controls are built): the store itself stays real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import pytest

from docket import Docket, errors
from docket.contract.errors import Retryable, StaleCheckpoint, TransitionResult
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import ClaimedProposal, InitProposal, UnclaimedProposal
from docket.records import Event, OwnerScope, Run, RunStatus
from tests.core import fixtures as fx
from tests.runtime.helpers import check_events, memory_docket


class FaultyBackend(MemoryBackend):
    """Records every transition id it is sent; ``faults`` decide, per call, what to do:
    ``"retryable"`` answers Retryable without applying, ``"lost_ack"`` applies and then
    raises (the caller cannot know it landed), ``"stale"`` answers StaleCheckpoint."""

    def __init__(self) -> None:
        super().__init__()
        self.faults: dict[str, list[str]] = {"claimed": [], "unclaimed": [], "init": []}
        self.sent: dict[str, list[str]] = {"claimed": [], "unclaimed": [], "init": []}
        self.fetches = 0
        self.before_unclaimed: Callable[[], Awaitable[None]] | None = None

    async def _faulty(
        self, kind: str, transition_id: str, apply: Callable[[], Awaitable[TransitionResult]]
    ) -> TransitionResult:
        self.sent[kind].append(transition_id)
        fault = self.faults[kind].pop(0) if self.faults[kind] else None
        if fault == "retryable":
            return Retryable("injected: database busy")
        if fault == "stale":
            return StaleCheckpoint("injected")
        result = await apply()
        if fault == "lost_ack":
            raise ConnectionError("injected: connection lost after COMMIT")
        return result

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | object:  # type: ignore[override]
        self.fetches += 1
        return await super().fetch_run(owner, run_id)

    async def initialize(
        self, owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]
    ) -> TransitionResult:
        parent = super().initialize
        return await self._faulty(
            "init", proposal.transition_id, lambda: parent(owner, proposal, events)
        )

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        parent = super().commit_claimed
        return await self._faulty(
            "claimed", proposal.transition_id, lambda: parent(owner, proposal, events)
        )

    async def commit_unclaimed(
        self,
        owner: OwnerScope,
        expected_checkpoint_seq: int,
        proposal: UnclaimedProposal,
        events: Sequence[Event],
    ) -> TransitionResult:
        hook, self.before_unclaimed = self.before_unclaimed, None
        if hook is not None:
            await hook()
        parent = super().commit_unclaimed
        return await self._faulty(
            "unclaimed",
            proposal.transition_id,
            lambda: parent(owner, expected_checkpoint_seq, proposal, events),
        )


def _docket(backend: FaultyBackend) -> Docket:
    docket, _, _ = memory_docket(backend=backend, commit_backoff=0.001)
    return docket


def test_a_retryable_claimed_commit_is_sent_again_unchanged() -> None:
    async def scenario() -> None:
        backend = FaultyBackend()
        backend.faults["claimed"] = ["retryable", "retryable"]
        async with _docket(backend) as docket:
            ref = await docket.save_graph(fx.minimal_linear())
            await docket.start_run(ref, {"value": "v"}, run_id="r")
            await docket.drain_due()
            run = await docket.fetch_run("r")
            assert run.status is RunStatus.DONE
            sent = backend.sent["claimed"]
            assert sent[0] == sent[1] == sent[2] != sent[3]  # 3 tries of one, then the next
            assert len(sent) == 4
            check_events(run, await docket.history("r"))

    asyncio.run(scenario())


def test_a_commit_whose_acknowledgement_was_lost_is_replayed_not_recomputed() -> None:
    async def scenario() -> None:
        backend = FaultyBackend()
        backend.faults["claimed"] = ["lost_ack"]
        backend.faults["init"] = ["lost_ack"]
        async with _docket(backend) as docket:
            ref = await docket.save_graph(fx.minimal_linear())
            started = await docket.start_run(ref, {"value": "v"}, run_id="r")
            assert started.checkpoint_seq == 1
            assert backend.sent["init"][0] == backend.sent["init"][1]
            await docket.drain_due()
            run = await docket.fetch_run("r")
            assert run.status is RunStatus.DONE and run.checkpoint_seq == 3
            sent = backend.sent["claimed"]
            assert sent[0] == sent[1] and len(sent) == 3  # the replay answered the stored run
            check_events(run, await docket.history("r"))

    asyncio.run(scenario())


def test_a_commit_that_stays_unavailable_is_abandoned_and_the_claim_handed_back() -> None:
    async def scenario() -> None:
        backend = FaultyBackend()
        backend.faults["claimed"] = ["retryable"] * 5
        async with _docket(backend) as docket:
            ref = await docket.save_graph(fx.minimal_linear())
            await docket.start_run(ref, {"value": "v"}, run_id="r")
            summary = await docket.drain_due(max_runs=1)
            assert [(o.kind, o.detail) for o in summary.outcomes] == [("discarded", "Retryable")]
            assert len(set(backend.sent["claimed"])) == 1 and len(backend.sent["claimed"]) == 5
            info = await docket.inspect_run("r")
            assert info.claimed_at is None and info.wake_at is not None  # due again at once
            assert info.run.checkpoint_seq == 1
            await docket.drain_due()
            assert (await docket.fetch_run("r")).status is RunStatus.DONE

    asyncio.run(scenario())


def test_a_signal_that_keeps_losing_the_race_gives_up_after_four_evaluations() -> None:
    async def scenario() -> None:
        backend = FaultyBackend()
        async with _docket(backend) as docket:
            ref = await docket.save_graph(fx.interrupt_review("ask"))
            await docket.start_run(ref, run_id="r")
            await docket.drain_due()
            before = await docket.fetch_run("r")
            backend.faults["unclaimed"] = ["stale"] * 10
            backend.fetches = 0
            with pytest.raises(errors.StaleCheckpoint):
                await docket.resolve_interrupt("r", "ask", "approved")
            assert backend.fetches == 1 + 4  # the graph lookup, then 4 read-evaluate rounds
            assert len(backend.sent["unclaimed"]) == 4
            assert len(set(backend.sent["unclaimed"])) == 4  # each evaluation a new proposal
            assert await docket.fetch_run("r") == before

            backend.faults["unclaimed"] = ["stale", "stale"]
            backend.sent["unclaimed"].clear()
            resolved = await docket.resolve_interrupt("r", "ask", "approved")
            assert resolved.status is RunStatus.RUNNING
            assert len(backend.sent["unclaimed"]) == 3

    asyncio.run(scenario())


def test_a_signal_is_evaluated_again_on_what_is_now_committed() -> None:
    """A cancellation lands between the resolve's read and its commit: the resolve is
    evaluated again on the cancelled run and refused as InactiveRun."""

    async def scenario() -> None:
        backend = FaultyBackend()
        async with _docket(backend) as docket:
            ref = await docket.save_graph(fx.interrupt_review("ask"))
            await docket.start_run(ref, run_id="r")
            await docket.drain_due()

            async def cancel_first() -> None:
                await docket.cancel_run("r")

            backend.before_unclaimed = cancel_first
            with pytest.raises(errors.InactiveRun):
                await docket.resolve_interrupt("r", "ask", "approved")
            run = await docket.fetch_run("r")
            assert run.status is RunStatus.CANCELLED
            check_events(run, await docket.history("r"))

    asyncio.run(scenario())


def test_a_retryable_signal_commit_is_sent_again_with_the_same_transition() -> None:
    async def scenario() -> None:
        backend = FaultyBackend()
        async with _docket(backend) as docket:
            ref = await docket.save_graph(fx.interrupt_review("ask"))
            await docket.start_run(ref, run_id="r")
            await docket.drain_due()
            backend.faults["unclaimed"] = ["retryable", "lost_ack"]
            run = await docket.resolve_interrupt("r", "ask", "approved")
            sent = backend.sent["unclaimed"]
            assert len(sent) == 3 and len(set(sent)) == 1
            assert run.status is RunStatus.RUNNING and run.checkpoint_seq == 3
            await docket.drain_due()
            final = await docket.fetch_run("r")
            assert final.output == {"applied": "approved"}
            check_events(final, await docket.history("r"))

    asyncio.run(scenario())


def test_cancelling_a_cancelled_run_commits_nothing() -> None:
    async def scenario() -> None:
        backend = FaultyBackend()
        async with _docket(backend) as docket:
            ref = await docket.save_graph(fx.interrupt_review())
            await docket.start_run(ref, run_id="r")
            first = await docket.cancel_run("r")
            second = await docket.cancel_run("r")
            assert first == second and first.checkpoint_seq == 2
            assert len(backend.sent["unclaimed"]) == 1

    asyncio.run(scenario())
