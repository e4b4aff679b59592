"""``docket runs send`` and the time options of ``docket runs start``, end to end on a
SQLite file: a message is kept, a repeated key is a duplicate, a waiting run takes a
message in the send, and bad times are refused with a clear line and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

from docket import (
    FINISH,
    START,
    GraphBuilder,
    NodeContext,
    NodeRegistry,
    NodeState,
    Receive,
    S,
    SyncDocket,
)
from tests.cli.helpers import docket_cli, explain

NODES = NodeRegistry()


@NODES.node("cli.listen")
def listen(state: NodeState, ctx: NodeContext) -> Receive:
    return Receive("answer", into="answer")


GRAPH = (
    GraphBuilder("listen")
    .field("answer", S.string())
    .node("wait", "cli.listen")
    .edge("a", START, "wait")
    .edge("b", "wait", FINISH)
    .output("answer")
    .build()
)


def test_runs_send_keeps_delivers_and_deduplicates(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'send.db'}"
    env = {"DOCKET_BACKEND": url}
    with SyncDocket(url, nodes=NODES) as docket:
        docket.save_graph(GRAPH)
    started = docket_cli("runs", "start", "listen", "--run-id", "r1", "--timeout", "2h", env=env)
    assert started.returncode == 0, explain(started)
    kept = docket_cli("runs", "send", "r1", "answer", '"yes"', "--key", "k1", env=env)
    assert kept.returncode == 0, explain(kept)
    assert kept.stdout.strip() == "message #1 on 'answer' to run r1: kept (running, checkpoint 2)"
    again = docket_cli("runs", "send", "r1", "answer", '"yes"', "--key", "k1", "--json", env=env)
    assert again.returncode == 0, explain(again)
    assert json.loads(again.stdout)["result"] == "duplicate"
    shown = docket_cli("runs", "show", "r1", env=env)
    assert shown.returncode == 0, explain(shown)
    assert "deadline  " in shown.stdout and "mailbox (1 kept):" in shown.stdout
    assert "  #1 'answer' sent " in shown.stdout and shown.stdout.rstrip().endswith('"yes"')

    with SyncDocket(url, nodes=NODES) as docket:
        docket.start_run("listen", run_id="r2")
        docket.drain_due()
        assert docket.fetch_run("r2").status == "waiting"
        docket.drain_due()
        assert docket.fetch_run("r1").output == {"answer": "yes"}
    taken = docket_cli("runs", "send", "r2", "answer", "plain text", env=env)
    assert taken.returncode == 0, explain(taken)
    assert ": delivered (running," in taken.stdout


def test_bad_times_are_refused_and_nothing_is_started(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'times.db'}"
    env = {"DOCKET_BACKEND": url}
    with SyncDocket(url, nodes=NODES) as docket:
        docket.save_graph(GRAPH)
    naive = docket_cli("runs", "start", "listen", "--start-at", "2030-01-01T00:00:00", env=env)
    assert naive.returncode != 0 and "needs a UTC offset" in naive.stderr, explain(naive)
    bad = docket_cli("runs", "start", "listen", "--timeout", "soon", env=env)
    assert bad.returncode != 0 and "not a duration" in bad.stderr, explain(bad)
    late = docket_cli("runs", "start", "listen", "--deadline", "2001-01-01T00:00:00Z", env=env)
    assert late.returncode != 0 and "deadline" in late.stderr, explain(late)
    with SyncDocket(url, nodes=NODES) as docket:
        assert docket.list_runs().runs == ()
