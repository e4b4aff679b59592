"""The chaos campaign's queue limit (``bench/chaos.py``): a share of the campaign's runs go
through a queue limited to ``LIMIT`` and the workers' own records must never show more
than ``LIMIT`` of them executing at once, through the kills and the server restarts.

The queued runs are runs of their own graph (``chaos_q``: one node ``q`` that holds for
``HOLD`` seconds), ``chaos-q-<i>``, one for every fifth campaign run, submitted in
bursts of ``BURST`` so that the queue always has more due runs than it may run. The node
appends ``qbegin <run> <task> <attempt> <worker> <unix time>`` when it starts and
``qend …`` when it returns to ``queue-<worker>.log``. After the campaign:

* every queued run is ``done``;
* ``queue_overlaps``: the moments at which more than ``LIMIT`` executions ran at once.
  An execution whose worker was killed before it logged its end ran until the kill; one
  that ran in a drain whose claim was taken from it (the ``lost`` log: a claim that
  expired under a worker stalled by a restart, whose slot expired with it) no longer
  held its slot and is left out, as the re-execution check explains such drains;
* the slots come back: once the workers are stopped, the queue holds none (``running``
  reaches 0 within the claim TTL and a little, as leases are released or expire).

Sabotage ``queue_unlimited``: the harness configures the queue without its limit and
checks the same records against ``LIMIT``: the count must see the overlaps.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from bench.chaos_workers import read_lines
from docket import FINISH, START, GraphBuilder, NodeContext, NodeState, S
from docket.records import GraphRef, RunStatus
from docket.values import JSONValue

if TYPE_CHECKING:
    from docket import NodeRegistry, SyncDocket

QUEUE: Final = "chaos-q"
GRAPH_ID: Final = "chaos_q"
LIMIT: Final = 2
BURST: Final = 3 * LIMIT
HOLD: Final = 0.4  # seconds a queued node runs
SHARE: Final = 5  # one queued run per this many campaign runs
SLOTS_BACK: Final = 10.0  # seconds past the claim TTL for every slot to be back
DRAIN_SLACK: Final = 0.05  # seconds: a drain's span (monotonic) placed on the wall clock

__all__ = ["LIMIT", "QUEUE", "QueueLoad", "queue_graph", "register"]


def register(nodes: NodeRegistry, append: Callable[[str, str], None]) -> None:
    """Add the queued node to the campaign's registry (``append`` is ``chaos_app._append``:
    one line to ``<name>-<worker>.log``)."""

    @nodes.node("chaos_queued")
    async def queued(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
        worker = os.environ.get("DOCKET_CHAOS_WORKER", "local")
        what = f"{ctx.run_id} {ctx.task_id} {ctx.attempt} {worker}"
        append("queue", f"qbegin {what} {time.time():.6f}")
        try:
            await asyncio.sleep(HOLD)
        finally:  # a cancelled execution (a worker stopping) ends here too
            append("queue", f"qend {what} {time.time():.6f}")
        return {"held": True}


def queue_graph() -> GraphBuilder:
    return (
        GraphBuilder(GRAPH_ID)
        .field("held", S.boolean())
        .node("q", "chaos_queued")
        .edge("go", START, "q")
        .edge("end", "q", FINISH)
        .output("held")
    )


def queued_runs(runs: int) -> int:
    """How many queued runs a campaign of ``runs`` runs submits (whole bursts)."""
    return max(1, runs // SHARE // BURST) * BURST


def run_id_of(index: int) -> str:
    return f"chaos-q-{index:05}"


class QueueLoad:
    """The harness's side of the queued runs: the queue, their submission, their checks."""

    def __init__(self, docket: SyncDocket, runs: int, sabotage: set[str]) -> None:
        self.docket = docket
        self.total = queued_runs(runs)
        self.submitted = 0
        self.unlimited = "queue_unlimited" in sabotage
        docket.configure_queue(QUEUE, execution_limit=None if self.unlimited else LIMIT)
        self.graph: GraphRef = docket.save_graph(queue_graph().build())

    def submit_until(self, share: float) -> None:
        """Submit whole bursts up to ``share`` (0..1) of the queued runs; a store that is
        away leaves the rest for the next call."""
        from docket.errors import Conflict

        wanted = min(self.total, int(self.total * share) // BURST * BURST)
        if share >= 1.0:
            wanted = self.total
        while self.submitted < wanted:
            try:
                self.docket.start_run(
                    self.graph, run_id=run_id_of(self.submitted), queue=QUEUE, priority=0
                )
            except Conflict:
                pass  # an earlier try landed though its answer was lost
            except Exception:  # the store is away (each backend has its own error types)
                return
            self.submitted += 1

    def finished(self) -> bool:
        if self.submitted < self.total:
            return False
        try:
            page = self.docket.list_runs(limit=1000, graph_id=GRAPH_ID)
        except Exception:  # the store is away
            return False
        return sum(1 for s in page.runs if s.status.terminal) == self.total

    def slots_back(self, claim_ttl: float) -> int:
        """The queue's slots still held once the TTL (and a little) passed; 0 is right."""
        deadline = time.monotonic() + claim_ttl + SLOTS_BACK
        while True:
            try:
                (status,) = [s for s in self.docket.queues() if s.config.name == QUEUE]
                if status.running == 0 or time.monotonic() > deadline:
                    return status.running
            except Exception:  # the store is away
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)

    def check(
        self,
        directory: Path,
        killed: dict[str, float],
        claim_ttl: float,
        problems: list[str],
    ) -> tuple[int, int]:
        """(queue_overlaps, the most executions seen at once); problems are appended."""
        for index in range(self.total):
            run = self.docket.fetch_run(run_id_of(index))
            if run.status is not RunStatus.DONE:
                problems.append(f"{run.id}: {run.status}")
        # lost <run> <outcome> <worker> <began> <ended>: a drain whose claim was taken
        lost: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
        for _, run_id, _outcome, worker, began, ended in read_lines(directory, "lost"):
            lost[(run_id, worker)].append((float(began) - DRAIN_SLACK, float(ended) + DRAIN_SLACK))
        spans = _spans(directory, killed, lost)
        overlaps, peak, first = overlapping(spans, LIMIT)
        if overlaps:
            problems.append(
                f"queue {QUEUE} limited to {LIMIT} ran {peak} executions at once "
                f"({overlaps} moments over the limit; first: {', '.join(first)}; "
                f"killed: {killed})"
            )
        held = self.slots_back(claim_ttl)
        if held:
            problems.append(f"queue {QUEUE}: {held} slots still held after the campaign")
        return overlaps, peak


