"""The console's run page shows a run's family (issue 19 §4), in process over a SQLite
file: a parent lists its child runs with links and status, and the question its child
waits on with the child's own answer form — posting to the child's resolve endpoint and
coming back to the parent's page (a refused answer is shown there, and stores nothing);
a child's page links to its parent."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from starlette.testclient import TestClient

from docket import Docket
from docket.records import InterruptStatus, Run, RunStatus
from docket.ui import create_app
from docket.ui.app import segment
from tests.cli import kids_app
from tests.ui.test_console import csrf_of

PARENT = kids_app.PARENT_ID
CHILD = f"{PARENT}:0:approve:1@1"


def _drain(url: str, *, start: bool) -> Run:
    """Start the parent (once) and drain until its child waits or the parent ends."""

    async def go() -> Run:
        async with Docket(url, nodes=kids_app.NODES) as docket:
            if start:
                await docket.save_graph(kids_app.CHILD)
                ref = await docket.save_graph(kids_app.PARENT)
                await docket.start_run(ref, {"amount": 120}, run_id=PARENT)
            for _ in range(10):
                await docket.drain_due()
                parent = await docket.fetch_run(PARENT)
                children = await docket.children(PARENT)
                if parent.status.terminal or (children and children[0].open_interrupts):
                    return parent
            raise AssertionError(f"{PARENT} did not settle: {parent.status}")

    return asyncio.run(go())


def _stored(url: str, run_id: str) -> tuple[RunStatus, int]:
    async def go() -> tuple[RunStatus, int]:
        async with Docket(url) as docket:
            run = await docket.fetch_run(run_id)
            return run.status, run.checkpoint_seq

    return asyncio.run(go())


def test_a_parent_page_lists_its_child_and_answers_the_childs_question(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kids.db'}"
    _drain(url, start=True)
    child_url = f"/runs/{segment(CHILD)}"
    target = f"{child_url}/interrupts/decision"
    app = create_app(Docket(url, nodes=kids_app.NODES), open_docket=True)
    with TestClient(app, follow_redirects=False) as client:
        page = client.get(f"/runs/{PARENT}")
        assert page.status_code == 200
        text = page.text
        assert '<section class="card table-card child-runs" id="children">' in text
        row = re.search(r'<tr id="child-1" class="child-waiting">(.*?)</tr>', text, re.S)
        assert row is not None, text
        assert f'<a href="{child_url}">{CHILD}</a>' in row.group(1)
        assert '<span class="badge badge-waiting">waiting</span>' in row.group(1)
        assert 'href="#child-1-ask-1"><code>decision</code></a>' in row.group(1)
        asked = re.search(
            r'<section class="card interrupt child-interrupt" id="child-1-ask-1">'
            r"(.*?)</section>",
            text,
            re.S,
        )
        assert asked is not None, text
        form = asked.group(1)
        assert kids_app.QUESTION in form
        assert f'action="{target}"' in form
        assert f'<input type="hidden" name="back" value="{PARENT}">' in form
        assert 'name="value" value="&#34;approved&#34;"' in form
        assert 'id="parent-link"' not in text  # a top-level run has no parent
        # the parent runs, but a reload would wipe the form a person is filling in
        assert 'http-equiv="refresh"' not in text

        child_page = client.get(child_url)
        assert child_page.status_code == 200
        assert f'id="parent-link" href="/runs/{PARENT}">{PARENT}</a>' in child_page.text
        assert 'id="children"' not in child_page.text
        assert 'name="back"' not in child_page.text  # its own form answers in place

        # a refused answer is shown on the parent's page, in the child's form; nothing stored
        csrf = csrf_of(text)
        before = _stored(url, CHILD)
        refused = client.post(target, data={"csrf": csrf, "back": PARENT, "value": '"maybe"'})
        assert refused.status_code == 422
        assert f"<title>Run {PARENT}" in refused.text
        again = re.search(r'id="child-1-ask-1">(.*?)</section>', refused.text, re.S)
        assert again is not None and 'class="field-error"' in again.group(1), refused.text
        assert _stored(url, CHILD) == before

        answered = client.post(target, data={"csrf": csrf, "back": PARENT, "value": '"approved"'})
        assert answered.status_code == 303, answered.text
        assert answered.headers["location"] == f"/runs/{PARENT}?notice=resolved"

    parent = _drain(url, start=False)
    assert parent.status is RunStatus.DONE and parent.output == {"verdict": "approved 120"}
    app = create_app(Docket(url, nodes=kids_app.NODES), open_docket=True)
    with TestClient(app, follow_redirects=False) as client:
        text = client.get(f"/runs/{PARENT}").text
    assert '<tr id="child-1" class="child-done">' in text
    assert "child-interrupt" not in text


def test_back_is_only_followed_to_the_childs_own_parent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'kids.db'}"
    _drain(url, start=True)
    app = create_app(Docket(url, nodes=kids_app.NODES), open_docket=True)
    with TestClient(app, follow_redirects=False) as client:
        csrf = csrf_of(client.get(f"/runs/{PARENT}").text)
        answered = client.post(
            f"/runs/{segment(CHILD)}/interrupts/decision",
            data={"csrf": csrf, "back": "someone-else", "value": '"rejected"'},
        )
    assert answered.status_code == 303
    assert answered.headers["location"] == f"/runs/{segment(CHILD)}?notice=resolved"

    async def child() -> Run:
        async with Docket(url) as docket:
            return await docket.fetch_run(CHILD)

    stored = asyncio.run(child())
    assert stored.interrupts["decision"].status is InterruptStatus.RESOLVED
