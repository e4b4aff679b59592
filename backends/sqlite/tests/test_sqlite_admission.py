"""Admission limits on a real SQLite file (``Feature.ADMISSION``, schema version 6).

A scripted sequence of every admission operation answers exactly as the memory reference
does, step by step (tenants, priorities, a limit raised by ``set_queue`` then
``promote_held``, retried starts, unknown queues and runs), and so do seeded random
sequences with random caps; refused calls change nothing stored; the ledger's walks read
their indexes; a version 5 file upgrades keeping its runs and queues; eight processes
racing on one file never hold more admitted starts than the limits allow.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
from docket_contract_tests.fixtures import graph_document, graph_ref, init_proposal, new_run
from docket_sqlite import SCHEMA_VERSION, SchemaTooOld, SQLiteBackend, migrate, schema_sql
from docket_sqlite._admissions import (
    FIRST_HELD_TENANT_SQL,
    HELD_START_SQL,
    NEXT_HELD_TENANT_SQL,
    TENANT_WALK_SQL,
    WALK_SQL,
)

from docket.clock import ManualClock
from docket.contract import Feature, NotFound
from docket.contract.admission import MAX_START_BYTES
from docket.contract.memory import MemoryBackend
from docket.records import TENANTLESS, OwnerScope, QueueConfig, RunInfo, Tenant

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
SECOND = timedelta(seconds=1)
DAY = timedelta(days=1)
WORKER = Path(__file__).with_name("admission_worker.py")
Backend = SQLiteBackend | MemoryBackend


# -- the scripted sequence, against memory ----------------------------------------------------


async def _script(backend: Backend, clock: ManualClock) -> list[object]:
    """Every admission operation, its answers in order (memory's are the reference)."""
    queues, adm = backend.queues, backend.admissions
    out: list[object] = []

    async def note(call: Awaitable[object]) -> None:
        out.append(await call)

    async def look(name: str) -> None:
        out.append(await adm.admissions(name))
        out.append(list(await queues.list_queues()))

    onb = QueueConfig(name="onb", admission_limit=3, tenant_admission_limit=2)
    await note(queues.set_queue(onb))
    await note(adm.admit("nope", "x", None, 0, b"x"))  # unknown queue: NotFound, stores nothing
    await note(adm.admit("default", "d1", None, 0, b""))  # no limits: admitted, row inserted
    for run_id, tenant, priority in (
        ("a1", "t1", 0),
        ("a2", "t1", 0),
        ("a3", "t1", 0),  # t1 at its cap: held
        ("b1", "t2", 0),  # the queue's third: admitted
        ("b2", "t2", 0),  # the queue at its cap: held
        ("n1", None, 0),
        ("c1", "t3", 5),
        ("a3", "t1", 0),  # a retried start: its state, no new seq
        ("a1", "t9", 7),  # a known run id answers its state whatever else it says
        ("b3", "t2", 100),  # t2 has a held start: held behind it, whatever its priority
    ):
        clock.advance(SECOND)
        await note(adm.admit("onb", run_id, tenant, priority, f"start-{run_id}".encode()))
    for run_id, tenant in (("a3", "t1"), ("a3", "t2"), ("n1", None), ("a1", "t1"), ("zz", None)):
        await note(adm.held_start(run_id, tenant))
    await note(adm.held_start("n1", ""))  # '' is no tenant: never the tenantless start
    out.append(await adm.admissions("onb", limit=2))
    out.append(await adm.admissions("onb", limit=10**30))  # past SQLite's 64-bit LIMIT
    await look("onb")
    # a finish ignores unknown and held ids, then promotes: b3 first (priority 100)
    await note(adm.finish_admitted("onb", ["a1", "unknown", "a3"]))
    clock.advance(SECOND)
    await note(adm.finish_admitted("onb", ["a2", "b1"], now=T0 + DAY))
    await note(adm.finish_admitted("onb", []))  # nothing freed: the queue is at its cap
    await note(adm.drop_held("onb", "n1"))
    await note(adm.drop_held("onb", "n1"))  # gone already
    await note(adm.drop_held("onb", "b3"))  # admitted: not dropped
    await note(adm.drop_held("other", "b2"))
    await look("onb")
    # a raised limit admits nothing by itself: promote_held does
    await note(queues.set_queue(attrs.evolve(onb, admission_limit=10)))
    await look("onb")
    clock.advance(SECOND)
    await note(adm.promote_held("onb"))
    await note(adm.promote_held("onb", now=T0 + 2 * DAY))  # nothing left to promote
    # a tenant cap without a queue cap: the walk skips tenants at their cap
    await note(queues.set_queue(QueueConfig(name="ten", tenant_admission_limit=1)))
    for run_id, tenant, priority in (
        ("x1", "t1", 0),
        ("x2", "t1", 0),
        ("y1", "t2", 0),
        ("z1", None, 0),
        ("z2", None, -3),
        ("x3", "t1", 9),
        ("y2", "t2", 1),
    ):
        await note(adm.admit("ten", run_id, tenant, priority, run_id.encode()))
    await look("ten")
    await note(adm.finish_admitted("ten", ["y1"]))  # x3 skipped (t1 at its cap), y2 taken
    await note(adm.finish_admitted("ten", ["x1", "z1"]))  # x3 by priority, then z2
    await note(adm.finish_admitted("ten", ["x3"]))  # x2
    await look("ten")
    # a lowered limit promotes nothing until the queue is under it again
    await note(queues.set_queue(attrs.evolve(onb, admission_limit=1)))
    await note(adm.admit("onb", "late", "t4", 0, b"late"))
    await note(adm.promote_held("onb"))
    # unknown queues: nothing to finish or promote, an empty view
    await note(adm.finish_admitted("nope", ["a1"]))
    await note(adm.promote_held("nope"))
    await look("nope")
    await look("default")
    await note(adm.held_start("late", "t4"))
    return out


def test_the_admission_ledger_answers_as_memory_does(tmp_path: Path) -> None:
    async def body() -> None:
        clocks = (ManualClock(T0), ManualClock(T0))
        sqlite = SQLiteBackend(tmp_path / "admit.db", clock=clocks[0])
        memory = MemoryBackend(clock=clocks[1])
        assert Feature.ADMISSION in sqlite.capabilities().features
        got = await _script(sqlite, clocks[0])
        want = await _script(memory, clocks[1])
        assert len(got) == len(want)
        for index, (mine, theirs) in enumerate(zip(got, want, strict=True)):
            assert mine == theirs, f"answer {index}: sqlite {mine!r} != memory {theirs!r}"
        # spot checks that the script exercised what it claims to
        assert want[1] == NotFound("queue") and "HELD" in repr(want[5]) and want[2] == "admitted"
        promoted = [a for a in want if isinstance(a, list) and a and hasattr(a[0], "seq")]
        assert [[s.run_id for s in p] for p in promoted] == [
            ["b3"],
            ["c1", "a3"],
            ["b2"],
            ["y2"],
            ["x3", "z2"],
            ["x2"],
        ]
        assert promoted[1][0].at == T0 + DAY, "a promotion is stamped with its own time"
        await sqlite.close()
        # the ledger lives in the file: a reopened backend reads the same
        again = SQLiteBackend(tmp_path / "admit.db", clock=ManualClock(T0 + 2 * DAY))
        assert await again.admissions.admissions("ten") == await memory.admissions.admissions("ten")
        assert list(await again.queues.list_queues()) == list(await memory.queues.list_queues())
        await again.close()

    asyncio.run(body())


async def _random_script(backend: Backend, seed: int) -> list[object]:
    """A seeded random mix of admits, finishes, promotions, drops and reconfigurations
    over two queues, four tenants and tenantless starts; every answer in order."""
    rng = random.Random(seed)
    adm, queues = backend.admissions, backend.queues
    out: list[object] = []
    started: list[tuple[str, str]] = []
    caps = (None, 1, 2, 3, 5)
    for name in ("p", "r"):
        await queues.set_queue(QueueConfig(name=name, admission_limit=3, tenant_admission_limit=2))
    for step in range(300):
        name = rng.choice(("p", "r"))
        at = T0 + step * SECOND
        roll = rng.random()
        if roll < 0.45 or not started:
            run_id = f"s{step}" if rng.random() < 0.9 or not started else rng.choice(started)[1]
            tenant = rng.choice(("a", "b", "c", "d", None))
            answer = await adm.admit(name, run_id, tenant, rng.randint(-2, 2), run_id.encode(), at)
            started.append((name, run_id))
            out.append(answer)
        elif roll < 0.75:
            ids = [r for q, r in rng.sample(started, min(3, len(started))) if q == name]
            out.append(await adm.finish_admitted(name, ids, now=at))
        elif roll < 0.82:
            out.append(await adm.drop_held(name, rng.choice(started)[1]))
        elif roll < 0.9:
            config = QueueConfig(
                name=name, admission_limit=rng.choice(caps), tenant_admission_limit=rng.choice(caps)
            )
            out.append(await queues.set_queue(config))
            out.append(await adm.promote_held(name, now=at))
        else:
            out.append(await adm.held_start(rng.choice(started)[1], rng.choice(("a", None))))
        if step % 25 == 0:
            out.append(await adm.admissions(name))
    out.append([await adm.admissions(name) for name in ("p", "r")])
    out.append(list(await queues.list_queues()))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_sequences_answer_as_memory_does(tmp_path: Path, seed: int) -> None:
    async def body() -> None:
        sqlite = SQLiteBackend(tmp_path / "random.db", clock=ManualClock(T0), synchronous="NORMAL")
        memory = MemoryBackend(clock=ManualClock(T0))
        got = await _random_script(sqlite, seed)
        want = await _random_script(memory, seed)
        for index, (mine, theirs) in enumerate(zip(got, want, strict=True)):
            assert mine == theirs, f"answer {index}: sqlite {mine!r} != memory {theirs!r}"
        promoted = sum(len(a) for a in want if isinstance(a, list) and a and hasattr(a[0], "seq"))
        assert promoted >= 5, "the sequence promoted starts"
        await sqlite.close()

    asyncio.run(body())


# -- refused calls change nothing ---------------------------------------------------------------


def _dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in ("docket_queues", "docket_admissions", "docket_queue_slots")
        }
    finally:
        conn.close()