def _spans(
    directory: Path,
    killed: dict[str, float],
    lost: dict[tuple[str, str], list[tuple[float, float]]],
) -> list[tuple[float, float, str]]:
    """Each execution's (start, end, who: run, attempt, worker) from the queue logs, as
    the module docstring says."""
    begun: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    ended: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for kind, run, task, attempt, worker, when in read_lines(directory, "queue"):
        (begun if kind == "qbegin" else ended)[(run, task, attempt, worker)].append(float(when))
    spans: list[tuple[float, float, str]] = []
    for key, starts in begun.items():
        run, _, _, worker = key
        ends = sorted(ended.get(key, []))
        for start in sorted(starts):
            after = [e for e in ends if e >= start]
            if after:
                end = after[0]
                ends.remove(end)
            else:  # it never returned: its worker was killed (else it runs till the end)
                end = killed.get(worker, float("inf"))
            if any(b <= start <= e for b, e in lost.get((run, worker), [])):
                continue  # its claim (and slot) was taken from its drain
            spans.append((start, end, f"{run}#{key[2]}@{worker}"))
    return spans


def overlapping(spans: list[tuple[float, float, str]], limit: int) -> tuple[int, int, list[str]]:
    """(moments more than ``limit`` ran at once, the most at once, the executions running
    at the first such moment). An execution that ends when another starts does not
    overlap it."""
    edges = sorted(
        [(s, 1, i) for i, (s, _, _) in enumerate(spans)]
        + [(e, -1, i) for i, (_, e, _) in enumerate(spans)]
    )
    running: set[int] = set()
    peak = over = 0
    first: list[str] = []
    for _, step, index in edges:
        if step < 0:
            running.discard(index)
            continue
        running.add(index)
        if len(running) > limit:
            over += 1
            if not first:
                first = [
                    f"{spans[i][2]} {spans[i][0]:.3f}..{spans[i][1]:.3f}" for i in sorted(running)
                ]
        peak = max(peak, len(running))
    return over, peak, first
