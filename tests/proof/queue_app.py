"""The application the queue-limit proof's worker processes run (``docket worker --app
tests.proof.queue_app:create``): one graph whose single node records when it ran.

Each node attempt appends ``<run id> <start> <end> <pid>`` to
``$DOCKET_TEST_LOG_DIR/spans-<pid>.log`` — ``time.monotonic()`` readings, which on Linux
are one system-wide clock, so lines from different processes compare — after it has
held for ``$DOCKET_TEST_HOLD`` seconds (default 0.05). The proof computes how many
attempts overlapped from these lines alone.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from docket import FINISH, START, Docket, GraphBuilder, NodeContext, NodeRegistry, NodeState, S

NODES = NodeRegistry()


@NODES.node("proof.hold")
async def hold(state: NodeState, ctx: NodeContext) -> dict[str, object]:
    began = time.monotonic()
    await asyncio.sleep(float(os.environ.get("DOCKET_TEST_HOLD", "0.05")))
    ended = time.monotonic()
    directory = os.environ.get("DOCKET_TEST_LOG_DIR")
    if directory:
        with (Path(directory) / f"spans-{os.getpid()}.log").open("a", encoding="utf-8") as out:
            out.write(f"{ctx.run_id} {began:.6f} {ended:.6f} {os.getpid()}\n")
    return {"held": True}


GRAPH = (
    GraphBuilder("held")
    .field("held", S.boolean())
    .node("hold", "proof.hold")
    .edge("go", START, "hold")
    .edge("end", "hold", FINISH)
    .output("held")
    .build()
)


def create() -> Docket:
    return Docket(
        os.environ["DOCKET_BACKEND"],
        nodes=NODES,
        claim_ttl=float(os.environ.get("DOCKET_TEST_CLAIM_TTL", "5")),
        poll_interval=float(os.environ.get("DOCKET_TEST_POLL", "0.1")),
    )
