"""``docket runs show`` on a failed run, the real command in a subprocess: the failure's
code and message, then per failed node the exception's type and message, the last lines
of its traceback and a ``Failure``'s details; ``--json`` has every byte."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from docket import FINISH, START, Docket, Failure, GraphBuilder, NodeContext, NodeRegistry, S
from docket.graph.nodes import NodeState
from docket.records import RunStatus
from tests.cli.test_cli_runs import docket_cli

NODES = NodeRegistry()


def _level(n: int) -> None:
    if n == 0:
        raise LookupError("no price for sku-42")
    _level(n - 1)


@NODES.node("price")
def price(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    _level(12)  # deeper than the lines show prints
    return {}


@NODES.node("reserve")
def reserve(state: NodeState, ctx: NodeContext) -> Failure:
    return Failure("out of stock", retryable=False, details={"sku": "sku-42", "left": 0})


GRAPH = (
    GraphBuilder("order")
    .field("out", S.string())
    .node("price", "price")
    .node("reserve", "reserve")
    .edge("p", START, "price")
    .edge("r", START, "reserve")
    .edge("pe", "price", FINISH)
    .edge("re", "reserve", FINISH)
    .build()
)


def failed_run(url: str) -> str:
    async def go() -> str:
        async with Docket(url, nodes=NODES) as docket:
            ref = await docket.save_graph(GRAPH)
            run = await docket.start_run(ref, run_id="order-1")
            await docket.drain_due()
            assert (await docket.fetch_run(run.id)).status is RunStatus.FAILED
            return run.id

    return asyncio.run(go())


def test_runs_show_prints_what_went_wrong_per_failed_node(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    run_id = failed_run(url)
    shown = docket_cli("runs", "show", run_id, "--backend", url)
    assert shown.returncode == 0, shown.stderr[-2000:]
    out = shown.stdout
    assert "failure  node_failed: nodes price, reserve failed permanently" in out
    assert "  node price: exception: LookupError: no price for sku-42" in out
    assert "    raised LookupError: no price for sku-42" in out
    assert "  node reserve: error: out of stock" in out
    assert '    details {"left": 0, "sku": "sku-42"}' in out
    # the traceback's tail: its last 10 lines, the exception line last
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("    traceback (last 10 of"))
    tail = lines[header + 1 : header + 11]
    assert all(line.startswith("      ") for line in tail), tail
    assert tail[-1] == "      LookupError: no price for sku-42"
    assert "in _level" in "\n".join(tail)
    assert "in price" not in "\n".join(tail)  # further up: only in --json

    as_json = docket_cli("runs", "show", run_id, "--backend", url, "--json")
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    details = json.loads(as_json.stdout)["run"]["failure"]["details"]
    assert details["nodes"] == ["price", "reserve"]
    assert details["details"] == {"reserve": {"sku": "sku-42", "left": 0}}
    error = details["exceptions"]["price"]
    assert (error["type"], error["message"]) == ("LookupError", "no price for sku-42")
    assert "in price" in error["traceback"] and len(error["traceback"].splitlines()) > 10
