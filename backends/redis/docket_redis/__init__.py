"""docket-redis: the docket contract on Redis or Valkey (>= 7), one Lua script per transition.

``redis://``, ``rediss://`` and ``redis+cluster://`` URLs are served through the
``docket.backends`` entry point::

    from docket.contract.registry import from_url

    backend = from_url("redis://localhost:6379/0?prefix=myapp")
    await backend.open()      # connects, checks persistence, subscribes to wake-ups

Every key carries a hash tag per owner scope, so the same backend runs unchanged on a
Redis Cluster. See ``docs/backends/redis.md`` for the key layout, the scripts, what
each persistence setting means for docket, and the error classes.
"""

from __future__ import annotations

from docket_redis.backend import SCHEMA_VERSION, NodePersistence, RedisBackend, factory
from docket_redis.errors import (
    PermanentStoreError,
    RetryableStoreError,
    SchemaTooNew,
    SchemaTooOld,
    StoreError,
)
from docket_redis.keys import Namespace, ScopeKeys
from docket_redis.url import DEFAULT_PREFIX, Target, parse_url

__all__ = [
    "DEFAULT_PREFIX",
    "SCHEMA_VERSION",
    "Namespace",
    "NodePersistence",
    "PermanentStoreError",
    "RedisBackend",
    "RetryableStoreError",
    "SchemaTooNew",
    "SchemaTooOld",
    "ScopeKeys",
    "StoreError",
    "Target",
    "factory",
    "parse_url",
]
