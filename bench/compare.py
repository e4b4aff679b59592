"""docket vs LangGraph and DBOS, and docket vs its databases: the whole benchmark in one
command.

    python bench/compare.py --quick     # about five minutes on a 2-core machine
    python bench/compare.py             # full run
    python bench/compare.py --sections durable --backends sqlite --shapes chain_10

Sections (``--sections``; all by default), on the same machine and the same servers:

- ``inmemory``: docket's inline runner vs LangGraph without a checkpointer and with
  ``InMemorySaver`` (``bench/inline.py``): median time per run over interleaved batches;
- ``durable``: each shape, ``--runs`` runs at each ``--inflight`` level, through docket's
  worker runtime on SQLite (WAL, ``synchronous=FULL``), PostgreSQL (durable: ``fsync``,
  ``synchronous_commit`` and ``full_page_writes`` on) and Redis (AOF ``everysec``),
  against LangGraph with ``durability="sync"`` on ``AsyncSqliteSaver``,
  ``AsyncPostgresSaver`` and the third-party ``langgraph-checkpoint-plainredis``'s
  ``AsyncRedisSaver`` (``bench/durable.py``), and against DBOS 3.x on SQLite (default
  journal and WAL) and PostgreSQL, ``--dbos-runs`` runs per cell (``bench/dbos_peer.py``).
  Every engine's runs are read back and checked after each trial (outside the window);
- ``ceiling``: each database's best raw rate for docket's unit of durable work at
  1/8/32 in flight, over client counts and batching (``bench/raw.py``), against docket
  with one in-process worker and with ``--ceiling-workers`` ``docket worker`` processes
  (``bench/ceiling.py``);
- ``growth``: transitions/s and ``claim_due`` latency on a store holding
  ``--growth-runs`` finished runs and ``--growth-events`` events vs an empty one;
- ``longchat``: cost per step of a 200-superstep run appending 1 KB a step
  (``bench/growth.py``);
- ``stream``: commit-to-follower latency of ``Docket.stream`` (p50/p99, from just before
  the commit is sent to the follower's stream yielding it) with ``--stream-followers``
  followers of one run, on the memory backend and each of ``--backends``
  (``bench/streams.py``);
- ``history``: state-history storage bytes per step of the long chat at
  ``--history-turns`` steps, docket's events vs LangGraph's ``AsyncSqliteSaver`` rows,
  both on SQLite (``bench/history_bytes.py``);
- ``queues``: claim throughput of one worker (``--queue-concurrency`` slots) over
  ``--queue-runs`` one-node runs with no queue configured vs in a queue limited to the
  worker's concurrency with mixed priorities, on memory and each of ``--backends``
  (``bench/queue_claims.py``; issue #25's target: limited >= 0.8 x plain).

``--unsafe-fast-pg`` adds a second PostgreSQL server with ``fsync``,
``synchronous_commit`` and ``full_page_writes`` off (backend ``postgres-unsafe``) to the
durable and ceiling sections, reported in tables of their own.

Prints Markdown tables and the lines ``ratio <shape> <backend> <inflight>
docket/<peer>=<x>`` for the peers ``langgraph``, ``dbos`` and ``dbos-wal`` (time ratio
for ``inline``: below 1 means docket is faster; throughput ratio for the databases: above
1 means docket is faster), ``ceiling <backend> <inflight> docket/best_raw=<x> (best raw
<rate>/s: <variant>)``, ``ceiling <backend> <inflight> docket/one_per_txn=<x>``,
``ceiling <backend> max raw=...``, ``growth <backend> large/empty=<x>`` and ``longchat
<backend> step200/step10=<x>``, ``stream <backend> <followers> p50_ms=<x> p99_ms=<y>
missed=<n>``, ``history <engine> bytes_per_step@<N>=<b>`` (and ``growth@<N>/<M>``,
``history <N> docket/langgraph=<x>``), ``queues <backend> limited/plain=<x> (plain
<a>/s, limited <b>/s, target 0.8)``, and writes ``results.json``, ``results.md`` and PNG
charts to ``--out`` (``bench/results/``). Exits 1 if any engine's trial is GATED (its
read-back found a run that is not what the shape should have stored).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import ceiling, durable, growth, history_bytes, inline, queue_claims, streams
from bench.cells import run_cell
from bench.dbos_peer import engines as dbos_engines
from bench.report import UNSAFE_NOTE, Report
from bench.shapes import SHAPES
from bench.stores import UNSAFE_PG, Env, Place, servers

BACKENDS = ("sqlite", "postgres", "redis")
SECTIONS = (
    "inmemory",
    "durable",
    "ceiling",
    "growth",
    "longchat",
    "stream",
    "history",
    "queues",
)
RESULTS = Path(__file__).resolve().parent / "results"


def _versions(env: Env) -> dict[str, Any]:
    found: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": _cpu(),
    }
    for dist in (
        "langgraph",
        "langgraph-checkpoint",
        "langgraph-checkpoint-sqlite",
        "langgraph-checkpoint-postgres",
        "langgraph-checkpoint-plainredis",
        "dbos",
    ):
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    import sqlite3

    found["sqlite"] = sqlite3.sqlite_version
    return found


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return platform.processor()
    model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Model name" in ln), "")
    return f"{os.cpu_count()} x {model or platform.processor()}"


async def _server_versions(env: Env, meta: dict[str, Any]) -> None:
    for backend in ("postgres", UNSAFE_PG):
        if env.missing(backend) is not None:
            continue
        import psycopg

        conninfo = env.postgres_conninfo(backend)
        async with await psycopg.AsyncConnection.connect(conninfo) as conn:
            cur = await conn.execute(b"SHOW server_version")
            row = await cur.fetchone()
            meta["postgres"] = row[0] if row else None
            settings = {}
            for name in ("fsync", "synchronous_commit", "full_page_writes"):
                cur = await conn.execute(f"SHOW {name}".encode())
                row = await cur.fetchone()
                settings[name] = row[0] if row else None
            meta[f"{backend}_settings"] = settings
    if env.missing("redis") is None:
        import redis.asyncio as aioredis

        client: Any = aioredis.from_url(env.redis_url())
        info = await client.info("server")
        meta["redis"] = info.get("redis_version")
        meta["redis_appendfsync"] = (await client.config_get("appendfsync")).get("appendfsync")
        await client.aclose()


def _placer(backend: str, env: Env) -> Callable[[str], Place]:
    return lambda name: Place(backend, env, name)


def _say(text: str) -> None:
    print(text, flush=True)


async def run_all(args: argparse.Namespace, report: Report) -> None:
    # The unsafe server joins the durable and ceiling sections only.
    unsafe = [UNSAFE_PG] if args.unsafe_fast_pg else []
    with servers(tuple(args.backends + unsafe)) as env:
        report.meta.update(_versions(env))
        await _server_versions(env, report.meta)
        _say(f"machine: {report.meta}")

        if "inmemory" in args.sections:
            began = time.perf_counter()
            # A thread of its own: the inline runner refuses to run inside an event loop.
            report.inline = await asyncio.to_thread(
                inline.measure, args.batches, args.batch_size, args.inline_warmup
            )
            _say(f"\n### In memory ({time.perf_counter() - began:.0f} s)\n")
            _say(report.inline_table())

        if "durable" in args.sections:
            began = time.perf_counter()
            _say(
                f"\n### Durable: {args.runs} runs per cell (+{args.warmup} warm-up), "
                f"best of {args.durable_rounds} rounds, in flight {args.inflight}; DBOS "
                f"{args.dbos_runs} runs per cell\n"
            )
            for backend in args.backends + unsafe:
                missing = env.missing(backend)
                for shape in args.shapes:
                    for inflight in args.inflight:
                        if missing is not None:
                            kind = Place(backend, env, "x").kind
                            names = ["docket", "langgraph"]
                            names += list(dbos_engines(kind)) if args.dbos_runs else []
                            cell = [
                                durable.Result(backend, e, shape, inflight, unavailable=missing)
                                for e in names
                            ]
                        else:
                            cell = await run_cell(
                                _placer(backend, env),
                                shape,
                                inflight,
                                args.runs,
                                args.warmup,
                                args.durable_rounds,
                                args.dbos_runs,
                            )
                        report.durable.extend(cell)
                        for r in cell:
                            state = r.gated or r.unavailable or f"{r.runs_per_s:.1f} runs/s"
                            _say(f"  {backend} {r.engine} {shape} {inflight}: {state}")
            _say(f"({time.perf_counter() - began:.0f} s)\n")
            _say(report.durable_table())
            if unsafe:
                _say(f"\n### Durable, unsafe PostgreSQL\n\n{UNSAFE_NOTE}\n")
                _say(report.durable_table(unsafe=True))

        if "ceiling" in args.sections:
            began = time.perf_counter()
            for backend in args.backends + unsafe:
                for clients in args.inflight:
                    found = await ceiling.paired(
                        env,
                        backend,
                        clients,
                        args.ceiling_seconds,
                        args.ceiling_runs,
                        args.ceiling_repeats,
                        args.ceiling_workers,
                    )
                    report.ceilings.append(found)
                    best = found.best
                    state = found.unavailable or (
                        f"best raw {found.per_s:.0f}/s ({best.variant if best else 'n/a'}), "
                        f"docket {found.best_docket_per_s:.0f}/s"
                    )
                    _say(f"  {backend} {clients}: {state}")
            _say(f"\n### Write ceiling ({time.perf_counter() - began:.0f} s)\n")
            _say(report.ceiling_table())
            _say("\n### Raw variants (best trial of each)\n")
            _say(report.raw_table())

        if "growth" in args.sections:
            began = time.perf_counter()
            for backend in args.backends:
                report.growth.extend(
                    await growth.growth_pair(
                        env,
                        backend,
                        args.growth_runs,
                        args.growth_events,
                        args.growth_trial_runs,
                        8,
                        args.growth_repeats,
                    )
                )
            _say(f"\n### Growth ({time.perf_counter() - began:.0f} s)\n")
            _say(report.growth_table())

        if "longchat" in args.sections:
            began = time.perf_counter()
            for backend in args.backends:
                place = Place(backend, env, "longchat")
                report.long_chat.append(
                    await growth.long_chat(place, args.longchat_turns, args.longchat_runs)
                )
            _say(f"\n### Long chat ({time.perf_counter() - began:.0f} s)\n")
            _say(report.long_chat_table())

        if "stream" in args.sections:
            began = time.perf_counter()
            for backend in ["memory", *args.backends]:
                for followers in args.stream_followers:
                    place = Place(backend, env, f"stream{followers}")
                    report.streams.append(
                        await streams.stream_latency(place, followers, args.stream_commits)
                    )
            _say(f"\n### Stream latency ({time.perf_counter() - began:.0f} s)\n")
            _say(streams.stream_table(report.streams))

        if "history" in args.sections:
            began = time.perf_counter()
            for turns in args.history_turns:
                report.history.append(
                    await history_bytes.docket_history_bytes(
                        Place("sqlite", env, f"history{turns}"), turns
                    )
                )
                report.history.append(
                    await history_bytes.langgraph_history_bytes(
                        Place("sqlite", env, f"lg_history{turns}"), turns
                    )
                )
            _say(f"\n### History storage ({time.perf_counter() - began:.0f} s)\n")
            _say(history_bytes.history_table(report.history))

        if "queues" in args.sections:
            began = time.perf_counter()
            for backend in ["memory", *args.backends]:
                report.queues.extend(
                    await queue_claims.queue_pair(
                        _placer(backend, env),
                        backend,
                        args.queue_runs,
                        args.queue_concurrency,
                        args.queue_repeats,
                        args.queue_limit,
                    )
                )
            _say(f"\n### Queue claims ({time.perf_counter() - began:.0f} s)\n")
            _say(queue_claims.queue_table(report.queues))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = parser.add_argument
    add("--quick", action="store_true", help="smaller everything: about five minutes")
    add("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    add("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    add("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    add("--inflight", type=int, nargs="+", default=[1, 8, 32], help="also ceiling clients")
    add("--runs", type=int, help="measured runs per durable cell (300; quick 40)")
    add("--warmup", type=int, help="warm-up runs per durable cell (30; quick 5)")
    add(
        "--durable-rounds",
        type=int,
        help="rounds per durable cell, engines alternating; each engine's best is kept (2; "
        "quick 1)",
    )
    add(
        "--dbos-runs",
        type=int,
        help="measured DBOS runs per durable cell, 0 to leave DBOS out (100; quick 20)",
    )
    add(
        "--unsafe-fast-pg",
        action="store_true",
        help="also measure the durable and ceiling sections on a PostgreSQL server with "
        "fsync, synchronous_commit and full_page_writes off (separate tables)",
    )
    add("--batches", type=int, help="in-memory batches (15; quick 7)")
    add("--batch-size", type=int, help="in-memory runs per batch (40; quick 20)")
    add("--inline-warmup", type=int, help="in-memory warm-up runs (30; quick 10)")
    add(
        "--ceiling-seconds",
        type=float,
        help="seconds per raw variant at each ceiling level (whole seconds for pgbench) "
        "(2; quick 1)",
    )
    add("--ceiling-runs", type=int, help="docket chain_10 runs per ceiling level (400; quick 30)")
    add("--ceiling-repeats", type=int, help="raw/docket rounds per level (3; quick 1)")
    add(
        "--ceiling-workers",
        type=int,
        default=os.cpu_count() or 1,
        help="docket worker processes for the ceiling's second docket trial (default: the "
        "number of cores; 0 or 1: in-process worker only)",
    )
    add("--growth-runs", type=int, help="finished runs in the large store (100k; quick 10k)")
    add("--growth-events", type=int, help="events in the large store (1M; quick 100k)")
    add("--growth-trial-runs", type=int, help="runs per growth trial (400; quick 80)")
    add("--growth-repeats", type=int, help="alternating trials per store (3; quick 2)")
    add("--longchat-turns", type=int, default=200)
    add("--longchat-runs", type=int, help="long-chat runs per backend (3; quick 1)")
    add(
        "--stream-followers",
        type=int,
        nargs="+",
        default=[1, 100],
        help="streams following the one run of each stream cell",
    )
    add("--stream-commits", type=int, help="measured commits per stream cell (200; quick 30)")
    add(
        "--history-turns",
        type=int,
        nargs="+",
        default=[50, 200],
        help="long-chat steps of the history section's runs",
    )
    add("--queue-runs", type=int, help="runs per queue-claims trial (400; quick 100)")
    add("--queue-concurrency", type=int, default=8, help="the queue trials' worker slots")
    add("--queue-repeats", type=int, help="alternating plain/limited trials (3; quick 2)")
    add(
        "--queue-limit",
        type=int,
        default=None,
        help="the limited queue's execution limit (default: --queue-concurrency)",
    )
    add("--out", type=Path, default=RESULTS, help="where JSON and charts go")
    args = parser.parse_args(argv)
    defaults = {
        "runs": (300, 40),
        "warmup": (30, 5),
        "durable_rounds": (2, 1),
        "dbos_runs": (100, 20),
        "batches": (15, 7),
        "batch_size": (40, 20),
        "inline_warmup": (30, 10),
        "ceiling_seconds": (2.0, 1.0),
        "ceiling_runs": (400, 30),
        "ceiling_repeats": (3, 1),
        "growth_runs": (100_000, 10_000),
        "growth_events": (1_000_000, 100_000),
        "growth_trial_runs": (400, 80),
        "growth_repeats": (3, 2),
        "longchat_runs": (3, 1),
        "stream_commits": (200, 30),
        "queue_runs": (400, 100),
        "queue_repeats": (3, 2),
    }
    for name, (full, quick) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.perf_counter()
    report = Report(meta={"quick": args.quick, "argv": sys.argv[1:] if argv is None else argv})
    asyncio.run(run_all(args, report))
    elapsed = time.perf_counter() - started
    report.meta["seconds"] = round(elapsed, 1)
    written = report.write(args.out)
    _say("")
    for line in report.lines():
        _say(line)
    _say(f"\nwrote {', '.join(str(p) for p in written)}")
    _say(f"total {elapsed:.0f} s")
    gated = [r for r in report.durable if r.gated is not None]
    return 1 if gated else 0


if __name__ == "__main__":
    sys.exit(main())
