"""An ``--app`` for the queue CLI tests: every Docket it makes shares one memory backend,
so in-process ``docket queues`` commands see each other's writes (as a file would)."""

from __future__ import annotations

from docket import FINISH, START, Docket, GraphBuilder, NodeContext, NodeRegistry, NodeState, S
from docket.contract.memory import MemoryBackend
from docket.graph.model import Graph

NODES = NodeRegistry()


@NODES.node("queued.work")
def work(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    return {"done": "yes"}


def graph() -> Graph:
    return (
        GraphBuilder("queued")
        .field("done", S.string())
        .node("work", "queued.work")
        .edge("begin", START, "work")
        .edge("end", "work", FINISH)
        .build()
    )


BACKEND = MemoryBackend()


def create() -> Docket:
    return Docket(BACKEND, nodes=NODES)


def reset() -> MemoryBackend:
    global BACKEND
    BACKEND = MemoryBackend()
    return BACKEND
