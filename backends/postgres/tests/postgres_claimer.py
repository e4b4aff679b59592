"""A claiming worker process for ``test_postgres_claims`` (not a test module).

``python postgres_claimer.py URL SCHEMA NAME START_AT`` waits until the wall clock
reaches ``START_AT`` (so every process starts together), then claims due runs in
batches of 1..3 and commits each lease straight to ``done``, until it has found nothing
due three times in a row. It prints one JSON line per lease: ``[run_id, owner, token,
committed]``.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from datetime import timedelta

from docket_contract_tests.fixtures import claimed, successor
from docket_postgres import PostgresBackend

from docket.contract import ClaimBatch, ClaimPolicy, ReleaseClaim, Terminal
from docket.records import Run, RunStatus, tenant_id_of


async def work(url: str, schema: str, name: str, start_at: float) -> None:
    backend = PostgresBackend(url, schema=schema, pool_max_size=4)
    await backend.open()
    rng = random.Random(name)
    await asyncio.sleep(max(0.0, start_at - time.time()))
    idle = 0
    try:
        while idle < 3:
            policy = ClaimPolicy(
                limit=rng.randint(1, 3), orphan_ttl=timedelta(hours=1), max_claim_attempts=5
            )
            batch = await backend.runs.claim_due(policy)
            assert isinstance(batch, ClaimBatch), batch
            if not batch.leases:
                idle += 1
                await asyncio.sleep(0.02)
                continue
            idle = 0
            for lease in batch.leases:
                stored = await backend.runs.fetch_run(lease.owner, lease.run_id)
                assert isinstance(stored, Run), stored
                done = successor(stored, stored.updated_at, status=RunStatus.DONE)
                proposal = claimed(done, lease.claim_token, schedule=ReleaseClaim(Terminal()))
                result = await backend.transitions.commit_claimed(lease.owner, proposal, [])
                owner = tenant_id_of(lease.owner)
                line = [lease.run_id, owner, lease.claim_token, isinstance(result, Run)]
                print(json.dumps(line), flush=True)
    finally:
        await backend.close()


if __name__ == "__main__":
    asyncio.run(work(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
