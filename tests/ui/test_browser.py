"""End to end in headless Chromium: the console served by uvicorn (with a worker) over a
real SQLite file, driven through its pages like a person would. Screenshots go to
``test-artifacts/ui/``.

Skipped only when ``DOCKET_SKIP_BROWSER=1``; a missing Chromium is a failure with a
clear message (``make test`` installs it through ``scripts/ensure-browser``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

if os.environ.get("DOCKET_SKIP_BROWSER") == "1":
    pytest.skip("DOCKET_SKIP_BROWSER=1: browser tests skipped", allow_module_level=True)

from playwright.sync_api import BrowserContext, Page, expect

from docket import SyncDocket
from docket.records import RunStatus
from tests.ui import demo
from tests.ui.serving import chromium, serve

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
TOKEN = "browser-test-token"


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("console") / "browser.db"
    demo.publish(path)
    demo.waiting_expense(path, "exp-approve", "Ada", 420.0)
    demo.waiting_expense(path, "exp-cancel", "Grace", 75.5)
    demo.poison_a_run(path, "report-poisoned")
    return path


@pytest.fixture(scope="module")
def console(database: Path) -> Iterator[str]:
    with serve(database, token=TOKEN) as base:
        yield base


@pytest.fixture(scope="module")
def browser(console: str) -> Iterator[BrowserContext]:
    # after the data is prepared: Playwright's sync API keeps an event loop running here
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium() as context:
        yield context


@pytest.fixture
def page(browser: BrowserContext, console: str) -> Iterator[Page]:
    page = browser.new_page()
    page.goto(f"{console}/runs?token={TOKEN}")  # signs in: the token moves to a cookie
    yield page
    page.close()


def shot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def status_of(database: Path, run_id: str) -> RunStatus:
    with SyncDocket(demo.url(database)) as docket:
        return docket.fetch_run(run_id).status


def test_sign_in_is_required(browser: BrowserContext, console: str) -> None:
    browser.clear_cookies()
    page = browser.new_page()
    page.goto(f"{console}/runs")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    page.fill("#token", "wrong")
    page.click(".login-card button[type=submit]")
    expect(page.locator(".form-error")).to_have_text("wrong access token")
    page.fill("#token", TOKEN)
    page.click(".login-card button[type=submit]")
    expect(page).to_have_url(re.compile(r"/runs$"))
    expect(page.locator("h1")).to_have_text("Runs")
    page.close()


def test_resolve_a_waiting_run_and_see_it_finish(page: Page, database: Path) -> None:
    expect(page.locator("table.runs")).to_contain_text("exp-approve")
    shot(page, "01-runs")
    page.click("a.tab:has-text('waiting')")
    expect(page.locator("table.runs tbody tr")).to_have_count(2)
    page.click("text=exp-approve")
    expect(page.locator("#run-status")).to_have_text("waiting")
    expect(page.locator("g.gv-waiting[data-node=review]")).to_have_count(1)
    shot(page, "02-run-waiting")

    # an answer the schema refuses is reported on the form; nothing is stored
    page.fill("input[name='field.note']", "looks fine")
    page.click("#interrupt-approval button[type=submit]")
    expect(page.locator("#interrupt-approval .field-error")).to_have_text("required")
    expect(page.locator("input[name='field.note']")).to_have_value("looks fine")
    shot(page, "03-run-bad-answer")
    assert status_of(database, "exp-approve") is RunStatus.WAITING

    page.check("input[name='field.decision'][value='\"approved\"']")
    page.click("#interrupt-approval button[type=submit]")
    expect(page.locator(".notice")).to_have_text("Run resolved.")
    expect(page.locator("#run-status")).to_have_text("done", timeout=20_000)
    expect(page.locator("#run-output")).to_contain_text("paid 420.0 to Ada")
    expect(page.locator("g.gv-done[data-node='$finish']")).to_have_count(1)
    expect(page.locator("g.gv-idle[data-node=notify]")).to_have_count(1)
    expect(page.locator("#timeline")).to_contain_text("run completed")
    shot(page, "04-run-done")
    assert status_of(database, "exp-approve") is RunStatus.DONE


def test_cancel_a_run(page: Page, database: Path) -> None:
    page.click("text=exp-cancel")
    expect(page.locator("#run-status")).to_have_text("waiting")
    page.click("#cancel-button")
    expect(page.locator("#run-status")).to_have_text("cancelled")
    expect(page.locator("#cancel-button")).to_have_count(0)
    shot(page, "05-run-cancelled")
    assert status_of(database, "exp-cancel") is RunStatus.CANCELLED


def test_retry_a_poisoned_run(page: Page, database: Path) -> None:
    page.click("text=report-poisoned")
    expect(page.locator(".badge-poisoned")).to_be_visible()
    expect(page.locator(".alert.warn")).to_contain_text("max_claim_attempts_exceeded")
    shot(page, "06-run-poisoned")
    page.click("#retry-button")
    expect(page.locator(".notice")).to_have_text("Run retried.")
    # the console's worker claims it again; the page refreshes itself while it runs
    expect(page.locator("#run-status")).to_have_text("done", timeout=20_000)
    expect(page.locator(".badge-poisoned")).to_have_count(0)
    expect(page.locator("#run-output")).to_contain_text("report for 2026-11-29")
    shot(page, "07-run-retried")
    assert status_of(database, "report-poisoned") is RunStatus.DONE


def test_graph_versions(page: Page) -> None:
    page.click("nav >> text=Graphs")
    page.click("table >> text=expense")
    expect(page.locator("table.versions tbody tr")).to_have_count(1)
    expect(page.locator("svg.graph-view g.gv-vertex")).to_have_count(8)  # 6 nodes + ends
    shot(page, "08-graph")


def test_retry_a_failed_run_with_a_reason(page: Page, console: str, database: Path) -> None:
    with SyncDocket(demo.url(database)) as docket:
        docket.start_run("report", {"day": "1970-01-01"}, run_id="report-failed")
    page.goto(f"{console}/runs/report-failed")
    # the console's worker runs it; the page refreshes itself while it runs
    expect(page.locator("#run-status")).to_have_text("failed", timeout=20_000)
    expect(page.locator("#retry-button")).to_have_count(0)
    page.fill("#retry-reason", "loaded the sales data")
    shot(page, "08-run-failed")
    page.click("#retry-failed-button")
    expect(page.locator(".notice")).to_have_text("Run retried.")
    # the data is still missing in this demo, so the resumed run fails again
    expect(page.locator("#run-status")).to_have_text("failed", timeout=20_000)
    with SyncDocket(demo.url(database)) as docket:
        history = docket.history("report-failed")
    retried = [e for e in history if str(e.type) == "run_retried"]
    assert [e.payload["reason"] for e in retried] == ["loaded the sales data"]
    assert [str(e.type) for e in history].count("run_failed") == 2
