"""Cron schedules (the optional ``schedules`` feature, ``backend.schedules``): SCHED-CREATE,
SCHED-UPDATE-FENCE, SCHED-DUE, SCHED-LIST, SCHED-DELETE, SCHED-BAD-INPUT, SCHED-TOO-LARGE.

The store keeps :class:`~docket.records.CronSchedule` documents per owner scope and
indexes their ``due_at``; it never reads the cron expression. A create stores version 1
owned by its caller (a taken id is ``Conflict``); every later change is fenced on the
version it was read at and stores the next one — of racing updates from one version
exactly one lands. ``due_schedules`` reads, across tenants, the unpaused schedules due
at ``now``, oldest first, at most ``limit``; listings page by ``(id, tenant)`` with a
cursor, each scope sees its own and ``System`` all. Bad input raises
``TypeError``/``ValueError`` and stores nothing; a schedule past ``max_run_bytes`` is
``TooLarge``. Without the feature the cases check nothing (docs/contract.md#schedules).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import attrs
import pytest

from docket.contract import Conflict, Limits, NotFound, StaleCheckpoint, TooLarge
from docket.contract.capabilities import Feature
from docket.contract.protocols import ScheduleStore
from docket.records import (
    SYSTEM,
    TENANTLESS,
    CronSchedule,
    OwnerScope,
    ScheduleCursor,
    SchedulePage,
    Scope,
    Tenant,
    tenant_id_of,
)
from docket_contract_tests.fixtures import junk
from docket_contract_tests.kit import Kit, invariant

OWNERS = pytest.mark.parametrize(
    "owner", [TENANTLESS, Tenant("acme")], ids=["tenantless", "tenant"]
)
US = timedelta(microseconds=1)


def _store(k: Kit, backend: Any = None) -> ScheduleStore | None:
    """The subject's schedule store, when it declares ``schedules`` (else ``None``)."""
    if not k.declares(Feature.SCHEDULES):
        return None
    store = getattr(backend or k.b, "schedules", None)
    k.check(
        isinstance(store, ScheduleStore),
        "the backend declares schedules but .schedules is not a ScheduleStore",
    )
    assert isinstance(store, ScheduleStore)
    return store


def _schedule(k: Kit, label: str = "s", **changes: Any) -> CronSchedule:
    base = CronSchedule(
        id=k.name(label),
        graph_id=k.name("g"),
        cron="*/5 * * * *",
        created_at=k.t0,
        updated_at=k.t0,
        input={"n": 1},
        next_tick_at=k.at(300),
        metadata={"by": "kit"},
    )
    return attrs.evolve(base, **changes)


async def _created(
    k: Kit, store: ScheduleStore, owner: OwnerScope, s: CronSchedule
) -> CronSchedule:
    got = await store.create_schedule(owner, s)
    stored = k.isa(got, CronSchedule, f"create_schedule({owner}, {s.id!r})")
    k.eq(stored, attrs.evolve(s, version=1, tenant_id=tenant_id_of(owner)), "the stored schedule")
    return stored


async def _listed(store: ScheduleStore, scope: Scope, limit: int = 100) -> list[CronSchedule]:
    out: list[CronSchedule] = []
    after: ScheduleCursor | None = None
    for _ in range(1_000):
        page = await store.list_schedules(scope, after, limit)
        assert isinstance(page, SchedulePage)
        out.extend(page.schedules)
        if not page.has_more:
            return out
        after = page.next_after
    raise AssertionError("list_schedules never ran out of pages")


