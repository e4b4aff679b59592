"""docket-sqlite: the embedded default backend — one SQLite file in WAL mode, no server.

``sqlite:///path.db`` (relative), ``sqlite:////abs/path.db`` (absolute) and
``sqlite:///:memory:`` are served through the ``docket.backends`` entry point::

    from docket.contract.registry import from_url

    backend = from_url("sqlite:///app.db")          # synchronous=FULL, busy_timeout=5 s
    await backend.open()                            # creates the file and its schema

Several worker processes may share one file on a local disk; every write is one
``BEGIN IMMEDIATE`` transaction. :func:`migrate` and :func:`schema_sql` are what a
``docket migrate`` command calls. See ``docs/backends/sqlite.md``.
"""

from __future__ import annotations

from docket.contract.registry import BackendFactory
from docket_sqlite.backend import SQLiteBackend, SQLiteSettings, _create
from docket_sqlite.errors import (
    PermanentStoreError,
    RetryableStoreError,
    SchemaTooNew,
    SchemaTooOld,
    StoreError,
)
from docket_sqlite.schema import MIGRATIONS, SCHEMA_VERSION, migrate, schema_sql
from docket_sqlite.url import Target, parse_url

#: Entry point ``docket.backends: sqlite``.
factory = BackendFactory(
    name="sqlite",
    schemes=("sqlite",),
    create=_create,
    description="embedded SQLite file (WAL); several local worker processes may share it",
)

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PermanentStoreError",
    "RetryableStoreError",
    "SQLiteBackend",
    "SQLiteSettings",
    "SchemaTooNew",
    "SchemaTooOld",
    "StoreError",
    "Target",
    "factory",
    "migrate",
    "parse_url",
    "schema_sql",
]
