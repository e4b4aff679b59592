"""The live feed on a real SQLite file (``Feature.STREAMS``).

Notices after every transition kind (and none for a refusal or a replay), each readable
through another connection at the moment it is delivered; tenant scoping; a subscriber
in another process receives this process's notices and emissions through the
``data_version`` poller; the poller never repeats this process's own emissions, and
stops with the last subscription.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

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
from docket_sqlite import SQLiteBackend

from docket.contract import Feature, StaleCheckpoint
from docket.contract.feed import LocalSubscription
from docket.records import (
    SYSTEM,
    TENANTLESS,
    CommitNotice,
    Emission,
    FeedItem,
    OwnerScope,
    Run,
    Tenant,
    feed_item_to_json,
)

SUBSCRIBER = Path(__file__).with_name("feed_subscriber.py")
T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
WAIT = 60.0  # seconds: generous for a loaded 2-core machine; every wait ends on a condition


async def _graph(backend: SQLiteBackend, owner: OwnerScope) -> object:
    document = graph_document("g")
    ref = graph_ref(document)
    await backend.graphs.save_graph(owner, ref, document)
    return ref


def _notice(owner: OwnerScope, run_id: str, first: int, last: int) -> CommitNotice:
    return CommitNotice(
        tenant_id=owner.id if isinstance(owner, Tenant) else None,
        run_id=run_id,
        graph_id="g",
        first_seq=first,
        last_seq=last,
    )


def _emission(owner: OwnerScope, run_id: str, seq: int, data: object = "tok") -> Emission:
    return Emission(
        tenant_id=owner.id if isinstance(owner, Tenant) else None,
        run_id=run_id,
        node_id="n",
        task_id="t",
        attempt=1,
        seq=seq,
        kind="token",
        data=data,  # type: ignore[arg-type]
        at=T0,
    )


def _probe(path: Path, subscription: LocalSubscription) -> list[str]:
    """Check, on the delivering thread, that each notice is readable through another
    connection at the moment it is offered; returns the list of violations."""
    broken: list[str] = []
    offer: Callable[[FeedItem], None] = subscription.offer

    def checked(item: FeedItem) -> None:
        if isinstance(item, CommitNotice) and item.run_id is not None:
            conn = sqlite3.connect(path)
            try:
                row = conn.execute(
                    "SELECT r.event_seq, (SELECT max(seq) FROM docket_events e "
                    "WHERE e.tenant = r.tenant AND e.run_id = r.run_id) "
                    "FROM docket_runs r WHERE r.tenant = ? AND r.run_id = ?",
                    (item.tenant_id or "", item.run_id),
                ).fetchone()
            finally:
                conn.close()
            if row is None or row[0] < item.last_seq or (row[1] or 0) < item.last_seq:
                broken.append(f"{item} delivered before it was readable (saw {row})")
        offer(item)

    subscription.offer = checked  # type: ignore[method-assign]
    return broken


async def _drain(subscription: LocalSubscription) -> list[FeedItem]:
    return list(await subscription.get(0))


def test_each_transition_kind_notices_once_committed_and_refusals_notice_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "feed.db"

    async def body() -> None:
        backend = SQLiteBackend(path)
        assert Feature.STREAMS in backend.capabilities().features
        ref = await _graph(backend, TENANTLESS)
        subscription = await backend.feed.subscribe(SYSTEM)
        assert isinstance(subscription, LocalSubscription)
        broken = _probe(path, subscription)

        a = new_run("a", ref, T0, event_seq=2)  # type: ignore[arg-type]
        init = init_proposal(a, T0)
        assert await backend.transitions.initialize(TENANTLESS, init, events_for(a, T0, [1, 2]))
        assert await _drain(subscription) == [_notice(TENANTLESS, "a", 1, 2)]

        b = new_run("b", ref, T0, event_seq=1)  # type: ignore[arg-type]
        got = await backend.transitions.initialize_claimed(
            TENANTLESS, init_proposal(b, T0), events_for(b, T0, [1]), "tok-b"
        )
        assert got == b
        assert await _drain(subscription) == [_notice(TENANTLESS, "b", 1, 1)]

        b2 = successor(b, T0, new_events=2)
        got = await backend.transitions.commit_claimed(
            TENANTLESS, claimed(b2, "tok-b"), events_for(b2, T0, [2, 3])
        )
        assert got == b2
        assert await _drain(subscription) == [_notice(TENANTLESS, "b", 2, 3)]

        a2 = successor(a, T0, new_events=1)
        proposal = unclaimed(a2)
        got = await backend.transitions.commit_unclaimed(
            TENANTLESS, a.checkpoint_seq, proposal, events_for(a2, T0, [3])
        )
        assert got == a2
        assert await _drain(subscription) == [_notice(TENANTLESS, "a", 3, 3)]

        # a replay answers the stored run and notices nothing new; a refusal nothing at all
        again = await backend.transitions.commit_unclaimed(
            TENANTLESS, a.checkpoint_seq, proposal, events_for(a2, T0, [3])
        )
        assert again == a2
        stale = await backend.transitions.commit_claimed(
            TENANTLESS, claimed(successor(b, T0), "tok-b"), []
        )
        assert isinstance(stale, StaleCheckpoint), stale
        assert await _drain(subscription) == []

        # the chained path: one notice per commit of the chain, in order
        b3 = successor(b2, T0, new_events=1)
        b4 = successor(b3, T0, new_events=1)
        results = await backend.transitions.commit_claimed_chain(
            TENANTLESS,
            [
                (claimed(b3, "tok-b"), events_for(b3, T0, [4])),
                (claimed(b4, "tok-b"), events_for(b4, T0, [5])),
            ],
        )
        assert results == [b3, b4]
        assert await _drain(subscription) == [
            _notice(TENANTLESS, "b", 4, 4),
            _notice(TENANTLESS, "b", 5, 5),
        ]

        # group commit: starts queued together share one transaction, each is noticed
        runs = [new_run(f"c{i}", ref, T0, event_seq=1) for i in range(6)]  # type: ignore[arg-type]
        started = await asyncio.gather(
            *(
                backend.transitions.initialize(
                    TENANTLESS, init_proposal(run, T0), events_for(run, T0, [1])
                )
                for run in runs
            )
        )
        assert started == runs
        got_items = await _drain(subscription)
        assert sorted(got_items, key=str) == sorted(
            (_notice(TENANTLESS, run.id, 1, 1) for run in runs), key=str
        )
        assert broken == []
        await subscription.close()
        await backend.close()

    asyncio.run(body())


def test_subscriptions_see_only_their_scope(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "scopes.db")
        acme, other = Tenant("acme"), Tenant("other")
        subs = {
            "acme": await backend.feed.subscribe(acme),
            "other": await backend.feed.subscribe(other),
            "tenantless": await backend.feed.subscribe(TENANTLESS),
            "system": await backend.feed.subscribe(SYSTEM),
        }
        for owner in (acme, TENANTLESS):
            ref = await _graph(backend, owner)
            run = new_run("r", ref, T0, event_seq=1)  # type: ignore[arg-type]
            got = await backend.transitions.initialize(
                owner, init_proposal(run, T0), events_for(run, T0, [1])
            )
            assert isinstance(got, Run)
            # the emission's own tenant field is replaced by the publisher's owner
            await backend.feed.publish(owner, _emission(other, "r", 1))
        seen = {name: await _drain(sub) for name, sub in subs.items()}
        assert seen["acme"] == [_notice(acme, "r", 1, 1), _emission(acme, "r", 1)]
        assert seen["tenantless"] == [_notice(TENANTLESS, "r", 1, 1), _emission(TENANTLESS, "r", 1)]
        assert seen["other"] == []
        assert seen["system"] == seen["acme"] + seen["tenantless"]
        for sub in subs.values():
            await sub.close()
        await backend.close()

    asyncio.run(body())


def test_an_oversized_emission_arrives_as_an_overflow_marker(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "big.db")
        sub = await backend.feed.subscribe(SYSTEM)
        await backend.feed.publish(TENANTLESS, _emission(TENANTLESS, "r", 1, "x" * 70_000))
        (item,) = await _drain(sub)
        assert isinstance(item, Emission) and item.data == {"overflow": True, "bytes": 70_002}
        await sub.close()
        await backend.close()

    asyncio.run(body())


def _read_line(stream: object, deadline: float) -> str:
    """One line of a child's stdout, or ``""`` past ``deadline`` (read on a thread)."""
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(stream.readline()))  # type: ignore[attr-defined]
    reader.daemon = True
    reader.start()
    reader.join(max(0.0, deadline - time.monotonic()))
    return found[0] if found else ""


