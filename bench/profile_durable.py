"""Docket's durable throughput alone, one cell at a time, for profiling.

    python bench/profile_durable.py --backend sqlite --shape chain_10 --inflight 8
    python bench/profile_durable.py --backend postgres --profile /tmp/pg.prof   # cProfile
    python bench/profile_durable.py --limiter unlimited      # nodes naming a limiter

Self-contained (its own no-op graphs and servers, like ``bench/compare.py``'s docket
side) so it keeps working while the comparison harness changes. Repeats the trial
``--repeat`` times on fresh storage and prints runs/s for each and the median: the
machine is shared, so one number means little.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docket import FINISH, START, Docket, GraphBuilder, NodeRegistry
from docket.graph.model import Graph
from docket.graph.nodes import NodeContext, NodeState
from docket.graph.schema import S
from docket.records import Checkpoint
from docket.runtime.lifecycle import CommitContext
from docket.values import JSONDict

SHAPES = ("single_node", "chain_10", "fanout_8")
NODES = NodeRegistry()


@NODES.node("noop")
def noop(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {}


@NODES.node("async_noop")
async def async_noop(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {}


def graph_of(shape: str, node: str = "noop", limiter: str | None = None) -> Graph:
    """The no-op shapes; ``node="async_noop"`` runs them on the event loop (no thread);
    ``limiter``: every node names that queue as its limiter (docs/queues.md)."""
    builder = GraphBuilder(shape).input("value", S.integer())
    if shape == "single_node":
        builder.node("n0", node, limiter=limiter).edge("start", START, "n0")
        builder.edge("done", "n0", FINISH)
    elif shape == "chain_10":
        for i in range(10):
            builder.node(f"n{i}", node, limiter=limiter)
        builder.edge("start", START, "n0").edge("done", "n9", FINISH)
        for i in range(9):
            builder.edge(f"e{i}", f"n{i}", f"n{i + 1}")
    else:
        for i in range(8):
            builder.node(f"n{i}", node, limiter=limiter)
            builder.edge(f"s{i}", START, f"n{i}").edge(f"f{i}", f"n{i}", FINISH)
    return builder.build()


@contextlib.contextmanager
def server(backend: str) -> Iterator[Any]:
    if backend == "postgres":
        from docket_postgres.testing import ThrowawayPostgres

        with ThrowawayPostgres() as pg:
            yield pg
    elif backend == "redis":
        from docket_redis.testing import redis_server

        with redis_server(appendonly=True, appendfsync="everysec") as redis:
            yield redis
    else:
        with tempfile.TemporaryDirectory(prefix="docket-profile-") as directory:
            yield Path(directory)


def url_of(backend: str, place: Any, trial: str, extra: str = "") -> str:
    if backend == "postgres":
        url = str(place.url(schema=trial))
    elif backend == "redis":
        url = f"{place.url}?prefix={trial}"
    else:
        url = f"sqlite:///{place / (trial + '.db')}?synchronous=FULL"
    if not extra:
        return url
    return f"{url}{'&' if '?' in url else '?'}{extra}"


def machine_busy() -> float:
    """Seconds every CPU of this machine has spent busy since boot (Linux; 0 elsewhere):
    the difference over a trial includes the database server's work, not just ours."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


async def trial(
    url: str,
    shape: str,
    runs: int,
    inflight: int,
    warmup: int,
    node: str = "noop",
    tag: str = "",
    limiter: str = "none",
) -> tuple[float, float, float]:
    """Runs/s of ``runs`` runs with ``inflight`` at a time on one in-process worker,
    this process's CPU milliseconds per run (less sensitive to a busy machine), and the
    whole machine's busy milliseconds per run (this process plus the database server)."""
    done: dict[str, asyncio.Future[None]] = {}

    async def observe(checkpoint: Checkpoint, context: CommitContext) -> None:
        future = done.get(checkpoint.run.id)
        if checkpoint.run.status.terminal and future is not None and not future.done():
            future.set_result(None)

    async with Docket(url, nodes=NODES, observers=[observe], poll_interval=0.2) as docket:
        named = None
        if limiter != "none":  # a limiter queue that never binds: the cost of the checks
            named = "bench_limiter"
            bound = None if limiter == "unlimited" else 1_000_000
            await docket.configure_queue(named, execution_limit=bound)
        ref = await docket.save_graph(graph_of(shape, node, named))
        loop = asyncio.get_running_loop()

        async def drive(prefix: str, count: int) -> float:
            queue = iter(range(count))

            async def client() -> None:
                for i in queue:
                    run_id = f"{tag}{prefix}{i}"
                    done[run_id] = loop.create_future()
                    await docket.start_run(ref, {"value": 1}, run_id=run_id)
                    await asyncio.wait_for(done[run_id], 60)

            started = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(inflight)))
            return time.perf_counter() - started

        async with docket.worker(concurrency=inflight, name="profile") as worker:
            await drive("w", warmup)
            cpu, busy = time.process_time(), machine_busy()
            polls = worker.stats.polls
            seconds = await drive("r", runs)
            cpu, busy = time.process_time() - cpu, machine_busy() - busy
            polls = worker.stats.polls - polls
    print(f"  claim_due calls per run: {polls / runs:.2f}", flush=True)
    return runs / seconds, cpu * 1000 / runs, busy * 1000 / runs


async def measure(args: argparse.Namespace) -> tuple[list[float], list[float], list[float]]:
    rates: list[float] = []
    cpus: list[float] = []
    busies: list[float] = []
    with server(args.backend) as place:
        for rep in range(args.repeat):
            url = url_of(
                args.backend, place, f"p{rep}_{args.shape}_{args.inflight}", args.url_extra
            )
            node = "async_noop" if args.async_nodes else "noop"
            rate, cpu_ms, busy_ms = await trial(
                url, args.shape, args.runs, args.inflight, args.warmup, node, limiter=args.limiter
            )
            rates.append(rate)
            cpus.append(cpu_ms)
            busies.append(busy_ms)
            print(
                f"  rep {rep}: {rate:.1f} runs/s, {cpu_ms:.2f} CPU ms/run, "
                f"{busy_ms:.2f} machine busy ms/run",
                flush=True,
            )
    return rates, cpus, busies


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres", "redis"), default="sqlite")
    parser.add_argument("--shape", choices=SHAPES, default="chain_10")
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", help="write a cProfile dump here")
    parser.add_argument("--async-nodes", action="store_true", help="async no-op nodes")
    parser.add_argument("--url-extra", default="", help="query options, e.g. pool_max_size=32")
    parser.add_argument(
        "--limiter",
        choices=("none", "unlimited", "loose"),
        default="none",
        help="every node names a limiter queue: unlimited (no slot taken) or loose (a "
        "limit that never binds: one slot per attempt)",
    )
    args = parser.parse_args()
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    rates, cpus, busies = asyncio.run(measure(args))
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    print(
        f"{args.backend} {args.shape} inflight={args.inflight} limiter={args.limiter}: "
        f"median {statistics.median(rates):.1f} runs/s "
        f"{statistics.median(cpus):.2f} CPU ms/run "
        f"{statistics.median(busies):.2f} machine busy ms/run over {len(rates)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
