"""The schema: creation, versions, refusal of newer schemas, ordered transactional
migrations, the DBA script, and the CHECK constraints and triggers that make the
database itself refuse an impossible row."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from docket_contract_tests.fixtures import (
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
)
from docket_postgres import (
    MIGRATIONS,
    SCHEMA_VERSION,
    PermanentStoreError,
    PostgresBackend,
    SchemaTooNew,
    SchemaTooOld,
    migration_sql,
    schema_sql,
)
from docket_postgres.schema import Migration, apply_migrations, read_version
from docket_postgres.testing import connect as admin
from docket_postgres.testing import open_backend as opened

from docket.clock import ManualClock
from docket.contract import negotiate
from docket.contract.protocols import Migratable
from docket.records import TENANTLESS, GraphVersion, Run, Tenant

Names = Callable[[str], str]
T0 = datetime(2026, 7, 1, tzinfo=UTC)


async def _catalog(url: str, schema: str) -> list[tuple[Any, ...]]:
    """Everything PostgreSQL knows about a schema's objects, plus its meta rows."""
    conn = await admin(url)
    try:
        cur = await conn.execute(
            "SELECT c.relname, c.relkind, c.relnatts FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "ORDER BY c.relname",
            (schema,),
        )
        objects = await cur.fetchall()
        cur = await conn.execute(
            "SELECT p.proname, md5(replace(p.prosrc, n.nspname, '@')) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s ORDER BY 1",
            (schema,),
        )
        functions = await cur.fetchall()
        meta: list[tuple[Any, ...]] = []
        if any(name == "meta" for name, *_ in objects):
            cur = await conn.execute(
                f'SELECT key, value FROM "{schema}".meta ORDER BY key'.encode()
            )
            meta = await cur.fetchall()
        return [*objects, *functions, *meta]
    finally:
        await conn.close()


