"""The console's Queues page in process (Starlette's TestClient): the list (depth,
running, limit, rate, paused), the pause/resume buttons and the limits forms, over a
memory store and a real SQLite file. A refused form answers 422 with the facade's
reasons and the typed text, and changes nothing stored; a forged POST changes nothing."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from docket import Docket
from docket.contract.memory import MemoryBackend
from docket.contract.protocols import Backend
from docket.records import QueueStatus
from docket.ui import create_app
from tests.cli import queues_app


@pytest.fixture(params=["memory", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend | str]:
    if request.param == "memory":
        yield MemoryBackend()
    else:
        yield f"sqlite:///{tmp_path / 'queues.db'}"


def reader(backend: Backend | str) -> Docket:
    return Docket(backend, nodes=queues_app.NODES)


def stored(backend: Backend | str) -> list[QueueStatus]:
    async def read() -> list[QueueStatus]:
        async with reader(backend) as docket:
            return list(await docket.queues())

    return asyncio.run(read())


@pytest.fixture
def client(backend: Backend | str) -> Iterator[TestClient]:
    async def prepare() -> None:
        async with reader(backend) as docket:
            await docket.save_graph(queues_app.graph())
            await docket.configure_queue("billing", execution_limit=3)
            for n in range(3):  # due, unclaimed: the default queue's depth
                await docket.start_run("queued", run_id=f"r{n}")
            assert docket.backend is not None
            holders = ["a", "b"]  # two claims holding billing slots
            granted = await docket.backend.queues.acquire_slots(  # type: ignore[attr-defined]
                "billing", holders, timedelta(minutes=5)
            )
            assert granted == 2

    asyncio.run(prepare())
    app = create_app(reader(backend), open_docket=True)
    with TestClient(app, follow_redirects=False) as test:
        yield test


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def row(html: str, name: str) -> str:
    return html.split(f'data-queue="{name}"')[1].split("</tr>")[0]


def cells(html: str, name: str) -> list[str]:
    """The first six cells of a queue's row, as text."""
    return [
        re.sub(r"<[^>]+>", "", c).strip()
        for c in re.findall(r"<td[^>]*>(.*?)</td>", row(html, name))
    ][:6]


def test_the_page_lists_depth_running_limit_rate_and_paused(client: TestClient) -> None:
    page = client.get("/queues")
    assert page.status_code == 200
    assert '<a href="/queues" class="active">Queues</a>' in page.text
    assert cells(page.text, "billing") == ["billing", "0", "2", "3", "none", "no"]
    # an unlimited queue takes no slots: running is not counted there
    assert cells(page.text, "default") == ["default", "3", "—", "none", "none", "no"]
    assert 'href="/queues"' in client.get("/runs").text  # the nav link on every page


def test_pause_and_resume_buttons(client: TestClient, backend: Backend | str) -> None:
    page = client.get("/queues")
    token = csrf_of(page.text)
    done = client.post("/queues/billing/pause", data={"csrf": token})
    assert done.status_code == 303 and done.headers["location"] == "/queues?notice=queue_paused"
    shown = client.get(done.headers["location"])
    assert "Queue paused" in shown.text
    assert cells(shown.text, "billing")[5] == "yes"
    assert "/queues/billing/resume" in row(shown.text, "billing")
    assert [s.config.paused for s in stored(backend)] == [True, False]

    done = client.post("/queues/billing/resume", data={"csrf": token})
    assert done.status_code == 303
    assert [s.config.paused for s in stored(backend)] == [False, False]

    missing = client.post("/queues/nope/pause", data={"csrf": token})
    assert missing.status_code == 404 and "no queue &#39;nope&#39;" in missing.text
    assert [s.config.name for s in stored(backend)] == ["billing", "default"]


