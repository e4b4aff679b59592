"""A real graph runs through ``Docket`` on ``lmdb://``: start, pause, resolve, finish."""

from __future__ import annotations

import asyncio
from pathlib import Path

from docket import (
    FINISH,
    START,
    Docket,
    GraphBuilder,
    Interrupt,
    NodeContext,
    NodeRegistry,
    NodeState,
    S,
    Update,
)
from docket.contract.registry import available
from docket.records import EventType, RunStatus

nodes = NodeRegistry()


@nodes.node("review")
def review(state: NodeState, ctx: NodeContext) -> Update | Interrupt:
    if "decision" not in state:
        return Interrupt("decision", schema=S.enum(["approved", "rejected"]))
    return Update({"receipt": f"{state['decision']}: {state['amount']}"})


graph = (
    GraphBuilder("expense")
    .input("amount", S.float(), required=True)
    .field("decision", S.enum(["approved", "rejected"]))
    .field("receipt", S.string())
    .node("review", "review")
    .edge("begin", START, "review")
    .edge("end", "review", FINISH)
    .output("receipt")
    .build()
)


def test_the_plugin_is_found_through_its_entry_point() -> None:
    assert "lmdb" in available()
    assert available()["lmdb"].schemes == ("lmdb",)


def test_the_readme_quickstart_runs_on_lmdb(tmp_path: Path) -> None:
    async def main() -> None:
        async with Docket(f"lmdb://{tmp_path}/app", nodes=nodes, poll_interval=0.2) as docket:
            ref = await docket.save_graph(graph)
            async with docket.worker():
                run = await docket.start_run(ref, {"amount": 420.0}, run_id="expense-1")
                run = await docket.await_run(run.id, timeout=30)
                assert run.status is RunStatus.WAITING
                (interrupt_id,) = run.open_interrupts
                await docket.resolve_interrupt(run.id, interrupt_id, "approved")
                run = await docket.await_run(run.id, timeout=30)
            assert run.status is RunStatus.DONE
            assert run.output == {"receipt": "approved: 420.0"}
            history = await docket.history(run.id)
            assert [e.seq for e in history] == list(range(1, len(history) + 1))
            assert EventType.INTERRUPT_RESOLVED in {e.type for e in history}

    asyncio.run(main())
