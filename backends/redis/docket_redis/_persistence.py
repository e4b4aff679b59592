"""What each Redis primary does to keep writes, read at ``open()``.

``RedisBackend.capabilities()`` declares ``durable`` / ``durable.fsync`` from these
settings, and ``open()`` logs a warning for every primary that cannot promise durable
commits (or may evict docket's keys).
"""

from __future__ import annotations

import logging

import attrs

from docket_redis._codec import text
from docket_redis.errors import StoreError
from docket_redis.transport import Transport

logger = logging.getLogger("docket_redis")


@attrs.frozen(kw_only=True)
class NodePersistence:
    """What one Redis primary does to keep writes (``CONFIG GET``)."""

    node: str
    appendonly: bool | None  # None: the server would not say
    appendfsync: str | None
    save: str | None
    eviction: str | None = None  # maxmemory-policy
    error: str | None = None

    @property
    def durable(self) -> bool:
        """Commits survive a crash of the Redis process (AOF on)."""
        return self.appendonly is True

    @property
    def fsync(self) -> bool:
        """Commits survive a crash of the machine too (AOF fsynced before each reply)."""
        return self.durable and self.appendfsync == "always"


async def read_persistence(transport: Transport) -> tuple[NodePersistence, ...]:
    """Every primary's persistence settings; a primary that will not say gets ``error``."""
    replies = await transport.each_primary(
        "CONFIG", "GET", "appendonly", "appendfsync", "save", "maxmemory-policy"
    )
    out: list[NodePersistence] = []
    for node, reply in replies:
        if isinstance(reply, StoreError):
            out.append(
                NodePersistence(
                    node=node,
                    appendonly=None,
                    appendfsync=None,
                    save=None,
                    error=reply.outcome.reason,
                )
            )
            continue
        if isinstance(reply, dict):
            settings = {text(k): text(v) for k, v in reply.items()}
        else:
            flat = [text(item) for item in reply] if isinstance(reply, list) else []
            settings = dict(zip(flat[::2], flat[1::2]))
        appendonly = settings.get("appendonly")
        out.append(
            NodePersistence(
                node=node,
                appendonly=None if appendonly is None else appendonly == "yes",
                appendfsync=settings.get("appendfsync"),
                save=settings.get("save"),
                eviction=settings.get("maxmemory-policy"),
            )
        )
    return tuple(out)


def warn_durability(nodes: tuple[NodePersistence, ...]) -> None:
    """Log what each primary's settings mean for acknowledged commits."""
    for node in nodes:
        if node.eviction not in (None, "noeviction"):
            logger.warning(
                "docket-redis: %s has maxmemory-policy %s: under memory pressure Redis "
                "may evict docket's keys and corrupt runs; use noeviction",
                node.node,
                node.eviction,
            )
        if node.appendonly is None:
            logger.warning(
                "docket-redis: cannot read the persistence settings of %s (%s); "
                "assuming commits are not durable",
                node.node,
                node.error or "CONFIG GET answered nothing",
            )
        elif not node.durable:
            logger.warning(
                "docket-redis: %s runs without AOF (appendonly no%s): acknowledged "
                "commits are lost if Redis stops; set appendonly yes and appendfsync "
                "always for durable commits",
                node.node,
                f", save {node.save!r}" if node.save else ", no snapshots",
            )
        elif not node.fsync:
            logger.info(
                "docket-redis: %s has AOF with appendfsync %s: commits survive a "
                "Redis crash, but a machine crash may lose about the last second",
                node.node,
                node.appendfsync,
            )
