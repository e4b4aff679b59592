"""Claims on PostgreSQL: disjoint under real concurrency (two backend instances, several
processes), the fair policy's breadth-first order, the statement timeout, and plans
that read the partial indexes (so a claim's cost follows live work, not history)."""

from __future__ import annotations

import asyncio
import collections
import json
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from docket_contract_tests.fixtures import (
    claimed,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_postgres import PostgresBackend
from docket_postgres.testing import connect as admin
from docket_postgres.testing import open_backend as opened

from docket.clock import ManualClock
from docket.contract import (
    ClaimBatch,
    ClaimPolicy,
    ReleaseClaim,
    Retryable,
    RunListQuery,
    Terminal,
)
from docket.records import (
    TENANTLESS,
    GraphRef,
    GraphVersion,
    OwnerScope,
    Run,
    RunStatus,
    Tenant,
    tenant_id_of,
)

Names = Callable[[str], str]
T0 = datetime(2026, 7, 1, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)
HERE = Path(__file__).resolve().parent


async def _graph(backend: PostgresBackend, owner: OwnerScope) -> GraphRef:
    document = graph_document("g")
    ref = graph_ref(document)
    assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
    return ref


async def _seed(
    backend: PostgresBackend, owner: OwnerScope, ref: GraphRef, run_id: str, wake: datetime
) -> Run:
    fresh = new_run(run_id, ref, wake)
    got = await backend.transitions.initialize(owner, init_proposal(fresh, wake), [])
    assert got == fresh, got
    return fresh


def _policy(limit: int, **changes: Any) -> ClaimPolicy:
    return ClaimPolicy(limit=limit, orphan_ttl=HOUR, max_claim_attempts=5, **changes)


# -- exclusivity under real concurrency ----------------------------------------------------------


def test_two_instances_claim_disjoint_batches_over_many_rounds(
    pg_url: str, schema_name: Names
) -> None:
    """Two backends (two pools) claim concurrently, round after round: no run is leased
    twice and none is left behind."""

    async def body() -> None:
        schema = schema_name("twins")
        left = await opened(pg_url, schema, pool_max_size=4)
        right = await opened(pg_url, schema, pool_max_size=4)
        try:
            owners: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b")]
            refs = {owner: await _graph(left, owner) for owner in owners}
            for round_ in range(25):
                now = await left.now()
                seeded = {(owners[i % 3], f"r{round_}-{i}") for i in range(7)}
                for owner, run_id in sorted(seeded, key=repr):
                    await _seed(left, owner, refs[owner], run_id, now - timedelta(seconds=1))
                barrier = asyncio.Barrier(6)

                async def grab(
                    backend: PostgresBackend, limit: int, barrier: asyncio.Barrier = barrier
                ) -> ClaimBatch:
                    await barrier.wait()
                    batch = await backend.runs.claim_due(_policy(limit))
                    assert isinstance(batch, ClaimBatch), batch
                    return batch

                batches = await asyncio.gather(
                    *(grab(b, n) for b in (left, right) for n in (1, 2, 3))
                )
                leased = [(lease.owner, lease.run_id) for b in batches for lease in b.leases]
                assert len(leased) == len(set(leased)), f"round {round_}: a run leased twice"
                assert set(leased) <= seeded
                rest = await left.runs.claim_due(_policy(10))
                assert isinstance(rest, ClaimBatch)
                leased += [(lease.owner, lease.run_id) for lease in rest.leases]
                assert sorted(leased, key=repr) == sorted(seeded, key=repr), (
                    f"round {round_}: every due run is leased exactly once"
                )
                for batch in (*batches, rest):  # park them so later rounds start clean
                    for lease in batch.leases:
                        stored = await left.runs.fetch_run(lease.owner, lease.run_id)
                        assert isinstance(stored, Run)
                        done = successor(stored, stored.updated_at, status=RunStatus.DONE)
                        proposal = claimed(
                            done, lease.claim_token, schedule=ReleaseClaim(Terminal())
                        )
                        assert isinstance(
                            await right.transitions.commit_claimed(lease.owner, proposal, []), Run
                        )
        finally:
            await left.close()
            await right.close()

    asyncio.run(body())


def test_claimers_in_several_processes_lease_each_run_once(pg_url: str, schema_name: Names) -> None:
    schema = schema_name("procs")
    count = 240

    async def seed() -> None:
        backend = await opened(pg_url, schema)
        try:
            owners: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b"), Tenant("c")]
            refs = {owner: await _graph(backend, owner) for owner in owners}
            now = await backend.now()
            for i in range(count):
                owner = owners[i % 4]
                await _seed(backend, owner, refs[owner], f"r{i}", now - timedelta(seconds=1))
        finally:
            await backend.close()

    asyncio.run(seed())
    start_at = time.time() + 2.0
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "postgres_claimer.py"),
                pg_url,
                schema,
                f"w{n}",
                str(start_at),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        for n in range(3)
    ]
    lines: dict[str, list[list[Any]]] = {}
    for n, worker in enumerate(workers):
        out, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err[-3000:]
        lines[f"w{n}"] = [json.loads(line) for line in out.splitlines() if line.strip()]
    leases = [tuple(entry[:2]) for entries in lines.values() for entry in entries]
    assert len(leases) == count, "every run was leased"
    assert len(set(leases)) == count, "no run was leased twice"
    assert all(entry[3] for entries in lines.values() for entry in entries), "every commit won"
    assert sum(1 for entries in lines.values() if entries) >= 2, "the work was shared"

    async def check() -> None:
        backend = await opened(pg_url, schema)
        try:
            for owner in (TENANTLESS, Tenant("a"), Tenant("b"), Tenant("c")):
                page = await backend.runs.list_runs(owner, RunListQuery(limit=200))
                assert {s.status for s in page.runs} == {RunStatus.DONE}
        finally:
            await backend.close()

    asyncio.run(check())


