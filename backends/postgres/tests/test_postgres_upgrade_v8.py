"""The upgrade from schema version 7 to 8 (the live feed): a version 7 store is refused
until ``docket migrate``; migrating keeps every run, yields exactly the objects of a
store created at version 8 (tables, triggers, function bodies), the feed then notices
the old runs' commits; and the DBA script does the same."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest
from docket_contract_tests.fixtures import (
    claimed,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_postgres import MIGRATIONS, SCHEMA_VERSION, PostgresBackend, SchemaTooOld
from docket_postgres import _engine as engine_module
from docket_postgres import schema as schema_module
from docket_postgres.schema import apply_migrations, migration_sql
from docket_postgres.testing import connect as admin
from docket_postgres.testing import open_backend as opened
from docket_postgres.testing import schema_catalog as _catalog

from docket.contract import ClaimBatch, ClaimPolicy, Feature, ReleaseClaim, Terminal
from docket.records import (
    CheckpointType,
    CommitNotice,
    GraphVersion,
    Run,
    RunInfo,
    RunStatus,
    Tenant,
)

Names = Callable[[str], str]
PREVIOUS = 7
# what versions 8, 9 and 10 add to the shape check
LATER_TABLES = ("feed_listeners", "queues", "queue_slots", "queue_admissions")
LATER_FUNCTIONS = (
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
POLICY = ClaimPolicy(limit=10, orphan_ttl=timedelta(hours=1), max_claim_attempts=5)


async def _previous_store(url: str, schema: str) -> None:
    conn = await admin(url)
    try:
        got = await apply_migrations(
            conn, schema, schema, upgrade=False, migrations=MIGRATIONS[:PREVIOUS]
        )
        assert got == (None, PREVIOUS)
    finally:
        await conn.close()


async def _seed_at_previous(
    url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, tuple[Run, str]]:
    """Two runs written by this release's code on a version 7 store, claimed."""
    with monkeypatch.context() as patched:
        patched.setattr(engine_module, "SCHEMA_VERSION", PREVIOUS)
        patched.setattr(
            schema_module,
            "REQUIRED_TABLES",
            tuple(t for t in schema_module.REQUIRED_TABLES if t not in LATER_TABLES),
        )
        patched.setattr(
            schema_module,
            "REQUIRED_FUNCTIONS",
            tuple(f for f in schema_module.REQUIRED_FUNCTIONS if f not in LATER_FUNCTIONS),
        )
        backend = await opened(url, schema)
        try:
            document = graph_document("g")
            ref = graph_ref(document)
            owner = Tenant("a")
            assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
            now = await backend.now()
            runs = {}
            for run_id in ("old", "held"):
                fresh = new_run(run_id, ref, now)
                got = await backend.transitions.initialize(owner, init_proposal(fresh, now), [])
                assert got == fresh
                runs[run_id] = fresh
            batch = await backend.runs.claim_due(POLICY)
            assert isinstance(batch, ClaimBatch) and len(batch.leases) == 2
            return {x.run_id: (runs[x.run_id], x.claim_token) for x in batch.leases}
        finally:
            await backend.close()


def test_a_version_7_store_is_refused_then_migrated_and_noticed(
    pg_url: str, schema_name: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SCHEMA_VERSION >= PREVIOUS + 1  # later versions keep what it checks (see v9's test)

    async def body() -> None:
        schema = schema_name("up8")
        await _previous_store(pg_url, schema)
        seeded = await _seed_at_previous(pg_url, schema, monkeypatch)
        with pytest.raises(SchemaTooOld):
            await opened(pg_url, schema)
        backend = PostgresBackend(pg_url, schema=schema)
        try:
            assert await backend.migrate() == (PREVIOUS, SCHEMA_VERSION)
            assert await backend.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)
            assert Feature.STREAMS in backend.capabilities().features
            owner = Tenant("a")
            info = await backend.runs.inspect_run(owner, "held")
            assert isinstance(info, RunInfo) and info.claimed and info.run == seeded["held"][0]
            # the old claim still commits, and the feed notices it
            sub = await backend.feed.subscribe(owner)
            run, token = seeded["old"]
            done = successor(run, await backend.now(), status=RunStatus.DONE)
            proposal = claimed(
                done,
                token,
                schedule=ReleaseClaim(Terminal()),
                checkpoint_type=CheckpointType.RUN_COMPLETED,
            )
            assert await backend.transitions.commit_claimed(owner, proposal, []) == done
            items = list(await sub.get(10.0))
            while not items:
                items.extend(await sub.get(10.0))
            assert items == [
                CommitNotice(tenant_id="a", run_id="old", graph_id="g", first_seq=1, last_seq=0)
            ]
            await sub.close()
        finally:
            await backend.close()
        fresh = schema_name("fresh8")
        await (await opened(pg_url, fresh)).close()
        assert await _catalog(pg_url, schema) == await _catalog(pg_url, fresh)

    asyncio.run(body())


def test_the_dba_script_upgrades_a_version_7_store_to_the_same_objects(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("dba8")
        await _previous_store(pg_url, schema)
        conn = await admin(pg_url)
        try:
            async with conn.transaction():
                await conn.execute(migration_sql(schema, PREVIOUS).encode())
        finally:
            await conn.close()
        backend = await opened(pg_url, schema)
        try:
            assert await backend.schema_versions() == (SCHEMA_VERSION, SCHEMA_VERSION)
        finally:
            await backend.close()
        fresh = schema_name("fresh8")
        await (await opened(pg_url, fresh)).close()
        catalog = await _catalog(pg_url, schema)
        assert catalog == await _catalog(pg_url, fresh)
        triggers = {row[0] for row in catalog if str(row[0]).startswith("runs_feed_")}
        assert triggers == {"runs_feed_initialized", "runs_feed_committed"}

    asyncio.run(body())
