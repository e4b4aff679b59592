"""Database servers, where each trial stores its data, and how much it stored.

One :class:`Env` per benchmark run: a temporary directory for SQLite files, a throwaway
PostgreSQL (``docket_postgres.testing``) and a throwaway Redis with AOF ``everysec``
(``docket_redis.testing``). Every engine uses the same servers.

The PostgreSQL server is durable: ``fsync``, ``synchronous_commit`` and
``full_page_writes`` on (PostgreSQL's defaults; the test helper turns them off for speed).
With ``unsafe_fast_pg`` a second server with the test helper's settings runs beside it,
under the backend name ``postgres-unsafe``, for a separately labelled table.

:class:`Place` names one trial's storage for one engine — a SQLite file, a Postgres schema
or a Redis key prefix — and :meth:`Place.footprint` reads back (bytes, rows or keys) from
the database itself, so the benchmark can report what a run costs in storage.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

SaverFactory = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


# PostgreSQL's own defaults, which the test helper's throwaway server turns off.
DURABLE_PG = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
UNSAFE_PG = "postgres-unsafe"


@attrs.define
class Env:
    directory: Path
    postgres: Any = None  # ThrowawayPostgres, or the reason it is missing (str)
    redis: Any = None  # RedisServer, or the reason it is missing (str)
    postgres_unsafe: Any = None  # the same, fsync and friends off (``--unsafe-fast-pg``)

    def missing(self, backend: str) -> str | None:
        server = {
            "sqlite": self.directory,
            "postgres": self.postgres,
            UNSAFE_PG: self.postgres_unsafe,
            "redis": self.redis,
        }[backend]
        if server is None:
            return "server not started"
        return f"server: {server}" if isinstance(server, str) else None

    def redis_url(self) -> str:
        return str(self.redis.url)

    def pg_server(self, backend: str = "postgres") -> Any:
        return self.postgres_unsafe if backend == UNSAFE_PG else self.postgres

    def postgres_conninfo(self, backend: str = "postgres", database: str | None = None) -> str:
        return str(self.pg_server(backend).conninfo(database))


@contextlib.contextmanager
def servers(wanted: tuple[str, ...]) -> Iterator[Env]:
    with contextlib.ExitStack() as stack:
        env = Env(Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="docket-bench-"))))
        for backend, settings in (("postgres", DURABLE_PG), (UNSAFE_PG, None)):
            if backend not in wanted:
                continue
            try:
                from docket_postgres.testing import ThrowawayPostgres

                server: Any = stack.enter_context(ThrowawayPostgres(settings=settings))
            except Exception as exc:
                server = f"{type(exc).__name__}: {exc}"[:160]
            setattr(env, "postgres" if backend == "postgres" else "postgres_unsafe", server)
        if "redis" in wanted:
            try:
                from docket_redis.testing import redis_server

                env.redis = stack.enter_context(
                    redis_server(appendonly=True, appendfsync="everysec")
                )
            except Exception as exc:
                env.redis = f"{type(exc).__name__}: {exc}"[:160]
        yield env


@attrs.frozen
class Footprint:
    bytes: int
    rows: int  # table rows (SQLite, Postgres) or keys (Redis)


@attrs.frozen
class Place:
    """Where one engine's trial keeps its data."""

    backend: str
    env: Env
    name: str  # file stem, schema or key prefix

    # -- docket ---------------------------------------------------------------------------

    @property
    def sqlite_path(self) -> Path:
        return self.env.directory / f"{self.name}.db"

    @property
    def kind(self) -> str:
        """The database: ``sqlite``, ``postgres`` (either server) or ``redis``."""
        return "postgres" if self.backend == UNSAFE_PG else self.backend

    def postgres_conninfo(self, database: str | None = None) -> str:
        return self.env.postgres_conninfo(self.backend, database)

    def docket_url(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite:///{self.sqlite_path}?synchronous=FULL"
        if self.kind == "postgres":
            return str(self.env.pg_server(self.backend).url(schema=self.name))
        return f"{self.env.redis_url()}?prefix={self.name}"

    def redis_pattern(self) -> str:
        # docket's keys all start with the hash tag ``{<prefix>:<owner>}`` or ``{<prefix>}``;
        # LangGraph's plain Redis saver's with ``<prefix>:``.
        if self.name.startswith("lg_"):
            return f"{self.name}:*"
        return f"{{{self.name}[:}}]*"

    async def footprint(self) -> Footprint:
        if self.kind == "sqlite":
            return await asyncio.to_thread(_sqlite_footprint, self.sqlite_path)
        if self.kind == "postgres":
            return await _postgres_footprint(self.postgres_conninfo(), self.name)
        return await _redis_footprint(self.env.redis_url(), self.redis_pattern())

    async def dbos_footprint(self) -> Footprint:
        """What DBOS keeps for this place: its SQLite file, or its own database's
        ``dbos`` schema on the PostgreSQL server (see :meth:`dbos_url`)."""
        if self.kind == "sqlite":
            return await asyncio.to_thread(_sqlite_footprint, self.sqlite_path)
        return await _postgres_footprint(self.postgres_conninfo(self.name), "dbos")

    def dbos_url(self) -> str:
        """DBOS's system database: a SQLite file, or a database of its own on the
        PostgreSQL server (DBOS creates it on launch)."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.sqlite_path}"
        return self.postgres_conninfo(self.name)

    # -- LangGraph ------------------------------------------------------------------------

    def langgraph_saver(self, inflight: int) -> SaverFactory:
        if self.kind == "sqlite":
            return _sqlite_saver(self.sqlite_path)
        if self.kind == "postgres":
            return _postgres_saver(self.postgres_conninfo(), self.name, inflight)
        return _redis_saver(self.env.redis_url(), self.name, inflight)


def _sqlite_footprint(path: Path) -> Footprint:
    if not path.exists():
        return Footprint(0, 0)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        # page_count is the size of the database as this snapshot sees it, WAL included.
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        tables = [
            str(row[0])
            for row in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        rows = sum(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables)
    finally:
        conn.close()
    return Footprint((pages - free) * size, rows)


async def _postgres_footprint(conninfo: str, schema: str) -> Footprint:
    import psycopg

    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        cur = await conn.execute(
            """SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = %s AND c.relkind = 'r'""",
            (schema,),
        )
        tables = await cur.fetchall()
        rows = 0
        for name, _size in tables:
            cur = await conn.execute(f'SELECT count(*) FROM "{schema}"."{name}"'.encode())
            found = await cur.fetchone()
            rows += int(found[0]) if found else 0
    return Footprint(sum(int(size) for _, size in tables), rows)


async def _redis_footprint(url: str, pattern: str) -> Footprint:
    import redis.asyncio as aioredis

    client: Any = aioredis.from_url(url)
    try:
        keys = [key async for key in client.scan_iter(match=pattern, count=1000)]
        total = 0
        for start in range(0, len(keys), 500):
            pipe = client.pipeline(transaction=False)
            for key in keys[start : start + 500]:
                pipe.memory_usage(key, samples=0)
            total += sum(int(v or 0) for v in await pipe.execute())
    finally:
        await client.aclose()
    return Footprint(total, len(keys))


def _sqlite_saver(path: Path) -> SaverFactory:
    @contextlib.asynccontextmanager
    async def make() -> AsyncIterator[Any]:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
            await saver.conn.execute("PRAGMA journal_mode=WAL")
            await saver.conn.execute("PRAGMA synchronous=FULL")
            await saver.setup()
            yield saver

    return make


def _postgres_saver(conninfo: str, schema: str, inflight: int) -> SaverFactory:
    @contextlib.asynccontextmanager
    async def make() -> AsyncIterator[Any]:
        import psycopg
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'.encode())
        # Its own schema per trial (through search_path), so sizes and row counts are its own.
        kwargs = {
            "autocommit": True,
            "prepare_threshold": 0,
            "row_factory": dict_row,
            "options": f"-c search_path={schema}",
        }
        pool: Any = AsyncConnectionPool(
            conninfo, min_size=1, max_size=max(2, inflight), kwargs=kwargs, open=False
        )
        async with pool:
            saver = AsyncPostgresSaver(pool)
            await saver.setup()
            yield saver

    return make


def _redis_saver(url: str, prefix: str, inflight: int) -> SaverFactory:
    @contextlib.asynccontextmanager
    async def make() -> AsyncIterator[Any]:
        import redis.asyncio as aioredis
        from langgraph_checkpoint_plainredis import AsyncRedisSaver

        # A fan-out run writes from every node at once: wait for a connection rather than
        # fail when the pool (100 by default) runs out.
        pool = aioredis.BlockingConnectionPool.from_url(
            url, max_connections=max(100, 16 * inflight), timeout=60
        )
        client: Any = aioredis.Redis(connection_pool=pool)
        saver: Any = AsyncRedisSaver(client=client, prefix=prefix)
        try:
            yield saver
        finally:
            await client.aclose()
            await pool.disconnect()

    return make
