"""Serve the console on a free 127.0.0.1 port in a background thread, and drive it with
Debian's Chromium through Playwright (never a downloaded browser)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import uvicorn
from playwright.sync_api import BrowserContext, sync_playwright

from docket import Docket
from docket.ui import create_app
from tests.ui import demo

CHROMIUM: Final = os.environ.get("DOCKET_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium reaches for the (closed) network.
CHROMIUM_ARGS: Final = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def serve(database: Path, *, token: str | None = None) -> Iterator[str]:
    """The console (with a worker) over ``database``; yields its base URL."""
    docket = Docket(demo.url(database), nodes=demo.nodes, poll_interval=0.05)
    app = create_app(docket, token=token, open_docket=True, run_worker=True)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="console", daemon=True)
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


@contextlib.contextmanager
def chromium(width: int = 1360, height: int = 900) -> Iterator[BrowserContext]:
    if not Path(CHROMIUM).exists():
        raise RuntimeError(
            f"Chromium is not installed at {CHROMIUM}: run scripts/ensure-browser "
            "(apt-get install chromium), or set DOCKET_SKIP_BROWSER=1 to skip browser tests"
        )
    profile = tempfile.mkdtemp(prefix="docket-chromium-")
    try:
        with sync_playwright() as playwright:
            context = playwright.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": width, "height": height},
                device_scale_factor=1,
            )
            context.set_default_timeout(20_000)
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
