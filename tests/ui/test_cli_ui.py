"""``docket ui`` and ``docket worker --ui-port``, each a real subprocess on a free port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from docket import SyncDocket
from docket.cli import main
from docket.records import RunStatus
from tests.ui import demo
from tests.ui.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.ui.demo:application"


def start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "docket.cli", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until_up(base: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the console exited: {process.communicate()[1]}")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("the console did not come up within 60 s")


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    return err


def await_done(database: Path, run_id: str) -> RunStatus:
    with SyncDocket(demo.url(database)) as docket:
        return docket.await_run(run_id, timeout=30).status


def resolve(database: Path, run_id: str) -> None:
    with SyncDocket(demo.url(database), nodes=demo.nodes) as docket:
        docket.resolve_interrupt(run_id, "approval", {"decision": "rejected"})


def test_docket_ui_serves_the_console_with_a_token_and_a_worker(tmp_path: Path) -> None:
    database = tmp_path / "cli.db"
    demo.publish(database)
    demo.waiting_expense(database, "exp-cli", "Lin", 12.0)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    console = start(
        "ui",
        "--app",
        APP,
        "--backend",
        demo.url(database),
        "--port",
        str(port),
        "--worker",
        env={"DOCKET_UI_TOKEN": "cli-token"},
    )
    try:
        wait_until_up(base, console)
        assert httpx.get(f"{base}/runs").status_code == 303  # to the sign-in page
        with httpx.Client(base_url=base, follow_redirects=True) as browser:
            page = browser.get("/runs?token=cli-token")
            assert page.status_code == 200 and "exp-cli" in page.text
        resolve(database, "exp-cli")
        assert await_done(database, "exp-cli") is RunStatus.DONE  # the console's worker
    finally:
        stop(console)


def test_docket_worker_can_serve_the_console(tmp_path: Path) -> None:
    database = tmp_path / "worker.db"
    demo.publish(database)
    demo.waiting_expense(database, "exp-w", "Kay", 30.0)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    worker = start(
        "worker", "--app", APP, "--ui-port", str(port), env={"DOCKET_BACKEND": demo.url(database)}
    )
    try:
        wait_until_up(base, worker)
        page = httpx.get(f"{base}/runs/exp-w")
        assert page.status_code == 200 and 'id="interrupt-approval"' in page.text
        resolve(database, "exp-w")
        assert await_done(database, "exp-w") is RunStatus.DONE
    finally:
        err = stop(worker)
    assert f"docket console: {base}" in err and "stopped: 1 leases" in err


def test_docket_ui_refuses_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ui", "--backend", "memory://", "--worker"]) == 2
    assert "--worker needs --app" in capsys.readouterr().err
    assert main(["ui", "--backend", "memory://", "--port", "0"]) == 2
    assert main(["worker", "--app", APP, "--processes", "2", "--ui-port", "9"]) == 2
    assert "--ui-port serves from one process" in capsys.readouterr().err
