"""A run's completion sent in one chain behind its last superstep (``ChainedCommits``).

The store is the reference backend given a ``commit_claimed_chain``; each test bends
the chain one way (answers in order, the later commit arriving first, the earlier one
refused or unknown) and checks the run ends exactly as it would without chaining.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from docket.contract.errors import Retryable, StaleCheckpoint, TransitionResult
from docket.contract.grouping import commit_claimed_in_order
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import ClaimedProposal
from docket.contract.protocols import ChainedCommits
from docket.records import Event, OwnerScope, RunStatus
from tests.core import fixtures as fx
from tests.runtime.helpers import check_events, memory_docket

Chain = Sequence[tuple[ClaimedProposal, Sequence[Event]]]


class ChainingBackend(MemoryBackend):
    """Chains like a backend whose writes are applied in the order they were sent; logs
    every commit's transition id, and every chain's."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[str] = []
        self.chains: list[list[str]] = []

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        self.commits.append(proposal.transition_id)
        return await super().commit_claimed(owner, proposal, events)

    async def commit_claimed_chain(
        self, owner: OwnerScope, commits: Chain
    ) -> list[TransitionResult]:
        self.chains.append([p.transition_id for p, _ in commits])
        return await commit_claimed_in_order(self, owner, commits)


class ReversedChain(ChainingBackend):
    """The later commit reaches the store first (another lane, say)."""

    async def commit_claimed_chain(
        self, owner: OwnerScope, commits: Chain
    ) -> list[TransitionResult]:
        self.chains.append([p.transition_id for p, _ in commits])
        answers = await commit_claimed_in_order(self, owner, list(reversed(commits)))
        return list(reversed(answers))


class FirstRefused(ChainingBackend):
    """The first chain's first commit is answered ``answer`` without being applied."""

    def __init__(self, answer: TransitionResult) -> None:
        super().__init__()
        self.answer: TransitionResult | None = answer

    async def commit_claimed_chain(
        self, owner: OwnerScope, commits: Chain
    ) -> list[TransitionResult]:
        answer, self.answer = self.answer, None
        if answer is None:
            return await super().commit_claimed_chain(owner, commits)
        self.chains.append([p.transition_id for p, _ in commits])
        rest = await commit_claimed_in_order(self, owner, commits[1:])
        return [answer, *rest]


async def _drain(backend: ChainingBackend) -> tuple[object, list[str]]:
    docket, _, _ = memory_docket(backend=backend, commit_backoff=0.001)
    async with docket:
        ref = await docket.save_graph(fx.minimal_linear())
        await docket.start_run(ref, {"value": "v"}, run_id="r")
        summary = await docket.drain_due()
        run = await docket.fetch_run("r")
        if run.status is RunStatus.DONE:
            check_events(run, await docket.history("r"))
        return run, [o.kind for o in summary.outcomes]


def test_the_completion_goes_in_one_chain_behind_the_last_step() -> None:
    backend = ChainingBackend()
    assert isinstance(backend, ChainedCommits)
    run, outcomes = asyncio.run(_drain(backend))
    assert outcomes == ["parked"]
    assert getattr(run, "status", None) is RunStatus.DONE
    assert getattr(run, "output", None) == {"result": "v"}
    assert backend.chains == [backend.commits]  # the step and the completion, chained once
    assert len(backend.commits) == 2


def test_without_the_member_commits_go_one_after_the_other() -> None:
    async def scenario() -> None:
        backend = MemoryBackend()
        assert not isinstance(backend, ChainedCommits)
        docket, _, _ = memory_docket(backend=backend)
        async with docket:
            ref = await docket.save_graph(fx.minimal_linear())
            await docket.start_run(ref, {"value": "v"}, run_id="r")
            await docket.drain_due()
            assert (await docket.fetch_run("r")).status is RunStatus.DONE

    asyncio.run(scenario())


def test_a_completion_that_arrives_first_is_refused_then_sent_again_unchanged() -> None:
    backend = ReversedChain()
    run, outcomes = asyncio.run(_drain(backend))
    assert outcomes == ["parked"]
    assert getattr(run, "status", None) is RunStatus.DONE
    ((step, completion),) = backend.chains
    # stale first (the step had not landed), then the step, then the same completion
    assert backend.commits == [completion, step, completion]


def test_a_refused_step_ends_the_drain_and_its_completion_never_lands() -> None:
    backend = FirstRefused(StaleCheckpoint("injected: another holder"))
    run, outcomes = asyncio.run(_drain(backend))
    # The drain stops and hands the run back; the next drain runs the step again.
    assert outcomes == ["discarded", "parked"]
    assert getattr(run, "status", None) is RunStatus.DONE
    # start, step, completion: the first chain's completion (fenced on the refused
    # step) left nothing behind
    assert getattr(run, "checkpoint_seq", None) == 3
    first, second = backend.chains
    assert backend.commits == [first[1], *second]


def test_an_unknown_step_is_sent_again_and_its_completion_follows_it() -> None:
    backend = FirstRefused(Retryable("injected: connection lost"))
    run, outcomes = asyncio.run(_drain(backend))
    assert outcomes == ["parked"]
    assert getattr(run, "status", None) is RunStatus.DONE
    ((step, completion),) = backend.chains
    # the completion was refused (its step had not landed), the step went again, then it
    assert backend.commits == [completion, step, completion]


class LostAck(ChainingBackend):
    """The first commit lands, then its connection drops before the answer."""

    async def commit_claimed(
        self, owner: OwnerScope, proposal: ClaimedProposal, events: Sequence[Event]
    ) -> TransitionResult:
        answer = await super().commit_claimed(owner, proposal, events)
        if len(self.commits) == 1:
            raise ConnectionError("injected: connection lost after COMMIT")
        return answer


def test_a_lost_answer_in_a_chain_is_an_unknown_outcome_resolved_by_replay() -> None:
    backend = LostAck()
    run, outcomes = asyncio.run(_drain(backend))
    assert outcomes == ["parked"]
    assert getattr(run, "status", None) is RunStatus.DONE
    ((step, completion),) = backend.chains
    # both landed; the step, answered Retryable by the chain, is replayed unchanged
    assert backend.commits == [step, completion, step]
