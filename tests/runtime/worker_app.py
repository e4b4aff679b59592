"""The application the multi-process tests run with ``docket worker --app
tests.runtime.worker_app:create`` (imported in each worker process).

Configured by environment variables, set by the test for each process:

* ``DOCKET_BACKEND`` — the backend URL (``sqlite://``, ``redis://``, ``postgresql://`` …);
* ``DOCKET_TEST_LOG_DIR`` — where each process appends one line per commit it made
  (``<pid> <run id> <checkpoint seq>``, written by an observer) and one line per node
  attempt it started (``<pid> <run id> <node> <attempt> <unix time>``);
* ``DOCKET_TEST_CLAIM_TTL`` / ``DOCKET_TEST_POLL`` / ``DOCKET_TEST_SHUTDOWN`` — the
  claim TTL, poll interval and shutdown bound;
* ``DOCKET_TEST_STALL`` — when set, the ``stall`` node of this process sleeps for a
  minute instead of returning (a worker that will be killed mid-node);
* ``DOCKET_TEST_HOLD_AFTER`` — when set to N, this process's ``step`` node runs its first
  N attempts normally and then hangs in every later one, so the process ends up holding
  claims on runs in mid-flight until it is killed (a crash test's victim is then busy at
  a moment the test can wait for, however the machine schedules the workers).

A worker that does not stop when told to can be asked what it waits on: SIGUSR1 dumps
every thread's stack, SIGUSR2 every asyncio task's, to its stderr
(``crash_checks.stop_workers`` does both before it reports the process).
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
import time
from pathlib import Path

from docket import (
    FINISH,
    START,
    CommitContext,
    Docket,
    GraphBuilder,
    NodeContext,
    NodeRegistry,
    NodeState,
    R,
    S,
)
from docket.records import Checkpoint

NODES = NodeRegistry()
_steps_started = 0


def _log(name: str, line: str) -> None:
    directory = os.environ.get("DOCKET_TEST_LOG_DIR")
    if directory:
        with (Path(directory) / f"{name}-{os.getpid()}.log").open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()


@NODES.node("step")
async def step(state: NodeState, ctx: NodeContext) -> dict[str, object]:
    global _steps_started
    _log("attempts", f"{os.getpid()} {ctx.run_id} {ctx.node_id} {ctx.attempt} {time.time()}")
    _steps_started += 1
    hold_after = os.environ.get("DOCKET_TEST_HOLD_AFTER")
    if hold_after is not None and _steps_started > int(hold_after):
        await asyncio.sleep(3600)
    await asyncio.sleep(0.005)
    return {"trail": [ctx.node_id]}


@NODES.node("stall")
async def stall(state: NodeState, ctx: NodeContext) -> dict[str, object]:
    _log("attempts", f"{os.getpid()} {ctx.run_id} {ctx.node_id} {ctx.attempt} {time.time()}")
    if os.environ.get("DOCKET_TEST_STALL"):
        await asyncio.sleep(60)
    return {"trail": [ctx.node_id]}


def five_steps() -> GraphBuilder:
    builder = GraphBuilder("five-steps").field("trail", S.list(S.string()), reducer=R.append())
    previous = START
    for index in range(1, 6):
        builder.node(f"s{index}", "step").edge(f"to_s{index}", previous, f"s{index}")
        previous = f"s{index}"
    return builder.edge("end", previous, FINISH).output("trail")


FIVE_STEPS = five_steps().build()
STALL = (
    GraphBuilder("stall")
    .field("trail", S.list(S.string()), reducer=R.append())
    .node("stall", "stall")
    .edge("go", START, "stall")
    .edge("end", "stall", FINISH)
    .output("trail")
    .build()
)


def record_commit(checkpoint: Checkpoint, context: CommitContext) -> None:
    if context.operation == "moment":
        _log("commits", f"{os.getpid()} {checkpoint.run.id} {checkpoint.seq}")


def _dump_tasks(_signum: int, _frame: object) -> None:
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:  # no loop is running (yet, or any more)
        tasks = set()
    print(f"--- {len(tasks)} asyncio tasks of pid {os.getpid()}", file=sys.stderr)
    for task in tasks:
        task.print_stack(file=sys.stderr)
    print("--- end of task dump", file=sys.stderr, flush=True)


def create() -> Docket:
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    signal.signal(signal.SIGUSR2, _dump_tasks)
    return Docket(
        os.environ["DOCKET_BACKEND"],
        nodes=NODES,
        observers=[record_commit],
        claim_ttl=float(os.environ.get("DOCKET_TEST_CLAIM_TTL", "2")),
        poll_interval=float(os.environ.get("DOCKET_TEST_POLL", "0.2")),
        shutdown_timeout=float(os.environ.get("DOCKET_TEST_SHUTDOWN", "5")),
    )
