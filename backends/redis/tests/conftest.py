"""Real servers for the docket-redis tests: one throwaway Redis and one throwaway Cluster.

Both are started once per test session (on 127.0.0.1, free ports, temp dirs, no
persistence) and stopped at the end. Each test names its own key prefix, so tests
sharing a server never see each other's keys.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator

import pytest
from docket_redis.testing import RedisCluster, RedisServer, redis_cluster, redis_server

_prefixes = itertools.count(1)


@pytest.fixture(scope="session")
def redis_single() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster_nodes() -> Iterator[RedisCluster]:
    with redis_cluster() as cluster:
        yield cluster


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"t{next(_prefixes)}{secrets.token_hex(3)}"
