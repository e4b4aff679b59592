"""Behaviour the contract kit cannot see from outside: durability across restarts, copy
isolation, wake-ups across instances, driver errors classified, corrupt rows, backups."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest
from docket_contract_tests.fixtures import (
    claimed,
    event,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_sqlite import (
    PermanentStoreError,
    RetryableStoreError,
    SQLiteBackend,
    StoreError,
)

from docket.clock import ManualClock
from docket.contract import (
    At,
    ClaimBatch,
    ClaimedProposal,
    ClaimPolicy,
    Conflict,
    CorruptEventRow,
    CorruptGraph,
    EventListQuery,
    GraphContentConflict,
    NotFound,
    Permanent,
    ReleaseClaim,
    Retryable,
    RunListQuery,
)
from docket.records import (
    SYSTEM,
    TENANTLESS,
    EventPage,
    GraphVersion,
    OwnerScope,
    RecordDecodeError,
    Run,
    RunInfo,
    RunSummary,
    Tenant,
)

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
MINUTE = timedelta(seconds=60)


def _policy(now: datetime | None = None, limit: int = 1) -> ClaimPolicy:
    return ClaimPolicy(limit=limit, orphan_ttl=MINUTE, max_claim_attempts=3, now=now)


async def _seed(
    backend: SQLiteBackend,
    owner: OwnerScope,
    run_id: str,
    *,
    events: int = 0,
    wake_at: datetime = T0,
) -> Run:
    document = graph_document("g")
    ref = graph_ref(document)
    assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
    run = new_run(run_id, ref, T0, event_seq=events)
    got = await backend.transitions.initialize(
        owner, init_proposal(run, wake_at), events_for(run, T0, range(1, events + 1))
    )
    assert got == run
    return run


def test_commits_and_replays_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    clock = ManualClock(T0)

    async def first() -> tuple[Run, ClaimedProposal]:
        backend = SQLiteBackend(path, clock=clock)
        run = await _seed(backend, TENANTLESS, "r1", events=2)
        batch = await backend.runs.claim_due(_policy(T0))
        assert isinstance(batch, ClaimBatch)
        token = batch.leases[0].claim_token
        step = successor(run, T0 + timedelta(seconds=1), new_events=1)
        proposal = claimed(step, token)
        assert (
            await backend.transitions.commit_claimed(TENANTLESS, proposal, [event(run.id, 3, T0)])
            == step
        )
        last = successor(step, T0 + timedelta(seconds=2))
        final = claimed(last, token, schedule=ReleaseClaim(At(T0 + MINUTE)))
        assert await backend.transitions.commit_claimed(TENANTLESS, final, []) == last
        await backend.close()
        return last, final

    last, final = asyncio.run(first())

    async def second() -> None:
        backend = SQLiteBackend(path, clock=clock)
        assert await backend.runs.fetch_run(TENANTLESS, "r1") == last
        info = await backend.runs.inspect_run(TENANTLESS, "r1")
        assert isinstance(info, RunInfo)
        assert (info.wake_at, info.claimed_at, info.claim_attempts) == (T0 + MINUTE, None, 0)
        page = await backend.events.list_events(TENANTLESS, "r1", EventListQuery())
        assert isinstance(page, EventPage)
        assert [e.seq for e in page.events] == [1, 2, 3]
        assert page.latest_seq == 3
        listed = await backend.runs.list_runs(SYSTEM, RunListQuery())
        assert list(listed.runs) == [RunSummary.of(last, None)]
        # an ambiguous commit is settled after a restart by sending the same proposal again
        assert await backend.transitions.commit_claimed(TENANTLESS, final, []) == last
        forged = attrs.evolve(final, claim_token="someone-else")
        assert isinstance(
            await backend.transitions.commit_claimed(TENANTLESS, forged, []), Conflict
        )
        assert await backend.runs.inspect_run(TENANTLESS, "r1") == info
        await backend.close()

    asyncio.run(second())


def test_transition_replay_after_restart_answers_the_stored_run(tmp_path: Path) -> None:
    path = tmp_path / "replay.db"
    document = graph_document("g")
    ref = graph_ref(document)
    run = new_run("r1", ref, T0)
    proposal = init_proposal(run, T0)

    async def body() -> None:
        backend = SQLiteBackend(path)
        await backend.graphs.save_graph(TENANTLESS, ref, document)
        assert await backend.transitions.initialize(TENANTLESS, proposal, []) == run
        await backend.close()
        again = SQLiteBackend(path)
        assert await again.transitions.initialize(TENANTLESS, proposal, []) == run
        await again.close()

    asyncio.run(body())


def test_returned_and_submitted_values_are_never_shared(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "copies.db")
        document = graph_document("g")
        ref = graph_ref(document)
        await backend.graphs.save_graph(TENANTLESS, ref, document)
        run = new_run("r1", ref, T0, event_seq=1, input={"items": [1, 2]})
        events = events_for(run, T0, [1])
        answer = await backend.transitions.initialize(TENANTLESS, init_proposal(run, T0), events)
        assert isinstance(answer, Run)
        answer.input["items"].append(3)  # type: ignore[union-attr]
        run.input["items"].append(4)  # type: ignore[union-attr]
        events[0].payload["seq"] = 99
        document["graph"] = {}
        fetched = await backend.runs.fetch_run(TENANTLESS, "r1")
        assert isinstance(fetched, Run) and fetched.input == {"items": [1, 2]}
        fetched.input["items"].append(5)  # type: ignore[union-attr]
        again = await backend.runs.fetch_run(TENANTLESS, "r1")
        assert isinstance(again, Run) and again.input == {"items": [1, 2]}
        stored = await backend.events.fetch_event(TENANTLESS, "r1", 1)
        assert not isinstance(stored, NotFound | CorruptEventRow)
        assert stored.payload == {"seq": 1}
        graph = await backend.graphs.fetch_graph(TENANTLESS, ref)
        assert graph == graph_document("g")
        await backend.close()

    asyncio.run(body())


def test_wake_ups_reach_every_instance_on_the_file_in_this_process(tmp_path: Path) -> None:
    path = tmp_path / "wake.db"
    clock = ManualClock(T0)

    async def body() -> None:
        writer = SQLiteBackend(path, clock=clock)
        other = SQLiteBackend(path, clock=clock)
        memory = SQLiteBackend(":memory:", clock=clock)
        await asyncio.gather(writer.open(), other.open(), memory.open())
        waits = [asyncio.create_task(b.wait_for_work(5)) for b in (writer, other)]
        unrelated = asyncio.create_task(memory.wait_for_work(0.3))
        await asyncio.sleep(0.05)
        await _seed(writer, TENANTLESS, "due", wake_at=T0)
        assert await asyncio.gather(*waits) == [True, True]
        assert await unrelated is False, "another database's waiters are not woken"
        # a wake in the future is not announced
        later = asyncio.create_task(other.wait_for_work(0.3))
        await asyncio.sleep(0.05)
        await _seed(writer, Tenant("a"), "later", wake_at=T0 + MINUTE)
        assert await later is False
        # a release announces the run it hands back
        batch = await writer.runs.claim_due(_policy(T0))
        assert isinstance(batch, ClaimBatch) and batch.leases
        released = asyncio.create_task(other.wait_for_work(5))
        await asyncio.sleep(0.05)
        await writer.runs.release_claim(TENANTLESS, "due", batch.leases[0].claim_token, T0)
        assert await released is True
        for backend in (writer, other, memory):
            await backend.close()

    asyncio.run(body())


def test_a_busy_file_answers_retryable_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"

    async def body() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0), busy_timeout=0.05)
        run = await _seed(backend, TENANTLESS, "held")
        batch = await backend.runs.claim_due(_policy(T0))
        assert isinstance(batch, ClaimBatch)
        token = batch.leases[0].claim_token
        before = await backend.runs.inspect_run(TENANTLESS, "held")
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            second = new_run("second", graph_ref(graph_document("g")), T0)
            got = await backend.transitions.initialize(TENANTLESS, init_proposal(second, T0), [])
            assert isinstance(got, Retryable) and "BUSY" in got.reason
            step = successor(run, T0)
            assert isinstance(
                await backend.transitions.commit_claimed(TENANTLESS, claimed(step, token), []),
                Retryable,
            )
            assert isinstance(await backend.runs.claim_due(_policy(T0)), Retryable)
            document = graph_document("h")
            assert isinstance(
                await backend.graphs.save_graph(TENANTLESS, graph_ref(document), document),
                Retryable,
            )
            with pytest.raises(RetryableStoreError) as caught:
                await backend.runs.refresh_claim(TENANTLESS, "held", token, T0)
            assert isinstance(caught.value, StoreError) and caught.value.retryable
            # WAL: reads go on while someone else writes
            assert await backend.runs.inspect_run(TENANTLESS, "held") == before
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert await backend.runs.inspect_run(TENANTLESS, "held") == before
        assert isinstance(await backend.runs.fetch_run(TENANTLESS, "second"), NotFound)
        # the same calls succeed once the lock is free
        step = successor(run, T0)
        assert (
            await backend.transitions.commit_claimed(TENANTLESS, claimed(step, token), []) == step
        )
        await backend.close()

    asyncio.run(body())


def _corrupt_page_of(path: Path, table: str) -> None:
    conn = sqlite3.connect(path)
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    root = int(
        conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)).fetchone()[0]
    )
    conn.close()
    with path.open("r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\xa5" * page_size)


def test_a_corrupt_file_is_permanent_never_a_raw_driver_error(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"

    async def make() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        await _seed(backend, TENANTLESS, "r1", events=2)
        await backend.close()

    asyncio.run(make())
    _corrupt_page_of(path, "docket_events")

    async def body() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        await backend.open()
        with pytest.raises(PermanentStoreError, match=r"CORRUPT|malformed"):
            await backend.events.list_events(TENANTLESS, "r1", EventListQuery())
        run = new_run("r2", graph_ref(graph_document("g")), T0, event_seq=1)
        got = await backend.transitions.initialize(
            TENANTLESS, init_proposal(run, T0), events_for(run, T0, [1])
        )
        assert isinstance(got, Permanent) and "CORRUPT" in got.reason
        assert isinstance(await backend.runs.fetch_run(TENANTLESS, "r2"), NotFound)
        await backend.close()

    asyncio.run(body())


# the columns a test writes by hand (schema version 4 added written_at_us, defaulted)
_EVENT_ROW = "INSERT INTO docket_events (tenant, run_id, seq, event_json, content_sha256) VALUES "


def test_corrupt_rows_are_reported_typed(tmp_path: Path) -> None:
    path = tmp_path / "rows.db"

    async def make() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        await _seed(backend, TENANTLESS, "r1", events=3)
        lonely = graph_document("lonely")
        await backend.graphs.save_graph(TENANTLESS, graph_ref(lonely), lonely)
        await backend.close()

    asyncio.run(make())
    raw = sqlite3.connect(path, isolation_level=None)
    row = raw.execute("SELECT content_sha256 FROM docket_events WHERE seq = 2").fetchone()
    first = raw.execute("SELECT event_json FROM docket_events WHERE seq = 1").fetchone()
    raw.execute("DELETE FROM docket_events WHERE seq IN (2, 3)")
    raw.execute(_EVENT_ROW + "('', 'r1', 2, ?, ?)", (b"{not json", row[0]))
    raw.execute(_EVENT_ROW + "('', 'r1', 3, ?, ?)", (first[0], row[0]))
    lonely_ref = graph_ref(graph_document("lonely"))
    raw.execute("DELETE FROM docket_graphs WHERE graph_id = 'lonely'")
    raw.execute(
        "INSERT INTO docket_graphs VALUES ('', 'lonely', ?, ?, 0)",
        (lonely_ref.graph_hash, json.dumps(graph_document("tampered")).encode()),
    )
    raw.execute("UPDATE docket_runs SET run_json = x'7b7d'")
    raw.close()

    async def body() -> None:
        backend = SQLiteBackend(path, clock=ManualClock(T0))
        got = await backend.events.fetch_event(TENANTLESS, "r1", 2)
        assert isinstance(got, CorruptEventRow) and got.seq == 2
        got = await backend.events.fetch_event(TENANTLESS, "r1", 3)
        assert isinstance(got, CorruptEventRow) and "another run or sequence" in got.reason
        assert isinstance(
            await backend.events.fetch_latest_event(TENANTLESS, "r1"), CorruptEventRow
        )
        page = await backend.events.list_events(TENANTLESS, "r1", EventListQuery())
        assert isinstance(page, CorruptEventRow) and page.seq == 2
        one = await backend.events.list_events(TENANTLESS, "r1", EventListQuery(limit=1))
        assert isinstance(one, EventPage) and [e.seq for e in one.events] == [1]
        assert isinstance(await backend.graphs.fetch_graph(TENANTLESS, lonely_ref), CorruptGraph)
        lonely = graph_document("lonely")
        assert isinstance(
            await backend.graphs.save_graph(TENANTLESS, lonely_ref, lonely), GraphContentConflict
        )
        with pytest.raises(RecordDecodeError):
            await backend.runs.fetch_run(TENANTLESS, "r1")
        # collection reads never decode run documents, so a corrupt one does not break them
        listed = await backend.runs.list_runs(SYSTEM, RunListQuery())
        assert [s.id for s in listed.runs] == ["r1"]
        await backend.close()

    asyncio.run(body())


def test_backup_copies_a_consistent_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    copy = tmp_path / "backup" / "copy.db"
    copy.parent.mkdir()

    async def body() -> None:
        live = SQLiteBackend(path, clock=ManualClock(T0))
        for index in range(5):
            await _seed(live, TENANTLESS, f"r{index}", events=2)
        await live.backup(copy)
        await _seed(live, TENANTLESS, "after-the-backup")
        with pytest.raises(ValueError):
            await live.backup(path)
        restored = SQLiteBackend(copy, clock=ManualClock(T0))
        listed = await restored.runs.list_runs(SYSTEM, RunListQuery())
        assert sorted(s.id for s in listed.runs) == [f"r{i}" for i in range(5)]
        page = await restored.events.list_events(TENANTLESS, "r3", EventListQuery())
        assert isinstance(page, EventPage) and [e.seq for e in page.events] == [1, 2]
        assert (await restored.settings()).journal_mode == "wal"
        await restored.close()
        await live.close()

    asyncio.run(body())


def test_lifecycle_is_lazy_and_idempotent(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "lazy.db", clock=ManualClock(T0))
        assert await backend.runs.list_runs(SYSTEM, RunListQuery()) is not None  # opens itself
        await backend.open()
        await backend.open()
        await _seed(backend, TENANTLESS, "r1")
        await backend.close()
        await backend.close()
        assert isinstance(await backend.runs.fetch_run(TENANTLESS, "r1"), Run), "reopens"
        await backend.close()
        memory = SQLiteBackend(":memory:", clock=ManualClock(T0))
        await _seed(memory, TENANTLESS, "r1")
        await memory.close()
        assert isinstance(await memory.runs.fetch_run(TENANTLESS, "r1"), NotFound)
        await memory.close()

    asyncio.run(body())


def test_concurrent_operations_on_one_instance(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "many.db", clock=ManualClock(T0))
        document = graph_document("g")
        ref = graph_ref(document)
        await backend.graphs.save_graph(TENANTLESS, ref, document)
        runs = [new_run(f"r{i:03}", ref, T0, event_seq=2) for i in range(60)]
        answers = await asyncio.gather(
            *(
                backend.transitions.initialize(
                    TENANTLESS, init_proposal(run, T0), events_for(run, T0, [1, 2])
                )
                for run in runs
            ),
            *(backend.runs.list_runs(SYSTEM, RunListQuery(limit=5)) for _ in range(20)),
        )
        assert answers[: len(runs)] == runs
        listed = await backend.runs.list_runs(SYSTEM, RunListQuery(limit=100))
        assert len(listed.runs) == len(runs)
        await backend.close()

    asyncio.run(body())
