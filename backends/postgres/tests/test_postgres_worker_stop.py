"""A worker stopped while PostgreSQL is down stops within its bounds.

Issue 18 asked whether a stopping worker waits on a broken database. It did, twice over:

* the claims of the drains it cancels were released one after the other, and with the
  server down each release waited out the pool's connection timeout (10 s), so a worker
  holding N runs took N x 10 s to stop. They now go together, for at most ``claim_ttl``
  (the claims expire by then anyway);
* a stop waited for the ``claim_due`` in flight, which waits out the same timeout for a
  connection. It is now given only what is left of ``shutdown_timeout``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable

import pytest
from docket_postgres import PostgresBackend
from docket_postgres.testing import ThrowawayPostgres

from docket import Docket
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.schema import S

NODES = NodeRegistry()
RUNS = 6
SHUTDOWN = 0.5
TTL = 2.0


@NODES.node("hang")
async def hang(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    entered = ctx.application["entered"]
    assert isinstance(entered, set)
    entered.add(ctx.run_id)
    await asyncio.sleep(3600)
    return {"out": "never"}


HANGING = (
    GraphBuilder("hanging")
    .field("out", S.string())
    .node("n", "hang")
    .edge("go", START, "n")
    .edge("end", "n", FINISH)
    .output("out")
    .build()
)


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_a_worker_stopped_while_the_server_is_down_releases_its_claims_together(
    pg_server: ThrowawayPostgres,
    schema_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    entered: set[str] = set()
    url = pg_server.url(schema=schema_name("stop"))

    down = False

    async def scenario() -> float:
        nonlocal down
        docket = Docket(
            url,
            nodes=NODES,
            context={"entered": entered},
            claim_ttl=TTL,
            shutdown_timeout=SHUTDOWN,
            poll_interval=0.2,
        )
        async with docket:
            ref = await docket.save_graph(HANGING)
            worker = docket.worker(concurrency=RUNS)
            worker.start()
            for index in range(RUNS):
                await docket.start_run(ref, run_id=f"r{index}")
            await _until(lambda: len(entered) == RUNS, f"all {RUNS} runs to enter their node")
            down = True
            await asyncio.to_thread(pg_server.stop_server, mode="immediate")
            stopping = time.monotonic()
            await worker.stop()
            assert worker.stats.released_at_shutdown == RUNS
        return time.monotonic() - stopping

    caplog.set_level(logging.WARNING, logger="docket.worker")
    try:
        elapsed = asyncio.run(scenario())
    finally:
        if down:  # the session's other tests use this server
            pg_server.start_server()
    print(f"\nstopped with {RUNS} claims to release and the server down: {elapsed:.1f} s")
    # releases still waiting for a connection when claim_ttl ran out are given up together
    # (how many depends on whether a pooled connection noticed the server go before its send)
    assert re.search(r"\d+ claims were not released within claim_ttl", caplog.text), caplog.text
    # a failure guard only; one release after another took RUNS x 10 s
    assert elapsed < SHUTDOWN + TTL + 15


def test_a_worker_stopped_while_its_poll_waits_for_a_connection_does_not_wait_it_out(
    pg_server: ThrowawayPostgres, schema_name: Callable[[str], str]
) -> None:
    url = pg_server.url(schema=schema_name("stop"))
    down = False

    async def scenario() -> float:
        nonlocal down
        # a long pool timeout: a stop that waited for the poll would take about that long
        backend = PostgresBackend.from_url(url, pool_timeout=60.0)
        docket = Docket(backend, nodes=NODES, shutdown_timeout=SHUTDOWN, poll_interval=0.1)
        async with docket:
            pool = backend._engine.pool  # the test watches the pool's queue of waiting requests
            assert pool is not None
            worker = docket.worker()
            worker.start()
            await _until(lambda: worker.stats.polls >= 2, "the worker to poll")
            down = True
            await asyncio.to_thread(pg_server.stop_server, mode="immediate")
            # the worker's only request is its poll (it holds no runs)
            await _until(
                lambda: pool.get_stats().get("requests_waiting", 0) > 0,
                "a poll waiting for a connection",
            )
            stopping = time.monotonic()
            await worker.stop()
            return time.monotonic() - stopping

    try:
        elapsed = asyncio.run(scenario())
    finally:
        if down:  # the session's other tests use this server
            pg_server.start_server()
    print(f"\nstopped during a poll waiting for a connection: {elapsed:.1f} s")
    assert elapsed < 30  # a failure guard only; waiting the poll out took 60 s
