"""Quickstart: an approval workflow that pauses for a human and then finishes.

Runs inline (no storage, no workers) through the same pure core a worker uses; every
proposal the core makes is committed to the in-memory reference backend, so what you see
is exactly what a durable backend would store.

    python examples/quickstart.py
"""

from __future__ import annotations

from datetime import UTC, datetime

from docket.clock import ManualClock
from docket.contract.memory import MemoryBackend
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START
from docket.graph.nodes import Interrupt, NodeContext, NodeRegistry, NodeState, Update
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.records import Run
from docket.testing import InlineResult, resolve_interrupt_inline, run_inline

nodes = NodeRegistry()


@nodes.node("expense.review")
def review(state: NodeState, ctx: NodeContext) -> Update | Interrupt:
    """Small expenses pass; anything larger waits for a person's decision."""
    amount, limit = state["amount"], ctx.config["auto_approve_below"]
    assert isinstance(amount, float) and isinstance(limit, int | float)  # schemas say so
    if amount < limit:
        return Update({"decision": "approved", "log": [f"auto-approved at step {ctx.step}"]})
    if "decision" not in state:
        return Interrupt("decision", schema=S.enum(["approved", "rejected"]))
    return Update({"log": [f"a person decided: {state['decision']}"]})


@nodes.node("expense.settle")
def settle(state: NodeState, ctx: NodeContext) -> Update:
    outcome = "paid" if state["decision"] == "approved" else "declined"
    return Update({"receipt": f"{outcome} {state['amount']} for {state['who']}"})


graph = (
    GraphBuilder("expense-approval")
    .input("who", S.string(), required=True)
    .input("amount", S.float(min=0), required=True)
    .field("decision", S.enum(["approved", "rejected"]))
    .field("log", S.list(S.string()), reducer=R.append())
    .field("receipt", S.string())
    .node("review", "expense.review", config={"auto_approve_below": 100})
    .node("settle", "expense.settle")
    .edge("begin", START, "review")
    .edge("decided", "review", "settle")
    .edge("end", "settle", FINISH)
    .output("receipt")
    .output("log")
    .build()
)


def timeline(result: InlineResult) -> None:
    for event in result.events:
        where = event.node_id or event.channel_id or ""
        print(f"  {event.seq:>3}  step {event.step}  {event.type:<22} {where}")


def show(title: str, run: Run) -> None:
    print(f"{title}: run {run.id} is {run.status} (checkpoint {run.checkpoint_seq})")


def main() -> None:
    clock = ManualClock(datetime.now(UTC))  # one clock for the runner and the store
    store = MemoryBackend(clock=clock)  # every proposal is committed here, as a worker would
    paused = run_inline(
        graph, {"who": "ada", "amount": 420.0}, nodes=nodes, clock=clock, commit_to=store
    )
    show("started", paused.run)
    (interrupt_id,) = paused.run.interrupts
    print(f"  waiting on interrupt {interrupt_id!r} for a decision")
    done = resolve_interrupt_inline(
        graph, paused.run, interrupt_id, "approved", nodes=nodes, clock=clock, commit_to=store
    )
    show("resolved", done.run)
    print(f"output: {done.run.output}")
    print("timeline:")
    timeline(paused)
    timeline(done)


if __name__ == "__main__":
    main()
