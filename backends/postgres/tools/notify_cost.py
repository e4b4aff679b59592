"""What a NOTIFY costs a committing writer: the measurement behind the feed's gate.

``python backends/postgres/tools/notify_cost.py`` starts a throwaway durable server
(``fsync``, ``synchronous_commit`` and ``full_page_writes`` on) and measures, three times
each, the commit rate of 16 concurrent one-statement transactions: a plain INSERT; an
INSERT into a table whose trigger NOTIFYs only while a registry table has a row (empty
here: what schema version 8 costs while nobody listens); and an INSERT that NOTIFYs in the
same transaction (one listener draining the channel). See docs/backends/postgres.md.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from docket_postgres.testing import ThrowawayPostgres

CLIENTS, SECONDS = 16, 3.0
PLAIN = "INSERT INTO t (v) VALUES (%s)"
GATED = "INSERT INTO g (v) VALUES (%s)"
NOTIFY = (
    "WITH i AS (INSERT INTO t (v) VALUES (%s) RETURNING v) SELECT pg_notify('c', v::text) FROM i"
)
SETUP = (
    "CREATE TABLE t (v bigint)",
    "CREATE TABLE g (v bigint)",
    "CREATE TABLE listeners (key bigint PRIMARY KEY)",
    """CREATE FUNCTION gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM listeners) THEN RETURN NULL; END IF;
  PERFORM pg_notify('c', NEW.v::text); RETURN NULL;
END $$""",
    "CREATE TRIGGER g_gate AFTER INSERT ON g FOR EACH ROW EXECUTE FUNCTION gate()",
)


async def _connect(url: str) -> psycopg.AsyncConnection[Any]:
    conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(url, autocommit=True)
    return conn


async def trial(url: str, statement: str) -> float:
    """Commits per second of ``CLIENTS`` sessions sending ``statement`` for ``SECONDS``."""
    conns = [await _connect(url) for _ in range(CLIENTS)]
    listener = await _connect(url)
    await listener.execute("LISTEN c")
    stop = time.monotonic() + SECONDS
    counts: list[int] = []

    async def client(conn: psycopg.AsyncConnection[Any], k: int) -> None:
        n = 0
        while time.monotonic() < stop:
            await conn.execute(statement.encode(), (k * 10_000_000 + n,))
            n += 1
        counts.append(n)

    async def drain() -> None:
        async for _ in listener.notifies(timeout=SECONDS + 1):
            pass

    await asyncio.gather(drain(), *(client(c, k) for k, c in enumerate(conns)))
    for conn in [*conns, listener]:
        await conn.close()
    return sum(counts) / SECONDS


async def main() -> None:
    settings = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    async with ThrowawayPostgres(settings=settings) as server:
        url = server.conninfo()
        conn = await _connect(url)
        for statement in SETUP:
            await conn.execute(statement.encode())
        await conn.close()
        for round_ in range(3):
            for name, statement in (("plain", PLAIN), ("gated", GATED), ("notify", NOTIFY)):
                rate = await trial(url, statement)
                print(f"{round_} {name:6} {rate:6.0f} commits/s", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
