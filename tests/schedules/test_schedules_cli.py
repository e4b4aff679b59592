"""``docket schedules ...`` end to end through ``docket.cli.main`` (in this process: the
app's memory backend is shared by the commands, as a database file would be)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from docket.cli import main
from tests.schedules import memory_app
from tests.schedules.helpers import report_graph

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
