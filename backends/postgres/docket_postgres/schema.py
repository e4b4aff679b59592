"""The schema, its version, ordered migrations, and the server-side functions.

Conventions of the schema (version 1; version 2 adds the group-commit functions
``commit_runs`` and ``initialize_runs`` and compresses run documents with lz4). All
objects live in one PostgreSQL schema, default ``docket``, chosen per application:

* Owner: ``tenant`` is ``''`` for tenantless rows and the tenant id otherwise. Tenant
  ids are never empty, so ``''`` is unambiguous and the owner can sit in primary keys.
* Every identifier column is ``COLLATE "C"``: ordering is by code point, exactly as
  Python orders strings, so ``(eligible_at, run_id)`` tie-breaks and newest-first
  listings agree with the reference backend whatever the database's locale.
* A run lives in two tables. ``runs`` holds identity, the run document (the canonical
  JSON bytes the shared validator produced, ``bytea``) and the copies of the few
  document fields queries need; commits rewrite it without touching an indexed column
  (HOT updates). ``live`` holds the operational state (wake, claim, counters, poison)
  of the runs that are not finished, and nothing else: claims work on it alone, so
  their cost follows live work, not history. Every function locks a run's ``runs`` row
  before its ``live`` row; claims lock only ``live`` rows.
* CHECK constraints state the operational-tuple invariants (backend-spec §0), and
  deferred constraint triggers keep the two tables in step, so the database refuses an
  impossible row whoever writes it; triggers make run identity (owner included),
  published graphs, events and recorded transitions immutable.
* Each write the contract makes atomic is one PL/pgSQL function (``initialize_run``,
  ``commit_run``, ``claim_due``, ``abandon_claim``, ``retry_poisoned``, ``save_graph``,
  ``prune``), called as one statement in autocommit mode: one round trip, one
  transaction, all or nothing. Several runs' initializations or commits may share one
  statement (group commit), each applied exactly as it would be alone.

The version lives in ``meta`` (key ``schema_version``). :func:`apply_migrations` runs
the missing steps of a migration list in order, in one transaction under an advisory
lock, and refuses a schema from a newer release without changing it.

The statements of each version live in :mod:`docket_postgres._schema`, one module per
version (version 1 split into tables, write functions and claim functions). Later
versions rewrite parts of earlier function bodies, so ``schema.sql`` beside this module
holds what :func:`schema_sql` renders — every statement as it is applied, in order —
and a test fails when the two differ. Regenerate it after changing a migration::

    python -m docket_postgres._schema > backends/postgres/docket_postgres/schema.sql
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg
from psycopg import sql

from docket_postgres._schema import V1, V2, V3, V4, V5, V6, V7, V8, V9, V10, V11
from docket_postgres.errors import (
    PermanentStoreError,
    SchemaTooNew,
    SchemaTooOld,
    StoreError,
    store_error,
)
from docket_postgres.url import check_schema_name

SCHEMA_VERSION: Final = 11
NOTIFY_CHANNEL: Final = "docket_wake"

#: One step of the schema's history: applying ``statements`` to version ``version - 1``
#: yields ``version``. Version 0 is "no docket objects in the schema yet".
Migration = tuple[int, tuple[str, ...]]

#: Ordered migrations of this release.
MIGRATIONS: Final[tuple[Migration, ...]] = (
    (1, V1),
    (2, V2),
    (3, V3),
    (4, V4),
    (5, V5),
    (6, V6),
    (7, V7),
    (8, V8),
    (9, V9),
    (10, V10),
    (11, V11),
)

#: Tables and functions a schema at :data:`SCHEMA_VERSION` must have (the shape check).
REQUIRED_TABLES: Final = (
    "meta",
    "graphs",
    "runs",
    "live",
    "events",
    "transitions",
    "schedules",
    "feed_listeners",
    "queues",
    "queue_slots",
    "queue_admissions",
)
REQUIRED_FUNCTIONS: Final = (
    "save_graph",
    "initialize_run",
    "commit_run",
    "commit_runs",
    "initialize_runs",
    "claim_due",
    "abandon_claim",
    "retry_poisoned",
    "prune",
    "check_live_pair",
    "feed_notice",
    "initialize_queued_run",
    "initialize_queued_runs",
    "admission_admit",
    "admission_finish",
    "admission_drop",
    "queue_bucket",
    "queue_grant",
    "queue_open",
    "queue_acquire",
    "queue_renew",
    "queue_release",
    "claim_with_slots",
)

assert [v for v, _ in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))


def quoted(schema: str) -> str:
    return '"' + check_schema_name(schema) + '"'


def render(statement: str, schema: str) -> str:
    """A DDL template with the schema spliced in (quoted as an identifier)."""
    return statement.replace("@schema@", quoted(schema)).replace("@name@", schema)


def _set_version_sql(schema: str, version: int) -> str:
    return render(
        "INSERT INTO @schema@.meta (key, value) VALUES ('schema_version', "
        f"'{int(version)}') ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        schema,
    )


def migration_sql(
    schema: str,
    from_version: int = 0,
    to_version: int | None = None,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> str:
    """The SQL script that takes ``schema`` from one version to another.

    From version 0 it starts with ``CREATE SCHEMA IF NOT EXISTS``. The script sets the
    recorded version after each step; wrap it in one transaction when you run it.
    """
    top = max((v for v, _ in migrations), default=0)
    target = top if to_version is None else to_version
    if not 0 <= from_version <= target <= top:
        raise ValueError(
            f"versions must satisfy 0 <= from ({from_version}) <= to ({target}) <= {top}"
        )
    parts: list[str] = []
    if from_version == 0 and target > 0:
        parts.append(f"CREATE SCHEMA IF NOT EXISTS {quoted(schema)};")
    for version, statements in migrations:
        if from_version < version <= target:
            parts.append(f"-- docket-postgres schema version {version}")
            parts.extend(render(statement, schema) + ";" for statement in statements)
            parts.append(_set_version_sql(schema, version) + ";")
    return "\n\n".join(parts) + ("\n" if parts else "")


def schema_sql(schema: str = "docket") -> str:
    """The DDL that creates an empty store at the current version (for DBAs who run it)."""
    return migration_sql(schema)


# -- reading the version, checking the shape ----------------------------------------------------


async def read_version(conn: psycopg.AsyncConnection[Any], schema: str) -> int | None:
    """The schema's recorded version; ``None`` when it holds no docket objects at all."""
    check_schema_name(schema)
    try:
        cur = await conn.execute(
            "SELECT to_regclass(%s), "
            "EXISTS (SELECT 1 FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = ANY(%s))",
            (f"{quoted(schema)}.meta", schema, list(REQUIRED_TABLES)),
        )
        row = await cur.fetchone()
        assert row is not None
        if row[0] is None:
            if row[1]:
                raise PermanentStoreError(
                    f"schema {schema!r} has docket-like tables but no meta table, so its "
                    "version is unknown; it was not written by docket-postgres"
                )
            return None
        cur = await conn.execute(
            sql.SQL("SELECT value FROM {}.meta WHERE key = 'schema_version'").format(
                sql.Identifier(schema)
            )
        )
        found = await cur.fetchone()
    except psycopg.Error as exc:
        raise store_error(exc, sent=True, write=False) from exc
    value = found[0] if found is not None else None
    if not isinstance(value, str) or not value.isdigit() or int(value) < 1:
        raise PermanentStoreError(
            f"schema {schema!r} has no readable schema_version in its meta table"
        )
    return int(value)


