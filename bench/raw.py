"""Lower-level clients doing docket's unit of durable work, without docket: the raw side
of the write ceiling (``bench/ceiling.py`` pairs it with docket's own rate).

One *unit* is what a docket commit must make durable at minimum: a fenced update of one
run row (applied only if its sequence number is still the expected one) plus that step's
three events, atomically. Sizes follow what docket writes per commit of ``chain_10`` (a
run document of 800 bytes, events of 150 bytes). Every variant checks the fence on every
unit and fails loudly when it does not hold, and every variant is read back after its
timed window (the rows' sequence numbers and the event count must add up to the units
it reported), so a rate is only ever reported for work the database really holds.

The variants at ``n`` runs in flight (each run has one row; a run's next unit can only be
written after its previous one committed, so at most ``n`` units can share a commit):

- ``one_per_txn``: today's figure, kept under its own name — one unit per transaction,
  ``n`` clients (SQLite: threads taking turns through a lock; PostgreSQL: one asyncio
  connection per client, the update and insert as one CTE statement; Redis: one asyncio
  connection per client running the Lua fence script);
- SQLite: one thread and one connection, ``1/txn`` (the ``n`` rows in turn) and ``n/txn``
  (all ``n`` rows in one transaction, a savepoint each, as docket's group commit does);
- PostgreSQL: ``pgbench`` with the same CTE, ``c`` connections x ``k`` units per statement
  for every split ``c x k = n`` in :data:`PG_SPLITS`;
- Redis: ``p`` client processes x a pipeline of ``k`` fence scripts, ``p x k = n``
  (:data:`REDIS_SPLITS`), so that the client's Python is not the bottleneck.
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
DOC = b"d" * 800
EVENT = b"e" * 150
EVENTS_PER_UNIT = 3
ONE_PER_TXN = "one_per_txn"

# (connections, units per statement) tried at each in-flight level; c x k = n.
PG_SPLITS = ((1, 1), (8, 1), (2, 4), (1, 8), (32, 1), (8, 4), (2, 16), (1, 32))
# (client processes, pipeline depth); p x k = n.
REDIS_SPLITS = ((1, 1), (1, 8), (2, 4), (4, 2), (1, 32), (2, 16), (4, 8))


class RawError(RuntimeError):
    """A raw client failed: a fence that did not hold, a tool that exited non-zero, or a
    read-back that did not match the units reported."""


@attrs.frozen
class RawRate:
    variant: str  # what reached the rate, in words
    units: int
    seconds: float
    connections: int = 1
    batch: int = 1  # units per transaction, statement or pipeline

    @property
    def per_s(self) -> float:
        return self.units / self.seconds if self.seconds else 0.0

    def as_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "per_s": self.per_s}


def variants(backend: str, n: int) -> list[tuple[str, int, int]]:
    """(variant name, connections, batch) measured at ``n`` in flight."""
    found = [(ONE_PER_TXN, n, 1)]
    if backend == "sqlite":
        found.append(("sqlite 1 thread, 1/txn", 1, 1))
        if n > 1:
            found.append((f"sqlite 1 thread, {n}/txn (savepoint each)", 1, n))
    elif backend == "postgres":
        found += [(f"pgbench {c} conn x {k}/stmt", c, k) for c, k in PG_SPLITS if c * k == n]
    else:
        found += [
            (f"redis {p} proc x {k}-script pipeline", p, k) for p, k in REDIS_SPLITS if p * k == n
        ]
    return found


# -- SQLite -----------------------------------------------------------------------------


def _sqlite_setup(path: str, rows: int) -> None:
    setup = sqlite3.connect(path, isolation_level=None)
    try:
        setup.execute("PRAGMA journal_mode=WAL")
        setup.execute("DROP TABLE IF EXISTS runs")
        setup.execute("DROP TABLE IF EXISTS events")
        setup.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, seq INT, doc BLOB)")
        setup.execute(
            "CREATE TABLE events (run INT, seq INT, n INT, body BLOB, PRIMARY KEY (run, seq, n))"
        )
        setup.executemany("INSERT INTO runs VALUES (?, 0, x'')", [(i,) for i in range(rows)])
    finally:
        setup.close()


def _sqlite_verify(path: str, units: int) -> None:
    conn = sqlite3.connect(path)
    try:
        seqs = conn.execute("SELECT coalesce(sum(seq), 0) FROM runs").fetchone()[0]
        events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        conn.close()
    _check_counts("sqlite", units, int(seqs), int(events))


def _check_counts(where: str, units: int, seqs: int, events: int) -> None:
    if seqs != units or events != units * EVENTS_PER_UNIT:
        raise RawError(
            f"{where}: reported {units} units, the database holds {seqs} fenced updates "
            f"and {events} events"
        )


def _unit(conn: sqlite3.Connection, row: int, seq: int) -> None:
    cur = conn.execute(
        "UPDATE runs SET seq = seq + 1, doc = ? WHERE id = ? AND seq = ?", (DOC, row, seq)
    )
    if cur.rowcount != 1:
        raise RawError(f"sqlite fence failed on run {row} at {seq}")
    conn.executemany(
        "INSERT INTO events VALUES (?, ?, ?, ?)",
        [(row, seq + 1, k, EVENT) for k in range(EVENTS_PER_UNIT)],
    )


def sqlite_single(path: str, rows: int, batch: int, duration: float) -> RawRate:
    """One thread, one connection (WAL, ``synchronous=FULL``): ``batch`` units per
    transaction, taking the ``rows`` runs in turn; a savepoint per unit when batching."""
    _sqlite_setup(path, rows)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=FULL")
    seqs = [0] * rows
    units = 0
    nxt = 0
    try:
        started = time.perf_counter()
        deadline = started + duration
        while time.perf_counter() < deadline:
            conn.execute("BEGIN IMMEDIATE")
            for _ in range(batch):
                row = nxt
                nxt = (nxt + 1) % rows
                if batch > 1:
                    conn.execute("SAVEPOINT unit")
                _unit(conn, row, seqs[row])
                if batch > 1:
                    conn.execute("RELEASE unit")
                seqs[row] += 1
            conn.execute("COMMIT")
            units += batch
        seconds = time.perf_counter() - started
    finally:
        conn.close()
    _sqlite_verify(path, units)
    name = f"sqlite 1 thread, {batch}/txn" + (" (savepoint each)" if batch > 1 else "")
    return RawRate(name, units, seconds, 1, batch)


def sqlite_threads(path: str, clients: int, duration: float) -> RawRate:
    """The one-unit-per-transaction figure: ``clients`` threads, one connection and one
    run each, taking turns through a lock (SQLite has one writer; its busy handler's
    sleep-and-retry would measure the backoff, not the database)."""
    _sqlite_setup(path, clients)
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
                    _unit(conn, i, seq)
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
    stop.wait(duration)
    stop.set()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    _sqlite_verify(path, sum(counts))
    return RawRate(ONE_PER_TXN, sum(counts), seconds, clients, 1)


# -- PostgreSQL -------------------------------------------------------------------------

# The unit as one statement (a data-modifying CTE: one round trip, one transaction).
_PG_ONE = b"""WITH moved AS (
    UPDATE ceiling.runs SET seq = seq + 1, doc = %(doc)s
    WHERE id = %(id)s AND seq = %(seq)s RETURNING id, seq
)
INSERT INTO ceiling.events (run, seq, n, body)
SELECT moved.id, moved.seq, n, %(body)s FROM moved, generate_series(1, %(count)s) AS n"""

# The same statement for pgbench, on k runs at once (a client owns runs
# client_id*k .. client_id*k + k-1, which advance together). A fence that fails on any
# run divides by zero: pgbench aborts the client and exits non-zero. ``seq`` comes back
# through \gset, so every transaction is fenced on what the previous one committed.
_PGBENCH = """WITH moved AS (
    UPDATE ceiling.runs SET seq = seq + 1, doc = :doc
    WHERE id BETWEEN :client_id * {k} AND :client_id * {k} + {last} AND seq = :seq
    RETURNING id, seq
), written AS (
    INSERT INTO ceiling.events (run, seq, n, body)
    SELECT moved.id, moved.seq, n, :body FROM moved, generate_series(1, {events}) AS n
    RETURNING 1
)
SELECT :seq + 1 AS seq, 1 / (count(*) = {k})::int AS fenced FROM moved
\\gset
"""


async def _pg_setup(conninfo: str, rows: int) -> None:
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
            (rows - 1,),
        )
        # Start every variant from the same state of the server's caches.
        await conn.execute(b"CHECKPOINT")


async def _pg_verify(conninfo: str, units: int) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute(
            b"SELECT (SELECT coalesce(sum(seq), 0) FROM ceiling.runs), "
            b"(SELECT count(*) FROM ceiling.events)"
        )
        row = await cur.fetchone()
    assert row is not None
    _check_counts("postgres", units, int(row[0]), int(row[1]))


async def _run_clients(
    clients: int,
    duration: float,
    one: Callable[[Any, int, int], Awaitable[None]],
    setup: Callable[[int], Awaitable[Any]],
    teardown: Callable[[Any], Awaitable[None]],
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


async def postgres_asyncio(conninfo: str, clients: int, duration: float) -> RawRate:
    """The one-unit-per-transaction figure: one asyncio connection per client."""
    import psycopg

    await _pg_setup(conninfo, clients)

    async def setup(i: int) -> Any:
        return await psycopg.AsyncConnection.connect(conninfo, autocommit=True)

    async def one(conn: Any, i: int, seq: int) -> None:
        cur = await conn.execute(
            _PG_ONE, {"doc": DOC, "id": i, "seq": seq, "body": EVENT, "count": EVENTS_PER_UNIT}
        )
        if cur.rowcount != EVENTS_PER_UNIT:
            raise RawError(f"postgres fence failed on run {i} at {seq}")

    async def teardown(conn: Any) -> None:
        await conn.close()

    units, seconds = await _run_clients(clients, duration, one, setup, teardown)
    await _pg_verify(conninfo, units)
    return RawRate(ONE_PER_TXN, units, seconds, clients, 1)


def pgbench_binary() -> str:
    """``pgbench`` beside the server binaries the throwaway server uses."""
    from docket_postgres.testing import find_bin_dir

    path = find_bin_dir() / "pgbench"
    if not path.exists():
        raise RawError(f"no pgbench at {path} (Debian's postgresql package ships it)")
    return str(path)


async def postgres_pgbench(
    server: Any, conninfo: str, connections: int, batch: int, duration: float
) -> RawRate:
    """``pgbench`` with the unit's statement on ``batch`` runs at once, ``connections``
    clients, prepared statements, for ``duration`` whole seconds."""
    await _pg_setup(conninfo, connections * batch)
    script = _PGBENCH.format(k=batch, last=batch - 1, events=EVENTS_PER_UNIT)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
    try:
        command = [
            pgbench_binary(),
            "-n",  # no vacuum of pgbench's own tables
            "-M",
            "prepared",
            "-c",
            str(connections),
            "-j",
            str(min(connections, os.cpu_count() or 1)),
            "-T",
            str(max(1, round(duration))),
            "-D",
            f"doc={DOC.decode()}",
            "-D",
            f"body={EVENT.decode()}",
            "-D",
            "seq=0",
            "-f",
            f.name,
            "-h",
            server.host,
            "-p",
            str(server.port),
            "-U",
            server.user,
            server.database,
        ]
        proc = await asyncio.create_subprocess_exec(
            *command, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out_b, err_b = await proc.communicate()
    finally:
        os.unlink(f.name)
    out, err = out_b.decode(), err_b.decode()
    if proc.returncode != 0:
        raise RawError(f"pgbench exited {proc.returncode}: {err.strip()[-300:]}")
    done = re.search(r"number of transactions actually processed: (\d+)", out)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    if done is None or tps is None or (failed is not None and int(failed.group(1))):
        raise RawError(f"pgbench output not understood or failures: {out.strip()[-300:]}")
    transactions = int(done.group(1))
    units = transactions * batch
    await _pg_verify(conninfo, units)
    # pgbench's own rate excludes connecting; its seconds are the units over that rate.
    seconds = transactions / float(tps.group(1)) if float(tps.group(1)) else 0.0
    return RawRate(f"pgbench {connections} conn x {batch}/stmt", units, seconds, connections, batch)


# -- Redis ------------------------------------------------------------------------------

LUA = """
if redis.call('HGET', KEYS[1], 'seq') ~= ARGV[1] then return 0 end
local seq = tonumber(ARGV[1]) + 1
redis.call('HSET', KEYS[1], 'seq', seq, 'doc', ARGV[2])
for n = 1, tonumber(ARGV[4]) do
    redis.call('HSET', KEYS[2], seq .. ':' .. n, ARGV[3])