@invariant("SCHED-CREATE")
@OWNERS
async def test_a_schedule_is_created_once_per_scope_at_version_one(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    # whatever version and tenant the caller sends, the store sets them
    sent = _schedule(k, version=7, tenant_id="someone-else", paused=True)
    stored = await _created(k, store, owner, attrs.evolve(sent, version=1, tenant_id=None))
    again = await store.create_schedule(owner, sent)
    k.isa(again, Conflict, "a second create of the same id in the same scope")
    k.eq(await store.fetch_schedule(owner, sent.id), stored, "unchanged by the conflict")
    # the same id in another scope is another schedule
    other = k.tenant("b")
    theirs = await _created(k, store, other, _schedule(k, cron="0 0 * * *"))
    k.eq(await store.fetch_schedule(other, sent.id), theirs, "the other scope's")
    k.eq(await store.fetch_schedule(owner, sent.id), stored, "ours unchanged")
    await k.raises_async(
        (TypeError, ValueError), lambda: store.create_schedule(junk(SYSTEM), sent), "System"
    )


@invariant("SCHED-UPDATE-FENCE")
@OWNERS
async def test_an_update_is_fenced_on_the_version_and_keeps_the_identity(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    stored = await _created(k, store, owner, _schedule(k))
    change = attrs.evolve(
        stored,
        created_at=k.at(999),
        tenant_id="someone-else",
        updated_at=k.at(10),
        next_tick_at=k.at(600),
        last_tick_at=k.at(300),
        last_run_id=k.name("run"),
        paused=True,
    )
    got = await store.update_schedule(owner, change, 1)
    want = attrs.evolve(change, created_at=k.t0, tenant_id=tenant_id_of(owner), version=2)
    k.eq(k.isa(got, CronSchedule, "update at version 1"), want, "the updated schedule")
    k.eq(await store.fetch_schedule(owner, stored.id), want, "fetched after the update")
    stale = await store.update_schedule(owner, attrs.evolve(change, cron="1 1 * * *"), 1)
    k.isa(stale, StaleCheckpoint, "an update fenced on a version that moved on")
    k.eq(await store.fetch_schedule(owner, stored.id), want, "unchanged by the stale update")
    absent = await store.update_schedule(owner, _schedule(k, "nobody"), 1)
    k.isa(absent, NotFound, "an update of an absent schedule")
    elsewhere = await store.update_schedule(k.tenant("b"), change, 2)
    k.isa(elsewhere, NotFound, "an update from another scope")
    k.eq(await store.fetch_schedule(owner, stored.id), want, "unchanged by the other scope")


@invariant("SCHED-UPDATE-FENCE")
async def test_of_racing_updates_from_one_version_exactly_one_lands(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    owner = k.tenant("a")
    current = await _created(k, store, owner, _schedule(k))
    racers = 4
    for version in range(1, max(k.rounds // 5, 10) + 1):

        def update(i: int, read: CronSchedule = current, at: int = version) -> Callable[[], Any]:
            doc = attrs.evolve(read, metadata={"writer": i}, updated_at=k.at(at))
            return lambda: store.update_schedule(owner, doc, read.version)

        results = await k.gather_barrier(*(update(i) for i in range(racers)))
        won = [r for r in results if isinstance(r, CronSchedule)]
        k.eq(len(won), 1, f"version {version}: exactly one racing update lands: {results}")
        k.check(
            all(isinstance(r, StaleCheckpoint) for r in results if r is not won[0]),
            f"version {version}: the others are StaleCheckpoint: {results}",
        )
        k.eq(won[0].version, version + 1, "the winner stored the next version")
        k.eq(await store.fetch_schedule(owner, current.id), won[0], "the winner is stored")
        current = won[0]


@invariant("SCHED-DUE")
async def test_due_schedules_are_the_unpaused_ones_due_oldest_first_up_to_the_limit(
    docket_kit: Kit,
) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    a, b = k.tenant("a"), k.tenant("b")
    s1 = await _created(k, store, a, _schedule(k, "s1", next_tick_at=k.at(30)))
    s2 = await _created(k, store, b, _schedule(k, "s2", next_tick_at=k.at(10)))
    s3 = await _created(
        k, store, TENANTLESS, _schedule(k, "s3", next_tick_at=k.at(50), buffered_tick_at=k.at(20))
    )
    await _created(k, store, a, _schedule(k, "paused", next_tick_at=k.at(1), paused=True))
    await _created(k, store, a, _schedule(k, "done", next_tick_at=None))
    await _created(k, store, b, _schedule(k, "later", next_tick_at=k.at(3600)))

    async def due(now: datetime, limit: int = 100) -> list[str]:
        return [s.id for s in await store.due_schedules(now, limit)]

    k.eq(await due(k.at(10) - US), [], "nothing is due before the first tick")
    k.eq(await due(k.at(10)), [s2.id], "due exactly at its tick")
    k.eq(await due(k.at(30)), [s2.id, s3.id, s1.id], "oldest due_at first, any tenant")
    k.eq(await due(k.at(30), 2), [s2.id, s3.id], "at most limit")
    k.eq(await due(k.at(30), 1), [s2.id], "limit 1")
    everything = await due(k.at(0) + timedelta(days=365))
    k.eq(everything[:3], [s2.id, s3.id, s1.id], "the order holds")
    k.eq(sorted(everything), sorted([s1.id, s2.id, s3.id, k.name("later")]), "never paused")
    full = await store.due_schedules(k.at(30), 10)
    k.eq(full[0], s2, "due_schedules hands back the stored schedules")
    # pausing takes a schedule out, resuming puts it back
    paused = await store.update_schedule(b, attrs.evolve(s2, paused=True), s2.version)
    k.isa(paused, CronSchedule, "pause")
    k.eq(await due(k.at(30)), [s3.id, s1.id], "a paused schedule is never due")
    resumed = await store.update_schedule(b, attrs.evolve(s2, paused=False), s2.version + 1)
    k.isa(resumed, CronSchedule, "resume")
    k.eq(await due(k.at(30)), [s2.id, s3.id, s1.id], "resumed, due again")
    # advancing a tick moves it in the index
    advanced = await store.update_schedule(a, attrs.evolve(s1, next_tick_at=k.at(3000)), s1.version)
    k.isa(advanced, CronSchedule, "advance")
    k.eq(await due(k.at(30)), [s2.id, s3.id], "an advanced schedule is due at its next tick")


@invariant("SCHED-LIST")
async def test_listings_page_by_id_and_each_scope_sees_its_own(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    a, b = k.tenant("a"), k.tenant("b")
    mine = [await _created(k, store, a, _schedule(k, f"s{i:02d}")) for i in range(7)]
    theirs = [await _created(k, store, b, _schedule(k, f"s{i:02d}")) for i in range(3)]
    plain = [await _created(k, store, TENANTLESS, _schedule(k, "s00"))]
    k.eq(await _listed(store, a, 3), mine, "tenant a, paged by 3")
    k.eq(await _listed(store, b, 2), theirs, "tenant b, paged by 2")
    k.eq(await _listed(store, TENANTLESS, 1), plain, "tenantless")
    key: Callable[[CronSchedule], tuple[str, str]] = lambda s: (s.id, s.tenant_id or "")  # noqa: E731
    everyone = sorted(mine + theirs + plain, key=key)
    for size in (1, 4, 100):
        k.eq(await _listed(store, SYSTEM, size), everyone, f"System sees all (pages of {size})")
    first = await store.list_schedules(a, None, 3)
    k.eq((first.schedules, first.has_more), (tuple(mine[:3]), True), "the first page")
    k.eq(first.next_after, ScheduleCursor(mine[2].id, mine[2].tenant_id), "its cursor")
    last = await store.list_schedules(a, ScheduleCursor(mine[5].id, mine[5].tenant_id), 3)
    k.eq((last.schedules, last.has_more), ((mine[6],), False), "the last page")
    empty = await store.list_schedules(k.tenant("nobody"), None, 10)
    k.eq((empty.schedules, empty.has_more), ((), False), "a scope with none")
    k.isa(await store.fetch_schedule(b, k.name("s05")), NotFound, "another tenant's schedule")


@invariant("SCHED-DELETE")
@OWNERS
async def test_a_delete_removes_only_the_owners_schedule(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    stored = await _created(k, store, owner, _schedule(k, next_tick_at=k.at(1)))
    other = k.tenant("b")
    theirs = await _created(k, store, other, _schedule(k, next_tick_at=k.at(1)))
    k.eq(await store.delete_schedule(k.tenant("c"), stored.id), False, "another scope's delete")
    k.eq(await store.fetch_schedule(owner, stored.id), stored, "kept")
    k.eq(await store.delete_schedule(owner, stored.id), True, "the owner's delete")
    k.isa(await store.fetch_schedule(owner, stored.id), NotFound, "gone")
    k.eq(await store.delete_schedule(owner, stored.id), False, "a second delete")
    k.eq([s.id for s in await store.due_schedules(k.at(1), 10)], [theirs.id], "not due either")
    k.eq(await _listed(store, SYSTEM), [theirs], "not listed")
    gone = await store.update_schedule(owner, stored, 1)
    k.isa(gone, NotFound, "an update of a deleted schedule")
    k.eq(await store.fetch_schedule(other, stored.id), theirs, "the other scope's is kept")
    recreated = await _created(k, store, owner, _schedule(k, cron="0 * * * *"))
    k.eq(recreated.version, 1, "a recreated schedule starts again at version 1")


def _bad(k: Kit) -> dict[str, CronSchedule]:
    good = _schedule(k)
    naive = datetime(2026, 7, 15, 12, 0)
    plus2 = datetime(2026, 7, 15, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    limits = k.b.capabilities().limits
    return {
        "empty-id": attrs.evolve(good, id=""),
        "long-id": attrs.evolve(good, id="x" * (limits.max_id_bytes + 1)),
        "empty-graph": attrs.evolve(good, graph_id=""),
        "empty-cron": attrs.evolve(good, cron=""),
        "cron-not-text": attrs.evolve(good, cron=junk(5)),
        "bad-overlap": attrs.evolve(good, overlap=junk("sometimes")),
        "negative-catchup": attrs.evolve(good, catchup_ms=-1),
        "bool-catchup": attrs.evolve(good, catchup_ms=junk(True)),
        "paused-not-bool": attrs.evolve(good, paused=junk(1)),
        "naive-created": attrs.evolve(good, created_at=naive),
        "non-utc-tick": attrs.evolve(good, next_tick_at=plus2),
        "empty-graph-hash": attrs.evolve(good, graph_hash=""),
        "input-not-object": attrs.evolve(good, input=junk([1, 2])),
        "input-not-json": attrs.evolve(good, input=junk({"x": {1, 2}})),
        "metadata-not-json": attrs.evolve(good, metadata=junk({"x": object()})),
    }


BAD_NAMES = (
    "empty-id",
    "long-id",
    "empty-graph",
    "empty-cron",
    "cron-not-text",
    "bad-overlap",
    "negative-catchup",
    "bool-catchup",
    "paused-not-bool",
    "naive-created",
    "non-utc-tick",
    "empty-graph-hash",
    "input-not-object",
    "input-not-json",
    "metadata-not-json",
)


@invariant("SCHED-BAD-INPUT")
@pytest.mark.parametrize("defect", BAD_NAMES)
async def test_a_malformed_schedule_is_a_typed_error_and_stores_nothing(
    docket_kit: Kit, defect: str
) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    owner = k.tenant("a")
    bad = _bad(k)[defect]
    await k.raises_async(
        (TypeError, ValueError), lambda: store.create_schedule(owner, bad), "create"
    )
    k.eq(await _listed(store, SYSTEM), [], "nothing stored by a bad create")
    stored = await _created(k, store, owner, _schedule(k))
    if defect in ("empty-id", "long-id"):  # an update names the stored id
        return
    await k.raises_async(
        (TypeError, ValueError),
        lambda: store.update_schedule(owner, attrs.evolve(bad, id=stored.id), 1),
        "update",
    )
    k.eq(await store.fetch_schedule(owner, stored.id), stored, "unchanged by a bad update")
    k.eq(await _listed(store, SYSTEM), [stored], "nothing else stored")


@invariant("SCHED-BAD-INPUT")
async def test_bad_arguments_are_typed_errors(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    owner = k.tenant("a")
    stored = await _created(k, store, owner, _schedule(k))
    calls: dict[str, Callable[[], Any]] = {
        "create: not a schedule": lambda: store.create_schedule(owner, junk({"id": "x"})),
        "update: not a schedule": lambda: store.update_schedule(owner, junk("x"), 1),
        "update: version not int": lambda: store.update_schedule(owner, stored, junk("1")),
        "update: System": lambda: store.update_schedule(junk(SYSTEM), stored, 1),
        "fetch: empty id": lambda: store.fetch_schedule(owner, ""),
        "delete: empty id": lambda: store.delete_schedule(owner, ""),
        "list: limit 0": lambda: store.list_schedules(owner, None, 0),
        "list: bad cursor": lambda: store.list_schedules(owner, junk("s"), 10),
        "due: limit 0": lambda: store.due_schedules(k.t0, 0),
        "due: limit bool": lambda: store.due_schedules(k.t0, junk(True)),
    }
    for what, call in calls.items():
        await k.raises_async((TypeError, ValueError), call, what)
    k.eq(await store.fetch_schedule(owner, stored.id), stored, "unchanged by every bad call")
    k.eq(await _listed(store, SYSTEM), [stored], "nothing else stored")


@invariant("SCHED-TOO-LARGE")
async def test_a_schedule_past_max_run_bytes_is_too_large_and_stores_nothing(
    docket_kit: Kit,
) -> None:
    k = docket_kit
    if _store(k) is None:
        return
    backend, limits = await k.small_limits(Limits(max_run_bytes=4096))
    store = _store(k, backend)
    assert store is not None
    owner = k.tenant("a")
    huge = _schedule(k, input={"pad": "x" * limits.max_run_bytes})
    got = await store.create_schedule(owner, huge)
    too = k.isa(got, TooLarge, "create past max_run_bytes")
    k.eq(too.limit, "max_run_bytes", "the limit named")
    k.eq(await _listed(store, SYSTEM), [], "nothing stored")
    stored = await _created(k, store, owner, _schedule(k))
    grown = await store.update_schedule(owner, attrs.evolve(stored, input=huge.input), 1)
    k.isa(grown, TooLarge, "update past max_run_bytes")
    k.eq(await store.fetch_schedule(owner, stored.id), stored, "unchanged by the large update")
