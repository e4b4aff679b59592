"""The backend outside the kit: URLs and options, the clock, real driver failures and
how they are classified (including the ambiguous commit and its replay), corrupt rows,
values PostgreSQL cannot store, and recovery of a pool whose connections were killed."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_postgres import (
    PermanentStoreError,
    PostgresBackend,
    RetryableStoreError,
    classify,
    parse_url,
)
from docket_postgres.testing import connect as admin
from docket_postgres.testing import free_port
from docket_postgres.testing import open_backend as opened
from docket_postgres.url import describe

from docket.clock import ManualClock
from docket.contract import (
    ClaimBatch,
    ClaimPolicy,
    CorruptEventRow,
    CorruptGraph,
    EventListQuery,
    InvalidTransition,
    NotFound,
    Permanent,
    Retryable,
)
from docket.contract.capabilities import negotiate
from docket.contract.protocols import (
    STORE_PROTOCOLS,
    ChainedCommits,
    ClaimedRuns,
    ClaimedStarts,
    Migratable,
    SampledNow,
)
from docket.contract.registry import from_url
from docket.records import TENANTLESS, GraphRef, GraphVersion, Run

Names = Callable[[str], str]
T0 = datetime(2026, 7, 1, 12, tzinfo=UTC)


# -- URLs and options ---------------------------------------------------------------------------


def test_docket_options_are_taken_out_of_the_url() -> None:
    conninfo, options = parse_url(
        "postgresql://app:secret@db:5433/prod?sslmode=require&schema=jobs&claim_policy=fair"
        "&statement_timeout=2.5&pool_min_size=2&pool_max_size=8&notify=false"
    )
    assert conninfo == "postgresql://app:secret@db:5433/prod?sslmode=require"
    assert options == {
        "schema": "jobs",
        "claim_policy": "fair",
        "statement_timeout": "2.5",
        "pool_min_size": "2",
        "pool_max_size": "8",
        "notify": "false",
    }
    assert "secret" not in describe(conninfo, "jobs")
    with pytest.raises(ValueError, match="twice"):
        parse_url("postgresql://h/db?schema=a&schema=b")
    with pytest.raises(ValueError):
        parse_url("mysql://h/db")


def test_both_schemes_are_registered_and_options_apply() -> None:
    for scheme in ("postgresql", "postgres"):
        backend = from_url(f"{scheme}://u:pw@localhost/db?schema=s1&claim_policy=fair")
        assert isinstance(backend, PostgresBackend)
        assert (backend.schema, backend.claim_policy) == ("s1", "fair")
        assert "pw" not in repr(backend)
        assert "claim.fair" in backend.capabilities().features
    # explicit options win over the URL's
    backend = from_url("postgresql://localhost/db?schema=s1", schema="s2", notify=False)
    assert isinstance(backend, PostgresBackend)
    assert backend.schema == "s2" and "notify" not in backend.capabilities().features
    assert from_url("postgresql://localhost/db").schema == "docket"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("url", "options", "error"),
    [
        ("postgresql://h/db?schema=Bad-Name", {}, ValueError),
        ("postgresql://h/db?schema=pg_catalog", {}, ValueError),
        ("postgresql://h/db?claim_policy=random", {}, ValueError),
        ("postgresql://h/db?statement_timeout=soon", {}, ValueError),
        ("postgresql://h/db?notify=maybe", {}, ValueError),
        ("postgresql://h/db?pool_max_size=0", {}, ValueError),
        ("postgresql://h/db", {"frobnicate": 1}, TypeError),
        ("postgresql://h/db", {"clock": "now"}, TypeError),
        ("postgresql://h/db", {"limits": {}}, TypeError),
        ("postgresql://h/db?clock_resync=-1", {}, ValueError),
        ("postgresql://h/db?commit_lanes=-2", {}, ValueError),
    ],
)
def test_bad_options_are_refused(url: str, options: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        from_url(url, **options)


def test_the_four_stores_are_distinct_objects_each_with_its_own_operations() -> None:
    backend = PostgresBackend("postgresql://localhost/db")  # built, not opened
    assert negotiate(backend).name == "postgres"
    stores = {name: getattr(backend, name) for name in STORE_PROTOCOLS}
    assert len({id(store) for store in stores.values()}) == 4
    assert all(store is not backend for store in stores.values())
    operations = {
        name: [op for op, f in vars(protocol).items() if inspect.iscoroutinefunction(f)]
        for name, protocol in STORE_PROTOCOLS.items()
    }
    for name, store in stores.items():
        assert isinstance(store, STORE_PROTOCOLS[name])
        foreign = [op for other, ops in operations.items() if other != name for op in ops]
        assert not [op for op in foreign if hasattr(store, op)], name
    # the optional Protocols sit where the runtime looks for them
    assert isinstance(backend.runs, ClaimedRuns)
    assert isinstance(backend.transitions, ChainedCommits)
    assert isinstance(backend.transitions, ClaimedStarts)
    assert isinstance(backend, SampledNow) and isinstance(backend, Migratable)


def test_now_is_the_database_clock_unless_a_test_clock_is_given(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        backend = await opened(pg_url, schema_name("clock"))
        conn = await admin(pg_url)
        try:
            first = await backend.now()
            cur = await conn.execute("SELECT clock_timestamp()")
            row = await cur.fetchone()
            assert row is not None
            second = await backend.now()
            assert first <= row[0] <= second
            assert first.utcoffset() == timedelta(0)
            # carried forward between reads, it stays on the database's clock (within the
            # round trips: generous for a loaded machine)
            slack = timedelta(milliseconds=250)
            for _ in range(3):
                before = await backend.sampled_now()
                cur = await conn.execute("SELECT clock_timestamp()")
                row = await cur.fetchone()
                assert row is not None
                assert before - slack <= row[0] <= await backend.sampled_now() + slack
                await asyncio.sleep(0.2)
        finally:
            await conn.close()
            await backend.close()
        clock = ManualClock(T0)
        seam = PostgresBackend(pg_url, schema=schema_name("clock"), clock=clock)
        assert await seam.now() == T0  # no connection needed: the clock is the test's

    asyncio.run(body())


def test_extreme_policy_values_mean_no_bound(pg_url: str, schema_name: Names) -> None:
    """Bounds beyond what the columns hold behave as "no bound", as in the reference."""

    async def body() -> None:
        clock = ManualClock(T0)
        backend = await opened(pg_url, schema_name("extreme"), clock=clock)
        try:
            await _ready(backend)
            policy = ClaimPolicy(
                limit=10**12, orphan_ttl=timedelta.max, max_claim_attempts=10**12, now=T0
            )
            batch = await backend.runs.claim_due(policy)
            assert isinstance(batch, ClaimBatch) and [x.run_id for x in batch.leases] == ["r1"]
            again = await backend.runs.claim_due(policy)
            assert again == ClaimBatch(), "an endless TTL never expires a claim"
        finally:
            await backend.close()

    asyncio.run(body())


# -- failures and their classification ------------------------------------------------------------


def test_unreachable_servers_and_bad_credentials(pg_url: str) -> None:
    async def body() -> None:
        nobody = PostgresBackend(
            f"postgresql://postgres@127.0.0.1:{free_port()}/docket?connect_timeout=2"
        )
        with pytest.raises(RetryableStoreError) as refused:
            await nobody.open()
        assert refused.value.outcome.reason.startswith("not sent")
        stranger = PostgresBackend(pg_url.replace("postgres@", "no_such_role@"))
        with pytest.raises(PermanentStoreError, match="authentication"):
            await stranger.open()
        missing = PostgresBackend(pg_url.rsplit("/", 1)[0] + "/no_such_database")
        with pytest.raises(PermanentStoreError, match="does not exist"):
            await missing.open()

    asyncio.run(body())


async def _real_error(url: str, scenario: str) -> psycopg.Error:
    """Provoke a real deadlock or serialization failure between two sessions."""
    one, two = await admin(url), await admin(url)
    try:
        name = f"race_{scenario}"
        await one.execute(
            f"DROP TABLE IF EXISTS {name}; CREATE TABLE {name} (id int, v int)".encode()
        )
        await one.execute(f"INSERT INTO {name} VALUES (1, 0), (2, 0)".encode())
        await one.set_autocommit(False)
        await two.set_autocommit(False)
        if scenario == "serialization":
            for conn in (one, two):
                await conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                await conn.execute(f"SELECT v FROM {name} WHERE id = 1".encode())
            await one.execute(f"UPDATE {name} SET v = 1 WHERE id = 1".encode())
            await one.commit()
            try:
                await two.execute(f"UPDATE {name} SET v = 2 WHERE id = 1".encode())
            except psycopg.Error as exc:
                return exc
            raise AssertionError("no serialization failure")
        await one.execute(f"UPDATE {name} SET v = 1 WHERE id = 1".encode())
        await two.execute(f"UPDATE {name} SET v = 1 WHERE id = 2".encode())

        async def cross(conn: psycopg.AsyncConnection[Any], row: int) -> psycopg.Error | None:
            try:
                await conn.execute(f"UPDATE {name} SET v = 2 WHERE id = {row}".encode())
            except psycopg.Error as exc:
                return exc
            return None

        errors = await asyncio.gather(cross(one, 2), cross(two, 1))
        found = [e for e in errors if e is not None]
        assert found, "no deadlock detected"
        return found[0]
    finally:
        await one.close()
        await two.close()


@pytest.mark.parametrize("scenario", ["deadlock", "serialization"])
def test_rolled_back_conflicts_are_retryable(pg_url: str, scenario: str) -> None:
    error = asyncio.run(_real_error(pg_url, scenario))
    assert error.sqlstate in ("40P01", "40001")
    outcome = classify(error, sent=True, write=True)
    assert isinstance(outcome, Retryable) and not outcome.reason.startswith("ambiguous")


async def _ready(backend: PostgresBackend, run_id: str = "r1", events: int = 0) -> Run:
    document = graph_document("g")
    ref = graph_ref(document)
    assert isinstance(await backend.graphs.save_graph(TENANTLESS, ref, document), GraphVersion)
    now = await backend.now()
    fresh = new_run(run_id, ref, now, event_seq=events)
    evs = events_for(fresh, now, range(1, events + 1))
    assert await backend.transitions.initialize(TENANTLESS, init_proposal(fresh, now), evs) == fresh
    return fresh


def test_a_commit_cut_off_mid_flight_is_ambiguous_and_its_replay_resolves_it(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("ambiguous")
        backend = await opened(pg_url, schema)
        blocker = await admin(pg_url)
        watcher = await admin(pg_url)
        try:
            fresh = await _ready(backend)
            batch = await backend.runs.claim_due(
                ClaimPolicy(limit=1, orphan_ttl=timedelta(hours=1), max_claim_attempts=3)
            )
            assert isinstance(batch, ClaimBatch) and batch.leases
            proposal = claimed(successor(fresh, fresh.updated_at), batch.leases[0].claim_token)
            await blocker.set_autocommit(False)
            await blocker.execute(f'SELECT 1 FROM "{schema}".runs FOR UPDATE'.encode())
            commit = asyncio.create_task(
                backend.transitions.commit_claimed(TENANTLESS, proposal, [])
            )
            pid = None
            for _ in range(200):  # find the commit waiting on the row lock, then cut it off
                cur = await watcher.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE %s",
                    (f'%"{schema}".commit_run%',),
                )
                row = await cur.fetchone()
                if row is not None:
                    pid = row[0]
                    break
                await asyncio.sleep(0.01)
            assert pid is not None, "the commit never reached the server"
            await watcher.execute("SELECT pg_terminate_backend(%s)", (pid,))
            got = await commit
            assert isinstance(got, Retryable) and got.reason.startswith("ambiguous"), got
            await blocker.rollback()
            assert await backend.runs.fetch_run(TENANTLESS, fresh.id) == fresh, "nothing landed"
            # the caller resends the same proposal: applied now, then answered from storage
            assert (
                await backend.transitions.commit_claimed(TENANTLESS, proposal, []) == proposal.run
            )
            assert (
                await backend.transitions.commit_claimed(TENANTLESS, proposal, []) == proposal.run
            )
        finally:
            await blocker.close()
            await watcher.close()
            await backend.close()

    asyncio.run(body())


def test_a_pool_recovers_from_killed_connections(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("killed")
        backend = await opened(pg_url, schema, pool_min_size=2)
        conn = await admin(pg_url)
        try:
            fresh = await _ready(backend)
            listener = backend.listener
            assert listener is not None
            cur = await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (backend.app_name,),
            )
            assert len(await cur.fetchall()) == 2, "the pool's two sessions were cut off"
            assert listener.connected, "the listener has a session of its own"
            failures = 0
            for _ in range(6):
                try:
                    assert await backend.runs.fetch_run(TENANTLESS, fresh.id) == fresh
                    break
                except RetryableStoreError:
                    failures += 1
            else:
                pytest.fail("the pool never recovered")
            assert failures <= 3
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_a_vanished_schema_is_permanent(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("dropped")
        backend = await opened(pg_url, schema)
        try:
            fresh = await _ready(backend)
            conn = await admin(pg_url)
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE'.encode())
            await conn.close()
            got = await backend.transitions.commit_claimed(
                TENANTLESS, claimed(successor(fresh, fresh.updated_at), "t"), []
            )
            assert isinstance(got, Permanent), got
            with pytest.raises(PermanentStoreError):
                await backend.runs.fetch_run(TENANTLESS, fresh.id)
        finally:
            await backend.close()

    asyncio.run(body())


# -- corrupt rows and unstorable values ---------------------------------------------------------


def test_corrupt_rows_are_reported_not_hidden(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("corrupt")
        backend = await opened(pg_url, schema)
        conn = await admin(pg_url)
        try:
            fresh = await _ready(backend, events=2)
            await conn.execute("SET session_replication_role = replica")  # triggers off
            await conn.execute(
                f"UPDATE \"{schema}\".events SET event_json = 'not json'::bytea "
                "WHERE seq = 2".encode()
            )
            await conn.execute(f"UPDATE \"{schema}\".graphs SET document = '{{}}'::bytea".encode())
            assert isinstance(
                await backend.events.fetch_event(TENANTLESS, fresh.id, 2), CorruptEventRow
            )
            assert isinstance(
                await backend.events.fetch_latest_event(TENANTLESS, fresh.id), CorruptEventRow
            )
            page = await backend.events.list_events(TENANTLESS, fresh.id, EventListQuery())
            assert isinstance(page, CorruptEventRow) and page.seq == 2
            ref = GraphRef(fresh.graph_id, fresh.graph_hash)
            assert isinstance(await backend.graphs.fetch_graph(TENANTLESS, ref), CorruptGraph)
            await conn.execute(f"UPDATE \"{schema}\".runs SET run_json = 'garbage'::bytea".encode())
            with pytest.raises(PermanentStoreError, match="cannot be read"):
                await backend.runs.fetch_run(TENANTLESS, fresh.id)
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_ids_postgres_cannot_hold(pg_url: str, schema_name: Names) -> None:
    """``text`` cannot hold NUL: such a run cannot exist here, so reads say NotFound; the
    shared validator refuses such an id before any write (ids may not contain NUL on any
    backend), so the store is never asked to hold one."""

    async def body() -> None:
        backend = await opened(pg_url, schema_name("nul"))
        try:
            fresh = await _ready(backend)
            bad = "r\x00"
            assert isinstance(await backend.runs.fetch_run(TENANTLESS, bad), NotFound)
            assert isinstance(await backend.runs.inspect_run(TENANTLESS, bad), NotFound)
            odd = new_run(bad, GraphRef(fresh.graph_id, fresh.graph_hash), fresh.started_at)
            got = await backend.transitions.initialize(
                TENANTLESS, init_proposal(odd, fresh.started_at), []
            )
            assert isinstance(got, InvalidTransition), got
            assert any("NUL" in reason for reason in got.reasons), got
        finally:
            await backend.close()

    asyncio.run(body())
