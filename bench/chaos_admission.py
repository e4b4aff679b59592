"""The chaos campaign's admission limit (``bench/chaos.py``): a share of the campaign's
runs go through a queue whose *admission* limit is ``CAP``, and neither the workers'
records nor the store may ever show more than ``CAP`` of them unfinished at once, through
the kills; every start, admitted or held, must end as a finished run.

The admitted runs are runs of their own graph (``chaos_a``: node ``enter`` parks the run
on a ``Sleep`` of ``PARK`` seconds, node ``leave`` holds ``HOLD`` seconds), ``chaos-a-<i>``,
one for every fifth campaign run, submitted in bursts of ``BURST`` so that the queue
always holds starts beyond its cap. A parked run holds no claim and no worker, so only
the admission limit bounds how many are unfinished. ``enter`` appends ``aenter <run>
<worker> <unix time>`` to ``admission-<worker>.log`` when it starts, ``leave`` appends
``aleave …`` when it returns. After the campaign:

* ``admission_overlaps`` ("admitted never over the cap"): a run's life is its first
  ``aenter`` .. its last ``aleave`` (an execution in a drain whose claim was taken from
  it — the ``lost`` log — is left out: its result was dropped and it may run after the
  run finished); the moments at which more than ``CAP`` lives overlap are counted. The
  store's own count is sampled too: every ``list_queues`` reading of the campaign must
  show at most ``CAP`` admitted.
* ``admission_unfinished`` ("every admitted/held start ends as a finished run"): every
  start is a run that is ``done`` and lived (an ``aleave`` was logged), and the queue's
  ledger empties — nothing admitted, nothing held — within ``LEDGER_EMPTY`` seconds of
  the last run ending, read before the workers are stopped: a finish a killed worker
  never reported, or a promoted start it never initialised, is the survivors' reconcile
  loop's to repair (``admission_reconcile``).

Sabotage ``admission_unlimited``: the harness configures the queue without its admission
limit and checks the same records against ``CAP``: the count must see the overlaps.
Sabotage ``admission_lost``: the harness takes one held start out of the ledger
(``cancel_run`` of a queued run drops it, as a store losing it would): that start never
becomes a finished run, and the check must say so. On a
backend that does not declare ``Feature.ADMISSION`` the load is off (``admitted=0``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Final

from bench.chaos_queues import overlapping
from bench.chaos_workers import read_lines
from docket import FINISH, START, GraphBuilder, NodeContext, NodeState, S, Sleep
from docket.contract.capabilities import Feature
from docket.records import GraphRef, RunStatus
from docket.values import JSONValue

if TYPE_CHECKING:
    from docket import NodeRegistry, SyncDocket

QUEUE: Final = "chaos-adm"
GRAPH_ID: Final = "chaos_a"
CAP: Final = 2
BURST: Final = 3 * CAP
PARK: Final = 0.3  # seconds a run sleeps between its two nodes
HOLD: Final = 0.1  # seconds ``leave`` runs
SHARE: Final = 5  # one admitted run per this many campaign runs
LEDGER_EMPTY: Final = 30.0  # seconds for the ledger to empty once every run is done
DRAIN_SLACK: Final = 0.05  # seconds: a drain's span (monotonic) placed on the wall clock

__all__ = ["CAP", "QUEUE", "AdmissionLoad", "admission_graph", "register"]


def register(nodes: NodeRegistry, append: Callable[[str, str], None]) -> None:
    """Add the admitted runs' nodes to the campaign's registry (``append`` is
    ``chaos_app._append``: one line to ``<name>-<worker>.log``)."""

    @nodes.node("chaos_admit_enter")
    def enter(state: NodeState, ctx: NodeContext) -> Sleep:
        worker = os.environ.get("DOCKET_CHAOS_WORKER", "local")
        append("admission", f"aenter {ctx.run_id} {worker} {time.time():.6f}")
        return Sleep(for_=timedelta(seconds=PARK), update={"parked": True})

    @nodes.node("chaos_admit_leave")
    async def leave(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
        await asyncio.sleep(HOLD)
        worker = os.environ.get("DOCKET_CHAOS_WORKER", "local")
        append("admission", f"aleave {ctx.run_id} {worker} {time.time():.6f}")
        return {"left": True}


def admission_graph() -> GraphBuilder:
    return (
        GraphBuilder(GRAPH_ID)
        .field("parked", S.boolean())
        .field("left", S.boolean())
        .node("enter", "chaos_admit_enter")
        .node("leave", "chaos_admit_leave")
        .edge("go", START, "enter")
        .edge("on", "enter", "leave")
        .edge("end", "leave", FINISH)
        .output("left")
    )


def admitted_runs(runs: int) -> int:
    """How many admitted runs a campaign of ``runs`` runs submits (whole bursts)."""
    return max(1, runs // SHARE // BURST) * BURST


def run_id_of(index: int) -> str:
    return f"chaos-a-{index:05}"


class AdmissionLoad:
    """The harness's side of the admitted runs: the queue, their submission, the store's
    counts sampled while they run, and their checks."""

    def __init__(self, docket: SyncDocket, runs: int, sabotage: set[str]) -> None:
        self.docket = docket
        self.enabled = Feature.ADMISSION in docket.docket.capabilities.features
        self.total = admitted_runs(runs) if self.enabled else 0
        self.submitted = 0
        self.most_admitted = 0  # the most the store counted admitted at one reading
        self.unlimited = "admission_unlimited" in sabotage
        self.lose = "admission_lost" in sabotage
        self.lost: set[str] = set()  # held starts the harness dropped (admission_lost)
        self.graph: GraphRef | None = None
        if self.enabled:
            if self.unlimited:
                docket.configure_queue(QUEUE)
            else:
                docket.configure_queue(QUEUE, admission_limit=CAP)
            self.graph = docket.save_graph(admission_graph().build())

    def submit_until(self, share: float) -> None:
        """Submit whole bursts up to ``share`` (0..1) of the runs; a store that is away
        leaves the rest for the next call."""
        from docket.errors import Conflict

        if self.graph is None:
            return
        wanted = min(self.total, int(self.total * share) // BURST * BURST)
        if share >= 1.0:
            wanted = self.total
        while self.submitted < wanted:
            try:
                self.docket.start_run(self.graph, run_id=run_id_of(self.submitted), queue=QUEUE)
            except Conflict:
                pass  # an earlier try landed though its answer was lost
            except Exception:  # the store is away (each backend has its own error types)
                return
            self.submitted += 1
        if self.lose and not self.lost and self.submitted:
            self._lose_one()

    def _lose_one(self) -> None:
        """The ``admission_lost`` sabotage: drop the last held start (if one is held now)."""
        try:
            held = self.docket.admissions(QUEUE).held
            if held:
                self.docket.cancel_run(held[-1].run_id)
                self.lost.add(held[-1].run_id)
        except Exception:  # the store is away, or it was promoted meanwhile: next call
            return

    def sample(self) -> None:
        """Read the store's admitted count (the most seen is checked against ``CAP``)."""
        if self.enabled:
            self._counts()

    def _counts(self) -> tuple[int, int] | None:
        try:
            found = [s for s in self.docket.queues() if s.config.name == QUEUE]
        except Exception:  # the store is away
            return None
        if not found:
            return None
        self.most_admitted = max(self.most_admitted, found[0].admitted)
        return found[0].admitted, found[0].held

    def finished(self) -> bool:
        """Every start submitted and ended as a done run."""
        if not self.enabled:
            return True
        if self.submitted < self.total:
            return False
        try:
            page = self.docket.list_runs(limit=1000, graph_id=GRAPH_ID)
        except Exception:  # the store is away
            return False
        # a start the sabotage dropped never ends: the check reports it
        return sum(1 for s in page.runs if s.status.terminal) >= self.total - len(self.lost)

    def ledger_left(self) -> tuple[int, int]:
        """(admitted, held) still in the ledger once ``LEDGER_EMPTY`` passed; (0, 0) is
        right. Called while the workers still run: their reconcile finishes what a
        killed worker left."""
        deadline = time.monotonic() + LEDGER_EMPTY
        while True:
            counts = self._counts()
            if counts == (0, 0):
                return 0, 0
            if time.monotonic() > deadline:
                return counts or (-1, -1)
            time.sleep(0.2)

    def killed_amid(self, directory: Path, killed: dict[str, float]) -> int:
        """How many admitted runs had a worker SIGKILLed while they were unfinished (the
        kills the admission checks lived through)."""
        kills = sorted(killed.values())
        return sum(
            1 for start, end in _lives(directory).values() if any(start <= k <= end for k in kills)
        )

    def check(
        self, directory: Path, left: tuple[int, int], problems: list[str]
    ) -> tuple[int, int, int]:
        """(admission_overlaps, admission_unfinished, the most lives at once); problems
        are appended. ``left`` is :meth:`ledger_left`'s answer."""
        if not self.enabled:
            return 0, 0, 0
        unfinished = 0
        lives = _lives(directory)
        for index in range(self.total):
            run_id = run_id_of(index)
            try:
                status = self.docket.fetch_run(run_id).status
            except Exception as exc:  # a start never initialised: NotFound
                status = None
                problems.append(f"{run_id}: never became a run ({type(exc).__name__})")
            if status is not None and status is not RunStatus.DONE:
                problems.append(f"{run_id}: {status}")
            if status is not RunStatus.DONE or run_id not in lives:
                unfinished += 1
                if run_id not in lives:
                    problems.append(f"{run_id}: its nodes never ran to the end")
        if left != (0, 0):
            unfinished += max(sum(left), 1)
            problems.append(
                f"queue {QUEUE}: the ledger still counts {left[0]} admitted and {left[1]} "
                f"held after every run ended"
            )
        spans = [(start, end, run_id) for run_id, (start, end) in lives.items()]
        overlaps, peak, first = overlapping(spans, CAP)
        if overlaps:
            problems.append(
                f"queue {QUEUE} admitting {CAP} had {peak} runs unfinished at once "
                f"({overlaps} moments over the cap; first: {', '.join(first)})"
            )
        if self.most_admitted > CAP:
            overlaps += 1
            problems.append(
                f"queue {QUEUE} admitting {CAP}: the store counted {self.most_admitted} admitted"
            )
        return overlaps, unfinished, peak


def _lives(directory: Path) -> dict[str, tuple[float, float]]:
    """Each run's (first ``aenter``, last ``aleave``), leaving out executions in a drain
    whose claim was taken from it; a run with no ``aleave`` is missing."""
    lost: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for _, run_id, _outcome, worker, began, ended in read_lines(directory, "lost"):
        lost[(run_id, worker)].append((float(began) - DRAIN_SLACK, float(ended) + DRAIN_SLACK))
    enters: dict[str, float] = {}
    leaves: dict[str, float] = {}
    for kind, run_id, worker, when in read_lines(directory, "admission"):
        at = float(when)
        if any(b <= at <= e for b, e in lost.get((run_id, worker), [])):
            continue  # its drain lost its claim: the result was dropped
        if kind == "aenter":
            enters[run_id] = min(enters.get(run_id, at), at)
        else:
            leaves[run_id] = max(leaves.get(run_id, at), at)
    return {run_id: (enters.get(run_id, end), end) for run_id, end in leaves.items()}
