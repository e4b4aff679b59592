"""The optional abilities the CLI's ``migrate`` and ``backup`` use, on the SQLite backend."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from docket_sqlite import SCHEMA_VERSION, SQLiteBackend

from docket import Docket
from tests.core import fixtures as fx


def test_schema_versions_migrate_and_schema_sql(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "app.db"
        backend = SQLiteBackend(path)
        assert await backend.schema_versions() == (None, SCHEMA_VERSION)
        assert not path.exists()  # looking changed nothing
        assert await backend.migrate() == (None, SCHEMA_VERSION)
        assert await backend.schema_versions() == (SCHEMA_VERSION, SCHEMA_VERSION)
        assert await backend.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)
        assert "CREATE TABLE docket_runs" in backend.schema_sql()
        await backend.close()
        memory = SQLiteBackend(":memory:")
        assert await memory.schema_versions() == (None, SCHEMA_VERSION)
        with pytest.raises(ValueError):
            await memory.migrate()

    asyncio.run(scenario())


def test_a_backup_is_a_consistent_copy_taken_while_the_docket_is_open(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Docket(f"sqlite:///{tmp_path / 'app.db'}", nodes=fx.NODES) as docket:
            ref = await docket.save_graph(fx.minimal_linear())
            await docket.start_run(ref, {"value": "v"}, run_id="r")
            await docket.drain_due()
            backend = docket.backend
            assert isinstance(backend, SQLiteBackend)
            await backend.backup(tmp_path / "copy.db")
        with sqlite3.connect(tmp_path / "copy.db") as conn:
            assert conn.execute("SELECT status FROM docket_runs").fetchall() == [("done",)]

    asyncio.run(scenario())
