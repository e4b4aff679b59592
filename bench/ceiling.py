"""The write ceiling of each database for docket's unit of durable work, and docket's
fraction of it.

The ceiling at ``n`` in flight is the best rate any lower-level client in
``bench/raw.py`` reaches doing the same durable work as one docket transition (the same
rows and bytes, the fence checked on every unit), over its variants: client counts and
batching (up to ``n`` units per commit, as ``n`` runs in flight allow). The variant that
set it is reported with it, and today's one-unit-per-transaction rate is kept as a
separately named figure (``one_per_txn``).

docket's side is a ``chain_10`` trial at the same number in flight, run right after the
raw variants (see :func:`paired`), in two forms: one in-process worker (the durable
section's trial) and, with ``workers`` > 1, real ``docket worker`` processes sharing the
same store (:func:`processes_trial`). Its rate is committed checkpoints per second.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs

from bench import raw as rawmod
from bench.durable import check_invariants, docket_trial
from bench.raw import ONE_PER_TXN, RawRate
from bench.shapes import NODES, docket_graph
from bench.stores import Env, Place
from docket import Docket

ROOT = Path(__file__).resolve().parent.parent
APP = "bench.worker_app:create"


@attrs.frozen
class Ceiling:
    backend: str
    clients: int
    raw: tuple[RawRate, ...] = ()  # the best trial of each raw variant
    # docket's chain_10 transitions/s at ``clients`` in flight: one in-process worker ...
    docket_per_s: float = 0.0
    # ... and ``workers`` ``docket worker`` processes (0: not measured)
    workers: int = 0
    docket_processes_per_s: float = 0.0
    unavailable: str | None = None

    @property
    def best(self) -> RawRate | None:
        """The raw variant that set the ceiling."""
        return max(self.raw, key=lambda r: r.per_s, default=None)

    @property
    def per_s(self) -> float:
        best = self.best
        return best.per_s if best is not None else 0.0

    @property
    def one_per_txn(self) -> RawRate | None:
        return next((r for r in self.raw if r.variant == ONE_PER_TXN), None)

    @property
    def best_docket_per_s(self) -> float:
        """The better of the two docket configurations ("worker processes as needed")."""
        return max(self.docket_per_s, self.docket_processes_per_s)

    @property
    def ratio(self) -> float:
        return self.best_docket_per_s / self.per_s if self.per_s else 0.0

    @property
    def one_per_txn_ratio(self) -> float:
        old = self.one_per_txn
        return self.best_docket_per_s / old.per_s if old is not None and old.per_s else 0.0

    def as_json(self) -> dict[str, Any]:
        best = self.best
        return {
            "backend": self.backend,
            "clients": self.clients,
            "raw": [r.as_json() for r in self.raw],
            "best_raw_variant": best.variant if best is not None else None,
            "best_raw_per_s": self.per_s,
            "docket_per_s": self.docket_per_s,
            "workers": self.workers,
            "docket_processes_per_s": self.docket_processes_per_s,
            "docket_best_raw": self.ratio,
            "docket_one_per_txn": self.one_per_txn_ratio,
            "unavailable": self.unavailable,
        }


def _shares(inflight: int, workers: int) -> list[int]:
    """``inflight`` split as evenly as possible over at most ``workers`` processes."""
    count = max(1, min(workers, inflight))
    return [inflight // count + (1 if i < inflight % count else 0) for i in range(count)]


async def _wait_ready(procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    """Until every worker has printed its start line (imports done, store open)."""
    deadline = time.monotonic() + 60
    while True:
        for proc, log in zip(procs, logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited {proc.returncode}: {log.read_text()[-300:]}")
        if all("docket worker" in log.read_text() for log in logs):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("workers not ready after 60 s")
        await asyncio.sleep(0.05)


async def processes_trial(
    place: Place, runs: int, inflight: int, workers: int, warmup: int
) -> tuple[float, str | None]:
    """docket's ``chain_10`` transitions/s with ``inflight`` runs executing at once, split
    over up to ``workers`` ``docket worker`` processes on the same store; and the broken
    invariant, if any.

    This process only submits runs and watches the store: it starts the workers, waits
    until each is ready, runs ``warmup`` runs, then submits ``runs`` runs (8 client tasks,
    as fast as the store takes them: the workers' concurrency bounds what is in flight)
    and polls until none is left unfinished. The rate is the checkpoints the measured runs
    committed (``checkpoint_seq``, read back from the database) over the wall time from
    the first submission to the poll that found them all finished (polled every 20 ms).
    """
    url = place.docket_url()
    logs = [place.env.directory / f"{place.name}.w{i}.err" for i in range(workers)]
    procs: list[subprocess.Popen[bytes]] = []
    env = dict(os.environ, DOCKET_BACKEND=url)
    graph = docket_graph("chain_10")
    unfinished = ("running", "waiting")
    async with Docket(url, nodes=NODES) as docket:
        ref = await docket.save_graph(graph)

        async def submit(prefix: str, count: int) -> list[str]:
            ids = [f"{prefix}{i}" for i in range(count)]
            queue = iter(ids)

            async def client() -> None:
                for run_id in queue:
                    await docket.start_run(ref, {"value": 1}, run_id=run_id)

            await asyncio.gather(*(client() for _ in range(8)))
            return ids

        async def all_finished() -> None:
            while (await docket.list_runs(status=unfinished, limit=1)).runs:
                await asyncio.sleep(0.02)

        try:
            for i, share in enumerate(_shares(inflight, workers)):
                command = [sys.executable, "-m", "docket.cli", "worker", "--app", APP]
                procs.append(
                    subprocess.Popen(
                        [*command, "--concurrency", str(share)],
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=logs[i].open("w"),
                    )
                )
            await _wait_ready(procs, logs[: len(procs)])
            await submit("w", warmup)
            await asyncio.wait_for(all_finished(), 120)
            started = time.perf_counter()
            ids = await submit("r", runs)
            await asyncio.wait_for(all_finished(), 120)
            seconds = time.perf_counter() - started
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        problem, per_run = await check_invariants(docket, ids, runs, "chain_10", None)
    if problem is not None:
        return 0.0, problem
    return per_run * runs / seconds, None


async def paired(
    env: Env,
    backend: str,
    clients: int,
    duration: float,
    runs: int,
    repeats: int,
    workers: int = 0,
) -> Ceiling:
    """The raw variants and docket's own rate at the same level, measured back to back
    ``repeats`` times, keeping the best of each: the disk and the CPU are shared with
    whatever else the machine runs, and noise only ever slows a trial down. docket's rate
    is measured with one in-process worker and, when ``workers`` > 1, with that many
    worker processes too."""
    missing = env.missing(backend)
    if missing is not None:
        return Ceiling(backend, clients, unavailable=missing)
    best: dict[str, RawRate] = {}
    docket_best = 0.0
    processes_best = 0.0
    used = len(_shares(clients, workers)) if workers > 1 else 0
    stem = f"{backend.replace('-', '_')}_{clients}"
    for rep in range(repeats):
        for variant, connections, batch in rawmod.variants(_kind(backend), clients):
            try:
                rate = await measure(env, backend, clients, connections, batch, duration, variant)
            except Exception as exc:
                reason = f"{variant}: {type(exc).__name__}: {exc}"[:200]
                return Ceiling(backend, clients, unavailable=reason)
            if variant not in best or rate.per_s > best[variant].per_s:
                best[variant] = rate
        place = Place(backend, env, f"ceil_{stem}_{rep}")
        mine = await docket_trial(
            place, "chain_10", runs, clients, max(4, runs // 5), footprint=False
        )
        if not mine.ok:
            return Ceiling(backend, clients, unavailable=f"docket GATED: {mine.gated}")
        docket_best = max(docket_best, mine.transitions_per_s)
        if used:
            place = Place(backend, env, f"ceilp_{stem}_{rep}")
            try:
                rate_, problem = await processes_trial(
                    place, runs, clients, workers, max(4, runs // 5)
                )
            except Exception as exc:  # a worker that would not start, a timeout
                reason = f"{type(exc).__name__}: {exc}"[:160]
                return Ceiling(backend, clients, unavailable=f"docket processes: {reason}")
            if problem is not None:
                return Ceiling(backend, clients, unavailable=f"docket processes GATED: {problem}")
            processes_best = max(processes_best, rate_)
    return Ceiling(
        backend,
        clients,
        tuple(best.values()),
        docket_per_s=docket_best,
        workers=used,
        docket_processes_per_s=processes_best,
    )


def _kind(backend: str) -> str:
    return "postgres" if backend.startswith("postgres") else backend


async def measure(
    env: Env,
    backend: str,
    clients: int,
    connections: int,
    batch: int,
    duration: float,
    variant: str,
) -> RawRate:
    """One raw variant at ``clients`` in flight (see ``bench/raw.py``)."""
    kind = _kind(backend)
    if kind == "sqlite":
        path = str(env.directory / f"ceiling_{clients}.db")
        if variant == ONE_PER_TXN:
            return await asyncio.to_thread(rawmod.sqlite_threads, path, clients, duration)
        return await asyncio.to_thread(rawmod.sqlite_single, path, clients, batch, duration)
    if kind == "postgres":
        conninfo = env.postgres_conninfo(backend)
        if variant == ONE_PER_TXN:
            return await rawmod.postgres_asyncio(conninfo, clients, duration)
        server = env.pg_server(backend)
        return await rawmod.postgres_pgbench(server, conninfo, connections, batch, duration)
    url = env.redis_url()
    if variant == ONE_PER_TXN:
        return await rawmod.redis_asyncio(url, clients, duration)
    return await rawmod.redis_pipelined(url, connections, batch, duration)
