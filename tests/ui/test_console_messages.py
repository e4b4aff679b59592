"""The run page's time-and-messages card over a real SQLite file: a waiting run shows the
topic it waits for, the form sends a message that a waiting attempt takes at once, a
refused payload changes nothing, and kept messages are listed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from docket import (
    FINISH,
    START,
    Docket,
    GraphBuilder,
    NodeContext,
    NodeRegistry,
    NodeState,
    Receive,
    S,
    SyncDocket,
)
from docket.records import RunStatus
from docket.ui import create_app

NODES = NodeRegistry()


@NODES.node("ui.listen")
def listen(state: NodeState, ctx: NodeContext) -> Receive:
    return Receive("answer", into="answer")


GRAPH = (
    GraphBuilder("listen")
    .field("answer", S.string())
    .node("wait", "ui.listen")
    .edge("a", START, "wait")
    .edge("b", "wait", FINISH)
    .output("answer")
    .policy("topics", {"answer": {"type": "string"}, "note": None})
    .build()
)


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "messages.db"
    with SyncDocket(f"sqlite:///{path}", nodes=NODES) as docket:
        docket.save_graph(GRAPH)
        docket.start_run("listen", run_id="waits")
        docket.drain_due()
        docket.start_run("listen", run_id="fresh")
    return path


@pytest.fixture
def client(database: Path) -> Iterator[TestClient]:
    docket = Docket(f"sqlite:///{database}", nodes=NODES)
    with TestClient(create_app(docket, open_docket=True), follow_redirects=False) as client:
        yield client


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def test_a_waiting_run_shows_its_topic_and_takes_a_sent_message(
    client: TestClient, database: Path
) -> None:
    page = client.get("/runs/waits")
    assert page.status_code == 200
    assert "waits for a message on <code>answer</code>" in page.text
    sent = client.post(
        "/runs/waits/messages",
        data={"csrf": _csrf(page.text), "topic": "answer", "payload": '"ok"', "key": ""},
    )
    assert sent.status_code == 303, sent.text
    assert "notice=sent" in sent.headers["location"]
    with SyncDocket(f"sqlite:///{database}", nodes=NODES) as docket:
        run = docket.fetch_run("waits")
        assert run.status is RunStatus.RUNNING and run.channels["state:answer"].value == "ok"


def test_a_refused_payload_changes_nothing_and_kept_messages_are_listed(
    client: TestClient, database: Path
) -> None:
    page = client.get("/runs/fresh")
    csrf = _csrf(page.text)
    refused = client.post(
        "/runs/fresh/messages", data={"csrf": csrf, "topic": "answer", "payload": "12"}
    )
    assert refused.status_code == 422 and "payload" in refused.text
    unknown = client.post("/runs/fresh/messages", data={"csrf": csrf, "topic": "other"})
    assert unknown.status_code == 422
    with SyncDocket(f"sqlite:///{database}", nodes=NODES) as docket:
        assert docket.fetch_run("fresh").checkpoint_seq == 1
    kept = client.post(
        "/runs/fresh/messages",
        data={"csrf": csrf, "topic": "note", "payload": '{"n": 1}', "key": "k"},
    )
    assert kept.status_code == 303
    listed = client.get("/runs/fresh").text
    assert 'id="kept-messages"' in listed and "<code>note</code>" in listed
