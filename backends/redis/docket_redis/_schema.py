"""The key layout's version: recorded in a new namespace, checked at open, migrated.

Redis has no DDL; the layout version lives in ``<prefix>:schema``. A namespace written
by a newer release is refused untouched (``SchemaTooNew``), an older one until
``docket migrate`` (``SchemaTooOld``).
"""

from __future__ import annotations

from docket_redis import _retention
from docket_redis._codec import text
from docket_redis._engine import RedisEngine
from docket_redis.errors import SchemaTooNew, SchemaTooOld, corrupt

#: The version of the key layout this release reads and writes.
#: 2: long run documents in pieces (lua/doc_pieces.lua); 3: durable time — waiting runs
#: with a wake in the ready zset, sleeping / message-waiting tasks in run documents — and
#: the schedule keys (see :mod:`docket_redis.keys`); 4: retention indexes (when events
#: were written, when runs finished) and the feed's commit notices; 5: named queues — a
#: run's queue and priority in its run hash and its lane's ready / claimed zsets
#: (``lua/lanes.lua``), and the queue ledger (:mod:`docket_redis._queues`)
SCHEMA_VERSION = 5


async def check_schema(engine: RedisEngine) -> None:
    """Record the layout version in a new namespace; refuse a newer one untouched."""
    key = engine.ns.schema
    stored = await engine.transport.command(key, "GET", key)
    if stored is None:
        await engine.transport.command(key, "SET", key, str(SCHEMA_VERSION), "NX")
        stored = await engine.transport.command(key, "GET", key)
    try:
        found = int(text(stored))
    except (TypeError, ValueError) as exc:
        raise corrupt(f"{key} holds {stored!r}, not a layout version") from exc
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(engine.describe(), found, SCHEMA_VERSION)
    if found < SCHEMA_VERSION:
        raise SchemaTooOld(engine.describe(), found, SCHEMA_VERSION)


async def schema_versions(engine: RedisEngine) -> tuple[int | None, int]:
    """``(stored, supported)`` layout versions; ``stored`` is ``None`` for a namespace
    no backend has opened yet. Reads only."""
    stored = await engine.transport.command(engine.ns.schema, "GET", engine.ns.schema)
    return (None if stored is None else int(text(stored))), SCHEMA_VERSION


async def migrate(engine: RedisEngine) -> tuple[int | None, int]:
    """Bring the namespace to the current layout; returns ``(from, to)``.

    Records the layout in a new namespace and refuses (unchanged) one written by a
    newer release. Layout 2 keeps long run documents in pieces; a layout-1 document
    (whole in ``doc``) reads as one piece, so 1 → 2 rewrites no data: it records the
    new version, after which layout-1 code refuses the namespace. Stop workers of
    the old release first: one still running would write whole documents beside
    pieces it does not know of.

    Layout 3 adds keys and rewrites none: a layout-2 namespace holds no waiting run with
    a wake (no release before could write one) and no schedule. Recording 3 is what
    matters: layout-2 code would claim a waiting run due at its deadline, and read run
    documents holding sleeping tasks, without knowing either, so it must refuse the
    namespace from then on.

    Layout 4 adds the retention indexes (:mod:`docket_redis._retention`) and rewrites
    nothing: before recording 4 it indexes every existing run as if its retained events
    were written, and the finished ones ended, at the migration — later than they were,
    so retention keeps them longer than their age asks and never deletes one early. It
    is idempotent (an interrupted migrate is simply run again). Layout-3 code would
    write runs without those indexes (never pruned) and publish no commit notices, so
    it must refuse the namespace from then on.

    Layout 5 (named queues) rewrites nothing: a run without a queue and priority in its
    hash is of the default queue at priority 0, whose lane is the scope's own ready /
    claimed zsets, where layout-4 runs already are — so they stay claimable as they
    are. Layout-4 code would move a run of another lane into the base zsets (losing
    its queue) and claim without a queue filter, so it must refuse the namespace.

    The admission ledger (``Feature.ADMISSION``, :mod:`docket_redis._admissions`) did
    not step the layout: it is new keys only under the queue tag, and the config JSON
    carries its two fields only when set, which layout-5 readers ignore.
    """
    found, current = await schema_versions(engine)
    key = engine.ns.schema
    if found is not None and found < SCHEMA_VERSION:
        if found < 4:
            await _retention.backfill(engine)
        # Only from the version just read: a concurrent migrate or a newer release
        # leaves the key as it found it.
        await engine.eval("set_layout", [key], [str(found), str(SCHEMA_VERSION)])
    await check_schema(engine)
    return found, current


def schema_sql(engine: RedisEngine) -> str:
    """What :func:`migrate` writes to an empty namespace (Redis has no DDL)."""
    return f"SET {engine.ns.schema} {SCHEMA_VERSION} NX"
