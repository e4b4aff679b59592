"""Graphs and nodes of the state-history tests (facade and CLI).

``ticker``: one node that loops ``TICKS`` times, appending ``"<note>-<count>"`` to an
append-reducer list and counting, so a run crosses the base-every-32 line of history.
``asker``: waits on an interrupt, then writes what it saw of ``note``.
``picky``: fails permanently unless ``note`` is ``"fixed"``.
"""

from __future__ import annotations

import os

from docket import Docket
from docket.graph.builder import GraphBuilder
from docket.graph.guards import not_, version_at_least
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import Failure, Interrupt, NodeContext, NodeRegistry, NodeState
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.values import JSONDict

NODES = NodeRegistry()
TICKS = 40


@NODES.node("hist_tick")
def _tick(state: NodeState, ctx: NodeContext) -> JSONDict:
    count = state.get("count")
    n = count if isinstance(count, int) else 0
    return {"log": [f"{state.get('note')}-{n}"], "count": n + 1}


@NODES.node("hist_ask")
def _ask(state: NodeState, ctx: NodeContext) -> JSONDict | Interrupt:
    if state.get("answer") is None:
        return Interrupt("answer", schema=S.string(), id="question")
    return {"seen": f"{state.get('note')}/{state.get('answer')}"}


@NODES.node("hist_picky")
def _picky(state: NodeState, ctx: NodeContext) -> JSONDict | Failure:
    if state.get("note") != "fixed":
        return Failure("the note is not fixed", retryable=False)
    return {"seen": "fixed"}


def ticker(ticks: int = TICKS) -> Graph:
    return (
        GraphBuilder("hist_ticker")
        .input("label", S.string())
        .field("log", S.list(S.string()), reducer=R.append())
        .field("count", S.integer())
        .field("note", S.string(), default="start")
        .node("tick", "hist_tick")
        .edge("go", START, "tick")
        .edge("again", "tick", "tick", guard=not_(version_at_least("count", ticks)))
        .edge("done", "tick", FINISH, guard=version_at_least("count", ticks))
        .output("log")
        .build()
    )


def asker() -> Graph:
    return (
        GraphBuilder("hist_asker")
        .field("note", S.string(), default="start")
        .field("answer", S.string())
        .field("seen", S.string())
        .node("ask", "hist_ask")
        .edge("go", START, "ask")
        .edge("done", "ask", FINISH)
        .output("seen")
        .build()
    )


def picky() -> Graph:
    return (
        GraphBuilder("hist_picky")
        .field("note", S.string(), default="start")
        .field("seen", S.string())
        .node("picky", "hist_picky")
        .edge("go", START, "picky")
        .edge("done", "picky", FINISH)
        .output("seen")
        .build()
    )


def create() -> Docket:
    """The CLI tests' application (``--app tests.facade.history_app:create``)."""
    return Docket(os.environ["DOCKET_BACKEND"], nodes=NODES, poll_interval=0.05)
