"""Claim throughput with named queues on vs off (issue #25: limited >= 0.8 x plain).

One in-process worker of ``concurrency`` slots claims and finishes ``runs`` runs of the
``single_node`` shape (one claim each), all started before the worker starts, so the
window holds nothing but claiming and the one commit per claim. Two workloads, the same
but for queues:

- ``plain``: no queue configured; the runs in ``default`` at priority 0 — each poll is
  one ``claim_due``, as before queues existed;
- ``limited``: the runs in a queue whose ``execution_limit`` equals the worker's
  concurrency (``limit``; so it does not bind: the cost measured is the ledger's), with
  priorities -1/0/1 mixed — each poll takes slots (``acquire_slots``), claims in that
  queue, gives back the unused slots, and each claim's end releases its slot.

claims/s = the worker's leases over the time from its start to the last run's final
commit (seen by a commit observer). The trials alternate ``repeats`` times and each
workload's best is kept (a shared machine only slows a trial down). After each trial
every run must be ``done`` and, for ``limited``, the queue must hold no slot
(``running == 0``): a trial that fails this is reported GATED instead of a number.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

import attrs

from bench.shapes import NODES, docket_graph
from bench.stores import Place
from docket import Docket
from docket.records import RunStatus

__all__ = ["MODES", "QueueClaims", "queue_lines", "queue_pair", "queue_table"]

MODES: Final = ("plain", "limited")
QUEUE: Final = "bench"
TRIAL_TIMEOUT: Final = 300.0
TARGET: Final = 0.8  # issue #25: limited claims/s at least this share of plain


@attrs.define
class QueueClaims:
    backend: str
    mode: str  # "plain" or "limited"
    runs: int = 0
    concurrency: int = 0
    limit: int | None = None  # the queue's execution limit (``limited`` only)
    claims: int = 0
    seconds: float = 0.0
    gated: str | None = None
    unavailable: str | None = None

    @property
    def claims_per_s(self) -> float:
        return self.claims / self.seconds if self.seconds else 0.0

    def as_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "claims_per_s": self.claims_per_s}


async def _trial(
    url: str, mode: str, runs: int, concurrency: int, limit: int, tag: str
) -> QueueClaims:
    cell = QueueClaims("", mode, runs, concurrency, limit=limit if mode == "limited" else None)
    finished: set[str] = set()
    all_done = asyncio.Event()
    last_commit = 0.0

    async def observe(checkpoint: Any, context: Any) -> None:
        nonlocal last_commit
        run = checkpoint.run
        if run.status.terminal and run.id.startswith(tag):
            finished.add(run.id)
            last_commit = time.perf_counter()
            if len(finished) == runs:
                all_done.set()

    async with Docket(url, nodes=NODES, observers=[observe], poll_interval=0.05) as docket:
        ref = await docket.save_graph(docket_graph("single_node"))
        limited = mode == "limited"
        if limited:
            await docket.configure_queue(QUEUE, execution_limit=limit)
        ids = [f"{tag}{i}" for i in range(runs)]
        for i, run_id in enumerate(ids):
            if limited:
                await docket.start_run(
                    ref, {"value": 1}, run_id=run_id, queue=QUEUE, priority=i % 3 - 1
                )
            else:
                await docket.start_run(ref, {"value": 1}, run_id=run_id)
        started = time.perf_counter()
        async with docket.worker(concurrency=concurrency, name=f"q{mode}") as worker:
            try:
                await asyncio.wait_for(all_done.wait(), TRIAL_TIMEOUT)
            except TimeoutError:
                return attrs.evolve(cell, gated=f"{len(finished)} of {runs} runs finished")
            seconds = last_commit - started
            claims = worker.stats.leases
        problem = await _read_back(docket, ids, limited)
    if problem is not None:
        return attrs.evolve(cell, gated=problem)
    return attrs.evolve(cell, claims=claims, seconds=seconds)


async def _read_back(docket: Docket, ids: list[str], limited: bool) -> str | None:
    """Every run done; a limited queue's slots all back (its claims all ended)."""
    for run_id in ids:
        run = await docket.fetch_run(run_id)
        if run.status is not RunStatus.DONE:
            return f"run {run_id} is {run.status}"
    if limited:
        (status,) = [s for s in await docket.queues() if s.config.name == QUEUE]
        if status.running:
            return f"{status.running} slots still held after every claim ended"
    return None


