"""``docket runs show`` shows a run's family (issue 19 §4), end to end on a SQLite file: a
real worker runs a parent whose child waits on a person; ``runs show`` of the parent
lists the child with its question and the command that answers it, that command (run
as printed) answers it, and the worker finishes both runs. A child's page names its
parent; a run with no family keeps its ``--json`` shape."""

from __future__ import annotations

import argparse
import json
import shlex
import time
from pathlib import Path

from docket import SyncDocket
from docket.cli._children import answer_command
from docket.core.family import ChildInfo
from docket.records import RunStatus
from tests.cli import kids_app
from tests.cli.helpers import docket_cli, explain

DEADLINE = 120.0  # seconds: a loaded 2-core machine


def _waiting_child(docket: SyncDocket, run_id: str) -> ChildInfo:
    """The parent's child once it waits on its question (polls the store, no fixed sleep)."""
    give_up = time.monotonic() + DEADLINE
    while True:
        children = docket.children(run_id)
        if children and children[0].open_interrupts:
            return children[0]
        if time.monotonic() > give_up:
            raise AssertionError(f"no child of {run_id} waits on a question: {children}")
        time.sleep(0.05)


def test_runs_show_lists_children_and_their_questions_and_the_printed_answer_works(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'kids.db'}"
    env = {"DOCKET_BACKEND": url}
    parent_id = kids_app.PARENT_ID
    with SyncDocket(url, nodes=kids_app.NODES, poll_interval=0.05) as docket:
        docket.save_graph(kids_app.CHILD)
        ref = docket.save_graph(kids_app.PARENT)
        docket.start_worker()
        docket.start_run(ref, {"amount": 120}, run_id=parent_id)
        child = _waiting_child(docket, parent_id)
        child_id = child.child_run_id
        assert child_id == f"{parent_id}:0:approve:1@1"

        shown = docket_cli("runs", "show", parent_id, env=env)
        assert shown.returncode == 0, explain(shown)
        lines = shown.stdout.splitlines()
        at = lines.index("children (1):")
        assert lines[at + 1 :] == [
            f"  {child_id}  node approve, task {parent_id}:0:approve, attempt 1: waiting, awaited",
            "    interrupt decision: node ask waits for 'decision'",
            f"      question  {kids_app.QUESTION}",
            '      schema    {"type": "enum", "values": ["approved", "rejected"]}',
            f"      answer    docket runs resolve {child_id} decision ANSWER_JSON",
        ], explain(shown)
        assert not any(line.startswith("parent") for line in lines)

        as_json = docket_cli("runs", "show", parent_id, "--json", env=env)
        assert as_json.returncode == 0, explain(as_json)
        family = json.loads(as_json.stdout)
        assert "parent" not in family
        (listed,) = family["children"]
        assert listed["child_run_id"] == child_id and listed["status"] == "waiting"
        assert listed["awaited"] is True and listed["started"] is True
        assert [i["id"] for i in listed["open_interrupts"]] == ["decision"]
        assert listed["open_interrupts"][0]["metadata"] == {"question": kids_app.QUESTION}

        of_child = docket_cli("runs", "show", child_id, env=env)
        assert of_child.returncode == 0, explain(of_child)
        assert (
            f"parent      {parent_id} (task {parent_id}:0:approve, node approve, attempt 1)"
            in of_child.stdout.splitlines()
        ), explain(of_child)
        child_json = json.loads(docket_cli("runs", "show", child_id, "--json", env=env).stdout)
        link = child_json["parent"]
        assert link.pop("graph_hash") and link == {
            "run_id": parent_id,
            "task_id": f"{parent_id}:0:approve",
            "node_id": "approve",
            "attempt": 1,
            "graph_id": "purchase",
        }
        assert "children" not in child_json

        # the printed command, as a person would paste it, answers the child
        command = shlex.split(lines[-1].split("answer", 1)[1].strip())
        assert command[:3] == ["docket", "runs", "resolve"]
        answer = [w if w != "ANSWER_JSON" else '"approved"' for w in command[3:]]
        resolved = docket_cli("runs", *command[2:3], *answer, env=env)
        assert resolved.returncode == 0, explain(resolved)
        done = docket.await_run(parent_id, timeout=DEADLINE)
        assert done.status is RunStatus.DONE, done.failure
        assert done.output == {"verdict": "approved 120"}

        after = docket_cli("runs", "show", parent_id, env=env)
        assert after.returncode == 0, explain(after)
        tail = after.stdout.splitlines()
        at = tail.index("children (1):")
        assert tail[at + 1 :] == [
            f"  {child_id}  node approve, task {parent_id}:0:approve, attempt 1: done"
        ], explain(after)

        # a run with no family: no "parent" line, no "children" section, the same JSON keys
        plain = docket.start_run(kids_app.CHILD.id, {"amount": 1}, run_id="plain-1")
        docket.await_run(plain.id, timeout=DEADLINE)
        alone = docket_cli("runs", "show", plain.id, env=env)
        assert alone.returncode == 0, explain(alone)
        assert "children" not in alone.stdout and "parent" not in alone.stdout
        keys = set(json.loads(docket_cli("runs", "show", plain.id, "--json", env=env).stdout))
        assert not keys & {"parent", "children"}


def test_the_answer_command_repeats_the_connection_but_never_a_password() -> None:
    def line(**given: str | None) -> str:
        options = {"backend": None, "app": None, "tenant": None, **given}
        return answer_command(argparse.Namespace(**options), "p:0:a:1@1", "why not")

    assert line() == "docket runs resolve p:0:a:1@1 'why not' ANSWER_JSON"
    assert line(backend="sqlite:///a b.db", tenant="t1") == (
        "docket runs resolve --backend 'sqlite:///a b.db' --tenant t1 p:0:a:1@1 'why not' "
        "ANSWER_JSON"
    )
    assert line(backend="postgresql://u:secret@db/x", app="my.app:create") == (
        "docket runs resolve --app my.app:create p:0:a:1@1 'why not' ANSWER_JSON"
    )
