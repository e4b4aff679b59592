"""The ``durable`` promise of the LMDB plugin: what was acknowledged reads back after the
store is closed and reopened, and after the process holding it is SIGKILLed."""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

from docket import FINISH, START, Docket, GraphBuilder, Interrupt, NodeContext, NodeRegistry, S
from docket.contract import (
    Backend,
    ClaimBatch,
    ClaimPolicy,
    EventListQuery,
    Feature,
    GraphListQuery,
    RunListQuery,
)
from docket.contract.registry import from_url
from docket.records import SYSTEM, TENANTLESS, Run, RunInfo, RunStatus, owner_scope

nodes = NodeRegistry()


@nodes.node("ask")
def ask(state: dict[str, object], ctx: NodeContext) -> Interrupt | dict[str, object]:
    if "answer" not in state:
        return Interrupt("answer", schema=S.string())
    return {"echo": state["answer"]}


graph = (
    GraphBuilder("ask")
    .field("answer", S.string())
    .field("echo", S.string())
    .node("ask", "ask")
    .edge("begin", START, "ask")
    .edge("end", "ask", FINISH)
    .output("echo")
    .build()
)


async def snapshot(backend: Backend) -> dict[str, object]:
    """Everything observable: listings, every run's state and events, the graph versions."""
    page = await backend.runs.list_runs(SYSTEM, RunListQuery(limit=100))
    out: dict[str, object] = {"runs": page}
    for summary in page.runs:
        owner = owner_scope(summary.tenant_id)
        out[f"info {summary.id}"] = await backend.runs.inspect_run(owner, summary.id)
        out[f"events {summary.id}"] = await backend.events.list_events(
            owner, summary.id, EventListQuery(limit=1000)
        )
    out["graphs"] = await backend.graphs.list_graph_versions(
        TENANTLESS, "ask", GraphListQuery(limit=10)
    )
    return out


def test_everything_reads_back_after_close_and_reopen(tmp_path: Path) -> None:
    url = f"lmdb://{tmp_path}/store"

    async def write() -> dict[str, object]:
        async with Docket(url, nodes=nodes, poll_interval=0.2) as docket:
            assert Feature.DURABLE in docket.backend.capabilities().features
            ref = await docket.save_graph(graph)
            async with docket.worker():
                for run_id in ("waiting", "done"):
                    await docket.start_run(ref, {}, run_id=run_id)
                    run = await docket.await_run(run_id, timeout=30)
                    assert run.status is RunStatus.WAITING
                (interrupt_id,) = run.open_interrupts
                await docket.resolve_interrupt("done", interrupt_id, "hi")
                run = await docket.await_run("done", timeout=30)
                assert run.status is RunStatus.DONE
            for run_id in ("due", "claimed"):  # no worker now: they stay due
                await docket.start_run(ref, {}, run_id=run_id)
            claim = await docket.backend.runs.claim_due(
                ClaimPolicy(limit=1, orphan_ttl=timedelta(hours=1), max_claim_attempts=5)
            )
            assert isinstance(claim, ClaimBatch) and len(claim.leases) == 1
            return await snapshot(docket.backend)

    async def read() -> tuple[dict[str, object], ClaimBatch]:
        backend = from_url(url)
        await backend.open()
        try:
            seen = await snapshot(backend)
            claim = await backend.runs.claim_due(
                ClaimPolicy(limit=5, orphan_ttl=timedelta(hours=1), max_claim_attempts=5)
            )
            assert isinstance(claim, ClaimBatch)
            return seen, claim
        finally:
            await backend.close()

    before = asyncio.run(write())
    after, claim = asyncio.run(read())
    assert after == before
    infos = [v for v in before.values() if isinstance(v, RunInfo)]
    assert sorted(i.run.status for i in infos) == sorted(
        [RunStatus.DONE, RunStatus.WAITING, RunStatus.RUNNING, RunStatus.RUNNING]
    )
    # the due index came back too: the one run left due is claimable, the other is held
    assert len(claim.leases) == 1


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[2])
    from test_lmdb_durable import graph, nodes
    from docket import Docket

    async def main():
        async with Docket(sys.argv[1], nodes=nodes) as docket:
            ref = await docket.save_graph(graph)
            run = await docket.start_run(ref, {}, run_id="acknowledged")
            print(run.checkpoint_seq, flush=True)
            sys.stdin.read()  # held open until the parent kills this process

    asyncio.run(main())
    """
)


def test_an_acknowledged_start_survives_a_sigkill(tmp_path: Path) -> None:
    url = f"lmdb://{tmp_path}/store"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(Path(__file__).parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    # wait for the acknowledgement (or the child's end), never forever
    ready, _, _ = select.select([child.stdout], [], [], 180)
    line = child.stdout.readline() if ready else ""
    os.kill(child.pid, signal.SIGKILL)
    code = child.wait(timeout=60)
    stderr = child.stderr.read()
    assert line.strip() == "1", f"child exit {code}, stdout {line!r}, stderr:\n{stderr[-3000:]}"
    assert code == -signal.SIGKILL, f"child exit {code}, stderr:\n{stderr[-3000:]}"

    async def read() -> Run | object:
        backend = from_url(url)
        await backend.open()
        try:
            return await backend.runs.fetch_run(TENANTLESS, "acknowledged")
        finally:
            await backend.close()

    run = asyncio.run(read())
    assert isinstance(run, Run) and run.checkpoint_seq == 1 and run.status is RunStatus.RUNNING
