"""``docket schedules ...`` end to end through ``docket.cli.main`` (in this process: the
app's memory backend is shared by the commands, as a database file would be)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest

from docket import SyncDocket
from docket.cli import main
from tests.cli.helpers import docket_cli, explain
from tests.schedules import memory_app
from tests.schedules.helpers import nodes, report_graph

APP = ["--app", "tests.schedules.memory_app:create"]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args[:2], *APP, *args[2:]])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def fresh_app() -> None:
    memory_app.reset()

    async def save() -> None:
        async with memory_app.create() as docket:
            await docket.save_graph(report_graph())

    asyncio.run(save())


def test_create_list_show_pause_resume_trigger_delete(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(
        capsys,
        "schedules",
        "create",
        "nightly",
        "report",
        "--cron",
        "0 2 * * *",
        "--timezone",
        "Europe/Berlin",
        "--input",
        '{"team": "ops"}',
        "--overlap",
        "buffer_one",
    )
    assert code == 0, err
    assert "nightly" in out and "Europe/Berlin" in out and "2026-06-02 00:00:00Z" in out

    code, out, _ = cli(capsys, "schedules", "list", "--json")
    listed = json.loads(out)
    assert [s["id"] for s in listed] == ["nightly"] and listed[0]["overlap"] == "buffer_one"

    code, out, _ = cli(capsys, "schedules", "pause", "nightly", "--json")
    assert code == 0 and json.loads(out)["paused"] is True
    memory_app.CLOCK.advance(timedelta(days=3))
    code, out, _ = cli(capsys, "schedules", "resume", "nightly", "--json")
    assert code == 0 and json.loads(out)["next_tick_at"].startswith("2026-06-05T00:00:00")

    code, out, _ = cli(capsys, "schedules", "trigger", "nightly")
    assert code == 0 and out.startswith("started nightly@manual-")

    code, out, _ = cli(capsys, "schedules", "show", "nightly")
    assert code == 0 and "nightly" in out and "no" in out

    code, out, _ = cli(capsys, "schedules", "delete", "nightly")
    assert code == 0 and out.strip() == "deleted nightly"
    code, _, err = cli(capsys, "schedules", "show", "nightly")
    assert code == 1 and "no such schedule 'nightly'" in err
    code, _, err = cli(capsys, "schedules", "delete", "nightly")
    assert code == 1 and "no such schedule" in err


def test_a_bad_cron_is_refused_with_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "schedules", "create", "s", "report", "--cron", "99 * * * *")
    assert code == 1
    assert "invalid_schedule" in err or "not a valid cron expression" in err
    code, out, _ = cli(capsys, "schedules", "list", "--json")
    assert json.loads(out) == []


def test_the_installed_command_against_a_sqlite_file(tmp_path: Path) -> None:
    """The real ``docket`` script, one process per command, sharing a SQLite file."""
    db = tmp_path / "app.db"
    with SyncDocket(f"sqlite:///{db}", nodes=nodes) as docket:
        docket.save_graph(report_graph())
    env = {"DOCKET_BACKEND": f"sqlite:///{db}"}
    created = docket_cli(
        "schedules", "create", "hourly", "report", "--cron", "0 * * * *",
        "--input", '{"team": "ops"}', "--json", env=env,
    )  # fmt: skip
    assert created.returncode == 0, explain(created)
    assert json.loads(created.stdout)["cron"] == "0 * * * *"
    bad = docket_cli("schedules", "create", "b", "report", "--cron", "0 * * *", env=env)
    assert bad.returncode == 1 and "invalid_schedule" in bad.stderr, explain(bad)
    triggered = docket_cli("schedules", "trigger", "hourly", "--json", env=env)
    assert triggered.returncode == 0, explain(triggered)
    assert json.loads(triggered.stdout)["run_id"].startswith("hourly@manual-")
    paused = docket_cli("schedules", "pause", "hourly", env=env)
    assert paused.returncode == 0, explain(paused)
    listed = docket_cli("schedules", "list", env=env)
    assert listed.returncode == 0, explain(listed)
    header, row = listed.stdout.splitlines()
    assert header.split()[:4] == ["ID", "GRAPH", "CRON", "TIMEZONE"]
    assert row.startswith("hourly") and " yes " in row and "0 * * * *" in row
