"""One end-to-end child-run scenario, run on every backend by its own test module: a
parent in a tenant maps over four items, each item a child run, one child failing once
(so its item's retry asks for a second child), then joins; a real in-process worker with
several slots runs parents and children together.

What it checks is what the guarantees promise: the parent ends ``done`` with the
children's outputs in item order, exactly one child per ``child_started`` event (no
orphan, no second child for one attempt), every child in the parent's tenant and linked
to it, and a whole event history on every run.
"""

from __future__ import annotations

from typing import Any

from docket import Docket
from docket.graph.builder import GraphBuilder
from docket.graph.children import ChildSpec
from docket.graph.maps import MapSpec
from docket.graph.model import FINISH, START
from docket.graph.nodes import Failure, NodeContext, NodeRegistry, NodeState, RetryPolicy
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.records import PARENT_KEY, EventType, RunStatus
from docket.values import JSONDict
from tests.runtime.helpers import check_events

NODES = NodeRegistry()


@NODES.node("e2e.triple")
async def triple(state: NodeState, ctx: NodeContext) -> JSONDict | Failure:
    n = state["n"]
    assert isinstance(n, int)
    fail_once = ctx.application["fail_once"]
    assert isinstance(fail_once, set)
    if n in fail_once:
        fail_once.discard(n)
        return Failure(f"item {n} fails once")
    return {"out": n * 3}


@NODES.node("e2e.items")
def items(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {"items": [10, 20, 30, 40]}


CHILD = (
    GraphBuilder("e2e-child")
    .input("n", S.integer(), required=True)
    .field("out", S.integer())
    .node("work", "e2e.triple")
    .edge("a", START, "work")
    .edge("b", "work", FINISH)
    .output("out")
    .build()
)

PARENT = (
    GraphBuilder("e2e-parent")
    .field("items", S.list(S.integer()))
    .field("results", S.list(S.integer()), reducer=R.append())
    .node("items", "e2e.items")
    .node(
        "each",
        child=ChildSpec(graph="e2e-child", input={"n": "item"}, output={"results": "out"}),
        map=MapSpec(over="items", item="item"),
        retry=RetryPolicy(max_attempts=2),
    )
    .edge("a", START, "items")
    .edge("b", "items", "each")
    .edge("c", "each", FINISH)
    .output("results")
    .build()
)


def context() -> dict[str, Any]:
    return {"fail_once": {20}}


def options() -> dict[str, Any]:
    """The Docket options every backend's scenario uses (tenants required)."""
    return {"nodes": NODES, "context": context(), "poll_interval": 0.1, "tenant_mode": "required"}


async def run_scenario(docket: Docket, run_id: str = "parent-1", tenant: str = "acme") -> None:
    await docket.save_graph(CHILD, tenant_id=tenant)
    ref = await docket.save_graph(PARENT, tenant_id=tenant)
    async with docket.worker(concurrency=4):
        await docket.start_run(ref, run_id=run_id, tenant_id=tenant)
        done = await docket.await_run(run_id, timeout=120, tenant_id=tenant)
    assert done.status is RunStatus.DONE, done.failure
    assert done.output == {"results": [30, 60, 90, 120]}
    events = list(await docket.history(run_id, tenant_id=tenant))
    check_events(done, events)
    started = [e for e in events if e.type is EventType.CHILD_STARTED]
    ids = [str(e.payload["child_run_id"]) for e in started]
    assert len(ids) == 5 == len(set(ids)), ids  # four items, one retried
    page = await docket.list_runs(tenant_id=tenant, limit=100)
    children = {s.id for s in page.runs if s.id != run_id}
    assert children == set(ids), (children, ids)  # no orphan, no second child
    for ident in ids:
        child = await docket.fetch_run(ident, tenant_id=tenant)
        link = child.metadata[PARENT_KEY]
        assert isinstance(link, dict) and link["run_id"] == run_id
        check_events(child, list(await docket.history(ident, tenant_id=tenant)))
    failed = [
        i for i in ids if (await docket.fetch_run(i, tenant_id=tenant)).status is RunStatus.FAILED
    ]
    assert len(failed) == 1 and f"{run_id}:1:each[1]:1@" in failed[0], failed
    # another tenant sees none of it
    other = await docket.list_runs(tenant_id="other", limit=10)
    assert not other.runs
