"""Retention on a real SQLite file (``Feature.PRUNE``, schema version 4).

The kit covers prune's semantics (FEATURE-PRUNE, RETENTION-SEQ-ARITHMETIC); these are
the SQLite parts: the 3 -> 4 migration keeps every row and backfills the times prune
reads, a pruned run takes its stored pieces and transition records with it, prune
reads its indexes, and the emissions table stays bounded.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_sqlite import SCHEMA_VERSION, SchemaTooOld, SQLiteBackend, migrate, schema_sql
from docket_sqlite._feed import EMISSIONS_KEEP, TRIM_EVERY, write_emission

from docket.clock import ManualClock
from docket.contract import EventListQuery, PruneResult, ReleaseClaim, Terminal
from docket.records import TENANTLESS, Emission, EventPage, OwnerScope, Run, RunStatus, Tenant
from docket.values import to_micros

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)
_TABLES = (
    "docket_graphs",
    "docket_runs",
    "docket_run_parts",
    "docket_events",
    "docket_transitions",
)


async def _finished_run(backend: SQLiteBackend, owner: OwnerScope, run_id: str) -> Run:
    """A run with 3 events and a long document (stored in pieces), finished at T0."""
    document = graph_document("g")
    ref = graph_ref(document)
    await backend.graphs.save_graph(owner, ref, document)
    run = new_run(run_id, ref, T0, event_seq=2, metadata={"log": ["x" * 1000] * 30})
    got = await backend.transitions.initialize_claimed(
        owner, init_proposal(run, T0), events_for(run, T0, [1, 2]), "tok"
    )
    assert got == run
    done = successor(run, T0, new_events=1, status=RunStatus.DONE)
    got = await backend.transitions.commit_claimed(
        owner, claimed(done, "tok", schedule=ReleaseClaim(Terminal())), events_for(done, T0, [3])
    )
    assert got == done
    return done


async def _live_run(backend: SQLiteBackend, owner: OwnerScope, run_id: str) -> Run:
    document = graph_document("g")
    ref = graph_ref(document)
    await backend.graphs.save_graph(owner, ref, document)
    run = new_run(run_id, ref, T0, event_seq=2)
    got = await backend.transitions.initialize(
        owner, init_proposal(run, T0), events_for(run, T0, [1, 2])
    )
    assert got == run
    return run


def _rows(path: Path, columns: dict[str, int]) -> dict[str, list[tuple[object, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {
            table: [
                tuple(row[: columns[table]])
                for row in conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2, 3")
            ]
            for table in _TABLES
        }
    finally:
        conn.close()


def _downgrade_to_version_3(source: Path, target: Path) -> dict[str, int]:
    """A copy of ``source`` as release 3 wrote it; returns each table's column count."""
    conn = sqlite3.connect(target, isolation_level=None)
    conn.executescript(schema_sql(0, 3))
    conn.execute("ATTACH DATABASE ? AS src", (str(source),))
    counts = {}
    for table in (*_TABLES, "docket_schedules"):
        names = [str(r[1]) for r in conn.execute(f"PRAGMA main.table_info({table})")]
        counts[table] = len(names)
        listed = ", ".join(names)
        conn.execute(f"INSERT INTO main.{table} ({listed}) SELECT {listed} FROM src.{table}")
    conn.execute("DETACH DATABASE src")
    conn.close()
    return counts


def test_a_version_3_file_is_migrated_keeping_every_row_and_backfilling_times(
    tmp_path: Path,
) -> None:
    current, old = tmp_path / "current.db", tmp_path / "old.db"

    async def make() -> None:
        backend = SQLiteBackend(current, clock=ManualClock(T0 + HOUR))
        await _finished_run(backend, Tenant("acme"), "done")
        await _live_run(backend, TENANTLESS, "live")
        await backend.close()

    asyncio.run(make())
    columns = _downgrade_to_version_3(current, old)
    before = _rows(old, columns)
    assert before["docket_run_parts"] and len(before["docket_events"]) == 5

    async def refused() -> None:
        backend = SQLiteBackend(old)
        try:
            await backend.open()
        except SchemaTooOld:
            pass
        else:
            raise AssertionError("a version 3 file was opened without a migration")
        await backend.close()
        assert await backend.schema_versions() == (3, SCHEMA_VERSION)

    asyncio.run(refused())
    assert migrate(old) == (3, SCHEMA_VERSION)
    assert migrate(old) == (SCHEMA_VERSION, SCHEMA_VERSION), "a second migration is a no-op"
    assert _rows(old, columns) == before, "every version 3 column of every row is kept"
    conn = sqlite3.connect(old)
    try:
        # an event's write time is its run's last commit (never younger: nothing is
        # pruned early), a finished run's end its finished_at, a live run has none
        stale = conn.execute(
            "SELECT count(*) FROM docket_events e JOIN docket_runs r USING (tenant, run_id) "
            "WHERE e.written_at_us <> r.updated_at_us"
        ).fetchone()
        assert stale == (0,)
        ends = dict(conn.execute("SELECT run_id, ended_at_us FROM docket_runs").fetchall())
        assert ends == {"done": to_micros(T0), "live": None}
        with_triggers = {
            str(r[0]) for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='trigger'")
        }
        assert "docket_events_are_immutable" in with_triggers
    finally:
        conn.close()
    # the migrated file has the same objects as a fresh one
    fresh = tmp_path / "fresh.db"
    migrate(fresh)
    assert _objects(old) == _objects(fresh)

    async def prune() -> None:
        backend = SQLiteBackend(old, clock=ManualClock(T0 + 3 * HOUR))
        got = await backend.prune(run_age=HOUR)
        assert got == PruneResult(True, 0, 1), "the migrated finished run is pruned"
        got = await backend.prune(event_age=HOUR)
        assert got == PruneResult(True, 2, 0), "the live run's migrated events are pruned"
        page = await backend.events.list_events(TENANTLESS, "live", EventListQuery())
        assert isinstance(page, EventPage) and (page.events, page.latest_seq) == ((), 2)
        await backend.close()

    asyncio.run(prune())


