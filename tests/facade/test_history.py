"""State history through the facade, on every backend (memory, SQLite file, PostgreSQL,
Redis): the state at each checkpoint read back equals what committed, forks run on from a
checkpoint with a patch, operator edits of waiting and failed runs reach the nodes, every
refusal writes nothing, and retention shows up as unreadable checkpoints."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from docket import Docket, errors
from docket.contract.capabilities import Feature
from docket.contract.protocols import Prunable
from docket.core.state import snapshot
from docket.graph.compiler import compile_graph
from docket.records import (
    FORKED_FROM_KEY,
    Checkpoint,
    EventType,
    Run,
    RunStatus,
)
from docket.runtime.lifecycle import CommitContext
from tests.facade.history_app import NODES, TICKS, asker, picky, ticker
from tests.fuzz.backends import KINDS, OpenStore


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest) -> Iterator[OpenStore]:
    opened = OpenStore(str(request.param))
    try:
        yield opened
    finally:
        opened.close()


class Spy:
    """Every committed run document, by run and checkpoint (an observer)."""

    def __init__(self) -> None:
        self.runs: dict[tuple[str, int], Run] = {}

    async def __call__(self, checkpoint: Checkpoint, context: CommitContext) -> None:
        self.runs[(checkpoint.run.id, checkpoint.run.checkpoint_seq)] = checkpoint.run

    async def wait_for(self, run_id: str, last: int) -> None:
        """Until every checkpoint 1..last of ``run_id`` was observed (deliveries are
        tasks of their own)."""
        deadline = time.monotonic() + 30
        while any((run_id, seq) not in self.runs for seq in range(1, last + 1)):
            assert time.monotonic() < deadline, "observer deliveries missing"
            await asyncio.sleep(0.01)


async def _drain(docket: Docket) -> None:
    while (await docket.drain_due()).drained:
        pass


async def _everything(docket: Docket) -> tuple[object, ...]:
    """What a refused call must leave as it was: every run and its events."""
    page = await docket.list_runs(limit=1000)
    runs = sorted(page.runs, key=lambda r: r.id)
    return tuple([(r, await docket.history(r.id)) for r in runs])


def test_the_state_at_every_checkpoint_and_a_fork_from_one(store: OpenStore) -> None:
    async def scenario() -> None:
        spy = Spy()
        async with Docket(store.backend, nodes=NODES, observers=[spy]) as docket:
            ref = await docket.save_graph(ticker())
            rtg = compile_graph(ticker(), NODES).runtime
            assert rtg is not None
            run = await docket.start_run(ref, {"label": "x"})
            await _drain(docket)
            done = await docket.fetch_run(run.id)
            assert done.status is RunStatus.DONE
            assert done.checkpoint_seq > 33  # past the second base (checkpoint 32)
            await spy.wait_for(run.id, done.checkpoint_seq)

            page = await docket.state_history(run.id, limit=1000)
            assert [c.checkpoint_seq for c in page.checkpoints] == list(
                range(1, done.checkpoint_seq + 1)
            )
            assert page.oldest_available == 1 and page.latest == done.checkpoint_seq
            assert all(c.readable for c in page.checkpoints) and not page.has_more
            for seq in range(1, done.checkpoint_seq + 1):
                at = await docket.fetch_run_at(run.id, seq)
                committed = spy.runs[(run.id, seq)]
                assert at.state == snapshot(rtg, committed.channels), seq
                assert at.status is committed.status and at.step == committed.step, seq
                assert set(at.pending_nodes) == set(committed.pending_nodes), seq
            # paging by checkpoint seq
            first = await docket.state_history(run.id, limit=10)
            second = await docket.state_history(run.id, after=first.next_after, limit=10)
            assert first.has_more and first.next_after == 10
            assert [c.checkpoint_seq for c in second.checkpoints] == list(range(11, 21))

            with pytest.raises(errors.NotFound) as unknown:
                await docket.fetch_run_at(run.id, done.checkpoint_seq + 1)
            assert unknown.value.details["what"] == "checkpoint"
            with pytest.raises(errors.NotFound):
                await docket.fetch_run_at("no-such-run", 1)

            # a fork from checkpoint 10, with a patched note, runs on to the end
            at10 = await docket.fetch_run_at(run.id, 10)
            fork = await docket.fork_run(run.id, at=10, new_run_id="fork-1", patch={"note": "f"})
            assert fork.id == "fork-1" and fork.status is RunStatus.RUNNING
            assert fork.graph_hash == run.graph_hash
            assert fork.metadata[FORKED_FROM_KEY] == {"run_id": run.id, "checkpoint_seq": 10}
            await _drain(docket)
            forked = await docket.fetch_run("fork-1")
            assert forked.status is RunStatus.DONE
            kept = at10.state["log"]
            assert isinstance(kept, list) and isinstance(forked.output, dict)
            log = forked.output["log"]
            assert isinstance(log, list)
            assert log[: len(kept)] == kept
            assert log[len(kept) :] == [f"f-{n}" for n in range(len(kept), TICKS)]
            # the source is untouched, and the fork's own history starts at its checkpoint
            assert await docket.fetch_run(run.id) == done
            assert (await docket.fetch_run_at("fork-1", 1)).state["log"] == kept

            # refused forks write nothing
            before = await _everything(docket)
            for patch in ({"nope": 1}, {"label": "y"}, {"count": "many"}, {"log": 3}, "x"):
                with pytest.raises(errors.InvalidInput):
                    await docket.fork_run(run.id, at=10, patch=patch)
            with pytest.raises(errors.Conflict):
                await docket.fork_run(run.id, at=10, new_run_id="fork-1")
            with pytest.raises(errors.Conflict):
                await docket.fork_run(run.id, at=10, new_run_id=run.id)
            with pytest.raises(errors.NotFound):
                await docket.fork_run(run.id, at=done.checkpoint_seq + 5)
            with pytest.raises(errors.InvalidOptions):
                await docket.fork_run(run.id, at=0)
            assert await _everything(docket) == before

    store.runner.run(scenario())


def test_an_edit_of_a_waiting_run_reaches_the_node(store: OpenStore) -> None:
    async def scenario() -> None:
        async with Docket(store.backend, nodes=NODES) as docket:
            ref = await docket.save_graph(asker())
            run = await docket.start_run(ref)
            await _drain(docket)
            waiting = await docket.fetch_run(run.id)
            assert waiting.status is RunStatus.WAITING

            before = await _everything(docket)
            for patch in ({"nope": 1}, {"note": 5}, {}):
                with pytest.raises(errors.InvalidInput):
                    await docket.update_state(run.id, patch)
            with pytest.raises(errors.InvalidInput):
                await docket.update_state(run.id, {"note": "x"}, reason="  ")
            with pytest.raises(errors.NotFound):
                await docket.update_state("no-such-run", {"note": "x"})
            assert await _everything(docket) == before

            edited = await docket.update_state(run.id, {"note": "edited"}, reason="typo")
            assert edited.status is RunStatus.WAITING
            assert edited.checkpoint_seq == waiting.checkpoint_seq + 1
            assert "question" in edited.interrupts
            # an edit triggers no node: the run still waits for its answer
            await _drain(docket)
            assert (await docket.fetch_run(run.id)).status is RunStatus.WAITING
            await docket.resolve_interrupt(run.id, "question", "yes")
            await _drain(docket)
            done = await docket.fetch_run(run.id)
            assert done.status is RunStatus.DONE and done.output == {"seen": "edited/yes"}

            events = await docket.history(run.id)
            edits = [e for e in events if e.type is EventType.STATE_EDITED]
            assert len(edits) == 1
            assert edits[0].payload["reason"] == "typo"
            assert edits[0].payload["fields"] == ["note"]
            assert edits[0].payload["previous_status"] == "waiting"

            # a done run is not edited (fork it instead), and nothing is written
            before = await _everything(docket)
            with pytest.raises(errors.InactiveRun):
                await docket.update_state(run.id, {"note": "late"})
            assert await _everything(docket) == before

    store.runner.run(scenario())


def test_an_edit_of_a_failed_run_then_a_retry_completes_with_it(store: OpenStore) -> None:
    async def scenario() -> None:
        async with Docket(store.backend, nodes=NODES) as docket:
            ref = await docket.save_graph(picky())
            run = await docket.start_run(ref)
            await _drain(docket)
            failed = await docket.fetch_run(run.id)
            assert failed.status is RunStatus.FAILED
            edited = await docket.update_state(run.id, {"note": "fixed"}, reason="fix the note")
            assert edited.status is RunStatus.FAILED  # stays failed until retried
            await _drain(docket)
            assert (await docket.fetch_run(run.id)).status is RunStatus.FAILED
            await docket.retry_run(run.id, reason="note fixed")
            await _drain(docket)
            done = await docket.fetch_run(run.id)
            assert done.status is RunStatus.DONE and done.output == {"seen": "fixed"}
            kinds = [e.type for e in await docket.history(run.id)]
            assert kinds.index(EventType.STATE_EDITED) < kinds.index(EventType.RUN_RETRIED)

    store.runner.run(scenario())


def test_a_running_run_is_edited_only_when_poisoned(store: OpenStore) -> None:
    async def scenario() -> None:
        async with Docket(store.backend, nodes=NODES) as docket:
            ref = await docket.save_graph(asker())
            run = await docket.start_run(ref)  # running, due, no worker has it yet
            before = await _everything(docket)
            with pytest.raises(errors.InvalidRun) as refused:
                await docket.update_state(run.id, {"note": "x"})
            assert refused.value.details["status"] == "running"
            assert await _everything(docket) == before

    store.runner.run(scenario())


def _poison_memory(docket: Docket, run_id: str) -> None:
    """Poison a run of the memory backend (what claims without progress do)."""
    rows = docket.backend._runs  # type: ignore[attr-defined]
    row = rows[(None, run_id)]
    row.poisoned_at = row.run.updated_at
    row.poison_reason = "max_claim_attempts_exceeded"


def test_an_edit_of_a_poisoned_run_makes_it_due_again() -> None:
    async def scenario() -> None:
        async with Docket("memory://", nodes=NODES, max_claim_attempts=1) as docket:
            ref = await docket.save_graph(asker())
            run = await docket.start_run(ref)
            _poison_memory(docket, run.id)
            assert (await docket.inspect_run(run.id)).poisoned
            edited = await docket.update_state(run.id, {"note": "edited"})
            assert edited.status is RunStatus.RUNNING
            info = await docket.inspect_run(run.id)
            assert not info.poisoned  # every commit clears the poison: it is due again
            await _drain(docket)
            await docket.resolve_interrupt(run.id, "question", "ok")
            await _drain(docket)
            done = await docket.fetch_run(run.id)
            assert done.output == {"seen": "edited/ok"}

    asyncio.run(scenario())


def test_pruned_checkpoints_read_as_unreadable(store: OpenStore) -> None:
    async def scenario() -> None:
        async with Docket(store.backend, nodes=NODES) as docket:
            if Feature.PRUNE not in docket.capabilities.features:
                with pytest.raises(errors.Unsupported):
                    await docket.prune(events_older_than=timedelta(days=1))
                return
            ref = await docket.save_graph(ticker())
            run = await docket.start_run(ref)
            await _drain(docket)
            latest = (await docket.fetch_run(run.id)).checkpoint_seq
            events = await docket.history(run.id)
            commits = [e for e in events if e.type is EventType.CHECKPOINT_COMMITTED]
            # cut at the first checkpoint after 10 committed later than checkpoint 1
            cut = next(e for e in commits[10:30] if e.timestamp > commits[0].timestamp)
            backend = docket.backend
            assert isinstance(backend, Prunable)
            await backend.prune(event_age=timedelta(0), now=cut.timestamp)

            page = await docket.state_history(run.id, limit=1000)
            oldest = page.oldest_available
            assert oldest is not None and 1 < oldest <= 31
            readable = {c.checkpoint_seq: c.readable for c in page.checkpoints}
            assert not any(readable[s] for s in range(oldest, 32))
            assert all(readable[s] for s in range(32, latest + 1))
            with pytest.raises(errors.NotFound) as gone:
                await docket.fetch_run_at(run.id, oldest)
            assert gone.value.details["pruned"] is True
            assert gone.value.details["oldest_readable"] == 32
            with pytest.raises(errors.NotFound) as earlier:
                await docket.fetch_run_at(run.id, 1)
            assert earlier.value.details["pruned"] is True
            at = await docket.fetch_run_at(run.id, 33)
            assert at.state["count"] == 32

            # the facade's prune: everything of the finished run, in one call
            result = await docket.prune(runs_older_than=timedelta(0), until_done=True)
            assert result.ran and result.runs >= 1
            with pytest.raises(errors.NotFound):
                await docket.state_history(run.id)

    store.runner.run(scenario())


def test_bad_arguments_are_refused_before_reading() -> None:
    async def scenario() -> None:
        async with Docket("memory://", nodes=NODES) as docket:
            for call in (
                docket.state_history("r", after=-1),
                docket.state_history("r", limit=0),
                docket.fetch_run_at("r", 0),
                docket.fetch_run_at("r", True),
                docket.fork_run("r", at=-3),
                docket.prune(batch_size=0),
                docket.prune(events_older_than=timedelta(seconds=-1)),
                docket.fork_run("r", new_run_id=""),
            ):
                with pytest.raises(errors.InvalidOptions):
                    await call

    asyncio.run(scenario())
