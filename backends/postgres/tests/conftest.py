"""Fixtures for docket-postgres tests: one throwaway PostgreSQL server per test session.

The server is started (``initdb`` in a temp dir, 127.0.0.1, a free port) the first time
a test asks for it and stopped at the end of the session. Each test gets its own schema
names, so tests never see each other's rows.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Iterator

import pytest
from docket_postgres.testing import ThrowawayPostgres

_names = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[ThrowawayPostgres]:
    with ThrowawayPostgres() as server:
        yield server


@pytest.fixture
def pg_url(pg_server: ThrowawayPostgres) -> str:
    """A libpq URL of the test database (no docket options)."""
    return pg_server.conninfo()


@pytest.fixture
def schema_name() -> Callable[[str], str]:
    """Fresh schema names: ``schema_name("t")`` → ``t_<n>_<hex>``."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}_{next(_names)}_{secrets.token_hex(3)}"

    return make
