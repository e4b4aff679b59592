"""The console's run page shows a map's items (issue 19 §4), in process over a real map
run on a SQLite file: a table per map node with each item's state, attempt and reason,
while item 1 waits for its retry and once the run is done."""

from __future__ import annotations

import re
from pathlib import Path

from markupsafe import escape
from starlette.testclient import TestClient

from docket import Docket
from docket.ui import create_app
from tests.cli.map_app import NODES, RUN_ID, MapRun
from tests.ui.test_console_failures import NODES as PLAIN_NODES
from tests.ui.test_console_failures import failed as failed_plain_run


def _rows(page: str) -> list[tuple[str, str, str]]:
    """(item, state, attempt) of each row of the map table."""
    found = re.findall(
        r'<tr class="item-\w+" id="item-square-\d+">\s*<td class="num mono">(\d+)</td>\s*'
        r'<td><span class="badge badge-item-\w+">(\w+)</span></td>\s*<td class="num">(\d*)</td>',
        page,
    )
    return [(a, b, c) for a, b, c in found]


def test_the_run_page_has_a_table_of_the_map_items(tmp_path: Path) -> None:
    scenario = MapRun(tmp_path / "maps.db")
    parked = scenario.parked()
    (due,) = parked.timers.values()
    app = create_app(Docket(scenario.url, nodes=NODES), open_docket=True)
    with TestClient(app) as client:
        page = client.get(f"/runs/{RUN_ID}")
    assert page.status_code == 200
    text = page.text
    assert '<section class="card table-card map-items" id="map-square">' in text
    assert "step 1 · 4 items" in text
    assert '<span class="badge badge-item-done">3 done</span>' in text
    assert '<span class="badge badge-item-retrying">1 retrying</span>' in text
    assert _rows(text) == [
        ("0", "done", "1"),
        ("1", "retrying", "2"),
        ("2", "done", "1"),
        ("3", "done", "1"),
    ]
    retrying = text.split('id="item-square-1">', 1)[1].split("</tr>", 1)[0]
    assert due.fires_at.strftime("%Y-%m-%d %H:%M:%S") in retrying
    assert str(escape("exception: RuntimeError: item 1 fails once")) in retrying

    scenario.finished()
    with TestClient(create_app(Docket(scenario.url, nodes=NODES), open_docket=True)) as client:
        page = client.get(f"/runs/{RUN_ID}")
    assert page.status_code == 200
    assert '<span class="badge badge-item-done">4 done</span>' in page.text
    assert [state for _, state, _ in _rows(page.text)] == ["done"] * 4
    assert [attempt for _, _, attempt in _rows(page.text)] == ["1", "2", "1", "1"]


def test_a_run_without_maps_has_no_map_section(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    failed_plain_run(url, "plain-1")
    with TestClient(create_app(Docket(url, nodes=PLAIN_NODES), open_docket=True)) as client:
        page = client.get("/runs/plain-1")
    assert page.status_code == 200 and "map-items" not in page.text
