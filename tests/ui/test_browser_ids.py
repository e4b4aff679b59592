"""In headless Chromium: runs whose ids hold URL-special characters open from the run
list, and their forms reach them (issue 18, item 10). The browser normalises what it
sends (dot segments, escapes) the way a person's browser does; TestClient does not.

Skipped only when ``DOCKET_SKIP_BROWSER=1``, like ``test_browser``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

if os.environ.get("DOCKET_SKIP_BROWSER") == "1":
    pytest.skip("DOCKET_SKIP_BROWSER=1: browser tests skipped", allow_module_level=True)

from playwright.sync_api import expect

from docket import SyncDocket
from docket.records import RunStatus
from tests.ui import demo
from tests.ui.serving import chromium, serve

ANSWERED = "a/b?c#d 100% ü"
CANCELLED = ".."


def test_odd_run_ids_open_and_act_in_the_browser(tmp_path: Path) -> None:
    database = tmp_path / "ids.db"
    demo.publish(database)
    demo.waiting_expense(database, ANSWERED, "Ada", 1.0)
    demo.waiting_expense(database, CANCELLED, "Grace", 2.0)
    with serve(database) as base, chromium() as browser:
        page = browser.new_page()
        page.goto(f"{base}/runs")
        page.get_by_role("link", name=ANSWERED, exact=True).click()
        expect(page.locator("h1")).to_contain_text(ANSWERED)
        expect(page.locator("#run-status")).to_have_text("waiting")
        page.check("input[name='field.decision'][value='\"approved\"']")
        page.click("#interrupt-approval button[type=submit]")
        expect(page.locator(".notice")).to_have_text("Run resolved.")
        expect(page.locator("#run-status")).to_have_text("done", timeout=20_000)

        page.goto(f"{base}/runs")
        page.get_by_role("link", name=CANCELLED, exact=True).click()
        expect(page).to_have_url(re.compile(r"/runs/\.\.;$"))
        expect(page.locator("h1")).to_contain_text(CANCELLED)
        page.click("#cancel-button")
        expect(page.locator(".notice")).to_have_text("Run cancelled.")
        expect(page.locator("#run-status")).to_have_text("cancelled")
    with SyncDocket(demo.url(database)) as docket:
        assert docket.fetch_run(ANSWERED).status is RunStatus.DONE
        assert docket.fetch_run(CANCELLED).status is RunStatus.CANCELLED
