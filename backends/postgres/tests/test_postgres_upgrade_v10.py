"""The upgrade from schema version 9 to 10 ("v10 admission"): a version 9 store is refused
until ``docket migrate``; migrating keeps every run (its queue and priority, a held claim
still committable) and every queue (its config — admission limits included — and its
held slots), the old queues admit from ``seq`` 1, and the result holds exactly the
objects of a store created at version 10, by ``migrate`` and by the DBA script."""

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
from docket_postgres.testing import hold_slot
from docket_postgres.testing import open_backend as opened
from docket_postgres.testing import schema_catalog as _catalog

from docket.contract import ClaimBatch, ClaimPolicy, Feature, ReleaseClaim, Terminal
from docket.records import (
    Admission,
    CheckpointType,
    GraphVersion,
    QueueConfig,
    Run,
    RunInfo,
    RunStatus,
    Tenant,
)

Names = Callable[[str], str]
PREVIOUS = 9
# what versions 10 and later add to the shape check
LATER_TABLES = ("queue_admissions",)
LATER_FUNCTIONS = (
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
ONBOARDING = QueueConfig(name="onb", execution_limit=4, admission_limit=2, tenant_admission_limit=1)
TTL = timedelta(hours=1)


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
    """On a version 9 store, by this release's code: the onboarding queue (admission
    limits in its config) with one slot held, and three runs in it — two claimed (one of
    them stays held), one left due."""
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
            assert await backend.queues.set_queue(ONBOARDING) == ONBOARDING
            await hold_slot(url, schema, "onb", "slot-1", TTL)
            document = graph_document("g")
            ref = graph_ref(document)
            owner = Tenant("a")
            assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
            now = await backend.now()
            runs = {}
            for run_id in ("old", "held"):
                fresh = new_run(run_id, ref, now)
                start = attrs.evolve(init_proposal(fresh, now), queue="onb", priority=3)
                assert await backend.transitions.initialize(owner, start, []) == fresh
                runs[run_id] = fresh
            batch = await backend.runs.claim_due(POLICY)
            assert isinstance(batch, ClaimBatch) and len(batch.leases) == 2
            seeded: dict[str, tuple[Run, str | None]] = {
                x.run_id: (runs[x.run_id], x.claim_token) for x in batch.leases
            }
            due = new_run("due", ref, now)
            start = attrs.evolve(
                init_proposal(due, now - timedelta(seconds=5)), queue="onb", priority=3
            )
            assert await backend.transitions.initialize(owner, start, []) == due
            seeded["due"] = (due, None)
            return seeded
        finally:
            await backend.close()


def test_a_version_9_store_is_refused_then_migrated_with_its_runs_and_queues(
    pg_url: str, schema_name: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SCHEMA_VERSION >= PREVIOUS + 1

    async def body() -> None:
        schema = schema_name("up10")
        await _previous_store(pg_url, schema)
        seeded = await _seed_at_previous(pg_url, schema, monkeypatch)
        with pytest.raises(SchemaTooOld):
            await opened(pg_url, schema)
        backend = PostgresBackend(pg_url, schema=schema)
        try:
            assert await backend.migrate() == (PREVIOUS, SCHEMA_VERSION)
            assert await backend.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)
            assert Feature.ADMISSION in backend.capabilities().features
            owner = Tenant("a")
            for run_id, (run, _) in seeded.items():
                info = await backend.runs.inspect_run(owner, run_id)
                assert isinstance(info, RunInfo) and info.run == run
                assert (info.queue, info.priority) == ("onb", 3)
                assert info.claimed == (run_id != "due")
            # the queue kept its config and its held slot
            assert await backend.queues.fetch_queue("onb") == ONBOARDING
            (status,) = [s for s in await backend.queues.list_queues() if s.config.name == "onb"]
            assert (status.running, status.admitted, status.held) == (1, 0, 0)
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
            # the old queue admits by its stored limits, from seq 1
            admissions = backend.admissions
            assert await admissions.admit("onb", "n1", "a", 0, b"1") == Admission.ADMITTED
            assert await admissions.admit("onb", "n2", "a", 0, b"2") == Admission.HELD
            assert await admissions.admit("onb", "n3", "b", 0, b"3") == Admission.ADMITTED
            view = await admissions.admissions("onb")
            assert [(s.run_id, s.seq) for s in view.admitted] == [("n1", 1), ("n3", 3)]
            assert [(s.run_id, s.seq) for s in view.held] == [("n2", 2)]
            (promoted,) = await admissions.finish_admitted("onb", ["n1"])
            assert promoted.run_id == "n2"
        finally:
            await backend.close()
        fresh_schema = schema_name("fresh10")
        await (await opened(pg_url, fresh_schema)).close()
        assert await _catalog(pg_url, schema) == await _catalog(pg_url, fresh_schema)

    asyncio.run(body())


def test_the_dba_script_upgrades_a_version_9_store_to_the_same_objects(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("dba10")
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
        fresh = schema_name("fresh10")
        await (await opened(pg_url, fresh)).close()
        assert await _catalog(pg_url, schema) == await _catalog(pg_url, fresh)

    asyncio.run(body())
