"""PostgreSQL against the reference: one random stream of operations, the same answers.

A seeded generator drives a ``MemoryBackend`` and a ``PostgresBackend`` (its ``clock``
testing seam set to the same manual clock) with the same calls — initializes and
replays, claimed and unclaimed commits with every schedule, stale fences, re-sent and
conflicting events, claims of every shape, refresh, release, abandon (with and without
backoff), retries of poisoned runs, reads, listings and graph saves — and every answer
must be equal. Claim tokens are random on both sides, so answers are compared with each
token replaced by the order in which it was first seen (``tok0``, ``tok1``, …), and
calls name tokens by that label.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
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
from docket_postgres import PostgresBackend

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
)
from docket.contract.memory import MemoryBackend
from docket.records import SYSTEM, TENANTLESS, OwnerScope, Run, RunInfo, RunStatus, Scope, Tenant

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
OWNERS: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b")]
RUN_IDS = ["r1", "r2", "r3", "r4"]
TERMINAL = [RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED]


class Labels:
    """Claim tokens by first appearance, per side; the last lease of each run."""

    def __init__(self) -> None:
        self.by_token: list[dict[str, str]] = [{}, {}]
        self.by_label: list[dict[str, str]] = [{}, {}]
        self.last: dict[tuple[str, str], str] = {}

    def relabel(self, side: int, answer: object) -> object:
        if not isinstance(answer, ClaimBatch):
            return answer
        leases = []
        for lease in answer.leases:
            label = f"tok{len(self.by_token[side])}"
            self.by_token[side][lease.claim_token] = label
            self.by_label[side][label] = lease.claim_token
            self.last[(repr(lease.owner), lease.run_id)] = label
            leases.append(attrs.evolve(lease, claim_token=label))
        return attrs.evolve(answer, leases=tuple(leases))

    def real(self, side: int, label: str) -> str:
        return self.by_label[side].get(label, label)  # unknown labels are bogus tokens


class Differential:
    def __init__(self, rng: random.Random, subject: PostgresBackend, clock: ManualClock) -> None:
        self.rng = rng
        self.clock = clock
        self.sides: tuple[Backend, Backend] = (MemoryBackend(clock=clock), subject)
        self.labels = Labels()
        self.kinds: set[str] = set()
        self.step = 0

    async def same(self, what: str, call: Callable[[int, Backend], Awaitable[object]]) -> None:
        answers: list[object] = []
        for side, backend in enumerate(self.sides):
            try:
                answer: object = await call(side, backend)
            except (TypeError, ValueError) as exc:
                answer = ("raised", type(exc).__name__)
            answers.append(self.labels.relabel(side, answer))
        self.kinds.add(_kind(answers[0]))
        assert answers[0] == answers[1], (
            f"step {self.step}, {what}:\n  memory   {answers[0]!r}\n  postgres {answers[1]!r}"
        )

    # -- choices ---------------------------------------------------------------------------

    def owner(self) -> OwnerScope:
        return self.rng.choice(OWNERS)

    def scope(self) -> Scope:
        return self.rng.choice([SYSTEM, *OWNERS])

    def when(self) -> datetime:
        return self.clock() + timedelta(seconds=self.rng.choice([-20, -1, 0, 0, 2, 30]))

    def label_for(self, owner: OwnerScope, run_id: str) -> str:
        last = self.labels.last.get((repr(owner), run_id))
        if last is not None and self.rng.random() < 0.65:
            return last
        issued = len(self.labels.by_token[0])
        if issued and self.rng.random() < 0.8:
            return f"tok{self.rng.randrange(issued)}"
        return "no-such-token"

    def schedule(self, with_claim: bool) -> tuple[Schedule, RunStatus]:
        if with_claim and self.rng.random() < 0.3:
            return RetainClaim(), RunStatus.RUNNING
        pick = self.rng.randrange(4)
        if pick == 0:
            return ReleaseClaim(Immediate()), RunStatus.RUNNING
        if pick == 1:
            return ReleaseClaim(At(self.when())), RunStatus.RUNNING
        if pick == 2:
            return ReleaseClaim(External()), RunStatus.WAITING
        return ReleaseClaim(Terminal()), self.rng.choice(TERMINAL)

    async def stored(self, owner: OwnerScope, run_id: str) -> Run | None:
        found = await self.sides[0].runs.fetch_run(owner, run_id)
        return found if isinstance(found, Run) else None

    # -- operations ------------------------------------------------------------------------

    async def initialize(self) -> None:
        owner, run_id = self.owner(), self.rng.choice(RUN_IDS)
        ref = graph_ref(graph_document("g", self.rng.choice([0, 0, 1, 7])))  # 7: unpublished
        count = self.rng.choice([0, 0, 1, 2])
        fresh = attrs.evolve(new_run(run_id, ref, self.clock()), event_seq=count)
        proposal = init_proposal(fresh, self.when())
        evs = events_for(fresh, self.clock(), range(1, count + 1))
        for _ in range(1 if self.rng.random() < 0.8 else 2):  # sometimes sent twice
            await self.same(
                "initialize", lambda _, b: b.transitions.initialize(owner, proposal, evs)
            )

    async def commit(self) -> None:
        owner, run_id = self.owner(), self.rng.choice(RUN_IDS)
        base = await self.stored(owner, run_id) or new_run(
            run_id, graph_ref(graph_document("g")), T0
        )
        with_claim = self.rng.random() < 0.6
        schedule, status = self.schedule(with_claim)
        nxt = successor(base, self.clock(), new_events=self.rng.choice([0, 1, 2]), status=status)
        seqs = list(range(base.event_seq + 1, nxt.event_seq + 1))
        if base.event_seq and self.rng.random() < 0.25:
            seqs.insert(0, base.event_seq)  # re-send the last stored event
        evs = events_for(nxt, self.clock(), seqs)
        if evs and self.rng.random() < 0.1:
            evs[0] = attrs.evolve(evs[0], payload={"other": True})
        expected = base.checkpoint_seq - self.rng.choice([0, 0, 0, 1])
        shared = tid()
        times = 2 if self.rng.random() < 0.2 else 1
        if with_claim:
            label = self.label_for(owner, run_id)
            proposals = [
                attrs.evolve(
                    claimed(
                        nxt, self.labels.real(side, label), schedule=schedule, expected=expected
                    ),
                    transition_id=shared,
                )
                for side in (0, 1)
            ]
            for _ in range(times):
                await self.same(
                    "commit_claimed",
                    lambda s, b: b.transitions.commit_claimed(owner, proposals[s], evs),
                )
        else:
            assert isinstance(schedule, ReleaseClaim)
            proposal = attrs.evolve(unclaimed(nxt, wake=schedule.wake), transition_id=shared)
            for _ in range(times):
                await self.same(
                    "commit_unclaimed",
                    lambda _, b: b.transitions.commit_unclaimed(owner, expected, proposal, evs),
                )

    async def claim(self) -> None:
        policy = ClaimPolicy(
            limit=self.rng.choice([1, 1, 2, 3, 6]),
            orphan_ttl=timedelta(seconds=self.rng.choice([0, 10, 90])),
            max_claim_attempts=self.rng.choice([1, 2, 4]),
            preference=self.rng.choice([None, ClaimClass.READY, ClaimClass.EXPIRED]),
            now=self.rng.choice([None, self.clock(), self.when()]),
        )
        await self.same("claim_due", lambda _, b: b.runs.claim_due(policy))

    async def claim_operation(self) -> None:
        if self.labels.last and self.rng.random() < 0.6:
            key = self.rng.choice(sorted(self.labels.last))
            owner = next(o for o in OWNERS if repr(o) == key[0])
            run_id = key[1]
        else:
            owner, run_id = self.owner(), self.rng.choice(RUN_IDS)
        label = self.label_for(owner, run_id)
        now = self.rng.choice([None, self.clock(), self.when()])
        kind = self.rng.choice(["refresh", "release", "abandon", "abandon", "retry"])
        if kind == "refresh":
            await self.same(
                "refresh_claim",
                lambda s, b: b.runs.refresh_claim(owner, run_id, self.labels.real(s, label), now),
            )
        elif kind == "release":
            await self.same(
                "release_claim",
                lambda s, b: b.runs.release_claim(owner, run_id, self.labels.real(s, label), now),
            )
        elif kind == "retry":
            await self.same(
                "retry_poisoned_run", lambda _, b: b.runs.retry_poisoned_run(owner, run_id, now)
            )
        else:
            found = await self.stored(owner, run_id)
            base = self.clock() if now is None else now
            policy = AbandonPolicy(
                expected_checkpoint_seq=(found.checkpoint_seq if found else 1)
                - self.rng.choice([0, 0, 0, 1]),
                retry_at=base + timedelta(seconds=self.rng.choice([-1, 0, 5])),
                max_claim_abandons=self.rng.choice([1, 2]),
                non_poisoning=self.rng.random() < 0.3,
                backoff=self.rng.choice(
                    [None, Backoff(base=timedelta(seconds=2), cap=timedelta(seconds=5))]
                ),
                now=now,
            )
            tokens = [self.labels.real(side, label) for side in (0, 1)]
            await self.same("abandon_claim", _abandon(owner, run_id, tokens, policy))

    async def abandon_chain(self) -> None:
        """Abandon one leased run again and again (re-claiming between): ends poisoned."""
        if not self.labels.last:
            return
        key = self.rng.choice(sorted(self.labels.last))
        owner = next(o for o in OWNERS if repr(o) == key[0])
        run_id, most = key[1], self.rng.choice([1, 2])
        for _ in range(most + 1):
            found = await self.stored(owner, run_id)
            label = self.labels.last.get(key, "no-such-token")
            policy = AbandonPolicy(
                expected_checkpoint_seq=found.checkpoint_seq if found else 1,
                retry_at=self.clock(),
                max_claim_abandons=most,
                now=self.clock(),
            )
            tokens = [self.labels.real(side, label) for side in (0, 1)]
            await self.same("abandon_claim", _abandon(owner, run_id, tokens, policy))
            again = ClaimPolicy(limit=4, orphan_ttl=timedelta(minutes=5), max_claim_attempts=5)
            await self.same("claim_due", lambda _, b: b.runs.claim_due(again))  # noqa: B023

    async def read(self) -> None:
        owner, run_id = self.owner(), self.rng.choice(RUN_IDS)
        kind = self.rng.choice(["inspect", "runs", "events", "event", "latest", "graphs"])
        if kind == "inspect":
            await self.same("inspect_run", lambda _, b: b.runs.inspect_run(owner, run_id))
        elif kind == "runs":
            query = RunListQuery(
                limit=self.rng.choice([1, 2, 5]),
                graph_hash=self.rng.choice([None, graph_ref(graph_document("g", 1)).graph_hash]),
                statuses=self.rng.choice(
                    [None, frozenset({RunStatus.RUNNING}), frozenset(TERMINAL)]
                ),
            )
            scope = self.scope()
            for _ in range(4):
                page = await self.sides[0].runs.list_runs(scope, query)
                await self.same("list_runs", lambda _, b: b.runs.list_runs(scope, query))  # noqa: B023
                if not page.has_more:
                    break
                query = attrs.evolve(query, before=page.next_before)
        elif kind == "events":
            query_e = EventListQuery(
                after_seq=self.rng.choice([0, 1, 3]), limit=self.rng.choice([1, 3, 100])
            )
            await self.same(
                "list_events", lambda _, b: b.events.list_events(owner, run_id, query_e)
            )
        elif kind == "event":
            seq = self.rng.choice([1, 2, 4, 9])
            await self.same("fetch_event", lambda _, b: b.events.fetch_event(owner, run_id, seq))
        elif kind == "latest":
            await self.same(
                "fetch_latest_event", lambda _, b: b.events.fetch_latest_event(owner, run_id)
            )
        else:
            await self.same(
                "fetch_latest_graph_ref",
                lambda _, b: b.graphs.fetch_latest_graph_ref(owner, "g"),
            )
            await self.same(
                "list_graph_versions",
                lambda _, b: b.graphs.list_graph_versions(owner, "g", GraphListQuery(limit=1)),
            )

    async def publish(self) -> None:
        owner = self.owner()
        document = graph_document("g", self.rng.choice([0, 1]))
        ref = graph_ref(document)
        await self.same("save_graph", lambda _, b: b.graphs.save_graph(owner, ref, document))
        await self.same("fetch_graph", lambda _, b: b.graphs.fetch_graph(owner, ref))

    async def tick(self) -> None:
        self.clock.advance(timedelta(seconds=self.rng.choice([1, 4, 15, 95])))

    async def drive(self, steps: int) -> None:
        for owner in OWNERS:
            for variant in (0, 1):
                document = graph_document("g", variant)
                ref = graph_ref(document)
                await self.same(
                    "save_graph",
                    lambda _, b: b.graphs.save_graph(owner, ref, document),  # noqa: B023
                )
            self.clock.advance(timedelta(microseconds=1))
        weighted: list[tuple[Callable[[], Awaitable[None]], int]] = [
            (self.initialize, 4),
            (self.commit, 6),
            (self.claim, 5),
            (self.claim_operation, 5),
            (self.abandon_chain, 1),
            (self.read, 5),
            (self.publish, 1),
            (self.tick, 3),
        ]
        menu = [op for op, weight in weighted for _ in range(weight)]
        for self.step in range(steps):
            await self.rng.choice(menu)()
        for owner in OWNERS:
            for run_id in RUN_IDS:
                await self.same(
                    "final inspect",
                    lambda _, b: b.runs.inspect_run(owner, run_id),  # noqa: B023
                )
                everything = EventListQuery(limit=500)
                await self.same(
                    "final events",
                    lambda _, b: b.events.list_events(owner, run_id, everything),  # noqa: B023
                )


def _abandon(
    owner: OwnerScope, run_id: str, tokens: list[str], policy: AbandonPolicy
) -> Callable[[int, Backend], Awaitable[object]]:
    """An abandon call for ``same``: each side sends its own token for the label."""
    return lambda side, b: b.runs.abandon_claim(owner, run_id, tokens[side], policy)


def _kind(answer: Any) -> str:
    if isinstance(answer, ClaimBatch):
        return "ClaimBatch+" + ("poisoned" if answer.poisoned else "lease" if answer.leases else "")
    if isinstance(answer, RunInfo):
        return "RunInfo"
    if isinstance(answer, tuple):
        return "raised"
    return type(answer).__name__


async def _differential(url: str, schema: str, seed: int, steps: int) -> set[str]:
    clock = ManualClock(T0)
    subject = PostgresBackend(url, schema=schema, clock=clock, pool_max_size=2)
    await subject.open()
    try:
        twin = Differential(random.Random(seed), subject, clock)
        await twin.drive(steps)
        return twin.kinds
    finally:
        await subject.close()


@pytest.mark.parametrize("seed", range(40))
def test_same_answers_as_the_reference(
    pg_url: str, schema_name: Callable[[str], str], seed: int
) -> None:
    asyncio.run(_differential(pg_url, schema_name("diff"), seed, 150))


def test_the_stream_reaches_every_kind_of_answer(
    pg_url: str, schema_name: Callable[[str], str]
) -> None:
    """A guard against a vacuous comparison: the streams produce the interesting answers."""
    seen: set[str] = set()
    for seed in (100, 101):
        seen |= asyncio.run(_differential(pg_url, schema_name("cover"), seed, 400))
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
        "raised",
    }
    assert wanted <= seen, f"never produced: {sorted(wanted - seen)}"
