"""Durable sleep, deadlines, delayed starts and messages through the real runtime
(memory backend, manual clock, ``drain_due``)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import attrs
import pytest

from docket import Docket, Receive, Sleep
from docket.clock import ManualClock
from docket.contract.capabilities import Capabilities
from docket.contract.memory import MemoryBackend
from docket.errors import InactiveRun, InvalidInput, NotRetryable, Unsupported
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import Interrupt, NodeContext, NodeRegistry, NodeState, Update
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.records import EventType, RunStatus
from docket.values import JSONDict
from tests.runtime.helpers import T0, check_events, memory_docket

NODES = NodeRegistry()


def _sync(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


@NODES.node("time.nap")
def nap(state: NodeState, ctx: NodeContext) -> Sleep:
    return Sleep(for_=timedelta(days=7), update={"log": ["woke"]})


@NODES.node("time.listen")
def listen(state: NodeState, ctx: NodeContext) -> Receive:
    timeout = ctx.config.get("timeout_s")
    return Receive(
        "answer",
        into="answer",
        update={"log": ["heard"]},
        timeout=timedelta(seconds=int(str(timeout))) if timeout is not None else None,
        on_timeout={"log": ["gave up"]} if timeout is not None else None,
    )


@NODES.node("time.ask")
def ask(state: NodeState, ctx: NodeContext) -> Update | Interrupt:
    if "answer" not in state:
        return Interrupt("answer")
    return Update({"log": ["asked"]})


@NODES.node("time.note")
def note(state: NodeState, ctx: NodeContext) -> Update:
    app = ctx.application
    assert isinstance(app, dict)
    app["calls"].append(ctx.run_id)
    return Update({"log": ["noted"]})


class UntimedMemory(MemoryBackend):
    """The memory backend without the durable-time features, as a third-party backend
    written against the contract before them would be."""

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return attrs.evolve(caps, features=caps.features - {"timers", "messages"})


def _graph(first: str, *, config: JSONDict | None = None, topics: bool = False) -> Graph:
    builder = (
        GraphBuilder(f"g-{first.split('.')[1]}")
        .field("answer", S.string())
        .field("log", S.list(S.string()), reducer=R.append())
        .node("first", first, config=config or {})
        .node("last", "time.note")
        .edge("a", START, "first")
        .edge("b", "first", "last")
        .edge("c", "last", FINISH)
        .output("log")
        .output("answer")
    )
    if topics:
        builder = builder.policy("topics", {"answer": {"type": "string", "max_length": 5}})
    return builder.build()


@attrs.frozen
class _Setup:
    docket: Docket
    clock: ManualClock
    calls: list[str]


def _docket(features: bool = True) -> _Setup:
    clock = ManualClock(T0)
    backend = MemoryBackend(clock=clock) if features else UntimedMemory(clock=clock)
    calls: list[str] = []
    docket, _, _ = memory_docket(clock, backend, context={"calls": calls}, nodes=NODES)
    return _Setup(docket, clock, calls)


@_sync
async def test_a_run_sleeps_a_week_holding_no_worker_then_goes_on() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        ref = await docket.save_graph(_graph("time.nap"))
        run = await docket.start_run(ref)
        await docket.drain_due()
        asleep = await docket.fetch_run(run.id)
        assert asleep.status is RunStatus.RUNNING and not t.calls
        info = await docket.inspect_run(run.id)
        assert info.claimed_at is None and info.wake_at == T0 + timedelta(days=7)
        t.clock.advance(timedelta(days=6, hours=23))
        await docket.drain_due()
        assert not t.calls
        t.clock.advance(timedelta(hours=1))
        await docket.drain_due()
        done = await docket.fetch_run(run.id)
        assert done.status is RunStatus.DONE and done.output == {
            "answer": None,
            "log": ["woke", "noted"],
        }
        events = await docket.history(run.id)
        check_events(done, events)
        assert [e.type for e in events].count(EventType.SLEEP_STARTED) == 1


@_sync
async def test_a_sleeping_run_can_be_cancelled() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        run = await docket.start_run(await docket.save_graph(_graph("time.nap")))
        await docket.drain_due()
        cancelled = await docket.cancel_run(run.id)
        assert cancelled.status is RunStatus.CANCELLED and cancelled.timers == {}
        t.clock.advance(timedelta(days=8))
        await docket.drain_due()
        assert not t.calls


@_sync
async def test_a_message_sent_before_the_wait_is_kept_then_taken_exactly_once() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        run = await docket.start_run(await docket.save_graph(_graph("time.listen")))
        kept = await docket.send(run.id, "answer", "yes", idempotency_key="k1")
        assert not kept.delivered and not kept.duplicate and kept.message_seq == 1
        again = await docket.send(run.id, "answer", "yes", idempotency_key="k1")
        assert again.duplicate and again.run.checkpoint_seq == kept.run.checkpoint_seq
        await docket.drain_due()
        done = await docket.fetch_run(run.id)
        assert done.status is RunStatus.DONE
        assert done.output == {"answer": "yes", "log": ["heard", "noted"]}
        events = await docket.history(run.id)
        check_events(done, events)
        types = [e.type for e in events]
        assert types.count(EventType.MESSAGE_RECEIVED) == 1
        assert types.count(EventType.MESSAGE_CONSUMED) == 1


@_sync
async def test_a_waiting_run_takes_a_message_in_the_send_commit() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        run = await docket.start_run(await docket.save_graph(_graph("time.listen")))
        await docket.drain_due()
        waiting = await docket.fetch_run(run.id)
        assert waiting.status is RunStatus.WAITING and not t.calls
        info = await docket.inspect_run(run.id)
        assert info.wake_at is None
        result = await docket.send(run.id, "answer", "ok")
        assert result.delivered and result.run.status is RunStatus.RUNNING
        await docket.drain_due()
        done = await docket.fetch_run(run.id)
        assert done.output == {"answer": "ok", "log": ["heard", "noted"]}


@_sync
async def test_messages_of_other_topics_wait_and_order_is_kept() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        run = await docket.start_run(await docket.save_graph(_graph("time.listen")))
        await docket.send(run.id, "other", 1)
        await docket.send(run.id, "answer", "first")
        await docket.send(run.id, "answer", "second")
        await docket.drain_due()
        done = await docket.fetch_run(run.id)
        assert done.output is not None and done.output["answer"] == "first"
        from docket.core.waits import pending_messages

        assert [m.payload for m in pending_messages(done)] == [1, "second"]


@_sync
async def test_a_payload_the_topic_schema_refuses_changes_nothing() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        run = await docket.start_run(await docket.save_graph(_graph("time.listen", topics=True)))
        before = await docket.fetch_run(run.id)
        with pytest.raises(InvalidInput):
            await docket.send(run.id, "answer", "far too long")
        with pytest.raises(InvalidInput):
            await docket.send(run.id, "unknown", "x")
        assert (await docket.fetch_run(run.id)).checkpoint_seq == before.checkpoint_seq


@_sync
async def test_a_message_wait_times_out_into_on_timeout() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        graph = _graph("time.listen", config={"timeout_s": 60})
        run = await docket.start_run(await docket.save_graph(graph))
        await docket.drain_due()
        assert (await docket.inspect_run(run.id)).wake_at == T0 + timedelta(seconds=60)
        t.clock.advance(timedelta(seconds=61))
        await docket.drain_due()
        done = await docket.fetch_run(run.id)
        assert done.status is RunStatus.DONE and done.output == {
            "answer": None,
            "log": ["gave up", "noted"],
        }


@_sync
async def test_a_deadline_fails_a_sleeping_run_when_it_passes() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        ref = await docket.save_graph(_graph("time.nap"))
        run = await docket.start_run(ref, timeout=timedelta(hours=1))
        await docket.drain_due()
        assert (await docket.inspect_run(run.id)).wake_at == T0 + timedelta(hours=1)
        t.clock.advance(timedelta(hours=1))
        await docket.drain_due()
        failed = await docket.fetch_run(run.id)
        assert failed.status is RunStatus.FAILED and failed.failure is not None
        assert failed.failure.code == "deadline_exceeded" and not t.calls
        with pytest.raises(InactiveRun):
            await docket.send(run.id, "answer", "late")
        with pytest.raises(NotRetryable):
            await docket.retry_run(run.id)


@_sync
async def test_a_delayed_start_runs_nothing_before_its_time() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        ref = await docket.save_graph(_graph("time.listen"))
        run = await docket.start_run(ref, start_at=T0 + timedelta(minutes=5))
        await docket.send(run.id, "answer", "early")
        await docket.drain_due()
        assert not t.calls and (await docket.fetch_run(run.id)).step == 0
        t.clock.advance(timedelta(minutes=5))
        await docket.drain_due()
        assert (await docket.fetch_run(run.id)).status is RunStatus.DONE


@_sync
async def test_bad_times_and_missing_features_are_refused_before_anything_is_written() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        ref = await docket.save_graph(_graph("time.nap"))
        with pytest.raises(InvalidInput):
            await docket.start_run(ref, run_id="r1", deadline=T0 - timedelta(seconds=1))
        with pytest.raises(InvalidInput):
            await docket.start_run(ref, run_id="r1", timeout=timedelta(0))
        with pytest.raises(InvalidInput):
            await docket.start_run(ref, run_id="r1", deadline=T0, timeout=timedelta(1))
        assert (await docket.list_runs()).runs == ()
    plain = _docket(features=False).docket
    async with plain:
        ref = await plain.save_graph(_graph("time.nap"))
        with pytest.raises(Unsupported):
            await plain.start_run(ref, timeout=timedelta(hours=1))
        run = await plain.start_run(ref)
        with pytest.raises(Unsupported):
            await plain.send(run.id, "answer", "x")


def test_the_sync_twin_sends() -> None:
    from docket import SyncDocket

    with SyncDocket(MemoryBackend(), nodes=NODES) as sync:
        run = sync.start_run(sync.save_graph(_graph("time.listen")))
        assert sync.send(run.id, "answer", "hi").message_seq == 1


@_sync
async def test_a_sleep_on_a_backend_without_timers_fails_the_attempt_saying_why() -> None:
    t = _docket(features=False)
    async with t.docket:
        run = await t.docket.start_run(await t.docket.save_graph(_graph("time.nap")))
        await t.docket.drain_due()
        failed = await t.docket.fetch_run(run.id)
        assert failed.status is RunStatus.FAILED
        assert "unsupported" in str(failed.failure) and "'timers'" in str(failed.failure)


@_sync
async def test_a_deadline_fails_a_run_waiting_for_a_person() -> None:
    t = _docket()
    docket = t.docket
    async with docket:
        ref = await docket.save_graph(_graph("time.ask"))
        run = await docket.start_run(ref, deadline=T0 + timedelta(minutes=10))
        await docket.drain_due()
        info = await docket.inspect_run(run.id)
        assert info.run.status is RunStatus.WAITING and info.run.open_interrupts
        assert info.wake_at == T0 + timedelta(minutes=10)  # External, capped at the deadline
        t.clock.advance(timedelta(minutes=9))
        await docket.drain_due()
        assert (await docket.fetch_run(run.id)).status is RunStatus.WAITING
        t.clock.advance(timedelta(minutes=1))
        summary = await docket.drain_due()
        assert [o.kind for o in summary.outcomes] == ["parked"]
        failed = await docket.fetch_run(run.id)
        assert failed.status is RunStatus.FAILED and failed.failure is not None
        assert failed.failure.code == "deadline_exceeded" and not t.calls