def test_the_bundle_negotiates_and_is_migratable(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        backend = await opened(pg_url, schema_name("neg"))
        try:
            caps = negotiate(backend)
            assert caps.name == "postgres"
            assert isinstance(backend, Migratable)
            assert "notify" in caps.features and "durable" in caps.features
            # the test server runs with fsync off: no promise about machine crashes
            assert "durable.fsync" not in caps.features
            assert "claim.fair" not in caps.features
        finally:
            await backend.close()

    asyncio.run(body())


def test_an_empty_schema_is_created_on_open(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("fresh")
        backend = PostgresBackend(pg_url, schema=schema)
        assert await backend.schema_versions() == (None, SCHEMA_VERSION)
        await backend.open()
        await backend.open()  # idempotent
        assert await backend.schema_versions() == (SCHEMA_VERSION, SCHEMA_VERSION)
        await backend.close()
        await backend.close()  # idempotent

    asyncio.run(body())


def test_run_documents_are_compressed_with_lz4_where_the_server_has_it(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("lz4")
        backend = PostgresBackend(pg_url, schema=schema)
        await backend.open()
        await backend.close()
        conn = await admin(pg_url)
        try:
            cur = await conn.execute(
                "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                "WHERE name = 'default_toast_compression'"
            )
            row = await cur.fetchone()
            assert row is not None
            cur = await conn.execute(
                "SELECT a.attcompression FROM pg_attribute a "
                "WHERE a.attrelid = to_regclass(%s) AND a.attname = 'run_json'",
                (f'"{schema}".runs',),
            )
            found = await cur.fetchone()
            assert found is not None
            assert found[0] == ("l" if row[0] else "")
        finally:
            await conn.close()

    asyncio.run(body())


def test_migrate_from_empty_then_no_op(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("mig")
        backend = PostgresBackend(pg_url, schema=schema)
        assert await backend.migrate() == (None, SCHEMA_VERSION)
        before = await _catalog(pg_url, schema)
        assert await backend.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)
        assert await _catalog(pg_url, schema) == before, "a no-op migration changes nothing"
        await backend.open()
        await backend.close()

    asyncio.run(body())


def test_a_newer_schema_is_refused_and_left_unchanged(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("newer")
        backend = await opened(pg_url, schema)
        await backend.close()
        conn = await admin(pg_url)
        await conn.execute(
            f"UPDATE \"{schema}\".meta SET value = '{SCHEMA_VERSION + 1}' "
            "WHERE key = 'schema_version'".encode()
        )
        await conn.close()
        before = await _catalog(pg_url, schema)
        for attempt in (backend.open, backend.migrate):
            with pytest.raises(SchemaTooNew) as caught:
                await attempt()
            assert caught.value.found == SCHEMA_VERSION + 1
            assert "Nothing was changed" in str(caught.value)
            assert not caught.value.retryable
        assert await _catalog(pg_url, schema) == before, "a refused open wrote nothing"
        assert await backend.schema_versions() == (SCHEMA_VERSION + 1, SCHEMA_VERSION)

    asyncio.run(body())


# A make-believe next release adds a column, used to prove the machinery.
_NEXT = SCHEMA_VERSION + 1
_V2: Migration = (_NEXT, ("ALTER TABLE @schema@.runs ADD COLUMN note text",))
_BROKEN_V2: Migration = (
    _NEXT,
    (
        "ALTER TABLE @schema@.runs ADD COLUMN note text",
        "ALTER TABLE @schema@.no_such_table ADD COLUMN x int",
    ),
)


def test_migrations_apply_in_order_and_refuse_older_schemas(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("order")
        conn = await admin(pg_url)
        try:
            got = await apply_migrations(conn, schema, schema, upgrade=False)
            assert got == (None, SCHEMA_VERSION)
            # a release that knows the next version refuses this one without a migrate
            with pytest.raises(SchemaTooOld):
                await apply_migrations(
                    conn, schema, schema, upgrade=False, migrations=(*MIGRATIONS, _V2)
                )
            assert await read_version(conn, schema) == SCHEMA_VERSION
            got = await apply_migrations(
                conn, schema, schema, upgrade=True, migrations=(*MIGRATIONS, _V2)
            )
            assert got == (SCHEMA_VERSION, _NEXT)
            assert await read_version(conn, schema) == _NEXT
            cur = await conn.execute(
                "SELECT 1 FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = 'runs' AND column_name = 'note'",
                (schema,),
            )
            assert await cur.fetchone() is not None
            # and this release refuses the upgraded schema
            with pytest.raises(SchemaTooNew):
                await PostgresBackend(pg_url, schema=schema).open()
        finally:
            await conn.close()

    asyncio.run(body())


def test_a_failing_migration_rolls_back_entirely(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        conn = await admin(pg_url)
        try:
            empty = schema_name("broken")
            with pytest.raises(PermanentStoreError):
                await apply_migrations(
                    conn, empty, empty, upgrade=True, migrations=(*MIGRATIONS, _BROKEN_V2)
                )
            assert await read_version(conn, empty) is None, "not even version 1 remains"
            assert await _catalog(pg_url, empty) == []
            at_one = schema_name("broken")
            await apply_migrations(conn, at_one, at_one, upgrade=False)
            before = await _catalog(pg_url, at_one)
            with pytest.raises(PermanentStoreError):
                await apply_migrations(
                    conn, at_one, at_one, upgrade=True, migrations=(*MIGRATIONS, _BROKEN_V2)
                )
            assert await _catalog(pg_url, at_one) == before, "the half-applied step is undone"
        finally:
            await conn.close()

    asyncio.run(body())


def test_racing_opens_of_an_empty_schema_are_harmless(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("race")
        backends = [PostgresBackend(pg_url, schema=schema) for _ in range(4)]
        await asyncio.gather(*(b.open() for b in backends))
        for backend in backends:
            assert await backend.schema_versions() == (SCHEMA_VERSION, SCHEMA_VERSION)
            await backend.close()

    asyncio.run(body())


def test_the_dba_script_builds_the_same_schema(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        by_backend, by_hand = schema_name("auto"), schema_name("dba")
        await (await opened(pg_url, by_backend)).close()
        script = schema_sql(by_hand)
        assert script == PostgresBackend(pg_url, schema=by_hand).schema_sql()
        assert script.startswith(f'CREATE SCHEMA IF NOT EXISTS "{by_hand}";')
        assert migration_sql(by_hand, 1, 1) == ""
        conn = await admin(pg_url)
        async with conn.transaction():
            await conn.execute(script.encode())
        await conn.close()

        def shape(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
            return [row for row in rows if row[0] != "created_at"]

        assert shape(await _catalog(pg_url, by_hand)) == shape(await _catalog(pg_url, by_backend))
        backend = await opened(pg_url, by_hand)  # the backend accepts what the DBA built
        await backend.close()

    asyncio.run(body())


def test_foreign_or_damaged_schemas_are_refused(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        conn = await admin(pg_url)
        foreign = schema_name("foreign")
        await conn.execute(
            f'CREATE SCHEMA "{foreign}"; CREATE TABLE "{foreign}".runs (x int)'.encode()
        )
        damaged = schema_name("damaged")
        await (await opened(pg_url, damaged)).close()
        await conn.execute(f'DROP TABLE "{damaged}".transitions'.encode())
        await conn.close()
        with pytest.raises(PermanentStoreError, match="no meta table"):
            await PostgresBackend(pg_url, schema=foreign).open()
        with pytest.raises(PermanentStoreError, match="lacks transitions"):
            await PostgresBackend(pg_url, schema=damaged).open()

    asyncio.run(body())


# -- the database refuses impossible rows -----------------------------------------------------

_NOW = "'2026-01-01 00:00:00+00'"
#: (table, assignment) that would store an impossible row.
_BAD_ROWS: dict[str, tuple[str, str]] = {
    "unknown status": ("runs", "status = 'paused'"),
    "unknown checkpoint type": ("runs", "latest_checkpoint_type = 'nap'"),
    "terminal without finished_at": ("runs", "status = 'done'"),
    "finished_at while running": ("runs", f"finished_at = {_NOW}"),
    "ended_at while running": ("runs", f"ended_at = {_NOW}"),
    "checkpoint zero": ("runs", "checkpoint_seq = 0"),
    "negative event_seq": ("runs", "event_seq = -1"),
    "owner changed": ("runs", "tenant = 'someone-else'"),
    "run id changed": ("runs", "run_id = 'other'"),
    "graph hash changed": ("runs", "graph_hash = 'other'"),
    "start time changed": ("runs", f"started_at = {_NOW}"),
    "finished operational state": ("live", "status = 'done', wake_at = NULL"),
    "token without claimed_at": ("live", "claim_token = 'x'"),
    "claimed_at without token": ("live", f"claimed_at = {_NOW}"),
    "empty token": ("live", f"claim_token = '', claimed_at = {_NOW}, wake_at = NULL"),
    "poisoned_at without reason": ("live", f"poisoned_at = {_NOW}, wake_at = NULL"),
    "reason without poisoned_at": ("live", "poison_reason = 'x'"),
    "waiting with a wake": ("live", "status = 'waiting'"),
    "poisoned with a wake": ("live", f"poisoned_at = {_NOW}, poison_reason = 'x'"),
    "running with neither wake nor claim": ("live", "wake_at = NULL"),
    "running with both wake and claim": ("live", f"claim_token = 'x', claimed_at = {_NOW}"),
    "negative attempts": ("live", "claim_attempts = -1"),
    "negative abandons": ("live", "claim_abandons = -1"),
    # a run and its operational state must agree (checked when the write commits)
    "running run without state": ("live", "DELETE"),
    "waiting run, running state": ("runs", "status = 'waiting'"),
    "finished run with state": ("runs", f"status = 'cancelled', finished_at = {_NOW}"),
}


def test_check_constraints_and_triggers_refuse_impossible_rows(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("checks")
        clock = ManualClock(T0)
        backend = await opened(pg_url, schema, clock=clock)
        document = graph_document("g")
        ref = graph_ref(document)
        owner = Tenant("a")
        assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
        run_ = new_run("r1", ref, clock())
        assert isinstance(
            await backend.transitions.initialize(owner, init_proposal(run_, clock()), []), Run
        )
        conn = await admin(pg_url)
        where = "WHERE tenant = 'a' AND run_id = 'r1'"
        try:
            for what, (table, assignment) in _BAD_ROWS.items():
                if assignment == "DELETE":
                    statement = f'DELETE FROM "{schema}".{table} {where}'
                else:
                    statement = f'UPDATE "{schema}".{table} SET {assignment} {where}'
                with pytest.raises(psycopg.errors.IntegrityError):
                    await conn.execute(statement.encode())
                    pytest.fail(f"the database accepted a row with {what}")
            for table, change in (
                ("graphs", "document = document"),
                ("transitions", "digest = 'x'"),
            ):
                with pytest.raises(psycopg.errors.IntegrityError):
                    await conn.execute(f'UPDATE "{schema}".{table} SET {change}'.encode())
            # legal changes are accepted: the constraints are not over-tight
            await conn.execute(
                f"UPDATE \"{schema}\".live SET wake_at = NULL, claim_token = 'x', "
                f"claimed_at = {_NOW} {where}".encode()
            )
            async with conn.transaction():  # finishing a run: both tables, one transaction
                await conn.execute(
                    f"UPDATE \"{schema}\".runs SET status = 'done', finished_at = {_NOW} "
                    f'{where}; DELETE FROM "{schema}".live {where}'.encode()
                )
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_published_events_are_immutable(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("events")
        clock = ManualClock(T0)
        backend = await opened(pg_url, schema, clock=clock)
        document = graph_document("g")
        ref = graph_ref(document)
        assert isinstance(await backend.graphs.save_graph(TENANTLESS, ref, document), GraphVersion)
        run_ = new_run("r1", ref, clock(), event_seq=2)
        got = await backend.transitions.initialize(
            TENANTLESS, init_proposal(run_, clock()), events_for(run_, clock(), [1, 2])
        )
        assert got == run_
        conn = await admin(pg_url)
        try:
            for change in ("seq = seq", "event_json = event_json", "tenant = 'x'"):
                with pytest.raises(psycopg.errors.IntegrityError):
                    await conn.execute(f'UPDATE "{schema}".events SET {change}'.encode())
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())
