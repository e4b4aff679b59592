"""The proof of issue #25's execution limit: 4 worker processes (``docket worker``, 8
slots each), one queue limited to 3, 200 runs whose node records when it ran — the
concurrency computed from those records never exceeds 3, every run finishes, and every
slot is back once they have (``running == 0``). On a real SQLite file, PostgreSQL,
Redis and Redis Cluster (throwaway servers on 127.0.0.1).

The records are the workers' own (``tests/proof/queue_app.py``): each node attempt writes
its start and end on the machine-wide monotonic clock, so overlaps are counted from what
ran, not from what the store says. The control runs the same workers without the limit
and sees far more than 3 at once: the count can fail.
"""

from __future__ import annotations

import atexit
import contextlib
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest
from docket_redis.testing import RedisCluster, redis_cluster

from docket import SyncDocket
from docket.records import RunStatus
from tests.fuzz.backends import backend_url
from tests.proof import queue_app
from tests.runtime.crash_checks import (
    spawn_worker,
    stderr_tail,
    stop_workers,
    worker_processes,
)

APP: Final = "tests.proof.queue_app:create"
WORKERS: Final = 4
CONCURRENCY: Final = 8
QUEUE: Final = "limited"

_stack = contextlib.ExitStack()
atexit.register(_stack.close)
_cluster: list[RedisCluster] = []


def _url(kind: str) -> str:
    if kind != "redis-cluster":
        return backend_url(kind)
    if not _cluster:  # one throwaway cluster for the session, as tests/fuzz/backends does
        _cluster.append(_stack.enter_context(redis_cluster()))
    return f"{_cluster[0].url}?prefix=proof{secrets.token_hex(3)}"


def spans(log_dir: Path) -> list[tuple[str, float, float]]:
    """Every node attempt the workers recorded: (run id, start, end)."""
    out = []
    for path in sorted(log_dir.glob("spans-*.log")):
        for line in path.read_text().splitlines():
            run_id, start, end, _pid = line.split()
            out.append((run_id, float(start), float(end)))
    return out


def most_at_once(recorded: list[tuple[str, float, float]]) -> int:
    """The largest number of attempts running at one moment (an attempt that ends when
    another starts does not overlap it)."""
    edges = sorted(
        [(start, 1) for _, start, _ in recorded] + [(end, -1) for _, _, end in recorded]
    )  # at a tie the end (-1) sorts first
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def test_the_overlap_count_itself() -> None:
    assert most_at_once([("a", 0, 1), ("b", 1, 2), ("c", 1.5, 3)]) == 2
    assert most_at_once([("a", 0, 5), ("b", 1, 2), ("c", 1.5, 3), ("d", 1.6, 1.7)]) == 4
    assert most_at_once([]) == 0


def explain(procs: list[subprocess.Popen[str]]) -> str:
    """Each worker's exit code (or that it runs) and the tail of its stderr."""
    parts = []
    for proc in procs:
        code = proc.poll()
        state = "still running" if code is None else f"exit code {code}"
        parts.append(f"--- worker pid {proc.pid}: {state}\n{stderr_tail(proc, 30)}")
    return "\n".join(parts)


def wait_for(
    what: str, check: Callable[[], bool], procs: list[subprocess.Popen[str]], timeout: float
) -> None:
    """Poll ``check()`` until it is true; on timeout, or when every worker has died,
    fail with each worker's exit code and stderr tail."""
    deadline = time.monotonic() + timeout
    while not check():
        dead = [p for p in procs if p.poll() is not None]
        if len(dead) == len(procs) or time.monotonic() > deadline:
            reason = "every worker exited" if len(dead) == len(procs) else f"{timeout:.0f} s"
            raise AssertionError(f"waiting for {what}: {reason}\n{explain(procs)}")
        time.sleep(0.1)


@contextlib.contextmanager
def workers(url: str, log_dir: Path) -> Iterator[list[subprocess.Popen[str]]]:
    with worker_processes() as procs:
        for index in range(WORKERS):
            procs.append(
                spawn_worker(
                    url,
                    log_dir,
                    f"w{index}",
                    concurrency=CONCURRENCY,
                    app=APP,
                    DOCKET_TEST_CLAIM_TTL="5",
                    DOCKET_TEST_POLL="0.1",
                )
            )
        yield procs


def campaign(
    url: str, log_dir: Path, runs: int, limit: int | None
) -> tuple[list[tuple[str, float, float]], float]:
    """Start ``runs`` runs in the queue (mixed priorities), run the workers until every
    one is done and the queue's slots are back, stop them; the recorded attempts."""
    with SyncDocket(url, nodes=queue_app.NODES) as docket:
        ref = docket.save_graph(queue_app.GRAPH)
        docket.configure_queue(QUEUE, execution_limit=limit)
        for index in range(runs):
            docket.start_run(ref, run_id=f"q{index:03}", queue=QUEUE, priority=index % 3 - 1)
        started = time.monotonic()
        with workers(url, log_dir) as procs:

            def done() -> bool:
                page = docket.list_runs(limit=1000, status=RunStatus.DONE)
                return len(page.runs) == runs

            def slots_back() -> bool:
                (status,) = [s for s in docket.queues() if s.config.name == QUEUE]
                return status.running == 0

            wait_for(f"all {runs} runs done", done, procs, timeout=180)
            elapsed = time.monotonic() - started
            wait_for("every slot of the queue released", slots_back, procs, timeout=30)
            try:
                stop_workers(procs)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{explain(procs)}") from None
        assert [s.depth for s in docket.queues() if s.config.name == QUEUE] == [0]
    return spans(log_dir), elapsed


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis", "redis-cluster"])
def test_four_worker_processes_never_run_more_than_three_of_a_queue_limited_to_three(
    kind: str, tmp_path: Path
) -> None:
    runs, limit = 200, 3
    recorded, elapsed = campaign(_url(kind), tmp_path, runs, limit)
    finished = {run_id for run_id, _, _ in recorded}
    assert finished == {f"q{index:03}" for index in range(runs)}
    peak = most_at_once(recorded)
    print(
        f"\n{kind}: {runs} runs through a queue limited to {limit} on {WORKERS} worker "
        f"processes x {CONCURRENCY}: {len(recorded)} node attempts, at most {peak} at once, "
        f"{elapsed:.1f} s"
    )
    assert peak <= limit
    # and the limit was the bound, not an idle system: 3 did run at once
    assert peak == limit


def test_without_the_limit_the_same_workers_run_more_than_three_at_once(
    tmp_path: Path,
) -> None:
    """The control: the overlap count sees what the limit prevents."""
    recorded, _ = campaign(_url("sqlite"), tmp_path, runs=40, limit=None)
    assert len({run_id for run_id, _, _ in recorded}) == 40
    assert most_at_once(recorded) > 3
