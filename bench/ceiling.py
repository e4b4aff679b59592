"""The raw write ceiling of each database for docket's unit of durable work.

One *transition* here is what a docket commit must make durable at minimum: a fenced
update of one run row (only if its sequence number is still the expected one) plus the
events of that step, atomically. Sizes follow what docket writes per commit of the
``chain_10`` shape (a run document of about 800 bytes, three events of about 150 bytes).

- SQLite: ``BEGIN IMMEDIATE``; ``UPDATE runs SET seq = seq + 1, doc = ? WHERE id = ? AND
  seq = ?``; one ``INSERT`` of the events; ``COMMIT`` — on a file in WAL mode with
  ``synchronous=FULL``, one connection per client, clients in threads (sqlite3 releases
  the GIL while it works). SQLite has one writer at a time; the clients take turns
  through a lock, as docket's own writer does, rather than through SQLite's busy
  handler, whose sleep-and-retry backoff would measure the backoff, not the database.
- PostgreSQL: the same update and insert as one statement (a data-modifying CTE, one
  round trip, its own transaction) on one connection per client, on the same server as
  the trials (so with the same durability settings).
- Redis: a Lua script doing the same check-and-write on two hashes, on the same AOF
  ``everysec`` server, one connection per client.

Each client owns one run row, so clients never conflict: this is the database's
throughput for independent runs, one unit of work per transaction. A backend that
commits several runs' transitions in one transaction (docket's SQLite backend does,
"group commit") can exceed it. docket's side of the ratio is a ``chain_10`` trial at the
same number in flight, run right after the raw measurement (see :func:`paired`), in two
forms: one in-process worker (the durable section's trial) and, with ``workers`` > 1,
real ``docket worker`` processes sharing the same store (:func:`processes_trial`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs

from bench.durable import check_invariants, docket_trial
from bench.shapes import NODES, docket_graph
from bench.stores import Env, Place
from docket import Docket

ROOT = Path(__file__).resolve().parent.parent
APP = "bench.worker_app:create"

DOC = b"d" * 800
EVENT = b"e" * 150
EVENTS_PER_TRANSITION = 3


@attrs.frozen
class Ceiling:
    backend: str
    clients: int
    transitions: int = 0
    seconds: float = 0.0
    # docket's chain_10 transitions/s at ``clients`` in flight: one in-process worker ...
    docket_per_s: float = 0.0
    # ... and ``workers`` ``docket worker`` processes (0: not measured)
    workers: int = 0
    docket_processes_per_s: float = 0.0
    unavailable: str | None = None

    @property
    def per_s(self) -> float:
        return self.transitions / self.seconds if self.seconds else 0.0

    @property
    def best_docket_per_s(self) -> float:
        """The better of the two docket configurations ("worker processes as needed")."""
        return max(self.docket_per_s, self.docket_processes_per_s)

    @property
    def ratio(self) -> float:
        return self.best_docket_per_s / self.per_s if self.per_s else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            **attrs.asdict(self),
            "transitions_per_s": self.per_s,
            "docket_raw": self.ratio,
            "docket_inprocess_raw": self.docket_per_s / self.per_s if self.per_s else 0.0,
            "docket_processes_raw": (
                self.docket_processes_per_s / self.per_s if self.per_s else 0.0
            ),
        }


def _sqlite(path: str, clients: int, duration: float) -> tuple[int, float]:
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE IF NOT EXISTS runs (id INTEGER PRIMARY KEY, seq INT, doc BLOB)")
    setup.execute(
        "CREATE TABLE IF NOT EXISTS events (run INT, seq INT, n INT, body BLOB, "
        "PRIMARY KEY (run, seq, n))"
    )
    setup.execute("DELETE FROM events")
    setup.executemany(
        "INSERT OR REPLACE INTO runs VALUES (?, 0, x'')", [(i,) for i in range(clients)]
    )
    setup.close()
    counts = [0] * clients
    stop = threading.Event()
    writer = threading.Lock()
    errors: list[BaseException] = []

    def client(i: int) -> None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=60, check_same_thread=False)
        conn.execute("PRAGMA synchronous=FULL")
        seq = 0
        try:
            while not stop.is_set():
                with writer:
                    conn.execute("BEGIN IMMEDIATE")
                    cur = conn.execute(
                        "UPDATE runs SET seq = seq + 1, doc = ? WHERE id = ? AND seq = ?",
                        (DOC, i, seq),
                    )
                    if cur.rowcount != 1:
                        raise RuntimeError("fence failed")
                    conn.executemany(
                        "INSERT INTO events VALUES (?, ?, ?, ?)",
                        [(i, seq + 1, n, EVENT) for n in range(EVENTS_PER_TRANSITION)],
                    )
                    conn.execute("COMMIT")
                seq += 1
                counts[i] += 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(duration)
    stop.set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(counts), time.perf_counter() - started


async def _run_clients(
    clients: int, duration: float, one: Any, setup: Any, teardown: Any
) -> tuple[int, float]:
    states = [await setup(i) for i in range(clients)]
    counts = [0] * clients
    deadline = time.perf_counter() + duration

    async def client(i: int) -> None:
        seq = 0
        while time.perf_counter() < deadline:
            await one(states[i], i, seq)
            seq += 1
            counts[i] += 1

    started = time.perf_counter()
    try:
        await asyncio.gather(*(client(i) for i in range(clients)))
        return sum(counts), time.perf_counter() - started
    finally:
        for state in states:
            await teardown(state)


_PG_SQL = b"""WITH moved AS (
    UPDATE ceiling.runs SET seq = seq + 1, doc = %(doc)s
    WHERE id = %(id)s AND seq = %(seq)s RETURNING id, seq
)
INSERT INTO ceiling.events (run, seq, n, body)
SELECT moved.id, moved.seq, n, %(body)s FROM moved, generate_series(1, %(count)s) AS n"""


async def _postgres(conninfo: str, clients: int, duration: float) -> tuple[int, float]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute(b"DROP SCHEMA IF EXISTS ceiling CASCADE")
        await conn.execute(b"CREATE SCHEMA ceiling")
        await conn.execute(b"CREATE TABLE ceiling.runs (id int PRIMARY KEY, seq int, doc bytea)")
        await conn.execute(
            b"CREATE TABLE ceiling.events (run int, seq int, n int, body bytea, "
            b"PRIMARY KEY (run, seq, n))"
        )
        await conn.execute(
            b"INSERT INTO ceiling.runs SELECT i, 0, '' FROM generate_series(0, %s) i",
            (clients,),
        )

    async def setup(i: int) -> Any:
        return await psycopg.AsyncConnection.connect(conninfo, autocommit=True)

    async def one(conn: Any, i: int, seq: int) -> None:
        cur = await conn.execute(
            _PG_SQL,
            {"doc": DOC, "id": i, "seq": seq, "body": EVENT, "count": EVENTS_PER_TRANSITION},
        )
        if cur.rowcount != EVENTS_PER_TRANSITION:
            raise RuntimeError("fence failed")

    async def teardown(conn: Any) -> None:
        await conn.close()

    return await _run_clients(clients, duration, one, setup, teardown)


_LUA = """
if redis.call('HGET', KEYS[1], 'seq') ~= ARGV[1] then return 0 end
local seq = tonumber(ARGV[1]) + 1
redis.call('HSET', KEYS[1], 'seq', seq, 'doc', ARGV[2])
for n = 1, tonumber(ARGV[4]) do
    redis.call('HSET', KEYS[2], seq .. ':' .. n, ARGV[3])
