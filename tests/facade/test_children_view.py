"""``Docket.children`` and ``ParentLink.of`` (issue 19 §4) on the memory backend, drained
by hand: a parent lists each child it asked for — not started yet, running, waiting on
an interrupt a person answers on the child, done — and a failed attempt's child stays
listed beside its retry's; a child names its parent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from docket import Docket
from docket.core.children import ParentLink
from docket.core.family import ChildInfo, child_starts
from docket.errors import NotFound
from docket.records import RunStatus
from docket.runtime.children import Children
from tests.cli import kids_app
from tests.runtime import test_child_runs as model
from tests.runtime.helpers import later, memory_docket


async def _one(docket: Docket, run_id: str) -> ChildInfo:
    (child,) = await docket.children(run_id)
    return child


def test_a_parent_lists_its_child_from_the_ask_to_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def scenario() -> None:
        docket, _, clock = memory_docket(nodes=kids_app.NODES, child_recheck=1.0)
        async with docket:
            await docket.save_graph(kids_app.CHILD)
            ref = await docket.save_graph(kids_app.PARENT)
            await docket.start_run(ref, {"amount": 120}, run_id="p")
            assert await docket.children("p") == ()  # nothing asked yet

            # the ask is committed, the start that follows it is lost: "not started"
            async def no_start(*_: Any, **__: Any) -> None:
                return None

            with monkeypatch.context() as patch:
                patch.setattr(Children, "_start_new", no_start)
                await docket.drain_due(max_runs=1)
            asked = await _one(docket, "p")
            assert (asked.task_id, asked.node_id, asked.attempt) == ("p:0:approve", "approve", 1)
            assert asked.child_run_id == "p:0:approve:1@1"
            assert asked.run is None and asked.status == "not started"
            assert asked.awaited and asked.open_interrupts == ()
            # with its child_started event pruned, the parked task still names the child
            (kept,) = child_starts(await docket.fetch_run("p"), ())
            assert (kept.child_run_id, kept.task_id, kept.attempt) == (
                asked.child_run_id,
                "p:0:approve",
                1,
            )

            # the parent's recheck starts it; one drain later it waits on its question
            later(clock, 1.5)
            await docket.drain_due(max_runs=1)
            assert (await _one(docket, "p")).status == "running"
            await docket.drain_due()
            waiting = await _one(docket, "p")
            assert waiting.status == "waiting" and waiting.awaited
            assert waiting.run is not None and waiting.run.graph_id == "approval"
            (question,) = waiting.open_interrupts
            assert question.id == "decision"
            assert question.metadata["question"] == kids_app.QUESTION
            child = await docket.fetch_run(waiting.child_run_id)
            parent_run = await docket.fetch_run("p")
            assert ParentLink.of(child) == ParentLink(
                run_id="p",
                task_id="p:0:approve",
                node_id="approve",
                attempt=1,
                graph_id=parent_run.graph_id,
                graph_hash=parent_run.graph_hash,
            )
            assert ParentLink.of(await docket.fetch_run("p")) is None
            assert await docket.children(waiting.child_run_id) == ()

            # answered on the child, found from the parent
            await docket.resolve_interrupt(waiting.child_run_id, question.id, "approved")
            for _ in range(5):
                await docket.drain_due()
            parent = await docket.fetch_run("p")
            assert parent.status is RunStatus.DONE and parent.output == {"verdict": "approved 120"}
            done = await _one(docket, "p")
            assert done.status == "done" and not done.awaited and done.open_interrupts == ()
            assert done.to_json()["status"] == "done"

    asyncio.run(scenario())


def test_a_failed_attempts_child_stays_listed_beside_its_retrys() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(nodes=model.NODES, context={"fail": 1})
        async with docket:
            await docket.save_graph(model.CHILD)
            ref = await docket.save_graph(model.parent(retries=2))
            await docket.start_run(ref, {"n": 5}, run_id="p")
            done = await model._settle(docket, "p")
            assert done.status is RunStatus.DONE, done.failure
            first, second = await docket.children("p")
            assert (first.attempt, first.status, first.awaited) == (1, "failed", False)
            assert (second.attempt, second.status, second.awaited) == (2, "done", False)
            assert first.task_id == second.task_id == "p:0:call"
            assert first.child_run_id != second.child_run_id

    asyncio.run(scenario())


def test_a_run_with_the_childs_id_that_is_not_its_child_is_not_listed_as_it() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(nodes=kids_app.NODES)
        async with docket:
            child_ref = await docket.save_graph(kids_app.CHILD)
            ref = await docket.save_graph(kids_app.PARENT)
            # someone started a run under the id the parent's child will ask for
            await docket.start_run(child_ref, {"amount": 1}, run_id="p:0:approve:1@1")
            await docket.start_run(ref, {"amount": 120}, run_id="p")
            await docket.drain_due(max_runs=1)
            taken = await _one(docket, "p")
            assert taken.child_run_id == "p:0:approve:1@1"
            assert taken.run is None and taken.status == "not started"

    asyncio.run(scenario())


def test_children_of_an_unknown_run_is_not_found() -> None:
    async def scenario() -> None:
        docket, _, _ = memory_docket(nodes=kids_app.NODES)
        async with docket:
            with pytest.raises(NotFound):
                await docket.children("nope")

    asyncio.run(scenario())
