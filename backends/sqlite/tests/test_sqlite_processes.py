"""Several writers on one file: instances in one process, separate processes, and a
process killed in the middle of a burst of commits."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from docket_contract_tests.fixtures import (
    claimed,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_sqlite import SQLiteBackend

from docket.clock import ManualClock
from docket.contract import (
    ClaimBatch,
    ClaimPolicy,
    EventListQuery,
    ReleaseClaim,
    Retryable,
    RunListQuery,
    Terminal,
)
from docket.records import SYSTEM, TENANTLESS, EventPage, OwnerScope, Run, RunStatus, Tenant

WORKER = Path(__file__).with_name("sqlite_worker.py")
T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
DAY = timedelta(days=1)


async def _seed_many(backend: SQLiteBackend, count: int, wake_at: datetime) -> list[str]:
    owners: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b")]
    document = graph_document("g")
    ref = graph_ref(document)
    for owner in owners:
        await backend.graphs.save_graph(owner, ref, document)
    ids = []
    for index in range(count):
        run = new_run(f"r{index:04}", ref, T0)
        owner = owners[index % len(owners)]
        assert await backend.transitions.initialize(owner, init_proposal(run, wake_at), []) == run
        ids.append(f"{owner}/{run.id}")
    return ids


async def _all_runs(backend: SQLiteBackend) -> list[tuple[str, str]]:
    """``(owner label, run id)`` of every stored run, paged through ``list_runs``."""
    out: list[tuple[str, str]] = []
    query = RunListQuery(limit=97)
    while True:
        page = await backend.runs.list_runs(SYSTEM, query)
        out.extend((s.tenant_id or "", s.id) for s in page.runs)
        if not page.has_more:
            return out
        query = RunListQuery(limit=97, before=page.next_before)


def test_two_instances_on_one_file_claim_disjoint_runs(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"

    async def worker(backend: SQLiteBackend, name: str, leased: list[str]) -> None:
        rng = random.Random(name)
        empty = 0
        while empty < 2:
            policy = ClaimPolicy(
                limit=rng.randint(1, 3), orphan_ttl=DAY, max_claim_attempts=3, now=T0
            )
            batch = await backend.runs.claim_due(policy)
            if isinstance(batch, Retryable):
                continue
            assert isinstance(batch, ClaimBatch), batch
            empty = 0 if batch.leases else empty + 1
            for lease in batch.leases:
                leased.append(f"{lease.owner}/{lease.run_id}")
                run = await backend.runs.fetch_run(lease.owner, lease.run_id)
                assert isinstance(run, Run)
                done = successor(run, T0, status=RunStatus.DONE, metadata={"by": name})
                proposal = claimed(done, lease.claim_token, schedule=ReleaseClaim(Terminal()))
                assert await backend.transitions.commit_claimed(lease.owner, proposal, []) == done

    async def body() -> None:
        seeder = SQLiteBackend(path, clock=ManualClock(T0))
        for round_ in range(3):  # three rounds, each with fresh runs racing on one file
            ids = await _seed_many(seeder, 90, T0) if round_ == 0 else []
            if round_:
                document = graph_document("g")
                ref = graph_ref(document)
                for index in range(90):
                    run = new_run(f"x{round_}-{index:03}", ref, T0)
                    await seeder.transitions.initialize(TENANTLESS, init_proposal(run, T0), [])
                    ids.append(f"{TENANTLESS}/{run.id}")
            left: list[str] = []
            right: list[str] = []
            first = SQLiteBackend(path, clock=ManualClock(T0))
            second = SQLiteBackend(path, clock=ManualClock(T0))
            await asyncio.gather(worker(first, "left", left), worker(second, "right", right))
            assert left and right, "both instances got work"
            assert not set(left) & set(right), "no run was leased by both"
            assert Counter(left + right) == Counter(ids), "every run leased exactly once"
            await first.close()
            await second.close()
        stored = await _all_runs(seeder)
        assert len(stored) == 270
        await seeder.close()

    asyncio.run(body())


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_processes_on_one_file_claim_disjoint_runs(tmp_path: Path) -> None:
    path = tmp_path / "procs.db"
    go = tmp_path / "go"
    ids = asyncio.run(_prepare(path, 300))
    workers = {name: _spawn("claim", str(path), name, str(go)) for name in ("p1", "p2")}
    time.sleep(0.3)  # both open the file and wait at the barrier
    go.touch()
    leased: dict[str, list[str]] = {}
    for name, process in workers.items():
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, f"{name} failed:\n{out}\n{err}"
        lines = [json.loads(line) for line in out.splitlines()]
        assert not [line for line in lines if "error" in line], lines
        leased[name] = [line["run"] for line in lines]
        assert {line["attempt"] for line in lines} <= {1}, "no run was leased twice"
    assert leased["p1"] and leased["p2"], "both processes got work"
    assert not set(leased["p1"]) & set(leased["p2"])
    assert Counter(leased["p1"] + leased["p2"]) == Counter(ids)

    async def check() -> None:
        backend = SQLiteBackend(path)
        for name, runs in leased.items():
            for run_id in runs:
                run = await backend.runs.fetch_run(TENANTLESS, run_id)
                assert isinstance(run, Run)
                assert (run.status, run.metadata) == (RunStatus.DONE, {"worker": name})
        await backend.close()

    asyncio.run(check())


async def _prepare(path: Path, count: int) -> list[str]:
    backend = SQLiteBackend(path)
    document = graph_document("g")
    ref = graph_ref(document)
    await backend.graphs.save_graph(TENANTLESS, ref, document)
    past = datetime.now(UTC) - timedelta(seconds=5)
    ids = []
    for index in range(count):
        run = new_run(f"p{index:04}", ref, past)
        assert await backend.transitions.initialize(TENANTLESS, init_proposal(run, past), []) == run
        ids.append(run.id)
    await backend.close()
    return ids


def _kill_mid_burst(
    path: Path, prefix: str, generation: int, after: int
) -> list[dict[str, object]]:
    """Run a burst writer, SIGKILL it after ``after`` acknowledged commits; its report."""
    process = _spawn("burst", str(path), prefix, str(generation))
    assert process.stdout is not None
    lines: list[dict[str, object]] = []
    deadline = time.monotonic() + 120
    while len(lines) < after and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(json.loads(line))
    os.kill(process.pid, signal.SIGKILL)
    out, err = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, err
    lines.extend(json.loads(line) for line in out.splitlines() if line.strip())
    assert len(lines) >= after, f"the writer stopped early:\n{err}"
    return lines


def test_a_writer_killed_mid_burst_leaves_every_acknowledged_commit(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    reported: dict[str, tuple[int, int]] = {}
    for attempt, after in enumerate((random.randint(90, 140), random.randint(40, 90))):
        for line in _kill_mid_burst(path, f"b{attempt}", attempt + 1, after):
            run_id = str(line["run"])
            seen = (int(str(line["checkpoint_seq"])), int(str(line["event_seq"])))
            assert seen > reported.get(run_id, (0, 0)), "reports are in commit order"
            reported[run_id] = seen

    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        transitions = dict(
            conn.execute("SELECT run_id, count(*) FROM docket_transitions GROUP BY run_id")
        )
    finally:
        conn.close()

    async def check() -> None:
        backend = SQLiteBackend(path)
        stored = [run_id for _, run_id in await _all_runs(backend)]
        assert set(reported) <= set(stored), "every acknowledged run is there"
        unreported = set(stored) - set(reported)
        assert len(unreported) <= 2, f"at most one in-flight initialize per kill: {unreported}"
        for run_id in stored:
            run = await backend.runs.fetch_run(TENANTLESS, run_id)
            assert isinstance(run, Run), run_id
            page = await backend.events.list_events(TENANTLESS, run_id, EventListQuery(limit=1000))
            assert isinstance(page, EventPage)
            assert [e.seq for e in page.events] == list(range(1, run.event_seq + 1))
            assert transitions[run_id] == run.checkpoint_seq, "one transition per checkpoint"
            acknowledged = reported.get(run_id, (1, 2))
            assert run.checkpoint_seq in (acknowledged[0], acknowledged[0] + 1), run_id
            if run.checkpoint_seq == acknowledged[0]:
                assert run.event_seq == acknowledged[1], run_id
        await backend.close()

    asyncio.run(check())
