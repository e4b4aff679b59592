"""Does history slow the hot path? ``python -m docket_postgres.bench``.

Builds two schemas on one server: one empty, one holding ``--runs`` finished runs with
``--events`` events between them (written in bulk by SQL, in the shape the backend
writes). Then, on each, it repeats one worker step — initialize a due run, claim it,
commit a step that keeps the claim, commit the terminal step — and times ``claim_due``
and the commits. It prints the medians and the ratio empty/history per operation (1.0:
history costs nothing; the target is at least 0.8).

Without ``--url`` it starts a throwaway server (see :mod:`docket_postgres.testing`).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import timedelta
from typing import Any

import attrs

from docket.contract import (
    ClaimBatch,
    ClaimedProposal,
    ClaimPolicy,
    InitProposal,
    ReleaseClaim,
    RetainClaim,
    Terminal,
)
from docket.records import (
    TENANTLESS,
    CheckpointType,
    GraphRef,
    GraphVersion,
    Run,
    RunStatus,
)
from docket.values import content_hash
from docket_postgres.backend import PostgresBackend
from docket_postgres.testing import ThrowawayPostgres, connect

_DOCUMENT: dict[str, Any] = {"docket": 1, "kind": "graph", "graph": {"id": "bench", "n": 1}}


async def _history(url: str, schema: str, runs: int, events: int, ref: GraphRef) -> None:
    conn = await connect(url)
    try:
        per_run = max(1, events // max(runs, 1))
        await conn.execute(
            f"""INSERT INTO "{schema}".graphs (tenant, graph_id, graph_hash, document,
            published_at)
            SELECT 't' || i, %s, %s, '{{}}'::bytea, now() FROM generate_series(0, 49) AS i
            ON CONFLICT DO NOTHING""".encode(),
            (ref.graph_id, ref.graph_hash),
        )
        await conn.execute(
            f"""INSERT INTO "{schema}".runs (tenant, run_id, graph_id, graph_hash, status,
            step, checkpoint_seq, event_seq, started_at, updated_at, finished_at, run_json,
            latest_checkpoint_type)
            SELECT 't' || (i %% 50), 'old-' || i, %s, %s, 'done', 5, 6, %s,
                now() - interval '30 days', now() - interval '29 days',
                now() - interval '29 days', convert_to(repeat('x', 600), 'UTF8'),
                'run_completed'
            FROM generate_series(1, %s) AS i""".encode(),
            (ref.graph_id, ref.graph_hash, per_run, runs),
        )
        await conn.execute(
            f"""INSERT INTO "{schema}".events (tenant, run_id, seq, event_json,
            content_sha256, inserted_at)
            SELECT 't' || (i %% 50), 'old-' || i, s, convert_to(repeat('e', 200), 'UTF8'),
                sha256(int8send(i * 1000 + s)), now() - interval '29 days'
            FROM generate_series(1, %s) AS i, generate_series(1, %s) AS s""".encode(),
            (runs, per_run),
        )
        await conn.execute(f'VACUUM ANALYZE "{schema}".runs'.encode())
        await conn.execute(f'VACUUM ANALYZE "{schema}".events'.encode())
    finally:
        await conn.close()


async def _steps(
    backend: PostgresBackend, ref: GraphRef, count: int, prefix: str
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"claim_due": [], "commit (retain)": [], "commit (done)": []}
    policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(minutes=5), max_claim_attempts=3)
    for i in range(count):
        now = await backend.now()
        run = Run(
            id=f"{prefix}-{i}",
            graph_id=ref.graph_id,
            graph_hash=ref.graph_hash,
            status=RunStatus.RUNNING,
            started_at=now,
            updated_at=now,
            checkpoint_seq=1,
        )
        proposal = InitProposal(transition_id=f"{prefix}-init-{i}", run=run, wake_at=now)
        assert await backend.transitions.initialize(TENANTLESS, proposal, []) == run
        started = time.perf_counter()
        batch = await backend.runs.claim_due(policy)
        times["claim_due"].append(time.perf_counter() - started)
        assert isinstance(batch, ClaimBatch) and len(batch.leases) == 1, batch
        token = batch.leases[0].claim_token
        step = attrs.evolve(run, step=1, checkpoint_seq=2)
        started = time.perf_counter()
        got = await backend.transitions.commit_claimed(
            TENANTLESS,
            ClaimedProposal(
                transition_id=f"{prefix}-step-{i}",
                run=step,
                expected_checkpoint_seq=1,
                claim_token=token,
                checkpoint_type=CheckpointType.STEP_COMMITTED,
                schedule=RetainClaim(),
            ),
            [],
        )
        times["commit (retain)"].append(time.perf_counter() - started)
        assert isinstance(got, Run), got
        done = attrs.evolve(
            step, status=RunStatus.DONE, checkpoint_seq=3, finished_at=now, output={}
        )
        started = time.perf_counter()
        got = await backend.transitions.commit_claimed(
            TENANTLESS,
            ClaimedProposal(
                transition_id=f"{prefix}-done-{i}",
                run=done,
                expected_checkpoint_seq=2,
                claim_token=token,
                checkpoint_type=CheckpointType.RUN_COMPLETED,
                schedule=ReleaseClaim(Terminal()),
            ),
            [],
        )
        times["commit (done)"].append(time.perf_counter() - started)
        assert isinstance(got, Run), got
    return times


async def measure(url: str, runs: int, events: int, steps: int) -> dict[str, float]:
    ref = GraphRef("bench", content_hash(_DOCUMENT))
    medians: dict[str, dict[str, float]] = {}
    for name in ("empty", "history"):
        schema = f"bench_{name}_{int(time.time())}"
        backend = PostgresBackend(url, schema=schema, pool_max_size=2)
        await backend.open()
        try:
            saved = await backend.graphs.save_graph(TENANTLESS, ref, _DOCUMENT)
            assert isinstance(saved, GraphVersion), saved
            if name == "history":
                began = time.perf_counter()
                await _history(url, schema, runs, events, ref)
                print(
                    f"seeded {runs} finished runs, {events} events in "
                    f"{time.perf_counter() - began:.1f}s"
                )
            await _steps(backend, ref, min(steps, 20), "warm")  # prepared statements, cache
            times = await _steps(backend, ref, steps, "live")
            medians[name] = {op: statistics.median(ts) for op, ts in times.items()}
        finally:
            await backend.close()
    ratios: dict[str, float] = {}
    for op in medians["empty"]:
        empty, history = medians["empty"][op], medians["history"][op]
        ratios[op] = empty / history
        print(
            f"{op:16} empty {empty * 1000:7.3f} ms   history {history * 1000:7.3f} ms   "
            f"ratio {ratios[op]:.2f}"
        )
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a PostgreSQL URL (default: start a throwaway server)")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    if args.url:
        ratios = asyncio.run(measure(args.url, args.runs, args.events, args.steps))
    else:
        with ThrowawayPostgres() as server:
            ratios = asyncio.run(measure(server.conninfo(), args.runs, args.events, args.steps))
    print(f"worst ratio {min(ratios.values()):.2f} (target >= 0.8)")


if __name__ == "__main__":
    main()
