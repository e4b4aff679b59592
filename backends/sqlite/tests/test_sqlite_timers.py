"""Durable time on a real SQLite file (``Feature.TIMERS``, schema version 3).

A *waiting* run may now carry a wake (a deadline, a message wait's timeout): ``claim_due``
takes it when that wake is due, and takes it over when its claim expires, exactly as it
does a running one; a waiting run without a wake (``External``) is never claimed. A
delayed start is not claimable before its time. Before version 3 the file refused a
waiting row with a wake or a claim, and the claim queries read running runs only.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)
from docket_sqlite import SCHEMA_VERSION, SchemaTooOld, SQLiteBackend, migrate, schema_sql

from docket.clock import ManualClock
from docket.contract import (
    At,
    ClaimBatch,
    ClaimLost,
    ClaimPolicy,
    External,
    ReleaseClaim,
    Terminal,
)
from docket.records import TENANTLESS, OwnerScope, Run, RunInfo, RunStatus, Tenant

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)
TTL = timedelta(seconds=60)
US = timedelta(microseconds=1)


def _policy(now: datetime, *, limit: int = 10, attempts: int = 3) -> ClaimPolicy:
    return ClaimPolicy(limit=limit, orphan_ttl=TTL, max_claim_attempts=attempts, now=now)


async def _start(
    backend: SQLiteBackend, owner: OwnerScope, run_id: str, *, at: datetime = T0
) -> Run:
    document = graph_document("g")
    ref = graph_ref(document)
    await backend.graphs.save_graph(owner, ref, document)
    run = new_run(run_id, ref, T0)
    got = await backend.transitions.initialize(owner, init_proposal(run, at), [])
    assert got == run
    return run


async def _park(backend: SQLiteBackend, owner: OwnerScope, run: Run, wake: At | External) -> Run:
    """``run`` committed (unclaimed) as waiting, with ``wake``."""
    waiting = successor(run, T0, status=RunStatus.WAITING)
    got = await backend.transitions.commit_unclaimed(
        owner, run.checkpoint_seq, unclaimed(waiting, wake=wake), []
    )
    assert got == waiting, got
    return waiting


async def _claimed_ids(backend: SQLiteBackend, now: datetime, **options: int) -> list[str]:
    batch = await backend.runs.claim_due(_policy(now, **options))
    assert isinstance(batch, ClaimBatch), batch
    return sorted(lease.run_id for lease in batch.leases)


def test_a_waiting_run_is_claimed_when_its_wake_is_due_and_never_without_one(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "timers.db", clock=ManualClock(T0))
        owner = Tenant("acme")
        deadline = await _park(backend, owner, await _start(backend, owner, "deadline"), At(T1))
        person = await _park(backend, owner, await _start(backend, owner, "person"), External())
        info = await backend.runs.inspect_run(owner, "deadline")
        assert isinstance(info, RunInfo)
        assert (info.run.status, info.wake_at, info.claimed_at) == (RunStatus.WAITING, T1, None)

        assert await _claimed_ids(backend, T1 - US) == [], "not before its wake"
        batch = await backend.runs.claim_due(_policy(T1))
        assert isinstance(batch, ClaimBatch)
        assert [lease.run_id for lease in batch.leases] == ["deadline"]
        lease = batch.leases[0]
        assert (lease.owner, lease.checkpoint_seq, lease.claim_attempt) == (owner, 2, 1)
        info = await backend.runs.inspect_run(owner, "deadline")
        assert isinstance(info, RunInfo)
        assert (info.run.status, info.wake_at, info.claimed_at) == (RunStatus.WAITING, None, T1)
        assert await _claimed_ids(backend, T1 + TTL) == [], "held until its claim expires"
        # the holder may commit the waiting run as it would a running one
        failed = successor(deadline, T1, status=RunStatus.FAILED)
        got = await backend.transitions.commit_claimed(
            owner, claimed(failed, lease.claim_token, schedule=ReleaseClaim(Terminal())), []
        )
        assert got == failed
        # a run waiting for a person (External) is never due, however late it gets
        assert await _claimed_ids(backend, T1 + timedelta(days=3650)) == []
        assert await backend.runs.fetch_run(owner, "person") == person
        await backend.close()

    asyncio.run(body())


def test_an_expired_claim_on_a_waiting_run_is_taken_over_then_poisoned(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "expired.db", clock=ManualClock(T0))
        await _park(backend, TENANTLESS, await _start(backend, TENANTLESS, "w"), At(T1))
        first = await backend.runs.claim_due(_policy(T1, attempts=2))
        assert isinstance(first, ClaimBatch) and len(first.leases) == 1
        later = T1 + TTL + US
        again = await backend.runs.claim_due(_policy(later, attempts=2))
        assert isinstance(again, ClaimBatch)
        assert [(x.run_id, x.claim_attempt) for x in again.leases] == [("w", 2)]
        lost = await backend.runs.refresh_claim(TENANTLESS, "w", first.leases[0].claim_token)
        assert isinstance(lost, ClaimLost), "the first holder's claim was taken over"
        final = await backend.runs.claim_due(_policy(later + TTL + US, attempts=2))
        assert isinstance(final, ClaimBatch) and final.leases == ()
        assert [p.run_id for p in final.poisoned] == ["w"]
        info = await backend.runs.inspect_run(TENANTLESS, "w")
        assert isinstance(info, RunInfo) and info.run.status is RunStatus.WAITING
        assert info.poisoned_at == later + TTL + US and info.wake_at is None
        await backend.close()

    asyncio.run(body())


def test_a_delayed_start_is_not_claimable_before_its_time(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "delayed.db", clock=ManualClock(T0))
        await _start(backend, TENANTLESS, "later", at=T1)
        assert await _claimed_ids(backend, T0) == []
        assert await _claimed_ids(backend, T1 - US) == []
        assert await _claimed_ids(backend, T1) == ["later"]
        await backend.close()

    asyncio.run(body())


def test_a_message_commit_over_a_claimed_running_run_takes_its_claim(tmp_path: Path) -> None:
    """``Feature.MESSAGES``: commit_unclaimed takes a running run at any moment, even while
    a worker holds it (fenced on the checkpoint only, as the memory backend does)."""

    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "messages.db", clock=ManualClock(T0))
        run = await _start(backend, TENANTLESS, "m")
        batch = await backend.runs.claim_due(_policy(T0))
        assert isinstance(batch, ClaimBatch) and len(batch.leases) == 1
        kept = successor(run, T0, metadata={"docket.mailbox": {"messages": [{"topic": "t"}]}})
        got = await backend.transitions.commit_unclaimed(
            TENANTLESS, run.checkpoint_seq, unclaimed(kept, wake=At(T1)), []
        )
        assert got == kept
        info = await backend.runs.inspect_run(TENANTLESS, "m")
        assert isinstance(info, RunInfo)
        assert (info.claimed_at, info.wake_at, info.run) == (None, T1, kept)
        lost = await backend.runs.refresh_claim(TENANTLESS, "m", batch.leases[0].claim_token)
        assert isinstance(lost, ClaimLost)
        await backend.close()

    asyncio.run(body())


def test_racing_claimers_on_separate_connections_take_each_waiting_run_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "race.db"
    runs = 24

    async def body() -> None:
        setup = SQLiteBackend(path, clock=ManualClock(T0))
        for index in range(runs):
            run = await _start(setup, TENANTLESS, f"w{index:02}")
            await _park(setup, TENANTLESS, run, At(T1 + index * US))
        await setup.close()
        # four backends, four writer connections: the file's write lock is all they share
        claimers = [SQLiteBackend(path, clock=ManualClock(T1)) for _ in range(4)]
        taken: list[str] = []
        for _ in range(runs):  # each round, all four race for the due runs
            rounds = await asyncio.gather(
                *(_claimed_ids(b, T1 + runs * US, limit=3) for b in claimers)
            )
            for ids in rounds:
                taken.extend(ids)
            if not any(rounds):
                break
        assert sorted(taken) == [f"w{index:02}" for index in range(runs)], taken
        for backend in claimers:
            await backend.close()

    asyncio.run(body())


# -- the upgrade from version 2 -------------------------------------------------------------------


def _downgrade_to_version_2(source: Path, target: Path) -> None:
    """A copy of ``source`` as release 2 would have written it (no schedules yet)."""
    conn = sqlite3.connect(target, isolation_level=None)
    conn.executescript(schema_sql(0, 2))
    conn.execute("ATTACH DATABASE ? AS src", (str(source),))
    for table in (
        "docket_graphs",
        "docket_runs",
        "docket_run_parts",
        "docket_events",
        "docket_transitions",
    ):
        names = ", ".join(str(r[1]) for r in conn.execute(f"PRAGMA main.table_info({table})"))
        conn.execute(f"INSERT INTO main.{table} ({names}) SELECT {names} FROM src.{table}")
    conn.execute("DETACH DATABASE src")
    conn.close()


def _rows(
    path: Path, like: dict[str, list[tuple[object, ...]]] | None = None
) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the run tables; with ``like``, only as many leading columns as it has."""
    conn = sqlite3.connect(path)
    try:
        return {
            table: [
                row[: len(like[table][0])] if like and like[table] else row
                for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3").fetchall()
            ]
            for table in (
                "docket_graphs",
                "docket_runs",
                "docket_run_parts",
                "docket_events",
                "docket_transitions",
            )
        }
    finally:
        conn.close()


