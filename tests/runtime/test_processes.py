"""Worker processes on one SQLite file (``docket worker`` started as real processes):
crash recovery with SIGKILL, the recovery bound, and graceful SIGTERM."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from docket import SyncDocket
from docket.records import RunStatus
from tests.runtime import worker_app
from tests.runtime.helpers import check_events

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.runtime.worker_app:create"
TTL = 2.0
POLL = 0.5


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DOCKET_BACKEND=f"sqlite:///{tmp_path / 'runs.db'}",
        DOCKET_TEST_LOG_DIR=str(tmp_path),
        DOCKET_TEST_CLAIM_TTL=str(TTL),
        DOCKET_TEST_POLL=str(POLL),
    )
    env.update(extra)
    return env


def _spawn(
    tmp_path: Path, name: str, *, concurrency: int = 8, **extra: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "docket.cli",
            "worker",
            "--app",
            APP,
            "--concurrency",
            str(concurrency),
        ],
        cwd=ROOT,
        env=_env(tmp_path, **extra),
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / f"{name}.err").open("w"),
        text=True,
    )


@contextmanager
def _workers() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _lines(tmp_path: Path, prefix: str) -> list[list[str]]:
    out: list[list[str]] = []
    for path in sorted(tmp_path.glob(f"{prefix}-*.log")):
        out += [line.split() for line in path.read_text().splitlines() if line.strip()]
    return out


def _claims(db: Path) -> dict[str, tuple[str, int]]:
    """Claimed runs: run id -> (claim token, claimed at), read straight from the file."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT run_id, claim_token, claimed_at_us FROM docket_runs "
            "WHERE claim_token IS NOT NULL"
        ).fetchall()
    return {str(run_id): (str(token), int(at)) for run_id, token, at in rows}


