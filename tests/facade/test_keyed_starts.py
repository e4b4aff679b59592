"""Deduplicated starts (``start_run(..., idempotency_key=...)``) on every backend: a key
used before returns its run, racing starters get one run, a finished run is still
returned, the key is free again once retention removed the run, and every refusal
(a run id taken without the key, a key of another graph, bad arguments) writes nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from docket import Docket, SyncDocket, errors
from docket._facade_keyed import IDEMPOTENCY_METADATA
from docket.contract.capabilities import Feature
from docket.graph.wire import to_json
from docket.records import EventType, RunStatus
from tests.cli import cli_app
from tests.cli.helpers import APP, docket_cli, explain
from tests.facade.history_app import NODES, asker, ticker
from tests.fuzz.backends import KINDS, OpenStore


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest) -> Iterator[OpenStore]:
    opened = OpenStore(str(request.param))
    try:
        yield opened
    finally:
        opened.close()


async def _everything(docket: Docket) -> tuple[object, ...]:
    page = await docket.list_runs(limit=1000)
    runs = sorted(page.runs, key=lambda r: r.id)
    return tuple([(r, await docket.history(r.id)) for r in runs])


async def _starts(docket: Docket, run_id: str) -> int:
    return sum(e.type is EventType.RUN_INITIALIZED for e in await docket.history(run_id))


def test_a_key_used_again_returns_its_run_and_racers_share_one(store: OpenStore) -> None:
    async def scenario() -> None:
        async with Docket(store.backend, nodes=NODES) as docket:
            ref = await docket.save_graph(ticker(2))
            first = await docket.start_run(ref, {"label": "one"}, idempotency_key="order-42")
            assert first.id == "order-42"
            assert first.metadata[IDEMPOTENCY_METADATA] == "order-42"
            again = await docket.start_run(ref, {"label": "two"}, idempotency_key="order-42")
            assert again.id == first.id and again.checkpoint_seq == first.checkpoint_seq
            assert again.channels == first.channels  # the second input was not used
            assert await _starts(docket, "order-42") == 1

            racers = await asyncio.gather(
                *(
                    docket.start_run(ref, {"label": f"r{i}"}, idempotency_key="race")
                    for i in range(8)
                )
            )
            assert {r.id for r in racers} == {"race"}
            assert await _starts(docket, "race") == 1
            assert all(r.channels == racers[0].channels for r in racers)

    asyncio.run(scenario())


def test_a_finished_run_is_returned_and_its_key_is_free_after_retention(
    store: OpenStore,
) -> None:
    async def scenario() -> None:
        async with Docket(store.backend, nodes=NODES) as docket:
            ref = await docket.save_graph(ticker(2))
            await docket.start_run(ref, idempotency_key="nightly")
            while (await docket.drain_due()).drained:
                pass
            done = await docket.fetch_run("nightly")
            assert done.status is RunStatus.DONE
            again = await docket.start_run(ref, idempotency_key="nightly")
            assert again.status is RunStatus.DONE and again.event_seq == done.event_seq
            if Feature.PRUNE not in docket.capabilities.features:
                return
            await docket.prune(runs_older_than=timedelta(0), until_done=True)
            with pytest.raises(errors.NotFound):
                await docket.fetch_run("nightly")
            fresh = await docket.start_run(ref, idempotency_key="nightly")
            assert fresh.status is RunStatus.RUNNING and fresh.checkpoint_seq == 1

    asyncio.run(scenario())


def test_refused_keyed_starts_write_nothing(store: OpenStore) -> None:
    async def scenario() -> None:
        async with Docket(store.backend, nodes=NODES) as docket:
            ref = await docket.save_graph(asker())
            other = await docket.save_graph(ticker(2))
            await docket.start_run(ref, run_id="plain")
            await docket.start_run(ref, idempotency_key="keyed")
            before = await _everything(docket)
            with pytest.raises(errors.Conflict, match="not started with idempotency key"):
                await docket.start_run(ref, idempotency_key="plain")
            with pytest.raises(errors.Conflict, match="graph 'hist_asker'"):
                await docket.start_run(other, idempotency_key="keyed")
            with pytest.raises(errors.Conflict):  # a keyed run's id is taken as any other
                await docket.start_run(ref, run_id="keyed")
            with pytest.raises(errors.InvalidOptions, match="not both"):
                await docket.start_run(ref, run_id="x", idempotency_key="y")
            for bad in ("", 7, None.__class__):
                with pytest.raises(errors.InvalidOptions, match="idempotency_key"):
                    await docket.start_run(ref, idempotency_key=bad)  # type: ignore[arg-type]
            with pytest.raises(errors.TooLarge):  # a key is a run id: at most 255 bytes
                await docket.start_run(ref, idempotency_key="k" * 256)
            assert await _everything(docket) == before

    asyncio.run(scenario())


def test_the_blocking_twin_and_the_cli_take_the_key(tmp_path: Path) -> None:
    with SyncDocket("memory://", nodes=NODES) as docket:
        ref = docket.save_graph(asker())
        one = docket.start_run(ref, idempotency_key="k")
        two = docket.start_run(ref, idempotency_key="k")
        assert one.id == two.id == "k" and len(docket.list_runs().runs) == 1

    env = {"DOCKET_BACKEND": f"sqlite:///{tmp_path / 'app.db'}"}
    graph_file = tmp_path / "approval.json"
    graph_file.write_text(to_json(cli_app.GRAPH), encoding="utf-8")
    published = docket_cli("graph", "publish", str(graph_file), "--app", APP, env=env)
    assert published.returncode == 0, explain(published)
    for _ in range(2):
        started = docket_cli("runs", "start", "approval", "--idempotency-key", "req-9", env=env)
        assert started.returncode == 0, explain(started)
        assert started.stdout == "run req-9 started: running (checkpoint 1)\n"
    both = docket_cli(
        "runs", "start", "approval", "--idempotency-key", "a", "--run-id", "b", env=env
    )
    assert both.returncode != 0 and "not both" in both.stderr, explain(both)
