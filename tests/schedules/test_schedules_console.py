"""The console's Schedules page in process (Starlette's TestClient) over a memory store:
the list, and the pause, resume and trigger buttons (a forged POST changes nothing)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from docket.facade import Docket
from docket.ui import create_app
from tests.schedules.helpers import manual_docket, nodes, report_graph


@pytest.fixture
def client() -> Iterator[tuple[TestClient, Docket]]:
    _, backend, _ = manual_docket()

    async def prepare() -> None:
        async with Docket(backend, nodes=nodes) as docket:
            await docket.save_graph(report_graph())
            await docket.create_schedule(
                "nightly", "report", cron="0 2 * * *", timezone="Europe/Berlin", input={"team": "a"}
            )

    asyncio.run(prepare())
    docket = Docket(backend, nodes=nodes)
    with TestClient(create_app(docket, open_docket=True), follow_redirects=False) as test:
        yield test, Docket(backend, nodes=nodes)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def read_back(docket: Docket) -> tuple[bool, str | None]:
    """Whether the schedule is paused, and the newest run's id (through a fresh Docket)."""

    async def read() -> tuple[bool, str | None]:
        async with docket:
            s = await docket.get_schedule("nightly")
            page = await docket.list_runs()
            return s.paused, (page.runs[0].id if page.runs else None)

    return asyncio.run(read())


def test_the_page_lists_schedules_and_its_buttons_pause_resume_and_trigger(
    client: tuple[TestClient, Docket],
) -> None:
    test, docket = client
    page = test.get("/schedules")
    assert page.status_code == 200
    row = page.text.split('data-schedule="nightly"')[1].split("</tr>")[0]
    for cell in ("0 2 * * *", "Europe/Berlin", "2026-06-02 00:00:00 UTC", ">no<", "report"):
        assert cell in row
    assert 'href="/schedules" class="active"' in page.text
    token = csrf_of(page.text)

    forged = test.post("/schedules/nightly/pause", data={"csrf": "forged"})
    assert forged.status_code == 403
    assert read_back(Docket(docket.backend, nodes=nodes)) == (False, None)

    paused = test.post("/schedules/nightly/pause", data={"csrf": token})
    assert paused.status_code == 303 and "schedule_paused" in paused.headers["location"]
    assert read_back(Docket(docket.backend, nodes=nodes))[0] is True
    listed = test.get("/schedules?notice=schedule_paused")
    assert "Schedule paused." in listed.text and ">Resume<" in listed.text

    resumed = test.post("/schedules/nightly/resume", data={"csrf": token})
    assert resumed.status_code == 303
    assert read_back(Docket(docket.backend, nodes=nodes))[0] is False

    triggered = test.post("/schedules/nightly/trigger", data={"csrf": token})
    assert triggered.status_code == 303
    assert triggered.headers["location"].startswith("/runs/nightly%40manual-")
    _, run_id = read_back(Docket(docket.backend, nodes=nodes))
    assert run_id is not None and run_id.startswith("nightly@manual-")

    missing = test.post("/schedules/gone/pause", data={"csrf": token})
    assert missing.status_code == 404
