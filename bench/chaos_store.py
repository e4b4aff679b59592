"""Where the chaos campaign (``bench/chaos.py``) runs: a SQLite file, a throwaway
PostgreSQL server (``synchronous_commit=on``, restarted with ``pg_ctl -m immediate``) or a
throwaway ``redis-server`` (AOF fsynced before every reply, restarted with SIGKILL), or a
URL of your own; and each backend's raw count of recorded transitions per run."""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

__all__ = ["Store", "open_store"]


@attrs.define
class Store:
    """Where the campaign runs: a URL, and how to restart the server (None: cannot)."""

    name: str
    url: str
    restart: Callable[[], None] | None
    raw_transitions: Callable[[list[str]], dict[str, int]] | None = None


def _backend_name(url: str) -> str:
    scheme = url.split(":", 1)[0]
    if scheme.startswith("postgres"):
        return "postgres"
    if scheme.startswith("redis"):
        return "redis"
    return scheme


@contextlib.contextmanager
def open_store(args: argparse.Namespace, directory: Path) -> Iterator[Store]:
    if args.url:
        yield Store(_backend_name(args.url), args.url, None)
        return
    if args.backend == "sqlite":
        path = directory / "chaos.db"
        yield Store("sqlite", f"sqlite:///{path}", None, lambda ids: _sqlite_transitions(path))
    elif args.backend == "postgres":
        from docket_postgres.testing import ThrowawayPostgres

        # synchronous_commit=on: an acknowledged commit is in the WAL (written to the OS)
        # before the answer, so a crash of the server's processes keeps it
        with ThrowawayPostgres(settings={"synchronous_commit": "on"}) as server:
            url = server.url(schema="chaos")
            yield Store(
                "postgres",
                url,
                lambda: server.restart(mode="immediate", down_for=args.db_down),
                lambda ids: _postgres_transitions(server.conninfo()),
            )
    else:
        from docket_redis.testing import redis_server, with_prefix

        with redis_server(appendonly=True, appendfsync="always") as redis:
            yield Store(
                "redis",
                with_prefix(redis.url, "chaos"),
                lambda: redis.restart(crash=True, down_for=args.db_down),
                lambda ids: _redis_transitions(redis.port, ids),
            )


def _sqlite_transitions(path: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT run_id, count(*) FROM docket_transitions GROUP BY run_id"
        ).fetchall()
    return {str(run_id): int(count) for run_id, count in rows}


def _postgres_transitions(conninfo: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT run_id, count(*) FROM chaos.transitions GROUP BY run_id"
        ).fetchall()
    return {str(run_id): int(count) for run_id, count in rows}


def _redis_transitions(port: int, run_ids: list[str]) -> dict[str, int]:
    import redis
    from docket_redis.keys import Namespace

    from docket.records import owner_scope

    keys = Namespace("chaos").scope(owner_scope(None))
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        return {run_id: int(client.hlen(keys.transitions(run_id))) for run_id in run_ids}
    finally:
        client.close()