async def queue_pair(
    place_of: Callable[[str], Place],
    backend: str,
    runs: int,
    concurrency: int,
    repeats: int,
    limit: int | None = None,
) -> list[QueueClaims]:
    """``plain`` and ``limited`` on one backend (``memory`` or a benchmark server),
    alternating ``repeats`` times: the best trial of each, or its first failed one.
    ``limit``: the queue's execution limit (default: ``concurrency``)."""
    memory = backend == "memory"
    missing = None if memory else place_of("q_probe").env.missing(backend)
    if missing is not None:
        return [QueueClaims(backend, mode, unavailable=missing) for mode in MODES]
    tried: dict[str, list[QueueClaims]] = {mode: [] for mode in MODES}
    for round_ in range(repeats):
        for mode in MODES:
            url = "memory://" if memory else place_of(f"q_{mode}_{round_}").docket_url()
            try:
                got = await _trial(
                    url, mode, runs, concurrency, limit or concurrency, f"{mode}{round_}-"
                )
            except Exception as exc:
                got = QueueClaims(backend, mode, unavailable=f"{type(exc).__name__}: {exc}"[:160])
            tried[mode].append(attrs.evolve(got, backend=backend))
    kept = []
    for mode in MODES:
        failed = [c for c in tried[mode] if c.gated is not None or c.unavailable is not None]
        kept.append(failed[0] if failed else max(tried[mode], key=lambda c: c.claims_per_s))
    return kept


def queue_table(cells: list[QueueClaims]) -> str:
    rows = [
        "| backend | workload | runs | concurrency | limit | claims | seconds | claims/s "
        "| limited/plain |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    plain = {c.backend: c for c in cells if c.mode == "plain"}
    for c in cells:
        if c.unavailable is not None or c.gated is not None:
            why = c.unavailable or f"GATED: {c.gated}"
            rows.append(f"| {c.backend} | {c.mode} | {why} |||||||")
            continue
        base = plain.get(c.backend)
        ratio = ""
        if c.mode == "limited" and base is not None and base.claims_per_s:
            ratio = f"{c.claims_per_s / base.claims_per_s:.3f}"
        rows.append(
            f"| {c.backend} | {c.mode} | {c.runs} | {c.concurrency} | "
            f"{'none' if c.limit is None else c.limit} | {c.claims} | "
            f"{c.seconds:.2f} | {c.claims_per_s:.0f} | {ratio} |"
        )
    return "\n".join(rows)


def queue_lines(cells: list[QueueClaims]) -> list[str]:
    """``queues <backend> limited/plain=<x> (plain <a>/s, limited <b>/s, target 0.8)``."""
    out = []
    by = {(c.backend, c.mode): c for c in cells}
    for (backend, mode), limited in by.items():
        plain = by.get((backend, "plain"))
        if mode != "limited" or plain is None:
            continue
        failed = [c for c in (plain, limited) if c.gated or c.unavailable]
        if failed:
            why = failed[0].unavailable or f"GATED: {failed[0].gated}"
            out.append(f"queues {backend} limited/plain=n/a ({why})")
            continue
        ratio = limited.claims_per_s / plain.claims_per_s if plain.claims_per_s else 0.0
        out.append(
            f"queues {backend} limited/plain={ratio:.3f} (plain {plain.claims_per_s:.0f}/s, "
            f"limited {limited.claims_per_s:.0f}/s, target {TARGET})"
        )
    return out
