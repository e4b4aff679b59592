"""``docket runs watch`` on ``Docket.stream``: rows as events commit, tokens inline,
``--after``, and the end when the run finishes or waits (docket/cli/_watch.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from docket import SyncDocket
from docket.cli import main
from docket.cli._watch import _Printer
from docket.records import Emission, Event, EventsPruned, EventType
from tests.cli import cli_app
from tests.facade.test_streams import NODES, Gates, story_graph

AT = datetime(2026, 3, 1, 9, tzinfo=UTC)


def _token(text: str, seq: int, attempt: int = 1, kind: str = "token") -> Emission:
    return Emission(
        tenant_id=None,
        run_id="r",
        node_id="talk",
        task_id="r:1:talk",
        attempt=attempt,
        seq=seq,
        kind=kind,
        data=text,
        at=AT,
    )


def _event(seq: int) -> Event:
    return Event(run_id="r", seq=seq, type=EventType.NODE_COMPLETED, step=1, timestamp=AT)


def test_tokens_print_inline_and_everything_else_on_its_own_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _Printer(as_json=False)
    out.event(_event(1))
    for seq, word in enumerate(["Hello", ", ", "world"], start=1):
        out.emission(_token(word, seq))
    out.emission(_token("again", 1, attempt=2))  # another attempt: a line of its own
    out.emission(_token({"done": 1}, 2, attempt=2, kind="usage"))  # type: ignore[arg-type]
    out.pruned(EventsPruned(run_id="r", first_seq=2, last_seq=4))
    out.event(_event(5))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SEQ", "STEP", "TIME", "TYPE", "NODE/CHANNEL", "PAYLOAD"]
    assert lines[1].split()[:1] == ["1"]
    assert lines[2:6] == [
        "  talk > Hello, world",
        "  talk > again",
        '  talk ~ usage: {"done": 1}',
        "  (events 2..4 were removed by retention)",
    ]
    assert lines[6].split()[:1] == ["5"]

    as_json = _Printer(as_json=True)
    as_json.emission(_token("Hi", 1))
    as_json.pruned(EventsPruned(run_id="r", first_seq=1, last_seq=1))
    first, second = capsys.readouterr().out.splitlines()
    assert json.loads(first)["emission"]["data"] == "Hi"
    assert json.loads(second) == {"pruned": {"first_seq": 1, "last_seq": 1}}


def test_watch_follows_a_run_to_its_end_and_resumes_after_a_seq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'watch.db'}"
    gates = Gates()
    gates.go.set()
    gates.finish.set()
    with SyncDocket(url, nodes=NODES, context={"gates": gates}, poll_interval=0.05) as docket:
        ref = docket.save_graph(story_graph())
        docket.start_worker()
        run = docket.start_run(ref, {"topic": "otters"}, run_id="watched")
        assert main(["runs", "watch", "watched", "--backend", url, "--timeout", "60"]) == 0
        history = docket.history(run.id)
        lines = capsys.readouterr().out.splitlines()
        seqs = [int(line.split()[0]) for line in lines[1:] if line[:1].isdigit()]
        assert seqs == [e.seq for e in history]
        assert lines[-1] == "run watched is done"

        after = history[-3].seq
        args = ["runs", "watch", "watched", "--backend", url, "--after", str(after), "--json"]
        assert main(args) == 0
        printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [p["seq"] for p in printed if "seq" in p] == [after + 1, after + 2]
    assert main(["runs", "watch", "watched", "--backend", url, "--after", "-1"]) == 2


def test_watch_stops_at_a_run_that_waits_for_an_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'wait.db'}"
    with SyncDocket(url, nodes=cli_app.NODES) as docket:
        ref = docket.save_graph(cli_app.GRAPH)
        docket.start_run(ref, run_id="asks")
        docket.drain_due()
        waiting = docket.fetch_run("asks")
    assert main(["runs", "watch", "asks", "--backend", url, "--timeout", "60"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("run asks is waiting")
    assert main(["runs", "watch", "asks", "--backend", url, "--after", str(waiting.event_seq)]) == 0
    assert capsys.readouterr().out.strip() == "run asks is waiting"
