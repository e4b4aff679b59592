"""The queue store (``QueueStore``, ``Feature.QUEUES``) of ``PostgresBackend``.

Schema version 9 keeps one row per queue in ``queues`` (the config as
:func:`~docket.records.queue_config_to_json` encodes it, and the rate bucket: ``tokens``
at ``refilled_at``) and one row per held slot in ``queue_slots``. Every operation takes
the queue row's lock (``SELECT ... FOR UPDATE``; the ``default`` row is created on
demand), so the operations on one queue are serial across every process and a limit
holds whoever races.

The slot ledger's operations (``acquire_slots``, ``renew_slots``, ``release_slots``) and
the fused claim (``claim_with_slots``, :class:`docket.contract.protocols.SlotClaims`: a
limited queue's whole claim round, ``claim_due`` included) are schema version 11's
functions, one statement each: the rules of :class:`docket.contract.queues.SlotLedger`
written in SQL, held to its answers by the contract kit (QUEUE-* cases) and
``test_postgres_queue_claims.py``. Until version 10 each was a transaction of about five
round trips with the row lock held across them (issue #25). ``set_queue`` still applies
``SlotLedger.reconfigure`` in Python, in one transaction under the same lock.

Times are the database's (``clock_timestamp()``, read after the lock is granted) unless
the call passes ``now`` or the backend runs on a test clock (:meth:`Engine.given`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import psycopg

from docket.contract import ClaimBatch, ClaimPolicy, NotFound, Permanent, Retryable
from docket.contract.queues import (
    SlotLedger,
    default_config,
    require_fused_request,
    require_queue_config,
    require_queue_name,
    require_slot_request,
)
from docket.records import (
    DEFAULT_QUEUE,
    QueueConfig,
    QueueStatus,
    queue_config_from_json,
    queue_config_to_json,
)
from docket.values import utc
from docket_postgres._engine import INT4_MAX, Engine
from docket_postgres._runs import CLAIMED_ROWS, PostgresRuns
from docket_postgres.arrays import ByteaArray

Conn = psycopg.AsyncConnection[Any]

_CREATE: Final = (
    "INSERT INTO @schema@.queues (name, config, tokens, refilled_at) "
    "VALUES (%s, %s, %s, coalesce(%s::timestamptz, clock_timestamp())) "
    "ON CONFLICT DO NOTHING RETURNING name"
)
_LOCK: Final = (
    "SELECT config, tokens, refilled_at, coalesce(%s::timestamptz, clock_timestamp()) "
    "FROM @schema@.queues WHERE name = %s FOR UPDATE"
)
_SAVE: Final = (
    "UPDATE @schema@.queues SET config = %s, tokens = %s, refilled_at = %s::timestamptz "
    "WHERE name = %s"
)
_FETCH: Final = "SELECT config FROM @schema@.queues WHERE name = %s"
_CONFIGS: Final = "SELECT name, config FROM @schema@.queues"
# every configured queue with its live slots and its admission counts (admitted, held),
# and every queue's depth (its unclaimed running runs due now), at one instant
_LIST: Final = (
    "WITH n AS (SELECT coalesce(%s::timestamptz, clock_timestamp()) AS now) "
    "SELECT q.name, q.config, (SELECT count(*) FROM @schema@.queue_slots s "
    "WHERE s.queue = q.name AND s.expires_at >= n.now), NULL::bigint, a.admitted, a.held "
    "FROM @schema@.queues q CROSS JOIN n CROSS JOIN LATERAL ("
    "SELECT count(*) FILTER (WHERE NOT x.held) AS admitted, "
    "count(*) FILTER (WHERE x.held) AS held "
    "FROM @schema@.queue_admissions x WHERE x.queue = q.name) a "
    "UNION ALL "
    "SELECT l.queue, NULL, NULL, count(*), NULL, NULL FROM @schema@.live l, n "
    "WHERE l.status = 'running' AND l.poisoned_at IS NULL AND l.claim_token IS NULL "
    "AND l.wake_at <= n.now GROUP BY l.queue"
)

# The fused claim: the schema's ``claim_with_slots`` (version 11) does the whole round in
# one statement; the claimed runs' documents ride along, as on a plain claim.
_FUSED_CLAIM: Final = (
    CLAIMED_ROWS + "@schema@.claim_with_slots(%s, %s::bytea[], %s::bytea[], %s::interval, "
    "%s::integer, %s, %s::timestamptz, %s, %s) WITH ORDINALITY c ORDER BY c.ordinality"
)

# The ledger's operations (schema 11): one function each, one round trip.
_ACQUIRE: Final = (
    "SELECT @schema@.queue_acquire(%s, %s::bytea[], %s::interval, %s::timestamptz, %s)"
)
_RENEW: Final = "SELECT @schema@.queue_renew(%s, %s::bytea[], %s::interval, %s::timestamptz)"
_RELEASE: Final = "SELECT @schema@.queue_release(%s, %s::bytea[], %s::boolean, %s::timestamptz)"


def _holders(holders: Sequence[str]) -> ByteaArray:
    return ByteaArray([h.encode() for h in holders])


def _default_config_text(name: str) -> str | None:
    """The config a missing ``default`` queue is created with; ``None`` for another."""
    return queue_config_to_json(default_config()).decode() if name == DEFAULT_QUEUE else None


class PostgresQueues:
    """``QueueStore`` over one backend's :class:`~docket_postgres._engine.Engine`."""

    def __init__(self, engine: Engine, runs: PostgresRuns | None = None) -> None:
        self._engine = engine
        self._runs = runs if runs is not None else PostgresRuns(engine)

    # -- configs ----------------------------------------------------------------------------

    async def set_queue(self, config: QueueConfig) -> QueueConfig:
        require_queue_config(config)
        engine = self._engine
        given = engine.given(None)
        fresh = SlotLedger.new(config, datetime.min)  # its tokens: a new bucket starts full

        async def body(conn: Conn) -> None:
            row = None
            while row is None:  # again only if the row was deleted by hand in between
                cur = await conn.execute(
                    engine.q(_CREATE),
                    (config.name, queue_config_to_json(config).decode(), fresh.tokens, given),
                )
                if await cur.fetchone() is not None:
                    return
                # an existing queue: its bucket carried over (SlotLedger.reconfigure)
                # under its row lock; its slots are not touched
                row = await (await conn.execute(engine.q(_LOCK), (given, config.name))).fetchone()
            old, tokens, refilled_at, at = row
            ledger = SlotLedger(
                config=queue_config_from_json(str(old)),
                tokens=float(tokens),
                refilled_at=utc(refilled_at),
            )
            ledger.reconfigure(config, utc(at))
            await conn.execute(
                engine.q(_SAVE),
                (
                    queue_config_to_json(ledger.config).decode(),
                    ledger.tokens,
                    ledger.refilled_at,
                    config.name,
                ),
            )

        await engine.transaction(body, write=True)
        return config

    async def fetch_queue(self, name: str) -> QueueConfig | NotFound:
        require_queue_name(name)
        engine = self._engine
        rows = await engine.fetch(engine.q(_FETCH), (name,), write=False)
        if rows:
            return queue_config_from_json(str(rows[0][0]))
        return default_config() if name == DEFAULT_QUEUE else NotFound("queue")

    async def queue_configs(self) -> Sequence[QueueConfig]:
        engine = self._engine
        rows = await engine.fetch(engine.q(_CONFIGS), (), write=False)
        configs = {str(name): queue_config_from_json(str(config)) for name, config in rows}
        configs.setdefault(DEFAULT_QUEUE, default_config())
        return [config for _, config in sorted(configs.items())]

    async def list_queues(self) -> Sequence[QueueStatus]:
        engine = self._engine
        rows = await engine.fetch(engine.q(_LIST), (engine.given(None),), write=False)
        configs: dict[str, tuple[QueueConfig, int, int, int]] = {
            DEFAULT_QUEUE: (default_config(), 0, 0, 0)
        }
        depths: dict[str, int] = {}
        for name, config, running, depth, admitted, held in rows:
            if config is None:
                depths[str(name)] = int(depth)
            else:
                configs[str(name)] = (
                    queue_config_from_json(str(config)),
                    int(running),
                    int(admitted),
                    int(held),
                )
        return [
            QueueStatus(
                config=config,
                running=running,
                depth=depths.get(name, 0),
                admitted=admitted,
                held=held,
            )
            for name, (config, running, admitted, held) in sorted(configs.items())
        ]

    # -- the slot ledger --------------------------------------------------------------------

    async def acquire_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        require_slot_request(name, holders, ttl)
        if not holders:
            raise ValueError("holders: acquire at least one slot")
        default = _default_config_text(name)
        engine = self._engine
        return await self._count(
            _ACQUIRE, (name, _holders(holders), ttl, engine.given(now), default)
        )

    async def renew_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        require_slot_request(name, holders, ttl)
        if not holders:
            return 0
        engine = self._engine
        return await self._count(_RENEW, (name, _holders(holders), ttl, engine.given(now)))

    async def release_slots(self, name: str, holders: Sequence[str], refund: bool = False) -> None:
        require_slot_request(name, holders, timedelta(0))
        if not holders:
            return
        engine = self._engine
        await self._count(_RELEASE, (name, _holders(holders), refund, engine.given(None)))

    async def _count(self, statement: str, params: tuple[object, ...]) -> int:
        """One ledger function's answer: a count, 0 for no such queue."""
        engine = self._engine
        rows = await engine.fetch(engine.q(statement), params, write=True)
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    # -- the fused claim (SlotClaims) -------------------------------------------------------

    async def claim_with_slots(
        self,
        policy: ClaimPolicy,
        name: str,
        holders: Sequence[str],
        release: Sequence[str] = (),
    ) -> ClaimBatch | Retryable | Permanent | None:
        require_fused_request(policy, name, holders, release)
        engine = self._engine
        preference = None if policy.preference is None else str(policy.preference.value)
        default = _default_config_text(name)
        rows = await engine.outcome(
            engine.q(_FUSED_CLAIM),
            (
                name,
                _holders(holders),
                _holders(release),
                policy.orphan_ttl,
                min(policy.max_claim_attempts, INT4_MAX),
                preference,
                engine.given(policy.now),
                engine.fair,
                default,
            ),
        )
        if not isinstance(rows, list):
            return rows
        if not rows:
            return None  # nothing granted (or no such queue)
        # a grant that claimed nothing answers one row of NULLs: an empty batch
        return self._runs.claimed_batch([r for r in rows if r[1] is not None], policy.orphan_ttl)


__all__ = ["PostgresQueues"]