def _count_done(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (count,) = conn.execute("SELECT count(*) FROM docket_runs WHERE status = 'done'").fetchone()
    return int(count)


def test_three_workers_finish_200_runs_through_a_sigkill_and_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    runs = 200
    with SyncDocket(url, nodes=worker_app.NODES) as docket, _workers() as procs:
        ref = docket.save_graph(worker_app.FIVE_STEPS)
        procs += [_spawn(tmp_path, f"w{i}") for i in range(3)]
        started = time.monotonic()
        for index in range(runs):
            docket.start_run(ref, run_id=f"run-{index:03}")
        victim = procs[0]

        def victim_holds_claims() -> bool:
            mine = [line for line in _lines(tmp_path, "commits") if line[0] == str(victim.pid)]
            # 3 workers x 8 slots: 17 claims at once means the victim holds at least one
            return len(mine) >= 10 and _count_done(db) >= 40 and len(_claims(db)) >= 17

        _until(victim_holds_claims, 60, "the first worker to be busy and 40 runs done")
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        at_kill = _claims(db)
        killed_at = _count_done(db)
        procs.append(_spawn(tmp_path, "w3"))  # the restarted worker
        time.sleep(TTL / 2)  # live workers' claims move on (commits, heartbeats); dead ones stay
        later = _claims(db)
        orphans = {run_id for run_id, claim in at_kill.items() if later.get(run_id) == claim}
        assert orphans, "the killed worker held claims"
        _until(lambda: _count_done(db) == runs, 120, f"all {runs} runs done")
        elapsed = time.monotonic() - started
        for proc in procs[1:]:
            proc.send_signal(signal.SIGTERM)
        for proc in procs[1:]:
            assert proc.wait(timeout=30) == 0

        page = docket.list_runs(limit=1000)
        assert len(page.runs) == runs and {s.status for s in page.runs} == {RunStatus.DONE}
        checkpoints = 0
        for summary in page.runs:
            run = docket.fetch_run(summary.id)
            assert run.output == {"trail": ["s1", "s2", "s3", "s4", "s5"]}
            check_events(run, docket.history(run.id))  # gap-free checkpoints and events
            checkpoints += run.checkpoint_seq

    # every checkpoint committed exactly once: one recorded transition per checkpoint
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        per_run = dict(
            conn.execute("SELECT run_id, count(*) FROM docket_transitions GROUP BY run_id")
        )
        seqs = dict(conn.execute("SELECT run_id, checkpoint_seq FROM docket_runs"))
    assert per_run == seqs
    # ... and no two workers ever reported committing the same checkpoint
    commits = _lines(tmp_path, "commits")
    pairs = Counter((run_id, seq) for _, run_id, seq in commits)
    assert max(pairs.values()) == 1
    by_pid = Counter(pid for pid, _, _ in commits)
    tried = _lines(tmp_path, "attempts")
    attempts = Counter((run_id, node) for _, run_id, node, _, _ in tried)
    replayed = sum(1 for n in attempts.values() if n > 1)
    print(
        f"\n{runs} runs x 5 steps on 3 worker processes: {checkpoints} checkpoints in "
        f"{elapsed:.1f}s; SIGKILL of pid {victim.pid} after {killed_at} runs were done; "
        f"runs it held that others finished: {len(orphans)}; node attempts re-executed "
        f"after the kill: {replayed}; commits per worker: {dict(by_pid)}"
    )
    # every worker commit was observed, but for those of the killed worker whose observer
    # had not written its line yet (at most one per slot)
    assert checkpoints - runs - 8 <= sum(by_pid.values()) <= checkpoints - runs


def test_a_killed_workers_run_is_recovered_within_the_declared_bound(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with SyncDocket(f"sqlite:///{db}", nodes=worker_app.NODES) as docket, _workers() as procs:
        ref = docket.save_graph(worker_app.STALL)
        stalling = _spawn(tmp_path, "a", DOCKET_TEST_STALL="1")
        procs.append(stalling)
        docket.start_run(ref, run_id="stalled")
        _until(lambda: len(_lines(tmp_path, "attempts")) == 1, 30, "worker A to start the node")
        procs.append(_spawn(tmp_path, "b"))
        _until(lambda: "docket worker" in (tmp_path / "b.err").read_text(), 30, "worker B")
        # kill A a third of a heartbeat interval after one of its refreshes
        first_claim = docket.inspect_run("stalled").claimed_at
        assert first_claim is not None
        _until(
            lambda: docket.inspect_run("stalled").claimed_at != first_claim,
            10,
            "a heartbeat of worker A",
        )
        info = docket.inspect_run("stalled")
        assert info.claimed_at is not None and info.claim_attempts == 1
        refreshed = info.claimed_at.timestamp()
        time.sleep(max(0.0, refreshed + TTL / 9 - time.time()))
        killed = time.time()
        stalling.send_signal(signal.SIGKILL)
        stalling.wait(timeout=10)
        _until(lambda: len(_lines(tmp_path, "attempts")) == 2, 30, "worker B to take the run")
        done = docket.await_run("stalled", timeout=30)
        assert done.status is RunStatus.DONE
        (first, second) = _lines(tmp_path, "attempts")
    assert first[0] == str(stalling.pid) and second[0] != first[0]
    recovery = float(second[4]) - killed
    bound = TTL + POLL
    print(
        f"\nrecovery: {recovery:.2f}s (bound {bound:.2f}s; killed "
        f"{killed - refreshed:.2f}s after its last heartbeat)"
    )
    assert 0 < recovery <= bound


def test_sigterm_stops_a_worker_gracefully(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with SyncDocket(f"sqlite:///{db}", nodes=worker_app.NODES) as docket, _workers() as procs:
        ref = docket.save_graph(worker_app.STALL)
        worker = _spawn(tmp_path, "a", DOCKET_TEST_STALL="1", DOCKET_TEST_SHUTDOWN="0.5")
        procs.append(worker)
        docket.start_run(ref, run_id="held")
        _until(lambda: len(_lines(tmp_path, "attempts")) == 1, 30, "the node to start")
        signalled = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0  # the 60 s node is cancelled after 0.5 s
        assert time.monotonic() - signalled < 10
        info = docket.inspect_run("held")
        assert info.claimed_at is None and info.wake_at is not None  # handed back at once
        assert info.run.checkpoint_seq == 1
        assert "stopped: 1 leases, 0 commits" in (tmp_path / "a.err").read_text()
