"""The application the admission-limit proof's worker processes run (``docket worker --app
tests.proof.admission_app:create``): one graph whose run is unfinished but not executing
for part of its life.

``enter`` writes ``enter <run id> <time> <pid>`` and parks the run on a durable timer
(``Sleep`` for ``$DOCKET_TEST_PARK`` seconds, default 0.3): the run holds no claim and no
worker while it sleeps, so an *execution* limit would not count it, but it is unfinished,
so an *admission* limit does. Then ``leave`` holds ``$DOCKET_TEST_HOLD`` seconds (default
0.05) and writes ``leave <run id> <time> <pid>``. Lines go to
``$DOCKET_TEST_LOG_DIR/runs-<pid>.log`` and times are ``time.monotonic()`` readings, one
system-wide clock on Linux, so lines of different processes compare. A run's life, as the
proof counts it, is its first ``enter`` .. its last ``leave``.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path

from docket import (
    FINISH,
    START,
    Docket,
    GraphBuilder,
    NodeContext,
    NodeRegistry,
    NodeState,
    S,
    Sleep,
)

NODES = NodeRegistry()


def _write(kind: str, run_id: str, when: float) -> None:
    directory = os.environ.get("DOCKET_TEST_LOG_DIR")
    if directory:
        with (Path(directory) / f"runs-{os.getpid()}.log").open("a", encoding="utf-8") as out:
            out.write(f"{kind} {run_id} {when:.6f} {os.getpid()}\n")


@NODES.node("admission.enter")
def enter(state: NodeState, ctx: NodeContext) -> Sleep:
    _write("enter", ctx.run_id, time.monotonic())
    park = timedelta(seconds=float(os.environ.get("DOCKET_TEST_PARK", "0.3")))
    return Sleep(for_=park, update={"parked": True})


@NODES.node("admission.leave")
async def leave(state: NodeState, ctx: NodeContext) -> dict[str, object]:
    await asyncio.sleep(float(os.environ.get("DOCKET_TEST_HOLD", "0.05")))
    _write("leave", ctx.run_id, time.monotonic())
    return {"left": True}


GRAPH = (
    GraphBuilder("admitted")
    .field("parked", S.boolean())
    .field("left", S.boolean())
    .node("enter", "admission.enter")
    .node("leave", "admission.leave")
    .edge("go", START, "enter")
    .edge("on", "enter", "leave")
    .edge("end", "leave", FINISH)
    .output("left")
    .build()
)


def create() -> Docket:
    return Docket(
        os.environ["DOCKET_BACKEND"],
        nodes=NODES,
        claim_ttl=float(os.environ.get("DOCKET_TEST_CLAIM_TTL", "5")),
        poll_interval=float(os.environ.get("DOCKET_TEST_POLL", "0.1")),
    )
