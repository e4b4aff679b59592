"""Shared harness of the multi-process crash tests (SQLite, Redis, PostgreSQL).

Workers are real ``docket worker --app tests.runtime.worker_app:create`` processes, told
which backend to use through ``DOCKET_BACKEND``. Each writes a commit log and an attempt
log into the test's directory (see :mod:`tests.runtime.worker_app`).

:func:`sigkill_scenario` is the backend-neutral version of the SQLite SIGKILL test: it
submits the five-step graph, kills one busy worker with SIGKILL, starts a replacement,
waits until every run is done, stops the survivors with SIGTERM, and then checks the
result through the facade's reads only (``list_runs``, ``fetch_run``, ``history``,
``inspect_run``) plus the workers' own logs. :func:`check_finished_runs` and
:func:`check_commit_log` are the checks, usable on their own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from functools import partial
from pathlib import Path

import attrs

from docket import SyncDocket
from docket.records import RunStatus
from tests.runtime import worker_app
from tests.runtime.helpers import check_events

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.runtime.worker_app:create"
TTL = 2.0
POLL = 0.5
STEPS = 5
HOLD_AFTER = "20"  # node attempts a crash test's victim runs before it starts hanging
EXPECTED_OUTPUT = {"trail": [f"s{index}" for index in range(1, STEPS + 1)]}


def worker_env(url: str, log_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DOCKET_BACKEND=url,
        DOCKET_TEST_LOG_DIR=str(log_dir),
        DOCKET_TEST_CLAIM_TTL=str(TTL),
        DOCKET_TEST_POLL=str(POLL),
    )
    env.update(extra)
    return env


# each spawned worker's stderr file, by pid (for the failure messages of stop_workers)
_ERR_FILES: dict[int, Path] = {}


def spawn_worker(
    url: str, log_dir: Path, name: str, *, concurrency: int = 8, app: str = APP, **extra: str
) -> subprocess.Popen[str]:
    """Start one ``docket worker`` process; its stderr goes to ``<log_dir>/<name>.err``."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "docket.cli",
            "worker",
            "--app",
            app,
            "--concurrency",
            str(concurrency),
        ],
        cwd=ROOT,
        env=worker_env(url, log_dir, **extra),
        stdout=subprocess.DEVNULL,
        stderr=(log_dir / f"{name}.err").open("w"),
        text=True,
    )
    _ERR_FILES[proc.pid] = log_dir / f"{name}.err"
    return proc


def stderr_tail(proc: subprocess.Popen[str], lines: int = 60) -> str:
    """The last lines a spawned worker wrote to its stderr file."""
    path = _ERR_FILES.get(proc.pid)
    if path is None or not path.exists():
        return "(no stderr file)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def stop_workers(
    procs: list[subprocess.Popen[str]], timeout: float = 30.0, start_timeout: float = 60.0
) -> None:
    """SIGTERM every process once it has started, then check that each exits 0 within
    ``timeout``.

    A worker installs its SIGTERM handler only after importing docket, which takes
    seconds on a loaded machine; until then SIGTERM ends it with the default action
    (exit -15). So each process is signalled only once it has printed a ``docket worker``
    line (``docket worker`` prints nothing before its handler is in place), as a
    supervisor would see it "ready"; the crash tests' replacement worker may still be
    importing when every run is done.

    A failure names the process, its exit code (or that it is still running) and the
    tail of its stderr. A process still running is first asked for its thread and
    asyncio task stacks (``worker_app`` dumps them on SIGUSR1/SIGUSR2), so the message
    shows what it was waiting on."""

    def started(proc: subprocess.Popen[str]) -> bool:
        path = _ERR_FILES.get(proc.pid)
        return proc.poll() is not None or (path is not None and "docket worker" in path.read_text())

    for proc in procs:
        try:
            until(partial(started, proc), start_timeout, f"worker {proc.pid} to start", 0.05)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{stderr_tail(proc)}") from None
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    failures: list[str] = []
    for proc in procs:
        try:
            code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            failures.append(f"pid {proc.pid} still running {timeout:.0f} s after SIGTERM")
            _dump_stacks(proc)
            failures.append(stderr_tail(proc, 400))
            continue
        if code != 0:
            failures.append(f"pid {proc.pid} exited {code} after SIGTERM\n{stderr_tail(proc)}")
    assert not failures, "\n".join(failures)