end
return 1
"""


async def _redis(url: str, clients: int, duration: float) -> tuple[int, float]:
    import redis.asyncio as aioredis

    admin: Any = aioredis.from_url(url)
    sha = await admin.script_load(_LUA)
    for i in range(clients):
        await admin.hset(f"ceiling:r:{i}", mapping={"seq": 0, "doc": b""})
        await admin.delete(f"ceiling:ev:{i}")
    await admin.aclose()

    async def setup(i: int) -> Any:
        return aioredis.from_url(url, single_connection_client=True)

    async def one(client: Any, i: int, seq: int) -> None:
        ok = await client.evalsha(
            sha, 2, f"ceiling:r:{i}", f"ceiling:ev:{i}", seq, DOC, EVENT, EVENTS_PER_TRANSITION
        )
        if ok != 1:
            raise RuntimeError("fence failed")

    async def teardown(client: Any) -> None:
        await client.aclose()

    return await _run_clients(clients, duration, one, setup, teardown)


def _shares(inflight: int, workers: int) -> list[int]:
    """``inflight`` split as evenly as possible over at most ``workers`` processes."""
    count = max(1, min(workers, inflight))
    return [inflight // count + (1 if i < inflight % count else 0) for i in range(count)]


async def _wait_ready(procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    """Until every worker has printed its start line (imports done, store open)."""
    deadline = time.monotonic() + 60
    while True:
        for proc, log in zip(procs, logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited {proc.returncode}: {log.read_text()[-300:]}")
        if all("docket worker" in log.read_text() for log in logs):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("workers not ready after 60 s")
        await asyncio.sleep(0.05)


async def processes_trial(
    place: Place, runs: int, inflight: int, workers: int, warmup: int
) -> tuple[float, str | None]:
    """docket's ``chain_10`` transitions/s with ``inflight`` runs executing at once, split
    over up to ``workers`` ``docket worker`` processes on the same store; and the broken
    invariant, if any.

    This process only submits runs and watches the store: it starts the workers, waits
    until each is ready, runs ``warmup`` runs, then submits ``runs`` runs (8 client tasks,
    as fast as the store takes them: the workers' concurrency bounds what is in flight)
    and polls until none is left unfinished. The rate is the checkpoints the measured runs
    committed (``checkpoint_seq``, read back from the database) over the wall time from
    the first submission to the poll that found them all finished (polled every 20 ms).
    """
    url = place.docket_url()
    logs = [place.env.directory / f"{place.name}.w{i}.err" for i in range(workers)]
    procs: list[subprocess.Popen[bytes]] = []
    env = dict(os.environ, DOCKET_BACKEND=url)
    graph = docket_graph("chain_10")
    unfinished = ("running", "waiting")
    async with Docket(url, nodes=NODES) as docket:
        ref = await docket.save_graph(graph)

        async def submit(prefix: str, count: int) -> list[str]:
            ids = [f"{prefix}{i}" for i in range(count)]
            queue = iter(ids)

            async def client() -> None:
                for run_id in queue:
                    await docket.start_run(ref, {"value": 1}, run_id=run_id)

            await asyncio.gather(*(client() for _ in range(8)))
            return ids

        async def all_finished() -> None:
            while (await docket.list_runs(status=unfinished, limit=1)).runs:
                await asyncio.sleep(0.02)

        try:
            for i, share in enumerate(_shares(inflight, workers)):
                command = [sys.executable, "-m", "docket.cli", "worker", "--app", APP]
                procs.append(
                    subprocess.Popen(
                        [*command, "--concurrency", str(share)],
                        cwd=ROOT,
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=logs[i].open("w"),
                    )
                )
            await _wait_ready(procs, logs[: len(procs)])
            await submit("w", warmup)
            await asyncio.wait_for(all_finished(), 120)
            started = time.perf_counter()
            ids = await submit("r", runs)
            await asyncio.wait_for(all_finished(), 120)
            seconds = time.perf_counter() - started
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        problem, per_run = await check_invariants(docket, ids, runs, {})
    if problem is not None:
        return 0.0, problem
    return per_run * runs / seconds, None


async def paired(
    env: Env,
    backend: str,
    clients: int,
    duration: float,
    runs: int,
    repeats: int,
    workers: int = 0,
) -> Ceiling:
    """The raw ceiling and docket's own rate at the same level, measured back to back
    ``repeats`` times, keeping the best of each: the disk and the CPU are shared with
    whatever else the machine runs, and noise only ever slows a trial down. docket's rate
    is measured with one in-process worker and, when ``workers`` > 1, with that many
    worker processes too."""
    best = Ceiling(backend, clients)
    docket_best = 0.0
    processes_best = 0.0
    used = len(_shares(clients, workers)) if workers > 1 else 0
    for rep in range(repeats):
        raw = await measure(env, backend, clients, duration)
        if raw.unavailable is not None:
            return raw
        if raw.per_s > best.per_s:
            best = raw
        place = Place(backend, env, f"ceil_{backend}_{clients}_{rep}")
        mine = await docket_trial(
            place, "chain_10", runs, clients, max(4, runs // 5), footprint=False
        )
        if not mine.ok:
            return Ceiling(backend, clients, unavailable=f"docket GATED: {mine.gated}")
        docket_best = max(docket_best, mine.transitions_per_s)
        if used:
            place = Place(backend, env, f"ceilp_{backend}_{clients}_{rep}")
            try:
                rate, problem = await processes_trial(
                    place, runs, clients, workers, max(4, runs // 5)
                )
            except Exception as exc:  # a worker that would not start, a timeout
                reason = f"{type(exc).__name__}: {exc}"[:160]
                return Ceiling(backend, clients, unavailable=f"docket processes: {reason}")
            if problem is not None:
                return Ceiling(backend, clients, unavailable=f"docket processes GATED: {problem}")
            processes_best = max(processes_best, rate)
    return attrs.evolve(
        best, docket_per_s=docket_best, workers=used, docket_processes_per_s=processes_best
    )


async def measure(env: Env, backend: str, clients: int, duration: float) -> Ceiling:
    missing = env.missing(backend)
    if missing is not None:
        return Ceiling(backend, clients, unavailable=missing)
    try:
        if backend == "sqlite":
            path = str(env.directory / f"ceiling_{clients}.db")
            count, seconds = await asyncio.to_thread(_sqlite, path, clients, duration)
        elif backend == "postgres":
            count, seconds = await _postgres(env.postgres_conninfo(), clients, duration)
        else:
            count, seconds = await _redis(env.redis_url(), clients, duration)
    except Exception as exc:
        return Ceiling(backend, clients, unavailable=f"{type(exc).__name__}: {exc}"[:160])
    return Ceiling(backend, clients, count, seconds)