end
return 1
"""


async def _redis_setup(url: str, rows: int) -> str:
    import redis.asyncio as aioredis

    admin: Any = aioredis.from_url(url)
    try:
        sha = str(await admin.script_load(LUA))
        old = [key async for key in admin.scan_iter(match="ceiling:*", count=1000)]
        if old:
            await admin.delete(*old)
        pipe = admin.pipeline(transaction=False)
        for i in range(rows):
            pipe.hset(f"ceiling:r:{i}", mapping={"seq": 0, "doc": b""})
        await pipe.execute()
    finally:
        await admin.aclose()
    return sha


async def _redis_verify(url: str, rows: int, units: int) -> None:
    import redis.asyncio as aioredis

    client: Any = aioredis.from_url(url)
    try:
        pipe = client.pipeline(transaction=False)
        for i in range(rows):
            pipe.hget(f"ceiling:r:{i}", "seq")
            pipe.hlen(f"ceiling:ev:{i}")
        found = await pipe.execute()
    finally:
        await client.aclose()
    _check_counts("redis", units, sum(int(v) for v in found[0::2]), sum(found[1::2]))


async def redis_asyncio(url: str, clients: int, duration: float) -> RawRate:
    """The one-unit-per-transaction figure: one asyncio connection per client."""
    import redis.asyncio as aioredis

    sha = await _redis_setup(url, clients)

    async def setup(i: int) -> Any:
        return aioredis.from_url(url, single_connection_client=True)

    async def one(client: Any, i: int, seq: int) -> None:
        ok = await client.evalsha(
            sha, 2, f"ceiling:r:{i}", f"ceiling:ev:{i}", seq, DOC, EVENT, EVENTS_PER_UNIT
        )
        if ok != 1:
            raise RawError(f"redis fence failed on run {i} at {seq}")

    async def teardown(client: Any) -> None:
        await client.aclose()

    units, seconds = await _run_clients(clients, duration, one, setup, teardown)
    await _redis_verify(url, clients, units)
    return RawRate(ONE_PER_TXN, units, seconds, clients, 1)


async def redis_pipelined(url: str, processes: int, depth: int, duration: float) -> RawRate:
    """``processes`` client processes (``python -m bench.raw``), each one connection
    sending ``depth`` fence scripts per round trip, on ``depth`` runs of its own. The
    processes start, connect and report ready before any of them is told to go."""
    sha = await _redis_setup(url, processes * depth)
    procs = []
    try:
        for p in range(processes):
            args = [url, sha, str(p * depth), str(depth), str(duration)]
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "bench.raw",
                    *args,
                    cwd=ROOT,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise RawError(f"redis client did not start: {line!r}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        results = [await proc.communicate() for proc in procs]
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    units = 0
    seconds = 0.0
    for proc, (out, err) in zip(procs, results, strict=True):
        if proc.returncode != 0:
            raise RawError(f"redis client exited {proc.returncode}: {err.decode()[-300:]}")
        count, elapsed = out.split()
        units += int(count)
        seconds = max(seconds, float(elapsed))
    await _redis_verify(url, processes * depth, units)
    name = f"redis {processes} proc x {depth}-script pipeline"
    return RawRate(name, units, seconds, processes, depth)


def _redis_client_main(url: str, sha: str, first: int, depth: int, duration: float) -> int:
    """One pipelined Redis client process (see :func:`redis_pipelined`)."""
    import redis

    client: Any = redis.Redis.from_url(url, single_connection_client=True)
    client.ping()
    print("ready", flush=True)
    sys.stdin.readline()
    rows = range(first, first + depth)
    seq = 0
    units = 0
    started = time.perf_counter()
    deadline = started + duration
    while time.perf_counter() < deadline:
        pipe = client.pipeline(transaction=False)
        for i in rows:
            pipe.evalsha(
                sha, 2, f"ceiling:r:{i}", f"ceiling:ev:{i}", seq, DOC, EVENT, EVENTS_PER_UNIT
            )
        if pipe.execute() != [1] * depth:
            print(f"fence failed at {seq}", file=sys.stderr)
            return 1
        seq += 1
        units += depth
    print(units, time.perf_counter() - started, flush=True)
    client.close()
    return 0


if __name__ == "__main__":
    url_, sha_, first_, depth_, duration_ = sys.argv[1:]
    sys.exit(_redis_client_main(url_, sha_, int(first_), int(depth_), float(duration_)))
