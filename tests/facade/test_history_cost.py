"""What history costs to keep: the bytes the ``checkpoint_committed`` payloads add to a
long run whose state grows by one list item per step (a chat), against storing the whole
state at every checkpoint (what a snapshot-per-step checkpointer stores).

``measure`` is also a tiny tool: ``python -m tests.facade.test_history_cost 500`` prints
the numbers for a longer run (docs/history.md quotes them).
"""

from __future__ import annotations

import asyncio
import sys

import attrs

from docket import Docket
from docket.core.history import rebuild_at
from docket.core.state import snapshot
from docket.graph.compiler import compile_graph
from docket.records import EventType
from docket.values import canonical_json
from tests.facade.history_app import NODES, ticker


@attrs.frozen
class Cost:
    steps: int
    checkpoints: int
    history_bytes: int  # the channels/status/next payloads of every checkpoint
    snapshot_bytes: int  # the whole state at every checkpoint
    final_state_bytes: int


def measure(steps: int) -> Cost:
    async def go() -> Cost:
        graph = ticker(steps)
        rtg = compile_graph(graph, NODES).runtime
        assert rtg is not None
        async with Docket("memory://", nodes=NODES) as docket:
            run = await docket.start_run(await docket.save_graph(graph))
            while (await docket.drain_due()).drained:
                pass
            events = await docket.history(run.id)
            commits = [e for e in events if e.type is EventType.CHECKPOINT_COMMITTED]
            history = sum(len(canonical_json(e.payload)) for e in commits)
            full = 0
            for seq in range(1, len(commits) + 1):
                at = rebuild_at(events, seq)
                assert at is not None
                full += len(canonical_json(snapshot(rtg, at.channels)))
            final = await docket.fetch_run(run.id)
            return Cost(
                steps=steps,
                checkpoints=len(commits),
                history_bytes=history,
                snapshot_bytes=full,
                final_state_bytes=len(canonical_json(snapshot(rtg, final.channels))),
            )

    return asyncio.run(go())


def test_history_grows_linearly_with_a_growing_state() -> None:
    short, long = measure(40), measure(160)
    print(short, long)
    # four times the steps: a snapshot per step costs ~16 times the bytes, deltas ~4
    assert long.snapshot_bytes > 10 * short.snapshot_bytes
    assert long.history_bytes < 6 * short.history_bytes
    assert long.history_bytes * 3 < long.snapshot_bytes


if __name__ == "__main__":
    print(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 500))
