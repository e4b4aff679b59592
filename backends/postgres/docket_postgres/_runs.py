"""The run store (``RunStore``, ``ClaimedRuns``) of ``PostgresBackend``: run reads and claims.

* **Reads.** ``fetch_run`` and ``inspect_run`` read one row (``inspect_run`` joins the
  run's operational row in ``live``); ``list_runs`` is one statement with the scope and
  every filter in SQL (:meth:`PostgresRuns._list_runs_sql`).
* **Claims.** ``claim_due`` is one call of the ``claim_due`` function, which locks with
  ``FOR UPDATE SKIP LOCKED`` exactly the runs it returns, blind or fair across tenants.
  Each claimed run's document rides along with its lease and is kept for the drain
  (``claimed_run``, :class:`docket.contract.claimed.ClaimedRunDocuments`). Refresh and
  release are single ``UPDATE``s fenced on the claim token; ``abandon_claim`` and
  ``retry_poisoned_run`` are function calls, because they decide under the row lock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from psycopg import sql

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
from docket.contract.claimed import ClaimedRunDocuments
from docket.contract.queries import (
    require_abandon_policy,
    require_claim_policy,
    require_run_id,
    require_run_query,
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
    require_owner,
    require_scope,
)
from docket.values import utc
from docket_postgres._engine import (
    INT4_MAX,
    Engine,
    Row,
    decode_run,
    opt_time,
    owner_of,
    storable,
    tenant_key,
)

_BACKOFF_STEPS: Final = 31  # abandon backoff doubles at most 30 times

_FETCH_RUN = "SELECT run_json FROM @schema@.runs WHERE tenant = %s AND run_id = %s"
_INSPECT_RUN = (
    "SELECT r.run_json, l.wake_at, l.claimed_at, coalesce(l.claim_attempts, 0), "
    "coalesce(l.claim_abandons, 0), l.poisoned_at, l.poison_reason, r.latest_checkpoint_type, "
    "r.queue, r.priority "
    "FROM @schema@.runs r LEFT JOIN @schema@.live l ON l.tenant = r.tenant AND l.run_id = r.run_id "
    "WHERE r.tenant = %s AND r.run_id = %s"
)
_SUMMARY = (
    "tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq, started_at, "
    "updated_at, finished_at"
)
# The claimed run's document rides along with its lease, so the drain that follows need
# not read it back. The lookup reads ``runs`` in the statement's own snapshot, which may
# predate a commit the claim saw: a document whose checkpoint is not the lease's is left
# out (NULL), and the drain reads the run as usual. A subquery per claimed run rather than
# a join: it is always a key probe, where a join was planned as a scan of the whole table
# while ``runs`` had no statistics yet.
#: The columns of a claim's rows, as ``claimed_batch`` reads them, from a function named
#: next (``claim_due``, or the queue store's ``claim_with_slots``) as ``c``.
CLAIMED_ROWS = (
    "SELECT c.o_tenant, c.o_run_id, c.o_graph_id, c.o_graph_hash, c.o_checkpoint_seq, "
    "c.o_token, c.o_attempts, c.o_poisoned, c.o_now, CASE WHEN NOT c.o_poisoned THEN ("
    "SELECT r.run_json FROM @schema@.runs r WHERE r.tenant = c.o_tenant "
    "AND r.run_id = c.o_run_id AND r.checkpoint_seq = c.o_checkpoint_seq) END FROM "
)
_CLAIM = (
    CLAIMED_ROWS
    + "@schema@.claim_due(%s::integer, %s::interval, %s::integer, %s, %s::timestamptz, %s) "
    "WITH ORDINALITY c ORDER BY c.ordinality"
)
# A claim for named queues (schema 9) passes them; one for every queue sends the call
# above, as it always did (``p_queues`` defaults to NULL).
_CLAIM_IN_QUEUES = _CLAIM.replace("%s::timestamptz, %s)", "%s::timestamptz, %s, %s::text[])")
assert _CLAIM_IN_QUEUES != _CLAIM
_REFRESH = (
    "UPDATE @schema@.live SET claimed_at = greatest(claimed_at, "
    "coalesce(%s::timestamptz, clock_timestamp())) "
    "WHERE tenant = %s AND run_id = %s AND claim_token = %s RETURNING claimed_at"
)
_RELEASE = (
    "WITH released AS (UPDATE @schema@.live SET claim_token = NULL, claimed_at = NULL, "
    "wake_at = coalesce(%s::timestamptz, clock_timestamp()) "
    "WHERE tenant = %s AND run_id = %s AND claim_token = %s RETURNING 1) "
    "SELECT pg_notify('docket_wake', '@name@') FROM released"
)
_ABANDON = (
    "SELECT * FROM @schema@.abandon_claim(%s, %s, %s, %s::bigint, %s::timestamptz, "
    "%s::timestamptz, %s::integer, %s, %s::interval[])"
)
_RETRY = "SELECT * FROM @schema@.retry_poisoned(%s, %s, %s::timestamptz)"


def _backoff_delays(base: timedelta, cap: timedelta) -> list[timedelta]:
    """``min(base * 2**k, cap)`` for every k the backoff can reach (0..30)."""
    out: list[timedelta] = []
    for k in range(_BACKOFF_STEPS):
        factor = 1 << k
        out.append(cap if base > cap / factor else base * factor)
    return out


def _summary(row: Row) -> RunSummary:
    key, run_id, graph_id, graph_hash, status, step, seq, started, updated, finished = row
    return RunSummary(
        id=str(run_id),
        tenant_id=str(key) or None,
        graph_id=str(graph_id),
        graph_hash=str(graph_hash),
        status=RunStatus(str(status)),
        step=int(step),
        checkpoint_seq=int(seq),
        started_at=utc(started),
        updated_at=utc(updated),
        finished_at=opt_time(finished),
    )


class PostgresRuns:
    """``RunStore`` and ``ClaimedRuns`` over one backend's
    :class:`~docket_postgres._engine.Engine`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._claimed_runs = ClaimedRunDocuments()

    # -- run reads ------------------------------------------------------------------------------

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        key = tenant_key(require_owner(owner))
        if not storable(require_run_id(run_id), key):
            return NotFound()
        engine = self._engine
        rows = await engine.fetch(engine.q(_FETCH_RUN), (key, run_id), write=False)
        return decode_run(bytes(rows[0][0]), repr(run_id)) if rows else NotFound()

    async def inspect_run(self, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
        key = tenant_key(require_owner(owner))
        if not storable(require_run_id(run_id), key):
            return NotFound()
        engine = self._engine
        rows = await engine.fetch(engine.q(_INSPECT_RUN), (key, run_id), write=False)
        if not rows:
            return NotFound()
        data, wake, claimed, attempts, abandons, poisoned, reason, checkpoint, queue, prio = rows[0]
        return RunInfo(
            run=decode_run(bytes(data), repr(run_id)),
            tenant_id=key or None,
            wake_at=opt_time(wake),
            claimed_at=opt_time(claimed),
            claim_attempts=int(attempts),
            claim_abandons=int(abandons),
            poisoned_at=opt_time(poisoned),
            poison_reason=None if reason is None else str(reason),
            latest_checkpoint_type=CheckpointType(str(checkpoint)),
            queue=str(queue),
            priority=int(prio),
        )

    async def list_runs(self, scope: Scope, query: RunListQuery) -> RunPage:
        require_scope(scope)
        require_run_query(query)
        statement, params = self._list_runs_sql(scope, query)
        if statement is None:
            return RunPage.from_candidates([], query.limit, query.before)
        rows = await self._engine.fetch(statement, params, write=False)
        return RunPage.from_candidates([_summary(row) for row in rows], query.limit, query.before)

    def _list_runs_sql(
        self, scope: Scope, query: RunListQuery
    ) -> tuple[sql.Composed | None, list[object]]:
        """The one statement behind ``list_runs``: scope and every filter applied in SQL.

        Newest first by ``(started_at, run_id)``; across owners (``System``) the identity
        column — insertion order — breaks the tie of one run id used by two tenants.
        """
        clauses: list[sql.Composable] = []
        params: list[object] = []
        if not isinstance(scope, System):
            clauses.append(sql.SQL("tenant = %s"))
            params.append(tenant_key(scope))
        for name in ("graph_id", "graph_hash"):
            value = getattr(query, name)
            if value is not None:
                clauses.append(sql.SQL("{} = %s").format(sql.Identifier(name)))
                params.append(value)
        if not storable(*params):
            return None, []
        if query.statuses is not None:
            clauses.append(sql.SQL("status = ANY(%s::text[])"))
            params.append(sorted(str(s) for s in query.statuses))
        if query.before is not None:
            if not storable(query.before.run_id):
                return None, []
            clauses.append(sql.SQL("(started_at, run_id) < (%s::timestamptz, %s::text)"))
            params += [utc(query.before.started_at), query.before.run_id]
        where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL("")
        tie = sql.SQL(", id ASC") if isinstance(scope, System) else sql.SQL("")
        statement = sql.SQL(
            "SELECT {columns} FROM {schema}.runs{where} "
            "ORDER BY started_at DESC, run_id DESC{tie} LIMIT %s"
        ).format(
            columns=sql.SQL(_SUMMARY),
            schema=sql.Identifier(self._engine.schema),
            where=where,
            tie=tie,
        )
        params.append(query.limit + 1)
        return statement, params

    # -- claims ---------------------------------------------------------------------------------

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        require_claim_policy(policy)
        engine = self._engine
        preference = None if policy.preference is None else str(policy.preference.value)
        args: tuple[object, ...] = (
            min(policy.limit, INT4_MAX),
            policy.orphan_ttl,
            min(policy.max_claim_attempts, INT4_MAX),
            preference,
            engine.given(policy.now),
            engine.fair,
        )
        statement = _CLAIM
        if policy.queues is not None:
            statement = _CLAIM_IN_QUEUES
            args = (*args, sorted(policy.queues))
        rows = await engine.outcome(engine.q(statement), args)
        if not isinstance(rows, list):
            return rows
        return self.claimed_batch(rows, policy.orphan_ttl)

    def claimed_batch(self, rows: list[Row], orphan_ttl: timedelta) -> ClaimBatch:
        """The batch of ``claim_due``'s rows (the ``_CLAIM`` columns), each claimed run's
        document kept for its drain; the queue store's fused claim reads the same rows."""
        leases: list[Lease] = []
        poisoned: list[PoisonedClaim] = []
        claimed_runs = self._claimed_runs
        for row in rows:
            key, run_id, graph_id, graph_hash, seq, token, attempts, is_poisoned, at, doc = row
            owner = owner_of(str(key))
            moment = utc(at)
            if is_poisoned:
                poisoned.append(
                    PoisonedClaim(
                        run_id=str(run_id),
                        owner=owner,
                        poisoned_at=moment,
                        poison_reason=POISON_MAX_ATTEMPTS,
                    )
                )
            else:
                leases.append(
                    Lease(
                        run_id=str(run_id),
                        owner=owner,
                        graph_id=str(graph_id),
                        graph_hash=str(graph_hash),
                        checkpoint_seq=int(seq),
                        claim_token=str(token),
                        claimed_at=moment,
                        claim_attempt=int(attempts),
                        orphan_ttl=orphan_ttl,
                    )
                )
                if doc is not None:
                    claimed_runs.keep(str(token), str(key), str(run_id), bytes(doc))
        return ClaimBatch(tuple(leases), tuple(poisoned))

    async def claimed_run(self, owner: OwnerScope, run_id: str, token: str) -> Run | None:
        """The run as the claim holding ``token`` read it, at most once; ``None`` when this
        backend did not keep it (read the run instead). Saves the drain a round trip."""
        kept = self._claimed_runs.take(token, tenant_key(require_owner(owner)), run_id)
        return None if kept is None else decode_run(kept, repr(run_id))

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        key = tenant_key(require_owner(owner))
        require_run_id(run_id)
        engine = self._engine
        moment = engine.given(now)
        if not isinstance(token, str) or not storable(run_id, key, token):
            return ClaimLost()
        rows = await engine.fetch(engine.q(_REFRESH), (moment, key, run_id, token), write=True)
        return ClaimRefreshed(utc(rows[0][0])) if rows else ClaimLost()

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        key = tenant_key(require_owner(owner))
        require_run_id(run_id)
        engine = self._engine
        moment = engine.given(now)
        if not isinstance(token, str) or not storable(run_id, key, token):
            return
        rows = await engine.fetch(engine.q(_RELEASE), (moment, key, run_id, token), write=True)
        engine.announced(bool(rows))

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        key = tenant_key(require_owner(owner))
        require_run_id(run_id)
        if not isinstance(policy, AbandonPolicy):
            raise TypeError(f"expected AbandonPolicy, got {type(policy).__name__}")
        engine = self._engine
        now = utc(policy.now) if policy.now is not None else await engine.now()
        require_abandon_policy(policy, now)
        if not isinstance(token, str) or not storable(run_id, key, token):
            return StaleAbandon()
        backoff = policy.backoff
        delays = (
            _backoff_delays(backoff.base, backoff.cap)
            if policy.non_poisoning and backoff is not None
            else None
        )
        rows = await engine.fetch(
            engine.q(_ABANDON),
            (
                key,
                run_id,
                token,
                policy.expected_checkpoint_seq,
                now,
                utc(policy.retry_at),
                min(policy.max_claim_abandons, INT4_MAX),
                policy.non_poisoning,
                delays,
            ),
            write=True,
        )
        outcome, at = rows[0]
        if outcome == "stale":
            return StaleAbandon()
        if outcome == "poisoned":
            return Poisoned(utc(at), POISON_MAX_ABANDONS)
        engine.announced(True)
        return Rescheduled(utc(at))

    async def retry_poisoned_run(
        self, owner: OwnerScope, run_id: str, now: datetime | None = None
    ) -> Run | NotFound | InactiveRun:
        key = tenant_key(require_owner(owner))
        require_run_id(run_id)
        engine = self._engine
        moment = engine.given(now)
        if not storable(run_id, key):
            return NotFound()
        rows = await engine.fetch(engine.q(_RETRY), (key, run_id, moment), write=True)
        outcome, data = rows[0]
        if outcome == "not_found":
            return NotFound()
        if outcome == "inactive":
            return InactiveRun()
        if outcome == "retried":
            engine.announced(True)
        return decode_run(bytes(data), repr(run_id))
