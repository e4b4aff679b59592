"""Durable throughput: docket's worker runtime vs LangGraph's checkpointers, side by side.

    python bench/compare.py --quick            # about three minutes
    python bench/compare.py                    # full: 300 runs, 1/8/32 in flight
    python bench/compare.py --backends sqlite --shapes chain_10 --inflight 8 --runs 100

For every (backend, shape, in-flight) cell it runs N workflows and reports runs/s,
supersteps/s and p50/p95/p99 completion latency (from the call that starts a run to the
moment its terminal commit is durable).

- ``docket``: ``Docket.start_run`` from ``inflight`` client tasks, executed by one
  in-process ``Docket.worker(concurrency=inflight)``; completion is seen through a commit
  observer (``await_run`` as a fallback). Each trial uses a fresh SQLite file, Postgres
  schema or Redis key prefix, and ends with invariant checks read back through the facade:
  every run ``done`` and unclaimed, its events numbered 1..``event_seq`` without gaps. A
  trial that fails them prints ``GATED`` instead of numbers.
- ``langgraph``: the same shapes as a ``StateGraph`` with async no-op nodes, invoked with
  ``durability="sync"`` from ``inflight`` tasks, on ``AsyncSqliteSaver`` (its own file, WAL,
  ``synchronous=FULL``) and ``AsyncPostgresSaver`` (a connection pool, same server). No
  LangGraph Redis saver is measured yet.

Servers are the throwaway ones the test suite uses: PostgreSQL from
``docket_postgres.testing`` (note: it runs with ``fsync=off``, for both engines alike) and
Redis from ``docket_redis.testing`` with AOF ``appendfsync everysec``.

Prints a table and ``ratio durable <backend> <shape> inflight=<n> docket/langgraph=<x>``
(throughput ratio; above 1 means docket completes more runs per second). LangGraph is
imported only here (``pip install langgraph langgraph-checkpoint-sqlite
langgraph-checkpoint-postgres``); a missing or failing contender prints ``unavailable``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import attrs

from docket import FINISH, START, Docket, GraphBuilder, NodeRegistry
from docket.graph.model import Graph
from docket.graph.nodes import NodeContext, NodeState
from docket.graph.schema import S
from docket.records import RunStatus
from docket.runtime.lifecycle import CommitContext
from docket.values import JSONDict

SHAPES = ("single_node", "chain_10", "fanout_8")
BACKENDS = ("sqlite", "postgres", "redis")
# Node layers executed per run: the superstep count used for supersteps/s on both sides.
SUPERSTEPS = {"single_node": 1, "chain_10": 10, "fanout_8": 1}
RUN_TIMEOUT = 60.0

# -- graphs (the shapes of bench/inline.py) -------------------------------------------------

NODES = NodeRegistry()


@NODES.node("noop")
def noop(state: NodeState, ctx: NodeContext) -> JSONDict:
    return {}


def docket_graph(shape: str) -> Graph:
    builder = GraphBuilder(shape).input("value", S.integer())
    if shape == "single_node":
        builder.node("n0", "noop").edge("start", START, "n0").edge("done", "n0", FINISH)
    elif shape == "chain_10":
        for i in range(10):
            builder.node(f"n{i}", "noop")
        builder.edge("start", START, "n0").edge("done", "n9", FINISH)
        for i in range(9):
            builder.edge(f"e{i}", f"n{i}", f"n{i + 1}")
    elif shape == "fanout_8":
        for i in range(8):
            builder.node(f"n{i}", "noop")
            builder.edge(f"s{i}", START, f"n{i}").edge(f"f{i}", f"n{i}", FINISH)
    else:
        raise ValueError(shape)
    return builder.build()


class LGState(TypedDict, total=False):
    value: int


async def _lg_noop(state: LGState) -> dict[str, Any]:
    return {}


def langgraph_app(shape: str, checkpointer: Any) -> Any:
    from langgraph.graph import END, StateGraph
    from langgraph.graph import START as LG_START

    graph: Any = StateGraph(LGState)
    if shape == "single_node":
        graph.add_node("n0", _lg_noop)
        graph.add_edge(LG_START, "n0")
        graph.add_edge("n0", END)
    elif shape == "chain_10":
        for i in range(10):
            graph.add_node(f"n{i}", _lg_noop)
        graph.add_edge(LG_START, "n0")
        for i in range(9):
            graph.add_edge(f"n{i}", f"n{i + 1}")
        graph.add_edge("n9", END)
    else:
        for i in range(8):
            graph.add_node(f"n{i}", _lg_noop)
            graph.add_edge(LG_START, f"n{i}")
            graph.add_edge(f"n{i}", END)
    return graph.compile(checkpointer=checkpointer)


# -- results --------------------------------------------------------------------------------


@attrs.frozen
class Result:
    backend: str
    engine: str
    shape: str
    inflight: int
    runs: int = 0
    seconds: float = 0.0
    latencies: tuple[float, ...] = ()
    gated: str | None = None
    unavailable: str | None = None

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.seconds if self.seconds else 0.0

    def percentile(self, q: int) -> float:
        ordered = sorted(self.latencies)
        index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
        return ordered[index]

    def line(self) -> str:
        head = f"| {self.backend:<8} | {self.engine:<9} | {self.shape:<11} | {self.inflight:>3} |"
        if self.unavailable is not None:
            return f"{head} unavailable: {self.unavailable}"
        if self.gated is not None:
            return f"{head} GATED: {self.gated}"
        steps = self.runs_per_s * SUPERSTEPS[self.shape]
        ms = [self.percentile(q) * 1000 for q in (50, 95, 99)]
        return (
            f"{head} {self.runs_per_s:>8.1f} | {steps:>8.1f} | "
            + " | ".join(f"{v:>7.1f}" for v in ms)
            + " |"
        )


HEADER = (
    "| backend  | engine    | shape       |  in | runs/s   | steps/s  | p50 ms  | p95 ms  "
    "| p99 ms  |\n|----------|-----------|-------------|-----|----------|----------|---------|"
    "---------|---------|"
)


async def drive(
    runs: int, inflight: int, one: Callable[[int], Awaitable[float]]
) -> tuple[float, tuple[float, ...]]:
    """Run ``one(i)`` for i < runs with at most ``inflight`` at a time; wall time and
    the per-run latencies ``one`` returned."""
    counter = itertools.count()
    latencies: list[float] = []

    async def client() -> None:
        while (i := next(counter)) < runs:
            latencies.append(await one(i))

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(inflight)))
    return time.perf_counter() - started, tuple(latencies)


# -- docket ---------------------------------------------------------------------------------


async def docket_trial(
    backend: str, url: str, shape: str, runs: int, inflight: int, warmup: int
) -> Result:
    waiters: dict[str, asyncio.Future[float]] = {}

    async def observe(checkpoint: Any, context: CommitContext) -> None:
        run = checkpoint.run
        if run.status.terminal:
            fut = waiters.get(run.id)
            if fut is not None and not fut.done():
                fut.set_result(time.perf_counter())

    cell = Result(backend, "docket", shape, inflight)
    async with Docket(url, nodes=NODES, observers=[observe], poll_interval=0.2) as docket:
        ref = await docket.save_graph(docket_graph(shape))
        loop = asyncio.get_running_loop()
        ids: list[str] = []

        async def one(i: int, prefix: str = "r") -> float:
            run_id = f"{prefix}{i}"
            fut: asyncio.Future[float] = loop.create_future()
            waiters[run_id] = fut
            started = time.perf_counter()
            await docket.start_run(ref, {"value": 1}, run_id=run_id)
            try:
                done = await asyncio.wait_for(asyncio.shield(fut), RUN_TIMEOUT)
            except TimeoutError:  # observers are hints: fall back to reading the store
                await docket.await_run(run_id, timeout=RUN_TIMEOUT, poll_interval=0.01)
                done = time.perf_counter()
            ids.append(run_id)
            return done - started

        async with docket.worker(concurrency=inflight, name="bench"):
            await drive(warmup, inflight, lambda i: one(i, "w"))
            ids.clear()
            seconds, latencies = await drive(runs, inflight, one)
        problem = await check_invariants(docket, ids, runs)
    if problem is not None:
        return attrs.evolve(cell, gated=problem)
    return attrs.evolve(cell, runs=runs, seconds=seconds, latencies=latencies)


async def check_invariants(docket: Docket, ids: list[str], runs: int) -> str | None:
    if len(set(ids)) != runs:
        return f"{len(set(ids))} of {runs} runs completed"
    for run_id in ids:
        info = await docket.inspect_run(run_id)
        run = info.run
        if run.status is not RunStatus.DONE:
            return f"run {run_id} is {run.status}"
        if info.claimed_at is not None:
            return f"run {run_id} still claimed"
        if info.poisoned_at is not None:
            return f"run {run_id} poisoned"
        seqs = [event.seq for event in await docket.history(run_id)]
        if seqs != list(range(1, run.event_seq + 1)):
            return f"run {run_id}: events not contiguous 1..{run.event_seq}"
    return None


# -- langgraph ------------------------------------------------------------------------------


async def langgraph_trial(
    backend: str,
    saver: Callable[[], contextlib.AbstractAsyncContextManager[Any]],
    shape: str,
    runs: int,
    inflight: int,
    warmup: int,
) -> Result:
    cell = Result(backend, "langgraph", shape, inflight)
    try:
        async with saver() as checkpointer:
            app = langgraph_app(shape, checkpointer)
            tag = f"{shape}-{inflight}-{time.time_ns()}"

            async def one(i: int, prefix: str = "t") -> float:
                config = {"configurable": {"thread_id": f"{tag}-{prefix}{i}"}}
                started = time.perf_counter()
                await app.ainvoke({"value": 1}, config, durability="sync")
                return time.perf_counter() - started

            await drive(warmup, inflight, lambda i: one(i, "w"))
            seconds, latencies = await drive(runs, inflight, one)
    except Exception as exc:
        return attrs.evolve(cell, unavailable=f"{type(exc).__name__}: {exc}"[:160])
    return attrs.evolve(cell, runs=runs, seconds=seconds, latencies=latencies)


def sqlite_saver(path: Path) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]]:
    @contextlib.asynccontextmanager
    async def make() -> AsyncIterator[Any]:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            await saver.setup()
            await saver.conn.execute("PRAGMA journal_mode=WAL")
            await saver.conn.execute("PRAGMA synchronous=FULL")
            yield saver

    return make


def postgres_saver(
    conninfo: str, inflight: int
) -> Callable[[], contextlib.AbstractAsyncContextManager[Any]]:
    @contextlib.asynccontextmanager
    async def make() -> AsyncIterator[Any]:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
        pool: Any = AsyncConnectionPool(
            conninfo, min_size=1, max_size=max(2, inflight), kwargs=kwargs, open=False
        )
        async with pool:
            saver = AsyncPostgresSaver(pool)
            await saver.setup()
            yield saver

    return make


# -- servers --------------------------------------------------------------------------------


@contextlib.contextmanager
def servers(wanted: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    found: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="docket-bench-")))
        found["dir"] = directory
        if "postgres" in wanted:
            try:
                from docket_postgres.testing import ThrowawayPostgres

                found["postgres"] = stack.enter_context(ThrowawayPostgres())
            except Exception as exc:
                found["postgres"] = f"{type(exc).__name__}: {exc}"[:160]
        if "redis" in wanted:
            try:
                from docket_redis.testing import redis_server

                found["redis"] = stack.enter_context(
                    redis_server(appendonly=True, appendfsync="everysec")
                )
            except Exception as exc:
                found["redis"] = f"{type(exc).__name__}: {exc}"[:160]
        yield found


async def run_cell(
    env: dict[str, Any], backend: str, shape: str, inflight: int, runs: int, warmup: int
) -> list[Result]:
    trial = f"{backend}_{shape}_{inflight}"
    directory: Path = env["dir"]
    out: list[Result] = []
    server: Any = env.get(backend)
    if isinstance(server, str):
        return [
            Result(backend, engine, shape, inflight, unavailable=f"server: {server}")
            for engine in ("docket", "langgraph")
        ]
    saver: Callable[[], contextlib.AbstractAsyncContextManager[Any]] | None = None
    lg_missing = "no LangGraph Redis saver in this first cut"
    if backend == "sqlite":
        url = f"sqlite:///{directory / (trial + '.db')}?synchronous=FULL"
        saver = sqlite_saver(directory / f"lg_{trial}.db")
    elif backend == "postgres":
        url = server.url(schema=trial)
        saver = postgres_saver(server.conninfo(), inflight)
    else:
        url = f"{server.url}?prefix={trial}"
    try:
        out.append(await docket_trial(backend, url, shape, runs, inflight, warmup))
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"[:160]
        out.append(Result(backend, "docket", shape, inflight, gated=reason))
    if saver is None:
        out.append(Result(backend, "langgraph", shape, inflight, unavailable=lg_missing))
    else:
        out.append(await langgraph_trial(backend, saver, shape, runs, inflight, warmup))
    return out


def _ratio(results: list[Result]) -> Iterator[str]:
    for docket in results:
        if docket.engine != "docket" or not docket.runs:
            continue
        for other in results:
            if (
                other.engine == "langgraph"
                and other.runs
                and (other.backend, other.shape, other.inflight)
                == (docket.backend, docket.shape, docket.inflight)
            ):
                ratio = docket.runs_per_s / other.runs_per_s
                yield (
                    f"ratio durable {docket.backend} {docket.shape} inflight={docket.inflight} "
                    f"docket/langgraph={ratio:.3f}"
                )


async def main_async(args: argparse.Namespace) -> int:
    results: list[Result] = []
    with servers(tuple(args.backends)) as env:
        print(
            f"durable: {args.runs} runs per cell (+{args.warmup} warm-up), "
            f"in flight {args.inflight}, python {sys.version.split()[0]}",
            flush=True,
        )
        print(HEADER, flush=True)
        for backend in args.backends:
            for shape in args.shapes:
                for inflight in args.inflight:
                    cell = await run_cell(env, backend, shape, inflight, args.runs, args.warmup)
                    for result in cell:
                        print(result.line(), flush=True)
                    results.extend(cell)
    for line in _ratio(results):
        print(line)
    gated = [r for r in results if r.gated is not None]
    return 1 if gated else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 runs, 1 and 8 in flight")
    parser.add_argument("--runs", type=int, default=None, help="runs per cell (300; quick 50)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up runs per cell")
    parser.add_argument("--inflight", type=int, nargs="+", default=None)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    args = parser.parse_args(argv)
    if args.runs is None:
        args.runs = 50 if args.quick else 300
    if args.warmup is None:
        args.warmup = 8 if args.quick else 30
    if args.inflight is None:
        args.inflight = [1, 8] if args.quick else [1, 8, 32]
    started = time.perf_counter()
    code = asyncio.run(main_async(args))
    print(f"total {time.perf_counter() - started:.0f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
