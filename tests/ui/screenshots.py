"""Take the screenshots in docs/console.md: ``python -m tests.ui.screenshots docs/img``.

Prepares a small history (runs done, waiting, cancelled, failed and poisoned) in a
temporary SQLite file, serves the console over it and photographs its pages in Chromium.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from docket import SyncDocket
from docket.ui.app import segment
from tests.cli.map_app import RUN_ID as MAP_RUN_ID
from tests.cli.map_app import MapRun
from tests.ui import demo
from tests.ui.serving import chromium, serve


def prepare(database: Path) -> None:
    demo.publish(database)
    demo.poison_a_run(database, "report-1128")
    with SyncDocket(demo.url(database), nodes=demo.nodes) as docket:
        for run_id, day in (("report-1127", "2026-11-27"), ("report-0101", "1970-01-01")):
            docket.start_run("report", {"day": day}, run_id=run_id)
        docket.drain_due()
    people = [("exp-1041", "Ada", 420.0), ("exp-1042", "Grace", 75.5)]
    people += [("exp-1043", "Linus", 1280.0), ("exp-1044", "Barbara", 310.25)]
    for run_id, who, amount in people:
        demo.waiting_expense(database, run_id, who, amount)
    with SyncDocket(demo.url(database), nodes=demo.nodes) as docket:
        docket.resolve_interrupt("exp-1041", "approval", {"decision": "approved"})
        docket.resolve_interrupt("exp-1042", "approval", {"decision": "rejected"})
        docket.cancel_run("exp-1043")
        docket.drain_due()


def main(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "screens.db"
        prepare(database)
        with serve(database) as base, chromium(width=1280, height=860) as browser:
            page = browser.new_page()
            page.goto(f"{base}/runs")
            page.screenshot(path=str(target / "console-runs.png"))
            page.goto(f"{base}/runs/exp-1044")
            page.check("input[name='field.decision'][value='\"approved\"']")
            page.fill("input[name='field.note']", "x" * 201)
            page.click("#interrupt-approval button[type=submit]")
            page.screenshot(path=str(target / "console-interrupt.png"))
            page.set_viewport_size({"width": 1280, "height": 1240})
            page.goto(f"{base}/runs/exp-1041")
            page.screenshot(path=str(target / "console-run-done.png"))
            page.set_viewport_size({"width": 1280, "height": 860})
            page.goto(f"{base}/runs/report-1128")
            page.screenshot(path=str(target / "console-poisoned.png"))
            page.goto(f"{base}/runs/report-0101")
            page.screenshot(path=str(target / "console-failed.png"))

    photograph_map(target)


def photograph_map(target: Path) -> None:
    """A map run whose item 1 waits for its retry: the run page's map card."""
    with tempfile.TemporaryDirectory() as tmp:
        scenario = MapRun(Path(tmp) / "maps.db")
        scenario.parked(count=8)
        with serve(scenario.db) as base, chromium(width=1280, height=1400) as browser:
            page = browser.new_page()
            page.goto(f"{base}/runs/{segment(MAP_RUN_ID)}")
            page.locator(".map-items").first.screenshot(path=str(target / "console-maps.png"))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