def test_bad_input_is_refused_and_changes_nothing_stored(tmp_path: Path) -> None:
    path = tmp_path / "bad.db"

    async def body() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        adm = backend.admissions
        await backend.queues.set_queue(QueueConfig(name="q", admission_limit=1))
        assert await adm.admit("q", "r1", "t", 0, b"one") == "admitted"
        assert await adm.admit("q", "r2", "t", 0, b"two") == "held"
        before = _dump(path)
        refused: list[Callable[[], Awaitable[object]]] = [
            lambda: adm.admit("bad name", "r3", None, 0, b""),
            lambda: adm.admit("q", "", None, 0, b""),
            lambda: adm.admit("q", "r" * 256, None, 0, b""),
            lambda: adm.admit("q", "r3", "", 0, b""),
            lambda: adm.admit("q", "r3", 5, 0, b""),  # type: ignore[arg-type]
            lambda: adm.admit("q", "r3", None, 101, b""),
            lambda: adm.admit("q", "r3", None, True, b""),
            lambda: adm.admit("q", "r3", None, 0, "text"),  # type: ignore[arg-type]
            lambda: adm.admit("q", "r3", None, 0, bytes(MAX_START_BYTES + 1)),
            lambda: adm.finish_admitted("q", "r1"),
            lambda: adm.finish_admitted("q", ["r1", ""]),
            lambda: adm.finish_admitted("", ["r1"]),
            lambda: adm.promote_held("no/such"),
            lambda: adm.drop_held("q", ""),
            lambda: adm.held_start("", None),
            lambda: adm.admissions("q", limit=0),
            lambda: adm.admissions("q", limit=True),
        ]
        for index, call in enumerate(refused):
            with pytest.raises(ValueError):
                await call()
            assert _dump(path) == before, f"refused call {index} changed the file"
        # an unknown queue is an answer, not an error, and stores nothing either
        assert await adm.admit("nope", "r3", None, 0, b"") == NotFound("queue")
        assert _dump(path) == before
        # a start of the largest size is kept byte for byte
        big = bytes(range(256)) * (MAX_START_BYTES // 256)
        assert await adm.admit("q", "big", None, 0, big) == "held"
        held = await adm.held_start("big", None)
        assert held is not None and held.start == big
        await backend.close()

    asyncio.run(body())


# -- query plans ----------------------------------------------------------------------------------


def test_the_ledger_walks_read_their_indexes(tmp_path: Path) -> None:
    path = tmp_path / "plans.db"

    async def seed() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        await backend.queues.set_queue(QueueConfig(name="q", admission_limit=2))
        for index in range(40):
            await backend.admissions.admit("q", f"r{index}", f"t{index % 3}", index % 5, b"s")
        await backend.close()

    asyncio.run(seed())
    conn = sqlite3.connect(path)
    try:
        conn.execute("ANALYZE")

        def plan(sql: str, params: tuple[object, ...]) -> str:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
            return " | ".join(str(row[-1]) for row in rows)

        for sql, params, index in (
            (f"{WALK_SQL} LIMIT ?", ("q", 5), "docket_admissions_order"),
            (FIRST_HELD_TENANT_SQL, ("q",), "docket_admissions_by_tenant"),
            (NEXT_HELD_TENANT_SQL, ("q", "t0"), "docket_admissions_by_tenant"),
            (TENANT_WALK_SQL, ("q", "t1", 5), "docket_admissions_by_tenant"),
        ):
            walk = plan(sql, params)
            assert f"COVERING INDEX {index}" in walk and "TEMP B-TREE" not in walk, walk
        found = plan(HELD_START_SQL, ("r3", "t0"))
        assert "INDEX docket_admissions_by_run" in found and "TEMP B-TREE" not in found
    finally:
        conn.close()


# -- schema 5 -> 6 ---------------------------------------------------------------------------------


async def _start_run(backend: SQLiteBackend, owner: OwnerScope, run_id: str, queue: str) -> None:
    document = graph_document("g")
    ref = graph_ref(document)
    await backend.graphs.save_graph(owner, ref, document)
    run = new_run(run_id, ref, T0)
    proposal = attrs.evolve(init_proposal(run, T0 - SECOND), queue=queue, priority=3)
    assert await backend.transitions.initialize(owner, proposal, []) == run


def _objects(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT name, sql FROM sqlite_schema WHERE name LIKE 'docket%' ORDER BY name"
        ).fetchall()
        return [(str(name), str(sql)) for name, sql in rows]
    finally:
        conn.close()


def test_a_version_5_file_upgrades_keeping_its_runs_and_queues(tmp_path: Path) -> None:
    old, scratch = tmp_path / "v5.db", tmp_path / "scratch.db"
    conn = sqlite3.connect(old, isolation_level=None)
    conn.executescript(schema_sql(0, 5))
    conn.close()

    async def seed() -> None:
        # release 5's own writes are not at hand: seed a current file, copy version 5's
        # columns across
        backend = SQLiteBackend(scratch, clock=ManualClock(T0))
        await _start_run(backend, TENANTLESS, "old-1", "work")
        await _start_run(backend, Tenant("t"), "old-2", "default")
        await backend.queues.set_queue(QueueConfig(name="work", execution_limit=2))
        assert await backend.queues.acquire_slots("work", ["h1"], DAY) == 1
        await backend.close()

    asyncio.run(seed())
    conn = sqlite3.connect(old, isolation_level=None)
    conn.execute("ATTACH DATABASE ? AS src", (str(scratch),))
    tables = ("docket_graphs", "docket_runs", "docket_transitions", "docket_queues")
    for table in (*tables, "docket_queue_slots"):
        names = ", ".join(str(r[1]) for r in conn.execute(f"PRAGMA main.table_info({table})"))
        conn.execute(f"INSERT INTO main.{table} ({names}) SELECT {names} FROM src.{table}")
    conn.execute("DETACH DATABASE src")
    assert "admission_seq" not in {
        str(r[1]) for r in conn.execute("PRAGMA table_info(docket_queues)")
    }
    conn.close()

    async def refused() -> None:
        backend = SQLiteBackend(old)
        with pytest.raises(SchemaTooOld):
            await backend.open()
        await backend.close()

    asyncio.run(refused())
    assert migrate(old) == (5, SCHEMA_VERSION) == (5, 6)
    assert migrate(old) == (6, 6), "a second migration is a no-op"
    fresh = tmp_path / "fresh.db"
    assert migrate(fresh) == (0, 6)
    assert _objects(old) == _objects(fresh), "an upgraded file has exactly a new one's schema"

    async def after() -> None:
        backend = SQLiteBackend(old, clock=ManualClock(T0))
        for owner, run_id, queue in (
            (TENANTLESS, "old-1", "work"),
            (Tenant("t"), "old-2", "default"),
        ):
            info = await backend.runs.inspect_run(owner, run_id)
            assert isinstance(info, RunInfo) and (info.queue, info.priority) == (queue, 3)
        listed = {s.config.name: s for s in await backend.queues.list_queues()}
        assert sorted(listed) == ["default", "work"]
        work = listed["work"]
        assert (work.config.execution_limit, work.running, work.depth) == (2, 1, 1)
        assert (work.admitted, work.held) == (0, 0)
        # the old queue takes an admission limit; its first seq is 1
        config = attrs.evolve(work.config, admission_limit=1)
        await backend.queues.set_queue(config)
        assert await backend.admissions.admit("work", "new-1", None, 0, b"a") == "admitted"
        assert await backend.admissions.admit("work", "new-2", None, 0, b"b") == "held"
        view = await backend.admissions.admissions("work")
        assert [(s.run_id, s.seq) for s in view.admitted + view.held] == [
            ("new-1", 1),
            ("new-2", 2),
        ]
        assert await backend.queues.fetch_queue("work") == config
        await backend.close()

    asyncio.run(after())


# -- eight processes ----------------------------------------------------------------------------


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _peak(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    held = peak = 0
    for _, delta in edges:
        held += delta
        peak = max(peak, held)
    return peak


def test_eight_processes_racing_never_admit_beyond_the_limits(tmp_path: Path) -> None:
    path, go = tmp_path / "race.db", tmp_path / "go"
    limit, tenant_limit = 3, 2

    async def prepare() -> None:
        backend = SQLiteBackend(path)
        await backend.queues.set_queue(
            QueueConfig(name="churn", admission_limit=limit, tenant_admission_limit=tenant_limit)
        )
        await backend.queues.set_queue(QueueConfig(name="keep", admission_limit=limit))
        await backend.close()

    asyncio.run(prepare())
    names = [f"p{index}" for index in range(8)]
    workers = {
        name: subprocess.Popen(
            [sys.executable, str(WORKER), str(path), name, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    }
    try:
        _wait_for(
            lambda: (
                all((tmp_path / f"ready-{n}").exists() for n in names)
                or any(p.poll() is not None for p in workers.values())
            ),
            "every worker to open the file",
        )
        go.touch()
        reports: dict[str, dict[str, Any]] = {}
        for name, process in workers.items():
            out, err = process.communicate(timeout=600)
            assert process.returncode == 0, (
                f"{name} exited {process.returncode}:\n{out[-2000:]}\n{err[-3000:]}"
            )
            reports[name] = json.loads(out.splitlines()[-1])
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
    # never finished: exactly the limit admitted across every process, the rest held
    assert sum(r["kept"] for r in reports.values()) == limit, reports
    # churn: each start admitted exactly once (at its admit or by one promotion) ...
    admitted = [run_id for r in reports.values() for run_id, _, _, _ in r["admitted"]]
    started = {f"{name}-{index}" for name in names for index in range(reports[name]["rounds"])}
    assert sorted(admitted) == sorted(started), "every start admitted exactly once"
    assert any(r["promoted"] for r in reports.values()), "some starts waited and were promoted"
    # ... and the admitted intervals (inside the ledger's) never overlap beyond the caps
    intervals = [(start, end) for r in reports.values() for _, _, start, end in r["admitted"]]
    assert 1 <= _peak(intervals) <= limit
    for tenant in {t for r in reports.values() for _, t, _, _ in r["admitted"]}:
        mine = [(s, e) for r in reports.values() for _, t, s, e in r["admitted"] if t == tenant]
        assert _peak(mine) <= tenant_limit, f"tenant {tenant} over its cap"

    async def check() -> None:
        backend = SQLiteBackend(path)
        view = await backend.admissions.admissions("churn")
        assert view.admitted == () and view.held == (), view
        status = {s.config.name: (s.admitted, s.held) for s in await backend.queues.list_queues()}
        assert status == {"churn": (0, 0), "default": (0, 0), "keep": (limit, 8 - limit)}, status
        await backend.close()

    asyncio.run(check())
