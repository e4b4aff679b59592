"""The admission ledger on PostgreSQL (``Feature.ADMISSION``, schema version 10), against
the real server the conftest starts: a scripted sequence answers exactly as the memory
reference step by step, refused calls change nothing, and eight connections racing to
admit and finish never hold more admitted starts than the limits allow."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from docket_postgres import PostgresBackend
from docket_postgres.testing import connect as admin

from docket.clock import ManualClock
from docket.contract import Feature, NotFound
from docket.contract.admission import MAX_START_BYTES
from docket.contract.memory import MemoryBackend
from docket.records import Admission, HeldStart, QueueConfig

Names = Callable[[str], str]
T0 = datetime(2030, 1, 1, tzinfo=UTC)
Backend = Any  # PostgresBackend or MemoryBackend: the same calls on both
Step = tuple[str, object]


async def _script(backend: Backend, clock: ManualClock) -> list[Step]:
    """Admits, holds, finishes, promotions, drops and reads, over tenants and priorities
    and a limit raised then lowered; every answer, labelled."""
    adm = backend.admissions
    queues = backend.queues
    out: list[Step] = []

    async def step(label: str, call: Awaitable[object]) -> object:
        got = await call
        out.append((label, got))
        return got

    def tick() -> None:
        clock.advance(timedelta(seconds=1))

    await step("admit unknown queue", adm.admit("nope", "x", None, 0, b"s"))
    await step("admit default", adm.admit("default", "d1", "a", 0, b"d1"))
    await step("set onb", queues.set_queue(QueueConfig(name="onb", tenant_admission_limit=2)))
    await step(
        "set onb limits",
        queues.set_queue(QueueConfig(name="onb", admission_limit=3, tenant_admission_limit=2)),
    )
    starts = [
        ("r1", "a", 0),
        ("r2", "a", 0),
        ("r3", "a", 10),  # a at its cap: held though the queue has room
        ("r4", None, 0),
        ("r5", "b", 0),  # queue full
        ("r6", "b", 9),
        ("r7", None, -3),
        ("r\x00nul", "t\x00nul", 2),  # any string: NUL in the run id and the tenant
        ("r8", "c", 1),
    ]
    for run_id, tenant, priority in starts:
        tick()
        await step(f"admit {run_id}", adm.admit("onb", run_id, tenant, priority, run_id.encode()))
    await step("readmit held r3", adm.admit("onb", "r3", "a", 7, b"other"))
    await step("readmit admitted r1", adm.admit("onb", "r1", None, 0, b"other"))
    await step("view", adm.admissions("onb"))
    await step("view limit 2", adm.admissions("onb", limit=2))
    await step("list", queues.list_queues())
    await step("held_start r6 b", adm.held_start("r6", "b"))
    await step("held_start r6 a", adm.held_start("r6", "a"))
    await step("held_start r4 none", adm.held_start("r4", None))
    await step("held_start nul", adm.held_start("r\x00nul", "t\x00nul"))
    await step("held_start r4 empty tenant", adm.held_start("r4", ""))
    await step("held_start d1", adm.held_start("d1", "a"))
    await step("held_start missing", adm.held_start("zz", None))
    tick()
    # r4 frees a place: r3 (priority 10) is skipped (a is at its cap), r6 (priority 9)
    # is promoted, then the queue is full; held r6 and unknown ids are not finished
    await step("finish r4", adm.finish_admitted("onb", ["r4", "unknown", "r6"]))
    await step("finish nothing", adm.finish_admitted("onb", []))
    await step("finish on unknown queue", adm.finish_admitted("nope", ["r1"]))
    await step("promote on unknown queue", adm.promote_held("nope"))
    await step("promote when full", adm.promote_held("onb"))
    await step("drop admitted r1", adm.drop_held("onb", "r1"))
    await step("drop held r7", adm.drop_held("onb", "r7"))
    await step("drop again r7", adm.drop_held("onb", "r7"))
    await step("drop on unknown queue", adm.drop_held("nope", "r7"))
    tick()
    await step(
        "raise limits",
        queues.set_queue(QueueConfig(name="onb", admission_limit=6, tenant_admission_limit=3)),
    )
    await step("promote after raise", adm.promote_held("onb", now=T0 + timedelta(hours=1)))
    await step("view after raise", adm.admissions("onb"))
    tick()
    await step("admit r9 a", adm.admit("onb", "r9", "a", 0, b"r9"))
    await step("admit r10 d", adm.admit("onb", "r10", "d", 0, b"r10", now=T0 + timedelta(days=1)))
    await step("lower limit", queues.set_queue(QueueConfig(name="onb", admission_limit=1)))
    tick()
    await step("finish r1 over the lowered cap", adm.finish_admitted("onb", ["r1"]))
    await step("view lowered", adm.admissions("onb"))
    await step("list lowered", queues.list_queues())
    await step("admit on a queue without limits", adm.admit("default", "d2", None, 3, b""))
    await step("view default", adm.admissions("default"))
    await step("view unknown", adm.admissions("nope"))
    await step("lift limits", queues.set_queue(QueueConfig(name="onb")))
    tick()
    await step("finish everything admitted", adm.finish_admitted("onb", ["r1", "r3", "r4"]))
    await step("view lifted", adm.admissions("onb"))
    await step("list end", queues.list_queues())
    return out


def _bad_calls(backend: Backend) -> list[Callable[[], Awaitable[object]]]:
    adm = backend.admissions
    return [
        lambda: adm.admit("bad name", "x", None, 0, b""),
        lambda: adm.admit("onb", "", None, 0, b""),
        lambda: adm.admit("onb", "x" * 256, None, 0, b""),
        lambda: adm.admit("onb", "x", "", 0, b""),
        lambda: adm.admit("onb", "x", 5, 0, b""),
        lambda: adm.admit("onb", "x", None, 101, b""),
        lambda: adm.admit("onb", "x", None, True, b""),
        lambda: adm.admit("onb", "x", None, 0, "text"),
        lambda: adm.admit("onb", "x", None, 0, b"\0" * (MAX_START_BYTES + 1)),
        lambda: adm.finish_admitted("onb", "r1"),
        lambda: adm.finish_admitted("onb", ["r1", ""]),
        lambda: adm.finish_admitted("", ["r1"]),
        lambda: adm.promote_held("bad name"),
        lambda: adm.drop_held("onb", ""),
        lambda: adm.held_start("", None),
        lambda: adm.admissions("onb", limit=0),
        lambda: adm.admissions("onb", limit=True),
    ]


async def _refusals(backend: Backend) -> list[Step]:
    """Every malformed call raises ``ValueError``; the ledger reads the same after."""
    before = (await backend.admissions.admissions("onb"), await backend.queues.list_queues())
    for bad in _bad_calls(backend):
        with pytest.raises(ValueError):
            await bad()
    after = (await backend.admissions.admissions("onb"), await backend.queues.list_queues())
    assert after == before
    return [("after refusals", after)]


def test_the_ledger_answers_as_the_reference_step_by_step(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        memory = MemoryBackend(clock=clock)
        expected = await _script(memory, clock) + await _refusals(memory)
        clock.set(T0)
        schema = schema_name("adm")
        pg = PostgresBackend(pg_url, schema=schema, clock=clock, pool_max_size=2)
        await pg.open()
        try:
            assert Feature.ADMISSION in pg.capabilities().features
            got = await _script(pg, clock) + await _refusals(pg)
        finally:
            await pg.close()
        for (label, want), (same, answer) in zip(expected, got, strict=True):
            assert (same, answer) == (label, want)
        answers = dict(expected)
        # the script exercises what it says it does
        assert answers["admit unknown queue"] == NotFound("queue")
        assert answers["admit r3"] == Admission.HELD
        assert answers["admit r4"] == Admission.ADMITTED
        assert answers["readmit held r3"] == Admission.HELD
        promoted = answers["finish r4"]
        assert isinstance(promoted, list)
        assert [s.run_id for s in promoted] == ["r6"]
        assert answers["held_start r6 b"] != promoted[0]  # promotion moved its ``at``
        after_raise = answers["promote after raise"]
        assert isinstance(after_raise, list) and len(after_raise) > 1
        assert all(isinstance(s, HeldStart) for s in after_raise)
        assert answers["finish r1 over the lowered cap"] == []

    asyncio.run(body())


def test_the_ledger_runs_on_the_database_clock(pg_url: str, schema_name: Names) -> None:
    """Without a test clock a start's ``at`` is the server's ``clock_timestamp()``."""

    async def body() -> None:
        backend = PostgresBackend(pg_url, schema=schema_name("admclock"), pool_max_size=2)
        await backend.open()
        try:
            await backend.queues.set_queue(QueueConfig(name="q", admission_limit=1))
            before = await backend.now()
            assert await backend.admissions.admit("q", "a", None, 0, b"") == Admission.ADMITTED
            assert await backend.admissions.admit("q", "b", None, 0, b"") == Admission.HELD
            (promoted,) = await backend.admissions.finish_admitted("q", ["a"])
            after = await backend.now()
            assert promoted.run_id == "b" and before <= promoted.at <= after
        finally:
            await backend.close()

    asyncio.run(body())


def test_eight_racing_connections_never_admit_past_the_limits(
    pg_url: str, schema_name: Names
) -> None:
    """Eight backends (eight connections) admit starts of three tenants into a queue
    limited to 3 (2 per tenant) and finish some of what they were admitted, 50 rounds:
    the starts admitted (answered ADMITTED or promoted) never exceed the limits, every
    held start is promoted at most once, and the table agrees."""

    async def body() -> None:
        schema = schema_name("admrace")
        backends = [PostgresBackend(pg_url, schema=schema, pool_max_size=1) for _ in range(8)]
        for backend in backends:
            await backend.open()
        try:
            await backends[0].queues.set_queue(
                QueueConfig(name="q", admission_limit=3, tenant_admission_limit=2)
            )
            rng = random.Random(10)
            tenants = ["a", "b", None]
            tenant_of: dict[str, str | None] = {}
            admitted: dict[int, list[str]] = {i: [] for i in range(8)}
            held: set[str] = set()
            promoted_ever: set[str] = set()

            def take(i: int, promoted: list[HeldStart]) -> None:
                for start in promoted:
                    assert start.run_id in held, start
                    assert start.run_id not in promoted_ever, start
                    held.discard(start.run_id)
                    promoted_ever.add(start.run_id)
                    admitted[i].append(start.run_id)

            async def act(i: int, round_: int) -> None:
                adm = backends[i].admissions
                mine = admitted[i]
                if mine and rng.random() < 0.4:
                    done = mine.pop(0)
                    take(i, list(await adm.finish_admitted("q", [done])))
                run_id = f"w{i}-{round_}"
                tenant = tenant_of[run_id] = rng.choice(tenants)
                got = await adm.admit("q", run_id, tenant, rng.randrange(-2, 3), b"s")
                if got == Admission.ADMITTED:
                    mine.append(run_id)
                else:
                    assert got == Admission.HELD, got
                    held.add(run_id)

            conn = await admin(pg_url)
            try:
                for round_ in range(50):
                    await asyncio.gather(*(act(i, round_) for i in range(8)))
                    now_admitted = [r for runs in admitted.values() for r in runs]
                    assert len(now_admitted) <= 3, (round_, admitted)
                    for tenant in tenants:
                        mine = [r for r in now_admitted if tenant_of[r] == tenant]
                        assert len(mine) <= 2, (round_, tenant, admitted)
                    cur = await conn.execute(
                        f'SELECT held, count(*) FROM "{schema}".queue_admissions '
                        "WHERE queue = 'q' GROUP BY held"
                    )
                    counts = dict(await cur.fetchall())
                    assert counts.get(False, 0) == len(now_admitted), (round_, counts)
                    assert counts.get(True, 0) == len(held), (round_, counts)
                assert promoted_ever  # finishing promoted held starts along the way
            finally:
                await conn.close()
        finally:
            for backend in backends:
                await backend.close()

    asyncio.run(body())
