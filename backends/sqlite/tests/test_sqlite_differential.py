"""SQLite against the reference: the same random operations, the same answers.

Each case drives a ``MemoryBackend`` and a ``SQLiteBackend`` with one seeded stream of
operations — transitions with every schedule, claims with every policy shape, refresh,
release, abandon, retry, reads and listings, good and bad inputs — under one manual
clock, and requires every answer to be equal. Claim tokens are random by design, so
they are compared through labels: the n-th token either backend mints is ``T<n>``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
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
from docket_sqlite import SQLiteBackend

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
from docket.records import (
    SYSTEM,
    TENANTLESS,
    OwnerScope,
    Run,
    RunInfo,
    RunStatus,
    Scope,
    Tenant,
)

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)
OWNERS: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b")]
RUN_IDS = ["r1", "r2", "r3", "r4", "r5"]
STATUS_OF: dict[type, list[RunStatus]] = {
    Immediate: [RunStatus.RUNNING],
    At: [RunStatus.RUNNING],
    External: [RunStatus.WAITING],
    Terminal: [RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED],
}


class Tokens:
    """Maps each backend's claim tokens to shared labels, in the order they appear."""

    def __init__(self) -> None:
        self.labels: list[dict[str, str]] = [{}, {}]
        self.real: list[dict[str, str]] = [{}, {}]
        self.latest: dict[tuple[OwnerScope, str], str] = {}  # the last lease of each run

    def learn(self, side: int, batch: object) -> object:
        if not isinstance(batch, ClaimBatch):
            return batch
        leases = []
        for lease in batch.leases:
            label = f"T{len(self.labels[side])}"
            self.labels[side][lease.claim_token] = label
            self.real[side][label] = lease.claim_token
            self.latest[(lease.owner, lease.run_id)] = label
            leases.append(attrs.evolve(lease, claim_token=label))
        return attrs.evolve(batch, leases=tuple(leases))

    def token(self, side: int, label: str) -> str:
        return self.real[side].get(label, label)  # an unknown label is a bogus token


