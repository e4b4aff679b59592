"""The schedule store on PostgreSQL (``Feature.SCHEDULES``): create/fetch/update/delete
per owner, the version fence held by the database under concurrent updates from several
connections, tenant isolation, listing by ``(id, tenant or '')`` keyset, due schedules
from the ``due_at`` index, and bad input that changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import attrs
import pytest
from docket_postgres import PostgresBackend
from docket_postgres.testing import connect as admin
from docket_postgres.testing import open_backend as opened

from docket.clock import ManualClock
from docket.contract import Conflict, Limits, NotFound, StaleCheckpoint, TooLarge, negotiate
from docket.records import (
    SYSTEM,
    TENANTLESS,
    CronSchedule,
    OwnerScope,
    ScheduleCursor,
    Tenant,
)

Names = Callable[[str], str]
T0 = datetime(2026, 7, 1, 12, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def _schedule(schedule_id: str, next_tick: datetime | None = T0, **changes: object) -> CronSchedule:
    fields: dict[str, object] = {
        "id": schedule_id,
        "graph_id": "report",
        "cron": "*/5 * * * *",
        "created_at": T0,
        "updated_at": T0,
        "input": {"region": "eu"},
        "next_tick_at": next_tick,
        **changes,
    }
    return CronSchedule(**fields)  # type: ignore[arg-type]  # the fields above, by name


async def _created(
    backend: PostgresBackend, owner: OwnerScope, schedule: CronSchedule
) -> CronSchedule:
    got = await backend.schedules.create_schedule(owner, schedule)
    assert isinstance(got, CronSchedule), got
    return got


def test_the_store_negotiates_and_round_trips_per_owner(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        backend = await opened(pg_url, schema_name("sched"), clock=ManualClock(T0))
        try:
            assert "schedules" in negotiate(backend).features
            store = backend.schedules
            acme = Tenant("acme")
            mine = await _created(backend, acme, _schedule("nightly", version=9))
            assert (mine.version, mine.tenant_id) == (1, "acme"), "version 1, owned by acme"
            assert await store.fetch_schedule(acme, "nightly") == mine
            # the same id is free in every other scope, and taken in its own
            theirs = await _created(backend, TENANTLESS, _schedule("nightly"))
            assert theirs.tenant_id is None
            taken = await store.create_schedule(acme, _schedule("nightly", cron="0 0 * * *"))
            assert isinstance(taken, Conflict)
            assert await store.fetch_schedule(acme, "nightly") == mine, "the loser wrote nothing"
            assert isinstance(await store.fetch_schedule(Tenant("other"), "nightly"), NotFound)
            # an update is fenced on the version, keeps identity, stores version + 1
            changed = attrs.evolve(
                mine, paused=True, created_at=T0 + MINUTE, tenant_id="forged", version=77
            )
            updated = await store.update_schedule(acme, changed, 1)
            assert isinstance(updated, CronSchedule)
            assert (updated.version, updated.created_at, updated.tenant_id) == (2, T0, "acme")
            assert updated.paused and updated.due_at is None
            assert await store.fetch_schedule(acme, "nightly") == updated
            stale = await store.update_schedule(acme, changed, 1)
            assert isinstance(stale, StaleCheckpoint)
            assert await store.fetch_schedule(acme, "nightly") == updated
            assert isinstance(await store.update_schedule(Tenant("x"), changed, 2), NotFound)
            assert await store.fetch_schedule(TENANTLESS, "nightly") == theirs, "untouched"
            # delete: only in its own scope, once
            assert not await store.delete_schedule(Tenant("x"), "nightly")
            assert await store.delete_schedule(acme, "nightly")
            assert not await store.delete_schedule(acme, "nightly")
            assert isinstance(await store.fetch_schedule(acme, "nightly"), NotFound)
            assert isinstance(await store.update_schedule(acme, updated, 2), NotFound)
            assert await store.fetch_schedule(TENANTLESS, "nightly") == theirs
        finally:
            await backend.close()

    asyncio.run(body())


def test_concurrent_updates_from_several_connections_one_wins_per_version(
    pg_url: str, schema_name: Names
) -> None:
    """Four backends (four pools) update the same schedule over the same version, round
    after round: exactly one succeeds per version, the others are stale, and the stored
    schedule is the winner's."""

    async def body() -> None:
        schema = schema_name("race")
        backends = [await opened(pg_url, schema, pool_max_size=2) for _ in range(4)]
        try:
            owner = Tenant("acme")
            current = await _created(backends[0], owner, _schedule("hot"))
            for round_ in range(12):
                barrier = asyncio.Barrier(len(backends))

                async def update(
                    i: int,
                    backend: PostgresBackend,
                    base: CronSchedule = current,
                    barrier: asyncio.Barrier = barrier,
                ) -> object:
                    await barrier.wait()
                    change = attrs.evolve(base, input={"writer": i}, last_run_id=f"r{i}")
                    return await backend.schedules.update_schedule(owner, change, base.version)

                results = await asyncio.gather(*(update(i, b) for i, b in enumerate(backends)))
                winners = [r for r in results if isinstance(r, CronSchedule)]
                assert len(winners) == 1, f"round {round_}: {results}"
                assert all(
                    isinstance(r, StaleCheckpoint) for r in results if r is not winners[0]
                ), results
                (winner,) = winners
                assert winner.version == current.version + 1
                stored = await backends[1].schedules.fetch_schedule(owner, "hot")
                assert stored == winner
                current = winner
            assert current.version == 13
        finally:
            for backend in backends:
                await backend.close()

    asyncio.run(body())


