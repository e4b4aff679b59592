"""The console's admission limits in process (Starlette's TestClient): the Queues page's
admission, admitted and held columns, the admission fields of its limits forms, and a
queue's held list (``/queues/{name}/held``), over the memory store (the reference
admission ledger) and every other store that declares admission. A refused form answers
422 with the facade's reasons and the typed text, and changes nothing stored."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from docket import Docket
from docket.backends import from_url
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.memory import MemoryBackend
from docket.contract.protocols import Backend
from docket.records import Admission, QueueStatus
from docket.ui import create_app
from tests.cli import queues_app
from tests.ui.test_queues_page import csrf_of, row

KINDS = ["memory"] + [
    kind
    for kind in ["sqlite"]
    if Feature.ADMISSION in from_url("sqlite:///never-opened.db").capabilities().features
]


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend | str]:
    if request.param == "memory":
        yield MemoryBackend()
    else:
        yield f"sqlite:///{tmp_path / 'admission.db'}"


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
            await docket.configure_queue("onboarding", admission_limit=1)
            assert docket.backend is not None
            ledger = docket.backend.admissions  # type: ignore[attr-defined]
            # as start_run asks for them (the opaque start is the runtime's)
            answers = [
                await ledger.admit("onboarding", "first", None, 0, b"s"),
                await ledger.admit("onboarding", "later", None, 0, b"s"),
                await ledger.admit("onboarding", "urgent", None, 7, b"s"),
            ]
            assert answers == [Admission.ADMITTED, Admission.HELD, Admission.HELD]

    asyncio.run(prepare())
    app = create_app(reader(backend), open_docket=True)
    with TestClient(app, follow_redirects=False) as test:
        yield test


def cells(html: str, name: str) -> list[str]:
    """Every cell of a queue's row before its forms, as text."""
    return [
        re.sub(r"<[^>]+>", "", c).strip()
        for c in re.findall(r"<td[^>]*>(.*?)</td>", row(html, name), flags=re.S)
    ][:9]


def test_the_page_shows_admission_admitted_and_held(client: TestClient) -> None:
    page = client.get("/queues")
    assert page.status_code == 200
    assert cells(page.text, "onboarding") == [
        *("onboarding", "0", "—", "none", "none", "no"),
        *("1", "1", "2"),
    ]
    assert 'href="/queues/onboarding/held"' in row(page.text, "onboarding")
    # a queue without an admission limit: none, and nothing counted
    assert cells(page.text, "default")[6:] == ["none", "—", "—"]
    assert 'value="1"' in row(page.text, "onboarding")  # the admission field, filled in


def test_the_held_list_shows_admitted_then_held_in_promotion_order(client: TestClient) -> None:
    page = client.get("/queues/onboarding/held")
    assert page.status_code == 200
    listed = re.findall(r'data-run="([^"]+)" data-state="([^"]+)"', page.text)
    assert listed == [("first", "admitted"), ("urgent", "held"), ("later", "held")]
    urgent = page.text.split('data-run="urgent"')[1].split("</tr>")[0]
    assert ">7<" in urgent  # its priority
    assert "Nothing admitted or held" in client.get("/queues/default/held").text
    missing = client.get("/queues/nope/held")
    assert missing.status_code == 404 and "no queue &#39;nope&#39;" in missing.text


def test_the_limits_form_sets_admission_limits_and_a_blank_field_keeps_them(
    client: TestClient, backend: Backend | str
) -> None:
    token = csrf_of(client.get("/queues").text)
    done = client.post(
        "/queues/onboarding/limits",
        data={"csrf": token, "admission": "4", "per_tenant": "2"},
    )
    assert done.status_code == 303 and "queue_saved" in done.headers["location"]
    onboarding = stored(backend)[1].config
    assert (onboarding.admission_limit, onboarding.tenant_admission_limit) == (4, 2)
    assert cells(client.get("/queues").text, "onboarding")[6] == "4 (2/tenant)"

    done = client.post(
        "/queues/onboarding/limits", data={"csrf": token, "limit": "3", "per_tenant": "none"}
    )
    assert done.status_code == 303
    onboarding = stored(backend)[1].config
    assert (
        onboarding.execution_limit,
        onboarding.admission_limit,
        onboarding.tenant_admission_limit,
    ) == (3, 4, None)

    done = client.post("/queues", data={"csrf": token, "name": "fresh", "admission": "2"})
    assert done.status_code == 303
    assert [(s.config.name, s.config.admission_limit) for s in stored(backend)] == [
        ("default", None),
        ("fresh", 2),
        ("onboarding", 4),
    ]


@pytest.mark.parametrize(
    ("form", "reason"),
    [
        ({"admission": "0"}, "admission_limit: expected a positive integer or None, got 0"),
        ({"admission": "many"}, "admission limit: expected a whole number"),
        ({"per_tenant": "-2"}, "tenant_admission_limit: expected a positive integer"),
        ({"per_tenant": "2.5"}, "per-tenant limit: expected a whole number"),
        ({"limit": "2", "admission": "0"}, "admission_limit: expected a positive integer"),
    ],
)
def test_a_refused_admission_form_answers_422_with_reasons_and_writes_nothing(
    client: TestClient, backend: Backend | str, form: dict[str, str], reason: str
) -> None:
    before = stored(backend)
    token = csrf_of(client.get("/queues").text)
    refused = client.post("/queues/onboarding/limits", data={"csrf": token, **form})
    assert refused.status_code == 422
    onboarding = row(refused.text, "onboarding")
    assert reason.replace("'", "&#39;") in onboarding and 'role="alert"' in onboarding
    for typed in form.values():  # the text is kept for correcting
        assert f'value="{typed}"' in onboarding
    assert stored(backend) == before


class _NoAdmission(MemoryBackend):
    """A memory store declaring queues but not admission (a backend written before it)."""

    def capabilities(self) -> Capabilities:
        declared = super().capabilities()
        features = declared.features - {Feature.ADMISSION}
        return Capabilities(limits=declared.limits, features=features, name="no-admission")


def test_a_backend_without_admission_says_so_and_stores_nothing() -> None:
    backend = _NoAdmission()
    docket = Docket(backend, nodes=queues_app.NODES)
    with TestClient(create_app(docket, open_docket=True), follow_redirects=False) as test:
        page = test.get("/queues")
        assert page.status_code == 200  # the queues themselves are there
        held = test.get("/queues/default/held")
        assert held.status_code == 404 and "does not declare" in held.text
        token = csrf_of(page.text)
        refused = test.post("/queues/default/limits", data={"csrf": token, "admission": "2"})
        assert refused.status_code == 422 and "admission" in row(refused.text, "default")
    assert [s.config.admission_limit for s in stored(backend)] == [None]
