"""``docket runs show`` lists a map's items and their states (issue 19 §4), a real
subprocess reading a real map run on a SQLite file: item 1 fails once and waits for its
retry, then the run finishes."""

from __future__ import annotations

import json
from pathlib import Path

from docket import SyncDocket
from docket.cli._output import _when
from tests.cli import cli_app
from tests.cli.helpers import docket_cli, explain
from tests.cli.map_app import RUN_ID, MapRun


def test_runs_show_lists_the_items_of_a_map_while_one_waits_and_when_done(
    tmp_path: Path,
) -> None:
    scenario = MapRun(tmp_path / "maps.db")
    parked = scenario.parked()
    (due,) = parked.timers.values()
    env = {"DOCKET_BACKEND": scenario.url}

    shown = docket_cli("runs", "show", RUN_ID, env=env)
    assert shown.returncode == 0, explain(shown)
    lines = shown.stdout.splitlines()
    at = lines.index("map square over items (step 1): 4 items: 3 done, 1 retrying")
    assert lines[at + 1] == (
        f"  [1] retrying: attempt 2 due {_when(due.fires_at)}; "
        "attempt 1 failed: exception: RuntimeError: item 1 fails once"
    ), explain(shown)
    assert lines[at + 2 :] == [], explain(shown)  # the done items are only counted

    as_json = docket_cli("runs", "show", RUN_ID, "--json", env=env)
    assert as_json.returncode == 0, explain(as_json)
    (square,) = json.loads(as_json.stdout)["maps"]
    assert (square["node_id"], square["over"], square["step"], square["total"]) == (
        "square",
        "items",
        1,
        4,
    )
    assert square["counts"] == {"done": 3, "retrying": 1}
    assert [(i["index"], i["state"], i["attempt"]) for i in square["items"]] == [
        (0, "done", 1),
        (1, "retrying", 2),
        (2, "done", 1),
        (3, "done", 1),
    ]
    assert square["items"][1]["task_id"] == f"{RUN_ID}:1:square[1]"
    assert square["items"][1]["reason"] == "exception: RuntimeError: item 1 fails once"

    done = scenario.finished()
    assert done.output == {"squares": [0, 1, 4, 9]}
    shown = docket_cli("runs", "show", RUN_ID, env=env)
    assert shown.returncode == 0, explain(shown)
    assert "map square over items (step 1): 4 items: 4 done" in shown.stdout.splitlines()
    as_json = docket_cli("runs", "show", RUN_ID, "--json", env=env)
    (square,) = json.loads(as_json.stdout)["maps"]
    assert [(i["state"], i["attempt"]) for i in square["items"]] == [
        ("done", 1),
        ("done", 2),
        ("done", 1),
        ("done", 1),
    ]


def test_runs_show_keeps_its_shape_for_a_graph_without_maps(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    with SyncDocket(url, nodes=cli_app.NODES) as docket:
        docket.start_run(docket.save_graph(cli_app.GRAPH), run_id="plain")
        docket.drain_due()
    env = {"DOCKET_BACKEND": url}
    shown = docket_cli("runs", "show", "plain", env=env)
    assert shown.returncode == 0 and "map " not in shown.stdout, explain(shown)
    as_json = json.loads(docket_cli("runs", "show", "plain", "--json", env=env).stdout)
    assert "maps" not in as_json