class Twin:
    """Both backends and the operation generator of one case."""

    def __init__(self, rng: random.Random, sqlite: SQLiteBackend, clock: ManualClock) -> None:
        self.rng = rng
        self.clock = clock
        self.sides: list[Backend] = [MemoryBackend(clock=clock), sqlite]
        self.tokens = Tokens()
        self.step = 0
        self.observe: Callable[[object], None] | None = None  # sees each reference answer

    async def both(self, what: str, call: Callable[[int, Backend], Awaitable[object]]) -> None:
        answers: list[object] = []
        for side, backend in enumerate(self.sides):
            try:
                answer: object = await call(side, backend)
            except (ValueError, TypeError) as exc:
                answer = ("raised", type(exc).__name__)
            answers.append(self.tokens.learn(side, answer))
        if self.observe is not None:
            self.observe(answers[0])
        assert answers[0] == answers[1], (
            f"step {self.step} {what}:\n  memory {answers[0]!r}\n  sqlite {answers[1]!r}"
        )

    async def same(self, what: str, store: str, method: str, *args: object) -> None:
        """``both`` for a call whose arguments are the same on either side."""
        await self.both(what, lambda _, b: getattr(getattr(b, store), method)(*args))

    async def abandon(
        self, owner: OwnerScope, run_id: str, label: str, policy: AbandonPolicy
    ) -> None:
        await self.both(
            "abandon_claim",
            lambda s, b: b.runs.abandon_claim(owner, run_id, self.tokens.token(s, label), policy),
        )

    def now(self) -> datetime:
        return self.clock()

    def pick_owner(self) -> OwnerScope:
        return self.rng.choice(OWNERS)

    def pick_scope(self) -> Scope:
        return self.rng.choice([SYSTEM, *OWNERS])

    def label(self, owner: OwnerScope, run_id: str) -> str:
        latest = self.tokens.latest.get((owner, run_id))
        if latest is not None and self.rng.random() < 0.6:
            return latest
        issued = len(self.tokens.labels[0])
        if issued and self.rng.random() < 0.85:
            return f"T{self.rng.randrange(issued)}"
        return "bogus-token"

    def moment(self) -> datetime:
        return self.now() + timedelta(seconds=self.rng.choice([-30, -1, 0, 0, 1, 5, 45]))

    def schedule(self, claimed_commit: bool) -> tuple[Schedule, RunStatus]:
        if claimed_commit and self.rng.random() < 0.3:
            return RetainClaim(), RunStatus.RUNNING
        wakes: list[Wake] = [Immediate(), At(self.moment()), External(), Terminal()]
        wake = self.rng.choice(wakes)
        return ReleaseClaim(wake), self.rng.choice(STATUS_OF[type(wake)])

    async def stored(self, owner: OwnerScope, run_id: str) -> Run | None:
        found = await self.sides[0].runs.fetch_run(owner, run_id)
        return found if isinstance(found, Run) else None

    # -- operations ------------------------------------------------------------------------

    async def op_initialize(self) -> None:
        owner, run_id = self.pick_owner(), self.rng.choice(RUN_IDS)
        variant = self.rng.choice([0, 0, 0, 1, 9])  # 9 is never published
        ref = graph_ref(graph_document("g", variant))
        events = self.rng.choice([0, 0, 1, 3])
        run = new_run(run_id, ref, self.now() - timedelta(seconds=self.rng.randrange(3)))
        run = attrs.evolve(run, event_seq=events)
        proposal = init_proposal(run, self.moment())
        evs = events_for(run, self.now(), range(1, events + 1))
        await self.both("initialize", lambda _, b: b.transitions.initialize(owner, proposal, evs))
        if self.rng.random() < 0.2:  # an ambiguous initialize, sent again
            await self.both(
                "initialize again", lambda _, b: b.transitions.initialize(owner, proposal, evs)
            )

    async def op_commit(self) -> None:
        owner, run_id = self.pick_owner(), self.rng.choice(RUN_IDS)
        run = await self.stored(owner, run_id)
        if run is None:
            run = new_run(run_id, graph_ref(graph_document("g")), T0)
        with_claim = self.rng.random() < 0.6
        schedule, status = self.schedule(with_claim)
        new_events = self.rng.choice([0, 1, 2])
        nxt = successor(run, self.now(), new_events=new_events, status=status)
        resend = self.rng.random() < 0.2 and run.event_seq > 0
        seqs = list(range(run.event_seq + 1, nxt.event_seq + 1))
        if resend:
            seqs = [run.event_seq, *seqs]
        evs = events_for(nxt, self.now(), seqs)
        if self.rng.random() < 0.1 and evs:  # a re-sent event with other content
            evs[0] = attrs.evolve(evs[0], payload={"different": True})
        expected = run.checkpoint_seq - self.rng.choice([0, 0, 0, 1])
        if with_claim:
            label = self.label(owner, run_id)
            proposals = [
                claimed(nxt, self.tokens.token(side, label), schedule=schedule, expected=expected)
                for side in (0, 1)
            ]
            shared_id = tid()
            proposals = [attrs.evolve(p, transition_id=shared_id) for p in proposals]
            for _ in range(2 if self.rng.random() < 0.2 else 1):  # maybe sent twice
                await self.both(
                    "commit_claimed",
                    lambda side, b: b.transitions.commit_claimed(owner, proposals[side], evs),
                )
        else:
            assert isinstance(schedule, ReleaseClaim)
            proposal = attrs.evolve(unclaimed(nxt, wake=schedule.wake))
            for _ in range(2 if self.rng.random() < 0.2 else 1):
                await self.both(
                    "commit_unclaimed",
                    lambda _, b: b.transitions.commit_unclaimed(owner, expected, proposal, evs),
                )

    async def op_claim(self) -> None:
        policy = ClaimPolicy(
            limit=self.rng.choice([1, 1, 2, 3, 5]),
            orphan_ttl=timedelta(seconds=self.rng.choice([0, 5, 60])),
            max_claim_attempts=self.rng.choice([1, 2, 3]),
            preference=self.rng.choice([None, ClaimClass.READY, ClaimClass.EXPIRED]),
            now=self.rng.choice([None, self.now(), self.moment()]),
        )
        await self.both("claim_due", lambda _, b: b.runs.claim_due(policy))

    async def op_claim_ops(self) -> None:
        owner, run_id = self.pick_owner(), self.rng.choice(RUN_IDS)
        if self.tokens.latest and self.rng.random() < 0.5:  # aim at a run that was leased
            owner, run_id = self.rng.choice(sorted(self.tokens.latest, key=repr))
        label = self.label(owner, run_id)
        now = self.rng.choice([None, self.now(), self.moment()])
        kind = self.rng.choice(["refresh", "release", "abandon", "retry"])
        if kind == "refresh":
            await self.both(
                "refresh_claim",
                lambda s, b: b.runs.refresh_claim(owner, run_id, self.tokens.token(s, label), now),
            )
        elif kind == "release":
            await self.both(
                "release_claim",
                lambda s, b: b.runs.release_claim(owner, run_id, self.tokens.token(s, label), now),
            )
        elif kind == "retry":
            await self.both(
                "retry_poisoned_run", lambda _, b: b.runs.retry_poisoned_run(owner, run_id, now)
            )
        else:
            run = await self.stored(owner, run_id)
            expected = run.checkpoint_seq if run is not None else 1
            base = self.now() if now is None else now
            policy = AbandonPolicy(
                expected_checkpoint_seq=expected - self.rng.choice([0, 0, 1]),
                retry_at=base + timedelta(seconds=self.rng.choice([-1, 0, 7])),
                max_claim_abandons=self.rng.choice([1, 2]),
                non_poisoning=self.rng.random() < 0.3,
                backoff=self.rng.choice(
                    [None, Backoff(base=timedelta(seconds=1), cap=timedelta(seconds=4))]
                ),
                now=now,
            )
            await self.abandon(owner, run_id, label, policy)

    async def op_abandon_chain(self) -> None:
        """Abandon a leased run, claim it again and abandon again: reaches the poison."""
        if not self.tokens.latest:
            return
        owner, run_id = self.rng.choice(sorted(self.tokens.latest, key=repr))
        max_abandons = self.rng.choice([1, 2])
        for _ in range(max_abandons + 1):
            run = await self.stored(owner, run_id)
            label = self.tokens.latest.get((owner, run_id), "bogus-token")
            policy = AbandonPolicy(
                expected_checkpoint_seq=run.checkpoint_seq if run is not None else 1,
                retry_at=self.now(),
                max_claim_abandons=max_abandons,
                now=self.now(),
            )
            await self.abandon(owner, run_id, label, policy)
            claim = ClaimPolicy(limit=5, orphan_ttl=timedelta(seconds=60), max_claim_attempts=3)
            await self.same("claim_due", "runs", "claim_due", claim)

    async def op_read(self) -> None:
        owner, run_id = self.pick_owner(), self.rng.choice(RUN_IDS)
        kind = self.rng.choice(["inspect", "list", "events", "event", "latest", "graphs"])
        if kind == "inspect":
            await self.both("inspect_run", lambda _, b: b.runs.inspect_run(owner, run_id))
        elif kind == "list":
            query = RunListQuery(
                limit=self.rng.choice([1, 2, 10]),
                graph_hash=self.rng.choice([None, graph_ref(graph_document("g", 1)).graph_hash]),
                statuses=self.rng.choice(
                    [None, frozenset({RunStatus.RUNNING}), frozenset({RunStatus.DONE})]
                ),
            )
            scope = self.pick_scope()
            for _ in range(4):  # follow the cursor a few pages
                page = await self.sides[0].runs.list_runs(scope, query)
                await self.same("list_runs", "runs", "list_runs", scope, query)
                if not page.has_more:
                    break
                query = attrs.evolve(query, before=page.next_before)
        elif kind == "events":
            events = EventListQuery(
                after_seq=self.rng.choice([0, 1, 2]), limit=self.rng.choice([1, 2, 50])
            )
            await self.same("list_events", "events", "list_events", owner, run_id, events)
        elif kind == "event":
            seq = self.rng.choice([1, 2, 3, 7])
            await self.both("fetch_event", lambda _, b: b.events.fetch_event(owner, run_id, seq))
        elif kind == "latest":
            await self.both(
                "fetch_latest_event", lambda _, b: b.events.fetch_latest_event(owner, run_id)
            )
        else:
            await self.both(
                "fetch_latest_graph_ref", lambda _, b: b.graphs.fetch_latest_graph_ref(owner, "g")
            )
            await self.both(
                "list_graph_versions",
                lambda _, b: b.graphs.list_graph_versions(owner, "g", GraphListQuery(limit=1)),
            )

    async def op_graph(self) -> None:
        owner = self.pick_owner()
        document = graph_document("g", self.rng.choice([0, 1]))
        ref = graph_ref(document)
        await self.both("save_graph", lambda _, b: b.graphs.save_graph(owner, ref, document))
        await self.both("fetch_graph", lambda _, b: b.graphs.fetch_graph(owner, ref))

    async def op_tick(self) -> None:
        self.clock.advance(timedelta(seconds=self.rng.choice([1, 3, 20, 61])))

    async def run(self, steps: int) -> None:
        for owner in OWNERS:
            for variant in (0, 1):
                document = graph_document("g", variant)
                ref = graph_ref(document)
                await self.same("save_graph", "graphs", "save_graph", owner, ref, document)
            self.clock.advance(timedelta(microseconds=1))
        ops: list[tuple[Callable[[], Awaitable[None]], int]] = [
            (self.op_initialize, 4),
            (self.op_commit, 6),
            (self.op_claim, 5),
            (self.op_claim_ops, 5),
            (self.op_abandon_chain, 1),
            (self.op_read, 5),
            (self.op_graph, 1),
            (self.op_tick, 3),
        ]
        choices = [op for op, weight in ops for _ in range(weight)]
        for self.step in range(steps):
            await self.rng.choice(choices)()
        for owner in OWNERS:  # the final states agree run by run
            for run_id in RUN_IDS:
                await self.same("final inspect", "runs", "inspect_run", owner, run_id)
                query = EventListQuery(limit=500)
                await self.same("final events", "events", "list_events", owner, run_id, query)


