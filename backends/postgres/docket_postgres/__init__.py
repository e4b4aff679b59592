"""docket-postgres: the backend for many workers on many machines — PostgreSQL via psycopg 3.

``postgresql://`` and ``postgres://`` URLs are served through the ``docket.backends``
entry point::

    from docket.contract.registry import from_url

    backend = from_url("postgresql://app@db.internal/app?schema=docket")
    await backend.open()        # creates the schema on an empty database, checks it otherwise

Every transition is one PL/pgSQL call (one round trip, one transaction); claims lock
with ``FOR UPDATE SKIP LOCKED`` exactly the runs they return; the database clock is the
one clock; ``LISTEN/NOTIFY`` wakes idle workers and carries the live feed
(``backend.feed``: commit notices sent by a trigger inside each commit, node emissions).
``PostgresBackend.migrate()`` and :func:`schema_sql` are what ``docket migrate`` and DBAs
use. See
``docs/backends/postgres.md``.
"""

from __future__ import annotations

from docket.contract.registry import BackendFactory
from docket_postgres.backend import CLAIM_POLICIES, PostgresBackend, PruneResult, _create
from docket_postgres.errors import (
    PermanentStoreError,
    RetryableStoreError,
    SchemaTooNew,
    SchemaTooOld,
    StoreError,
    classify,
)
from docket_postgres.feed import PostgresFeed
from docket_postgres.schema import MIGRATIONS, SCHEMA_VERSION, migration_sql, schema_sql
from docket_postgres.url import DEFAULT_SCHEMA, parse_url

#: Entry point ``docket.backends: postgres``.
factory = BackendFactory(
    name="postgres",
    schemes=("postgresql", "postgres"),
    create=_create,
    description="PostgreSQL (psycopg 3): many workers on many machines share one database",
)

__all__ = [
    "CLAIM_POLICIES",
    "DEFAULT_SCHEMA",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PermanentStoreError",
    "PostgresBackend",
    "PostgresFeed",
    "PruneResult",
    "RetryableStoreError",
    "SchemaTooNew",
    "SchemaTooOld",
    "StoreError",
    "classify",
    "factory",
    "migration_sql",
    "parse_url",
    "schema_sql",
]
