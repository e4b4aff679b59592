"""``docket runs start``, ``docket graph list``, ``docket graph check --app`` and the open
interrupts ``docket runs show`` prints (issue 18, item 7), each a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

from docket import SyncDocket
from docket.graph.wire import to_json
from tests.cli import cli_app
from tests.cli.helpers import APP, docket_cli, explain


def test_graph_check_uses_the_apps_node_registry(tmp_path: Path) -> None:
    graph_file = tmp_path / "approval.json"
    graph_file.write_text(to_json(cli_app.GRAPH), encoding="utf-8")
    env = {"DOCKET_BACKEND": f"sqlite:///{tmp_path / 'unused.db'}"}  # the factory reads it
    bare = docket_cli("graph", "check", str(graph_file))
    assert bare.returncode == 1 and "unknown_implementation" in bare.stdout, explain(bare)
    checked = docket_cli("graph", "check", str(graph_file), "--app", APP, env=env)
    assert checked.returncode == 0, explain(checked)
    assert checked.stdout.splitlines()[-1] == f"{graph_file}: ok, 0 errors, 1 warning"
    hashed = docket_cli("graph", "hash", str(graph_file), "--app", APP, env=env)
    with SyncDocket("memory://", nodes=cli_app.NODES) as docket:
        assert hashed.stdout.strip() == docket.save_graph(cli_app.GRAPH).graph_hash
    assert not (tmp_path / "unused.db").exists()  # checking opens no store


def test_start_list_and_show_runs(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    env = {"DOCKET_BACKEND": f"sqlite:///{db}"}
    graph_file = tmp_path / "approval.json"
    graph_file.write_text(to_json(cli_app.GRAPH), encoding="utf-8")
    published = docket_cli("graph", "publish", str(graph_file), "--app", APP, env=env)
    assert published.returncode == 0, explain(published)
    graph_hash = published.stdout.split()[2]

    started = docket_cli("runs", "start", "approval", "--run-id", "req-7", "--input", "{}", env=env)
    assert started.returncode == 0, explain(started)
    assert started.stdout == "run req-7 started: running (checkpoint 1)\n"
    generated = docket_cli("runs", "start", "approval", "--json", env=env)
    assert generated.returncode == 0, explain(generated)
    other_id = json.loads(generated.stdout)["run"]["id"]
    assert other_id != "req-7"
    not_an_object = docket_cli("runs", "start", "approval", "--input", "[1]", env=env)
    assert not_an_object.returncode == 2, explain(not_an_object)
    assert not_an_object.stderr == "docket: --input must be a JSON object, got list\n"

    versions = docket_cli("graph", "list", "approval", env=env)
    assert versions.returncode == 0, explain(versions)
    assert versions.stdout.splitlines()[1].split()[0] == graph_hash
    in_use = docket_cli("graph", "list", "--json", env=env)
    assert json.loads(in_use.stdout)["graphs"] == [
        {"graph_id": "approval", "latest_run_graph_hash": graph_hash, "runs": 2}
    ]

    with SyncDocket(f"sqlite:///{db}", nodes=cli_app.NODES) as docket:
        docket.drain_due()
    shown = docket_cli("runs", "show", "req-7", env=env)
    assert shown.returncode == 0, explain(shown)
    assert shown.stdout.splitlines()[-3:] == [
        "interrupt decision: node ask waits for 'decision'",
        "  question  Approve the request?",
        '  schema    {"type": "enum", "values": ["approved", "rejected"]}',
    ]


def test_start_a_tenants_run(tmp_path: Path) -> None:
    env = {"DOCKET_BACKEND": f"sqlite:///{tmp_path / 'tenants.db'}"}
    graph_file = tmp_path / "approval.json"
    graph_file.write_text(to_json(cli_app.GRAPH), encoding="utf-8")
    published = docket_cli(
        "graph", "publish", str(graph_file), "--allow-unknown-nodes", "--tenant", "acme", env=env
    )
    assert published.returncode == 0, explain(published)
    started = docket_cli("runs", "start", "approval", "--tenant", "acme", "--run-id", "t1", env=env)
    assert started.returncode == 0, explain(started)
    listed = docket_cli("runs", "list", "--tenant", "acme", env=env)
    assert listed.stdout.splitlines()[1].split()[:2] == ["t1", "acme"], explain(listed)
    elsewhere = docket_cli("runs", "start", "approval", "--tenant", "other", env=env)
    assert elsewhere.returncode == 1, explain(elsewhere)
    assert elsewhere.stderr == "docket: not_found: no such graph 'approval'\n"