def _dump_stacks(proc: subprocess.Popen[str]) -> None:
    for signum in (signal.SIGUSR1, signal.SIGUSR2):
        with suppress(ProcessLookupError):
            proc.send_signal(signum)
    path = _ERR_FILES.get(proc.pid)
    if path is not None:
        # written by the process itself (the task dump only once its loop runs Python)
        with suppress(AssertionError):
            until(lambda: "end of task dump" in path.read_text(errors="replace"), 10, "a dump")


@contextmanager
def worker_processes() -> Iterator[list[subprocess.Popen[str]]]:
    """A list to put worker processes in; any still running at the end are SIGKILLed."""
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def wait_ready(log_dir: Path, names: list[str], timeout: float = 60.0) -> None:
    """Wait until each named worker has printed its start line (imports done, backend open)."""

    def ready() -> bool:
        return all("docket worker" in (log_dir / f"{name}.err").read_text() for name in names)

    until(ready, timeout, f"workers {names} to start", 0.1)


def until(predicate: Callable[[], bool], timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def log_lines(log_dir: Path, prefix: str) -> list[list[str]]:
    """Every line of every process's ``<prefix>-<pid>.log``, split into fields."""
    out: list[list[str]] = []
    for path in sorted(log_dir.glob(f"{prefix}-*.log")):
        out += [line.split() for line in path.read_text().splitlines() if line.strip()]
    return out


def check_finished_runs(docket: SyncDocket, runs: int) -> int:
    """Every run is done with the expected output, its history whole, no claim left on it.

    Returns the total number of checkpoints. ``check_events`` asserts, per run, that the
    event sequences are exactly 1..event_seq and that the ``checkpoint_committed`` marks
    are exactly 1..checkpoint_seq, once each (so no checkpoint was committed twice).
    """
    page = docket.list_runs(limit=1000)
    assert len(page.runs) == runs and not page.has_more
    assert {summary.status for summary in page.runs} == {RunStatus.DONE}
    checkpoints = 0
    for summary in page.runs:
        info = docket.inspect_run(summary.id)
        run = info.run
        assert run.status is RunStatus.DONE
        assert run.output == EXPECTED_OUTPUT, (run.id, run.output)
        assert info.claimed_at is None, f"run {run.id} is still claimed"
        assert not info.poisoned, (run.id, info.poison_reason)
        assert check_events(run, docket.history(run.id)) == list(range(1, run.checkpoint_seq + 1))
        checkpoints += run.checkpoint_seq
    return checkpoints


@attrs.frozen
class CommitLog:
    per_worker: dict[str, int]
    total: int


def check_commit_log(log_dir: Path, checkpoints: int, runs: int, slots: int) -> CommitLog:
    """No two commits (by any process) of the same ``(run, checkpoint seq)``; every worker
    commit was seen, but for the killed worker's last ones whose observer had not written
    its line yet (at most one per slot). Checkpoint 1 of each run is the ``start``."""
    commits = log_lines(log_dir, "commits")
    pairs = Counter((run_id, int(seq)) for _, run_id, seq in commits)
    twice = [pair for pair, count in pairs.items() if count > 1]
    assert not twice, f"checkpoints committed more than once: {twice[:10]}"
    assert all(seq >= 2 for _, seq in pairs), "a worker reported committing checkpoint 1"
    per_worker = Counter(pid for pid, _, _ in commits)
    total = sum(per_worker.values())
    assert checkpoints - runs - slots <= total <= checkpoints - runs, (total, checkpoints)
    return CommitLog(per_worker=dict(per_worker), total=total)


def replayed_attempts(log_dir: Path) -> int:
    """How many ``(run, node)`` pairs were started more than once."""
    attempts = Counter((run_id, node) for _, run_id, node, _, _ in log_lines(log_dir, "attempts"))
    return sum(1 for count in attempts.values() if count > 1)


@attrs.frozen
class CrashReport:
    runs: int
    workers: int
    checkpoints: int
    elapsed: float
    victim: int
    done_at_kill: int
    orphans: frozenset[str]
    replayed: int
    commits: CommitLog

    def summary(self, backend: str) -> str:
        return (
            f"{backend}: {self.runs} runs x {STEPS} steps on {self.workers} worker processes: "
            f"{self.checkpoints} checkpoints in {self.elapsed:.1f}s; SIGKILL of pid "
            f"{self.victim} after {self.done_at_kill} runs were done; runs it held that "
            f"others finished: {len(self.orphans)}; node attempts re-executed after the "
            f"kill: {self.replayed}; commits per worker: {self.commits.per_worker}"
        )


def _done_ids(docket: SyncDocket) -> set[str]:
    page = docket.list_runs(limit=1000, status=RunStatus.DONE)
    return {summary.id for summary in page.runs}


def _claimed_at(docket: SyncDocket, run_ids: set[str]) -> dict[str, datetime]:
    out: dict[str, datetime] = {}
    for run_id in sorted(run_ids):
        claimed = docket.inspect_run(run_id).claimed_at
        if claimed is not None:
            out[run_id] = claimed
    return out


def sigkill_scenario(
    url: str,
    log_dir: Path,
    *,
    workers: int,
    runs: int,
    concurrency: int = 8,
    timeout: float = 120.0,
) -> CrashReport:
    """Run ``runs`` five-step runs on ``workers`` processes through a SIGKILL and a restart,
    check everything through the facade, and return what happened."""
    assert runs <= 1000  # one page of list_runs
    with SyncDocket(url, nodes=worker_app.NODES) as docket, worker_processes() as procs:
        ref = docket.save_graph(worker_app.FIVE_STEPS)
        # the victim hangs in every node attempt after its first HOLD_AFTER, so it ends up
        # holding claims on runs in mid-flight (heartbeating them) until it is killed
        procs.append(
            spawn_worker(
                url, log_dir, "w0", concurrency=concurrency, DOCKET_TEST_HOLD_AFTER=HOLD_AFTER
            )
        )
        procs += [
            spawn_worker(url, log_dir, f"w{i}", concurrency=concurrency) for i in range(1, workers)
        ]
        wait_ready(log_dir, [f"w{i}" for i in range(workers)])
        started = time.monotonic()
        for index in range(runs):
            docket.start_run(ref, run_id=f"run-{index:03}")
        victim = procs[0]
        pid = str(victim.pid)
        held: set[str] = set()

        def victim_is_busy() -> bool:
            # the victim has committed a while, a fifth of the runs are done, and it is
            # in the middle of several runs (started a node of them; they are not done)
            if sum(1 for line in log_lines(log_dir, "commits") if line[0] == pid) < 10:
                return False
            done = _done_ids(docket)
            if len(done) < runs // 5:
                return False
            held.clear()
            held.update({line[1] for line in log_lines(log_dir, "attempts") if line[0] == pid})
            held.difference_update(done)
            return len(held) >= 3

        until(victim_is_busy, 60, "the victim to be busy and a fifth of the runs done", 0.1)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        killed = time.time()
        at_kill = _claimed_at(docket, held)
        done_at_kill = len(_done_ids(docket))
        procs.append(spawn_worker(url, log_dir, "restarted", concurrency=concurrency))
        # the victim's claims stay as they were until they expire (at least TTL - TTL/3
        # after the kill); a claim taken over by another worker has a new claimed_at
        time.sleep(max(0.0, killed + TTL / 3 - time.time()))
        later = _claimed_at(docket, set(at_kill))
        orphans = frozenset(run_id for run_id, at in at_kill.items() if later.get(run_id) == at)
        assert orphans, f"the killed worker held claims (candidates {sorted(held)})"
        until(lambda: len(_done_ids(docket)) == runs, timeout, f"all {runs} runs done", 0.2)
        elapsed = time.monotonic() - started
        stop_workers(procs[1:])
        checkpoints = check_finished_runs(docket, runs)

    # the runs the victim was holding were finished by others: each needed at least one
    # more commit, made (and logged) by a live worker
    finishers: dict[str, set[str]] = {run_id: set() for run_id in orphans}
    for line in log_lines(log_dir, "commits"):
        if line[1] in finishers:
            finishers[line[1]].add(line[0])
    assert all(pids - {pid} for pids in finishers.values()), finishers
    commits = check_commit_log(log_dir, checkpoints, runs, concurrency)
    assert pid in commits.per_worker
    return CrashReport(
        runs=runs,
        workers=workers,
        checkpoints=checkpoints,
        elapsed=elapsed,
        victim=victim.pid,
        done_at_kill=done_at_kill,
        orphans=orphans,
        replayed=replayed_attempts(log_dir),
        commits=commits,
    )
