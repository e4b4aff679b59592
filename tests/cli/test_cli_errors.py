"""How the ``docket`` command fails (issue 18, items 4-6), each case a real subprocess.

A store that cannot be opened or reached is one ``docket: ...`` line, never a traceback;
a reader that closes the pipe is not an error; commands that only read or change runs
never create a SQLite file; and the reasons behind a refused request are printed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from docket import SyncDocket
from docket.graph.wire import to_json
from tests.cli import cli_app
from tests.cli.helpers import APP, ROOT, cli_env, docket_cli, docket_command, explain, free_port

MISSING_DIR_DB = "sqlite:////nonexistent/dir/x.db"


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A SQLite store holding the approval graph and run ``req-1``, waiting for an answer."""
    db = tmp_path / "app.db"
    with SyncDocket(f"sqlite:///{db}", nodes=cli_app.NODES) as docket:
        docket.save_graph(cli_app.GRAPH)
        docket.start_run("approval", run_id="req-1")
        docket.drain_due()
    return db, {"DOCKET_BACKEND": f"sqlite:///{db}"}


def test_a_sqlite_file_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    graph_file = tmp_path / "approval.json"
    graph_file.write_text(to_json(cli_app.GRAPH), encoding="utf-8")
    result = docket_cli(
        "graph", "publish", str(graph_file), "--app", APP, env={"DOCKET_BACKEND": MISSING_DIR_DB}
    )
    assert result.returncode == 1, explain(result)
    assert result.stderr.splitlines() == [
        "docket: permanent: the store failed: cannot open /nonexistent/dir/x.db: "
        "unable to open database file"
    ], explain(result)
    assert result.stdout == ""


@pytest.mark.parametrize("scheme", ["postgresql", "redis"])
def test_a_refused_server_port_is_one_line(scheme: str) -> None:
    url = f"{scheme}://127.0.0.1:{free_port()}/{'docket' if scheme == 'postgresql' else '0'}"
    human = docket_cli("runs", "list", "--backend", url)
    assert human.returncode == 1, explain(human)
    lines = human.stderr.splitlines()
    assert len(lines) == 1, explain(human)
    assert lines[0].startswith("docket: retryable: the store is unavailable: "), explain(human)
    assert "Traceback" not in human.stderr

    scripted = docket_cli("runs", "list", "--backend", url, "--json")
    assert scripted.returncode == 1, explain(scripted)
    (line,) = scripted.stderr.splitlines()
    assert json.loads(line)["error"]["type"] == "retryable"


def test_a_reader_that_closes_the_pipe_is_not_an_error(
    store: tuple[Path, dict[str, str]],
) -> None:
    _, env = store
    # `docket runs list --json | head -0`: the reader is gone before the first byte
    proc = subprocess.Popen(
        [*docket_command(), "runs", "list", "--json"],
        cwd=ROOT,
        env=cli_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    code = proc.wait(timeout=120)
    assert "BrokenPipeError" not in err and "Traceback" not in err, f"exit {code}\n{err}"
    assert (code, err) == (141, "")  # 128 + SIGPIPE, as a command the signal stopped


READ_ONLY = [
    ("runs", "list"),
    ("runs", "show", "req-1"),
    ("runs", "events", "req-1"),
    ("runs", "watch", "req-1", "--timeout", "1"),
    ("graph", "list"),
    ("graph", "list", "approval"),
]


@pytest.mark.parametrize("command", READ_ONLY, ids=" ".join)
def test_read_only_commands_create_no_database(tmp_path: Path, command: tuple[str, ...]) -> None:
    typo = tmp_path / "tpyo.db"
    result = docket_cli(*command, "--backend", f"sqlite:///{typo}")
    assert result.returncode == 2, explain(result)
    assert result.stderr == (
        f"docket: no database at {typo}: this command creates none "
        "(check the path; `docket migrate` creates a new store)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_apps_mistyped_sqlite_path_is_refused_too(tmp_path: Path) -> None:
    typo = tmp_path / "tpyo.db"
    result = docket_cli("runs", "list", "--app", APP, env={"DOCKET_BACKEND": f"sqlite:///{typo}"})
    assert result.returncode == 2 and "no database at" in result.stderr, explain(result)
    assert not typo.exists()


def test_human_output_shows_the_reasons(store: tuple[Path, dict[str, str]]) -> None:
    _, env = store
    human = docket_cli("runs", "resolve", "req-1", "decision", "42", env=env)
    assert human.returncode == 1, explain(human)
    assert human.stderr.splitlines() == [
        "docket: invalid_input: the resolution value is invalid",
        '  value must be one of ["approved", "rejected"], got 42',
    ]
    scripted = docket_cli("runs", "resolve", "req-1", "decision", "42", "--json", env=env)
    reasons = json.loads(scripted.stderr)["error"]["details"]["reasons"]
    assert reasons == ['value must be one of ["approved", "rejected"], got 42']


def test_refusals_read_as_sentences(store: tuple[Path, dict[str, str]]) -> None:
    db, env = store
    said = {
        "ghost": docket_cli("runs", "show", "ghost", env=env),
        "duplicate": docket_cli("runs", "start", "approval", "--run-id", "req-1", env=env),
        "no graph": docket_cli("runs", "start", "nope", env=env),
    }
    with SyncDocket(f"sqlite:///{db}", nodes=cli_app.NODES) as docket:
        docket.resolve_interrupt("req-1", "decision", "approved")
        docket.drain_due()
    said["finished"] = docket_cli("runs", "retry", "req-1", env=env)
    said["cancel finished"] = docket_cli("runs", "cancel", "req-1", env=env)
    assert {k: (r.returncode, r.stderr) for k, r in said.items()} == {
        "ghost": (1, "docket: not_found: no such run 'ghost'\n"),
        "duplicate": (1, "docket: conflict: run 'req-1' already exists\n"),
        "no graph": (1, "docket: not_found: no such graph 'nope'\n"),
        "finished": (1, "docket: inactive_run: run 'req-1' is done and cannot be retried\n"),
        "cancel finished": (
            1,
            "docket: inactive_run: run 'req-1' is done and cannot be cancelled\n",
        ),
    }
