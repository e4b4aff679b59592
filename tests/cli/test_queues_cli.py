"""``docket queues list|set-limit|set-rate|pause|resume`` end to end: through
``docket.cli.main`` in this process over a shared memory backend, and as the installed
``docket`` script against a real SQLite file. Refused input exits non-zero with its
reason and leaves the stored queues as they were."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from docket import SyncDocket
from docket.cli import main
from docket.records import QueueStatus
from tests.cli import queues_app
from tests.cli.helpers import docket_cli, explain

APP = ["--app", "tests.cli.queues_app:create"]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args[:2], *APP, *args[2:]])
    out, err = capsys.readouterr()
    return code, out, err


def listed(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    code, out, err = cli(capsys, "queues", "list", "--json")
    assert code == 0, err
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


def stored() -> list[QueueStatus]:
    async def read() -> list[QueueStatus]:
        async with queues_app.create() as docket:
            return list(await docket.queues())

    return asyncio.run(read())


@pytest.fixture(autouse=True)
def fresh_app() -> None:
    queues_app.reset()


def test_list_shows_limits_running_and_depth_and_the_changes_take(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def prepare() -> None:
        async with queues_app.create() as docket:
            await docket.save_graph(queues_app.graph())
            for n in range(2):  # due, unclaimed: the default queue's depth
                await docket.start_run("queued", run_id=f"r{n}")

    asyncio.run(prepare())
    assert listed(capsys) == [
        {
            "name": "default",
            "execution_limit": None,
            "rate": None,
            "paused": False,
            "limited": False,
            "running": 0,
            "depth": 2,
        }
    ]

    code, out, err = cli(capsys, "queues", "set-limit", "billing", "3")
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "LIMIT", "RATE", "PAUSED", "RUNNING", "DEPTH"]
    assert row.split() == ["billing", "3", "none", "no", "0", "0"]

    code, out, err = cli(capsys, "queues", "set-rate", "billing", "20/1s", "--json")
    assert code == 0, err
    assert json.loads(out)["rate"] == {"count": 20, "period_ms": 1000, "text": "20/1s"}
    assert json.loads(out)["execution_limit"] == 3  # the limit set before is kept

    # two claims hold slots: the ledger counts them as running
    granted = asyncio.run(
        queues_app.BACKEND.queues.acquire_slots("billing", ["h1", "h2"], timedelta(minutes=5))
    )
    assert granted == 2

    code, out, err = cli(capsys, "queues", "pause", "billing")
    assert code == 0, err
    assert out.splitlines()[1].split() == ["billing", "3", "20/1s", "yes", "2", "0"]

    code, out, err = cli(capsys, "queues", "list")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()[1:]]
    # an unlimited queue takes no slots, so its running is not counted ("-")
    assert rows == [
        ["billing", "3", "20/1s", "yes", "2", "0"],
        ["default", "none", "none", "no", "-", "2"],
    ]

    code, out, err = cli(capsys, "queues", "resume", "billing", "--json")
    assert code == 0, err
    assert json.loads(out)["paused"] is False

    code, _, err = cli(capsys, "queues", "set-limit", "billing", "none")
    code2, _, err2 = cli(capsys, "queues", "set-rate", "billing", "none")
    assert (code, code2) == (0, 0), err + err2
    billing = listed(capsys)[0]
    assert billing["execution_limit"] is None and billing["rate"] is None
    assert billing["limited"] is False

    # set-limit NAME none is how an unlimited queue is made; the default can be limited
    code, _, err = cli(capsys, "queues", "set-limit", "reports", "none")
    code2, out, err2 = cli(capsys, "queues", "set-rate", "default", "100/m", "--json")
    assert (code, code2) == (0, 0), err + err2
    assert json.loads(out)["rate"]["text"] == "100/1m"
    assert [r["name"] for r in listed(capsys)] == ["billing", "default", "reports"]


@pytest.mark.parametrize(
    ("args", "code", "reason"),
    [
        (("set-limit", "billing", "abc"), 2, "execution limit: expected a whole number"),
        (("set-limit", "billing", "2.5"), 2, "execution limit: expected a whole number"),
        (("set-limit", "billing", "0"), 1, "execution_limit: expected a positive integer"),
        (("set-limit", "billing", "-4"), 1, "execution_limit: expected a positive integer"),
        (("set-rate", "billing", "20"), 2, "rate: expected COUNT/PERIOD"),
        (("set-rate", "billing", "20/xs"), 2, "rate: expected COUNT/PERIOD"),
        (("set-rate", "billing", "1/0.5ms"), 2, "whole number of milliseconds"),
        (("set-rate", "billing", "1/9999d"), 2, "at most 1000 days"),
        (("set-rate", "billing", "0/1s"), 1, "rate.count: expected a positive integer"),
        (("set-limit", "no spaces", "3"), 1, "queue: expected 1-64 characters"),
        (("set-rate", "x" * 65, "1/s"), 1, "queue: expected 1-64 characters"),
        (("pause", "nope"), 1, "no queue 'nope'"),
        (("resume", "nope"), 1, "no queue 'nope'"),
        (("pause", "bad/name"), 1, "queue: expected 1-64 characters"),
    ],
)
def test_refused_input_exits_non_zero_with_its_reason_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], code: int, reason: str
) -> None:
    assert cli(capsys, "queues", "set-limit", "billing", "3")[0] == 0
    before = stored()

    got, out, err = cli(capsys, "queues", *args)
    assert (got, out) == (code, ""), err
    assert reason in err
    assert stored() == before


def test_refusals_print_json_errors_for_scripts(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "queues", "set-limit", "billing", "0", "--json")
    assert code == 1
    error = json.loads(err)["error"]
    assert error["type"] == "invalid_options"
    assert error["details"]["reasons"] == [
        "execution_limit: expected a positive integer or None, got 0"
    ]
    code, _, err = cli(capsys, "queues", "pause", "nope", "--json")
    assert code == 1 and json.loads(err)["error"]["type"] == "not_found"
    assert [s.config.name for s in stored()] == ["default"]


def test_the_installed_command_against_a_sqlite_file(tmp_path: Path) -> None:
    """The real ``docket`` script, one process per command, sharing a SQLite file."""
    db = tmp_path / "app.db"
    env = {"DOCKET_BACKEND": f"sqlite:///{db}"}
    with SyncDocket(f"sqlite:///{db}"):
        pass  # a store with its schema (the commands create no file)
    made = docket_cli("queues", "set-limit", "billing", "3", env=env)
    assert made.returncode == 0, explain(made)
    rated = docket_cli("queues", "set-rate", "billing", "5/500ms", "--json", env=env)
    assert rated.returncode == 0, explain(rated)
    assert json.loads(rated.stdout)["rate"]["text"] == "5/500ms"
    bad = docket_cli("queues", "set-limit", "billing", "0", env=env)
    assert bad.returncode == 1 and "positive integer" in bad.stderr, explain(bad)
    missing = docket_cli("queues", "pause", "nope", env=env)
    assert missing.returncode == 1 and "no queue 'nope'" in missing.stderr, explain(missing)
    paused = docket_cli("queues", "pause", "billing", env=env)
    assert paused.returncode == 0, explain(paused)
    shown = docket_cli("queues", "list", env=env)
    assert shown.returncode == 0, explain(shown)
    rows = [line.split() for line in shown.stdout.splitlines()]
    assert rows == [
        ["NAME", "LIMIT", "RATE", "PAUSED", "RUNNING", "DEPTH"],
        ["billing", "3", "5/500ms", "yes", "0", "0"],
        ["default", "none", "none", "no", "-", "0"],
    ]


def test_a_backend_without_queues_is_refused_with_the_reason(tmp_path: Path) -> None:
    env = {"DOCKET_BACKEND": f"lmdb://{tmp_path / 'kv'}"}
    for args in (("list",), ("set-limit", "billing", "3"), ("pause", "default")):
        refused = docket_cli("queues", *args, env=env)
        assert refused.returncode == 1, explain(refused)
        assert "does not declare the queues feature" in refused.stderr, explain(refused)


def test_a_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "typo.db"
    result = docket_cli("queues", "list", env={"DOCKET_BACKEND": f"sqlite:///{db}"})
    assert result.returncode == 2 and "no database at" in result.stderr, explain(result)
    assert not db.exists()
