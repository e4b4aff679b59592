"""State history in the console over a real SQLite file (and the memory backend for
retention): the run page's checkpoint list, the state-at-checkpoint page, the fork and
edit forms — a refused fork or edit shows the facade's reasons and writes nothing — and
the token and anti-forgery rules on both forms."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from docket import Docket, SyncDocket
from docket.records import FORKED_FROM_KEY, RunStatus
from docket.ui import create_app
from docket.ui import history as history_module
from tests.ui import demo

TOKEN = "history-token"


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "history.db"
    demo.publish(path)
    demo.waiting_expense(path, "exp-1", "Ada", 420.0)
    with SyncDocket(demo.url(path), nodes=demo.nodes) as docket:
        docket.start_run("report", {"day": "2026-11-30"}, run_id="rep-done")
        docket.drain_due()
    return path


@pytest.fixture
def client(database: Path) -> Iterator[TestClient]:
    docket = Docket(demo.url(database), nodes=demo.nodes)
    with TestClient(create_app(docket, open_docket=True), follow_redirects=False) as client:
        yield client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "no anti-forgery field on the page"
    return found.group(1)


def stored(database: Path, run_id: str) -> tuple[RunStatus, int, int]:
    with SyncDocket(demo.url(database)) as docket:
        run = docket.fetch_run(run_id)
    return run.status, run.checkpoint_seq, run.event_seq


def run_count(database: Path) -> int:
    with SyncDocket(demo.url(database)) as docket:
        return len(docket.list_runs(limit=100).runs)


def test_the_run_page_lists_checkpoints_linking_to_the_state_at_each(
    client: TestClient, database: Path
) -> None:
    _, latest, _ = stored(database, "exp-1")
    page = client.get("/runs/exp-1").text
    assert 'id="history"' in page
    linked = [int(k) for k in re.findall(r'<a href="/runs/exp-1/at/(\d+)">', page)]
    assert linked == list(range(1, latest + 1))

    first = client.get("/runs/exp-1/at/1")
    assert first.status_code == 200
    assert "State at checkpoint" in first.text and 'id="at-seq">1<' in first.text
    assert "fraud check passed" not in first.text  # nothing reduced into checks yet
    last = client.get(f"/runs/exp-1/at/{latest}")
    assert 'id="at-state-checks"' in last.text and "fraud check passed" in last.text
    assert f'<input type="hidden" name="at" value="{latest}">' in last.text

    assert client.get(f"/runs/exp-1/at/{latest + 5}").status_code == 404
    assert client.get("/runs/exp-1/at/0").status_code == 400
    assert client.get("/runs/exp-1?history_after=x").status_code == 400
    assert client.get("/runs/exp-1/at/x").status_code == 400
    assert client.get("/runs/ghost/at/1").status_code == 404


def test_fork_at_a_checkpoint_with_a_patch(client: TestClient, database: Path) -> None:
    _, latest, _ = stored(database, "exp-1")
    page = client.get(f"/runs/exp-1/at/{latest}").text
    forked = client.post(
        "/runs/exp-1/fork",
        data={
            "csrf": csrf_of(page),
            "at": str(latest),
            "patch": '{"receipt": "pre-approved"}',
            "new_id": "exp-1-fork",
        },
    )
    assert forked.status_code == 303, forked.text
    assert forked.headers["location"] == "/runs/exp-1-fork?notice=forked"
    with SyncDocket(demo.url(database)) as docket:
        run = docket.fetch_run("exp-1-fork")
    assert run.metadata[FORKED_FROM_KEY] == {"run_id": "exp-1", "checkpoint_seq": latest}
    assert run.channels["state:receipt"].value == "pre-approved"
    shown = client.get(forked.headers["location"]).text
    assert 'id="forked-from" href="/runs/exp-1"' in shown and "Run forked" in shown

    # no new id: one is generated
    again = client.post(
        "/runs/exp-1/fork", data={"csrf": csrf_of(page), "at": "2", "patch": "", "new_id": ""}
    )
    assert again.status_code == 303 and "notice=forked" in again.headers["location"]


@pytest.mark.parametrize(
    ("patch", "reason"),
    [
        ('{"who": "Mallory"}', "input"),
        ('{"nope": 1}', "not a state field"),
        ('{"receipt": 12}', "receipt"),
        ("[1, 2]", "JSON object"),
        ("{not json", "not valid JSON"),
    ],
)
def test_a_refused_fork_shows_why_and_writes_nothing(
    client: TestClient, database: Path, patch: str, reason: str
) -> None:
    page = client.get("/runs/exp-1/at/2").text
    before = run_count(database)
    refused = client.post(
        "/runs/exp-1/fork",
        data={"csrf": csrf_of(page), "at": "2", "patch": patch, "new_id": "bad-fork"},
    )
    assert refused.status_code == 422, refused.text
    error = re.search(r'id="fork-error">([^<]*)<', refused.text)
    assert error is not None and reason in error.group(1).replace("&#34;", '"')
    assert 'value="bad-fork"' in refused.text  # what was typed is kept
    assert run_count(database) == before
    assert client.get("/runs/bad-fork").status_code == 404


def test_edit_a_waiting_runs_state(client: TestClient, database: Path) -> None:
    page = client.get("/runs/exp-1").text
    assert 'id="edit-state"' in page
    status, checkpoint, _ = stored(database, "exp-1")
    edited = client.post(
        "/runs/exp-1/edit",
        data={"csrf": csrf_of(page), "patch": '{"receipt": "fixed"}', "reason": "typo"},
    )
    assert edited.status_code == 303, edited.text
    assert "notice=edited" in edited.headers["location"]
    with SyncDocket(demo.url(database)) as docket:
        run = docket.fetch_run("exp-1")
        kinds = [str(e.type) for e in docket.history("exp-1")]
    assert run.status is status and run.checkpoint_seq == checkpoint + 1
    assert run.channels["state:receipt"].value == "fixed"
    assert "state_edited" in kinds
    assert "State edited." in client.get("/runs/exp-1?notice=edited").text


def test_a_refused_edit_shows_why_and_writes_nothing(client: TestClient, database: Path) -> None:
    page = client.get("/runs/exp-1").text
    before = stored(database, "exp-1")
    for patch, reason in (
        ('{"amount": 1}', "input"),
        ('{"receipt": 3}', "receipt"),
        ("", "a patch is needed"),
        ("12", "JSON object"),
    ):
        refused = client.post(
            "/runs/exp-1/edit", data={"csrf": csrf_of(page), "patch": patch, "reason": "r"}
        )
        assert refused.status_code == 422, (patch, refused.text)
        error = re.search(r'id="edit-error">([^<]*)<', refused.text)
        assert error is not None and reason in error.group(1).replace("&#34;", '"'), patch
        assert "<title>Run exp-1" in refused.text
    assert stored(database, "exp-1") == before

    # a finished run is not edited (fork it instead), and offers no edit form
    done = stored(database, "rep-done")
    assert 'id="edit-state"' not in client.get("/runs/rep-done").text
    refused = client.post(
        "/runs/rep-done/edit", data={"csrf": csrf_of(page), "patch": '{"report": "x"}'}
    )
    assert refused.status_code == 409
    assert stored(database, "rep-done") == done


def test_fork_and_edit_need_the_token_and_the_anti_forgery_value(database: Path) -> None:
    docket = Docket(demo.url(database), nodes=demo.nodes)
    before = stored(database, "exp-1"), run_count(database)
    with TestClient(
        create_app(docket, token=TOKEN, open_docket=True), follow_redirects=False
    ) as client:
        assert client.get("/runs/exp-1/at/1").status_code == 303  # to the sign-in page
        edit = {"patch": '{"receipt": "x"}', "csrf": "forged" * 8}
        assert client.post("/runs/exp-1/edit", data=edit).status_code == 403
        client.get(f"/runs?token={TOKEN}")
        page = client.get("/runs/exp-1/at/1").text
        assert client.post("/runs/exp-1/edit", data=edit).status_code == 403  # wrong csrf
        fork = {"at": "1", "patch": "", "new_id": "f", "csrf": csrf_of(page)}
        crossed = client.post("/runs/exp-1/fork", data=fork, headers={"Origin": "http://evil"})
        assert crossed.status_code == 403
    assert (stored(database, "exp-1"), run_count(database)) == before


def test_pruned_checkpoints_are_shown_as_pruned() -> None:
    docket = Docket("memory://", nodes=demo.nodes)
    with TestClient(create_app(docket, open_docket=True), follow_redirects=False) as client:
        call = client.portal.call  # type: ignore[union-attr]
        call(docket.save_graph, demo.expense_graph())

        async def prepare() -> None:
            await docket.start_run("expense", {"who": "Ada", "amount": 1.0}, run_id="old")
            await docket.drain_due()
            later = datetime.now(UTC) + timedelta(hours=1)
            await docket.backend.prune(event_age=timedelta(0), now=later)  # type: ignore[attr-defined]

        call(prepare)
        page = client.get("/runs/old")
        assert page.status_code == 200
        assert re.search(r'<a href="/runs/old/at/\d+">', page.text) is None
        assert "pruned" in page.text
        gone = client.get("/runs/old/at/1")
        assert gone.status_code in (404, 410) and "prun" in gone.text


def test_the_checkpoint_list_pages(
    client: TestClient, database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_module, "HISTORY_PAGE", 2)
    _, latest, _ = stored(database, "exp-1")
    page = client.get("/runs/exp-1").text
    assert re.findall(r'<a href="/runs/exp-1/at/(\d+)">', page) == [str(latest - 1), str(latest)]
    earlier = re.search(r'href="([^"]+)" id="history-earlier"', page)
    assert earlier is not None
    older = client.get(earlier.group(1).replace("&amp;", "&")).text
    assert re.findall(r'<a href="/runs/exp-1/at/(\d+)">', older) == [
        str(latest - 3),
        str(latest - 2),
    ]
    assert 'id="history-later"' in older
    assert 'id="history" data-live' not in older  # a paged list is not redrawn live
