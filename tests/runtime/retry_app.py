"""The application the failed-run retry test runs with ``docket worker --app
tests.runtime.retry_app:create`` (imported in each worker process).

A three-node chain ``first -> second -> third``. Each node appends one line
``<node> <attempt> <pid>`` to ``$DOCKET_TEST_LOG_DIR/executions.log`` when it starts, so
the test can count executions across processes. ``second`` raises until the file
``$DOCKET_TEST_FLAG`` exists (the operator's "fix").
"""

from __future__ import annotations

import os
from pathlib import Path

from docket import FINISH, START, Docket, GraphBuilder, NodeContext, NodeRegistry, NodeState, S
from docket.graph.nodes import RetryPolicy

NODES = NodeRegistry()


def _executed(ctx: NodeContext) -> None:
    log = Path(os.environ["DOCKET_TEST_LOG_DIR"]) / "executions.log"
    with log.open("a", encoding="utf-8") as out:
        out.write(f"{ctx.node_id} {ctx.attempt} {os.getpid()}\n")


@NODES.node("retry.first")
def first(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    _executed(ctx)
    return {"a": "first"}


@NODES.node("retry.second")
def second(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    _executed(ctx)
    if not Path(os.environ["DOCKET_TEST_FLAG"]).exists():
        raise RuntimeError("the flag file is missing: second is broken")
    return {"b": f"{state['a']}+second"}


@NODES.node("retry.third")
def third(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    _executed(ctx)
    return {"c": f"{state['b']}+third"}


GRAPH = (
    GraphBuilder("retry_chain")
    .field("a", S.string())
    .field("b", S.string())
    .field("c", S.string())
    .node("first", "retry.first")
    .node("second", "retry.second", retry=RetryPolicy(2, 0))
    .node("third", "retry.third")
    .edge("to_first", START, "first")
    .edge("to_second", "first", "second")
    .edge("to_third", "second", "third")
    .edge("done", "third", FINISH)
    .output("c")
    .build()
)


def create() -> Docket:
    # a long claim TTL: nothing here crashes, and a claim expiring under load would re-run a
    # superstep (at least once) and blur the execution count the test asserts
    return Docket(os.environ["DOCKET_BACKEND"], nodes=NODES, poll_interval=0.2, claim_ttl=60.0)