async def check_shape(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """Refuse a schema that claims the current version but lacks one of its objects."""
    try:
        cur = await conn.execute(
            "SELECT ARRAY(SELECT c.relname::text FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p')), "
            "ARRAY(SELECT p.proname::text FROM pg_catalog.pg_proc p "
            "JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s)",
            (schema, schema),
        )
        row = await cur.fetchone()
    except psycopg.Error as exc:
        raise store_error(exc, sent=True, write=False) from exc
    tables, functions = (set(row[0]), set(row[1])) if row is not None else (set(), set())
    missing = [t for t in REQUIRED_TABLES if t not in tables]
    missing += [f"{f}()" for f in REQUIRED_FUNCTIONS if f not in functions]
    if missing:
        raise PermanentStoreError(
            f"schema {schema!r} claims docket schema version {SCHEMA_VERSION} but lacks "
            f"{', '.join(missing)}"
        )


def refuse(found: int | None, where: str, supported: int, *, older_ok: bool) -> None:
    if found is not None and found > supported:
        raise SchemaTooNew(where, found, supported)
    if not older_ok and found is not None and found < supported:
        raise SchemaTooOld(where, found, supported)


def _lock_key(schema: str) -> str:
    return f"docket:migrate:{schema}"


async def apply_migrations(
    conn: psycopg.AsyncConnection[Any],
    schema: str,
    where: str,
    *,
    upgrade: bool,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> tuple[int | None, int]:
    """Bring ``schema`` to the newest version of ``migrations`` in one transaction.

    Takes a transaction-scoped advisory lock named after the schema first and reads the
    version under it, so two processes racing to create or upgrade the same schema are
    harmless. With ``upgrade=False`` only an empty schema (no docket objects) is
    created; an older version raises :class:`SchemaTooOld`. A newer version raises
    :class:`SchemaTooNew`. Any failure rolls the whole migration back.
    """
    top = max((v for v, _ in migrations), default=0)
    try:
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (_lock_key(schema),)
            )
            found = await read_version(conn, schema)
            refuse(found, where, top, older_ok=upgrade)
            start = found or 0
            if start == 0:
                await conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema))
                )
            for version, statements in migrations:
                if version <= start:
                    continue
                script = [render(statement, schema) for statement in statements]
                script.append(_set_version_sql(schema, version))
                # one round trip per step (simple query protocol: no parameters)
                await conn.execute(";\n".join(script).encode())
            if start == 0:
                await conn.execute(
                    render(
                        "INSERT INTO @schema@.meta (key, value) "
                        "VALUES ('created_at', clock_timestamp()::text) ON CONFLICT DO NOTHING",
                        schema,
                    ).encode()
                )
    except StoreError:
        raise
    except psycopg.Error as exc:
        raise store_error(exc, sent=True, write=True) from exc
    return found, top


__all__ = [
    "MIGRATIONS",
    "NOTIFY_CHANNEL",
    "REQUIRED_FUNCTIONS",
    "REQUIRED_TABLES",
    "SCHEMA_VERSION",
    "Migration",
    "apply_migrations",
    "check_shape",
    "migration_sql",
    "quoted",
    "read_version",
    "refuse",
    "render",
    "schema_sql",
]
