"""The upgrade from schema version 8 to 9 (named queues): a version 8 store is refused
until ``docket migrate``; migrating keeps every run — in the default queue at priority
0, a held claim still held and committable — yields exactly the objects of a store
created at version 9, and the old runs are claimed among new ones by priority."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import attrs
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
from docket.records import CheckpointType, GraphVersion, Run, RunInfo, RunStatus, Tenant

Names = Callable[[str], str]
PREVIOUS = 8
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
) -> dict[str, tuple[Run, str | None]]:
    """Three plain runs written by this release's code on a version 8 store: two
    claimed (one of them stays held), one left due."""
    with monkeypatch.context() as patched:
        patched.setattr(engine_module, "SCHEMA_VERSION", PREVIOUS)
        patched.setattr(
            schema_module,
            "REQUIRED_TABLES",
            tuple(
                t
                for t in schema_module.REQUIRED_TABLES
                if t not in ("queues", "queue_slots", "queue_admissions")
            ),
        )
        patched.setattr(
            schema_module,
            "REQUIRED_FUNCTIONS",
            tuple(
                f
                for f in schema_module.REQUIRED_FUNCTIONS
                if f
                not in (
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
            ),
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
            seeded: dict[str, tuple[Run, str | None]] = {
                x.run_id: (runs[x.run_id], x.claim_token) for x in batch.leases
            }
            due = new_run("due", ref, now)
            proposal = init_proposal(due, now - timedelta(seconds=5))
            assert await backend.transitions.initialize(owner, proposal, []) == due
            seeded["due"] = (due, None)
            return seeded
        finally:
            await backend.close()


def test_a_version_8_store_is_refused_then_migrated_with_its_runs(
    pg_url: str, schema_name: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SCHEMA_VERSION >= PREVIOUS + 1

    async def body() -> None:
        schema = schema_name("up9")
        await _previous_store(pg_url, schema)
        seeded = await _seed_at_previous(pg_url, schema, monkeypatch)
        with pytest.raises(SchemaTooOld):
            await opened(pg_url, schema)
        backend = PostgresBackend(pg_url, schema=schema)
        try:
            assert await backend.migrate() == (PREVIOUS, SCHEMA_VERSION)
            assert await backend.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)
            assert Feature.QUEUES in backend.capabilities().features
            owner = Tenant("a")
            for run_id, (run, _) in seeded.items():
                info = await backend.runs.inspect_run(owner, run_id)
                assert isinstance(info, RunInfo) and info.run == run
                assert (info.queue, info.priority) == ("default", 0)
                assert info.claimed == (run_id != "due")
            # the old claim still commits
            run, token = seeded["old"]
            assert token is not None
            done = successor(run, await backend.now(), status=RunStatus.DONE)
            proposal = claimed(
                done,
                token,
                schedule=ReleaseClaim(Terminal()),
                checkpoint_type=CheckpointType.RUN_COMPLETED,
            )
            assert await backend.transitions.commit_claimed(owner, proposal, []) == done
            # a new urgent run goes before the old due one; a new low one after it
            ref = graph_ref(graph_document("g"))
            now = await backend.now()
            for run_id, priority in (("urgent", 5), ("low", -5)):
                fresh = new_run(run_id, ref, now)
                start = attrs.evolve(init_proposal(fresh, now), priority=priority)
                assert await backend.transitions.initialize(owner, start, []) == fresh
            batch = await backend.runs.claim_due(POLICY)
            assert isinstance(batch, ClaimBatch)
            assert [x.run_id for x in batch.leases] == ["urgent", "due", "low"]
        finally:
            await backend.close()
        fresh_schema = schema_name("fresh9")
        await (await opened(pg_url, fresh_schema)).close()
        assert await _catalog(pg_url, schema) == await _catalog(pg_url, fresh_schema)

    asyncio.run(body())


def test_the_dba_script_upgrades_a_version_8_store_to_the_same_objects(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("dba9")
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
        fresh = schema_name("fresh9")
        await (await opened(pg_url, fresh)).close()
        assert await _catalog(pg_url, schema) == await _catalog(pg_url, fresh)

    asyncio.run(body())
