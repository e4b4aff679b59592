"""The schedule store on a real SQLite file (``Feature.SCHEDULES``, schema version 3).

Storage only: the rules are ``docket.contract.schedules``'s (and the kit checks them on
every backend); these pin what SQLite adds — the row and its indexed columns, the
version fence as one conditional UPDATE that several connections and processes race
on, owner isolation in SQL, the keyset listing, and that bad input writes nothing.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from docket_sqlite import SQLiteBackend
from docket_sqlite._schedules import DUE_SCHEDULES_SQL, list_schedules_sql

from docket.clock import ManualClock
from docket.contract import Conflict, Limits, NotFound, StaleCheckpoint, TooLarge
from docket.contract.protocols import ScheduleStore
from docket.records import (
    SYSTEM,
    TENANTLESS,
    CronSchedule,
    OwnerScope,
    ScheduleCursor,
    SchedulePage,
    Tenant,
    schedule_to_json,
)
from docket.values import JSONDict, to_micros

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
WORKER = Path(__file__).with_name("schedule_worker.py")


def _schedule(schedule_id: str, *, next_tick: datetime | None = T0, **changes: Any) -> CronSchedule:
    base = CronSchedule(
        id=schedule_id,
        graph_id="report",
        cron="*/5 * * * *",
        created_at=T0,
        updated_at=T0,
        next_tick_at=next_tick,
        input={"region": "eu"},
    )
    return attrs.evolve(base, **changes)


async def _create(
    backend: SQLiteBackend, owner: OwnerScope, schedule: CronSchedule
) -> CronSchedule:
    got = await backend.schedules.create_schedule(owner, schedule)
    assert isinstance(got, CronSchedule), got
    return got


def _table(path: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT * FROM docket_schedules ORDER BY tenant, schedule_id"
        ).fetchall()
    finally:
        conn.close()


def test_a_schedule_is_stored_as_its_document_beside_its_indexed_columns(tmp_path: Path) -> None:
    path = tmp_path / "s.db"

    async def body() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        assert isinstance(backend.schedules, ScheduleStore)
        stored = await _create(backend, Tenant("acme"), _schedule("nightly", version=7))
        assert (stored.version, stored.tenant_id) == (1, "acme"), "the store sets both"
        assert await backend.schedules.fetch_schedule(Tenant("acme"), "nightly") == stored
        await backend.close()
        assert _table(path) == [("acme", "nightly", 1, to_micros(T0), schedule_to_json(stored))]
        # a restart reads the same document back
        again = SQLiteBackend(path)
        assert await again.schedules.fetch_schedule(Tenant("acme"), "nightly") == stored
        await again.close()

    asyncio.run(body())


def test_updates_are_fenced_on_the_version_and_keep_the_identity(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "u.db", clock=ManualClock(T0))
        store = backend.schedules
        stored = await _create(backend, TENANTLESS, _schedule("s"))
        change = attrs.evolve(
            stored,
            next_tick_at=T0 + 5 * MINUTE,
            last_tick_at=T0,
            last_run_id="s@20260715T120000Z",
            created_at=T0 + MINUTE,  # ignored: the stored identity is kept
            tenant_id="someone-else",
            updated_at=T0 + MINUTE,
        )
        second = await store.update_schedule(TENANTLESS, change, 1)
        assert isinstance(second, CronSchedule)
        assert (second.version, second.created_at, second.tenant_id) == (2, T0, None)
        assert second.next_tick_at == T0 + 5 * MINUTE
        stale = await store.update_schedule(TENANTLESS, attrs.evolve(change, cron="0 * * * *"), 1)
        assert isinstance(stale, StaleCheckpoint) and "version 2" in stale.reason
        assert await store.fetch_schedule(TENANTLESS, "s") == second, "the loser wrote nothing"
        missing = await store.update_schedule(TENANTLESS, _schedule("ghost"), 1)
        assert isinstance(missing, NotFound)
        paused = await store.update_schedule(TENANTLESS, attrs.evolve(second, paused=True), 2)
        assert isinstance(paused, CronSchedule) and paused.due_at is None
        assert await store.due_schedules(T0 + timedelta(days=1)) == ()
        assert await store.delete_schedule(TENANTLESS, "s") is True
        assert await store.delete_schedule(TENANTLESS, "s") is False
        assert isinstance(await store.fetch_schedule(TENANTLESS, "s"), NotFound)
        await backend.close()

    asyncio.run(body())


def test_owners_are_isolated(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "t.db", clock=ManualClock(T0))
        store = backend.schedules
        acme, globex = Tenant("acme"), Tenant("globex")
        mine = await _create(backend, acme, _schedule("same"))
        theirs = await _create(backend, globex, _schedule("same", cron="0 0 * * *"))
        plain = await _create(backend, TENANTLESS, _schedule("same", cron="0 1 * * *"))
        again = await store.create_schedule(acme, _schedule("same"))
        assert isinstance(again, Conflict)
        assert await store.fetch_schedule(globex, "same") == theirs
        assert await store.fetch_schedule(TENANTLESS, "same") == plain
        assert isinstance(await store.fetch_schedule(Tenant("initech"), "same"), NotFound)
        # another owner's update and delete find nothing, and change nothing
        moved = await store.update_schedule(Tenant("initech"), attrs.evolve(mine, paused=True), 1)
        assert isinstance(moved, NotFound)
        assert await store.delete_schedule(Tenant("initech"), "same") is False
        assert await store.fetch_schedule(acme, "same") == mine
        page = await store.list_schedules(acme)
        assert page.schedules == (mine,) and page.has_more is False
        assert (await store.list_schedules(TENANTLESS)).schedules == (plain,)
        everyone = await store.list_schedules(SYSTEM)
        assert everyone.schedules == (plain, mine, theirs), "by (id, tenant or '')"
        with pytest.raises(ValueError):
            await store.create_schedule(SYSTEM, _schedule("x"))  # type: ignore[arg-type]
        await backend.close()

    asyncio.run(body())


def test_listing_pages_by_keyset_across_owners(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "l.db", clock=ManualClock(T0))
        store = backend.schedules
        owners: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b")]
        for index in range(7):
            for owner in owners:
                await _create(backend, owner, _schedule(f"s{index}"))
        seen: list[tuple[str, str | None]] = []
        after: ScheduleCursor | None = None
        while True:
            page = await store.list_schedules(SYSTEM, after, limit=4)
            assert isinstance(page, SchedulePage)
            seen.extend((s.id, s.tenant_id) for s in page.schedules)
            if not page.has_more:
                break
            after = page.next_after
        expected = [(f"s{i}", t) for i in range(7) for t in (None, "a", "b")]
        assert seen == expected
        one = await store.list_schedules(Tenant("b"), ScheduleCursor("s2", "b"), limit=10)
        assert [s.id for s in one.schedules] == ["s3", "s4", "s5", "s6"]
        with pytest.raises(ValueError):
            await store.list_schedules(SYSTEM, limit=0)
        await backend.close()

    asyncio.run(body())


def test_due_schedules_are_the_unpaused_ones_oldest_first(tmp_path: Path) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        backend = SQLiteBackend(tmp_path / "d.db", clock=clock)
        store = backend.schedules
        await _create(backend, Tenant("b"), _schedule("x", next_tick=T0 + 2 * MINUTE))
        await _create(backend, Tenant("a"), _schedule("x", next_tick=T0 + 2 * MINUTE))
        await _create(backend, TENANTLESS, _schedule("early", next_tick=T0 + MINUTE))
        await _create(backend, TENANTLESS, _schedule("paused", next_tick=T0, paused=True))
        await _create(backend, TENANTLESS, _schedule("done", next_tick=None))
        buffered = _schedule("held", next_tick=T0 + 9 * MINUTE, buffered_tick_at=T0 + 3 * MINUTE)
        await _create(backend, TENANTLESS, buffered)
        assert await store.due_schedules() == (), "nothing is due at the backend's now"
        due = await store.due_schedules(T0 + 3 * MINUTE)
        assert [(s.id, s.tenant_id) for s in due] == [
            ("early", None),
            ("x", "a"),
            ("x", "b"),
            ("held", None),
        ]
        assert [s.id for s in await store.due_schedules(T0 + 3 * MINUTE, limit=2)] == [
            "early",
            "x",
        ]
        clock.advance(2 * MINUTE)
        assert [s.id for s in await store.due_schedules()] == ["early", "x", "x"]
        with pytest.raises(ValueError):
            await store.due_schedules(limit=0)
        await backend.close()

    asyncio.run(body())


def test_bad_input_raises_a_typed_error_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bad.db"

    async def body() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0), limits=Limits(max_run_bytes=4096))
        store = backend.schedules
        stored = await _create(backend, TENANTLESS, _schedule("s"))
        before = _table(path)
        with pytest.raises(TypeError):
            await store.create_schedule(TENANTLESS, {"id": "x"})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="cron"):
            await store.create_schedule(TENANTLESS, _schedule("y", cron=""))
        with pytest.raises(ValueError, match="created_at"):
            await store.create_schedule(TENANTLESS, _schedule("y", created_at=datetime(2026, 1, 1)))
        with pytest.raises(ValueError, match="next_tick_at"):
            await store.update_schedule(
                TENANTLESS, _schedule("s", next_tick=datetime(2026, 1, 1)), 1
            )
        with pytest.raises(TypeError):
            await store.update_schedule(TENANTLESS, stored, "1")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            await store.fetch_schedule(TENANTLESS, "")
        with pytest.raises(ValueError):
            await store.delete_schedule(TENANTLESS, "")
        big: JSONDict = {"blob": "x" * 5000}
        assert isinstance(
            await store.create_schedule(TENANTLESS, _schedule("big", input=big)), TooLarge
        )
        too_large = await store.update_schedule(TENANTLESS, attrs.evolve(stored, input=big), 1)
        assert isinstance(too_large, TooLarge)
        await backend.close()
        assert _table(path) == before

    asyncio.run(body())


def test_concurrent_updates_from_several_connections_one_wins_per_version(tmp_path: Path) -> None:
    path = tmp_path / "race.db"

    async def body() -> None:
        backends = [SQLiteBackend(path, clock=ManualClock(T0)) for _ in range(4)]
        current = await _create(backends[0], TENANTLESS, _schedule("s"))
        for round_ in range(10):
            # every connection read the same version; each proposes its own change
            results = await asyncio.gather(
                *(
                    b.schedules.update_schedule(
                        TENANTLESS, attrs.evolve(current, metadata={"by": index}), current.version
                    )
                    for index, b in enumerate(backends)
                )
            )
            winners = [r for r in results if isinstance(r, CronSchedule)]
            assert len(winners) == 1, results
            assert all(isinstance(r, StaleCheckpoint) for r in results if r is not winners[0])
            current = winners[0]
            assert current.version == round_ + 2
            stored = await backends[round_ % 4].schedules.fetch_schedule(TENANTLESS, "s")
            assert stored == current, "the stored document is the winner's"
        # one connection too: writes queued together share a transaction (group commit),
        # each in its own savepoint, and the fence still admits only the first
        one = backends[0].schedules
        results = await asyncio.gather(
            *(
                one.update_schedule(
                    TENANTLESS, attrs.evolve(current, metadata={"by": index}), current.version
                )
                for index in range(6)
            )
        )
        assert sum(isinstance(r, CronSchedule) for r in results) == 1, results
        assert sum(isinstance(r, StaleCheckpoint) for r in results) == 5, results
        for backend in backends:
            await backend.close()

    asyncio.run(body())


def test_processes_incrementing_one_schedule_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "procs.db"
    go = tmp_path / "go"
    count = 15

    async def prepare() -> None:
        backend = SQLiteBackend(path)
        await _create(backend, TENANTLESS, _schedule("shared", metadata={"counter": 0}))
        await backend.close()

    asyncio.run(prepare())
    workers = {
        name: subprocess.Popen(
            [sys.executable, str(WORKER), str(path), name, str(count), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("p1", "p2", "p3")
    }
    for name, process in workers.items():  # every process has the file open before the start
        assert process.stdout is not None
        ready = process.stdout.readline()
        if not ready:  # it died before opening the file: say why
            _, err = process.communicate(timeout=60)
            raise AssertionError(f"{name} exited {process.returncode}:\n{err[-3000:]}")
        assert json.loads(ready) == {"ready": name}
    go.touch()
    versions: list[int] = []
    for name, process in workers.items():
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, f"{name} exited {process.returncode}:\n{out}\n{err[-3000:]}"
        lines = [json.loads(line) for line in out.splitlines()]
        assert len(lines) == count, (name, lines)
        versions.extend(int(line["version"]) for line in lines)
    assert Counter(versions) == Counter(range(2, 2 + 3 * count)), "each version won exactly once"

    async def check() -> None:
        backend = SQLiteBackend(path)
        final = await backend.schedules.fetch_schedule(TENANTLESS, "shared")
        assert isinstance(final, CronSchedule)
        assert (final.version, final.metadata["counter"]) == (1 + 3 * count, 3 * count)
        await backend.close()

    asyncio.run(check())


def _plan(conn: sqlite3.Connection, sql: str, params: list[object] | tuple[object, ...]) -> str:
    return " | ".join(str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))


def test_due_and_list_queries_use_their_indexes(tmp_path: Path) -> None:
    path = tmp_path / "plans.db"

    async def body() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        for index in range(30):
            owner = Tenant(f"t{index % 3}")
            await _create(backend, owner, _schedule(f"s{index}", next_tick=T0 + index * MINUTE))
        await backend.close()

    asyncio.run(body())
    conn = sqlite3.connect(path)
    try:
        conn.execute("ANALYZE")
        due = _plan(conn, DUE_SCHEDULES_SQL, (to_micros(T0), 5))
        assert "USING INDEX docket_schedules_due" in due and "TEMP B-TREE" not in due, due
        cursor = ScheduleCursor("s3", "t0")
        for scope, after, index in (
            (SYSTEM, None, "docket_schedules_by_id"),
            (SYSTEM, cursor, "docket_schedules_by_id"),
            (Tenant("t1"), None, "sqlite_autoindex_docket_schedules_1"),
            (Tenant("t1"), cursor, "sqlite_autoindex_docket_schedules_1"),
        ):
            plan = _plan(conn, *list_schedules_sql(scope, after, 10))
            assert f"INDEX {index}" in plan and "TEMP B-TREE" not in plan, (scope, after, plan)
    finally:
        conn.close()
