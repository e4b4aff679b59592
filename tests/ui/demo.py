"""A small application and prepared runs for the console tests and the docs' screenshots.

``expense``: intake fans out to two checks that join before a person's review (an
interrupt with an object schema), then a guarded branch pays or notifies. ``report``: one
node; :func:`poison_a_run` makes a run of it poisoned the way production does — a worker
claims it and dies, the claim expires, and the next claim exceeds ``max_claim_attempts``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from docket_sqlite import SQLiteBackend

from docket import (
    FINISH,
    START,
    Docket,
    Failure,
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
from docket.clock import ManualClock
from docket.contract.proposals import ClaimPolicy
from docket.graph.guards import equals, path
from docket.graph.model import Graph
from docket.records import GraphRef, RunStatus

nodes = NodeRegistry()


@nodes.node("expense.intake")
def intake(state: NodeState, ctx: NodeContext) -> Update:
    return Update({"checks": [f"received from {state['who']}"]})


@nodes.node("expense.fraud")
def fraud(state: NodeState, ctx: NodeContext) -> Update:
    return Update({"checks": ["fraud check passed"]})


@nodes.node("expense.budget")
def budget(state: NodeState, ctx: NodeContext) -> Update:
    return Update({"checks": [f"budget left after {state['amount']}"]})


REVIEW_SCHEMA = S.object(
    {
        "decision": S.enum(["approved", "rejected"], required=True),
        "note": S.string(max_length=200),
    }
)


@nodes.node("expense.review")
def review(state: NodeState, ctx: NodeContext) -> Update | Interrupt:
    if "review" not in state:
        return Interrupt(
            "review",
            schema=REVIEW_SCHEMA,
            id="approval",
            metadata={"question": f"Approve {state['amount']} for {state['who']}?"},
        )
    return Update({"checks": ["reviewed by a person"]})


@nodes.node("expense.pay")
def pay(state: NodeState, ctx: NodeContext) -> Update:
    return Update({"receipt": f"paid {state['amount']} to {state['who']}"})


@nodes.node("expense.notify")
def notify(state: NodeState, ctx: NodeContext) -> Update:
    return Update({"receipt": f"declined {state['amount']} for {state['who']}"})


@nodes.node("report.build")
def build_report(state: NodeState, ctx: NodeContext) -> Update | Failure:
    if state["day"] == "1970-01-01":
        return Failure("no sales data for that day", retryable=False)
    return Update({"report": f"report for {state['day']}"})


def expense_graph() -> Graph:
    decided = "review"
    return (
        GraphBuilder("expense", name="Expense approval")
        .input("who", S.string(), required=True)
        .input("amount", S.float(min=0), required=True)
        .field("review", REVIEW_SCHEMA)
        .field("checks", S.list(S.string()), reducer=R.append())
        .field("receipt", S.string())
        .node("intake", "expense.intake")
        .node("fraud_check", "expense.fraud")
        .node("budget_check", "expense.budget")
        .node("review", "expense.review")
        .node("pay", "expense.pay")
        .node("notify", "expense.notify")
        .edge("begin", START, "intake")
        .edge("to_fraud", "intake", "fraud_check")
        .edge("to_budget", "intake", "budget_check")
        .edge("checked", ["fraud_check", "budget_check"], "review")
        .edge(
            "approved",
            "review",
            "pay",
            guard=equals(path(decided, ["decision"]), "approved"),
            label="approved",
        )
        .edge(
            "rejected",
            "review",
            "notify",
            guard=equals(path(decided, ["decision"]), "rejected"),
            label="rejected",
        )
        .edge("paid", "pay", FINISH)
        .edge("notified", "notify", FINISH)
        .output("receipt")
        .output("checks")
        .build()
    )


def report_graph() -> Graph:
    return (
        GraphBuilder("report")
        .input("day", S.string(), required=True)
        .field("report", S.string())
        .node("build", "report.build")
        .edge("begin", START, "build")
        .edge("end", "build", FINISH)
        .output("report")
        .build()
    )


def url(database: Path) -> str:
    return f"sqlite:///{database}"


def publish(database: Path) -> tuple[GraphRef, GraphRef]:
    with SyncDocket(url(database), nodes=nodes) as docket:
        expense = docket.save_graph(expense_graph())
        report = docket.save_graph(report_graph())
    return expense, report


def waiting_expense(database: Path, run_id: str, who: str, amount: float) -> None:
    """Start an expense run and drain it until it waits for the review."""
    with SyncDocket(url(database), nodes=nodes) as docket:
        docket.start_run("expense", {"who": who, "amount": amount}, run_id=run_id)
        docket.drain_due()
        assert docket.fetch_run(run_id).status is RunStatus.WAITING


def poison_a_run(database: Path, run_id: str) -> None:
    """A worker claims the run and dies; once the claim expires the next claim exceeds
    ``max_claim_attempts=1`` and the backend poisons the run."""

    async def scenario() -> None:
        clock = ManualClock(datetime.now(UTC) - timedelta(seconds=30))
        backend = SQLiteBackend(database, clock=clock)
        async with Docket(backend, nodes=nodes, max_claim_attempts=1, claim_ttl=5) as docket:
            await docket.start_run("report", {"day": "2026-11-29"}, run_id=run_id)
            policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=5), max_claim_attempts=1)
            await backend.runs.claim_due(policy)  # the worker that dies
            clock.advance(timedelta(seconds=6))
            summary = await docket.drain_due()
            assert [p.run_id for p in summary.poisoned] == [run_id], summary
            assert (await docket.inspect_run(run_id)).poisoned
        await backend.close()

    asyncio.run(scenario())


def application() -> Docket:
    """The ``--app`` target of the CLI tests (backend from ``$DOCKET_BACKEND``)."""
    return Docket(os.environ.get("DOCKET_BACKEND", "memory://"), nodes=nodes, poll_interval=0.1)


# -- a node that emits while it runs (tests/ui/test_browser_live.py) ---------------------

#: The gates the live browser test opens: ``speak`` waits for TALK_GO before it emits its
#: tokens, then for TALK_DONE before it returns (threading events: the console serves in
#: a thread of the test's process, and sync nodes run in worker threads).
TALK_GO = threading.Event()
TALK_DONE = threading.Event()
TALK_TOKENS = ("Hello", ", ", "live", " world")


@nodes.node("talk.speak")
def speak(state: NodeState, ctx: NodeContext) -> Update:
    TALK_GO.wait(60)
    for token in TALK_TOKENS:
        ctx.emit(token, kind="token")
    TALK_DONE.wait(60)
    return Update({"said": "".join(TALK_TOKENS)})


def talk_graph() -> Graph:
    return (
        GraphBuilder("talk")
        .field("said", S.string())
        .node("speak", "talk.speak")
        .edge("begin", START, "speak")
        .edge("end", "speak", FINISH)
        .output("said")
        .build()
    )
