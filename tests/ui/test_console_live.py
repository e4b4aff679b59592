"""The run page's live feed (``GET /runs/{id}/live``, server-sent events) over a real SQLite
file: a finished run's stream is read to its end, a reconnect resumes after
``Last-Event-ID`` with no gap and no duplicate, the token and tenant rules hold, and the
stream of a live run ends when the client goes away (served by uvicorn, read by httpx)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from docket import Docket, SyncDocket
from docket.ui import create_app
from docket.ui import live as live_module
from tests.ui import demo
from tests.ui.serving import serve

TOKEN = "live-token"


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "live.db"
    demo.publish(path)
    demo.waiting_expense(path, "exp-wait", "Ada", 420.0)
    with SyncDocket(demo.url(path), nodes=demo.nodes) as docket:
        docket.start_run("report", {"day": "2026-11-30"}, run_id="rep-done")
        docket.drain_due()
    return path


@pytest.fixture
def client(database: Path) -> Iterator[TestClient]:
    docket = Docket(demo.url(database), nodes=demo.nodes)
    with TestClient(create_app(docket, open_docket=True), follow_redirects=False) as client:
        yield client


def frames(text: str) -> list[dict[str, str]]:
    """The SSE frames of a response body (comment-only frames left out)."""
    out = []
    for block in text.split("\n\n"):
        frame: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":") or ":" not in line:
                continue
            name, _, value = line.partition(":")
            frame[name] = value[1:] if value.startswith(" ") else value
        if "event" in frame or "id" in frame:
            out.append(frame)
    return out


def event_seqs(database: Path, run_id: str) -> list[int]:
    with SyncDocket(demo.url(database)) as docket:
        return [e.seq for e in docket.history(run_id)]


def test_a_finished_runs_stream_is_read_to_its_end(client: TestClient, database: Path) -> None:
    response = client.get("/runs/rep-done/live")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-store"
    got = frames(response.text)
    assert got[-1]["event"] == "end"
    events = [f for f in got if f["event"] == "event"]
    seqs = [int(f["id"]) for f in events]
    assert seqs == event_seqs(database, "rep-done")
    docs = [json.loads(f["data"]) for f in events]
    assert [d["seq"] for d in docs] == seqs and "run_completed" in [d["type"] for d in docs]
    assert all("id" not in f for f in got if f["event"] == "end")


def test_a_reconnect_resumes_after_the_last_event_id(client: TestClient, database: Path) -> None:
    every = event_seqs(database, "rep-done")
    assert len(every) > 4
    resumed = frames(client.get("/runs/rep-done/live", headers={"Last-Event-ID": "3"}).text)
    assert [int(f["id"]) for f in resumed if f["event"] == "event"] == every[3:]
    # the page's first ?after= is the cursor until the browser sends its own
    first = frames(client.get("/runs/rep-done/live?after=2").text)
    assert [int(f["id"]) for f in first if f["event"] == "event"] == every[2:]
    both = client.get("/runs/rep-done/live?after=1", headers={"Last-Event-ID": str(every[-1])})
    assert [f["event"] for f in frames(both.text)] == ["end"]

    assert client.get("/runs/rep-done/live", headers={"Last-Event-ID": "x"}).status_code == 400
    assert client.get("/runs/rep-done/live?after=-1").status_code == 400
    assert client.get("/runs/ghost/live").status_code == 404


def test_the_run_page_subscribes_to_its_stream(client: TestClient, database: Path) -> None:
    with SyncDocket(demo.url(database)) as docket:
        latest = docket.fetch_run("exp-wait").event_seq
    page = client.get("/runs/exp-wait").text
    assert f'data-stream="/runs/exp-wait/live?after={latest}"' in page
    assert '<script src="/static/live.js" defer></script>' in page
    assert 'id="timeline-list"' in page and 'id="live-output"' in page
    script = client.get("/static/live.js")
    assert script.status_code == 200 and "EventSource" in script.text
    # an older page of the timeline is not appended to
    older = client.get("/runs/exp-wait?events_after=0").text
    assert 'id="live"' not in older


def test_the_stream_needs_the_token_and_the_runs_tenant(tmp_path: Path, database: Path) -> None:
    docket = Docket(demo.url(database), nodes=demo.nodes)
    with TestClient(
        create_app(docket, token=TOKEN, open_docket=True), follow_redirects=False
    ) as client:
        refused = client.get("/runs/rep-done/live")
        assert refused.status_code == 303 and "/login" in refused.headers["location"]
        client.get(f"/runs?token={TOKEN}")  # signs in: the token moves to a cookie
        assert client.get("/runs/rep-done/live").status_code == 200

    url = demo.url(tmp_path / "tenants.db")
    with SyncDocket(url, nodes=demo.nodes, tenant_mode="required") as tenants:
        tenants.save_graph(demo.report_graph(), tenant_id="acme")
        tenants.start_run("report", {"day": "2026-11-30"}, run_id="r", tenant_id="acme")
        tenants.drain_due()
    app = create_app(Docket(url, nodes=demo.nodes, tenant_mode="required"), open_docket=True)
    with TestClient(app, follow_redirects=False) as client:
        assert client.get("/runs/r/live").status_code == 400  # which tenant?
        assert client.get("/runs/r/live?tenant=globex").status_code == 404
        mine = client.get("/runs/r/live?tenant=acme")
        assert frames(mine.text)[-1]["event"] == "end"
        page = client.get("/runs/r?tenant=acme").text
        assert re.search(r'data-stream="/runs/r/live\?tenant=acme&amp;after=\d+"', page)


def _wait_for(condition: object, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_live_runs_stream_keeps_alive_and_ends_when_the_client_goes(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_module, "HEARTBEAT", 0.05)
    with serve(database) as base, httpx.Client(base_url=base, timeout=30) as http:
        before = live_module.open_streams()
        with http.stream("GET", "/runs/exp-wait/live") as response:
            assert response.status_code == 200
            seen: list[str] = []
            events = 0
            # held, so that leaving the loop does not close the line iterator: httpx closes
            # the connection when it is dropped, and the server could see the client go
            # before the count below is read
            lines = response.iter_lines()
            for line in lines:
                seen.append(line)
                events += line == "event: event"
                if line == ": keep-alive" and events:  # every event sent; the run still waits
                    break
            assert live_module.open_streams() == before + 1, seen[-6:]
        # the client went away: the server's stream (and its feed subscription) is closed
        _wait_for(lambda: live_module.open_streams() == before, "the stream to close")


def test_emissions_carry_no_id_and_pruned_events_move_the_cursor() -> None:
    from datetime import UTC, datetime

    from docket.records import Emission, EventsPruned

    said = Emission(
        tenant_id=None,
        run_id="r",
        node_id="speak",
        task_id="t",
        attempt=1,
        seq=3,
        kind="token",
        data="Hel",
        at=datetime.now(UTC),
    )
    emitted = frames(live_module._encode(said).decode())
    assert emitted == [{"event": "emission", "data": emitted[0]["data"]}]
    assert json.loads(emitted[0]["data"])["data"] == "Hel"
    gone = frames(live_module._encode(EventsPruned(run_id="r", first_seq=1, last_seq=9)).decode())
    assert gone[0]["event"] == "pruned" and gone[0]["id"] == "9"
    assert json.loads(gone[0]["data"]) == {"first_seq": 1, "last_seq": 9}