def _objects(path: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_schema WHERE name LIKE 'docket%' ORDER BY name"
        ).fetchall()
    finally:
        conn.close()
    return [(str(t), str(n), str(s)) for t, n, s in rows]


def test_a_version_2_file_is_refused_then_migrated_keeping_every_row(tmp_path: Path) -> None:
    current = tmp_path / "current.db"
    old = tmp_path / "old.db"

    async def make() -> None:
        backend = SQLiteBackend(current, clock=ManualClock(T0))
        for owner, run_id in ((TENANTLESS, "a"), (Tenant("acme"), "b")):
            run = await _start(backend, owner, run_id)
            long = successor(run, T0, new_events=3, metadata={"log": ["x" * 1000] * 30})
            got = await backend.transitions.commit_unclaimed(
                owner,
                run.checkpoint_seq,
                unclaimed(long, wake=At(T1)),
                events_for(long, T0, [1, 2, 3]),
            )
            assert got == long
        await backend.close()

    asyncio.run(make())
    _downgrade_to_version_2(current, old)
    before = _rows(old)
    assert before["docket_run_parts"] and len(before["docket_events"]) == 6

    async def refused() -> None:
        backend = SQLiteBackend(old)
        with pytest.raises(SchemaTooOld):
            await backend.open()
        await backend.close()
        assert await backend.schema_versions() == (2, SCHEMA_VERSION)

    asyncio.run(refused())
    env = {k: v for k, v in os.environ.items() if k != "DOCKET_BACKEND"}
    done = subprocess.run(
        [sys.executable, "-m", "docket.cli", "migrate", "--backend", f"sqlite:///{old}", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"docket migrate exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert json.loads(done.stdout) == {"from_version": 2, "to_version": SCHEMA_VERSION}
    assert migrate(old) == (SCHEMA_VERSION, SCHEMA_VERSION), "a second migration is a no-op"
    # migrate's own connection enforces foreign keys: the rebuild must not have let the
    # dropped table take its events, pieces and transitions with it (version 4's added
    # columns are compared by test_sqlite_retention's 3 -> 4 migration test)
    assert _rows(old, before) == before
    fresh = tmp_path / "fresh.db"
    migrate(fresh)
    assert _objects(old) == _objects(fresh), "an upgraded file has exactly a new one's schema"
    conn = sqlite3.connect(old)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()

    async def use() -> None:
        backend = SQLiteBackend(old, clock=ManualClock(T0))
        assert (await backend.settings()).foreign_keys is True
        waiting = await _park(
            backend, Tenant("acme"), await _start(backend, Tenant("acme"), "c"), At(T1)
        )
        assert await _claimed_ids(backend, T1) == ["a", "b", "c"]
        assert await backend.runs.fetch_run(Tenant("acme"), "c") == waiting
        await backend.close()

    asyncio.run(use())
