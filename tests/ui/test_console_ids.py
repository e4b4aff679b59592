"""Ids with URL-special characters through the real console (issue 18, item 10).

Run, tenant and interrupt ids are free text: ``a/b?c#d`` is a valid run id. Every link and
form the console draws must lead back to the same id, and every action must reach it.
Runs live in a real SQLite file; requests go through Starlette's TestClient, which sends
the raw (percent-encoded) path as a server would.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from docket import FINISH, START, Docket, GraphBuilder, Interrupt, NodeRegistry, S, SyncDocket
from docket.facade import TenantMode
from docket.graph.nodes import NodeContext, NodeReturn, NodeState
from docket.records import RunStatus
from docket.ui import create_app

ODD = (
    "a/b?c#d",
    "100% sure",
    "with space",
    "naïve 日本 ☃",
    "x/interrupts/y",  # looks like an action path once its "/" is unescaped
    "z/cancel",
    "..",
    "%2F",  # already looks escaped
)
TENANT = "t/1?&#% ü"

nodes = NodeRegistry()


@nodes.node("ask")
def ask(state: NodeState, ctx: NodeContext) -> NodeReturn:
    if "answer" not in state:
        ident = state["ask"]
        assert isinstance(ident, str)
        return Interrupt("answer", schema=S.string(), id=ident)
    return {}


GRAPH = (
    GraphBuilder("asker")
    .input("ask", S.string(), required=True)
    .field("answer", S.string())
    .node("ask", "ask")
    .edge("begin", START, "ask")
    .edge("end", "ask", FINISH)
    .output("answer")
    .build()
)


def _unescaped(text: str) -> str:
    return html.unescape(text)


def _link_to(page: str, run_id: str) -> str:
    """The href of the run list's link whose text is ``run_id``."""
    for href, label in re.findall(r'<td class="mono"><a href="([^"]+)">([^<]*)</a>', page):
        if _unescaped(label) == run_id:
            return _unescaped(href)
    raise AssertionError(f"no link to run {run_id!r} in the run list")


def _form_action(page: str, what: str) -> str:
    if what == "resolve":
        found = re.search(r'<form method="post" action="([^"]+)" class="resolve-form"', page)
    else:
        found = re.search(r'<form method="post" action="([^"]+/' + what + r'[^"]*)"', page)
    assert found is not None, f"no {what} form on the page"
    return _unescaped(found.group(1))


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize("tenanted", [False, True], ids=["tenantless", "tenanted"])
def test_odd_ids_open_resolve_and_cancel_through_the_console(
    tmp_path: Path, tenanted: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    mode: TenantMode = "required" if tenanted else "none"
    tenant = TENANT if tenanted else None
    with SyncDocket(url, nodes=nodes, tenant_mode=mode) as docket:
        docket.save_graph(GRAPH, tenant_id=tenant)
        for run_id in ODD:
            docket.start_run("asker", {"ask": run_id}, run_id=run_id, tenant_id=tenant)
        docket.drain_due()
    app = create_app(Docket(url, nodes=nodes, tenant_mode=mode), open_docket=True)
    with TestClient(app, follow_redirects=False) as client:
        listing = client.get("/runs", params={"tenant": tenant} if tenant else None)
        assert listing.status_code == 200
        for index, run_id in enumerate(ODD):
            href = _link_to(listing.text, run_id)
            path, _, query = href.partition("?")
            assert path.startswith("/runs/") and "/" not in path[len("/runs/") :], href
            assert bool(query) == tenanted, href
            page = client.get(href)
            assert page.status_code == 200, (run_id, page.text[-400:])
            assert f'<h1 class="mono">{html.escape(run_id)} ' in page.text
            assert f'id="interrupt-{html.escape(run_id)}"' in page.text  # the interrupt id
            csrf = _csrf(page.text)
            if index % 2 == 0:
                done = client.post(
                    _form_action(page.text, "resolve"), data={"csrf": csrf, "value": "yes"}
                )
                notice = "resolved"
            else:
                done = client.post(_form_action(page.text, "cancel"), data={"csrf": csrf})
                notice = "cancelled"
            assert done.status_code == 303, (run_id, done.text[-400:])
            back = client.get(done.headers["location"])
            assert back.status_code == 200 and f"Run {notice}." in back.text, run_id
            assert f'<h1 class="mono">{html.escape(run_id)} ' in back.text
    with SyncDocket(url, nodes=nodes, tenant_mode=mode) as docket:
        docket.drain_due()
        for index, run_id in enumerate(ODD):
            run = docket.fetch_run(run_id, tenant_id=tenant)
            if index % 2 == 0:
                assert run.status is RunStatus.DONE and run.output == {"answer": "yes"}, run_id
            else:
                assert run.status is RunStatus.CANCELLED, run_id


def test_a_run_id_is_one_path_segment(tmp_path: Path) -> None:
    """``/runs/a%2Fb`` is run ``a/b``; ``/runs/a/b`` is no run (and no other route)."""
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    with SyncDocket(url, nodes=nodes) as docket:
        docket.save_graph(GRAPH)
        docket.start_run("asker", {"ask": "q"}, run_id="a/b")
        docket.start_run("asker", {"ask": "q"}, run_id="b")
        docket.drain_due()
    app = create_app(Docket(url, nodes=nodes), open_docket=True)
    with TestClient(app, follow_redirects=False) as client:
        assert client.get("/runs/a%2Fb").status_code == 200
        assert client.get("/runs/a%2fb").status_code == 200  # either hex case
        assert client.get("/runs/a/b").status_code == 404
        assert client.get("/runs/b").status_code == 200
        assert client.get("/runs/%FF").status_code == 400  # not UTF-8: refused, not a crash
    # sign-in redirects keep the escaped id (a decoded "/" would name another page)
    app = create_app(Docket(url, nodes=nodes), token="tok", open_docket=True)
    with TestClient(app, follow_redirects=False) as client:
        moved = client.get("/runs/a%2Fb?token=tok")
        assert moved.headers["location"] == "/runs/a%2Fb"
        client.cookies.clear()
        login = client.get("/runs/a%2Fb")
        assert login.headers["location"] == "/login?next=%2Fruns%2Fa%252Fb"
