"""``Docket.stream`` / ``stream_scope`` and ``ctx.emit``, end to end with a real worker.

Each case runs on the reference backend (which pushes: ``streams``), on the reference
backend with ``streams`` stripped (the stream polls, ``ctx.emit`` is a no-op) and on a
real SQLite file. A node waits on gates the test opens, so the stream is known to be
following the run live (not reading a finished history) when the work happens.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from docket import Docket, GraphBuilder, NodeRegistry, SyncDocket, errors
from docket._facade_streams import DocketStream
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.memory import MemoryBackend
from docket.graph.model import FINISH, START
from docket.graph.nodes import NodeContext, NodeState
from docket.graph.schema import S
from docket.records import Emission, Event, EventsPruned, EventType, RunStatus
from docket.runtime.streams import StreamTimes
from docket.values import JSONDict

NODES = NodeRegistry()
WAIT = 30.0  # seconds: a bound on waiting for a condition, never a synchronisation


class Gates:
    """Thread-safe gates a node waits on (sync nodes run in threads)."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.finish = threading.Event()


@NODES.node("talk")
async def talk(state: NodeState, ctx: NodeContext) -> JSONDict:
    gates: Gates = ctx.application["gates"]  # type: ignore[assignment]
    assert await asyncio.to_thread(gates.go.wait, WAIT)
    for word in ("once", "upon", "a", "time"):
        ctx.emit(word, kind="token")
    assert await asyncio.to_thread(gates.finish.wait, WAIT)
    return {"text": f"{state['topic']}: once upon a time"}


@NODES.node("shout")
def shout(state: NodeState, ctx: NodeContext) -> JSONDict:
    ctx.emit({"progress": 1.0}, kind="progress")  # from a worker thread
    return {"loud": str(state["text"]).upper()}


def story_graph() -> Any:
    return (
        GraphBuilder("story")
        .input("topic", S.string(), required=True)
        .field("text", S.string())
        .field("loud", S.string())
        .node("talk", "talk")
        .node("shout", "shout")
        .edge("begin", START, "talk")
        .edge("next", "talk", "shout")
        .edge("end", "shout", FINISH)
        .output("loud")
        .build()
    )


class NoStreams(MemoryBackend):
    """A real memory backend that does not declare ``streams`` (its feed goes unused)."""

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return attrs.evolve(caps, features=caps.features - {Feature.STREAMS})


FAST = StreamTimes(reread=0.5, poll_min=0.01, poll_max=0.1)
KINDS = ["memory", "memory-polling", "sqlite"]


def make_docket(kind: str, tmp_path: Path, gates: Gates) -> Docket:
    backend: Any
    if kind == "memory":
        backend = MemoryBackend()
    elif kind == "memory-polling":
        backend = NoStreams()
    else:
        backend = f"sqlite:///{tmp_path / 'streams.db'}"
    docket = Docket(backend, nodes=NODES, context={"gates": gates}, poll_interval=0.05)
    docket.stream_times = FAST
    return docket


def pushes(docket: Docket) -> bool:
    return Feature.STREAMS in docket.capabilities.features


async def collect(
    stream: DocketStream[Any], until: Callable[[Any], bool] | None = None
) -> list[Any]:
    items: list[Any] = []
    async with stream:
        async with asyncio.timeout(WAIT):
            async for item in stream:
                items.append(item)
                if until is not None and until(item):
                    break
    return items