def _objects(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, name FROM sqlite_schema WHERE name LIKE 'docket%' ORDER BY name"
        ).fetchall()
    finally:
        conn.close()
    return [(str(t), str(n)) for t, n in rows]


def test_a_pruned_run_takes_its_pieces_and_transitions_and_prune_reads_its_indexes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "prune.db"
    clock = ManualClock(T0)

    async def body() -> None:
        backend = SQLiteBackend(path, clock=clock)
        await _finished_run(backend, TENANTLESS, "done")
        await _live_run(backend, TENANTLESS, "live")
        got = await backend.prune(event_age=HOUR, run_age=HOUR, now=T0 + HOUR)
        assert got == PruneResult(True, 0, 0), "a row exactly at the boundary survives"
        got = await backend.prune(run_age=HOUR, now=T0 + HOUR + timedelta(microseconds=1))
        assert got == PruneResult(True, 0, 1)
        await backend.close()

    asyncio.run(body())
    conn = sqlite3.connect(path)
    try:
        left = {
            table: conn.execute(f"SELECT DISTINCT run_id FROM {table}").fetchall()
            for table in ("docket_runs", "docket_run_parts", "docket_events", "docket_transitions")
        }
        assert left == {
            "docket_runs": [("live",)],
            "docket_run_parts": [],
            "docket_events": [("live",)],
            "docket_transitions": [("live",)],
        }
        plans = {
            "docket_events_by_age": "SELECT rowid FROM docket_events WHERE written_at_us < ? "
            "ORDER BY written_at_us LIMIT ?",
            "docket_runs_ended": "SELECT tenant, run_id FROM docket_runs WHERE ended_at_us < ? "
            "ORDER BY ended_at_us LIMIT ?",
        }
        for index, sql in plans.items():
            plan = " | ".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, (1, 5)))
            assert f"USING INDEX {index}" in plan or f"USING COVERING INDEX {index}" in plan, plan
            assert "TEMP B-TREE" not in plan, plan
    finally:
        conn.close()


def test_the_emissions_table_is_trimmed_by_its_writers_and_by_prune(tmp_path: Path) -> None:
    path = tmp_path / "emissions.db"

    async def make() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        await backend.open()
        await backend.close()

    asyncio.run(make())
    emission = Emission(
        tenant_id=None,
        run_id="r",
        node_id="n",
        task_id="t",
        attempt=1,
        seq=1,
        kind="token",
        data="x",
        at=T0,
    )
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        now_us = to_micros(T0)
        conn.execute("BEGIN")
        for _ in range(EMISSIONS_KEEP + 3 * TRIM_EVERY):
            write_emission(conn, emission, now_us)
        conn.execute("COMMIT")
        count, low, high = conn.execute(
            "SELECT count(*), min(id), max(id) FROM docket_emissions"
        ).fetchone()
        assert count <= EMISSIONS_KEEP + TRIM_EVERY and high - low < count + 1, (count, low, high)
        # rows older than the time to live go at the next trim, however few they are
        conn.execute("BEGIN")
        write_emission(conn, emission, now_us + 120_000_000)
        while (conn.execute("SELECT max(id) FROM docket_emissions").fetchone()[0]) % TRIM_EVERY:
            write_emission(conn, emission, now_us + 120_000_000)
        conn.execute("COMMIT")
        assert conn.execute(
            "SELECT count(*) FROM docket_emissions WHERE written_at_us = ?", (now_us,)
        ).fetchone() == (0,)
    finally:
        conn.close()

    async def prune() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0 + 10 * HOUR))
        assert await backend.prune(event_age=HOUR) == PruneResult(True, 0, 0)
        await backend.close()

    asyncio.run(prune())
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM docket_emissions").fetchone() == (0,)
    finally:
        conn.close()
