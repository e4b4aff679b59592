"""Admission limits (``SQLiteBackend.admissions``, ``Feature.ADMISSION``; schema version 6).

The rules are the contract's (:mod:`docket.contract.admission`; the memory reference keeps
an ``AdmissionBook`` per queue); this module answers exactly as that book does, with the
ledger in ``docket_admissions`` (``held`` 1: waiting, 0: admitted and not yet finished)
and each queue's last ``seq`` in its ``docket_queues`` row. Each operation that changes
the ledger is one ``BEGIN IMMEDIATE`` write (``Engine.write``) that reads the queue's
config from the row ``backend.queues`` writes, so it cannot interleave with another
admission operation or a ``set_queue`` in any process on the file.

Counts are SQL over the ledger's indexes (a queue's admitted starts, one tenant's), never
a load of the ledger. A promotion reads only what it promotes, from covering indexes
(never the start bytes): without a tenant cap, the queue's first held starts in
promotion order; with one, each tenant's first held starts up to its free room (one
seek to find each tenant with held starts), merged in promotion order and cut at the
queue's room — the same starts, in the same order, as the reference's walk, without
reading the held starts queued behind tenants at their cap.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from docket.contract.admission import admits, require_admit_request, require_run_ids
from docket.contract.errors import NotFound
from docket.contract.queues import require_queue_name
from docket.records import Admission, AdmissionView, HeldStart, QueueConfig
from docket.values import from_micros, to_micros
from docket_sqlite._engine import Engine
from docket_sqlite._queues import stored_config
from docket_sqlite._rows import tenant_of
from docket_sqlite._threads import Done

_COLUMNS = "queue, run_id, tenant, priority, seq, start, at_us"

#: A queue's held starts in promotion order, from the index alone: the promotion when
#: no tenant has a cap (nothing is skipped), and the view.
WALK_SQL = (
    "SELECT run_id, tenant FROM docket_admissions WHERE queue = ? AND held = 1 "
    "ORDER BY priority DESC, seq"
)
#: The tenants with held starts in a queue, one index seek each (``''`` is tenantless).
FIRST_HELD_TENANT_SQL = "SELECT min(tenant) FROM docket_admissions WHERE queue = ? AND held = 1"
NEXT_HELD_TENANT_SQL = (
    "SELECT min(tenant) FROM docket_admissions WHERE queue = ? AND held = 1 AND tenant > ?"
)
#: One tenant's first held starts in promotion order, from the index alone.
TENANT_WALK_SQL = (
    "SELECT priority, seq, run_id FROM docket_admissions "
    "WHERE queue = ? AND held = 1 AND tenant = ? ORDER BY priority DESC, seq LIMIT ?"
)
#: ``held_start``: the reference looks through the queues in name order.
HELD_START_SQL = (
    f"SELECT {_COLUMNS} FROM docket_admissions WHERE run_id = ? AND tenant = ? "
    "ORDER BY queue LIMIT 1"
)

#: A queue's admitted starts (``held = 0``) or held ones (``held = 1``).
_COUNT = "SELECT count(*) FROM docket_admissions WHERE queue = ? AND held = ?"
_TENANT_ADMITTED = (
    "SELECT count(*) FROM docket_admissions WHERE queue = ? AND tenant = ? AND held = 0"
)


def _start(row: Sequence[Any]) -> HeldStart:
    queue, run_id, tenant, priority, seq, start, at_us = row
    return HeldStart(
        queue=str(queue),
        run_id=str(run_id),
        tenant=tenant_of(str(tenant)),
        priority=int(priority),
        seq=int(seq),
        start=bytes(start),
        at=from_micros(int(at_us)),
    )


def _count(conn: sqlite3.Connection, sql: str, *args: object) -> int:
    return int(conn.execute(sql, args).fetchone()[0])


def _admit(
    conn: sqlite3.Connection,
    config: QueueConfig,
    run_id: str,
    tenant: str,
    priority: int,
    start: bytes,
    at_us: int,
) -> Done[Admission]:
    name = config.name
    row = conn.execute(
        "SELECT held FROM docket_admissions WHERE queue = ? AND run_id = ?", (name, run_id)
    ).fetchone()
    if row is not None:  # a retried start: its state, nothing changed
        return Done(Admission.HELD if row[0] else Admission.ADMITTED, commit=False)
    (seq,) = conn.execute(
        "UPDATE docket_queues SET admission_seq = admission_seq + 1 WHERE name = ? "
        "RETURNING admission_seq",
        (name,),
    ).fetchone()
    waiting = conn.execute(
        "SELECT 1 FROM docket_admissions WHERE queue = ? AND tenant = ? AND held = 1 LIMIT 1",
        (name, tenant),
    ).fetchone()
    # each count only when its cap exists (admits ignores the other)
    admitted = 0 if config.admission_limit is None else _count(conn, _COUNT, name, 0)
    mine = 0
    if config.tenant_admission_limit is not None:
        mine = _count(conn, _TENANT_ADMITTED, name, tenant)
    held = waiting is not None or not admits(config, admitted, mine)
    conn.execute(
        f"INSERT INTO docket_admissions ({_COLUMNS}, held) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (name, run_id, tenant, priority, int(seq), start, at_us, int(held)),
    )
    return Done(Admission.HELD if held else Admission.ADMITTED)


def _promote(conn: sqlite3.Connection, config: QueueConfig, at_us: int) -> list[HeldStart]:
    """Promote held starts while the limits allow (``AdmissionBook.promote``), in
    promotion order; the caller's transaction writes them."""
    name, cap, tenant_cap = config.name, config.admission_limit, config.tenant_admission_limit
    room = -1  # SQLite's LIMIT -1: no limit
    if cap is not None:
        room = cap - _count(conn, _COUNT, name, 0)
        if room <= 0:
            return []
    if tenant_cap is None:  # no tenant is ever skipped: the first ``room`` held starts
        chosen = [str(run_id) for run_id, _ in conn.execute(f"{WALK_SQL} LIMIT ?", (name, room))]
    else:
        chosen = _chosen_under_tenant_cap(conn, name, tenant_cap, room)
    return [
        _start(
            conn.execute(
                "UPDATE docket_admissions SET held = 0, at_us = ? "
                f"WHERE queue = ? AND run_id = ? RETURNING {_COLUMNS}",
                (at_us, name, run_id),
            ).fetchone()
        )
        for run_id in chosen
    ]