def test_a_subscriber_in_another_process_gets_this_process_commits_and_emissions(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cross.db"
    acme, other = Tenant("acme"), Tenant("other")

    async def prepare() -> None:
        backend = SQLiteBackend(path)
        await _graph(backend, acme)
        await _graph(backend, other)
        await backend.close()

    asyncio.run(prepare())
    child = subprocess.Popen(
        [sys.executable, str(SUBSCRIBER), str(path), "acme", "run-x", "3", "7", str(WAIT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = _read_line(child.stdout, time.monotonic() + WAIT)
        assert line.strip() == "ready", (
            f"child said {line!r}, exit {child.poll()}, stderr: {child.stderr.read()[-3000:]}"  # type: ignore[union-attr]
            if child.poll() is not None
            else f"child said {line!r}"
        )

        async def commit() -> None:
            backend = SQLiteBackend(path)
            for owner in (other, acme):  # the other tenant's commit must not reach acme
                ref = await _graph(backend, owner)
                run = new_run("run-x", ref, T0, event_seq=2)  # type: ignore[arg-type]
                got = await backend.transitions.initialize(
                    owner, init_proposal(run, T0), events_for(run, T0, [1, 2])
                )
                assert got == run
                await backend.feed.publish(owner, _emission(owner, "run-x", 7))
            nxt = successor(run, T0, new_events=1)
            got = await backend.transitions.commit_unclaimed(
                acme, run.checkpoint_seq, unclaimed(nxt), events_for(nxt, T0, [3])
            )
            assert got == nxt
            await backend.close()

        asyncio.run(commit())
        try:
            out, err = child.communicate(timeout=WAIT)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        assert child.returncode == 0, f"subscriber exited {child.returncode}:\n{err[-3000:]}"
        items = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert items[-1] == {"exit": 0}
        seen = items[:-1]
        assert all(
            item.get("tenant_id") == "acme"
            for item in seen
            if item["k"] != "notice" or item["run_id"]
        ), seen
        notices = [item for item in seen if item["k"] == "notice" and item["run_id"] == "run-x"]
        assert notices and max(item["last_seq"] for item in notices) == 3
        assert all(item["tenant_id"] == "acme" for item in notices)
        emitted = [item for item in seen if item["k"] == "emission"]
        assert emitted == [json.loads(feed_item_to_json(_emission(acme, "run-x", 7)))]
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()


def test_the_poller_skips_this_process_emissions_and_stops_with_the_last_subscription(
    tmp_path: Path,
) -> None:
    path = tmp_path / "own.db"

    async def body() -> None:
        backend = SQLiteBackend(path, feed_poll=0.01)
        sub = await backend.feed.subscribe(SYSTEM)
        await backend.feed.publish(TENANTLESS, _emission(TENANTLESS, "r", 1))
        # a row another process would write: once the poller delivered it, it has read
        # past this process's own row, which it must have skipped
        foreign = _emission(TENANTLESS, "r", 2)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(
            "INSERT INTO docket_emissions (written_at_us, writer, tenant, run_id, payload) "
            "VALUES (0, 'another-process', '', 'r', ?)",
            (feed_item_to_json(foreign),),
        )
        conn.close()
        items: list[FeedItem] = []
        deadline = time.monotonic() + WAIT
        while foreign not in items and time.monotonic() < deadline:
            items.extend(await sub.get(1.0))
        assert items == [_emission(TENANTLESS, "r", 1), foreign]
        poller = backend._engine.hub.feed._poller
        assert poller is not None and poller.is_alive()
        await sub.close()
        await asyncio.to_thread(poller.join, WAIT)
        assert not poller.is_alive(), "the poller outlived the last subscription"
        await backend.close()

    asyncio.run(body())


def test_feed_poll_is_checked() -> None:
    for bad in (0, -1, 61, True, "fast"):
        try:
            SQLiteBackend(":memory:", feed_poll=bad)  # type: ignore[arg-type]
        except ValueError:
            continue
        raise AssertionError(f"feed_poll={bad!r} was accepted")
    backend = SQLiteBackend.from_url("sqlite:///:memory:?feed_poll=0.2")
    assert backend._engine.feed_poll == 0.2
    assert SQLiteBackend.from_url("sqlite://", feed_poll=1)._engine.feed_poll == 1.0


def test_another_connections_commit_is_noticed_and_a_rowid_going_back_says_reread(
    tmp_path: Path,
) -> None:
    path = tmp_path / "poll.db"

    async def wait_for(
        subscription: LocalSubscription, wanted: Callable[[FeedItem], bool]
    ) -> list[FeedItem]:
        items: list[FeedItem] = []
        deadline = time.monotonic() + WAIT
        while not any(wanted(item) for item in items) and time.monotonic() < deadline:
            items.extend(await subscription.get(1.0))
        return items

    async def body() -> None:
        here = SQLiteBackend(path, feed_poll=0.01)
        ref = await _graph(here, TENANTLESS)
        sub = await here.feed.subscribe(SYSTEM)
        # a second backend given a private hub stands in for another process: its
        # commits can reach this process's subscribers only through the poller
        elsewhere = SQLiteBackend(path)
        elsewhere._engine.hub = type(elsewhere._engine.hub)(None)
        run = new_run("far", ref, T0, event_seq=2)  # type: ignore[arg-type]
        got = await elsewhere.transitions.initialize(
            TENANTLESS, init_proposal(run, T0), events_for(run, T0, [1, 2])
        )
        assert got == run
        expected = _notice(TENANTLESS, "far", 1, 2)
        items = await wait_for(sub, lambda item: item == expected)
        assert items == [expected], "the poller's notice, exactly once"
        # retention deleting the newest events makes rowids go back: nobody can tell
        # which runs the reused rowids will belong to, so subscribers re-read everything
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM docket_runs WHERE run_id = 'far'")
        conn.close()
        wide = CommitNotice(tenant_id=None, run_id=None)
        assert await wait_for(sub, lambda item: item == wide) == [wide]
        await sub.close()
        await elsewhere.close()
        await here.close()

    asyncio.run(body())
