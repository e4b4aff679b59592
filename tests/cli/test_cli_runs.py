"""Smoke tests of the ``docket`` command line, each command a real subprocess."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from docket_sqlite import SCHEMA_VERSION as SQLITE_SCHEMA

from docket import SyncDocket
from docket.graph.wire import to_json
from tests.cli import cli_app

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.cli.cli_app:create"


def docket_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ)
    full.pop("DOCKET_BACKEND", None)
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "docket.cli", *args],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def database(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    db = tmp_path / "app.db"
    return db, {"DOCKET_BACKEND": f"sqlite:///{db}"}


def test_backends_migrate_and_sql(database: tuple[Path, dict[str, str]]) -> None:
    db, env = database
    listed = docket_cli("backends")
    assert listed.returncode == 0, listed.stderr
    assert "sqlite" in listed.stdout and "memory" in listed.stdout
    report = docket_cli("backends", "--json", env=env)
    assert report.returncode == 0, report.stderr
    chosen = json.loads(report.stdout)["backend"]
    assert chosen["name"] == "sqlite" and "durable.fsync" in chosen["features"]
    assert chosen["migratable"] and chosen["backup"]

    sql = docket_cli("migrate", "--sql", env=env)
    assert sql.returncode == 0 and "CREATE TABLE docket_runs" in sql.stdout
    assert not db.exists()  # printing the DDL touches nothing
    first = docket_cli("migrate", env=env)
    assert first.returncode == 0, first.stderr
    assert f"from version none to {SQLITE_SCHEMA}" in first.stdout
    again = docket_cli("migrate", "--json", env=env)
    assert json.loads(again.stdout) == {"from_version": SQLITE_SCHEMA, "to_version": SQLITE_SCHEMA}

    nothing = docket_cli("runs", "list")
    assert nothing.returncode == 2 and "no backend" in nothing.stderr


def test_publish_list_show_resolve_watch_and_backup(
    tmp_path: Path, database: tuple[Path, dict[str, str]]
) -> None:
    db, env = database
    graph_file = tmp_path / "approval.json"
    graph_file.write_text(to_json(cli_app.GRAPH), encoding="utf-8")
    published = docket_cli("graph", "publish", str(graph_file), "--app", APP, env=env)
    assert published.returncode == 0, published.stderr
    _, graph_id, graph_hash = published.stdout.split()
    assert graph_id == "approval"
    broken = tmp_path / "broken.json"
    broken.write_text(to_json(cli_app.GRAPH.put_edge("x", "ask", "nowhere")), encoding="utf-8")
    refused = docket_cli("graph", "publish", str(broken), "--app", APP, env=env)
    assert refused.returncode == 1 and "invalid_graph" in refused.stderr
    assert _counts(db) == (1, 0, 0, 0)  # only the valid graph was stored

    with SyncDocket(f"sqlite:///{db}", nodes=cli_app.NODES) as docket:
        docket.start_run(graph_id, run_id="req-1")
        docket.drain_due()
        assert docket.fetch_run("req-1").graph_hash == graph_hash

    listing = docket_cli("runs", "list", env=env)
    assert listing.returncode == 0, listing.stderr
    header, row = listing.stdout.splitlines()[:2]
    assert header.split()[:4] == ["RUN", "TENANT", "GRAPH", "STATUS"]
    assert row.split()[:4] == ["req-1", "-", "approval", "waiting"]
    as_json = json.loads(docket_cli("runs", "list", "--json", env=env).stdout)
    assert [r["id"] for r in as_json["runs"]] == ["req-1"] and not as_json["has_more"]

    shown = docket_cli("runs", "show", "req-1", env=env)
    assert "interrupt decision: node ask waits for 'decision'" in shown.stdout
    events = json.loads(docket_cli("runs", "events", "req-1", "--json", env=env).stdout)
    assert [e["seq"] for e in events["events"]] == list(range(1, events["latest_seq"] + 1))

    before = _counts(db)
    bad = docket_cli("runs", "resolve", "req-1", "decision", "42", "--app", APP, env=env)
    assert bad.returncode == 1 and "invalid_input" in bad.stderr
    ghost = docket_cli("runs", "cancel", "ghost", env=env)
    assert ghost.returncode == 1 and "not_found" in ghost.stderr
    other = docket_cli("runs", "show", "req-1", "--tenant", "acme", "--json", env=env)
    assert other.returncode == 1 and json.loads(other.stderr)["error"]["type"] == "not_found"
    assert _counts(db) == before

    resolved = docket_cli("runs", "resolve", "req-1", "decision", "approved", env=env)
    assert resolved.returncode == 0, resolved.stderr
    assert "run req-1 resolved: running" in resolved.stdout
    worker = subprocess.Popen(
        [sys.executable, "-m", "docket.cli", "worker", "--app", APP],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        watched = docket_cli(
            "runs", "watch", "req-1", "--timeout", "30", "--interval", "0.1", env=env
        )
    finally:
        worker.terminate()
        _, worker_err = worker.communicate(timeout=30)
    assert worker.returncode == 0, worker_err
    assert watched.returncode == 0, watched.stderr
    assert "run_completed" in watched.stdout and watched.stdout.rstrip().endswith("is done")
    assert "stopped: 1 leases" in worker_err

    retried = docket_cli("runs", "retry", "req-1", env=env)
    assert retried.returncode == 1 and "inactive_run" in retried.stderr
    copy = tmp_path / "backup.db"
    backup = docket_cli("backup", str(copy), env=env)
    assert backup.returncode == 0, backup.stderr
    with sqlite3.connect(copy) as conn:
        status = conn.execute("SELECT status FROM docket_runs WHERE run_id = 'req-1'").fetchone()
    assert status == ("done",)


def _counts(db: Path) -> tuple[int, ...]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return tuple(
            int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
            for t in ("docket_graphs", "docket_runs", "docket_events", "docket_transitions")
        )
