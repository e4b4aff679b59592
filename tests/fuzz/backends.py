"""Real backends for the fuzzers and the isolation sweep: memory, SQLite, PostgreSQL, Redis.

The PostgreSQL and Redis servers are throwaway children (``docket_postgres.testing`` /
``docket_redis.testing``: 127.0.0.1, free ports, temp dirs), started the first time a
test asks for one and stopped when the test process exits, so every suite in the
session shares one of each. Every backend gets its own namespace (a schema, a key
prefix, a file), so tests never see each other's rows.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import secrets
import tempfile
from pathlib import Path
from typing import Final

from docket_postgres.testing import ThrowawayPostgres
from docket_redis.testing import RedisServer, redis_server

from docket.contract import Backend
from docket.contract.registry import from_url

KINDS: Final = ("memory", "sqlite", "postgres", "redis")

_names = itertools.count(1)
_stack = contextlib.ExitStack()
atexit.register(_stack.close)
_servers: dict[str, object] = {}


def _postgres() -> ThrowawayPostgres:
    if "postgres" not in _servers:
        _servers["postgres"] = _stack.enter_context(ThrowawayPostgres())
    server = _servers["postgres"]
    assert isinstance(server, ThrowawayPostgres)
    return server


def _redis() -> RedisServer:
    if "redis" not in _servers:
        _servers["redis"] = _stack.enter_context(redis_server())
    server = _servers["redis"]
    assert isinstance(server, RedisServer)
    return server


def _directory() -> Path:
    if "directory" not in _servers:
        _servers["directory"] = Path(
            _stack.enter_context(tempfile.TemporaryDirectory(prefix="docket-fuzz-"))
        )
    directory = _servers["directory"]
    assert isinstance(directory, Path)
    return directory


def backend_url(kind: str) -> str:
    """A URL naming a fresh, empty store of ``kind``."""
    namespace = f"f{next(_names)}_{secrets.token_hex(3)}"
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{_directory().as_posix()}/{namespace}.db"
    if kind == "postgres":
        return _postgres().url(schema=namespace)
    if kind == "redis":
        return f"{_redis().url}?prefix={namespace}"
    raise ValueError(f"unknown backend kind {kind!r}")


class OpenStore:
    """One opened backend and the event loop it lives on (examples run one by one)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.url = backend_url(kind)
        self.runner = asyncio.Runner()
        self.backend: Backend = from_url(self.url)
        self.runner.run(self.backend.open())

    def close(self) -> None:
        try:
            self.runner.run(self.backend.close())
        finally:
            self.runner.close()
