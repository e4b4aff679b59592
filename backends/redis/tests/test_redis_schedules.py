"""The schedule store on Redis (``Feature.SCHEDULES``), single server and Cluster.

What the keys hold, that the version fence holds across connections (one winner per
version), tenant isolation, keyset listing in ``(id, tenant or "")`` order even for ids
that sort awkwardly as bytes, ``due_schedules`` from the due index, zero-write refusals,
and the same answers as the memory reference store for one sequence of operations.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest
from docket_redis import RedisBackend
from docket_redis.keys import Namespace, schedule_member
from docket_redis.testing import T0, RedisCluster, RedisServer, dump, opened, with_prefix
from redis.crc import key_slot

from docket.clock import ManualClock
from docket.contract import Conflict, Limits, NotFound, StaleCheckpoint, TooLarge
from docket.contract.memory_schedules import MemorySchedules
from docket.records import (
    SYSTEM,
    TENANTLESS,
    CronSchedule,
    OwnerScope,
    ScheduleCursor,
    Tenant,
    schedule_from_json,
    schedule_order,
)

H = timedelta(hours=1)


@pytest.fixture(params=["single", "cluster"])
def where(request: pytest.FixtureRequest) -> tuple[str, list[int]]:
    """The URL and the ports of every node (for key dumps)."""
    if request.param == "single":
        server: RedisServer = request.getfixturevalue("redis_single")
        return server.url, [server.port]
    cluster: RedisCluster = request.getfixturevalue("redis_cluster_nodes")
    return cluster.url, cluster.ports


def _schedule(schedule_id: str, **changes: Any) -> CronSchedule:
    fields: dict[str, Any] = {
        "id": schedule_id,
        "graph_id": "g",
        "cron": "0 * * * *",
        "created_at": T0,
        "updated_at": T0,
        "next_tick_at": T0 + H,
        "input": {"n": 1},
    }
    fields.update(changes)
    return CronSchedule(**fields)


def test_create_fetch_update_delete(where: tuple[str, list[int]], prefix: str) -> None:
    url, _ = where

    async def body() -> None:
        async with opened(url, prefix) as backend:
            store = backend.schedules
            owner = Tenant("acme")
            created = await store.create_schedule(owner, _schedule("s1", version=7))
            assert isinstance(created, CronSchedule)
            assert (created.version, created.tenant_id) == (1, "acme")
            assert await store.fetch_schedule(owner, "s1") == created
            assert isinstance(await store.create_schedule(owner, _schedule("s1")), Conflict)

            change = attrs.evolve(
                created, cron="5 * * * *", created_at=T0 + H, updated_at=T0 + H, tenant_id="x"
            )
            updated = await store.update_schedule(owner, change, 1)
            assert isinstance(updated, CronSchedule)
            # the stored identity is kept; the version moves on
            assert (updated.version, updated.created_at, updated.tenant_id) == (2, T0, "acme")
            assert updated.cron == "5 * * * *"
            assert await store.fetch_schedule(owner, "s1") == updated
            stale = await store.update_schedule(owner, change, 1)
            assert isinstance(stale, StaleCheckpoint)
            missing = await store.update_schedule(owner, _schedule("nope"), 1)
            assert isinstance(missing, NotFound)

            assert await store.delete_schedule(owner, "s1") is True
            assert await store.delete_schedule(owner, "s1") is False
            assert isinstance(await store.fetch_schedule(owner, "s1"), NotFound)
            assert (await store.list_schedules(SYSTEM)).schedules == ()
            assert await store.due_schedules(T0 + 10 * H) == ()
            # the id is free again: a new schedule starts at version 1
            again = await store.create_schedule(owner, _schedule("s1"))
            assert isinstance(again, CronSchedule) and again.version == 1

    asyncio.run(body())


def test_the_keys_hold_the_document_and_its_indexes_on_one_slot(
    where: tuple[str, list[int]], prefix: str
) -> None:
    url, ports = where
    keys = Namespace(prefix).schedules
    owner = Tenant("acme")

    async def body() -> None:
        async with opened(url, prefix) as backend:
            stored = await backend.schedules.create_schedule(owner, _schedule("s1"))
            assert isinstance(stored, CronSchedule)
            member = schedule_member("s1", "acme")
            seen = dump(ports, prefix)
            assert schedule_from_json(seen[keys.documents.encode()][1][member]) == stored
            assert seen[keys.index.encode()] == (b"zset", [(member, 0.0)])
            assert seen[keys.by_owner(owner).encode()] == (b"zset", [(member, 0.0)])
            due = (T0 + H).timestamp() * 1_000_000
            assert seen[keys.due.encode()] == (b"zset", [(member, due)])
            # pausing takes it out of the due index only
            paused = await backend.schedules.update_schedule(
                owner, attrs.evolve(stored, paused=True), 1
            )
            assert isinstance(paused, CronSchedule) and paused.due_at is None
            assert keys.due.encode() not in dump(ports, prefix)

    names = [keys.documents, keys.index, keys.by_owner(owner), keys.by_owner(TENANTLESS), keys.due]
    assert len({key_slot(name.encode()) for name in names}) == 1
    assert all(
        key.encode().startswith(Namespace(prefix).scope_pattern[:-1].encode()) for key in names
    )
    asyncio.run(body())


def test_concurrent_updates_from_several_connections_one_wins_per_version(
    where: tuple[str, list[int]], prefix: str
) -> None:
    url, _ = where

    async def body() -> None:
        async with AsyncExitStack() as stack:
            backends = [await stack.enter_async_context(opened(url, prefix)) for _ in range(6)]
            first = await backends[0].schedules.create_schedule(TENANTLESS, _schedule("s1"))
            assert isinstance(first, CronSchedule)
            for version in range(1, 6):

                async def update(index: int, copy: int, version: int) -> object:
                    change = _schedule("s1", metadata={"by": f"{index}.{copy}"})
                    return await backends[index].schedules.update_schedule(
                        TENANTLESS, change, version
                    )

                answers = await asyncio.gather(
                    *(update(index, copy, version) for index in range(6) for copy in range(2))
                )
                winners = [a for a in answers if isinstance(a, CronSchedule)]
                assert len(winners) == 1, answers
                assert all(
                    isinstance(a, StaleCheckpoint) for a in answers if a is not winners[0]
                ), answers
                stored = await backends[1].schedules.fetch_schedule(TENANTLESS, "s1")
                assert stored == winners[0] and stored.version == version + 1

    asyncio.run(body())


def test_tenants_are_isolated(where: tuple[str, list[int]], prefix: str) -> None:
    url, _ = where
    owners: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b")]

    async def body() -> None:
        async with opened(url, prefix) as backend:
            store = backend.schedules
            for owner in owners:
                for name in ("s1", "s2"):
                    stored = await store.create_schedule(
                        owner, _schedule(name, metadata={"owner": str(owner)})
                    )
                    assert isinstance(stored, CronSchedule)
            assert isinstance(await store.fetch_schedule(Tenant("c"), "s1"), NotFound)
            assert await store.delete_schedule(Tenant("c"), "s1") is False
            update = await store.update_schedule(Tenant("c"), _schedule("s1"), 1)
            assert isinstance(update, NotFound)
            # a's change is a's alone
            changed = await store.update_schedule(Tenant("a"), _schedule("s1", paused=True), 1)
            assert isinstance(changed, CronSchedule)
            for owner in owners:
                page = await store.list_schedules(owner)
                assert [(s.id, s.tenant_id) for s in page.schedules] == [
                    ("s1", getattr(owner, "id", None)),
                    ("s2", getattr(owner, "id", None)),
                ]
                fetched = await store.fetch_schedule(owner, "s1")
                assert isinstance(fetched, CronSchedule)
                assert fetched.paused is (owner == Tenant("a"))
            everything = await store.list_schedules(SYSTEM)
            assert [schedule_order(s) for s in everything.schedules] == [
                ("s1", ""),
                ("s1", "a"),
                ("s1", "b"),
                ("s2", ""),
                ("s2", "a"),
                ("s2", "b"),
            ]
            assert await store.delete_schedule(Tenant("b"), "s2") is True
            left = await store.list_schedules(SYSTEM)
            assert ("s2", "b") not in [schedule_order(s) for s in left.schedules]

    asyncio.run(body())


#: Ids whose listing order is not what a naive byte encoding would give.
AWKWARD = ["a", "a\x00", "a\x00b", "a\x01", "ab", "a b", "b", "é", "z\x00\x00", "z\x00\x01", "€"]


def test_listing_pages_through_every_schedule_in_order(
    where: tuple[str, list[int]], prefix: str
) -> None:
    url, _ = where
    owners: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("a\x00"), Tenant("b")]

    async def body() -> None:
        async with opened(url, prefix) as backend:
            store = backend.schedules
            made: list[CronSchedule] = []
            for owner in owners:
                for schedule_id in AWKWARD:
                    stored = await store.create_schedule(owner, _schedule(schedule_id))
                    assert isinstance(stored, CronSchedule)
                    made.append(stored)
            for scope in (SYSTEM, *owners):
                expected = sorted(
                    (
                        s
                        for s in made
                        if scope is SYSTEM or s.tenant_id == getattr(scope, "id", None)
                    ),
                    key=schedule_order,
                )
                for limit in (1, 3, 100):
                    seen: list[CronSchedule] = []
                    after = None
                    while True:
                        page = await store.list_schedules(scope, after, limit)
                        assert len(page.schedules) <= limit
                        seen.extend(page.schedules)
                        after = page.next_after
                        if not page.has_more:
                            break
                    assert seen == expected, (scope, limit)
            # a cursor between stored entries (of no stored schedule) is a plain bound
            page = await store.list_schedules(SYSTEM, ScheduleCursor("a\x00", "a"), 2)
            assert [schedule_order(s) for s in page.schedules] == [
                ("a\x00", "a\x00"),
                ("a\x00", "b"),
            ]

    asyncio.run(body())


def test_due_schedules_come_from_the_due_index_oldest_first(
    where: tuple[str, list[int]], prefix: str
) -> None:
    url, _ = where
    clock = ManualClock(T0)

    async def body() -> None:
        async with opened(url, prefix, clock=clock) as backend:
            store = backend.schedules
            rows: list[tuple[OwnerScope, CronSchedule]] = [
                (TENANTLESS, _schedule("late", next_tick_at=T0 + 2 * H)),
                (Tenant("b"), _schedule("tie", next_tick_at=T0 + H)),
                (Tenant("a"), _schedule("tie", next_tick_at=T0 + H)),
                (TENANTLESS, _schedule("buffered", next_tick_at=T0 + 3 * H, buffered_tick_at=T0)),
                (TENANTLESS, _schedule("paused", next_tick_at=T0, paused=True)),
                (TENANTLESS, _schedule("done", next_tick_at=None)),
                (TENANTLESS, _schedule("future", next_tick_at=T0 + 5 * H)),
            ]
            for owner, schedule in rows:
                assert isinstance(await store.create_schedule(owner, schedule), CronSchedule)
            due = await store.due_schedules(T0 + 2 * H)
            assert [schedule_order(s) for s in due] == [
                ("buffered", ""),
                ("tie", "a"),
                ("tie", "b"),
                ("late", ""),
            ]
            assert [s.id for s in await store.due_schedules(T0 + 2 * H, limit=2)] == [
                "buffered",
                "tie",
            ]
            assert await store.due_schedules(T0 - timedelta(microseconds=1)) == ()
            # no ``now``: the backend's clock
            assert [s.id for s in await store.due_schedules()] == ["buffered"]
            clock.advance(H)
            assert len(await store.due_schedules()) == 3
            # an update moves the entry; a tick done takes it out
            done = await store.update_schedule(TENANTLESS, _schedule("late", next_tick_at=None), 1)
            assert isinstance(done, CronSchedule)
            assert "late" not in [s.id for s in await store.due_schedules(T0 + 10 * H)]

    asyncio.run(body())


def test_bad_input_is_refused_and_changes_nothing(
    where: tuple[str, list[int]], prefix: str
) -> None:
    url, ports = where
    small = Limits(max_run_bytes=2000)

    async def body() -> None:
        async with opened(url, prefix, limits=small) as backend:
            store = backend.schedules
            stored = await store.create_schedule(TENANTLESS, _schedule("s1"))
            assert isinstance(stored, CronSchedule)
            before = dump(ports, prefix)
            with pytest.raises(ValueError):
                await store.create_schedule(SYSTEM, _schedule("s2"))  # type: ignore[arg-type]
            with pytest.raises(ValueError):
                await store.create_schedule(TENANTLESS, _schedule("s2", cron=""))
            with pytest.raises(ValueError):
                await store.create_schedule(
                    TENANTLESS, _schedule("s2", next_tick_at=datetime(2026, 1, 1))
                )
            with pytest.raises(TypeError):
                await store.create_schedule(TENANTLESS, {"id": "s2"})  # type: ignore[arg-type]
            big = _schedule("s2", input={"blob": "x" * 4000})
            assert isinstance(await store.create_schedule(TENANTLESS, big), TooLarge)
            with pytest.raises(ValueError):
                await store.update_schedule(TENANTLESS, _schedule("s1", catchup_ms=-1), 1)
            with pytest.raises(TypeError):
                await store.update_schedule(TENANTLESS, _schedule("s1"), "1")  # type: ignore[arg-type]
            assert isinstance(
                await store.update_schedule(TENANTLESS, attrs.evolve(big, id="s1"), 1), TooLarge
            )
            with pytest.raises(ValueError):
                await store.fetch_schedule(TENANTLESS, "")
            with pytest.raises(ValueError):
                await store.delete_schedule(TENANTLESS, "")
            with pytest.raises(ValueError):
                await store.list_schedules(SYSTEM, None, 0)
            with pytest.raises(TypeError):
                await store.list_schedules(SYSTEM, ("s1", None), 5)  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                await store.list_schedules(SYSTEM, ScheduleCursor(5, None), 5)  # type: ignore[arg-type]
            with pytest.raises(ValueError):
                await store.due_schedules(T0, 0)
            with pytest.raises(ValueError):
                await store.due_schedules(datetime(2026, 1, 1), 5)
            assert dump(ports, prefix) == before
            assert await store.fetch_schedule(TENANTLESS, "s1") == stored

    asyncio.run(body())


async def _apply(store: Any, step: tuple[Any, ...]) -> object:
    """One operation; an exception is an answer too (its type)."""
    name, *args = step
    try:
        answer = await getattr(store, name)(*args)
    except (TypeError, ValueError) as exc:
        return type(exc)
    if isinstance(answer, Conflict | NotFound | StaleCheckpoint | TooLarge):
        return type(answer)
    return answer


def test_the_same_answers_as_the_memory_reference(
    where: tuple[str, list[int]], prefix: str
) -> None:
    url, _ = where
    limits = Limits(max_run_bytes=3000)
    a, b = Tenant("a"), Tenant("b")
    steps: list[tuple[Any, ...]] = [
        ("create_schedule", a, _schedule("s1")),
        ("create_schedule", a, _schedule("s1")),
        ("create_schedule", b, _schedule("s1", next_tick_at=T0)),
        ("create_schedule", TENANTLESS, _schedule("s0", next_tick_at=T0 + 2 * H)),
        ("create_schedule", TENANTLESS, _schedule("s9", input={"x": "y" * 5000})),
        ("update_schedule", a, _schedule("s1", paused=True), 1),
        ("update_schedule", a, _schedule("s1", paused=False), 1),
        ("update_schedule", a, _schedule("s1", paused=False), 2),
        ("update_schedule", b, _schedule("missing"), 1),
        ("update_schedule", b, _schedule("s1", cron=""), 1),
        ("update_schedule", b, _schedule("s1", input={"x": "y" * 5000}), 1),
        ("fetch_schedule", a, "s1"),
        ("fetch_schedule", b, "s0"),
        ("due_schedules", T0 + 2 * H, 10),
        ("due_schedules", T0 + H, 1),
        ("list_schedules", SYSTEM, None, 2),
        ("list_schedules", SYSTEM, ScheduleCursor("s1", "a"), 2),
        ("list_schedules", a, None, 10),
        ("list_schedules", TENANTLESS, None, 10),
        ("delete_schedule", a, "s1"),
        ("delete_schedule", a, "s1"),
        ("list_schedules", SYSTEM, None, 10),
        ("due_schedules", T0 + 10 * H, 10),
    ]

    async def body() -> None:
        memory = MemorySchedules(lambda: T0, limits)
        async with opened(url, prefix, limits=limits, clock=ManualClock(T0)) as backend:
            for step in steps:
                expected = await _apply(memory, step)
                assert await _apply(backend.schedules, step) == expected, step

    asyncio.run(body())


def test_the_store_works_after_reopening(where: tuple[str, list[int]], prefix: str) -> None:
    url, _ = where

    async def body() -> None:
        async with opened(url, prefix) as backend:
            stored = await backend.schedules.create_schedule(Tenant("a"), _schedule("s1"))
        again = RedisBackend.from_url(with_prefix(url, prefix))
        await again.open()
        try:
            assert await again.schedules.fetch_schedule(Tenant("a"), "s1") == stored
        finally:
            await again.close()

    asyncio.run(body())
