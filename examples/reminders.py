"""Reminders: a durable sleep, a message wait with a timeout, and a run deadline, on a
SQLite file with a worker running in the background.

Each run waits (holding no worker) before it reminds someone, then waits for their
acknowledgement as a message; without one in time it escalates. Three runs show the
three endings:

* ``ada``   — the acknowledgement is sent *while the run still sleeps*: it is kept in the
              run's mailbox and taken the moment the run asks for it;
* ``grace`` — nobody answers: the wait times out and the run escalates;
* ``linus`` — the run's deadline passes while it sleeps: it fails ``deadline_exceeded``.

The times are seconds so the example finishes quickly; a real one would sleep for days
(``Sleep(for_=timedelta(days=7))``) and survive any restart in between.

    python examples/reminders.py
"""

from __future__ import annotations

import tempfile
import time
from datetime import timedelta
from pathlib import Path

from docket import (
    FINISH,
    START,
    GraphBuilder,
    NodeContext,
    NodeRegistry,
    NodeState,
    R,
    Receive,
    S,
    Sleep,
    SyncDocket,
    Update,
)
from docket.records import EventType, Run

nodes = NodeRegistry()


@nodes.node("reminders.wait")
def wait(state: NodeState, ctx: NodeContext) -> Sleep:
    """Sleep until it is time to remind (the run holds no worker meanwhile)."""
    seconds = ctx.config["delay_s"]
    assert isinstance(seconds, int | float)
    return Sleep(for_=timedelta(seconds=seconds), update={"log": ["slept"]})


@nodes.node("reminders.remind")
def remind(state: NodeState, ctx: NodeContext) -> Receive:
    """Remind, then wait for the acknowledgement (a message on topic "ack")."""
    seconds = ctx.config["ack_within_s"]
    assert isinstance(seconds, int | float)
    reminded = f"reminded {state['who']}"
    return Receive(
        "ack",
        into="ack",
        update={"log": [reminded]},  # written with the acknowledgement
        timeout=timedelta(seconds=seconds),
        # written instead when none comes in time
        on_timeout={"log": [reminded, "no answer: escalated to the manager"], "escalated": True},
    )


@nodes.node("reminders.close")
def close(state: NodeState, ctx: NodeContext) -> Update:
    ack = state.get("ack")
    return Update({"log": [f"closed ({'acknowledged: ' + str(ack) if ack else 'escalated'})"]})


graph = (
    GraphBuilder("reminder")
    .input("who", S.string(), required=True)
    .field("ack", S.string())
    .field("escalated", S.boolean())
    .field("log", S.list(S.string()), reducer=R.append())
    .node("wait", "reminders.wait", config={"delay_s": 1.5})
    .node("remind", "reminders.remind", config={"ack_within_s": 1.5})
    .node("close", "reminders.close")
    .edge("a", START, "wait")
    .edge("b", "wait", "remind")
    .edge("c", "remind", "close")
    .edge("d", "close", FINISH)
    .output("log")
    .output("escalated")
    .policy("topics", {"ack": {"type": "string"}})
    .build()
)


def finished(docket: SyncDocket, run_id: str) -> Run:
    """Wait for the run to end (polling the store; the worker does the work)."""
    give_up = time.monotonic() + 60
    while True:
        run = docket.fetch_run(run_id)
        if run.status.terminal:
            return run
        if time.monotonic() > give_up:
            raise SystemExit(f"run {run_id} did not finish: {run.status}")
        time.sleep(0.05)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="docket-reminders-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'reminders.db'}"
        with SyncDocket(url, nodes=nodes, poll_interval=0.05) as docket:
            ref = docket.save_graph(graph)
            docket.start_worker()
            docket.start_run(ref, {"who": "ada"}, run_id="ada", timeout=timedelta(seconds=30))
            docket.start_run(ref, {"who": "grace"}, run_id="grace", timeout=timedelta(seconds=30))
            docket.start_run(ref, {"who": "linus"}, run_id="linus", timeout=timedelta(seconds=1))
            sent = docket.send("ada", "ack", "on it", idempotency_key="ada-ack-1")
            again = docket.send("ada", "ack", "on it", idempotency_key="ada-ack-1")
            print(
                f"ack sent to ada while she sleeps: {'delivered' if sent.delivered else 'kept'}"
                f"; sent again with the same key: {'duplicate' if again.duplicate else 'new'}"
            )
            for run_id in ("ada", "grace", "linus"):
                run = finished(docket, run_id)
                if run.failure is not None:
                    print(f"run {run_id} is {run.status}: {run.failure.code}")
                    continue
                log = run.output.get("log") if run.output else None
                lines = [str(line) for line in log] if isinstance(log, list) else []
                print(f"run {run_id} is {run.status}: {'; '.join(lines)}")
            taken = [e for e in docket.history("ada") if e.type is EventType.MESSAGE_CONSUMED]
            print(f"ada's acknowledgement was taken {len(taken)} time(s)")


if __name__ == "__main__":
    main()
