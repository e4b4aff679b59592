"""Shared pieces of the telemetry tests: a recording handler, graphs, a SQLite Docket."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from docket import Docket, Interrupt
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.schema import S
from docket.telemetry import TelemetryEvent

NODES = NodeRegistry()
user_log = logging.getLogger("tests.telemetry.user")


@NODES.node("shout")
def shout(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    user_log.info("shouting in %s", ctx.node_id)
    before = state.get("text", state.get("prefix", ""))
    return {"text": f"{before}{ctx.node_id}!"}


@NODES.node("ask")
def ask(state: NodeState, ctx: NodeContext) -> dict[str, str] | Interrupt:
    if "decision" not in state:
        return Interrupt("decision", schema=S.enum(["yes", "no"]))
    return {"text": f"decided {state['decision']}"}


def two_steps() -> Graph:
    """``a`` then ``b``: two supersteps, two node attempts."""
    return (
        GraphBuilder("two-steps")
        .input("prefix", S.string())
        .field("text", S.string())
        .node("a", "shout")
        .node("b", "shout")
        .edge("begin", START, "a")
        .edge("next", "a", "b")
        .edge("end", "b", FINISH)
        .output("text")
        .build()
    )


def asking() -> Graph:
    return (
        GraphBuilder("asking")
        .field("decision", S.enum(["yes", "no"]))
        .field("text", S.string())
        .node("ask", "ask")
        .edge("begin", START, "ask")
        .edge("end", "ask", FINISH)
        .output("text")
        .build()
    )


def sqlite(tmp_path: Path, **options: object) -> Docket:
    options.setdefault("nodes", NODES)
    return Docket(f"sqlite:///{tmp_path / 'runs.db'}", **options)  # type: ignore[arg-type]


class Recorder:
    """A handler keeping every event it receives."""

    def __init__(self) -> None:
        self.events: list[TelemetryEvent] = []

    def __call__(self, event: TelemetryEvent) -> None:
        self.events.append(event)

    def names(self, *, skip_reads: bool = True) -> list[str]:
        """Event names, store operations spelled ``docket.store.<op>.<phase>``; reads
        (``fetch_*``, ``inspect_run``, listing) left out when ``skip_reads``."""
        out: list[str] = []
        for event in self.events:
            if event.span == "docket.store.operation":
                operation = str(event.metadata.get("operation"))
                if skip_reads and operation.startswith(("fetch", "inspect", "list")):
                    continue
                out.append(f"docket.store.{operation}.{event.phase}")
            else:
                out.append(event.name)
        return out

    def named(self, name: str) -> list[TelemetryEvent]:
        return [e for e in self.events if e.name == name]


async def wait_for(predicate: Callable[[], object], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def subsequence(expected: list[str], actual: list[str]) -> bool:
    """Whether ``expected`` occurs in ``actual`` in order (other items may interleave)."""
    it = iter(actual)
    return all(any(item == seen for seen in it) for item in expected)
