"""Quickstart: an expense approval that waits for a person, on a SQLite file.

A worker runs inside this script (in the background); the run pauses on an interrupt,
the script answers it, the run finishes, and the script prints the output and the run's
event timeline as stored in the database.

    python examples/quickstart.py          (or: make demo)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from docket import (
    FINISH,
    START,
    GraphBuilder,
    Interrupt,
    NodeContext,
    NodeRegistry,
    NodeState,
    R,
    S,
    SyncDocket,
    Update,
)
from docket.records import Event, EventType

nodes = NodeRegistry()


@nodes.node("expense.review")
def review(state: NodeState, ctx: NodeContext) -> Update | Interrupt:
    """Small expenses pass; anything larger waits for a person's decision."""
    amount, limit = state["amount"], ctx.config["auto_approve_below"]
    assert isinstance(amount, float) and isinstance(limit, int | float)  # schemas say so
    if amount < limit:
        return Update({"decision": "approved", "log": [f"auto-approved at step {ctx.step}"]})
    if "decision" not in state:
        return Interrupt(
            "decision", schema=S.enum(["approved", "rejected"]), id=f"approval-{ctx.run_id}"
        )
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


def describe(event: Event) -> str:
    if event.type is EventType.CHECKPOINT_COMMITTED:
        return f"checkpoint {event.metadata['checkpoint_seq']}: {event.metadata['checkpoint_type']}"
    return event.node_id or event.channel_id or ""


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="docket-quickstart-") as tmp:
        database = Path(tmp) / "quickstart.db"
        print(f"backend: sqlite file {database.name} (in a temporary directory)")
        with SyncDocket(f"sqlite:///{database}", nodes=nodes, poll_interval=0.5) as docket:
            ref = docket.save_graph(graph)
            print(f"published {ref.graph_id} {ref.graph_hash[:16]}")
            docket.start_worker()

            run = docket.start_run(ref, {"who": "ada", "amount": 420.0}, run_id="expense-1")
            print(f"started: run {run.id} is {run.status} (checkpoint {run.checkpoint_seq})")
            run = docket.await_run(run.id, timeout=30)
            (interrupt,) = run.open_interrupts.values()
            print(
                f"paused: run {run.id} is {run.status}, interrupt {interrupt.id!r} "
                f"asks {interrupt.node_id!r} for a {interrupt.resume_channel!r}"
            )

            docket.resolve_interrupt(run.id, interrupt.id, "approved")
            print("resolved: a person answered 'approved'")
            run = docket.await_run(run.id, timeout=30)
            print(f"finished: run {run.id} is {run.status} (checkpoint {run.checkpoint_seq})")
            print(f"output: {run.output}")
            stats = docket.stop_worker()
            assert stats is not None
            print(f"worker: {stats.leases} claims, {stats.commits} commits")

            print("timeline (read back from the database):")
            for event in docket.history(run.id):
                print(f"  {event.seq:>3}  step {event.step}  {event.type:<22} {describe(event)}")


if __name__ == "__main__":
    main()
