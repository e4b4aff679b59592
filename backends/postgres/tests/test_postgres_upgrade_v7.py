"""The upgrade from schema version 6 to 7 (durable time and schedules): a version 6
store is refused until ``docket migrate``; migrating keeps every run and its operational
state, yields exactly the objects of a store created at version 7 (tables, constraints,
index predicates, function bodies and options), and the DBA script does the same."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

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

from docket.clock import ManualClock
from docket.contract import At, ClaimBatch, ClaimPolicy, External, Permanent, ReleaseClaim
from docket.records import CronSchedule, GraphVersion, RunInfo, RunStatus, Tenant

Names = Callable[[str], str]
T0 = datetime(2026, 7, 1, 12, tzinfo=UTC)
TTL = timedelta(minutes=5)
PREVIOUS = 6
# the columns of ``live`` at version 6 (version 9 adds the queue and the priority)
LIVE_V6 = (
    "tenant, run_id, status, wake_at, claim_token, claimed_at, claim_attempts, "
    "claim_abandons, poisoned_at, poison_reason"
)


def _policy(now: datetime) -> ClaimPolicy:
    return ClaimPolicy(limit=10, orphan_ttl=TTL, max_claim_attempts=5, now=now)


async def _previous_store(url: str, schema: str) -> None:
    conn = await admin(url)
    try:
        got = await apply_migrations(
            conn, schema, schema, upgrade=False, migrations=MIGRATIONS[:PREVIOUS]
        )
        assert got == (None, PREVIOUS)
    finally:
        await conn.close()


async def _seed_at_previous(url: str, schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs written by this release's code on a version 6 store (its functions keep their
    signatures), so the upgrade has real rows to keep: one due, one claimed, one waiting
    for a person. A waiting run with a wake is still refused there."""
    with monkeypatch.context() as patched:
        patched.setattr(engine_module, "SCHEMA_VERSION", PREVIOUS)
        patched.setattr(
            schema_module,
            "REQUIRED_TABLES",
            tuple(
                t
                for t in schema_module.REQUIRED_TABLES
                if t
                not in ("schedules", "feed_listeners", "queues", "queue_slots", "queue_admissions")
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
            ),
        )
        backend = await opened(url, schema, clock=ManualClock(T0))
        try:
            document = graph_document("g")
            ref = graph_ref(document)
            owner = Tenant("a")
            assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
            for run_id in ("held", "person", "refused", "due"):
                fresh = new_run(run_id, ref, T0)
                got = await backend.transitions.initialize(owner, init_proposal(fresh, T0), [])
                assert got == fresh
                if run_id == "due":
                    break
                batch = await backend.runs.claim_due(
                    ClaimPolicy(limit=1, orphan_ttl=TTL, max_claim_attempts=5, now=T0)
                )
                assert isinstance(batch, ClaimBatch) and batch.leases[0].run_id == run_id
                if run_id == "held":
                    continue
                wake = External() if run_id == "person" else At(T0 + TTL)
                waiting = successor(fresh, T0, status=RunStatus.WAITING)
                proposal = claimed(
                    waiting, batch.leases[0].claim_token, schedule=ReleaseClaim(wake)
                )
                if run_id == "person":
                    assert await backend.transitions.commit_claimed(owner, proposal, []) == waiting
                else:
                    refused = await backend.transitions.commit_claimed(owner, proposal, [])
                    assert isinstance(refused, Permanent), refused  # version 6's CHECK
        finally:
            await backend.close()


def test_a_version_6_store_is_refused_then_migrated_with_its_runs(
    pg_url: str, schema_name: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SCHEMA_VERSION >= PREVIOUS + 1  # later versions add objects only (see v8's test)

    async def body() -> None:
        schema = schema_name("up")
        await _previous_store(pg_url, schema)
        await _seed_at_previous(pg_url, schema, monkeypatch)
        with pytest.raises(SchemaTooOld):
            await opened(pg_url, schema)
        backend = PostgresBackend(pg_url, schema=schema, clock=ManualClock(T0))
        try:
            owner = Tenant("a")
            before = {}
            conn = await admin(pg_url)
            try:
                cur = await conn.execute(
                    f'SELECT {LIVE_V6} FROM "{schema}".live ORDER BY run_id'.encode()
                )
                live_before = await cur.fetchall()
            finally:
                await conn.close()
            assert await backend.migrate() == (PREVIOUS, SCHEMA_VERSION)
            assert await backend.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)
            for run_id in ("held", "person", "refused", "due"):
                info = await backend.runs.inspect_run(owner, run_id)
                assert isinstance(info, RunInfo)
                before[run_id] = info
            assert before["person"].run.status is RunStatus.WAITING
            assert before["held"].claimed and before["refused"].claimed
            assert before["due"].wake_at == T0
            conn = await admin(pg_url)
            try:
                cur = await conn.execute(
                    f'SELECT {LIVE_V6} FROM "{schema}".live ORDER BY run_id'.encode()
                )
                assert await cur.fetchall() == live_before, "operational state kept"
            finally:
                await conn.close()
            # what version 6 refused now works: the claimed run parks with a deadline ...
            stored = before["refused"].run
            expired = await backend.runs.claim_due(_policy(T0 + TTL * 2))
            assert isinstance(expired, ClaimBatch)
            assert sorted(lease.run_id for lease in expired.leases) == ["due", "held", "refused"]
            (lease,) = [lease for lease in expired.leases if lease.run_id == "refused"]
            waiting = successor(stored, T0, status=RunStatus.WAITING)
            proposal = claimed(waiting, lease.claim_token, schedule=ReleaseClaim(At(T0 + TTL * 3)))
            assert await backend.transitions.commit_claimed(owner, proposal, []) == waiting
            # ... and is claimed when it is due, and the person-waiting run never
            batch = await backend.runs.claim_due(_policy(T0 + TTL * 3))
            assert isinstance(batch, ClaimBatch)
            assert [lease.run_id for lease in batch.leases] == ["refused"]
            # and the schedule store is there
            created = await backend.schedules.create_schedule(
                owner,
                CronSchedule(id="s", graph_id="g", cron="* * * * *", created_at=T0, updated_at=T0),
            )
            assert isinstance(created, CronSchedule)
        finally:
            await backend.close()
        fresh = schema_name("fresh")
        await (await opened(pg_url, fresh)).close()
        assert await _catalog(pg_url, schema) == await _catalog(pg_url, fresh)

    asyncio.run(body())


def test_the_dba_script_upgrades_a_version_6_store_to_the_same_objects(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("dba")
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
        fresh = schema_name("fresh")
        await (await opened(pg_url, fresh)).close()
        catalog = await _catalog(pg_url, schema)
        assert catalog == await _catalog(pg_url, fresh)
        # claim_due was replaced: version 6's planner options are set on it again
        (claim_due,) = [row for row in catalog if row[0] == "claim_due"]
        assert "enable_seqscan=off" in claim_due[2] and claim_due[3] == 16

    asyncio.run(body())
