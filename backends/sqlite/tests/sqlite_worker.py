"""A worker process for the multi-process tests (run as a script, not collected).

``python sqlite_worker.py claim DB NAME GO`` — wait until the file ``GO`` exists, then
claim due runs in small batches and finish each leased run with a terminal commit,
printing one JSON line per lease, until nothing is due.

``python sqlite_worker.py burst DB PREFIX DAYS`` — initialize and advance runs as fast as it can,
printing one JSON line after each transition has committed, until it is killed.

Every line is flushed as soon as the commit it reports has returned, so the parent
knows exactly which transitions were acknowledged before it killed the process.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_sqlite import SQLiteBackend

from docket.contract import (
    ClaimBatch,
    ClaimPolicy,
    EventListQuery,
    ReleaseClaim,
    RetainClaim,
    Retryable,
    Terminal,
    TransitionResult,
)
from docket.records import TENANTLESS, Run, RunStatus

DAY = timedelta(days=1)


def say(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def until_done(call: Callable[[], Awaitable[TransitionResult]]) -> TransitionResult:
    """Retry a transition while the file is busy (same proposal: replays are safe)."""
    for _ in range(1000):
        result = await call()
        if not isinstance(result, Retryable):
            return result
        await asyncio.sleep(0.001)
    raise RuntimeError("the file stayed busy")


async def claim(path: str, name: str, go: str) -> int:
    backend = SQLiteBackend(path, busy_timeout=10)
    await backend.open()
    while not Path(go).exists():
        await asyncio.sleep(0.001)
    rng = random.Random(name)
    empty = 0
    while empty < 3:
        policy = ClaimPolicy(limit=rng.randint(1, 4), orphan_ttl=DAY, max_claim_attempts=3)
        batch = await backend.runs.claim_due(policy)
        if isinstance(batch, Retryable):
            continue
        if not isinstance(batch, ClaimBatch):
            say(error=f"claim_due: {batch!r}")
            return 1
        if not batch.leases:
            empty += 1
            await asyncio.sleep(0.01)
            continue
        empty = 0
        for lease in batch.leases:
            say(run=lease.run_id, worker=name, attempt=lease.claim_attempt)
            run = await backend.runs.fetch_run(lease.owner, lease.run_id)
            assert isinstance(run, Run)
            done = successor(run, run.updated_at, status=RunStatus.DONE, metadata={"worker": name})
            proposal = claimed(done, lease.claim_token, schedule=ReleaseClaim(Terminal()))
            result = await until_done(
                partial(backend.transitions.commit_claimed, lease.owner, proposal, [])
            )
            if result != done:
                say(error=f"commit of {lease.run_id}: {result!r}")
                return 1
    await backend.close()
    return 0


async def burst(path: str, prefix: str, days_back: int) -> int:
    backend = SQLiteBackend(path)
    document = graph_document("burst")
    ref = graph_ref(document)
    await backend.graphs.save_graph(TENANTLESS, ref, document)
    start = datetime.now(UTC)
    for index in itertools.count():
        run = new_run(f"{prefix}-{index:05}", ref, start, event_seq=2)
        # Due further back than anything an earlier (killed) writer left due on the file
        # (the parent gives each writer more days back), so the claim below always picks
        # the run just created.
        wake = start - DAY * days_back
        got = await until_done(
            partial(
                backend.transitions.initialize,
                TENANTLESS,
                init_proposal(run, wake),
                events_for(run, start, [1, 2]),
            )
        )
        assert got == run, got
        say(run=run.id, checkpoint_seq=run.checkpoint_seq, event_seq=run.event_seq)
        batch = await backend.runs.claim_due(
            ClaimPolicy(limit=1, orphan_ttl=DAY, max_claim_attempts=3, now=start)
        )
        assert isinstance(batch, ClaimBatch) and batch.leases, batch
        assert batch.leases[0].run_id == run.id, batch
        token = batch.leases[0].claim_token
        for step in range(4):
            last = step == 3
            nxt = successor(run, start, new_events=3, status=RunStatus.DONE if last else None)
            seqs = range(run.event_seq + 1, nxt.event_seq + 1)
            proposal = claimed(
                nxt, token, schedule=ReleaseClaim(Terminal()) if last else RetainClaim()
            )
            got = await until_done(
                partial(
                    backend.transitions.commit_claimed,
                    TENANTLESS,
                    proposal,
                    events_for(nxt, start, seqs),
                )
            )
            assert got == nxt, got
            say(run=nxt.id, checkpoint_seq=nxt.checkpoint_seq, event_seq=nxt.event_seq)
            run = nxt
        page = await backend.events.list_events(TENANTLESS, run.id, EventListQuery(limit=1))
        assert page is not None
        time.sleep(0)  # give the parent's kill a chance to land anywhere
    return 0


def main(argv: list[str]) -> int:
    mode = argv[1]
    if mode == "claim":
        return asyncio.run(claim(argv[2], argv[3], argv[4]))
    if mode == "burst":
        return asyncio.run(burst(argv[2], argv[3], int(argv[4])))
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
