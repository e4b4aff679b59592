"""Nodes, graphs and helpers of the named-queue tests (runtime and facade).

``record``: sleeps ``config["seconds"]`` between appending ``("start", run_id)`` and
``("end", run_id)`` to ``ctx.application["log"]``, so a test computes from the log how
many runs executed at once. ``QUEUE_KINDS``: the backends of ``tests.fuzz.backends``
that declare ``Feature.QUEUES`` (read from their capabilities without opening them), so
these tests run on every backend as soon as it declares queues.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from typing import Final

from docket import Docket
from docket.contract.capabilities import Feature
from docket.contract.registry import from_url
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.schema import S
from docket.values import JSONValue
from tests.fuzz.backends import KINDS, backend_url

NODES = NodeRegistry()

#: What a backend of each kind is, for reading its declared features (never opened).
_PROBES: Final = {
    "memory": "memory://",
    "sqlite": f"sqlite:///{tempfile.gettempdir()}/docket-queue-probe.db",
    "postgres": "postgresql://probe@127.0.0.1:1/probe",
    "redis": "redis://127.0.0.1:1/0",
}


def declares_queues(kind: str) -> bool:
    return Feature.QUEUES in from_url(_PROBES[kind]).capabilities().features


QUEUE_KINDS: Final = tuple(kind for kind in KINDS if declares_queues(kind))


@NODES.node("record")
async def _record(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    log = ctx.application["log"]
    assert isinstance(log, list)
    log.append(("start", ctx.run_id))
    try:
        seconds = ctx.config.get("seconds", 0.0)
        assert isinstance(seconds, int | float)
        await asyncio.sleep(seconds)
    finally:
        log.append(("end", ctx.run_id))
    return {"out": ctx.run_id}


def recording(
    seconds: float, *, graph_id: str = "rec", policies: dict[str, JSONValue] | None = None
) -> Graph:
    builder = GraphBuilder(graph_id, policies=policies).field("out", S.string())
    builder.node("work", "record", config={"seconds": seconds})
    return builder.edge("go", START, "work").edge("end", "work", FINISH).output("out").build()


def overlap(log: list[tuple[str, str]]) -> int:
    """The most runs between their start and end at once, from the log's order."""
    now = most = 0
    for kind, _ in log:
        if kind == "start":
            now += 1
            most = max(most, now)
        elif kind == "end":
            now -= 1
    return most


def starts(log: list[tuple[str, str]]) -> list[str]:
    return [run_id for kind, run_id in log if kind == "start"]


def docket_on(kind: str, log: list[tuple[str, str]], **settings: object) -> Docket:
    settings.setdefault("poll_interval", 0.1)
    settings.setdefault("queue_refresh", 0.1)
    return Docket(backend_url(kind), nodes=NODES, context={"log": log}, **settings)  # type: ignore[arg-type]


async def wait_for(predicate: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


async def running(docket: Docket, queue: str) -> int:
    """The slots held in ``queue`` now."""
    return next(s.running for s in await docket.queues() if s.config.name == queue)
