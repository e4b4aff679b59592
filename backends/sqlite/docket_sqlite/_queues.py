"""Named queues (``SQLiteBackend.queues``, ``Feature.QUEUES``; schema version 5).

The rules are the contract's, one implementation for every backend
(:class:`docket.contract.queues.SlotLedger`); this module only stores them, as
``docket.contract.memory_queues`` (the reference) keeps them in dicts. Each operation on
a queue's ledger is one ``BEGIN IMMEDIATE`` write (``Engine.write``): it loads the
queue's ``docket_queues`` row and its ``docket_queue_slots``, applies the ledger's
operation and writes back what changed, so it cannot interleave with another process's
operation on the same file (the write lock is taken before the read). "default" exists
without a row: reads answer its default config, and the first write inserts the row.

**The fused claim** (``claim_with_slots``, the optional
:class:`docket.contract.protocols.SlotClaims`) is a limited queue's whole claim round in
one such write: the carried releases, the grant, ``claim_due``'s own work for at most the
grant (:func:`docket_sqlite._runs.claim_in`) and a slot for each lease. The runtime would
otherwise compose it of three writes (``acquire_slots``, ``claim_due``, ``release_slots``),
each taking the file's write lock and syncing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

from docket.contract import ClaimBatch, ClaimPolicy, Permanent, Retryable
from docket.contract.errors import NotFound
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
from docket.values import from_micros, to_micros
from docket_sqlite._engine import Engine
from docket_sqlite._runs import claim_in
from docket_sqlite._threads import Done
from docket_sqlite.errors import PermanentStoreError

#: ``list_queues``' depth: unclaimed, unpoisoned running runs due now, by queue. Repeats
#: the ``docket_runs_due`` index's condition so SQLite reads that index in queue order.
DEPTH_SQL = (
    "SELECT queue, count(*) FROM docket_runs "
    "WHERE status IN ('running', 'waiting') AND poisoned_at_us IS NULL AND claim_token IS NULL "
    "AND status = 'running' AND wake_at_us <= ? GROUP BY queue"
)


#: ``list_queues``' queue rows: each config, its live slots and (``Feature.ADMISSION``,
#: version 6) its admitted and held starts, each count one range of an index.
LIST_SQL = (
    "SELECT q.name, q.config, "
    "(SELECT count(*) FROM docket_queue_slots s WHERE s.queue = q.name AND s.expires_at_us >= ?), "
    "(SELECT count(*) FROM docket_admissions a WHERE a.queue = q.name AND a.held = 0), "
    "(SELECT count(*) FROM docket_admissions a WHERE a.queue = q.name AND a.held = 1) "
    "FROM docket_queues q"
)


def _config(name: str, data: bytes) -> QueueConfig:
    try:
        config = queue_config_from_json(bytes(data))
    except (TypeError, ValueError) as exc:
        raise PermanentStoreError(f"queue {name!r}: stored config is unreadable: {exc}") from exc
    if config.name != name:
        raise PermanentStoreError(f"queue {name!r}: stored config names {config.name!r}")
    return config


def stored_config(
    conn: sqlite3.Connection, name: str, *, insert_default_at: datetime | None = None
) -> QueueConfig | None:
    """The queue's config as its row stores it (``None``: no row). With
    ``insert_default_at``, "default" without a row gets one, as its first slot write
    would (rows of other tables reference it)."""
    row = conn.execute("SELECT config FROM docket_queues WHERE name = ?", (name,)).fetchone()
    if row is not None:
        return _config(name, row[0])
    if name != DEFAULT_QUEUE or insert_default_at is None:
        return None
    now = insert_default_at
    _save(conn, SlotLedger.new(default_config(), now), {}, now)
    return default_config()


def _load(
    conn: sqlite3.Connection, name: str, now: datetime
) -> tuple[SlotLedger | None, dict[str, int]]:
    """The queue's ledger as stored (``None``: unknown; "default" without a row starts
    afresh) and its slots as stored (holder -> ``expires_at_us``), for :func:`_save`."""
    row = conn.execute(
        "SELECT config, tokens, refilled_at_us FROM docket_queues WHERE name = ?", (name,)
    ).fetchone()
    if row is None:
        fresh = SlotLedger.new(default_config(), now) if name == DEFAULT_QUEUE else None
        return fresh, {}
    stored = {
        str(holder): int(expires)
        for holder, expires in conn.execute(
            "SELECT holder, expires_at_us FROM docket_queue_slots WHERE queue = ?", (name,)
        )
    }
    ledger = SlotLedger(
        config=_config(name, row[0]),
        holders={holder: from_micros(at) for holder, at in stored.items()},
        tokens=float(row[1]),
        refilled_at=from_micros(int(row[2])),
    )
    return ledger, stored


def _save(
    conn: sqlite3.Connection, ledger: SlotLedger, before: dict[str, int], now: datetime
) -> None:
    """Write ``ledger`` back: its row (inserted if new) and the slots that changed."""
    name = ledger.config.name
    refilled = ledger.refilled_at if ledger.refilled_at is not None else now
    conn.execute(
        "INSERT INTO docket_queues (name, config, tokens, refilled_at_us) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET config = excluded.config, tokens = excluded.tokens, "
        "refilled_at_us = excluded.refilled_at_us",
        (name, queue_config_to_json(ledger.config), ledger.tokens, to_micros(refilled)),
    )
    after = {holder: to_micros(at) for holder, at in ledger.holders.items()}
    gone = [(name, holder) for holder in before if holder not in after]
    if gone:
        conn.executemany("DELETE FROM docket_queue_slots WHERE queue = ? AND holder = ?", gone)
    changed = [(name, h, at) for h, at in after.items() if before.get(h) != at]
    if changed:
        conn.executemany(
            "INSERT INTO docket_queue_slots (queue, holder, expires_at_us) VALUES (?, ?, ?) "
            "ON CONFLICT (queue, holder) DO UPDATE SET expires_at_us = excluded.expires_at_us",
            changed,
        )


class SQLiteQueueStore:
    """Queue configs and the slot ledger in two tables (``SQLiteBackend.queues``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def set_queue(self, config: QueueConfig) -> QueueConfig:
        require_queue_config(config)
        engine = self._engine

        def job(conn: sqlite3.Connection) -> Done[QueueConfig]:
            now = engine.now(None)
            ledger, before = _load(conn, config.name, now)
            if ledger is None:
                ledger = SlotLedger.new(config, now)
            else:
                ledger.reconfigure(config, now)
            _save(conn, ledger, before, now)
            return Done(config)

        return await engine.write(job)

    async def fetch_queue(self, name: str) -> QueueConfig | NotFound:
        require_queue_name(name)

        def job(conn: sqlite3.Connection) -> QueueConfig | NotFound:
            sql = "SELECT config FROM docket_queues WHERE name = ?"
            row = conn.execute(sql, (name,)).fetchone()
            if row is None:
                return default_config() if name == DEFAULT_QUEUE else NotFound("queue")
            return _config(name, row[0])

        return await self._engine.read(job)

    async def queue_configs(self) -> Sequence[QueueConfig]:
        def job(conn: sqlite3.Connection) -> list[QueueConfig]:
            rows = conn.execute("SELECT name, config FROM docket_queues").fetchall()
            configs = {str(name): _config(str(name), data) for name, data in rows}
            configs.setdefault(DEFAULT_QUEUE, default_config())
            return [config for _, config in sorted(configs.items())]

        return await self._engine.read(job)

    async def list_queues(self) -> Sequence[QueueStatus]:
        engine = self._engine

        def job(conn: sqlite3.Connection) -> list[QueueStatus]:
            now_us = engine.now_us(None)
            rows = conn.execute(LIST_SQL, (now_us,)).fetchall()
            held = {
                str(name): (_config(str(name), data), int(n), int(admitted), int(waiting))
                for name, data, n, admitted, waiting in rows
            }
            held.setdefault(DEFAULT_QUEUE, (default_config(), 0, 0, 0))
            depth = {str(q): int(n) for q, n in conn.execute(DEPTH_SQL, (now_us,))}
            return [
                QueueStatus(
                    config=config,
                    running=running,
                    depth=depth.get(name, 0),
                    admitted=admitted,
                    held=waiting,
                )
                for name, (config, running, admitted, waiting) in sorted(held.items())
            ]

        return await engine.read(job)

    async def acquire_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        require_slot_request(name, holders, ttl)
        if not holders:
            raise ValueError("holders: acquire at least one slot")
        at = self._engine.now(now)
        wanted = list(holders)

        def job(conn: sqlite3.Connection) -> Done[int]:
            ledger, before = _load(conn, name, at)
            if ledger is None:
                return Done(0, commit=False)
            granted = ledger.acquire(wanted, ttl, at)
            _save(conn, ledger, before, at)
            return Done(granted)

        return await self._engine.write(job)

    async def renew_slots(
        self, name: str, holders: Sequence[str], ttl: timedelta, now: datetime | None = None
    ) -> int:
        require_slot_request(name, holders, ttl)
        at = self._engine.now(now)
        wanted = list(holders)

        def job(conn: sqlite3.Connection) -> Done[int]:
            ledger, before = _load(conn, name, at)
            if ledger is None or not before:  # nothing held: nothing to renew
                return Done(0, commit=False)
            renewed = ledger.renew(wanted, ttl, at)
            _save(conn, ledger, before, at)
            return Done(renewed)

        return await self._engine.write(job)

    async def release_slots(self, name: str, holders: Sequence[str], refund: bool = False) -> None:
        require_slot_request(name, holders, timedelta(0))
        engine = self._engine
        wanted = list(holders)

        def job(conn: sqlite3.Connection) -> Done[None]:
            now = engine.now(None)
            ledger, before = _load(conn, name, now)
            if ledger is None or not before:  # nothing held: nothing to free or refund
                return Done(None, commit=False)
            ledger.release(wanted, bool(refund), now)
            _save(conn, ledger, before, now)
            return Done(None)

        return await engine.write(job)

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
        wanted, freed, ttl = list(holders), list(release), policy.orphan_ttl

        def job(conn: sqlite3.Connection) -> Done[ClaimBatch | None]:
            now_us = engine.now_us(policy.now)
            at = from_micros(now_us)
            ledger, before = _load(conn, name, at)
            if ledger is None:
                return Done(None, commit=False)
            ledger.release(freed, False, at)  # the carried releases first: their claims ended
            fresh = [h for h in wanted if h not in ledger.holders]
            granted = fresh[: ledger.acquire(fresh, ttl, at)]
            if not granted:
                _save(conn, ledger, before, at)
                return Done(None)
            # as if refunded, then held again for the leased ones only: a slot and a rate
            # token per lease, by the same ledger rules
            ledger.release(granted, True, at)
            batch = claim_in(
                conn, attrs.evolve(policy, limit=len(granted), queues=frozenset({name})), now_us
            )
            leased = granted[: len(batch.leases)]
            if leased and ledger.acquire(leased, ttl, at) != len(leased):
                raise AssertionError("a refunded slot could not be held again")
            _save(conn, ledger, before, at)
            return Done(batch)

        return await engine.outcome(job)


__all__ = ["DEPTH_SQL", "LIST_SQL", "SQLiteQueueStore", "stored_config"]
