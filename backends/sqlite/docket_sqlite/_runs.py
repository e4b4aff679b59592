"""``SQLiteRunStore``: the contract's RunStore — run reads, listing and the claims.

Reads each see one snapshot. Every claim operation is one write transaction
(``Engine.write``), so the choice it makes cannot interleave with another process's:
``claim_due`` picks with the shared ``select_claims`` over candidates read from the
partial indexes by queue and priority (``_claims.py``); refresh, release and abandon
are fenced on the claim token; a run out of claim attempts or abandons is poisoned
until ``retry_poisoned_run``.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from docket.contract import (
    POISON_MAX_ABANDONS,
    POISON_MAX_ATTEMPTS,
    AbandonOutcome,
    AbandonPolicy,
    ClaimBatch,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    InactiveRun,
    Lease,
    NotFound,
    Permanent,
    Poisoned,
    PoisonedClaim,
    Rescheduled,
    Retryable,
    RunListQuery,
    StaleAbandon,
)
from docket.contract.queries import (
    abandon_wake,
    require_abandon_policy,
    require_claim_policy,
    require_run_query,
    select_claims,
)
from docket.records import (
    CheckpointType,
    OwnerScope,
    Run,
    RunInfo,
    RunPage,
    RunStatus,
    RunSummary,
    Scope,
    System,
    owner_scope,
    require_scope,
    run_from_json,
)
from docket.values import from_micros, to_micros
from docket_sqlite._claims import EXPIRED, READY, Found, candidates
from docket_sqlite._engine import Engine
from docket_sqlite._rows import (
    optional_time,
    run_address,
    stored_run_json,
    tenant_key,
    tenant_of,
    whole_run_json,
)
from docket_sqlite._threads import Done

_INT64_MIN = -(1 << 63)
_SUMMARY_COLUMNS = (
    "tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq, "
    "started_at_us, updated_at_us, finished_at_us"
)
_INFO_COLUMNS = (
    "tenant, run_json, run_parts, wake_at_us, claimed_at_us, claim_attempts, claim_abandons, "
    "poisoned_at_us, poison_reason, latest_checkpoint_type, queue, priority"
)


class SQLiteRunStore:
    """Run reads and the claim operations (``SQLiteBackend.runs``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    # -- run reads ---------------------------------------------------------------------------

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        key = run_address(owner, run_id)

        def job(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT run_json, run_parts FROM docket_runs WHERE tenant = ? AND run_id = ?",
                (key, run_id),
            ).fetchone()
            return None if row is None else whole_run_json(conn, key, run_id, row[0], row[1])

        data = await self._engine.read(job)
        return NotFound() if data is None else run_from_json(data)

    async def inspect_run(self, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
        key = run_address(owner, run_id)

        def job(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row = conn.execute(
                f"SELECT {_INFO_COLUMNS} FROM docket_runs WHERE tenant = ? AND run_id = ?",
                (key, run_id),
            ).fetchone()
            if row is None:
                return None
            return (row[0], whole_run_json(conn, key, run_id, row[1], row[2]), *row[3:])

        row = await self._engine.read(job)
        if row is None:
            return NotFound()
        tenant, data, wake, claimed, attempts, abandons, poisoned, reason, checkpoint = row[:9]
        queue, priority = row[9:]
        return RunInfo(
            run=run_from_json(bytes(data)),
            tenant_id=tenant_of(str(tenant)),
            wake_at=optional_time(wake),
            claimed_at=optional_time(claimed),
            claim_attempts=int(attempts),
            claim_abandons=int(abandons),
            poisoned_at=optional_time(poisoned),
            poison_reason=None if reason is None else str(reason),
            latest_checkpoint_type=CheckpointType(str(checkpoint)),
            queue=str(queue),
            priority=int(priority),
        )

    async def list_runs(self, scope: Scope, query: RunListQuery) -> RunPage:
        require_scope(scope)
        require_run_query(query)
        sql, params = list_runs_sql(scope, query)

        def job(conn: sqlite3.Connection) -> list[RunSummary]:
            return [_summary(row) for row in conn.execute(sql, params).fetchall()]

        summaries = await self._engine.read(job)
        return RunPage.from_candidates(summaries, query.limit, query.before)

    # -- claims -----------------------------------------------------------------------------

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        require_claim_policy(policy)
        engine = self._engine

        def job(conn: sqlite3.Connection) -> Done[ClaimBatch]:
            batch = claim_in(conn, policy, engine.now_us(policy.now))
            return Done(batch, commit=bool(batch.leases or batch.poisoned))

        return await engine.outcome(job)

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        engine = self._engine
        key = run_address(owner, run_id)
        if now is not None:
            now = engine.now(now)
        if not isinstance(token, str):
            return ClaimLost()

        def job(conn: sqlite3.Connection) -> Done[ClaimRefreshed | ClaimLost]:
            rows = conn.execute(
                "UPDATE docket_runs SET claimed_at_us = max(claimed_at_us, ?) "
                "WHERE tenant = ? AND run_id = ? AND claim_token = ? RETURNING claimed_at_us",
                (engine.now_us(now), key, run_id, token),
            ).fetchall()
            if not rows:
                return Done(ClaimLost(), commit=False)
            return Done(ClaimRefreshed(from_micros(int(rows[0][0]))))

        return await engine.write(job)

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        engine = self._engine
        key = run_address(owner, run_id)
        if now is not None:
            now = engine.now(now)
        if not isinstance(token, str):
            return

        def job(conn: sqlite3.Connection) -> Done[None]:
            cursor = conn.execute(
                "UPDATE docket_runs SET claim_token = NULL, claimed_at_us = NULL, "
                "wake_at_us = ? WHERE tenant = ? AND run_id = ? AND claim_token = ?",
                (engine.now_us(now), key, run_id, token),
            )
            matched = cursor.rowcount == 1
            return Done(None, commit=matched, announce=matched)

        await engine.write(job)

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        key = run_address(owner, run_id)
        now = self._engine.now(policy.now)
        require_abandon_policy(policy, now)
        if not isinstance(token, str):
            return StaleAbandon()

        def job(conn: sqlite3.Connection) -> Done[AbandonOutcome]:
            row = conn.execute(
                "SELECT claim_token, checkpoint_seq, claim_attempts, claim_abandons "
                "FROM docket_runs WHERE tenant = ? AND run_id = ?",
                (key, run_id),
            ).fetchone()
            if (
                row is None
                or row[0] is None
                or row[0] != token
                or int(row[1]) != policy.expected_checkpoint_seq
            ):
                return Done(StaleAbandon(), commit=False)
            old = int(row[3])
            attempts = max(int(row[2]) - 1, 0)
            if not policy.non_poisoning and old >= policy.max_claim_abandons:
                conn.execute(
                    "UPDATE docket_runs SET claim_token = NULL, claimed_at_us = NULL, "
                    "wake_at_us = NULL, claim_attempts = ?, poisoned_at_us = ?, "
                    "poison_reason = ? WHERE tenant = ? AND run_id = ?",
                    (attempts, to_micros(now), POISON_MAX_ABANDONS, key, run_id),
                )
                return Done(Poisoned(now, POISON_MAX_ABANDONS))
            wake = abandon_wake(policy, old, now)
            conn.execute(
                "UPDATE docket_runs SET claim_token = NULL, claimed_at_us = NULL, "
                "wake_at_us = ?, claim_attempts = ?, claim_abandons = ? "
                "WHERE tenant = ? AND run_id = ?",
                (to_micros(wake), attempts, old + 1, key, run_id),
            )
            return Done(Rescheduled(wake), announce=True)

        return await self._engine.write(job)

    async def retry_poisoned_run(
        self, owner: OwnerScope, run_id: str, now: datetime | None = None
    ) -> Run | NotFound | InactiveRun:
        engine = self._engine
        key = run_address(owner, run_id)
        if now is not None:
            now = engine.now(now)

        def job(conn: sqlite3.Connection) -> Done[bytes | NotFound | InactiveRun]:
            row = conn.execute(
                "SELECT status, poisoned_at_us FROM docket_runs WHERE tenant = ? AND run_id = ?",
                (key, run_id),
            ).fetchone()
            if row is None:
                return Done(NotFound(), commit=False)
            if RunStatus(str(row[0])).terminal:
                return Done(InactiveRun(), commit=False)
            if row[1] is None:
                return Done(stored_run_json(conn, key, run_id), commit=False)
            conn.execute(
                "UPDATE docket_runs SET poisoned_at_us = NULL, poison_reason = NULL, "
                "claim_token = NULL, claimed_at_us = NULL, claim_attempts = 0, "
                "claim_abandons = 0, wake_at_us = ? WHERE tenant = ? AND run_id = ?",
                (engine.now_us(now), key, run_id),
            )
            return Done(stored_run_json(conn, key, run_id), announce=True)

        found = await engine.write(job)
        return run_from_json(found) if isinstance(found, bytes) else found


def list_runs_sql(scope: Scope, query: RunListQuery) -> tuple[str, list[object]]:
    """The one statement behind ``list_runs``: scope and every filter applied in SQL.

    Newest first by ``(started_at, run_id)``; ``rowid`` (insertion order) only breaks
    the tie of one run id reused by two tenants under ``System``. Reads ``limit + 1``
    rows so the page knows whether there is more.
    """
    clauses: list[str] = []
    params: list[object] = []
    if not isinstance(scope, System):
        clauses.append("tenant = ?")
        params.append(tenant_key(scope))
    if query.graph_id is not None:
        clauses.append("graph_id = ?")
        params.append(query.graph_id)
    if query.graph_hash is not None:
        clauses.append("graph_hash = ?")
        params.append(query.graph_hash)
    if query.statuses is not None:
        statuses = sorted(str(s) for s in query.statuses)
        clauses.append(f"status IN ({', '.join('?' * len(statuses))})")
        params.extend(statuses)
    if query.before is not None:
        clauses.append("(started_at_us, run_id) < (?, ?)")
        params += [to_micros(query.before.started_at), query.before.run_id]
    where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
    sql = (
        f"SELECT {_SUMMARY_COLUMNS} FROM docket_runs {where}"
        "ORDER BY started_at_us DESC, run_id DESC, rowid ASC LIMIT ?"
    )
    params.append(query.limit + 1)
    return sql, params


def _summary(row: Sequence[Any]) -> RunSummary:
    tenant, run_id, graph_id, graph_hash, status, step, seq, started, updated, finished = row
    return RunSummary(
        id=str(run_id),
        tenant_id=tenant_of(str(tenant)),
        graph_id=str(graph_id),
        graph_hash=str(graph_hash),
        status=RunStatus(str(status)),
        step=int(step),
        checkpoint_seq=int(seq),
        started_at=from_micros(int(started)),
        updated_at=from_micros(int(updated)),
        finished_at=optional_time(finished),
    )


def _poison(conn: sqlite3.Connection, key: str, run_id: str, now_us: int, reason: str) -> None:
    conn.execute(
        "UPDATE docket_runs SET claim_token = NULL, claimed_at_us = NULL, wake_at_us = NULL, "
        "poisoned_at_us = ?, poison_reason = ? WHERE tenant = ? AND run_id = ?",
        (now_us, reason, key, run_id),
    )


def claim_in(conn: sqlite3.Connection, policy: ClaimPolicy, now_us: int) -> ClaimBatch:
    """``claim_due``'s work inside a write transaction the caller holds (the fused claim
    of a limited queue runs it between its slot reads and writes)."""
    now = from_micros(now_us)
    cutoff = max(now_us - policy.orphan_ttl // timedelta(microseconds=1), _INT64_MIN)
    found = Found()
    limit, queues = policy.limit, policy.queues
    ready = candidates(conn, READY, now_us, limit, queues, found)
    expired = candidates(conn, EXPIRED, cutoff, limit, queues, found)
    chosen = select_claims(ready, expired, limit, policy.preference, priority=found.priority_of)
    attempts = found.attempts
    leases: list[Lease] = []
    poisoned: list[PoisonedClaim] = []
    for _, run_id, tenant in chosen:
        key = tenant or ""
        if attempts[(key, run_id)] < policy.max_claim_attempts:
            token = secrets.token_urlsafe(18)
            graph_id, graph_hash, checkpoint_seq, attempt = conn.execute(
                "UPDATE docket_runs SET claim_token = ?, claimed_at_us = ?, "
                "wake_at_us = NULL, claim_attempts = claim_attempts + 1 "
                "WHERE tenant = ? AND run_id = ? "
                "RETURNING graph_id, graph_hash, checkpoint_seq, claim_attempts",
                (token, now_us, key, run_id),
            ).fetchall()[0]
            leases.append(
                Lease(
                    run_id=run_id,
                    owner=owner_scope(tenant),
                    graph_id=str(graph_id),
                    graph_hash=str(graph_hash),
                    checkpoint_seq=int(checkpoint_seq),
                    claim_token=token,
                    claimed_at=now,
                    claim_attempt=int(attempt),
                    orphan_ttl=policy.orphan_ttl,
                )
            )
        else:
            _poison(conn, key, run_id, now_us, POISON_MAX_ATTEMPTS)
            poisoned.append(
                PoisonedClaim(
                    run_id=run_id,
                    owner=owner_scope(tenant),
                    poisoned_at=now,
                    poison_reason=POISON_MAX_ATTEMPTS,
                )
            )
    return ClaimBatch(tuple(leases), tuple(poisoned))


__all__ = ["SQLiteRunStore", "claim_in", "list_runs_sql"]
