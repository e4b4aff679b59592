"""The console's page of a failed run (issue 18, item 2), in process over a real SQLite
file: the whole traceback each failed node kept, escaped in a ``<pre>``, a ``Failure``'s
details, and the exception of every ``node_failed`` event on the timeline."""

from __future__ import annotations

import asyncio
from pathlib import Path

from markupsafe import escape
from starlette.testclient import TestClient

from docket import FINISH, START, Docket, Failure, GraphBuilder, NodeContext, NodeRegistry, S
from docket.graph.nodes import NodeState, RetryPolicy
from docket.records import EventType, Run, RunStatus
from docket.ui import create_app

NODES = NodeRegistry()
HOSTILE = "<script>alert('owned')</script> & more"


def _inner(attempt: int) -> None:
    raise ValueError(f"attempt {attempt}: {HOSTILE}")


@NODES.node("render")
def render(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    _inner(ctx.attempt)
    return {}


@NODES.node("refuse")
def refuse(state: NodeState, ctx: NodeContext) -> Failure:
    return Failure("quota", retryable=False, details={"quota": "exceeded", "limit": 3})


GRAPH = (
    GraphBuilder("report")
    .field("out", S.string())
    .node("render", "render", retry=RetryPolicy(max_attempts=2, backoff_ms=0))
    .node("refuse", "refuse")
    .edge("a", START, "render")
    .edge("b", "render", "refuse")
    .edge("c", "refuse", FINISH)
    .build()
)


def failed(url: str, run_id: str) -> Run:
    async def go() -> Run:
        async with Docket(url, nodes=NODES) as docket:
            ref = await docket.save_graph(GRAPH)
            await docket.start_run(ref, run_id=run_id)
            for _ in range(5):  # the retry is due at once; each drain_due takes what is due
                await docket.drain_due()
                run = await docket.fetch_run(run_id)
                if run.status is RunStatus.FAILED:
                    return run
            raise AssertionError(f"run {run_id} did not fail: {run.status}")

    return asyncio.run(go())


def test_the_failed_run_page_shows_the_whole_traceback_escaped(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'console.db'}"
    run = failed(url, "rep-9")
    assert run.failure is not None
    exceptions = run.failure.details["exceptions"]
    assert isinstance(exceptions, dict) and isinstance(exceptions["render"], dict)
    trace = exceptions["render"]["traceback"]
    assert isinstance(trace, str) and "in _inner" in trace

    with TestClient(create_app(Docket(url, nodes=NODES), open_docket=True)) as client:
        page = client.get("/runs/rep-9")
    assert page.status_code == 200
    text = page.text
    assert "<script>alert(" not in text  # escaped everywhere
    # the whole traceback, escaped, in a <pre>, under the failure
    assert f'<pre class="traceback">{escape(trace)}</pre>' in text
    assert '<code class="exc-type">ValueError</code>' in text
    assert escape(f"attempt 2: {HOSTILE}") in text
    # the timeline shows the retried attempt's exception too (attempt 1)
    assert text.count('<details class="ev-error">') == 2
    assert escape(f"attempt 1: {HOSTILE}") in text


def test_a_failure_with_details_shows_them_without_a_traceback(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'console.db'}"

    async def go() -> None:
        async with Docket(url, nodes=NODES) as docket:
            graph = (
                GraphBuilder("quota")
                .field("out", S.string())
                .node("refuse", "refuse")
                .edge("a", START, "refuse")
                .edge("b", "refuse", FINISH)
                .build()
            )
            ref = await docket.save_graph(graph)
            await docket.start_run(ref, run_id="q-1")
            await docket.drain_due()
            history = await docket.history("q-1")
            (event,) = [e for e in history if e.type is EventType.NODE_FAILED]
            assert event.payload["details"] == {"quota": "exceeded", "limit": 3}

    asyncio.run(go())
    with TestClient(create_app(Docket(url, nodes=NODES), open_docket=True)) as client:
        text = client.get("/runs/q-1").text
    assert 'id="failed-refuse"' in text and "error: quota" in text
    assert escape('"quota": "exceeded"') in text
    assert '<pre class="traceback">' not in text