def test_listing_pages_by_id_then_tenant_within_the_scope(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        backend = await opened(pg_url, schema_name("list"))
        try:
            store = backend.schedules
            owners: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b")]
            for i in range(5):
                for owner in owners:
                    await _created(backend, owner, _schedule(f"s{i}"))
            await _created(backend, Tenant("a"), _schedule("only-a"))
            everything: list[tuple[str, str]] = []
            after = None
            while True:
                page = await store.list_schedules(SYSTEM, after, limit=4)
                everything.extend((s.id, s.tenant_id or "") for s in page.schedules)
                after = page.next_after
                if not page.has_more:
                    break
            expected = sorted(
                [(f"s{i}", t) for i in range(5) for t in ("", "a", "b")] + [("only-a", "a")]
            )
            assert everything == expected
            page = await store.list_schedules(Tenant("a"), ScheduleCursor("s1", "a"), limit=10)
            assert [s.id for s in page.schedules] == ["s2", "s3", "s4"]
            assert not page.has_more and page.next_after == ScheduleCursor("s4", "a")
            page = await store.list_schedules(TENANTLESS, limit=2)
            assert [(s.id, s.tenant_id) for s in page.schedules] == [("s0", None), ("s1", None)]
            assert page.has_more
            empty = await store.list_schedules(Tenant("nobody"), limit=3)
            assert (empty.schedules, empty.next_after, empty.has_more) == ((), None, False)
            with pytest.raises(ValueError):
                await store.list_schedules(SYSTEM, limit=0)
            with pytest.raises(TypeError):
                await store.list_schedules(SYSTEM, after=("s1", None), limit=1)  # type: ignore[arg-type]  # bad on purpose
        finally:
            await backend.close()

    asyncio.run(body())


def test_due_schedules_oldest_first_from_the_due_index(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        schema = schema_name("due")
        backend = await opened(pg_url, schema, clock=clock)
        conn = await admin(pg_url)
        try:
            store = backend.schedules
            await _created(backend, Tenant("b"), _schedule("late", T0 + 2 * MINUTE))
            await _created(backend, Tenant("a"), _schedule("early", T0 - MINUTE))
            await _created(backend, TENANTLESS, _schedule("early", T0 - MINUTE))
            await _created(backend, TENANTLESS, _schedule("paused", T0 - MINUTE, paused=True))
            await _created(backend, TENANTLESS, _schedule("done", None))
            await _created(
                backend,
                TENANTLESS,
                _schedule("buffered", T0 + MINUTE, buffered_tick_at=T0 - 2 * MINUTE),
            )
            due = await store.due_schedules()  # the backend's clock: T0
            assert [(s.id, s.tenant_id) for s in due] == [
                ("buffered", None),
                ("early", None),
                ("early", "a"),
            ]
            assert [s.id for s in await store.due_schedules(limit=1)] == ["buffered"]
            later = await store.due_schedules(T0 + 2 * MINUTE)
            assert [s.id for s in later] == ["buffered", "early", "early", "late"]
            clock.advance(10 * MINUTE)
            assert len(await store.due_schedules()) == 4
            with pytest.raises(ValueError):
                await store.due_schedules(limit=0)
            # the ticker's read walks the partial due_at index, whatever the table holds
            await conn.execute(
                f"""INSERT INTO "{schema}".schedules (tenant, schedule_id, version, due_at,
                document) SELECT 't' || (i %% 7), 'bulk' || i, 1,
                CASE WHEN i %% 3 = 0 THEN NULL ELSE %s::timestamptz + i * interval '1 s' END,
                '{{}}'::bytea FROM generate_series(1, 20000) AS i""".encode(),
                (T0 + timedelta(days=1),),
            )
            await conn.execute(f'ANALYZE "{schema}".schedules'.encode())
            from docket_postgres._schedules import _DUE

            cur = await conn.execute(
                b"EXPLAIN "
                + backend._engine.q(_DUE).replace(b"%s", b"NULL", 1).replace(b"%s", b"10")
            )
            plan = "\n".join(str(row[0]) for row in await cur.fetchall())
            assert "schedules_due" in plan and "Seq Scan" not in plan, plan
            # bounded by the moment, not a filter over every future row
            assert "Index Cond: (due_at <=" in plan, plan
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_bad_input_is_refused_and_changes_nothing(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("bad")
        limits = Limits(max_run_bytes=2048)
        backend = await opened(pg_url, schema, clock=ManualClock(T0), limits=limits)
        conn = await admin(pg_url)

        async def rows() -> list[tuple[object, ...]]:
            cur = await conn.execute(
                f'SELECT tenant, schedule_id, version, due_at, document FROM "{schema}".schedules '
                "ORDER BY 1, 2".encode()
            )
            return await cur.fetchall()

        try:
            store = backend.schedules
            owner = Tenant("acme")
            kept = await _created(backend, owner, _schedule("kept"))
            before = await rows()
            naive = datetime(2026, 7, 1, 12)  # no time zone
            bad_creates: list[tuple[object, object, type[Exception]]] = [
                (SYSTEM, _schedule("s"), ValueError),
                ("acme", _schedule("s"), TypeError),
                (owner, {"id": "s"}, TypeError),
                (owner, _schedule(""), ValueError),
                (owner, _schedule("s", cron=""), ValueError),
                (owner, _schedule("s", created_at=naive), ValueError),
                (owner, _schedule("s", catchup_ms=-1), ValueError),
                (owner, _schedule("s", input={"x": float("nan")}), ValueError),
                (owner, _schedule("s", overlap="sometimes"), ValueError),
                (owner, _schedule("s" * 300), ValueError),
                (owner, _schedule("nul\x00id"), ValueError),
            ]
            for who, what, error in bad_creates:
                with pytest.raises(error):
                    await store.create_schedule(who, what)  # type: ignore[arg-type]  # bad on purpose
            big = _schedule("big", input={"blob": "x" * 4096})
            too_large = await store.create_schedule(owner, big)
            assert isinstance(too_large, TooLarge) and too_large.limit == "max_run_bytes"
            bad_updates: list[tuple[object, object, object, type[Exception]]] = [
                (SYSTEM, kept, 1, ValueError),
                (owner, "kept", 1, TypeError),
                (owner, attrs.evolve(kept, cron=""), 1, ValueError),
                (owner, attrs.evolve(kept, next_tick_at=naive), 1, ValueError),
                (owner, kept, "1", TypeError),
            ]
            for who, what, version, error in bad_updates:
                with pytest.raises(error):
                    await store.update_schedule(who, what, version)  # type: ignore[arg-type]  # bad on purpose
            grown = await store.update_schedule(owner, attrs.evolve(kept, input=big.input), 1)
            assert isinstance(grown, TooLarge)
            for bad_id in ("", None):
                with pytest.raises(ValueError):
                    await store.fetch_schedule(owner, bad_id)  # type: ignore[arg-type]  # bad on purpose
                with pytest.raises(ValueError):
                    await store.delete_schedule(owner, bad_id)  # type: ignore[arg-type]  # bad on purpose
            assert isinstance(await store.fetch_schedule(owner, "nul\x00id"), NotFound)
            assert not await store.delete_schedule(owner, "nul\x00id")
            assert isinstance(await store.fetch_schedule(Tenant("a\x00b"), "kept"), NotFound)
            assert await rows() == before, "nothing stored changed"
            assert await store.fetch_schedule(owner, "kept") == kept
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_an_update_over_a_schedule_recreated_meanwhile_is_stale(
    pg_url: str, schema_name: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between an update's read and its fenced write another connection deletes the
    schedule and creates it again (version 1 again, another identity): the write must
    not land on the new one with the old one's identity."""

    async def body() -> None:
        schema = schema_name("recreate")
        backend = await opened(pg_url, schema, clock=ManualClock(T0))
        other = await opened(pg_url, schema, clock=ManualClock(T0))
        try:
            owner = Tenant("acme")
            old = await _created(backend, owner, _schedule("s"))
            store = backend.schedules
            read = store._read_raw

            async def read_then_recreate(key: str, schedule_id: str) -> object:
                found = await read(key, schedule_id)
                monkeypatch.setattr(store, "_read_raw", read)  # only the first read
                assert await other.schedules.delete_schedule(owner, "s")
                await _created(other, owner, _schedule("s", created_at=T0 + MINUTE))
                return found

            monkeypatch.setattr(store, "_read_raw", read_then_recreate)
            got = await store.update_schedule(owner, attrs.evolve(old, paused=True), 1)
            assert isinstance(got, StaleCheckpoint), got
            stored = await store.fetch_schedule(owner, "s")
            assert isinstance(stored, CronSchedule)
            assert (stored.created_at, stored.paused, stored.version) == (T0 + MINUTE, False, 1)
        finally:
            await other.close()
            await backend.close()

    asyncio.run(body())
