"""The live run page in headless Chromium: the page is opened first, then the run moves
(a person's answer stored from outside, or a node emitting tokens), and the page follows
through its server-sent-events stream WITHOUT a reload — new timeline entries, the status
turning done, the emitted tokens in the live output box. A value set on ``window`` when
the page opened proves no reload happened (a reload makes a new window object).

Skipped only when ``DOCKET_SKIP_BROWSER=1`` (like tests/ui/test_browser.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

if os.environ.get("DOCKET_SKIP_BROWSER") == "1":
    pytest.skip("DOCKET_SKIP_BROWSER=1: browser tests skipped", allow_module_level=True)

import uvicorn
from playwright.sync_api import BrowserContext, Page, expect
from starlette.applications import Starlette
from starlette.routing import Mount

from docket import Docket, SyncDocket
from docket.records import RunStatus
from docket.ui import create_app
from tests.ui import demo
from tests.ui.serving import chromium, free_port, serve

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with chromium() as context:
        yield context


def opened_live(page: Page, url: str) -> None:
    """Open ``url``, wait until its stream is connected, and mark the window."""
    page.goto(url)
    expect(page.locator("body")).to_have_attribute("data-live", "open")
    page.evaluate("window.openedOnce = 'yes'")


def not_reloaded(page: Page) -> None:
    assert page.evaluate("window.openedOnce") == "yes", "the page was reloaded"


def test_a_waiting_run_finishes_on_the_open_page(browser: BrowserContext, tmp_path: Path) -> None:
    database = tmp_path / "live.db"
    demo.publish(database)
    demo.waiting_expense(database, "exp-live", "Ada", 420.0)
    with serve(database) as base:
        page = browser.new_page()
        opened_live(page, f"{base}/runs/exp-live")
        expect(page.locator("#run-status")).to_have_text("waiting")
        expect(page.locator("#edit-state")).to_be_visible()  # offered while it waits
        expect(page.locator("#timeline")).not_to_contain_text("run completed")
        shown = page.locator("#timeline-list li.ev").count()

        # the answer is stored by another Docket; the console's worker runs the rest
        with SyncDocket(demo.url(database)) as docket:
            docket.resolve_interrupt("exp-live", "approval", {"decision": "approved"})

        expect(page.locator("#timeline-list li.ev-live").first).to_be_visible()
        expect(page.locator("#timeline")).to_contain_text("run completed", timeout=20_000)
        expect(page.locator("#run-status")).to_have_text("done", timeout=20_000)
        expect(page.locator("#run-output")).to_contain_text("paid 420.0 to Ada")
        expect(page.locator("g.gv-done[data-node='$finish']")).to_have_count(1)
        expect(page.locator("body")).to_have_attribute("data-live", "ended")
        expect(page.locator("#edit-state")).to_have_count(0)  # a done run is not edited
        expect(page.locator("#checkpoints")).to_contain_text("run completed")
        assert page.locator("#timeline-list li.ev").count() > shown
        seqs = page.locator("#timeline-list .ev-seq").all_text_contents()
        assert len(seqs) == len(set(seqs)), f"an event was shown twice: {seqs}"
        not_reloaded(page)
        page.screenshot(path=str(ARTIFACTS / "10-run-live-done.png"), full_page=True)
        page.close()
    with SyncDocket(demo.url(database)) as docket:
        assert docket.fetch_run("exp-live").status is RunStatus.DONE


@contextlib.contextmanager
def serve_memory(run_id: str) -> Iterator[str]:
    """The console over the memory backend (it declares ``streams``) with a worker, and
    one run of ``talk`` started on the serving loop before the first request."""
    docket = Docket("memory://", nodes=demo.nodes, poll_interval=0.05)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with docket:
            await docket.save_graph(demo.talk_graph())
            await docket.start_run("talk", run_id=run_id)
            worker = docket.worker(name="live-worker")
            worker.start()
            try:
                yield
            finally:
                demo.TALK_GO.set()  # never leave the node blocked
                demo.TALK_DONE.set()
                await worker.stop()

    app = Starlette(lifespan=lifespan, routes=[Mount("", create_app(docket))])
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="console-live", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the console did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_emitted_tokens_appear_live_then_the_run_finishes(browser: BrowserContext) -> None:
    demo.TALK_GO.clear()
    demo.TALK_DONE.clear()
    with serve_memory("talk-1") as base:
        page = browser.new_page()
        opened_live(page, f"{base}/runs/talk-1")
        expect(page.locator("#run-status")).to_have_text("running")
        expect(page.locator("#live-output")).to_be_hidden()

        demo.TALK_GO.set()  # the node emits its tokens now, while the page listens
        expect(page.locator("#live-output")).to_be_visible()
        expect(page.locator("#live-text")).to_have_text("".join(demo.TALK_TOKENS))
        expect(page.locator("#run-status")).to_have_text("running")
        page.screenshot(path=str(ARTIFACTS / "11-run-live-tokens.png"), full_page=True)

        demo.TALK_DONE.set()  # the node returns: the run completes
        expect(page.locator("#run-status")).to_have_text("done", timeout=20_000)
        expect(page.locator("#timeline")).to_contain_text("run completed")
        expect(page.locator("#run-output")).to_contain_text("Hello, live world")
        expect(page.locator("#live-text")).to_have_text("".join(demo.TALK_TOKENS))
        not_reloaded(page)
        page.close()
