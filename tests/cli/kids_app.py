"""A parent whose child run asks a person: ``purchase`` runs ``approval`` as a child, and
the child's node waits on an interrupt. The facade, CLI and console tests of a run's
children read it at each stage; ``create`` is the ``--app`` factory (``DOCKET_BACKEND``)."""

from __future__ import annotations

import os
from typing import Final

from docket import FINISH, START, Docket, GraphBuilder, Interrupt, NodeContext, NodeRegistry, S
from docket.graph.children import ChildSpec
from docket.graph.nodes import NodeState
from docket.values import JSONDict

NODES = NodeRegistry()
PARENT_ID: Final = "purchase-1"
QUESTION: Final = "Approve a purchase of 120?"


@NODES.node("kids.ask")
def ask(state: NodeState, ctx: NodeContext) -> JSONDict | Interrupt:
    if "decision" not in state:
        return Interrupt(
            "decision",
            schema=S.enum(["approved", "rejected"]),
            id="decision",
            metadata={"question": f"Approve a purchase of {state['amount']}?"},
        )
    return {"outcome": f"{state['decision']} {state['amount']}"}


CHILD = (
    GraphBuilder("approval")
    .input("amount", S.integer(), required=True)
    .field("decision", S.enum(["approved", "rejected"]))
    .field("outcome", S.string())
    .node("ask", "kids.ask")
    .edge("a", START, "ask")
    .edge("b", "ask", FINISH)
    .output("outcome")
    .build()
)

PARENT = (
    GraphBuilder("purchase")
    .input("amount", S.integer(), required=True)
    .field("verdict", S.string())
    .node(
        "approve",
        child=ChildSpec(
            graph="approval", input={"amount": "amount"}, output={"verdict": "outcome"}
        ),
    )
    .edge("a", START, "approve")
    .edge("b", "approve", FINISH)
    .output("verdict")
    .build()
)


def create() -> Docket:
    return Docket(os.environ["DOCKET_BACKEND"], nodes=NODES, poll_interval=0.2)