def test_the_limits_form_saves_and_a_blank_field_keeps_its_value(
    client: TestClient, backend: Backend | str
) -> None:
    token = csrf_of(client.get("/queues").text)
    done = client.post(
        "/queues/billing/limits", data={"csrf": token, "limit": "5", "rate": "20/1s"}
    )
    assert done.status_code == 303 and "queue_saved" in done.headers["location"]
    billing = stored(backend)[0].config
    assert (billing.execution_limit, billing.rate and billing.rate.count) == (5, 20)
    shown = client.get("/queues")
    assert cells(shown.text, "billing") == ["billing", "0", "2", "5", "20/1s", "no"]

    done = client.post("/queues/billing/limits", data={"csrf": token, "limit": "", "rate": "none"})
    assert done.status_code == 303
    billing = stored(backend)[0].config
    assert (billing.execution_limit, billing.rate) == (5, None)

    done = client.post("/queues", data={"csrf": token, "name": "reports", "limit": "1"})
    assert done.status_code == 303
    assert [(s.config.name, s.config.execution_limit) for s in stored(backend)] == [
        ("billing", 5),
        ("default", None),
        ("reports", 1),
    ]


@pytest.mark.parametrize(
    ("form", "reason"),
    [
        ({"limit": "0"}, "execution_limit: expected a positive integer or None, got 0"),
        ({"limit": "lots"}, "execution limit: expected a whole number"),
        ({"rate": "0/1s"}, "rate.count: expected a positive integer, got 0"),
        ({"rate": "fast"}, "rate: expected COUNT/PERIOD"),
        ({"limit": "2", "rate": "1/0.1ms"}, "whole number of milliseconds"),
    ],
)
def test_a_refused_limits_form_answers_422_with_reasons_and_writes_nothing(
    client: TestClient, backend: Backend | str, form: dict[str, str], reason: str
) -> None:
    before = stored(backend)
    token = csrf_of(client.get("/queues").text)
    refused = client.post("/queues/billing/limits", data={"csrf": token, **form})
    assert refused.status_code == 422
    billing = row(refused.text, "billing")
    assert reason.replace("'", "&#39;") in billing and 'role="alert"' in billing
    for typed in form.values():  # the text is kept for correcting
        assert f'value="{typed}"' in billing
    assert stored(backend) == before


@pytest.mark.parametrize(
    ("form", "reason"),
    [
        ({"name": "no spaces", "limit": "2"}, "queue: expected 1-64 characters"),
        ({"name": "", "limit": "2"}, "queue: expected 1-64 characters"),
        ({"name": "fresh", "limit": "-1"}, "execution_limit: expected a positive integer"),
    ],
)
def test_a_refused_new_queue_answers_422_and_creates_nothing(
    client: TestClient, backend: Backend | str, form: dict[str, str], reason: str
) -> None:
    before = stored(backend)
    token = csrf_of(client.get("/queues").text)
    refused = client.post("/queues", data={"csrf": token, **form})
    assert refused.status_code == 422
    added = refused.text.split('id="add-queue"')[1]
    assert reason in added and f'value="{form["name"]}"' in added
    assert stored(backend) == before


def test_an_unknown_queue_forged_posts_and_gets_change_nothing(
    client: TestClient, backend: Backend | str
) -> None:
    before = stored(backend)
    token = csrf_of(client.get("/queues").text)
    assert client.post("/queues/nope/limits", data={"csrf": token, "limit": "2"}).status_code == 404
    forged = client.post("/queues/billing/pause", data={"csrf": "wrong"})
    assert forged.status_code == 403
    no_token = client.post("/queues/billing/limits", data={"limit": "9"})
    assert no_token.status_code == 403
    assert client.get("/queues/billing/pause").status_code == 405
    assert stored(backend) == before


def test_a_backend_without_queues_says_so(tmp_path: Path) -> None:
    docket = Docket(f"lmdb://{tmp_path / 'kv'}", nodes=queues_app.NODES)
    with TestClient(create_app(docket, open_docket=True), follow_redirects=False) as test:
        page = test.get("/queues")
    assert page.status_code == 404
    assert "does not declare" in page.text and "queues" in page.text
