"""Typed state: each node declares the fields it reads as a ``TypedDict``.

A node's ``state`` is a plain dict at run time. Annotated as ``NodeState`` its values are
``JSONValue`` (any JSON), so ``state["amount"] * 1.2`` needs a cast under
``mypy --strict``. Annotated with a ``TypedDict`` of the fields the node reads, every
access is typed, and ``@nodes.node`` still checks the signature: a state that is not a
mapping, a ``ctx`` that is not a ``NodeContext`` or a return that is no node result is a
type error. Fields that may be unwritten when the node runs are ``NotRequired``.

``tests/graph/test_typed_state.py`` runs ``mypy --strict`` on this file (clean) and on wrong
variants (refused). Runs in memory, no worker:

    python examples/typed_state.py
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from docket import FINISH, START, GraphBuilder, Interrupt, NodeContext, NodeRegistry, S, Update
from docket.testing import resolve_interrupt_inline, run_inline


class Expense(TypedDict):
    """What the nodes read: the graph's inputs and fields, by public id."""

    who: str
    amount: float
    decision: NotRequired[str]  # written by a person's answer, absent before
    gross: NotRequired[float]


nodes = NodeRegistry()


@nodes.node("expense.gross")
def gross(state: Expense, ctx: NodeContext) -> Update:
    return Update({"gross": round(state["amount"] * 1.2, 2)})


@nodes.node("expense.review")
def review(state: Expense, ctx: NodeContext) -> Update | Interrupt:
    if "decision" not in state:
        question = f"Pay {state.get('gross', 0.0):.2f} to {state['who']}?"
        return Interrupt("decision", schema=S.enum(["yes", "no"]), metadata={"question": question})
    return Update({"receipt": f"{state['decision']}: {state['who']}"})


@nodes.node("expense.notify")
async def notify(state: Expense, ctx: NodeContext) -> dict[str, list[str]]:
    return {"log": [f"{state['who']} told at step {ctx.step}"]}


graph = (
    GraphBuilder("typed_expense")
    .input("who", S.string(), required=True)
    .input("amount", S.float(min=0), required=True)
    .field("gross", S.float())
    .field("decision", S.enum(["yes", "no"]))
    .field("receipt", S.string())
    .field("log", S.list(S.string()))
    .node("gross", "expense.gross")
    .node("review", "expense.review")
    .node("notify", "expense.notify")
    .edge("begin", START, "gross")
    .edge("to_review", "gross", "review")
    .edge("to_notify", "review", "notify")
    .edge("end", "notify", FINISH)
    .output("receipt")
    .output("log")
    .build()
)


def main() -> None:
    paused = run_inline(graph, {"who": "ada", "amount": 100.0}, nodes=nodes)
    (interrupt,) = paused.run.open_interrupts.values()
    print(f"{paused.run.status}: {interrupt.metadata['question']}")
    done = resolve_interrupt_inline(graph, paused.run, interrupt.id, "yes", nodes=nodes)
    print(f"{done.run.status}: {done.run.output}")


if __name__ == "__main__":
    main()
