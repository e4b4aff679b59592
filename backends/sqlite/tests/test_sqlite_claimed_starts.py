"""``ClaimedStarts`` on a real SQLite file: a run written already claimed is stored so
(token, claim time, one attempt, no wake), survives a restart, wakes nobody, and is
taken over as expired once its TTL passes, like any claim ``claim_due`` handed out."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from docket_contract_tests.fixtures import (
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
)
from docket_sqlite import SQLiteBackend

from docket.clock import ManualClock
from docket.contract import ClaimBatch, ClaimLost, ClaimPolicy, Conflict
from docket.contract.protocols import ClaimedStarts
from docket.records import TENANTLESS, GraphVersion, Run, RunInfo, Tenant

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
TTL = timedelta(seconds=60)
US = timedelta(microseconds=1)


def _policy(now: datetime) -> ClaimPolicy:
    return ClaimPolicy(limit=5, orphan_ttl=TTL, max_claim_attempts=3, now=now)


def test_a_claimed_start_is_stored_claimed_and_expires_after_its_ttl(tmp_path: Path) -> None:
    path = tmp_path / "eager.db"
    clock = ManualClock(T0)
    owner = Tenant("acme")
    document = graph_document("g")
    ref = graph_ref(document)
    run = new_run("r1", ref, T0, event_seq=1)
    plain = new_run("r2", ref, T0)
    proposal = init_proposal(run, T0)
    events = events_for(run, T0, [1])

    async def first() -> None:
        backend = SQLiteBackend(path, clock=clock)
        assert isinstance(backend.transitions, ClaimedStarts)
        assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
        waiter = asyncio.create_task(backend.wait_for_work(0.3))
        await asyncio.sleep(0.05)
        # sent together, so the writer may apply them in one group commit
        got = await asyncio.gather(
            backend.transitions.initialize_claimed(owner, proposal, events, "tok-eager"),
            backend.transitions.initialize(owner, init_proposal(plain, T0 + TTL), []),
        )
        assert list(got) == [run, plain]
        assert await waiter is False, "neither start is due now: nobody is woken"
        await backend.close()

    async def second() -> None:
        backend = SQLiteBackend(path, clock=clock)
        info = await backend.runs.inspect_run(owner, "r1")
        assert isinstance(info, RunInfo)
        assert info.run == run
        assert (info.claimed_at, info.wake_at, info.claim_attempts) == (T0, None, 1)
        # the same start again answers the stored run; another token or a plain start
        # under the same transition id conflicts
        again = backend.transitions
        assert await again.initialize_claimed(owner, proposal, events, "tok-eager") == run
        assert isinstance(
            await again.initialize_claimed(owner, proposal, events, "tok-other"), Conflict
        )
        assert isinstance(await again.initialize(owner, proposal, events), Conflict)
        # held by its token until the TTL passes (claimed_at + TTL is not yet expired)
        held = await backend.runs.claim_due(_policy(T0 + TTL))
        assert isinstance(held, ClaimBatch)
        assert [lease.run_id for lease in held.leases] == ["r2"], "only the plain start is due"
        taken = await backend.runs.claim_due(_policy(T0 + TTL + US))
        assert isinstance(taken, ClaimBatch) and len(taken.leases) == 1
        (lease,) = taken.leases
        assert (lease.run_id, lease.owner, lease.claim_attempt) == ("r1", owner, 2)
        assert lease.claim_token != "tok-eager"
        assert isinstance(await backend.runs.refresh_claim(owner, "r1", "tok-eager"), ClaimLost)
        await backend.close()

    asyncio.run(first())
    # the row itself, as the file holds it: the token and the claim time, no wake
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT claim_token, claimed_at_us, wake_at_us, claim_attempts FROM docket_runs "
            "WHERE tenant = 'acme' AND run_id = 'r1'"
        ).fetchone()
    conn.close()
    assert row == ("tok-eager", int(T0.timestamp() * 1_000_000), None, 1)
    asyncio.run(second())


def test_a_plain_start_still_replays_only_as_a_plain_start(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "plain.db")
        document = graph_document("g")
        ref = graph_ref(document)
        await backend.graphs.save_graph(TENANTLESS, ref, document)
        run = new_run("r1", ref, T0)
        proposal = init_proposal(run, T0)
        assert await backend.transitions.initialize(TENANTLESS, proposal, []) == run
        assert isinstance(
            await backend.transitions.initialize_claimed(TENANTLESS, proposal, [], "tok"), Conflict
        )
        info = await backend.runs.inspect_run(TENANTLESS, "r1")
        assert isinstance(info, RunInfo) and isinstance(info.run, Run)
        assert (info.wake_at, info.claimed_at, info.claim_attempts) == (T0, None, 0)
        await backend.close()

    asyncio.run(body())
