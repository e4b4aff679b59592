"""The console in process (Starlette's TestClient) over a real SQLite file: pages, filters,
paging, the interrupt form, and the refusals — a refused request changes nothing stored."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from docket import Docket, GraphBuilder, SyncDocket
from docket.graph.model import FINISH, START
from docket.graph.schema import S, schema_to_json
from docket.records import RunStatus
from docket.ui import app as console_app
from docket.ui import create_app
from docket.ui.forms import fields_for, parse_resolution
from docket.ui.graphview import render_svg
from tests.ui import demo

TOKEN = "s3cret-token"


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "console.db"
    demo.publish(path)
    demo.waiting_expense(path, "exp-1", "Ada", 420.0)
    demo.waiting_expense(path, "exp-2", "Grace", 75.5)
    demo.poison_a_run(path, "rep-1")
    return path


def client_for(database: Path, token: str | None = None) -> TestClient:
    docket = Docket(demo.url(database), nodes=demo.nodes)
    return TestClient(create_app(docket, token=token, open_docket=True), follow_redirects=False)


@pytest.fixture
def client(database: Path) -> Iterator[TestClient]:
    with client_for(database) as client:
        yield client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, "no anti-forgery field on the page"
    return found.group(1)


def stored(database: Path, run_id: str) -> tuple[RunStatus, int, int, bool]:
    """What a refused request must leave alone: status, checkpoint, events, poison."""
    with SyncDocket(demo.url(database)) as docket:
        info = docket.inspect_run(run_id)
    return info.run.status, info.run.checkpoint_seq, info.run.event_seq, info.poisoned


def run_ids(html: str) -> list[str]:
    return re.findall(r'<td class="mono"><a href="/runs/([^"?]+)', html)


# -- reading -------------------------------------------------------------------------------


def test_run_list_filters_by_status_graph_and_time(client: TestClient) -> None:
    page = client.get("/runs")
    assert page.status_code == 200
    assert sorted(run_ids(page.text)) == ["exp-1", "exp-2", "rep-1"]
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]

    assert sorted(run_ids(client.get("/runs?status=waiting").text)) == ["exp-1", "exp-2"]
    assert run_ids(client.get("/runs?status=done").text) == []
    assert run_ids(client.get("/runs?graph=report").text) == ["rep-1"]
    # rep-1 was started 30 s in the past (demo.poison_a_run), the expenses just now
    cut = (datetime.now(UTC) - timedelta(seconds=15)).strftime("%Y-%m-%dT%H:%M:%S")
    assert run_ids(client.get(f"/runs?created_before={cut}").text) == ["rep-1"]
    assert sorted(run_ids(client.get(f"/runs?created_after={cut}").text)) == ["exp-1", "exp-2"]

    assert client.get("/runs?status=sleeping").status_code == 400
    assert client.get("/runs?created_after=yesterday").status_code == 400
    assert client.get("/runs?before=garbage").status_code == 400


def test_run_list_pages_with_the_facade_cursor(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_app, "PAGE_SIZE", 2)
    first = client.get("/runs")
    older = re.search(r'href="(/runs\?before=[^"]+)" rel="next"', first.text)
    assert older is not None
    second = client.get(older.group(1).replace("&amp;", "&"))
    seen = run_ids(first.text) + run_ids(second.text)
    assert len(run_ids(first.text)) == 2
    assert sorted(seen) == ["exp-1", "exp-2", "rep-1"]
    assert 'rel="next"' not in second.text


def test_run_page_shows_the_interrupt_form_and_the_position_on_the_graph(
    client: TestClient,
) -> None:
    page = client.get("/runs/exp-1")
    assert page.status_code == 200
    assert 'id="interrupt-approval"' in page.text
    assert 'name="field.decision" value="&#34;approved&#34;"' in page.text
    assert 'name="field.note"' in page.text
    assert 'class="gv-vertex gv-node gv-waiting" data-node="review"' in page.text
    assert 'class="gv-vertex gv-node gv-done" data-node="intake"' in page.text
    assert 'class="gv-vertex gv-node gv-idle" data-node="pay"' in page.text
    assert "interrupt requested" in page.text
    assert 'id="cancel-button"' in page.text and 'id="retry-button"' not in page.text

    poisoned = client.get("/runs/rep-1")
    assert "max_claim_attempts_exceeded" in poisoned.text
    assert 'id="retry-button"' in poisoned.text

    assert client.get("/runs/ghost").status_code == 404


def test_graph_pages_list_versions_and_draw_them(
    client: TestClient, database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with SyncDocket(demo.url(database), nodes=demo.nodes) as docket:
        for label in ("v2", "v3"):
            graph = demo.report_graph()
            newer = graph.put_node("build", "report.build", label=label)
            docket.save_graph(newer)
        hashes = [v.ref.graph_hash for v in docket.list_graph_versions("report").versions]
    assert len(hashes) == 3
    monkeypatch.setattr(console_app, "VERSION_PAGE", 2)
    first = client.get("/graphs/report")
    assert re.findall(r'class="hash" href="/graphs/report/([0-9a-f]+)', first.text) == [
        hashes[0],
        hashes[1],
    ]
    older = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert older is not None
    second = client.get(older.group(1).replace("&amp;", "&"))
    assert re.findall(r'class="hash" href="/graphs/report/([0-9a-f]+)', second.text) == [hashes[2]]
    assert "v3" in first.text  # the newest version is drawn by default

    listing = client.get("/graphs")
    assert 'href="/graphs/expense"' in listing.text and 'href="/graphs/report"' in listing.text
    page = client.get("/graphs/expense")
    assert page.status_code == 200
    assert "<svg" in page.text and "flowchart TD" in page.text
    assert client.get("/graphs/nothing-here").status_code == 404


# -- writing -------------------------------------------------------------------------------


def test_resolve_checks_the_answer_against_the_schema_before_storing(
    client: TestClient, database: Path
) -> None:
    csrf = csrf_of(client.get("/runs/exp-1").text)
    before = stored(database, "exp-1")
    target = "/runs/exp-1/interrupts/approval"
    for form, message in (
        ({}, "required"),
        ({"field.decision": '"maybe"'}, "choose one of the options"),
        ({"field.decision": '"approved"', "field.note": "x" * 201}, "at most 200 characters"),
    ):
        refused = client.post(target, data={"csrf": csrf, **form})
        assert refused.status_code == 422, form
        assert message in refused.text
        assert 'id="interrupt-approval"' in refused.text  # the form is drawn again
        assert stored(database, "exp-1") == before

    answered = client.post(
        target, data={"csrf": csrf, "field.decision": '"approved"', "field.note": "ok"}
    )
    assert answered.status_code == 303
    assert answered.headers["location"] == "/runs/exp-1?notice=resolved"
    assert stored(database, "exp-1")[0] is RunStatus.RUNNING
    assert "Run resolved." in client.get(answered.headers["location"]).text
    assert "Pwned" not in client.get("/runs/exp-1?notice=Pwned").text
    with SyncDocket(demo.url(database), nodes=demo.nodes) as docket:
        docket.drain_due()
        assert docket.fetch_run("exp-1").output == {
            "receipt": "paid 420.0 to Ada",
            "checks": [
                "received from Ada",
                "budget left after 420.0",
                "fraud check passed",
                "reviewed by a person",
            ],
        }
    done = client.get("/runs/exp-1")
    assert "paid 420.0 to Ada" in done.text
    assert 'class="gv-vertex gv-terminal gv-done" data-node="$finish"' in done.text
    # an answered interrupt cannot be answered again
    finished = stored(database, "exp-1")
    again = client.post(target, data={"csrf": csrf, "field.decision": '"rejected"'})
    assert again.status_code == 409
    # nor can a finished run be cancelled
    refused = client.post("/runs/exp-1/cancel", data={"csrf": csrf})
    assert refused.status_code == 409 and "Not possible now" in refused.text
    assert stored(database, "exp-1") == finished


def test_cancel_and_retry_change_the_run(client: TestClient, database: Path) -> None:
    csrf = csrf_of(client.get("/runs/exp-2").text)
    cancelled = client.post("/runs/exp-2/cancel", data={"csrf": csrf})
    assert cancelled.status_code == 303
    assert stored(database, "exp-2")[0] is RunStatus.CANCELLED
    retried = client.post("/runs/rep-1/retry", data={"csrf": csrf})
    assert retried.status_code == 303
    assert stored(database, "rep-1")[3] is False
    # cancelling a cancelled run is a no-op
    before = stored(database, "exp-2")
    assert client.post("/runs/exp-2/cancel", data={"csrf": csrf}).status_code == 303
    assert stored(database, "exp-2") == before


def test_cross_site_posts_are_refused_and_change_nothing(
    client: TestClient, database: Path
) -> None:
    csrf = csrf_of(client.get("/runs/exp-1").text)
    before = stored(database, "exp-1")
    attempts: list[tuple[dict[str, str], dict[str, str]]] = [
        ({}, {}),  # no anti-forgery field
        ({"csrf": "x" * 43}, {}),  # a forged one
        ({"csrf": csrf}, {"sec-fetch-site": "cross-site"}),
        ({"csrf": csrf}, {"origin": "http://evil.example"}),
    ]
    for data, headers in attempts:
        refused = client.post("/runs/exp-1/cancel", data=data, headers=headers)
        assert refused.status_code == 403, (data, headers)
        assert stored(database, "exp-1") == before
    assert client.get("/runs/exp-1/cancel").status_code == 405
    allowed = client.post(
        "/runs/exp-1/cancel", data={"csrf": csrf}, headers={"sec-fetch-site": "same-origin"}
    )
    assert allowed.status_code == 303
    assert stored(database, "exp-1")[0] is RunStatus.CANCELLED


def test_a_configured_token_guards_every_page_and_action(database: Path) -> None:
    with client_for(database, token=TOKEN) as client:
        login = client.get("/runs/exp-1")
        assert login.status_code == 303
        assert login.headers["location"].startswith("/login?next=")
        csrf = csrf_of(client.get("/login").text)
        before = stored(database, "exp-1")
        refused = client.post("/runs/exp-1/cancel", data={"csrf": csrf})
        assert refused.status_code == 403
        assert stored(database, "exp-1") == before

        wrong = client.post("/login", data={"csrf": csrf, "token": "guess", "next": "/runs"})
        assert wrong.status_code == 403
        assert client.get("/runs?token=guess").status_code == 403
        forged_login = client.post("/login", data={"token": TOKEN, "next": "/runs"})
        assert forged_login.status_code == 403  # no anti-forgery field

        signed = client.post("/login", data={"csrf": csrf, "token": TOKEN, "next": "//evil"})
        assert signed.status_code == 303 and signed.headers["location"] == "/runs"
        assert client.get("/runs/exp-1").status_code == 200
        assert client.post("/runs/exp-1/cancel", data={"csrf": csrf}).status_code == 303
        assert stored(database, "exp-1")[0] is RunStatus.CANCELLED

    with client_for(database, token=TOKEN) as fresh:
        via_link = fresh.get("/runs?status=waiting&token=" + TOKEN)
        assert via_link.status_code == 303
        assert via_link.headers["location"] == "/runs?status=waiting"  # token not kept in URL
        assert fresh.get("/runs?status=waiting").status_code == 200


# -- the pieces ----------------------------------------------------------------------------


def test_forms_follow_the_schema() -> None:
    enum_fields = fields_for(schema_to_json(S.enum(["yes", "no"])))
    assert [(f.name, f.kind, f.choices) for f in enum_fields] == [
        ("value", "choice", (('"yes"', "yes"), ('"no"', "no")))
    ]
    answer, _ = parse_resolution(schema_to_json(S.enum(["yes", "no"])), {"value": '"no"'})
    assert answer.ok and answer.value == "no"

    count = schema_to_json(S.integer(min=1))
    assert fields_for(count)[0].hint == "at least 1"
    assert parse_resolution(count, {"value": "3"})[0].value == 3
    assert parse_resolution(count, {"value": "three"})[0].errors == {
        "value": "enter a whole number"
    }
    assert "" in parse_resolution(count, {"value": "0"})[0].errors  # below the minimum

    free = fields_for(None)
    assert [(f.name, f.kind) for f in free] == [("value", "json")]
    assert parse_resolution(None, {"value": '{"a": [1, 2]}'})[0].value == {"a": [1, 2]}
    assert "not valid JSON" in parse_resolution(None, {"value": "{"})[0].errors["value"]

    review = schema_to_json(demo.REVIEW_SCHEMA)
    long_note, drawn = parse_resolution(
        review, {"field.decision": '"approved"', "field.note": "x" * 201}
    )
    assert list(long_note.errors) == ["field.note"]  # the schema's reason lands on its field
    assert [f.error is not None for f in drawn] == [False, True]

    flag = schema_to_json(S.object({"ok": S.boolean(required=True), "n": S.float()}))
    parsed, _ = parse_resolution(flag, {"field.ok": "false", "field.n": ""})
    assert parsed.ok and parsed.value == {"ok": False}
    assert parse_resolution(flag, {"field.n": "nan"})[0].errors == {
        "field.ok": "required",
        "field.n": "enter a finite number",
    }


def test_the_drawing_is_well_formed_svg_with_loops_and_joins() -> None:
    graph = (
        GraphBuilder("loop")
        .field("n", S.integer())
        .node("a", "a")
        .node("b", "b")
        .node("c", "c")
        .edge("s", START, "a")
        .edge("ab", "a", "b")
        .edge("ac", "a", "c")
        .edge("again", "b", "a", label="<again & more>")
        .edge("join", ["b", "c"], FINISH)
        .build()
    )
    svg = render_svg(graph, {"a": "done", "b": "active", "edge:ab": "done"})
    root = ET.fromstring(svg)  # escaping keeps it parseable
    texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "<again & more>" in texts
    classes = [g.get("class") for g in root.iter("{http://www.w3.org/2000/svg}g")]
    assert "gv-vertex gv-node gv-active" in classes and "gv-join gv-idle" in classes
    edges = [
        p for p in root.iter("{http://www.w3.org/2000/svg}path") if "gv-edge" in str(p.get("class"))
    ]
    assert len(edges) == 7  # s, ab, ac, again, the join's two feeds and its exit


def test_a_multi_tenant_console_scopes_every_read_and_write(tmp_path: Path) -> None:
    database = tmp_path / "tenants.db"
    url = demo.url(database)
    with SyncDocket(url, nodes=demo.nodes, tenant_mode="required") as docket:
        for tenant in ("acme", "globex"):
            docket.save_graph(demo.expense_graph(), tenant_id=tenant)
            docket.start_run(
                "expense", {"who": tenant, "amount": 1.0}, run_id=f"r-{tenant}", tenant_id=tenant
            )
        docket.drain_due()
    app = create_app(Docket(url, nodes=demo.nodes, tenant_mode="required"), open_docket=True)
    with TestClient(app, follow_redirects=False) as client:
        everyone = client.get("/runs")
        assert sorted(run_ids(everyone.text)) == ["r-acme", "r-globex"]
        assert 'href="/runs/r-acme?tenant=acme"' in everyone.text
        assert run_ids(client.get("/runs?tenant=acme").text) == ["r-acme"]
        assert client.get("/runs/r-acme").status_code == 400  # which tenant?
        assert client.get("/runs/r-acme?tenant=globex").status_code == 404
        page = client.get("/runs/r-acme?tenant=acme")
        assert page.status_code == 200
        csrf = csrf_of(page.text)
        assert 'action="/runs/r-acme/cancel?tenant=acme"' in page.text
        refused = client.post("/runs/r-acme/cancel?tenant=globex", data={"csrf": csrf})
        assert refused.status_code == 404
        assert (
            client.post("/runs/r-acme/cancel?tenant=acme", data={"csrf": csrf}).status_code == 303
        )
        assert client.get("/graphs/expense?tenant=globex").status_code == 200
    with SyncDocket(url, tenant_mode="required") as docket:
        assert docket.fetch_run("r-acme", tenant_id="acme").status is RunStatus.CANCELLED
        assert docket.fetch_run("r-globex", tenant_id="globex").status is RunStatus.WAITING


def _failed_report(database: Path, run_id: str) -> None:
    with SyncDocket(demo.url(database), nodes=demo.nodes) as docket:
        docket.start_run("report", {"day": "1970-01-01"}, run_id=run_id)
        docket.drain_due()
        assert docket.fetch_run(run_id).status is RunStatus.FAILED


def test_a_failed_run_is_retried_from_its_page_with_a_reason(
    client: TestClient, database: Path
) -> None:
    _failed_report(database, "rep-f")
    page = client.get("/runs/rep-f")
    assert 'id="retry-failed-button"' in page.text and 'name="reason"' in page.text
    assert 'id="retry-button"' not in page.text  # the poisoned retry is for poisoned runs
    waiting = client.get("/runs/exp-1").text
    assert 'id="retry-failed-button"' not in waiting
    csrf = csrf_of(page.text)

    before = stored(database, "rep-f")
    too_long = client.post("/runs/rep-f/retry", data={"csrf": csrf, "reason": "x" * 2001})
    assert too_long.status_code == 400 and stored(database, "rep-f") == before

    retried = client.post("/runs/rep-f/retry", data={"csrf": csrf, "reason": "data loaded"})
    assert retried.status_code == 303
    status, checkpoint, _, _ = stored(database, "rep-f")
    assert status is RunStatus.RUNNING and checkpoint == before[1] + 1
    with SyncDocket(demo.url(database)) as docket:
        (event,) = [e for e in docket.history("rep-f") if str(e.type) == "run_retried"]
    assert event.payload["reason"] == "data loaded"
    assert "Run retried." in client.get(retried.headers["location"]).text

    # a second operator's click, after the first: refused, nothing written
    after = stored(database, "rep-f")
    again = client.post("/runs/rep-f/retry", data={"csrf": csrf, "reason": "me too"})
    assert again.status_code == 409 and "nothing to retry" in again.text
    assert stored(database, "rep-f") == after
