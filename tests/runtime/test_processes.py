"""Worker processes on one SQLite file (``docket worker`` started as real processes):
crash recovery with SIGKILL, the recovery bound, and graceful SIGTERM."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from docket import SyncDocket
from docket.records import RunStatus
from tests.runtime import worker_app
from tests.runtime.crash_checks import (
    HOLD_AFTER,
    POLL,
    ROOT,
    TTL,
    check_commit_log,
    check_finished_runs,
    log_lines,
    replayed_attempts,
    spawn_worker,
    stop_workers,
    until,
    wait_ready,
    worker_env,
    worker_processes,
)


def _spawn(
    tmp_path: Path, name: str, *, concurrency: int = 8, **extra: str
) -> subprocess.Popen[str]:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    return spawn_worker(url, tmp_path, name, concurrency=concurrency, **extra)


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
    with SyncDocket(url, nodes=worker_app.NODES) as docket, worker_processes() as procs:
        ref = docket.save_graph(worker_app.FIVE_STEPS)
        # the victim (w0) hangs in every node attempt after its first HOLD_AFTER, so it
        # ends up holding claims on runs in mid-flight until it is killed
        procs.append(_spawn(tmp_path, "w0", DOCKET_TEST_HOLD_AFTER=HOLD_AFTER))
        procs += [_spawn(tmp_path, f"w{i}") for i in range(1, 3)]
        wait_ready(tmp_path, ["w0", "w1", "w2"])
        started = time.monotonic()
        for index in range(runs):
            docket.start_run(ref, run_id=f"run-{index:03}")
        victim = procs[0]

        def victim_holds_claims() -> bool:
            pid = str(victim.pid)
            if sum(1 for line in log_lines(tmp_path, "commits") if line[0] == pid) < 10:
                return False
            if _count_done(db) < 40:
                return False
            # it is in the middle of runs: it started a node of them and they are claimed
            started = {line[1] for line in log_lines(tmp_path, "attempts") if line[0] == pid}
            return len(started & set(_claims(db))) >= 3

        until(victim_holds_claims, 60, "the first worker to be busy and 40 runs done", 0.1)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        at_kill = _claims(db)
        killed_at = _count_done(db)
        procs.append(_spawn(tmp_path, "w3"))  # the restarted worker
        time.sleep(TTL / 2)  # live workers' claims move on (commits, heartbeats); dead ones stay
        later = _claims(db)
        orphans = {run_id for run_id, claim in at_kill.items() if later.get(run_id) == claim}
        assert orphans, "the killed worker held claims"
        until(lambda: _count_done(db) == runs, 120, f"all {runs} runs done")
        elapsed = time.monotonic() - started
        stop_workers(procs[1:])

        checkpoints = check_finished_runs(docket, runs)

    # every checkpoint committed exactly once: one recorded transition per checkpoint
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        per_run = dict(
            conn.execute("SELECT run_id, count(*) FROM docket_transitions GROUP BY run_id")
        )
        seqs = dict(conn.execute("SELECT run_id, checkpoint_seq FROM docket_runs"))
    assert per_run == seqs
    # ... no two workers ever reported committing the same checkpoint, and every worker
    # commit was observed but for the killed worker's last ones (at most one per slot)
    commits = check_commit_log(tmp_path, checkpoints, runs, slots=8)
    print(
        f"\n{runs} runs x 5 steps on 3 worker processes: {checkpoints} checkpoints in "
        f"{elapsed:.1f}s; SIGKILL of pid {victim.pid} after {killed_at} runs were done; "
        f"runs it held that others finished: {len(orphans)}; node attempts re-executed "
        f"after the kill: {replayed_attempts(tmp_path)}; commits per worker: "
        f"{commits.per_worker}"
    )


def test_a_killed_workers_run_is_recovered_within_the_declared_bound(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with (
        SyncDocket(f"sqlite:///{db}", nodes=worker_app.NODES) as docket,
        worker_processes() as procs,
    ):
        ref = docket.save_graph(worker_app.STALL)
        stalling = _spawn(tmp_path, "a", DOCKET_TEST_STALL="1")
        procs.append(stalling)
        docket.start_run(ref, run_id="stalled")
        until(lambda: len(log_lines(tmp_path, "attempts")) == 1, 30, "worker A to start the node")
        procs.append(_spawn(tmp_path, "b"))
        until(lambda: "docket worker" in (tmp_path / "b.err").read_text(), 30, "worker B")
        # kill A a third of a heartbeat interval after one of its refreshes
        first_claim = docket.inspect_run("stalled").claimed_at
        assert first_claim is not None
        until(
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
        until(lambda: len(log_lines(tmp_path, "attempts")) == 2, 30, "worker B to take the run")
        done = docket.await_run("stalled", timeout=30)
        assert done.status is RunStatus.DONE
        (first, second) = log_lines(tmp_path, "attempts")
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
    with (
        SyncDocket(f"sqlite:///{db}", nodes=worker_app.NODES) as docket,
        worker_processes() as procs,
    ):
        ref = docket.save_graph(worker_app.STALL)
        worker = _spawn(tmp_path, "a", DOCKET_TEST_STALL="1", DOCKET_TEST_SHUTDOWN="0.5")
        procs.append(worker)
        docket.start_run(ref, run_id="held")
        until(lambda: len(log_lines(tmp_path, "attempts")) == 1, 30, "the node to start")
        signalled = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0  # the 60 s node is cancelled after 0.5 s
        assert time.monotonic() - signalled < 10
        info = docket.inspect_run("held")
        assert info.claimed_at is None and info.wake_at is not None  # handed back at once
        assert info.run.checkpoint_seq == 1
        assert "stopped: 1 leases, 0 commits" in (tmp_path / "a.err").read_text()


def test_runs_started_eagerly_by_a_killed_process_are_finished_by_another(
    tmp_path: Path,
) -> None:
    """A process starts runs beside its own worker (each written already claimed by it),
    begins their first node and is SIGKILLed holding every one of them. Another worker
    takes them all over once their claims expire and finishes them, each checkpoint
    committed exactly once."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    runs = 6
    with SyncDocket(url, nodes=worker_app.NODES) as docket, worker_processes() as procs:
        starter = subprocess.Popen(
            [sys.executable, "-m", "tests.runtime.eager_starter", str(runs)],
            cwd=ROOT,
            env=worker_env(url, tmp_path, DOCKET_TEST_HOLD_AFTER="0"),
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "starter.err").open("w"),
            text=True,
        )
        procs.append(starter)

        def all_running() -> bool:
            started = {line[1] for line in log_lines(tmp_path, "attempts")}
            return len(started) == runs

        until(all_running, 60, "the starter to begin the first node of every run", 0.1)
        held = _claims(db)
        assert sorted(held) == [f"eager-{i}" for i in range(runs)]
        starts = {line[1] for line in log_lines(tmp_path, "started")}
        assert starts == set(held)
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            (polled,) = conn.execute(
                "SELECT count(*) FROM docket_runs WHERE claim_attempts != 1 "
                "OR checkpoint_seq != 1 OR wake_at_us IS NOT NULL"
            ).fetchone()
        assert polled == 0  # each held by the start itself: first attempt, no wake, no commit
        starter.send_signal(signal.SIGKILL)
        starter.wait(timeout=10)
        assert _claims(db) == held  # nobody released them
        procs.append(_spawn(tmp_path, "taker"))
        until(lambda: _count_done(db) == runs, 60, f"all {runs} runs done")
        stop_workers(procs[-1:])
        checkpoints = check_finished_runs(docket, runs)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        per_run = dict(
            conn.execute("SELECT run_id, count(*) FROM docket_transitions GROUP BY run_id")
        )
        seqs = dict(conn.execute("SELECT run_id, checkpoint_seq FROM docket_runs"))
    assert per_run == seqs
    assert checkpoints == sum(seqs.values())
    # the starter's node attempts of each run were re-executed by the taker
    assert replayed_attempts(tmp_path) >= runs


def test_a_worker_told_to_stop_as_soon_as_it_is_spawned_exits_0(tmp_path: Path) -> None:
    """Issue 18: under load the crash tests' replacement worker was still importing when
    all runs were done and the survivors were stopped; a process with no handler yet is
    ended by SIGTERM (exit -15). Stopping workers waits for each to have started (its
    start line) before it signals them, so a just-spawned worker is stopped cleanly."""
    with worker_processes() as procs:
        procs.append(_spawn(tmp_path, "fresh"))
        stop_workers(procs)
    assert "stopped: 0 leases" in (tmp_path / "fresh.err").read_text()
