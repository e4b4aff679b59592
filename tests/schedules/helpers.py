"""A one-node graph for schedule tests, and a Docket over a memory backend on a manual clock."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from docket_sqlite import SQLiteBackend

from docket import FINISH, START, GraphBuilder, NodeContext, NodeRegistry, NodeState, S, Update
from docket.clock import ManualClock
from docket.contract.memory import MemoryBackend
from docket.contract.protocols import Backend
from docket.facade import Docket
from docket.graph.model import Graph

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

nodes = NodeRegistry()


@nodes.node("report.build")
def build(state: NodeState, ctx: NodeContext) -> Update:
    return Update({"report": f"report for {state['team']}"})


def report_graph(graph_id: str = "report") -> Graph:
    return (
        GraphBuilder(graph_id)
        .input("team", S.string(), required=True)
        .field("report", S.string())
        .node("build", "report.build")
        .edge("begin", START, "build")
        .edge("end", "build", FINISH)
        .output("report")
        .build()
    )


def manual_docket(
    clock: ManualClock | None = None, *, sqlite: Path | None = None
) -> tuple[Docket, Backend, ManualClock]:
    """A Docket on a manual clock over a memory backend, or over a SQLite file."""
    clock = clock or ManualClock(T0)
    backend: Backend = (
        MemoryBackend(clock=clock) if sqlite is None else SQLiteBackend(sqlite, clock=clock)
    )
    return Docket(backend, nodes=nodes, poll_interval=0.05, claim_ttl=2), backend, clock
