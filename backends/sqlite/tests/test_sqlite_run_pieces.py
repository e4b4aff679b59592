"""Long run documents stored in pieces (schema version 2), and the migration from version 1.

A document longer than ``RUN_PIECE_BYTES`` is cut into pieces: the first in
``docket_runs.run_json``, the rest in ``docket_run_parts``. These tests check that every
read gives back the exact bytes the validator produced, that a commit rewrites only the
pieces that changed, that the file refuses inconsistent pieces, and that a version 1 file
is upgraded in place.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from docket_contract_tests.fixtures import (
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)
from docket_sqlite import SCHEMA_VERSION, SchemaTooOld, SQLiteBackend, migrate, schema_sql
from docket_sqlite.schema import RUN_PIECE_BYTES

from docket.clock import ManualClock
from docket.contract import Permanent
from docket.records import TENANTLESS, RecordDecodeError, Run, RunInfo, run_to_json

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
MESSAGE = "m" * 1000


def _with_log(run: Run, messages: int, at: datetime) -> Run:
    """The next checkpoint of ``run``, its metadata holding ``messages`` 1 KB messages."""
    return successor(run, at, metadata={"log": [MESSAGE] * messages})


def _stored_bytes(path: Path, run_id: str) -> tuple[bytes, int, int]:
    """``(document, run_parts, part rows)`` read straight from the file."""
    conn = sqlite3.connect(path)
    try:
        head, parts = conn.execute(
            "SELECT run_json, run_parts FROM docket_runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        rows = conn.execute(
            "SELECT data FROM docket_run_parts WHERE run_id = ? ORDER BY part", (run_id,)
        ).fetchall()
    finally:
        conn.close()
    return bytes(head) + b"".join(bytes(r[0]) for r in rows), int(parts), len(rows)


async def _start(backend: SQLiteBackend, run_id: str) -> Run:
    document = graph_document("g")
    ref = graph_ref(document)
    await backend.graphs.save_graph(TENANTLESS, ref, document)
    run = new_run(run_id, ref, T0)
    assert await backend.transitions.initialize(TENANTLESS, init_proposal(run, T0), []) == run
    return run


async def _commit(backend: SQLiteBackend, run: Run, transition_id: str | None = None) -> Run:
    proposal = unclaimed(run, transition_id=transition_id)
    got = await backend.transitions.commit_unclaimed(
        TENANTLESS, run.checkpoint_seq - 1, proposal, []
    )
    assert got == run
    return run


def test_documents_growing_and_shrinking_read_back_byte_identical(tmp_path: Path) -> None:
    path = tmp_path / "pieces.db"

    async def body() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        run = await _start(backend, "chat")
        # across piece boundaries upwards, down to fewer pieces, to none, and up again
        for step, messages in enumerate((3, 20, 45, 60, 9, 0, 33, 34), 1):
            run = await _commit(backend, _with_log(run, messages, T0 + timedelta(seconds=step)))
            expected = run_to_json(run)
            stored, parts, rows = _stored_bytes(path, "chat")
            assert stored == expected, f"step {step}: the pieces are not the document"
            pieces = -(-len(expected) // RUN_PIECE_BYTES) - 1
            assert (parts, rows) == (pieces, pieces), f"step {step}: {len(expected)} bytes"
            fetched = await backend.runs.fetch_run(TENANTLESS, "chat")
            assert isinstance(fetched, Run) and run_to_json(fetched) == expected
            info = await backend.runs.inspect_run(TENANTLESS, "chat")
            assert isinstance(info, RunInfo) and run_to_json(info.run) == expected
        assert parts > 3, "the last document spans several pieces"
        # a replay of the last commit answers the stored (multi-piece) document
        nxt = _with_log(run, 50, T0 + timedelta(minutes=5))
        await _commit(backend, nxt, transition_id="replayed")
        again = await backend.transitions.commit_unclaimed(
            TENANTLESS,
            nxt.checkpoint_seq - 1,
            unclaimed(nxt, transition_id="replayed"),
            [],
        )
        assert isinstance(again, Run) and run_to_json(again) == run_to_json(nxt)
        assert again is not nxt, "a replay answers the stored document, decoded"
        await backend.close()
        # and after a restart, from the file alone
        reopened = SQLiteBackend(path)
        fetched = await reopened.runs.fetch_run(TENANTLESS, "chat")
        assert isinstance(fetched, Run) and run_to_json(fetched) == run_to_json(nxt)
        await reopened.close()

    asyncio.run(body())


def test_an_append_rewrites_only_the_pieces_that_changed(tmp_path: Path) -> None:
    path = tmp_path / "append.db"

    async def grow() -> Run:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        run = await _start(backend, "chat")
        run = await _commit(backend, _with_log(run, 80, T0 + timedelta(seconds=1)))
        await backend.close()
        return run

    run = asyncio.run(grow())
    conn = sqlite3.connect(path, isolation_level=None)
    # a real trigger in the file records every piece the backend inserts or updates
    conn.execute("CREATE TABLE piece_log (part INTEGER NOT NULL)")
    for when in ("INSERT", "UPDATE"):
        conn.execute(
            f"CREATE TRIGGER piece_log_{when.lower()} AFTER {when} ON docket_run_parts "
            "BEGIN INSERT INTO piece_log (part) VALUES (NEW.part); END"
        )
    conn.close()

    async def append() -> Run:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        nxt = await _commit(backend, _with_log(run, 81, T0 + timedelta(seconds=2)))
        await backend.close()
        return nxt

    nxt = asyncio.run(append())
    conn = sqlite3.connect(path)
    written = [int(r[0]) for r in conn.execute("SELECT part FROM piece_log ORDER BY part")]
    conn.close()
    stored, parts, _ = _stored_bytes(path, "chat")
    assert stored == run_to_json(nxt)
    assert parts >= 9, f"the document spans {parts + 1} pieces"
    # the message lands near the end: only the last pieces (and a new one) are written
    assert 1 <= len(written) <= 3, f"pieces written: {written} of {parts}"
    assert min(written) >= parts - 2, f"pieces written: {written} of {parts}"


def test_inconsistent_pieces_are_refused_by_the_file_and_on_read(tmp_path: Path) -> None:
    path = tmp_path / "broken.db"

    async def make() -> Run:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        run = await _start(backend, "long")
        grown = _with_log(run, 30, T0 + timedelta(seconds=1))
        await _commit(backend, grown, transition_id="grow")
        short = await _start(backend, "short")
        assert len(run_to_json(short)) < RUN_PIECE_BYTES
        await backend.close()
        return grown

    grown = asyncio.run(make())
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    before = conn.execute("SELECT * FROM docket_run_parts ORDER BY run_id, part").fetchall()
    for statement in (
        "UPDATE docket_runs SET run_parts = 1 WHERE run_id = 'short'",  # first piece not full
        "UPDATE docket_runs SET run_parts = -1 WHERE run_id = 'short'",
        "UPDATE docket_run_parts SET data = x'' WHERE run_id = 'long' AND part = 1",
        "UPDATE docket_run_parts SET part = 0 WHERE run_id = 'long' AND part = 1",
        "INSERT INTO docket_run_parts VALUES ('', 'ghost', 1, x'7b')",  # no such run
        f"UPDATE docket_run_parts SET data = zeroblob({RUN_PIECE_BYTES + 1}) WHERE part = 1",
    ):
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(statement)
    assert conn.execute("SELECT * FROM docket_run_parts ORDER BY run_id, part").fetchall() == (
        before
    )
    # a lost piece (deleting rows is not something the constraints can refuse) is a typed
    # decode error, never a silently shortened document
    conn.execute("DELETE FROM docket_run_parts WHERE run_id = 'long' AND part = 2")
    conn.close()

    async def read() -> None:
        backend = SQLiteBackend(path)
        with pytest.raises(RecordDecodeError, match="lacks some of its"):
            await backend.runs.fetch_run(TENANTLESS, "long")
        with pytest.raises(RecordDecodeError, match="lacks some of its"):
            await backend.runs.inspect_run(TENANTLESS, "long")
        replay = await backend.transitions.commit_unclaimed(
            TENANTLESS, grown.checkpoint_seq - 1, unclaimed(grown, transition_id="grow"), []
        )
        assert isinstance(replay, Permanent) and "lacks some of its" in replay.reason
        assert isinstance(await backend.runs.fetch_run(TENANTLESS, "short"), Run)
        await backend.close()

    asyncio.run(read())


def _downgrade_to_version_1(source: Path, target: Path) -> None:
    """A copy of ``source`` as release 1 would have written it (every document whole)."""
    conn = sqlite3.connect(target, isolation_level=None)
    conn.executescript(schema_sql(0, 1))
    conn.execute("ATTACH DATABASE ? AS src", (str(source),))
    assert conn.execute("SELECT count(*) FROM src.docket_run_parts").fetchone() == (0,)
    for table in ("docket_graphs", "docket_runs", "docket_events", "docket_transitions"):
        columns = [str(r[1]) for r in conn.execute(f"PRAGMA main.table_info({table})")]
        names = ", ".join(columns)
        conn.execute(f"INSERT INTO main.{table} ({names}) SELECT {names} FROM src.{table}")
    conn.execute("DETACH DATABASE src")
    conn.close()


def test_a_version_1_file_is_refused_then_migrated_in_place(tmp_path: Path) -> None:
    current = tmp_path / "current.db"
    old = tmp_path / "old.db"

    async def make() -> Run:
        backend = SQLiteBackend(current, clock=ManualClock(T0))
        run = await _start(backend, "r1")
        await backend.close()
        return run

    run = asyncio.run(make())
    _downgrade_to_version_1(current, old)

    async def refused() -> None:
        backend = SQLiteBackend(old)
        with pytest.raises(SchemaTooOld):
            await backend.open()
        await backend.close()

    asyncio.run(refused())
    assert migrate(old) == (1, SCHEMA_VERSION)
    fresh = tmp_path / "fresh.db"
    migrate(fresh)
    conn = sqlite3.connect(old)
    objects = conn.execute(
        "SELECT type, name, sql FROM sqlite_schema WHERE name LIKE 'docket%' ORDER BY name"
    ).fetchall()
    assert conn.execute("SELECT run_parts FROM docket_runs").fetchall() == [(0,)]
    conn.close()
    conn = sqlite3.connect(fresh)
    assert (
        objects
        == conn.execute(
            "SELECT type, name, sql FROM sqlite_schema WHERE name LIKE 'docket%' ORDER BY name"
        ).fetchall()
    ), "an upgraded file has exactly the schema of a new one"
    conn.close()

    async def use() -> None:
        backend = SQLiteBackend(old, clock=ManualClock(T0))
        assert await backend.runs.fetch_run(TENANTLESS, "r1") == run
        longer = await _commit(backend, _with_log(run, 40, T0 + timedelta(seconds=1)))
        fetched = await backend.runs.fetch_run(TENANTLESS, "r1")
        assert isinstance(fetched, Run) and run_to_json(fetched) == run_to_json(longer)
        await backend.close()

    asyncio.run(use())
