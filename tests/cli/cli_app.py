"""The application the CLI tests point ``--app`` at: an approval graph and its nodes."""

from __future__ import annotations

import os

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
)

NODES = NodeRegistry()


@NODES.node("approval.ask")
def ask(state: NodeState, ctx: NodeContext) -> dict[str, str] | Interrupt:
    if "decision" not in state:
        return Interrupt(
            "decision",
            schema=S.enum(["approved", "rejected"]),
            id="decision",
            metadata={"question": "Approve the request?"},
        )
    return {"outcome": f"the answer was {state['decision']}"}


GRAPH = (
    GraphBuilder("approval")
    .field("decision", S.enum(["approved", "rejected"]))
    .field("outcome", S.string())
    .node("ask", "approval.ask")
    .edge("go", START, "ask")
    .edge("end", "ask", FINISH)
    .output("outcome")
    .build()
)


def create() -> Docket:
    return Docket(os.environ["DOCKET_BACKEND"], nodes=NODES, poll_interval=0.2)
