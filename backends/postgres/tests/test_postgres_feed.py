"""The live feed on PostgreSQL (``Feature.STREAMS``, schema version 8): a commit notice
after every kind of transition (alone, grouped, chained), never before the commit is
readable and never for a refused write; from another process; per tenant and per schema;
nothing NOTIFYed while nobody listens; emissions of any size up to the bound arrive
intact and in order; a server restart is survived with a re-read notice."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)
from docket_postgres import PostgresBackend, StoreError
from docket_postgres import feed as feed_module
from docket_postgres.feed import Reassembly, split_payload
from docket_postgres.testing import ThrowawayPostgres, free_port
from docket_postgres.testing import connect as admin
from docket_postgres.testing import open_backend as opened

from docket.contract import (
    ClaimBatch,
    ClaimPolicy,
    EventListQuery,
    External,
    Feature,
    FeedSubscription,
    ReleaseClaim,
    StaleCheckpoint,
    Terminal,
)
from docket.records import (
    MAX_EMISSION_BYTES,
    SYSTEM,
    TENANTLESS,
    CheckpointType,
    CommitNotice,
    Emission,
    EventPage,
    FeedItem,
    GraphRef,
    GraphVersion,
    OwnerScope,
    Run,
    RunStatus,
    Tenant,
    feed_item_to_json,
)

Names = Callable[[str], str]
T0 = datetime(2026, 7, 1, 12, tzinfo=UTC)


async def _graph(backend: PostgresBackend, owner: OwnerScope = TENANTLESS) -> GraphRef:
    document = graph_document("g")
    ref = graph_ref(document)
    assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
    return ref


async def _start(
    backend: PostgresBackend, ref: GraphRef, run_id: str, owner: OwnerScope = TENANTLESS
) -> Run:
    now = await backend.now()
    fresh = new_run(run_id, ref, now, event_seq=2)
    got = await backend.transitions.initialize(
        owner, init_proposal(fresh, now), events_for(fresh, now, [1, 2])
    )
    assert got == fresh
    return fresh


async def _claim(backend: PostgresBackend, run_id: str) -> str:
    now = await backend.now()
    batch = await backend.runs.claim_due(
        ClaimPolicy(limit=1, orphan_ttl=timedelta(hours=1), max_claim_attempts=5, now=now)
    )
    assert isinstance(batch, ClaimBatch) and [x.run_id for x in batch.leases] == [run_id], batch
    return batch.leases[0].claim_token


async def _until(
    sub: FeedSubscription, done: Callable[[list[FeedItem]], bool], timeout: float = 10.0
) -> list[FeedItem]:
    """Items received until ``done(items)`` holds (fails after ``timeout`` seconds)."""
    got: list[FeedItem] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        left = deadline - time.monotonic()
        assert left > 0, f"not received within {timeout}s; got {got}"
        got.extend(await sub.get(min(left, 1.0)))
    return got


def _notice(run_id: str, last: int) -> Callable[[list[FeedItem]], bool]:
    return lambda items: any(
        isinstance(i, CommitNotice) and i.run_id == run_id and i.last_seq >= last for i in items
    )


def _covered(items: list[FeedItem], run_id: str) -> set[int]:
    seqs: set[int] = set()
    for item in items:
        if isinstance(item, CommitNotice) and item.run_id == run_id:
            seqs.update(range(item.first_seq, item.last_seq + 1))
    return seqs


def test_every_kind_of_transition_is_noticed_once_readable(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("feed")
        writer = await opened(pg_url, schema, commit_lanes=1)
        reader = await opened(pg_url, schema)
        try:
            assert Feature.STREAMS in reader.capabilities().features
            sub = await reader.feed.subscribe(SYSTEM)
            ref = await _graph(writer)
            # initialize
            run = await _start(writer, ref, "r1")
            items = await _until(sub, _notice("r1", 2))
            assert (
                CommitNotice(tenant_id=None, run_id="r1", graph_id="g", first_seq=1, last_seq=2)
                in items
            )
            # commit_claimed, then a refused one (sends nothing), then commit_unclaimed
            token = await _claim(writer, "r1")
            now = await writer.now()
            step = successor(run, now, new_events=1, status=RunStatus.WAITING)
            proposal = claimed(
                step,
                token,
                schedule=ReleaseClaim(External()),
                checkpoint_type=CheckpointType.INTERRUPT_REQUESTED,
            )
            events = events_for(step, now, [3])
            assert await writer.transitions.commit_claimed(TENANTLESS, proposal, events) == step
            stale = claimed(successor(run, now, new_events=1), token)  # again, new id
            refused = await writer.transitions.commit_claimed(TENANTLESS, stale, events)
            assert isinstance(refused, StaleCheckpoint)
            resumed = successor(step, now, new_events=2, status=RunStatus.RUNNING)
            got = await writer.transitions.commit_unclaimed(
                TENANTLESS,
                step.checkpoint_seq,
                unclaimed(resumed, checkpoint_type=CheckpointType.INTERRUPT_RESOLVED),
                events_for(resumed, now, [4, 5]),
            )
            assert got == resumed
            items = await _until(sub, _notice("r1", 5))
            notices = [i for i in items if isinstance(i, CommitNotice)]
            assert [(n.first_seq, n.last_seq) for n in notices] == [(3, 3), (4, 5)], notices
            # a replay of an applied transition writes nothing new
            assert await writer.transitions.commit_claimed(TENANTLESS, proposal, events) == resumed
            # the notice is never ahead of what a reader sees
            page = await reader.events.list_events(TENANTLESS, "r1", EventListQuery(limit=50))
            assert isinstance(page, EventPage) and page.events[-1].seq == 5
            # a claimed start, and a chain of claimed commits in one statement
            now = await writer.now()
            fresh = new_run("r2", ref, now, event_seq=1)
            started = await writer.transitions.initialize_claimed(
                TENANTLESS, init_proposal(fresh, now), events_for(fresh, now, [1]), "tok-r2"
            )
            assert started == fresh
            links: list[tuple[Any, Any]] = []
            current = fresh
            for _ in range(3):
                nxt = successor(current, now, new_events=2)
                links.append(
                    (
                        claimed(nxt, "tok-r2"),
                        events_for(nxt, now, [nxt.event_seq - 1, nxt.event_seq]),
                    )
                )
                current = nxt
            done = successor(current, now, new_events=1, status=RunStatus.DONE)
            links.append(
                (
                    claimed(
                        done,
                        "tok-r2",
                        schedule=ReleaseClaim(Terminal()),
                        checkpoint_type=CheckpointType.RUN_COMPLETED,
                    ),
                    events_for(done, now, [done.event_seq]),
                )
            )
            answers = await writer.transitions.commit_claimed_chain(TENANTLESS, links)
            assert answers == [p.run for p, _ in links]
            items = await _until(sub, _notice("r2", done.event_seq))
            assert _covered(items, "r2") == set(range(1, done.event_seq + 1))
            await sub.close()
        finally:
            await writer.close()
            await reader.close()

    asyncio.run(body())


def test_grouped_writes_each_get_their_notice(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("group")
        writer = await opened(pg_url, schema, commit_lanes=1)
        reader = await opened(pg_url, schema)
        try:
            sub = await reader.feed.subscribe(SYSTEM)
            ref = await _graph(writer)
            ids = [f"g{i}" for i in range(12)]
            # one lane: the starts queued behind the first go as initialize_runs statements
            await asyncio.gather(*(_start(writer, ref, i) for i in ids))
            group = writer.transitions._init_group
            assert group is not None
            assert max(group.batches) > 1, dict(group.batches)
            items = await _until(sub, lambda got: all(_covered(got, i) == {1, 2} for i in ids))
            assert len([i for i in items if isinstance(i, CommitNotice)]) == len(ids)
            await sub.close()
        finally:
            await writer.close()
            await reader.close()

    asyncio.run(body())


_OTHER_PROCESS = textwrap.dedent(
    """
    import asyncio, sys
    from docket_contract_tests.fixtures import graph_document, graph_ref, init_proposal, new_run
    from docket_postgres.testing import open_backend
    from docket.records import Tenant

    async def main() -> None:
        backend = await open_backend(sys.argv[1], sys.argv[2])
        try:
            document = graph_document("g")
            ref = graph_ref(document)
            await backend.graphs.save_graph(Tenant("a"), ref, document)
            now = await backend.now()
            run = new_run("elsewhere", ref, now)
            await backend.transitions.initialize(Tenant("a"), init_proposal(run, now), [])
        finally:
            await backend.close()

    asyncio.run(main())
    """
)


def test_a_commit_in_another_process_is_noticed(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("proc")
        reader = await opened(pg_url, schema)
        try:
            sub = await reader.feed.subscribe(Tenant("a"))
            done = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-c", _OTHER_PROCESS, pg_url, schema],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
            items = await _until(sub, _notice("elsewhere", 0))
            assert items[0] == CommitNotice(
                tenant_id="a", run_id="elsewhere", graph_id="g", first_seq=1, last_seq=0
            )
            await sub.close()
        finally:
            await reader.close()

    asyncio.run(body())


def test_tenants_and_schemas_see_only_their_own(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema, other = schema_name("iso"), schema_name("iso_other")
        writer = await opened(pg_url, schema)
        elsewhere = await opened(pg_url, other)
        reader = await opened(pg_url, schema)
        try:
            a_sub = await reader.feed.subscribe(Tenant("a"))
            all_sub = await reader.feed.subscribe(SYSTEM)
            other_sub = await elsewhere.feed.subscribe(SYSTEM)
            a_ref = await _graph(writer, Tenant("a"))
            b_ref = await _graph(writer, Tenant("b"))
            t_ref = await _graph(writer)
            await _start(writer, b_ref, "of-b", Tenant("b"))
            await _start(writer, t_ref, "tenantless")
            await _start(writer, a_ref, "of-a", Tenant("a"))
            # notices arrive in commit order: once a's is here, b's would have been too
            got = await _until(a_sub, _notice("of-a", 2))
            assert [(i.tenant_id, i.run_id) for i in got if isinstance(i, CommitNotice)] == [
                ("a", "of-a")
            ]
            seen = await _until(all_sub, _notice("of-a", 2))
            assert [i.run_id for i in seen if isinstance(i, CommitNotice)] == [
                "of-b",
                "tenantless",
                "of-a",
            ]
            await _start(elsewhere, await _graph(elsewhere), "there")
            theirs = await _until(other_sub, _notice("there", 2))
            assert [i.run_id for i in theirs if isinstance(i, CommitNotice)] == ["there"]
            assert await all_sub.get(0.2) == []
            # emissions: only the publisher's tenant, only its schema
            await writer.feed.publish(Tenant("b"), _emission("of-b", 1, "for b"))
            await writer.feed.publish(Tenant("a"), _emission("of-a", 1, "for a"))
            got = await _until(a_sub, lambda items: bool(items))
            assert [(i.tenant_id, i.data) for i in got if isinstance(i, Emission)] == [
                ("a", "for a")
            ]
            assert await other_sub.get(0.2) == []
            for sub in (a_sub, all_sub, other_sub):
                await sub.close()
        finally:
            await writer.close()
            await elsewhere.close()
            await reader.close()

    asyncio.run(body())


def _emission(run_id: str, seq: int, data: Any, tenant: str | None = None) -> Emission:
    return Emission(
        tenant_id=tenant,
        run_id=run_id,
        node_id="n",
        task_id="t",
        attempt=1,
        seq=seq,
        kind="token",
        data=data,
        at=T0,
    )


def test_emissions_up_to_the_bound_arrive_whole_and_in_order(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("emit")
        writer = await opened(pg_url, schema)
        reader = await opened(pg_url, schema)
        try:
            sub = await reader.feed.subscribe(SYSTEM)
            # as big as allowed once encoded: a 64 KiB string (quotes included), and one
            # of multi-byte characters that the parts must not cut in half
            big = "x" * (MAX_EMISSION_BYTES - 2)
            wide = "é€😀" * 7000
            sent = [
                _emission("r", 1, "a"),
                _emission("r", 2, big),
                _emission("r", 3, {"n": 3}),
                _emission("r", 4, wide),
                _emission("r", 5, "x" * MAX_EMISSION_BYTES),  # over: an overflow marker
                _emission("r", 6, "z"),
            ]
            for emission in sent:
                await writer.feed.publish(TENANTLESS, emission)
            got = await _until(sub, lambda items: len(items) >= 6)
            assert all(isinstance(i, Emission) for i in got)
            assert [i.seq for i in got if isinstance(i, Emission)] == [1, 2, 3, 4, 5, 6]
            assert got[1] == sent[1] and got[3] == sent[3]
            assert got[4] == _emission("r", 5, {"overflow": True, "bytes": MAX_EMISSION_BYTES + 2})
            assert reader.feed.listener.pending_parts == 0
            await sub.close()
        finally:
            await writer.close()
            await reader.close()

    asyncio.run(body())


def test_parts_are_cut_on_characters_and_dropped_when_incomplete() -> None:
    wire = feed_item_to_json(_emission("r", 1, "é" * 5000))
    parts = split_payload(wire, part_bytes=1001)
    assert len(parts) > 5 and all(len(p.encode()) < 1100 for p in parts)
    assembly = Reassembly(timeout=10.0)
    assert [assembly.add(p, now=0.0) for p in parts[:-1]] == [None] * (len(parts) - 1)
    assert assembly.add(parts[-1], now=1.0) == wire.decode()
    # a set missing a part is dropped after the timeout
    for part in parts[1:]:
        assert assembly.add(part, now=2.0) is None
    assert assembly.pending == 1
    assembly.expire(12.5)
    assert assembly.pending == 0
    assert assembly.add(parts[0], now=13.0) is None and assembly.pending == 1
    # a small item is not split at all
    assert split_payload(b'{"k":"notice"}') == ['{"k":"notice"}']


def test_nothing_is_notified_while_nobody_listens(
    pg_url: str, schema_name: Names, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed_module, "CHECK_INTERVAL", 0.2)

    async def body() -> None:
        schema = schema_name("quiet")
        writer = await opened(pg_url, schema)
        reader = await opened(pg_url, schema)
        raw = await admin(pg_url)
        try:
            await raw.execute("LISTEN docket_feed")  # hears the channel, registers nothing
            ref = await _graph(writer)
            await _start(writer, ref, "unheard")
            await writer.feed.publish(TENANTLESS, _emission("unheard", 1, "lost"))
            heard = [n.payload async for n in raw.notifies(timeout=0.3)]
            assert [p for p in heard if p.startswith(f"{schema} ")] == [], "nobody listens"
            # a stale registration (its session gone) is cleared by the next listener
            await raw.execute(f'INSERT INTO "{schema}".feed_listeners (key) VALUES (42)'.encode())
            sub = await reader.feed.subscribe(SYSTEM)
            cur = await raw.execute(f'SELECT count(*) FROM "{schema}".feed_listeners'.encode())
            assert await cur.fetchone() == (1,)
            await _start(writer, ref, "heard")
            await _until(sub, _notice("heard", 2))
            heard = [n.payload async for n in raw.notifies(timeout=1.0)]
            assert [p for p in heard if p.startswith(f"{schema} ")], "NOTIFYed once registered"
            await sub.close()
            listener = reader.feed.listener
            deadline = time.monotonic() + 10
            while listener.running:  # the idle listener retires and deregisters
                assert time.monotonic() < deadline, "the feed listener did not retire"
                await asyncio.sleep(0.05)
            cur = await raw.execute(f'SELECT count(*) FROM "{schema}".feed_listeners'.encode())
            assert await cur.fetchone() == (0,)
            # and a new subscription starts it again
            sub = await reader.feed.subscribe(SYSTEM)
            await _start(writer, ref, "again")
            await _until(sub, _notice("again", 2))
            await sub.close()
        finally:
            await raw.close()
            await writer.close()
            await reader.close()

    asyncio.run(body())


def test_a_server_restart_is_survived_with_a_re_read_notice(schema_name: Names) -> None:
    async def body() -> None:
        async with ThrowawayPostgres() as server:
            url, schema = server.conninfo(), schema_name("restart")
            writer = await opened(url, schema)
            reader = await opened(url, schema)
            try:
                sub = await reader.feed.subscribe(SYSTEM)
                listener = reader.feed.listener
                ref = await _graph(writer)
                await _start(writer, ref, "before")
                await _until(sub, _notice("before", 2))
                await asyncio.to_thread(server.restart, mode="fast", down_for=0.5)
                # the subscription stays usable while the listener reconnects
                items = await _until(
                    sub,
                    lambda got: CommitNotice(tenant_id=None, run_id=None) in got,
                    timeout=30.0,
                )
                assert listener.connections >= 2, items
                deadline = time.monotonic() + 30
                for attempt in range(1000):  # the writer's pooled sessions died with the server
                    try:
                        await _start(writer, ref, f"after-{attempt}")
                        break
                    except (AssertionError, StoreError):
                        assert time.monotonic() < deadline, "the writer did not come back"
                        await asyncio.sleep(0.2)
                await _until(sub, _notice(f"after-{attempt}", 2), timeout=30.0)
                await sub.close()
            finally:
                await writer.close()
                await reader.close()

    asyncio.run(body())


def test_subscribing_to_an_unreachable_server_raises_store_error() -> None:
    async def body() -> None:
        backend = PostgresBackend(
            f"postgresql://postgres@127.0.0.1:{free_port()}/none", pool_timeout=2.0
        )
        with pytest.raises(StoreError):
            await backend.feed.subscribe(SYSTEM)
        assert not backend.feed.listener.running
        with pytest.raises(ValueError):
            await backend.feed.publish(SYSTEM, _emission("r", 1, "x"))  # type: ignore[arg-type]
        await backend.close()

    asyncio.run(body())
