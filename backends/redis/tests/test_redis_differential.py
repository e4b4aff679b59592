"""Redis against the reference: one seeded stream of operations, the same answers.

A ``MemoryBackend`` and a ``RedisBackend`` share one ``ManualClock`` and receive the same
random operations — transitions with every schedule (claimed and unclaimed, replays,
re-sent and conflicting events, stale fences), claims with every policy shape, refresh,
release, abandon (to the poison), retry, reads, listings under every scope with their
cursors — and every answer must be equal. Tokens are random by design, so both sides'
tokens are compared through labels: the n-th token a side mints is ``K<n>``.

The same run ids are used in every owner scope, so ``claim_due`` and SYSTEM listings
have to order candidates of several scopes (several cluster nodes) exactly like the
reference does.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import attrs
import pytest
from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    tid,
    unclaimed,
)
from docket_redis import RedisBackend
from docket_redis.testing import T0, RedisCluster, RedisServer, with_prefix

from docket.clock import ManualClock
from docket.contract import (
    AbandonPolicy,
    At,
    Backend,
    Backoff,
    ClaimBatch,
    ClaimClass,
    ClaimPolicy,
    EventListQuery,
    External,
    GraphListQuery,
    Immediate,
    ReleaseClaim,
    RetainClaim,
    RunListQuery,
    Schedule,
    Terminal,
    Wake,
)
from docket.contract.memory import MemoryBackend
from docket.records import SYSTEM, TENANTLESS, OwnerScope, Run, RunInfo, RunStatus, Scope, Tenant

OWNERS: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b"), Tenant("c}{")]
RUN_IDS = ["r1", "r2", "r3", "r4"]
STATUSES: dict[type, list[RunStatus]] = {
    Immediate: [RunStatus.RUNNING],
    At: [RunStatus.RUNNING],
    External: [RunStatus.WAITING],
    Terminal: [RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED],
}


class Labels:
    """Claim tokens of both sides, named by the order in which each side minted them."""

    def __init__(self) -> None:
        self.names: list[dict[str, str]] = [{}, {}]
        self.tokens: list[dict[str, str]] = [{}, {}]
        self.last: dict[tuple[str, str], str] = {}  # (owner, run) -> latest lease label

    def rename(self, side: int, answer: object) -> object:
        if not isinstance(answer, ClaimBatch):
            return answer
        renamed = []
        for lease in answer.leases:
            name = f"K{len(self.names[side])}"
            self.names[side][lease.claim_token] = name
            self.tokens[side][name] = lease.claim_token
            self.last[(str(lease.owner), lease.run_id)] = name
            renamed.append(attrs.evolve(lease, claim_token=name))
        return attrs.evolve(answer, leases=tuple(renamed))

    def token(self, side: int, name: str) -> str:
        return self.tokens[side].get(name, name)


class Pair:
    """The reference and the subject, and the generator of one stream of operations."""

    def __init__(self, rng: random.Random, subject: Backend, clock: ManualClock) -> None:
        self.rng = rng
        self.clock = clock
        self.sides: list[Backend] = [MemoryBackend(clock=clock), subject]
        self.labels = Labels()
        self.step = 0
        self.seen: set[str] = set()

    async def both(self, what: str, call: Callable[[int, Backend], Awaitable[object]]) -> None:
        answers: list[object] = []
        for side, backend in enumerate(self.sides):
            try:
                answer: object = await call(side, backend)
            except (ValueError, TypeError) as exc:
                answer = ("raised", type(exc).__name__)
            answers.append(self.labels.rename(side, answer))
        self.seen.add(_kind(answers[0]))
        assert answers[0] == answers[1], (
            f"step {self.step}, {what}:\n  memory {answers[0]!r}\n  redis  {answers[1]!r}"
        )

    async def same(self, what: str, store: str, method: str, *args: object) -> None:
        """``both`` for a call made with the same arguments on either side."""
        await self.both(what, lambda _, b: getattr(getattr(b, store), method)(*args))

    async def abandon(
        self, owner: OwnerScope, run_id: str, name: str, policy: AbandonPolicy
    ) -> None:
        await self.both(
            "abandon_claim",
            lambda s, b: b.runs.abandon_claim(owner, run_id, self.labels.token(s, name), policy),
        )

    # -- choices ----------------------------------------------------------------------------

    def owner(self) -> OwnerScope:
        return self.rng.choice(OWNERS)

    def when(self) -> datetime:
        return self.clock() + timedelta(seconds=self.rng.choice([-20, -1, 0, 0, 2, 30]))

    def token_name(self, owner: OwnerScope, run_id: str) -> str:
        last = self.labels.last.get((str(owner), run_id))
        if last is not None and self.rng.random() < 0.7:
            return last
        minted = len(self.labels.names[0])
        if minted and self.rng.random() < 0.8:
            return f"K{self.rng.randrange(minted)}"
        return "no-such-token"

    def schedule(self, with_claim: bool) -> tuple[Schedule, RunStatus]:
        if with_claim and self.rng.random() < 0.3:
            return RetainClaim(), RunStatus.RUNNING
        wakes: list[Wake] = [Immediate(), At(self.when()), External(), Terminal()]
        wake = self.rng.choice(wakes)
        return ReleaseClaim(wake), self.rng.choice(STATUSES[type(wake)])

    async def current(self, owner: OwnerScope, run_id: str) -> Run | None:
        found = await self.sides[0].runs.fetch_run(owner, run_id)
        return found if isinstance(found, Run) else None

    # -- operations -------------------------------------------------------------------------

    async def initialize(self) -> None:
        owner, run_id = self.owner(), self.rng.choice(RUN_IDS)
        ref = graph_ref(graph_document("g", self.rng.choice([0, 0, 1, 5])))  # 5: unpublished
        count = self.rng.choice([0, 1, 2])
        started = self.clock() - timedelta(seconds=self.rng.choice([0, 0, 1]))
        run = attrs.evolve(new_run(run_id, ref, started), event_seq=count)
        proposal = init_proposal(run, self.when())
        events = events_for(run, started, range(1, count + 1))
        for _ in range(2 if self.rng.random() < 0.25 else 1):
            await self.both(
                "initialize", lambda _, b: b.transitions.initialize(owner, proposal, events)
            )

    async def commit(self) -> None:
        owner, run_id = self.owner(), self.rng.choice(RUN_IDS)
        run = await self.current(owner, run_id) or new_run(
            run_id, graph_ref(graph_document("g")), T0
        )
        with_claim = self.rng.random() < 0.65
        schedule, status = self.schedule(with_claim)
        nxt = successor(run, self.clock(), new_events=self.rng.choice([0, 1, 2]), status=status)
        seqs = list(range(run.event_seq + 1, nxt.event_seq + 1))
        if run.event_seq and self.rng.random() < 0.25:
            seqs.insert(0, run.event_seq)  # re-send the latest stored event
        if seqs and self.rng.random() < 0.1:
            seqs = seqs[1:]  # leave a gap
        events = events_for(nxt, self.clock(), seqs)
        if events and self.rng.random() < 0.1:
            events[0] = attrs.evolve(events[0], payload={"changed": True})
        expected = run.checkpoint_seq - self.rng.choice([0, 0, 0, 1])
        repeats = 2 if self.rng.random() < 0.2 else 1
        if with_claim:
            name = self.token_name(owner, run_id)
            shared = tid()
            proposals = [
                attrs.evolve(
                    claimed(
                        nxt, self.labels.token(side, name), schedule=schedule, expected=expected
                    ),
                    transition_id=shared,
                )
                for side in (0, 1)
            ]
            for _ in range(repeats):
                await self.both(
                    "commit_claimed",
                    lambda s, b: b.transitions.commit_claimed(owner, proposals[s], events),
                )
        else:
            assert isinstance(schedule, ReleaseClaim)
            proposal = unclaimed(nxt, wake=schedule.wake)
            for _ in range(repeats):
                await self.both(
                    "commit_unclaimed",
                    lambda _, b: b.transitions.commit_unclaimed(owner, expected, proposal, events),
                )

    async def claim(self) -> None:
        policy = ClaimPolicy(
            limit=self.rng.choice([1, 1, 2, 3, 6]),
            orphan_ttl=timedelta(seconds=self.rng.choice([0, 10, 60])),
            max_claim_attempts=self.rng.choice([1, 2, 3]),
            preference=self.rng.choice([None, ClaimClass.READY, ClaimClass.EXPIRED]),
            now=self.rng.choice([None, None, self.clock(), self.when()]),
        )
        await self.both("claim_due", lambda _, b: b.runs.claim_due(policy))

    async def hold(self) -> None:
        """refresh / release / abandon / retry, mostly aimed at leased runs."""
        owner, run_id = self.owner(), self.rng.choice(RUN_IDS)
        if self.labels.last and self.rng.random() < 0.6:
            key = self.rng.choice(sorted(self.labels.last))
            owner = next(o for o in OWNERS if str(o) == key[0])
            run_id = key[1]
        name = self.token_name(owner, run_id)
        now = self.rng.choice([None, self.clock(), self.when()])
        runs = [b.runs for b in self.sides]
        match self.rng.choice(["refresh", "release", "abandon", "retry"]):
            case "refresh":
                await self.both(
                    "refresh_claim",
                    lambda s, _: runs[s].refresh_claim(
                        owner, run_id, self.labels.token(s, name), now
                    ),
                )
            case "release":
                await self.both(
                    "release_claim",
                    lambda s, _: runs[s].release_claim(
                        owner, run_id, self.labels.token(s, name), now
                    ),
                )
            case "retry":
                await self.both(
                    "retry_poisoned_run",
                    lambda s, _: runs[s].retry_poisoned_run(owner, run_id, now),
                )
            case _:
                run = await self.current(owner, run_id)
                base = now or self.clock()
                policy = AbandonPolicy(
                    expected_checkpoint_seq=(run.checkpoint_seq if run else 1)
                    - self.rng.choice([0, 0, 1]),
                    retry_at=base + timedelta(seconds=self.rng.choice([-1, 0, 9])),
                    max_claim_abandons=self.rng.choice([1, 2]),
                    non_poisoning=self.rng.random() < 0.3,
                    backoff=self.rng.choice(
                        [None, Backoff(base=timedelta(seconds=2), cap=timedelta(seconds=5))]
                    ),
                    now=now,
                )
                await self.both(
                    "abandon_claim",
                    lambda s, _: runs[s].abandon_claim(
                        owner, run_id, self.labels.token(s, name), policy
                    ),
                )

    async def exhaust(self) -> None:
        """Abandon a leased run again and again until it is poisoned."""
        if not self.labels.last:
            return
        key = self.rng.choice(sorted(self.labels.last))
        owner = next(o for o in OWNERS if str(o) == key[0])
        limit = self.rng.choice([1, 2])
        for _ in range(limit + 1):
            run = await self.current(owner, key[1])
            name = self.labels.last.get(key, "no-such-token")
            policy = AbandonPolicy(
                expected_checkpoint_seq=run.checkpoint_seq if run else 1,
                retry_at=self.clock(),
                max_claim_abandons=limit,
                now=self.clock(),
            )
            await self.abandon(owner, key[1], name, policy)
            again = ClaimPolicy(limit=8, orphan_ttl=timedelta(minutes=1), max_claim_attempts=3)
            await self.same("claim_due", "runs", "claim_due", again)

    async def read(self) -> None:
        owner, run_id = self.owner(), self.rng.choice(RUN_IDS)
        match self.rng.choice(["inspect", "list", "events", "event", "latest", "graphs"]):
            case "inspect":
                await self.both("inspect_run", lambda _, b: b.runs.inspect_run(owner, run_id))
            case "list":
                scope: Scope = self.rng.choice([SYSTEM, SYSTEM, *OWNERS])
                query = RunListQuery(
                    limit=self.rng.choice([1, 2, 3, 20]),
                    graph_id=self.rng.choice([None, None, "g", "other"]),
                    graph_hash=self.rng.choice(
                        [None, graph_ref(graph_document("g", 1)).graph_hash]
                    ),
                    statuses=self.rng.choice(
                        [
                            None,
                            frozenset({RunStatus.RUNNING}),
                            frozenset({RunStatus.DONE, RunStatus.WAITING}),
                        ]
                    ),
                )
                for _ in range(5):  # follow the cursor
                    page = await self.sides[0].runs.list_runs(scope, query)
                    await self.same("list_runs", "runs", "list_runs", scope, query)
                    if not page.has_more:
                        break
                    query = attrs.evolve(query, before=page.next_before)
            case "events":
                events = EventListQuery(
                    after_seq=self.rng.choice([0, 1, 3]), limit=self.rng.choice([1, 2, 100])
                )
                await self.both(
                    "list_events", lambda _, b: b.events.list_events(owner, run_id, events)
                )
            case "event":
                seq = self.rng.choice([1, 2, 4, 9])
                await self.both(
                    "fetch_event", lambda _, b: b.events.fetch_event(owner, run_id, seq)
                )
            case "latest":
                await self.both(
                    "fetch_latest_event", lambda _, b: b.events.fetch_latest_event(owner, run_id)
                )
            case _:
                await self.both(
                    "fetch_latest_graph_ref",
                    lambda _, b: b.graphs.fetch_latest_graph_ref(owner, "g"),
                )
                versions = GraphListQuery(limit=1)
                await self.both(
                    "list_graph_versions",
                    lambda _, b: b.graphs.list_graph_versions(owner, "g", versions),
                )

    async def publish(self) -> None:
        owner = self.owner()
        document = graph_document("g", self.rng.choice([0, 1, 2]))
        ref = graph_ref(document)
        await self.both("save_graph", lambda _, b: b.graphs.save_graph(owner, ref, document))
        await self.both("fetch_graph", lambda _, b: b.graphs.fetch_graph(owner, ref))

    async def tick(self) -> None:
        self.clock.advance(timedelta(seconds=self.rng.choice([1, 4, 15, 70])))

    async def run(self, steps: int) -> None:
        for owner in OWNERS:
            for variant in (0, 1):
                document = graph_document("g", variant)
                ref = graph_ref(document)
                await self.same("save_graph", "graphs", "save_graph", owner, ref, document)
            self.clock.advance(timedelta(microseconds=1))
        weighted: list[tuple[Callable[[], Awaitable[None]], int]] = [
            (self.initialize, 4),
            (self.commit, 6),
            (self.claim, 5),
            (self.hold, 5),
            (self.exhaust, 1),
            (self.read, 5),
            (self.publish, 1),
            (self.tick, 3),
        ]
        menu = [op for op, weight in weighted for _ in range(weight)]
        for self.step in range(steps):
            await self.rng.choice(menu)()
        for owner in OWNERS:
            for run_id in RUN_IDS:
                await self.same("final inspect", "runs", "inspect_run", owner, run_id)
                everything = EventListQuery(limit=1000)
                await self.same("final events", "events", "list_events", owner, run_id, everything)


def _kind(answer: Any) -> str:
    if isinstance(answer, ClaimBatch):
        return "ClaimBatch+" + ("poisoned" if answer.poisoned else "lease" if answer.leases else "")
    if isinstance(answer, RunInfo):
        return "RunInfo"
    return type(answer).__name__


async def _compare(url: str, prefix: str, seed: int, steps: int) -> set[str]:
    clock = ManualClock(T0)
    subject = RedisBackend.from_url(with_prefix(url, prefix), clock=clock)
    await subject.open()
    try:
        pair = Pair(random.Random(seed), subject, clock)
        await pair.run(steps)
        return pair.seen
    finally:
        await subject.close()


SEEDS = 30


def test_same_answers_as_the_reference_on_one_redis(redis_single: RedisServer, prefix: str) -> None:
    seen: set[str] = set()
    for seed in range(SEEDS):
        seen |= asyncio.run(_compare(redis_single.url, f"{prefix}s{seed}", seed, 150))
    wanted = {
        "Run",
        "NotFound",
        "Conflict",
        "StaleCheckpoint",
        "EventConflict",
        "InvalidTransition",
        "ClaimBatch+lease",
        "ClaimBatch+poisoned",
        "ClaimRefreshed",
        "ClaimLost",
        "Rescheduled",
        "Poisoned",
        "StaleAbandon",
        "InactiveRun",
        "RunInfo",
        "EventPage",
        "RunPage",
        "GraphVersion",
        "GraphRef",
        "GraphVersionPage",
    }
    assert wanted <= seen, f"the streams never produced {sorted(wanted - seen)}"


@pytest.mark.parametrize("seed", range(4))
def test_same_answers_as_the_reference_on_a_cluster(
    redis_cluster_nodes: RedisCluster, prefix: str, seed: int
) -> None:
    asyncio.run(_compare(redis_cluster_nodes.url, prefix, 1000 + seed, 150))
