"""``RedisRuns``: the run store (``RunStore`` and ``ClaimedRuns``) of a ``RedisBackend``.

Run reads go through ``lua/read_run.lua`` (a long document is reassembled from its
pieces in the script). ``list_runs`` walks one index per scope (all runs, by status, by
graph id or by graph hash, lexically ordered by start time and id) with
``lua/list_runs.lua``, which filters on the stored summaries and stops after a budget of
entries; ``SYSTEM`` listings visit every registered scope and merge. The claim
operations are one script each; ``claim_due`` is in :mod:`docket_redis._claims`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from docket.contract import (
    POISON_MAX_ABANDONS,
    AbandonOutcome,
    AbandonPolicy,
    ClaimBatch,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    InactiveRun,
    NotFound,
    Permanent,
    Poisoned,
    Rescheduled,
    Retryable,
    RunListQuery,
    StaleAbandon,
)
from docket.contract.claimed import ClaimedRunDocuments
from docket.contract.queries import require_abandon_policy, require_run_id, require_run_query
from docket.records import (
    DEFAULT_QUEUE,
    CheckpointType,
    OwnerScope,
    Run,
    RunInfo,
    RunPage,
    RunSummary,
    Scope,
    System,
    require_owner,
    require_scope,
)
from docket.values import from_micros, to_micros
from docket_redis import _claims
from docket_redis._codec import code, decode_run, decode_summary, opt_time, text
from docket_redis._engine import RedisEngine
from docket_redis.errors import corrupt
from docket_redis.keys import ScopeKeys, index_member, owner_part

#: Most index entries one list_runs script call looks at before answering.
LIST_BUDGET = 500


class RedisRuns:
    """Run reads and the claim operations (the only writes outside transitions)."""

    def __init__(self, engine: RedisEngine) -> None:
        self._engine = engine
        self._claimed_runs = ClaimedRunDocuments()

    # -- reads ------------------------------------------------------------------------------

    async def fetch_run(self, owner: OwnerScope, run_id: str) -> Run | NotFound:
        scope = self._engine.ns.scope(require_owner(owner))
        key = scope.run(require_run_id(run_id))
        data = (await self._engine.eval("read_run", [key], []))[0]
        return NotFound() if data is None else decode_run(data)

    async def inspect_run(self, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
        scope = self._engine.ns.scope(require_owner(owner))
        key = scope.run(require_run_id(run_id))
        row = await self._engine.eval("read_run", [key], [])
        data, wake, claimed, attempts, abandons, poisoned, reason, checkpoint = row[:8]
        queue, priority = row[8:10]  # absent: the defaults (every layout-4 run)
        if data is None:
            return NotFound()
        try:
            return RunInfo(
                run=decode_run(data),
                tenant_id=scope.tenant_id,
                wake_at=opt_time(wake),
                claimed_at=opt_time(claimed),
                claim_attempts=int(text(attempts)),
                claim_abandons=int(text(abandons)),
                poisoned_at=opt_time(poisoned),
                poison_reason=None if reason is None else text(reason),
                latest_checkpoint_type=CheckpointType(text(checkpoint)),
                queue=DEFAULT_QUEUE if queue is None else text(queue),
                priority=0 if priority is None else int(text(priority)),
            )
        except (TypeError, ValueError) as exc:
            raise corrupt(f"run {run_id!r} has unreadable operational state: {exc}") from exc

    async def list_runs(self, scope: Scope, query: RunListQuery) -> RunPage:
        require_scope(scope)
        require_run_query(query)
        if query.graph_id == "" or query.graph_hash == "":
            return RunPage.from_candidates([], query.limit, query.before)  # no such graph
        if isinstance(scope, System):
            scopes = await self._engine.scopes()
        else:
            scopes = [self._engine.ns.scope(scope)]
        want = query.limit + 1
        found: list[tuple[int, RunSummary]] = []
        for keys in scopes:
            found.extend(await self._list_scope(keys, query, want))
        found.sort(key=lambda item: item[0])  # listing order: ties keep creation order
        found.sort(key=lambda item: (to_micros(item[1].started_at), item[1].id), reverse=True)
        return RunPage.from_candidates([s for _, s in found[:want]], query.limit, query.before)

    async def _list_scope(
        self, keys: ScopeKeys, query: RunListQuery, want: int
    ) -> list[tuple[int, RunSummary]]:
        if query.graph_hash is not None:
            drivers = [keys.by_hash(query.graph_hash)]
        elif query.graph_id is not None:
            drivers = [keys.by_graph(query.graph_id)]
        elif query.statuses is not None:
            drivers = [keys.by_status(status) for status in sorted(query.statuses)]
        else:
            drivers = [keys.index]
        start = "+"
        if query.before is not None:
            start = "(" + index_member(to_micros(query.before.started_at), query.before.run_id)
        statuses = ",".join(sorted(s.value for s in query.statuses or ()))
        out: list[tuple[int, RunSummary]] = []
        for driver in drivers:
            bound = start
            matched = 0
            while matched < want:
                reply = await self._engine.eval(
                    "list_runs",
                    [driver, keys.summaries],
                    [
                        bound,
                        str(want - matched),
                        str(LIST_BUDGET),
                        query.graph_id or "",
                        query.graph_hash or "",
                        statuses,
                    ],
                )
                state, bound, items = text(reply[0]), text(reply[1]), reply[2]
                for run_id, summary in zip(items[::2], items[1::2]):
                    out.append(decode_summary(keys, text(run_id), summary))
                    matched += 1
                if state == "DONE":
                    break
        return out

    # -- claims -----------------------------------------------------------------------------

    async def claim_due(self, policy: ClaimPolicy) -> ClaimBatch | Retryable | Permanent:
        return await _claims.claim_due(self._engine, self._claimed_runs, policy)

    async def claimed_run(self, owner: OwnerScope, run_id: str, token: str) -> Run | None:
        """The run as the claim holding ``token`` read it (atomically with the lease), at
        most once; ``None`` when not kept (read the run instead). Saves the drain a call."""
        kept = self._claimed_runs.take(token, owner_part(require_owner(owner)), run_id)
        return None if kept is None else decode_run(kept)

    async def refresh_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> ClaimRefreshed | ClaimLost:
        scope = self._engine.ns.scope(require_owner(owner))
        require_run_id(run_id)
        moment = self._engine.now_arg(now)
        if not isinstance(token, str):
            return ClaimLost()
        reply = await self._engine.eval(
            "refresh", [scope.run(run_id), scope.claimed], [token, moment, run_id]
        )
        if code(reply) != "OK":
            return ClaimLost()
        return ClaimRefreshed(from_micros(int(text(reply[1]))))

    async def release_claim(
        self, owner: OwnerScope, run_id: str, token: str, now: datetime | None = None
    ) -> None:
        engine = self._engine
        scope = engine.ns.scope(require_owner(owner))
        require_run_id(run_id)
        moment = engine.now_arg(now)
        if not isinstance(token, str):
            return
        await engine.eval(
            "release",
            [scope.run(run_id), scope.ready, scope.claimed],
            [token, moment, run_id, engine.ns.channel],
        )

    async def abandon_claim(
        self, owner: OwnerScope, run_id: str, token: str, policy: AbandonPolicy
    ) -> AbandonOutcome:
        engine = self._engine
        scope = engine.ns.scope(require_owner(owner))
        given = engine.now_arg(policy.now)
        now = from_micros(int(given)) if given else await engine.server_time(scope.ready)
        require_abandon_policy(policy, now)
        require_run_id(run_id)
        if not isinstance(token, str):
            return StaleAbandon()
        backoff = policy.backoff
        reply = await engine.eval(
            "abandon",
            [scope.run(run_id), scope.ready, scope.claimed],
            [
                token,
                str(policy.expected_checkpoint_seq),
                str(to_micros(now)),
                str(policy.max_claim_abandons),
                "1" if policy.non_poisoning else "0",
                "" if backoff is None else str(backoff.base // timedelta(microseconds=1)),
                "" if backoff is None else str(backoff.cap // timedelta(microseconds=1)),
                str(to_micros(policy.retry_at)),
                run_id,
                engine.ns.channel,
                POISON_MAX_ABANDONS,
            ],
        )
        answer = code(reply)
        if answer == "STALE":
            return StaleAbandon()
        if answer == "POISONED":
            return Poisoned(from_micros(int(text(reply[1]))), POISON_MAX_ABANDONS)
        if answer == "RESCHEDULED":
            return Rescheduled(from_micros(int(text(reply[1]))))
        raise corrupt(f"abandon of run {run_id!r}: {reply!r}")

    async def retry_poisoned_run(
        self, owner: OwnerScope, run_id: str, now: datetime | None = None
    ) -> Run | NotFound | InactiveRun:
        engine = self._engine
        scope = engine.ns.scope(require_owner(owner))
        require_run_id(run_id)
        moment = engine.now_arg(now)
        reply = await engine.eval(
            "retry_poisoned",
            [scope.run(run_id), scope.ready, scope.claimed],
            [moment, run_id, engine.ns.channel],
        )
        answer = code(reply)
        if answer == "NOT_FOUND":
            return NotFound()
        if answer == "INACTIVE":
            return InactiveRun()
        return decode_run(reply[1])
