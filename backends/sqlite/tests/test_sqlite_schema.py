"""Schema versions and migrations, the constraints the file enforces, query plans, pragmas."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from docket_contract_tests.fixtures import (
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
)
from docket_sqlite import (
    SCHEMA_VERSION,
    PermanentStoreError,
    SchemaTooNew,
    SQLiteBackend,
    migrate,
    schema_sql,
)
from docket_sqlite._claims import EXPIRED as _EXPIRED
from docket_sqlite._claims import READY as _READY
from docket_sqlite._runs import list_runs_sql

from docket.clock import ManualClock
from docket.contract import (
    ClaimPolicy,
    Permanent,
    RunListQuery,
)
from docket.records import (
    SYSTEM,
    TENANTLESS,
    OwnerScope,
    Run,
    RunCursor,
    RunStatus,
    Scope,
    Tenant,
)

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)


async def _seed(backend: SQLiteBackend, owner: OwnerScope, run_id: str, events: int = 0) -> Run:
    document = graph_document("g")
    ref = graph_ref(document)
    await backend.graphs.save_graph(owner, ref, document)
    run = new_run(run_id, ref, T0, event_seq=events)
    got = await backend.transitions.initialize(
        owner, init_proposal(run, T0), events_for(run, T0, range(1, events + 1))
    )
    assert got == run
    return run


def _make_file(path: Path, runs: int = 1) -> None:
    async def body() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        await backend.open()
        for index in range(runs):
            await _seed(backend, TENANTLESS, f"run-{index}", events=2)
        await backend.close()

    asyncio.run(body())


def _raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _objects(path: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY name"
        ).fetchall()
    finally:
        conn.close()
    return [(str(t), str(n), str(s)) for t, n, s in rows]


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


# -- versions and migrations --------------------------------------------------------------------


def test_a_fresh_file_is_created_at_the_current_version(tmp_path: Path) -> None:
    path = tmp_path / "new" / "app.db"
    path.parent.mkdir()
    _make_file(path)
    conn = _raw(path)
    try:
        version = conn.execute(
            "SELECT value FROM docket_meta WHERE key = 'schema_version'"
        ).fetchone()
        assert version == (str(SCHEMA_VERSION),)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


def test_migrate_creates_then_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    assert migrate(path) == (0, SCHEMA_VERSION)
    first = _objects(path)
    assert {name for _, name, _ in first} >= {
        "docket_meta",
        "docket_graphs",
        "docket_runs",
        "docket_events",
        "docket_transitions",
        "docket_runs_due",
        "docket_runs_claimed",
        "docket_runs_by_owner",
    }
    assert migrate(path) == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert migrate(f"sqlite:///{path}") == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert _objects(path) == first, "a second migration changes nothing"
    _make_file(path)  # the backend accepts a migrated file as it is
    assert _objects(path) == first


def test_schema_sql_is_what_migrate_applies(tmp_path: Path) -> None:
    scripted = tmp_path / "scripted.db"
    conn = sqlite3.connect(scripted)
    conn.executescript(schema_sql())
    conn.close()
    migrated = tmp_path / "migrated.db"
    migrate(migrated)
    assert _objects(scripted) == _objects(migrated)
    assert "CREATE TABLE docket_runs" in schema_sql()
    assert schema_sql(SCHEMA_VERSION) == ""
    with pytest.raises(ValueError):
        schema_sql(SCHEMA_VERSION + 1)
    with pytest.raises(ValueError):
        schema_sql(-1)


def test_a_newer_schema_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    _make_file(path)
    conn = _raw(path)
    conn.execute("UPDATE docket_meta SET value = ? WHERE key = 'schema_version'", ("7",))
    conn.close()
    before = _files(tmp_path)

    async def body() -> None:
        backend = SQLiteBackend(path)
        with pytest.raises(SchemaTooNew) as caught:
            await backend.open()
        message = str(caught.value)
        assert "version 7" in message and f"up to {SCHEMA_VERSION}" in message
        assert "docket migrate" in message
        assert caught.value.found == 7 and caught.value.supported == SCHEMA_VERSION
        # operations open lazily and fail the same way, typed, without writing
        with pytest.raises(SchemaTooNew):
            await backend.runs.fetch_run(TENANTLESS, "run-0")
        document = graph_document("g")
        run = new_run("other", graph_ref(document), T0)
        got = await backend.transitions.initialize(TENANTLESS, init_proposal(run, T0), [])
        assert isinstance(got, Permanent) and "version 7" in got.reason
        claim = await backend.runs.claim_due(
            ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=60), max_claim_attempts=3)
        )
        assert isinstance(claim, Permanent)
        await backend.close()

    asyncio.run(body())
    with pytest.raises(SchemaTooNew):
        migrate(path)
    assert _files(tmp_path) == before, "the file (and its directory) is byte-for-byte unchanged"


def test_a_file_with_docket_tables_but_no_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "foreign.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE docket_runs (id INTEGER)")
    conn.close()
    before = _files(tmp_path)
    with pytest.raises(PermanentStoreError, match="no docket_meta"):
        asyncio.run(SQLiteBackend(path).open())
    assert _files(tmp_path) == before


@pytest.mark.parametrize("value", ["0", "two", ""])
def test_an_unreadable_version_is_refused(tmp_path: Path, value: str) -> None:
    path = tmp_path / "damaged.db"
    _make_file(path)
    conn = _raw(path)
    conn.execute("UPDATE docket_meta SET value = ? WHERE key = 'schema_version'", (value,))
    conn.close()
    before = _files(tmp_path)
    with pytest.raises(PermanentStoreError, match="no readable schema_version"):
        asyncio.run(SQLiteBackend(path).open())
    with pytest.raises(PermanentStoreError, match="no readable schema_version"):
        migrate(path)
    assert _files(tmp_path) == before


def test_unrelated_tables_are_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE app_users (name TEXT)")
    conn.execute("INSERT INTO app_users VALUES ('ada')")
    conn.commit()
    conn.close()
    _make_file(path)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT name FROM app_users").fetchall() == [("ada",)]
    conn.close()


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before = _files(tmp_path)
    with pytest.raises(PermanentStoreError, match=r"NOTADB|not a database"):
        asyncio.run(SQLiteBackend(path).open())
    assert _files(tmp_path) == before


def test_two_backends_racing_to_create_a_file_both_succeed(tmp_path: Path) -> None:
    path = tmp_path / "race.db"

    async def body() -> None:
        backends = [SQLiteBackend(path) for _ in range(4)]
        await asyncio.gather(*(b.open() for b in backends))
        settings = await asyncio.gather(*(b.settings() for b in backends))
        assert {s.schema_version for s in settings} == {SCHEMA_VERSION}
        for backend in backends:
            await backend.close()

    asyncio.run(body())


# -- the file refuses impossible rows -------------------------------------------------------------

IMPOSSIBLE_UPDATES: dict[str, str] = {
    "token-without-claimed-at": "claim_token = 'tok'",
    "wake-and-claim-together": "claim_token = 'tok', claimed_at_us = 1",
    "neither-wake-nor-claim": "wake_at_us = NULL",
    "poison-without-reason": "poisoned_at_us = 1, wake_at_us = NULL",
    "poisoned-with-a-wake": "poisoned_at_us = 1, poison_reason = 'x'",
    "poisoned-with-a-claim": (
        "poisoned_at_us = 1, poison_reason = 'x', wake_at_us = NULL, "
        "claim_token = 'tok', claimed_at_us = 1"
    ),
    # version 3: a waiting run may have a wake (a deadline) or a claim, never both
    "waiting-with-a-wake-and-a-claim": (
        "status = 'waiting', claim_token = 'tok', claimed_at_us = 1"
    ),
    "terminal-without-finished-at": "status = 'done', wake_at_us = NULL",
    "finished-at-while-running": "finished_at_us = 1",
    "created-is-not-stored": "status = 'created'",
    "unknown-checkpoint-type": "latest_checkpoint_type = 'nope'",
    "negative-attempts": "claim_attempts = -1",
    "negative-abandons": "claim_abandons = -1",
    "checkpoint-zero": "checkpoint_seq = 0",
    "empty-token": "claim_token = '', claimed_at_us = 1, wake_at_us = NULL",
    "text-in-an-integer-column": "step = 'many'",
    "owner-changes": "tenant = 'someone-else'",
    "start-time-changes": "started_at_us = started_at_us + 1",
    "graph-changes": "graph_hash = 'other'",
}


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    path = tmp_path / "checks.db"
    _make_file(path)
    conn = _raw(path)
    yield conn
    conn.close()


@pytest.mark.parametrize("case", sorted(IMPOSSIBLE_UPDATES))
def test_check_constraints_refuse_impossible_runs(seeded: sqlite3.Connection, case: str) -> None:
    before = seeded.execute("SELECT * FROM docket_runs").fetchall()
    with pytest.raises(sqlite3.IntegrityError):
        seeded.execute(f"UPDATE docket_runs SET {IMPOSSIBLE_UPDATES[case]} WHERE run_id = 'run-0'")
    assert seeded.execute("SELECT * FROM docket_runs").fetchall() == before


def test_possible_operational_states_are_accepted(seeded: sqlite3.Connection) -> None:
    """The constraints are not stricter than the contract: each legal state fits."""
    for assignment in (
        "wake_at_us = NULL, claim_token = 'tok', claimed_at_us = 5",  # claimed
        "claim_token = NULL, claimed_at_us = NULL, poisoned_at_us = 9, poison_reason = 'p'",
        "poisoned_at_us = NULL, poison_reason = NULL, status = 'waiting'",  # parked
        "wake_at_us = 7",  # waiting until a deadline (version 3)
        "wake_at_us = NULL, claim_token = 'tok', claimed_at_us = 8",  # ... claimed at it
        "claim_token = NULL, claimed_at_us = NULL, poisoned_at_us = 9, poison_reason = 'p'",
        "poisoned_at_us = NULL, poison_reason = NULL",  # waiting for a person again
        "status = 'failed', finished_at_us = 10",  # terminal
    ):
        seeded.execute(f"UPDATE docket_runs SET {assignment} WHERE run_id = 'run-0'")


def test_events_graphs_and_transitions_are_immutable(seeded: sqlite3.Connection) -> None:
    for statement in (
        "UPDATE docket_events SET event_json = x'00' WHERE seq = 1",
        "UPDATE docket_graphs SET document = x'00'",
        "UPDATE docket_transitions SET digest = 'forged'",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="never changes"):
            seeded.execute(statement)


def test_foreign_keys_refuse_orphans(seeded: sqlite3.Connection) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        seeded.execute(
            "INSERT INTO docket_events (tenant, run_id, seq, event_json, content_sha256) "
            "VALUES ('', 'ghost', 1, x'7b7d', zeroblob(32))"
        )
    row = seeded.execute("SELECT * FROM docket_runs WHERE run_id = 'run-0'").fetchone()
    columns = [d[1] for d in seeded.execute("PRAGMA table_info(docket_runs)").fetchall()]
    values = dict(zip(columns, row, strict=True))
    values.update(run_id="copy", graph_hash="unpublished")
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        seeded.execute(
            f"INSERT INTO docket_runs ({', '.join(values)}) "
            f"VALUES ({', '.join('?' * len(values))})",
            list(values.values()),
        )
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        seeded.execute(
            "INSERT INTO docket_events (tenant, run_id, seq, event_json, content_sha256) "
            "VALUES ('', 'run-0', 0, x'7b7d', zeroblob(32))"
        )


# -- indexes carry the claim and list queries --------------------------------------------------


def _plan(conn: sqlite3.Connection, sql: str, params: list[object] | tuple[object, ...]) -> str:
    return " | ".join(str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params))


def test_claim_and_list_queries_use_their_indexes(tmp_path: Path) -> None:
    path = tmp_path / "plans.db"
    _make_file(path, runs=40)
    conn = _raw(path)
    try:
        conn.execute("ANALYZE")
        # schema 5: a claim reads each class by (queue, priority) pair, one seek a step
        for statements, index in ((_READY, "docket_runs_due"), (_EXPIRED, "docket_runs_claimed")):
            for sql, params, seeks in (
                (statements.rows, ("default", 0, 1, 5), True),
                (statements.queue_below, ("default",), True),
                (statements.priority_below, ("default", 101), True),
                # the index's first and last entries: ordered reads stopped by LIMIT 1
                (statements.span, (), False),
                (statements.queue_span, ("default",), True),
            ):
                plan = _plan(conn, sql, params)
                assert f"INDEX {index}" in plan and "TEMP B-TREE" not in plan, plan
                assert plan.count(f"INDEX {index}") == (2 if "UNION" in plan else 1), plan
                assert not seeks or "SCAN docket_runs" not in plan, plan
        cursor = RunCursor(T0, "run-9")
        cases: dict[str, tuple[Scope, RunListQuery]] = {
            "docket_runs_by_owner": (Tenant("a"), RunListQuery(limit=10)),
            "docket_runs_by_owner (tenant=? AND (started_at_us,run_id)<(?,?))": (
                TENANTLESS,
                RunListQuery(limit=10, before=cursor),
            ),
            "docket_runs_by_start": (SYSTEM, RunListQuery(limit=10)),
            "docket_runs_by_start ((started_at_us,run_id)<(?,?))": (
                SYSTEM,
                RunListQuery(limit=10, before=cursor),
            ),
            "docket_runs_by_graph": (
                Tenant("a"),
                RunListQuery(limit=10, graph_id="g", statuses=frozenset({RunStatus.RUNNING})),
            ),
        }
        for index, (scope, query) in cases.items():
            plan = _plan(conn, *list_runs_sql(scope, query))
            assert f"USING INDEX {index}" in plan, plan
            assert "TEMP B-TREE" not in plan, f"list_runs sorts in memory: {plan}"
    finally:
        conn.close()


# -- durability settings ------------------------------------------------------------------------


def test_durability_settings_are_reported(tmp_path: Path) -> None:
    async def body() -> None:
        full = SQLiteBackend(tmp_path / "full.db")
        settings = await full.settings()
        assert (settings.journal_mode, settings.synchronous) == ("wal", "FULL")
        assert settings.foreign_keys is True
        assert settings.busy_timeout == 5.0
        assert settings.schema_version == SCHEMA_VERSION
        assert settings.path == str(tmp_path / "full.db")
        await full.close()
        normal = SQLiteBackend(tmp_path / "normal.db", synchronous="NORMAL", busy_timeout=1.5)
        settings = await normal.settings()
        assert (settings.journal_mode, settings.synchronous) == ("wal", "NORMAL")
        assert settings.busy_timeout == 1.5
        await normal.close()
        memory = SQLiteBackend(":memory:")
        settings = await memory.settings()
        assert settings.journal_mode == "memory" and settings.path == ":memory:"
        await memory.close()

    asyncio.run(body())