@pytest.mark.parametrize("seed", range(40))
def test_same_answers_as_the_reference_in_memory(seed: int) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        sqlite = SQLiteBackend(":memory:", clock=clock)
        await Twin(random.Random(seed), sqlite, clock).run(150)
        await sqlite.close()

    asyncio.run(body())


@pytest.mark.parametrize("seed", range(3))
def test_same_answers_as_the_reference_on_a_file(tmp_path: Path, seed: int) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        sqlite = SQLiteBackend(tmp_path / "twin.db", clock=clock, synchronous="NORMAL")
        await Twin(random.Random(1000 + seed), sqlite, clock).run(150)
        await sqlite.close()

    asyncio.run(body())


def test_the_generator_reaches_every_kind_of_answer() -> None:
    """Guard against a vacuous comparison: the streams produce the interesting outcomes."""
    seen: set[str] = set()

    async def body() -> None:
        for seed in range(40):
            clock = ManualClock(T0)
            sqlite = SQLiteBackend(":memory:", clock=clock)
            twin = Twin(random.Random(seed), sqlite, clock)
            twin.observe = lambda answer: seen.add(_kind(answer))
            await twin.run(150)
            await sqlite.close()

    asyncio.run(body())
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
    }
    assert wanted <= seen, f"never produced: {sorted(wanted - seen)}"


def _kind(answer: Any) -> str:
    if isinstance(answer, ClaimBatch):
        return "ClaimBatch+" + ("poisoned" if answer.poisoned else "lease" if answer.leases else "")
    if isinstance(answer, RunInfo):
        return "RunInfo"
    return type(answer).__name__
