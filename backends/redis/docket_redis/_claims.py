"""``claim_due`` across owner scopes: peek every scope, choose once, take per scope.

Due work sits in each scope's ``ready`` and ``claimed`` sorted sets, one pair per lane
(queue and priority, ``lua/lanes.lua``). ``claim_due`` reads the oldest candidates of
every registered scope's lanes of the wanted queues (``lua/claim_peek.lua``), chooses
with the shared ``select_claims`` exactly as the reference does (priority first, from
the lane each candidate was found in), then leases the chosen
runs with one atomic ``lua/claim_take.lua`` per scope, which re-checks each candidate.
If a competing claimer took one in between, the choice is made again for the remaining
demand (:data:`CLAIM_ROUNDS` at most).

``claim_take`` answers each leased run's document with its lease: it is kept for the
lease's holder (``ClaimedRuns.claimed_run``) and, when long, remembered so the holder's
first commit sends only the pieces that changed.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs

from docket.contract import (
    POISON_MAX_ATTEMPTS,
    ClaimBatch,
    ClaimPolicy,
    Lease,
    Permanent,
    PoisonedClaim,
    Retryable,
)
from docket.contract.claimed import ClaimedRunDocuments
from docket.contract.proposals import ClaimClass
from docket.contract.queries import require_claim_policy, select_claims
from docket.records import owner_scope
from docket.values import from_micros
from docket_redis._codec import code, text
from docket_redis._documents import long_document
from docket_redis._engine import RedisEngine
from docket_redis.errors import StoreError, corrupt
from docket_redis.keys import ScopeKeys

Candidate = tuple[datetime, str, str | None]

#: How many times claim_due chooses again after losing candidates to a competitor.
CLAIM_ROUNDS = 4


@attrs.define
class _Peek:
    scope: ScopeKeys
    ready: list[Candidate]
    expired: list[Candidate]


def _lane_priority(lane: str) -> int:
    """The priority of a lane ``<queue>:<priority>`` (a queue name may hold ``:``)."""
    return int(lane.rsplit(":", 1)[1])


async def claim_due(
    engine: RedisEngine, kept: ClaimedRunDocuments, policy: ClaimPolicy
) -> ClaimBatch | Retryable | Permanent:
    """``RunStore.claim_due``; the documents of leased runs go to ``kept``."""
    require_claim_policy(policy)
    claim = _Claim(engine, kept, policy)
    demand = policy.limit
    try:
        scopes = await engine.scopes()
        for _ in range(CLAIM_ROUNDS):
            peeks = await asyncio.gather(*(claim.peek(keys, demand) for keys in scopes))
            lost = await claim.take(peeks, demand)
            demand = policy.limit - len(claim.leases) - len(claim.poisoned)
            if not lost or demand <= 0:
                break
    except StoreError as exc:
        if not claim.leases and not claim.poisoned:
            return exc.outcome
        # some runs were already leased: hand them out rather than strand them
    return ClaimBatch(tuple(claim.leases), tuple(claim.poisoned))


class _Claim:
    """One ``claim_due`` call: its arguments, and what it has leased or poisoned so far."""

    def __init__(self, engine: RedisEngine, kept: ClaimedRunDocuments, policy: ClaimPolicy):
        self._engine = engine
        self._kept = kept
        self._policy = policy
        self._now = engine.now_arg(policy.now)
        self._ttl = str(policy.orphan_ttl // timedelta(microseconds=1))
        self.leases: list[Lease] = []
        self.poisoned: list[PoisonedClaim] = []
        self._taken: set[tuple[str, str]] = set()  # (scope part, run id) settled already
        self._queues = ["*"] if policy.queues is None else sorted(policy.queues)
        #: (run id, tenant) -> priority, for candidates found outside a base lane
        self._priorities: dict[tuple[str, str | None], int] = {}

    def _priority(self, candidate: Candidate) -> int:
        return self._priorities.get((candidate[1], candidate[2]), 0)

    async def peek(self, keys: ScopeKeys, demand: int) -> _Peek:
        reply = await self._engine.eval(
            "claim_peek",
            [keys.ready, keys.claimed, keys.lanes],
            [self._now, self._ttl, str(demand), *self._queues],
        )
        tenant = keys.tenant_id

        def candidates(flat: list[Any], priority: int, out: list[Candidate]) -> None:
            for member, score in zip(flat[::2], flat[1::2]):
                run_id = text(member)
                if (keys.part, run_id) not in self._taken:
                    out.append((from_micros(int(float(text(score)))), run_id, tenant))
                    if priority:
                        self._priorities[(run_id, tenant)] = priority

        peek = _Peek(scope=keys, ready=[], expired=[])
        candidates(reply[1], 0, peek.ready)
        candidates(reply[2], 0, peek.expired)
        for lane, ready, expired in reply[3:]:
            priority = _lane_priority(text(lane))
            candidates(ready, priority, peek.ready)
            candidates(expired, priority, peek.expired)
        return peek

    async def take(self, peeks: Sequence[_Peek], demand: int) -> bool:
        """Lease the chosen candidates; ``True`` when a competitor took some of them."""
        policy = self._policy
        ready = [c for peek in peeks for c in peek.ready]
        expired = [c for peek in peeks for c in peek.expired]
        chosen = select_claims(ready, expired, demand, policy.preference, self._priority)
        if not chosen:
            return False
        ready_ids = {(c[1], c[2]) for c in ready}
        scope_of = {
            (c[1], c[2]): peek.scope for peek in peeks for c in (*peek.ready, *peek.expired)
        }
        groups: dict[str, list[tuple[Candidate, ClaimClass]]] = {}
        for candidate in chosen:
            ident = (candidate[1], candidate[2])
            cls = ClaimClass.READY if ident in ready_ids else ClaimClass.EXPIRED
            groups.setdefault(scope_of[ident].part, []).append((candidate, cls))
        outcomes: dict[tuple[str, str | None], Lease | PoisonedClaim] = {}
        for part, members in groups.items():
            outcomes.update(await self._take_scope(part, members))
        for candidate in chosen:
            outcome = outcomes.get((candidate[1], candidate[2]))
            if isinstance(outcome, Lease):
                self.leases.append(outcome)
            elif isinstance(outcome, PoisonedClaim):
                self.poisoned.append(outcome)
        return len(outcomes) < len(chosen)

    async def _take_scope(
        self, part: str, members: list[tuple[Candidate, ClaimClass]]
    ) -> dict[tuple[str, str | None], Lease | PoisonedClaim]:
        """One ``claim_take`` for the chosen candidates of one scope."""
        engine, policy = self._engine, self._policy
        keys = engine.ns.scope_of_part(part)
        args: list[str | bytes] = [
            self._now,
            self._ttl,
            str(policy.max_claim_attempts),
            POISON_MAX_ATTEMPTS,
        ]
        for candidate, cls in members:
            args += [candidate[1], cls.value, secrets.token_urlsafe(18)]
        reply = await engine.eval(
            "claim_take",
            [keys.ready, keys.claimed, *(keys.run(c[1]) for c, _ in members)],
            args,
        )
        if code(reply) != "OK":
            raise corrupt(f"claim_take: {reply!r}")
        moment = from_micros(int(text(reply[1])))
        owner = owner_scope(keys.tenant_id)
        outcomes: dict[tuple[str, str | None], Lease | PoisonedClaim] = {}
        for item in reply[2:]:
            run_id, what = text(item[0]), text(item[1])
            if what == "leased":
                token, attempt, graph_id, graph_hash, seq = (text(x) for x in item[2:7])
                if isinstance(item[7], bytes):
                    self._kept.keep(token, keys.part, run_id, item[7])
                    pieces = long_document(item[7])
                    engine.documents.remember(keys.part, run_id, int(seq), pieces)
                outcomes[(run_id, keys.tenant_id)] = Lease(
                    run_id=run_id,
                    owner=owner,
                    graph_id=graph_id,
                    graph_hash=graph_hash,
                    checkpoint_seq=int(seq),
                    claim_token=token,
                    claimed_at=moment,
                    claim_attempt=int(attempt),
                    orphan_ttl=policy.orphan_ttl,
                )
            elif what == "poisoned":
                outcomes[(run_id, keys.tenant_id)] = PoisonedClaim(
                    run_id=run_id,
                    owner=owner,
                    poisoned_at=moment,
                    poison_reason=POISON_MAX_ATTEMPTS,
                )
            if what != "skipped":
                self._taken.add((part, run_id))
        return outcomes
