"""Resuming a failed run end to end, with real ``docket worker`` processes and the real
``docket runs retry`` command, on a SQLite file and on PostgreSQL.

A three-node chain whose second node raises until a flag file exists fails; the flag is
created (the "fix"); ``docket runs retry --reason`` resumes it; it finishes, and the first
node ran exactly once (executions are counted in a log file every worker appends to).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from docket_postgres.testing import ThrowawayPostgres

from docket import SyncDocket
from docket.records import EventType, RunStatus
from tests.runtime import retry_app
from tests.runtime.crash_checks import ROOT, until, worker_processes

APP = "tests.runtime.retry_app:create"
WORKERS = 2


@pytest.fixture(scope="module")
def postgres() -> Iterator[ThrowawayPostgres]:
    with ThrowawayPostgres() as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    server: ThrowawayPostgres = request.getfixturevalue("postgres")
    return server.url(schema=f"retry_{secrets.token_hex(4)}")


def _env(url: str, tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DOCKET_BACKEND=url,
        DOCKET_TEST_LOG_DIR=str(tmp_path),
        DOCKET_TEST_FLAG=str(tmp_path / "fixed.flag"),
    )
    return env


def _executions(tmp_path: Path) -> list[tuple[str, int]]:
    log = tmp_path / "executions.log"
    if not log.exists():
        return []
    return [
        (node, int(attempt))
        for node, attempt, _ in (line.split() for line in log.read_text().splitlines() if line)
    ]


def _tails(tmp_path: Path, procs: list[subprocess.Popen[str]]) -> str:
    """Each worker's exit code (None: still running) and the tail of its stderr."""
    return "\n".join(
        f"worker {i}: exit {proc.poll()}\n{(tmp_path / f'w{i}.err').read_text()[-2000:]}"
        for i, proc in enumerate(procs)
    )


def test_a_failed_run_is_fixed_and_resumed_with_docket_runs_retry(
    backend_url: str, tmp_path: Path
) -> None:
    env = _env(backend_url, tmp_path)
    with SyncDocket(backend_url, nodes=retry_app.NODES) as docket, worker_processes() as procs:
        for i in range(WORKERS):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "docket.cli", "worker", "--app", APP],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=(tmp_path / f"w{i}.err").open("w"),
                    text=True,
                )
            )
        ref = docket.save_graph(retry_app.GRAPH)
        docket.start_run(ref, run_id="chain")

        def settled(status: RunStatus) -> bool:
            if any(proc.poll() is not None for proc in procs):
                raise AssertionError("a worker exited\n" + _tails(tmp_path, procs))
            return docket.fetch_run("chain").status is status

        try:
            until(lambda: settled(RunStatus.FAILED), 120, "the run to fail", 0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_tails(tmp_path, procs)}") from None
        failed = docket.fetch_run("chain")
        assert failed.failure is not None and failed.failure.node_id == "second"
        assert _executions(tmp_path) == [("first", 1), ("second", 1), ("second", 2)]

        (tmp_path / "fixed.flag").touch()  # the fix
        retried = subprocess.run(
            [sys.executable, "-m", "docket.cli", "runs", "retry", "chain", "--reason", "flag"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert retried.returncode == 0, f"exit {retried.returncode}\n{retried.stderr[-2000:]}"
        assert "run chain retried" in retried.stdout, retried.stdout

        try:
            until(lambda: settled(RunStatus.DONE), 120, "the resumed run to finish", 0.1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_tails(tmp_path, procs)}") from None
        done = docket.fetch_run("chain")
        assert done.output == {"c": "first+second+third"}
        executions = _executions(tmp_path)
        assert [e for e in executions if e[0] == "first"] == [("first", 1)], executions
        assert executions == [
            ("first", 1),
            ("second", 1),
            ("second", 2),
            ("second", 1),  # resumed with a fresh attempt budget
            ("third", 1),
        ]
        history = docket.history("chain")
        (event,) = [e for e in history if e.type is EventType.RUN_RETRIED]
        assert event.payload["reason"] == "flag"

        again = subprocess.run(
            [sys.executable, "-m", "docket.cli", "runs", "retry", "chain"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert again.returncode == 1 and "inactive_run" in again.stderr, again.stderr
        for proc in procs:
            proc.terminate()
        for proc in procs:
            assert proc.wait(timeout=60) == 0, _tails(tmp_path, procs)