def _chosen_under_tenant_cap(
    conn: sqlite3.Connection, name: str, tenant_cap: int, room: int
) -> list[str]:
    """The run ids the reference's walk promotes when tenants have a cap. A tenant's count
    only grows by its own promotions, so the walk takes exactly each tenant's first
    ``tenant_cap - admitted`` held starts and stops after ``room`` in all: read those per
    tenant (a few index seeks each, never the held starts behind a tenant at its cap),
    merge them in promotion order and cut at ``room``."""
    candidates: list[tuple[int, int, str]] = []
    tenant = conn.execute(FIRST_HELD_TENANT_SQL, (name,)).fetchone()[0]
    while tenant is not None:
        free = tenant_cap - _count(conn, _TENANT_ADMITTED, name, tenant)
        if free > 0:
            for priority, seq, run_id in conn.execute(TENANT_WALK_SQL, (name, tenant, free)):
                candidates.append((-int(priority), int(seq), str(run_id)))
        tenant = conn.execute(NEXT_HELD_TENANT_SQL, (name, tenant)).fetchone()[0]
    candidates.sort()
    return [run_id for _, _, run_id in (candidates if room < 0 else candidates[:room])]


class SQLiteAdmissionStore:
    """The admission ledgers of the queues in ``docket_queues`` (``backend.admissions``):
    a ``docket.contract.AdmissionStore``."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def admit(
        self,
        name: str,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime | None = None,
    ) -> Admission | NotFound:
        require_admit_request(name, run_id, tenant, priority, start)
        engine = self._engine

        def job(conn: sqlite3.Connection) -> Done[Admission | NotFound]:
            at = engine.now(now)
            config = stored_config(conn, name, insert_default_at=at)
            if config is None:
                return Done(NotFound("queue"), commit=False)
            done = _admit(conn, config, run_id, tenant or "", priority, start, to_micros(at))
            return Done(done.value, commit=done.commit)

        return await engine.write(job)

    async def finish_admitted(
        self, name: str, run_ids: Sequence[str], now: datetime | None = None
    ) -> Sequence[HeldStart]:
        require_queue_name(name)
        finished = sorted(set(require_run_ids(run_ids)))
        engine = self._engine

        def job(conn: sqlite3.Connection) -> Done[list[HeldStart]]:
            config = stored_config(conn, name)  # no row: no ledger, nothing to change
            if config is None:
                return Done([], commit=False)
            gone = conn.executemany(
                "DELETE FROM docket_admissions WHERE queue = ? AND run_id = ? AND held = 0",
                [(name, run_id) for run_id in finished],
            ).rowcount
            promoted = _promote(conn, config, engine.now_us(now))
            return Done(promoted, commit=bool(gone > 0 or promoted))

        return await engine.write(job)

    async def promote_held(self, name: str, now: datetime | None = None) -> Sequence[HeldStart]:
        require_queue_name(name)
        engine = self._engine

        def job(conn: sqlite3.Connection) -> Done[list[HeldStart]]:
            config = stored_config(conn, name)  # no row: no ledger, nothing to change
            if config is None:
                return Done([], commit=False)
            promoted = _promote(conn, config, engine.now_us(now))
            return Done(promoted, commit=bool(promoted))

        return await engine.write(job)

    async def drop_held(self, name: str, run_id: str) -> HeldStart | None:
        require_queue_name(name)
        require_run_ids([run_id])

        def job(conn: sqlite3.Connection) -> Done[HeldStart | None]:
            row = conn.execute(
                "DELETE FROM docket_admissions WHERE queue = ? AND run_id = ? AND held = 1 "
                f"RETURNING {_COLUMNS}",
                (name, run_id),
            ).fetchone()
            return Done(None, commit=False) if row is None else Done(_start(row))

        return await self._engine.write(job)

    async def held_start(self, run_id: str, tenant: str | None) -> HeldStart | None:
        require_run_ids([run_id])
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            return None  # no start has such a tenant (and '' must not match tenantless)

        def job(conn: sqlite3.Connection) -> HeldStart | None:
            row = conn.execute(HELD_START_SQL, (run_id, tenant or "")).fetchone()
            return None if row is None else _start(row)

        return await self._engine.read(job)

    async def admissions(self, name: str, limit: int = 1000) -> AdmissionView:
        require_queue_name(name)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit: expected a positive integer, got {limit!r}")

        rows = min(limit, 1 << 62)  # SQLite's LIMIT is a 64-bit integer

        def job(conn: sqlite3.Connection) -> AdmissionView:
            select = f"SELECT {_COLUMNS} FROM docket_admissions WHERE queue = ? AND held = ?"
            admitted = conn.execute(f"{select} ORDER BY seq LIMIT ?", (name, 0, rows))
            held = conn.execute(f"{select} ORDER BY priority DESC, seq LIMIT ?", (name, 1, rows))
            return AdmissionView(
                admitted=tuple(_start(row) for row in admitted.fetchall()),
                held=tuple(_start(row) for row in held.fetchall()),
            )

        return await self._engine.read(job)


__all__ = [
    "FIRST_HELD_TENANT_SQL",
    "HELD_START_SQL",
    "NEXT_HELD_TENANT_SQL",
    "TENANT_WALK_SQL",
    "WALK_SQL",
    "SQLiteAdmissionStore",
]
