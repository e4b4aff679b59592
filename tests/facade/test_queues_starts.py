"""Starting runs in named queues through the facade: ``start_run(queue=, priority=)``
(and the graph's ``queue``/``priority`` policies) on every backend that declares
``Feature.QUEUES``; children, forks and keyed starts keep their queue; every refusal
(an unknown queue, bad values, a backend without queues) writes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from docket import Docket, SyncDocket, errors
from docket.graph.builder import GraphBuilder
from docket.graph.children import ChildSpec
from docket.graph.model import FINISH, START, Graph
from docket.graph.schema import S
from docket.graph.wire import to_json
from docket.records import RunStatus
from tests.cli import cli_app
from tests.cli.helpers import APP, docket_cli, explain
from tests.runtime.queue_app import NODES, QUEUE_KINDS, docket_on, recording, wait_for


def parent_of(child: str) -> Graph:
    builder = GraphBuilder("parent").field("out", S.string())
    builder.node("call", child=ChildSpec(graph=child, output={"out": "out"}))
    return builder.edge("go", START, "call").edge("end", "call", FINISH).output("out").build()


@pytest.mark.parametrize("kind", QUEUE_KINDS)
def test_a_run_waits_in_the_queue_and_at_the_priority_it_was_started_with(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, []) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("billing")
            run = await docket.start_run(ref, queue="billing", priority=7)
            info = await docket.inspect_run(run.id)
            assert (info.queue, info.priority) == ("billing", 7)
            plain = await docket.inspect_run((await docket.start_run(ref)).id)
            assert (plain.queue, plain.priority) == ("default", 0)
            ranked = await docket.inspect_run((await docket.start_run(ref, priority=-4)).id)
            assert (ranked.queue, ranked.priority) == ("default", -4)
            keyed = await docket.start_run(ref, queue="billing", priority=2, idempotency_key="k")
            again = await docket.start_run(ref, queue="billing", priority=2, idempotency_key="k")
            assert again.id == keyed.id == "k"
            assert (await docket.inspect_run("k")).queue == "billing"

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", QUEUE_KINDS)
def test_an_unknown_queue_or_bad_values_write_nothing(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, []) as docket:
            ref = await docket.save_graph(recording(0.0))
            with pytest.raises(errors.NotFound) as caught:
                await docket.start_run(ref, queue="nope", run_id="r1")
            assert caught.value.details["what"] == "queue"
            with pytest.raises(errors.NotFound):
                await docket.start_run(ref, queue="nope", idempotency_key="k1")
            for queue, priority in (("bad name!", None), (None, 101), (None, True), ("", 0)):
                with pytest.raises(errors.InvalidOptions):
                    await docket.start_run(ref, queue=queue, priority=priority)
            assert (await docket.list_runs()).runs == ()
            assert [s.config.name for s in await docket.queues()] == ["default"]

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", QUEUE_KINDS)
def test_the_graph_policies_are_the_default_and_start_run_overrides_them(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, []) as docket:
            graph = recording(0.0, policies={"queue": "reports", "priority": 9})
            ref = await docket.save_graph(graph)
            with pytest.raises(errors.NotFound):  # the policy's queue is not configured yet
                await docket.start_run(ref, run_id="early")
            assert (await docket.list_runs()).runs == ()
            await docket.configure_queue("reports")
            await docket.configure_queue("other")
            info = await docket.inspect_run((await docket.start_run(ref)).id)
            assert (info.queue, info.priority) == ("reports", 9)
            info = await docket.inspect_run((await docket.start_run(ref, queue="other")).id)
            assert (info.queue, info.priority) == ("other", 9)
            info = await docket.inspect_run((await docket.start_run(ref, priority=0)).id)
            assert (info.queue, info.priority) == ("reports", 0)

    asyncio.run(scenario())


def test_bad_graph_policies_fail_to_compile() -> None:
    async def scenario() -> None:
        async with docket_on("memory", []) as docket:
            for policies in ({"queue": "no spaces"}, {"priority": 500}, {"priority": "high"}):
                with pytest.raises(errors.InvalidGraph) as caught:
                    await docket.save_graph(recording(0.0, policies=policies))  # type: ignore[arg-type]
                found = caught.value.details["diagnostics"]
                assert isinstance(found, list)
                paths = [d["path"] for d in found if isinstance(d, dict)]
                assert paths == [f"/policies/{next(iter(policies))}"]

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", QUEUE_KINDS)
def test_children_and_forks_keep_their_queue_and_priority(kind: str) -> None:
    async def scenario() -> None:
        log: list[tuple[str, str]] = []
        async with docket_on(kind, log) as docket:
            await docket.configure_queue("family", execution_limit=1)
            await docket.save_graph(recording(0.0, graph_id="child"))
            parent_ref = await docket.save_graph(parent_of("child"))
            async with docket.worker(concurrency=4):
                parent = await docket.start_run(parent_ref, queue="family", priority=3)
                done = await docket.await_run(parent.id, timeout=60)
                assert done.status is RunStatus.DONE
                await wait_for(lambda: len(log) == 2)
            (child,) = await docket.children(parent.id)
            assert child.run is not None
            info = await docket.inspect_run(child.run.id)
            assert (info.queue, info.priority) == ("family", 3)
            fork = await docket.fork_run(parent.id, at=1)
            info = await docket.inspect_run(fork.id)
            assert (info.queue, info.priority) == ("family", 3)
            # the parent held the queue's only slot while its child ran after it parked
            assert next(s.running for s in await docket.queues() if s.config.name == "family") == 0

    asyncio.run(scenario())


def test_a_backend_without_queues_refuses_them_and_writes_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Docket(f"lmdb:///{tmp_path / 'db'}", nodes=NODES, context={"log": []}) as d:
            ref = await d.save_graph(recording(0.0))
            for queue, priority in (("billing", None), (None, 1), ("billing", 0)):
                with pytest.raises(errors.Unsupported):
                    await d.start_run(ref, queue=queue, priority=priority)
            with pytest.raises(errors.Unsupported):
                await d.save_graph(recording(0.0, graph_id="q", policies={"queue": "billing"}))
            with pytest.raises(errors.Unsupported):
                await d.save_graph(recording(0.0, graph_id="p", policies={"priority": 2}))
            with pytest.raises(errors.Unsupported):
                d.worker(queues={"billing"})
            with pytest.raises(errors.Unsupported):
                await d.queues()
            assert (await d.list_runs()).runs == ()
            # the defaults, said or not, work exactly as before
            ref = await d.save_graph(
                recording(0.0, graph_id="d", policies={"queue": "default", "priority": 0})
            )
            run = await d.start_run(ref, queue="default", priority=0)
            async with d.worker():
                assert (await d.await_run(run.id, timeout=60)).status is RunStatus.DONE

    asyncio.run(scenario())


def test_the_blocking_twin_and_the_cli_take_queue_and_priority(tmp_path: Path) -> None:
    with SyncDocket("memory://", nodes=NODES, context={"log": []}) as docket:
        docket.configure_queue("twin")
        ref = docket.save_graph(recording(0.0))
        run = docket.start_run(ref, queue="twin", priority=4)
        assert (docket.inspect_run(run.id).queue, docket.inspect_run(run.id).priority) == (
            "twin",
            4,
        )

    env = {"DOCKET_BACKEND": f"sqlite:///{tmp_path / 'app.db'}"}
    graph_file = tmp_path / "approval.json"
    graph_file.write_text(to_json(cli_app.GRAPH), encoding="utf-8")
    published = docket_cli("graph", "publish", str(graph_file), "--app", APP, env=env)
    assert published.returncode == 0, explain(published)
    started = docket_cli(
        "runs", "start", "approval", "--queue", "default", "--priority", "0", env=env
    )
    assert started.returncode == 0, explain(started)
    # sqlite: Unsupported until it declares queues, NotFound after; never a run
    refused = docket_cli("runs", "start", "approval", "--queue", "nope", env=env)
    assert refused.returncode != 0 and "queue" in refused.stderr, explain(refused)
    worker = docket_cli("worker", "--app", APP, "--queues", "nope", env=env)
    assert worker.returncode != 0 and "queue" in worker.stderr, explain(worker)
    empty = docket_cli("worker", "--app", APP, "--queues", ",", env=env)
    assert empty.returncode != 0 and "--queues" in empty.stderr, explain(empty)


@pytest.mark.parametrize("kind", QUEUE_KINDS)
def test_a_schedules_runs_wait_in_the_graphs_queue(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, []) as docket:
            await docket.configure_queue("nightly")
            ref = await docket.save_graph(recording(0.0, policies={"queue": "nightly"}))
            await docket.create_schedule("every", ref, cron="0 3 * * *")
            run = await docket.trigger_schedule("every")
            info = await docket.inspect_run(run.id)
            assert (info.queue, info.priority) == ("nightly", 0)
            lost = recording(0.0, graph_id="lost", policies={"queue": "gone", "priority": 1})
            await docket.create_schedule("lost", await docket.save_graph(lost), cron="0 3 * * *")
            with pytest.raises(errors.NotFound):
                await docket.trigger_schedule("lost")
            assert [r.id for r in (await docket.list_runs()).runs] == [run.id]

    asyncio.run(scenario())
