"""``docket runs history|show-at|fork|edit`` and ``docket prune``, each a real subprocess
on a SQLite file (the runs are made and driven in-process, through the same file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docket import SyncDocket
from docket.contract.capabilities import Feature
from docket.records import FORKED_FROM_KEY, EventType, RunStatus
from tests.cli.helpers import docket_cli, explain
from tests.facade.history_app import NODES, asker, ticker

TICKS = 6


@pytest.fixture
def database(tmp_path: Path) -> tuple[str, dict[str, str]]:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    return url, {"DOCKET_BACKEND": url}


def _drain(docket: SyncDocket) -> None:
    while docket.drain_due().drained:
        pass


def test_history_show_at_and_fork(database: tuple[str, dict[str, str]]) -> None:
    url, env = database
    with SyncDocket(url, nodes=NODES) as docket:
        run = docket.start_run(docket.save_graph(ticker(TICKS)), {"label": "cli"})
        _drain(docket)
        done = docket.fetch_run(run.id)
        assert done.status is RunStatus.DONE
        at3 = docket.fetch_run_at(run.id, 3)

    listed = docket_cli("runs", "history", run.id, "--json", env=env)
    assert listed.returncode == 0, explain(listed)
    page = json.loads(listed.stdout)
    seqs = [c["checkpoint_seq"] for c in page["checkpoints"]]
    assert seqs == list(range(1, done.checkpoint_seq + 1))
    assert page["latest"] == done.checkpoint_seq and page["oldest_available"] == 1
    assert all(c["readable"] for c in page["checkpoints"])
    table = docket_cli("runs", "history", run.id, "--limit", "2", env=env)
    assert table.returncode == 0, explain(table)
    assert "SEQ" in table.stdout and "run_initialized" in table.stdout
    assert "(more: --after 2)" in table.stdout

    shown = docket_cli("runs", "show-at", run.id, "3", "--json", env=env)
    assert shown.returncode == 0, explain(shown)
    assert json.loads(shown.stdout)["state"] == at3.state
    text = docket_cli("runs", "show-at", run.id, "3", env=env)
    assert text.returncode == 0 and "checkpoint 3" in text.stdout, explain(text)
    missing = docket_cli("runs", "show-at", run.id, "999", env=env)
    assert missing.returncode == 1, explain(missing)
    assert "no checkpoint 999" in missing.stderr

    # refused forks write nothing and exit 1 (a refused request) or 2 (usage)
    bad = docket_cli("runs", "fork", run.id, "--at", "3", "--patch", '{"nope": 1}', env=env)
    assert bad.returncode == 1, explain(bad)
    assert '"nope" is not a state field' in bad.stderr
    not_json = docket_cli("runs", "fork", run.id, "--patch", "{", env=env)
    assert not_json.returncode == 2, explain(not_json)
    with SyncDocket(url, nodes=NODES) as docket:
        assert len(docket.list_runs().runs) == 1

    forked = docket_cli(
        "runs",
        "fork",
        run.id,
        "--at",
        "3",
        "--id",
        "cli-fork",
        "--patch",
        '{"note": "cli"}',
        "--json",
        env=env,
    )
    assert forked.returncode == 0, explain(forked)
    info = json.loads(forked.stdout)
    assert info["run"]["id"] == "cli-fork" and info["run"]["status"] == "running"
    taken = docket_cli("runs", "fork", run.id, "--id", "cli-fork", env=env)
    assert taken.returncode == 1 and "already exists" in taken.stderr, explain(taken)
    with SyncDocket(url, nodes=NODES) as docket:
        _drain(docket)
        fork = docket.fetch_run("cli-fork")
        assert fork.metadata[FORKED_FROM_KEY] == {"run_id": run.id, "checkpoint_seq": 3}
        assert fork.status is RunStatus.DONE and isinstance(fork.output, dict)
        kept = at3.state["log"]
        assert isinstance(kept, list)
        assert fork.output["log"] == [*kept, *(f"cli-{n}" for n in range(len(kept), TICKS))]


def test_edit(database: tuple[str, dict[str, str]]) -> None:
    url, env = database
    with SyncDocket(url, nodes=NODES) as docket:
        run = docket.start_run(docket.save_graph(asker()))
        _drain(docket)
        assert docket.fetch_run(run.id).status is RunStatus.WAITING
        before = docket.history(run.id)

    refused = docket_cli("runs", "edit", run.id, "--patch", '{"note": 3}', env=env)
    assert refused.returncode == 1, explain(refused)
    edited = docket_cli(
        "runs", "edit", run.id, "--patch", '{"note": "cli"}', "--reason", "typo", env=env
    )
    assert edited.returncode == 0, explain(edited)
    assert f"run {run.id} edited: waiting" in edited.stdout
    with SyncDocket(url, nodes=NODES) as docket:
        events = docket.history(run.id)
        assert events[: len(before)] == before
        edits = [e for e in events if e.type is EventType.STATE_EDITED]
        assert [e.payload["reason"] for e in edits] == ["typo"]
        docket.resolve_interrupt(run.id, "question", "ok")
        _drain(docket)
        assert docket.fetch_run(run.id).output == {"seen": "cli/ok"}

    finished = docket_cli("runs", "edit", run.id, "--patch", '{"note": "late"}', "--json", env=env)
    assert finished.returncode == 1, explain(finished)
    assert json.loads(finished.stderr)["error"]["type"] == "inactive_run"


def test_prune(database: tuple[str, dict[str, str]]) -> None:
    url, env = database
    with SyncDocket(url, nodes=NODES) as docket:
        docket.start_run(docket.save_graph(ticker(2)))
        _drain(docket)
        prunes = Feature.PRUNE in docket.docket.capabilities.features

    nothing = docket_cli("prune", env=env)
    assert nothing.returncode == 2 and "nothing to prune" in nothing.stderr, explain(nothing)
    bad = docket_cli("prune", "--events-older-than", "soon", env=env)
    assert bad.returncode == 2 and "not a duration" in bad.stderr, explain(bad)

    pruned = docket_cli("prune", "--runs-older-than", "30d", "--until-done", "--json", env=env)
    if prunes:  # the SQLite backend may declare prune (then nothing is that old)
        assert pruned.returncode == 0, explain(pruned)
        assert json.loads(pruned.stdout) == {"ran": True, "events": 0, "runs": 0}
    else:
        assert pruned.returncode == 1, explain(pruned)
        assert json.loads(pruned.stderr)["error"]["type"] == "unsupported"

    memory = docket_cli("prune", "--backend", "memory://", "--events-older-than", "7d")
    assert memory.returncode == 0, explain(memory)
    assert memory.stdout.strip() == "pruned 0 events and 0 finished runs"