# -- the fair policy ----------------------------------------------------------------------------


async def _tenants(backend: PostgresBackend, spec: dict[str, int], clock: ManualClock) -> None:
    """Seed ``spec[tenant]`` due runs per tenant; the hot tenant's are the oldest."""
    for index, (tenant, count) in enumerate(spec.items()):
        owner = Tenant(tenant)
        ref = await _graph(backend, owner)
        for i in range(count):
            wake = T0 - timedelta(hours=len(spec) - index) + timedelta(seconds=i)
            await _seed(backend, owner, ref, f"{tenant}-{i:03d}", wake)


def test_fair_policy_admits_due_work_breadth_first(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        schema = schema_name("fair")
        fair = await opened(pg_url, schema, clock=clock, claim_policy="fair")
        blind = await opened(pg_url, schema, clock=clock)
        try:
            assert "claim.fair" in fair.capabilities().features
            await _tenants(fair, {"hot": 10, "warm": 3, "cold": 1}, clock)
            batch = await fair.runs.claim_due(_policy(8))
            assert isinstance(batch, ClaimBatch)
            taken = [(str(tenant_id_of(lease.owner)), lease.run_id) for lease in batch.leases]
            per_tenant = collections.Counter(tenant for tenant, _ in taken)
            assert per_tenant == {"hot": 4, "warm": 3, "cold": 1}, taken
            # breadth-first: a tenant's k-th run comes after every tenant's (k-1)-th
            ranks = [int(run_id.split("-")[1]) for _, run_id in taken]
            assert ranks == sorted(ranks), taken
            for tenant in per_tenant:  # and each tenant's runs go oldest first
                mine = [run_id for t, run_id in taken if t == tenant]
                assert mine == sorted(mine)
            # the blind policy on the same store takes the oldest due runs, whoever owns them
            more = await blind.runs.claim_due(_policy(3))
            assert isinstance(more, ClaimBatch)
            assert [lease.run_id for lease in more.leases] == ["hot-004", "hot-005", "hot-006"]
        finally:
            await fair.close()
            await blind.close()

    asyncio.run(body())


def test_fair_demand_one_claims_spread_over_tenants(pg_url: str, schema_name: Names) -> None:
    """With a hot tenant whose backlog is older than everyone's, demand-1 claims still
    reach the other tenants: each claim picks uniformly among tenants with due work."""

    async def body() -> None:
        clock = ManualClock(T0)
        spec = {"hot": 40, "x": 20, "y": 20, "z": 20}
        fair_schema, blind_schema = schema_name("fair1"), schema_name("blind1")
        fair = await opened(pg_url, fair_schema, clock=clock, claim_policy="fair")
        blind = await opened(pg_url, blind_schema, clock=clock)
        try:
            counts: dict[str, collections.Counter[str]] = {}
            for name, backend in (("fair", fair), ("blind", blind)):
                await _tenants(backend, spec, clock)
                seen: collections.Counter[str] = collections.Counter()
                for _ in range(20):
                    batch = await backend.runs.claim_due(_policy(1))
                    assert isinstance(batch, ClaimBatch) and len(batch.leases) == 1
                    seen[batch.leases[0].run_id.split("-")[0]] += 1
                counts[name] = seen
            assert counts["blind"] == {"hot": 20}, "blind: oldest first, all from the hot tenant"
            cold = sum(n for tenant, n in counts["fair"].items() if tenant != "hot")
            # each pick is a cold tenant with probability 3/4: P(cold <= 5 of 20) < 4e-6
            assert cold >= 6, counts["fair"]
        finally:
            await fair.close()
            await blind.close()

    asyncio.run(body())


# -- the statement timeout bounds a claim ---------------------------------------------------------


def test_a_claim_blocked_by_a_stuck_lock_times_out_retryably(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("timeout")
        backend = await opened(pg_url, schema, statement_timeout=0.5)
        conn = await admin(pg_url)
        try:
            ref = await _graph(backend, TENANTLESS)
            now = await backend.now()
            await _seed(backend, TENANTLESS, ref, "stuck", now - timedelta(seconds=1))
            await conn.set_autocommit(False)
            await conn.execute(  # a session that locked the run and went quiet
                f"SELECT 1 FROM \"{schema}\".live WHERE run_id = 'stuck' FOR UPDATE".encode()
            )
            started = time.monotonic()
            got = await backend.runs.claim_due(_policy(1))
            elapsed = time.monotonic() - started
            assert isinstance(got, Retryable), got
            assert "57014" in got.reason and not got.reason.startswith("ambiguous")
            assert 0.4 < elapsed < 5, elapsed
            await conn.rollback()
            batch = await backend.runs.claim_due(_policy(1))
            assert isinstance(batch, ClaimBatch)
            assert [lease.run_id for lease in batch.leases] == ["stuck"]
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


# -- plans ------------------------------------------------------------------------------------


async def _plans(url: str, statement: str) -> list[str]:
    """Run ``statement`` with auto_explain on; the plans of every nested statement."""
    conn = await admin(url)
    notes: list[str] = []
    conn.add_notice_handler(lambda d: notes.append(d.message_primary or ""))
    try:
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_level = 'notice'",
            "SET TIME ZONE 'UTC'",
        ):
            await conn.execute(setting.encode())
        await conn.execute(statement.encode())
    finally:
        await conn.close()
    return notes


@pytest.mark.parametrize("policy", ["blind", "fair"])
def test_claims_read_the_partial_indexes_not_history(
    pg_url: str, schema_name: Names, policy: str
) -> None:
    """With thousands of finished runs (and their events) and a backlog of future
    wakes, the statements inside ``claim_due`` walk the due/claimed partial indexes."""

    async def body() -> None:
        clock = ManualClock(T0)
        schema = schema_name("plan")
        backend = await opened(pg_url, schema, clock=clock)
        conn = await admin(pg_url)
        try:
            owners = [Tenant(f"t{i}") for i in range(4)]
            refs = {owner: await _graph(backend, owner) for owner in owners}
            await _seed(backend, owners[0], refs[owners[0]], "due", T0 - timedelta(seconds=5))
            # history and future work, written in bulk by SQL (the shape the backend writes):
            # 18,000 finished runs, 2,000 running ones due tomorrow (with live rows)
            async with conn.transaction():  # a run and its live row arrive together
                await conn.execute(
                    f"""INSERT INTO "{schema}".runs (tenant, run_id, graph_id, graph_hash, status,
                    step, checkpoint_seq, event_seq, started_at, updated_at, finished_at, run_json,
                    latest_checkpoint_type)
                    SELECT 't' || (i %% 4), 'old' || i, %s, %s,
                        CASE WHEN i %% 10 = 0 THEN 'running' ELSE 'done' END, 3, 4, 0,
                        %s::timestamptz - interval '1 day', %s::timestamptz - interval '1 day',
                        CASE WHEN i %% 10 = 0 THEN NULL ELSE %s::timestamptz - interval '1 day' END,
                        '{{}}'::bytea, 'run_completed'
                    FROM generate_series(1, 20000) AS i""".encode(),
                    (refs[owners[0]].graph_id, refs[owners[0]].graph_hash, T0, T0, T0),
                )
                await conn.execute(
                    f"""INSERT INTO "{schema}".live (tenant, run_id, status, wake_at)
                    SELECT 't' || (i %% 4), 'old' || i, 'running', %s::timestamptz
                    FROM generate_series(10, 20000, 10) AS i""".encode(),
                    (T0 + timedelta(days=1),),
                )
            await conn.execute(f'ANALYZE "{schema}".runs; ANALYZE "{schema}".live'.encode())
            fair = policy == "fair"
            notes = await _plans(
                pg_url,
                f"SELECT * FROM \"{schema}\".claim_due(5, '1 hour', 3, NULL, "
                f"'{T0.isoformat()}', {str(fair).lower()})",
            )
            nested = [n for n in notes if 'FROM "' + schema + '".live r' in n]
            assert nested, notes
            for plan in nested:
                assert "Seq Scan" not in plan, plan
            text = "\n".join(nested)
            assert "live_claimed" in text
            assert ("live_due_by_tenant" if fair else "live_due on live") in text
            assert any("claim_due(5" in n for n in notes), "the call itself ran"
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_listing_reads_the_owner_index(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("list")
        backend = await opened(pg_url, schema)
        conn = await admin(pg_url)
        try:
            await conn.execute(
                f"""INSERT INTO "{schema}".graphs
                SELECT 't' || i, 'g', 'h', '{{}}'::bytea, now() FROM generate_series(0, 49) i;
                INSERT INTO "{schema}".runs (tenant, run_id, graph_id, graph_hash, status,
                step, checkpoint_seq, event_seq, started_at, updated_at, finished_at, run_json,
                latest_checkpoint_type)
                SELECT 't' || (i % 50), 'r' || i, 'g', 'h', 'done', 1, 1, 0,
                    now() - i * interval '1 s', now(), now(), '{{}}'::bytea, 'run_completed'
                FROM generate_series(1, 20000) AS i""".encode()
            )
            await conn.execute(f'ANALYZE "{schema}".runs'.encode())
            statement, params = backend.runs._list_runs_sql(Tenant("t1"), RunListQuery(limit=10))
            assert statement is not None
            cur = await conn.execute(b"EXPLAIN " + statement.as_bytes(conn), params)
            plan = "\n".join(str(row[0]) for row in await cur.fetchall())
            assert "runs_by_owner" in plan and "Sort" not in plan, plan
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())
