"""The upgrade from schema version 10 to 11 ("v11 fused claim"): a version 10 store is
refused until ``docket migrate``; migrating keeps a queue's config and held slots, and
the new one-statement fused claim counts a slot the old code took, frees it when carried,
and leaves exactly the objects of a store created at version 11."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import attrs
import pytest
from docket_contract_tests.fixtures import graph_document, graph_ref, init_proposal, new_run
from docket_postgres import MIGRATIONS, SCHEMA_VERSION, PostgresBackend, SchemaTooOld
from docket_postgres import _engine as engine_module
from docket_postgres import schema as schema_module
from docket_postgres.schema import apply_migrations
from docket_postgres.testing import connect as admin
from docket_postgres.testing import hold_slot
from docket_postgres.testing import open_backend as opened
from docket_postgres.testing import schema_catalog as _catalog

from docket.contract import ClaimBatch, ClaimPolicy
from docket.records import GraphVersion, QueueConfig, Tenant

Names = Callable[[str], str]
PREVIOUS = 10
LATER_FUNCTIONS = (
    "queue_bucket",
    "queue_grant",
    "queue_open",
    "queue_acquire",
    "queue_renew",
    "queue_release",
    "claim_with_slots",
)
POLICY = ClaimPolicy(limit=10, orphan_ttl=timedelta(hours=1), max_claim_attempts=5)
LIMITED = QueueConfig(name="lim", execution_limit=2)
TTL = timedelta(hours=1)


async def _seed_at_previous(url: str, schema: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A version 10 store, written by this release's code: queue ``lim`` (limit 2) with
    one slot held by ``old``, and four runs due in it."""
    conn = await admin(url)
    try:
        got = await apply_migrations(
            conn, schema, schema, upgrade=False, migrations=MIGRATIONS[:PREVIOUS]
        )
        assert got == (None, PREVIOUS)
    finally:
        await conn.close()
    with monkeypatch.context() as patched:
        patched.setattr(engine_module, "SCHEMA_VERSION", PREVIOUS)
        patched.setattr(
            schema_module,
            "REQUIRED_FUNCTIONS",
            tuple(f for f in schema_module.REQUIRED_FUNCTIONS if f not in LATER_FUNCTIONS),
        )
        backend = await opened(url, schema)
        try:
            assert await backend.queues.set_queue(LIMITED) == LIMITED
            await hold_slot(url, schema, "lim", "old", TTL)
            document = graph_document("g")
            ref = graph_ref(document)
            owner = Tenant("a")
            assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
            now = await backend.now()
            for i in range(4):
                run = new_run(f"r{i}", ref, now)
                start = attrs.evolve(init_proposal(run, now - timedelta(seconds=5)), queue="lim")
                assert await backend.transitions.initialize(owner, start, []) == run
        finally:
            await backend.close()


def _leases(got: object) -> int:
    assert isinstance(got, ClaimBatch), got
    return len(got.leases)


def test_a_version_10_store_is_refused_then_migrated_and_its_slots_still_count(
    pg_url: str, schema_name: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert SCHEMA_VERSION == PREVIOUS + 1

    async def body() -> None:
        schema = schema_name("up11")
        await _seed_at_previous(pg_url, schema, monkeypatch)
        with pytest.raises(SchemaTooOld):
            await opened(pg_url, schema)
        backend = PostgresBackend(pg_url, schema=schema)
        try:
            assert await backend.migrate() == (PREVIOUS, SCHEMA_VERSION)
            queues = backend.queues
            assert await queues.fetch_queue("lim") == LIMITED
            # the slot the old code took still counts: one of the limit's two is left
            assert _leases(await queues.claim_with_slots(POLICY, "lim", ["a", "b", "c"])) == 1
            assert await queues.claim_with_slots(POLICY, "lim", ["d"]) is None
            # carried, the old slot is freed in the same call that uses it again
            assert _leases(await queues.claim_with_slots(POLICY, "lim", ["d"], ["old"])) == 1
            (status,) = [s for s in await queues.list_queues() if s.config.name == "lim"]
            assert (status.running, status.depth) == (2, 2)
        finally:
            await backend.close()
        fresh = schema_name("fresh11")
        await (await opened(pg_url, fresh)).close()
        assert await _catalog(pg_url, schema) == await _catalog(pg_url, fresh)

    asyncio.run(body())