def events_of(items: list[Any]) -> list[Event]:
    return [item for item in items if isinstance(item, Event)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_yields_every_event_once_in_order_and_the_emissions_live(
    kind: str, tmp_path: Path
) -> None:
    gates = Gates()

    async def scenario() -> None:
        async with make_docket(kind, tmp_path, gates) as docket:
            ref = await docket.save_graph(story_graph())
            async with docket.worker():
                run = await docket.start_run(ref, {"topic": "otters"})
                items: list[Any] = []
                async with docket.stream(run.id) as stream, asyncio.timeout(WAIT):
                    async for item in stream:
                        items.append(item)
                        if len(items) == 1:
                            gates.go.set()  # the stream follows: let the node talk
                        tokens = [i for i in items if isinstance(i, Emission)]
                        if len(tokens) == 4 or (not pushes(docket) and len(items) == 1):
                            gates.finish.set()
                history = await docket.history(run.id)
                done = await docket.fetch_run(run.id)
        assert done.status is RunStatus.DONE
        assert events_of(items) == list(history)  # each once, in order, ending at the end
        emissions = [i for i in items if isinstance(i, Emission)]
        if not pushes(docket):
            assert emissions == []  # no feed: ctx.emit is a no-op
            return
        tokens = [e for e in emissions if e.kind == "token"]
        assert [(e.seq, e.data) for e in tokens] == [
            (1, "once"),
            (2, "upon"),
            (3, "a"),
            (4, "time"),
        ]
        assert {(e.run_id, e.node_id, e.attempt, e.tenant_id) for e in tokens} == {
            (run.id, "talk", 1, None)
        }
        # the tokens arrive while "talk" runs: after the run started, before it completed
        talk_done = next(
            i
            for i, item in enumerate(items)
            if isinstance(item, Event)
            and item.type is EventType.NODE_COMPLETED
            and item.node_id == "talk"
        )
        assert all(items.index(t) < talk_done for t in tokens)
        assert items.index(tokens[0]) > 0
        (progress,) = [e for e in emissions if e.kind == "progress"]
        assert progress.data == {"progress": 1.0} and progress.node_id == "shout"

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_a_stream_resumes_after_seq_with_no_gap_and_no_duplicate(kind: str, tmp_path: Path) -> None:
    gates = Gates()
    gates.go.set()

    async def scenario() -> None:
        async with make_docket(kind, tmp_path, gates) as docket:
            ref = await docket.save_graph(story_graph())
            async with docket.worker():
                run = await docket.start_run(ref, {"topic": "otters"})
                first = events_of(
                    await collect(
                        docket.stream(run.id, emissions=False), lambda i: isinstance(i, Event)
                    )
                )
                assert len(first) == 1  # the reader stopped after one event ...
                gates.finish.set()
                # ... and comes back after it: the rest, live, then the end
                rest = await collect(docket.stream(run.id, after_seq=first[-1].seq))
                history = await docket.history(run.id)
                again = await collect(docket.stream(run.id, after_seq=history[-3].seq))
        assert first + events_of(rest) == list(history)
        assert events_of(again) == list(history[-2:])

    asyncio.run(scenario())


def test_a_stream_of_a_finished_run_replays_it_and_ends() -> None:
    gates = Gates()
    gates.go.set()
    gates.finish.set()

    async def scenario() -> None:
        async with make_docket("memory", Path("."), gates) as docket:
            ref = await docket.save_graph(story_graph())
            async with docket.worker():
                run = await docket.start_run(ref, {"topic": "otters"})
                await docket.await_run(run.id, timeout=WAIT)
            history = await docket.history(run.id)
            assert events_of(await collect(docket.stream(run.id))) == list(history)
            # the cursor at the very end: nothing more, and the stream still ends
            assert await collect(docket.stream(run.id, after_seq=history[-1].seq)) == []

    asyncio.run(scenario())


def test_a_stream_says_which_events_retention_removed_and_goes_on() -> None:
    gates = Gates()
    gates.go.set()
    gates.finish.set()

    async def scenario() -> None:
        backend = MemoryBackend()
        async with Docket(backend, nodes=NODES, context={"gates": gates}) as docket:
            ref = await docket.save_graph(story_graph())
            async with docket.worker():
                run = await docket.start_run(ref, {"topic": "otters"})
                run = await docket.await_run(run.id, timeout=WAIT)
            history = await docket.history(run.id)
            # every event is older than a day from a day ahead: prune three of them
            ahead = await backend.now() + timedelta(days=1)
            result = await backend.prune(event_age=timedelta(hours=1), batch_size=3, now=ahead)
            assert result.events == 3
            items = await collect(docket.stream(run.id, after_seq=1))
        assert items[0] == EventsPruned(run_id=run.id, first_seq=2, last_seq=3)
        assert items[1:] == list(history[3:])

    asyncio.run(scenario())


def test_a_stream_of_a_run_whose_events_were_all_pruned_says_so_and_ends() -> None:
    gates = Gates()
    gates.go.set()
    gates.finish.set()

    async def scenario() -> None:
        backend = MemoryBackend()
        async with Docket(backend, nodes=NODES, context={"gates": gates}) as docket:
            ref = await docket.save_graph(story_graph())
            async with docket.worker():
                run = await docket.start_run(ref, {"topic": "otters"})
                run = await docket.await_run(run.id, timeout=WAIT)
            ahead = await backend.now() + timedelta(days=1)
            await backend.prune(event_age=timedelta(hours=1), now=ahead)
            items = await collect(docket.stream(run.id))
        assert items == [EventsPruned(run_id=run.id, first_seq=1, last_seq=run.event_seq)]

    asyncio.run(scenario())


def test_closing_a_stream_early_releases_its_subscription() -> None:
    gates = Gates()

    async def scenario() -> None:
        backend = MemoryBackend()
        async with Docket(backend, nodes=NODES, context={"gates": gates}) as docket:
            ref = await docket.save_graph(story_graph())
            run = await docket.start_run(ref, {"topic": "otters"})  # no worker: it stays
            stream = docket.stream(run.id)
            first = await anext(stream)
            assert isinstance(first, Event) and first.seq == 1
            assert backend.feed.subscribers == 1
            await stream.aclose()
            assert backend.feed.subscribers == 0
            with pytest.raises(StopAsyncIteration):
                await anext(stream)
            # a failing stream lets go too: NotFound on the first read
            missing = docket.stream("no-such-run")
            with pytest.raises(errors.NotFound):
                await anext(missing)
            assert backend.feed.subscribers == 0

    asyncio.run(scenario())


def test_bad_arguments_are_refused_at_the_call() -> None:
    async def scenario() -> None:
        async with Docket(MemoryBackend(), nodes=NODES) as docket:
            with pytest.raises(errors.InvalidOptions):
                docket.stream("r", after_seq=-1)
            with pytest.raises(errors.InvalidOptions):
                docket.stream("")
            with pytest.raises(errors.InvalidOptions):
                docket.stream("r", emissions="yes")  # type: ignore[arg-type]
            with pytest.raises(errors.InvalidTenant):
                docket.stream("r", tenant_id="t")
            with pytest.raises(errors.InvalidTenant):
                docket.stream_scope(all_tenants=True, tenant_id="t")
        async with Docket(NoStreams(), nodes=NODES) as docket:
            with pytest.raises(errors.Unsupported) as raised:
                docket.stream_scope()
            assert raised.value.details["feature"] == "streams"

    asyncio.run(scenario())


def test_a_scope_stream_follows_every_run_of_the_scope_that_commits() -> None:
    gates = Gates()
    gates.go.set()
    gates.finish.set()

    async def scenario() -> None:
        backend = MemoryBackend()
        async with Docket(backend, nodes=NODES, context={"gates": gates}) as docket:
            ref = await docket.save_graph(story_graph())
            everything = docket.stream_scope()
            story_only = docket.stream_scope(graph_id="story")
            elsewhere = docket.stream_scope(graph_id="other")
            followers = [everything, story_only, elsewhere]
            seen: list[list[Any]] = [[], [], []]

            async def follow(index: int) -> None:
                async for item in followers[index]:
                    seen[index].append(item)

            tasks = [asyncio.create_task(follow(i)) for i in range(3)]
            await asyncio.sleep(0)  # the tasks subscribe on their first anext
            async with asyncio.timeout(WAIT):
                while backend.feed.subscribers < 3:
                    await asyncio.sleep(0.01)
            async with docket.worker():
                runs = [await docket.start_run(ref, {"topic": t}) for t in ("a", "b")]
                for run in runs:
                    await docket.await_run(run.id, timeout=WAIT)
                histories = {run.id: list(await docket.history(run.id)) for run in runs}
                async with asyncio.timeout(WAIT):
                    while len(events_of(seen[0])) < sum(map(len, histories.values())):
                        await asyncio.sleep(0.01)
            for task in tasks:  # a reader cancelled in its anext closes its stream
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            assert backend.feed.subscribers == 0
        for index in (0, 1):
            got = events_of(seen[index])
            for run_id, history in histories.items():
                assert [e for e in got if e.run_id == run_id] == history
            tokens = [e for e in seen[index] if isinstance(e, Emission) and e.kind == "token"]
            assert len(tokens) == 8
        assert seen[2] == []

    asyncio.run(scenario())


def _sync_story(docket: SyncDocket, gates: Gates) -> tuple[str, list[Any]]:
    ref = docket.save_graph(story_graph())
    docket.start_worker()
    run = docket.start_run(ref, {"topic": "otters"})
    items: list[Any] = []
    with docket.stream(run.id) as stream:
        for item in stream:
            items.append(item)
            gates.go.set()
            if sum(isinstance(i, Emission) for i in items) == 4 or len(items) > 3:
                gates.finish.set()
    return run.id, items


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_the_sync_twin_streams_the_same_and_closes_early(kind: str, tmp_path: Path) -> None:
    gates = Gates()
    backend: Any = MemoryBackend() if kind == "memory" else f"sqlite:///{tmp_path / 's.db'}"
    with SyncDocket(backend, nodes=NODES, context={"gates": gates}, poll_interval=0.05) as docket:
        docket.docket.stream_times = FAST
        run_id, items = _sync_story(docket, gates)
        history = docket.history(run_id)
        assert events_of(items) == list(history)
        if kind == "memory":
            assert [e.data for e in items if isinstance(e, Emission) and e.kind == "token"] == [
                "once",
                "upon",
                "a",
                "time",
            ]
            stream = docket.stream(run_id, until_finished=False)
            assert next(stream) == history[0]
            assert backend.feed.subscribers == 1
            stream.close()
            assert backend.feed.subscribers == 0
            assert list(stream) == []
