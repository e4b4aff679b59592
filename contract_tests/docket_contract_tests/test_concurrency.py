"""Races, each released together by an ``asyncio.Barrier`` and repeated ``--docket-rounds``
times with fresh runs (the call order alternates between rounds):

CLAIM-CONCURRENT-EXCLUSIVE, TRANSITION-CONCURRENT-SAME-FENCE, TRANSITION-UNCLAIMED-RACE,
RACE-UNCLAIMED-VS-CLAIMED, RACE-INITIALIZE, RACE-COMMIT-VS-STEAL, RACE-RELEASE-VS-STEAL,
RACE-ABANDON-VS-STEAL, RACE-SAVE-GRAPH, RACE-REFRESH-VS-RETAIN.

Race strictness, decided for every backend, third-party ones included: in the
``RACE-*-VS-STEAL`` cases a ``claim_due`` racing a writer (a commit, release or abandon
of the run it wants) must lease the run whichever wins — it may not come back empty
because the writer held the row. Why: ``claim_due`` is linearizable like every other
operation, and a run that is due before and after the write is due at the claim's
linearization point; the runtime relies on it, since the release or abandon announces
the run and the worker woken by that announcement claims once — an empty answer loses
the wake-up and leaves the run until the next poll, under exactly the contention that
made it race; and a kit that let an empty answer pass could not tell a skipped row from
a lost one. Every shipped backend meets it (memory: one lock; SQLite: one writer;
PostgreSQL: a claim whose candidates are all locked waits for them, and one that took
nothing re-checks in one snapshot; Redis: one script), so a backend scanning with
``SKIP LOCKED`` must add the same re-check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from docket.contract import (
    AbandonPolicy,
    ClaimBatch,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    Conflict,
    GraphListQuery,
    Lease,
    Rescheduled,
    StaleAbandon,
    StaleCheckpoint,
    Terminal,
)
from docket.records import TENANTLESS, GraphRef, GraphVersion, Run, RunStatus
from docket_contract_tests.fixtures import (
    claimed,
    event,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    save_graph,
    seed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant

T = TypeVar("T")
DAY = timedelta(days=1)
US = timedelta(microseconds=1)


async def _race(k: Kit, round_: int, *calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run ``calls`` together (barrier); answers in the given order, start order alternating."""
    order = list(range(len(calls)))
    if round_ % 2:
        order.reverse()
    answers = await k.gather_barrier(*(calls[i] for i in order))
    out: list[Any] = [None] * len(calls)
    for position, index in enumerate(order):
        out[index] = answers[position]
    return out


def _when(k: Kit, round_: int) -> datetime:
    """A distinct, increasing time per round."""
    return k.at(10 * (round_ + 1))


async def _finish(k: Kit, run_id: str) -> None:
    """Park a round's run for good so later rounds never see it due."""
    stored = k.isa(await k.b.runs.fetch_run(TENANTLESS, run_id), Run, "fetch_run")
    done = successor(stored, stored.updated_at, status=RunStatus.CANCELLED)
    got = await k.b.transitions.commit_unclaimed(
        TENANTLESS, stored.checkpoint_seq, unclaimed(done, wake=Terminal()), []
    )
    k.isa(got, Run, "cancelling the round's run")


async def _concurrent_claims_lease_a_run_once_round(k: Kit, round_: int, ref: GraphRef) -> None:
    now = _when(k, round_)
    run = await seed(k, TENANTLESS, k.name(f"r{round_}"), wake_at=now, ref=ref)
    policy = ClaimPolicy(limit=1, orphan_ttl=DAY, max_claim_attempts=3, now=now)
    batches = await _race(k, round_, *[lambda: k.b.runs.claim_due(policy)] * 4)
    leases = [lease for b in batches for lease in k.isa(b, ClaimBatch, "claim_due").leases]
    k.eq(
        [lease.run_id for lease in leases],
        [run.id],
        f"round {round_}: four concurrent claims lease the run exactly once",
    )
    info = await k.info(TENANTLESS, run.id)
    k.eq(info.claim_attempts, 1, f"round {round_}: one attempt counted")
    await _finish(k, run.id)


@invariant("CLAIM-CONCURRENT-EXCLUSIVE")
async def test_concurrent_claims_lease_a_run_once(docket_kit: Kit) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    for round_ in range(k.rounds):
        await _concurrent_claims_lease_a_run_once_round(k, round_, ref)


async def _concurrent_batches_are_disjoint_round(k: Kit, round_: int, ref: GraphRef) -> None:
    now = _when(k, round_)
    runs = [
        await seed(k, TENANTLESS, k.name(f"r{round_}-{i}"), wake_at=now, ref=ref) for i in range(3)
    ]
    policy = ClaimPolicy(limit=2, orphan_ttl=DAY, max_claim_attempts=3, now=now)
    batches = await _race(k, round_, *[lambda: k.b.runs.claim_due(policy)] * 3)
    leased = sorted(lease.run_id for b in batches for lease in b.leases)
    k.eq(leased, sorted(r.id for r in runs), f"round {round_}: each run leased once")
    for run in runs:
        await _finish(k, run.id)


@invariant("CLAIM-CONCURRENT-EXCLUSIVE")
async def test_concurrent_batches_are_disjoint(docket_kit: Kit) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    for round_ in range(k.rounds):
        await _concurrent_batches_are_disjoint_round(k, round_, ref)


async def _claimed_run(k: Kit, round_: int, events: int = 0) -> tuple[Run, Lease]:
    now = _when(k, round_)
    run = await seed(k, TENANTLESS, k.name(f"r{round_}"), wake_at=now, events=events)
    lease = await k.claim_one(now, run.id, ttl=DAY)
    return run, lease


async def _same_fence_claimed_commits_round(k: Kit, round_: int) -> None:
    run, lease = await _claimed_run(k, round_)
    now = _when(k, round_)
    proposals = [
        (
            claimed(successor(run, now, new_events=1, input={"by": who}), lease.claim_token),
            [event(run.id, 1, now, payload={"by": who})],
        )
        for who in ("left", "right")
    ]
    results = await _race(
        k,
        round_,
        *[
            (lambda p=p, e=e: k.b.transitions.commit_claimed(TENANTLESS, p, e))
            for p, e in proposals
        ],
    )
    winners = [i for i, r in enumerate(results) if isinstance(r, Run)]
    k.eq(len(winners), 1, f"round {round_}: exactly one commit wins, got {results}")
    loser = results[1 - winners[0]]
    k.isa(loser, StaleCheckpoint, f"round {round_}: the loser loses the fence")
    won, won_events = proposals[winners[0]]
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run.id), won.run, f"round {round_}: stored run")
    k.eq(
        await k.b.events.fetch_event(TENANTLESS, run.id, 1),
        won_events[0],
        f"round {round_}: event 1 is the winner's",
    )
    await _finish(k, run.id)


@invariant("TRANSITION-CONCURRENT-SAME-FENCE")
async def test_same_fence_claimed_commits(docket_kit: Kit) -> None:
    k = docket_kit
    for round_ in range(k.rounds):
        await _same_fence_claimed_commits_round(k, round_)


async def _same_fence_unclaimed_commits_round(k: Kit, round_: int) -> None:
    now = _when(k, round_)
    run = await seed(k, TENANTLESS, k.name(f"r{round_}"), wake_at=now + DAY)
    proposals = [
        (
            unclaimed(successor(run, now, new_events=1, input={"by": who})),
            [event(run.id, 1, now, payload={"by": who})],
        )
        for who in ("left", "right")
    ]
    results = await _race(
        k,
        round_,
        *[
            (lambda p=p, e=e: k.b.transitions.commit_unclaimed(TENANTLESS, 1, p, e))
            for p, e in proposals
        ],
    )
    winners = [i for i, r in enumerate(results) if isinstance(r, Run)]
    k.eq(len(winners), 1, f"round {round_}: exactly one signal wins, got {results}")
    k.isa(results[1 - winners[0]], StaleCheckpoint, f"round {round_}: the loser is stale")
    won, won_events = proposals[winners[0]]
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run.id), won.run, f"round {round_}: run")
    k.eq(
        await k.b.events.fetch_event(TENANTLESS, run.id, 1),
        won_events[0],
        f"round {round_}: event 1",
    )
    await _finish(k, run.id)


@invariant("TRANSITION-UNCLAIMED-RACE")
async def test_same_fence_unclaimed_commits(docket_kit: Kit) -> None:
    k = docket_kit
    for round_ in range(k.rounds):
        await _same_fence_unclaimed_commits_round(k, round_)


async def _signal_races_the_holder_round(k: Kit, round_: int) -> None:
    run, lease = await _claimed_run(k, round_)
    now = _when(k, round_)
    by_holder = claimed(successor(run, now, input={"by": "holder"}), lease.claim_token)
    by_signal = unclaimed(successor(run, now, input={"by": "signal"}))
    held, signalled = await _race(
        k,
        round_,
        lambda: k.b.transitions.commit_claimed(TENANTLESS, by_holder, []),
        lambda: k.b.transitions.commit_unclaimed(TENANTLESS, 1, by_signal, []),
    )
    k.eq(
        sorted(type(r).__name__ for r in (held, signalled)),
        ["Run", "StaleCheckpoint"],
        f"round {round_}: exactly one of holder/signal commits",
    )
    stored = await k.b.runs.fetch_run(TENANTLESS, run.id)
    refresh = await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, now)
    if isinstance(held, Run):
        k.eq(stored, by_holder.run, f"round {round_}: the holder's run is stored")
        k.isa(refresh, ClaimRefreshed, f"round {round_}: the holder keeps its claim")
    else:
        k.eq(stored, by_signal.run, f"round {round_}: the signal's run is stored")
        k.isa(refresh, ClaimLost, f"round {round_}: the signal revoked the claim")
    await k.info(TENANTLESS, run.id)
    await _finish(k, run.id)


@invariant("RACE-UNCLAIMED-VS-CLAIMED")
async def test_signal_races_the_holder(docket_kit: Kit) -> None:
    k = docket_kit
    for round_ in range(k.rounds):
        await _signal_races_the_holder_round(k, round_)


async def _initialize_races_round(k: Kit, round_: int, ref: GraphRef) -> None:
    now = _when(k, round_)
    run_id = k.name(f"r{round_}")
    left = init_proposal(new_run(run_id, ref, now, input={"by": "left"}), now + DAY)
    right = init_proposal(new_run(run_id, ref, now, input={"by": "right"}), now + DAY)
    results = await _race(
        k,
        round_,
        lambda: k.b.transitions.initialize(TENANTLESS, left, []),
        lambda: k.b.transitions.initialize(TENANTLESS, right, []),
    )
    winners = [i for i, r in enumerate(results) if isinstance(r, Run)]
    k.eq(len(winners), 1, f"round {round_}: one initialize wins, got {results}")
    k.isa(results[1 - winners[0]], Conflict, f"round {round_}: the other is a conflict")
    won = (left, right)[winners[0]]
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run_id), won.run, f"round {round_}: stored")
    # the identical proposal twice at once (an ambiguous retry): both see the stored run
    same_id = k.name(f"s{round_}")
    proposal = init_proposal(new_run(same_id, ref, now), now + DAY)
    twice = await _race(
        k,
        round_,
        lambda: k.b.transitions.initialize(TENANTLESS, proposal, []),
        lambda: k.b.transitions.initialize(TENANTLESS, proposal, []),
    )
    k.eq(twice, [proposal.run, proposal.run], f"round {round_}: identical replays")


@invariant("RACE-INITIALIZE")
async def test_initialize_races(docket_kit: Kit) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    for round_ in range(k.rounds):
        await _initialize_races_round(k, round_, ref)
    runs = await k.all_runs()
    k.eq(len(runs), 2 * k.rounds, "one run per id")


async def _commit_races_a_steal_round(k: Kit, round_: int) -> None:
    now = _when(k, round_)
    run = await seed(k, TENANTLESS, k.name(f"r{round_}"), wake_at=now)
    lease = await k.claim_one(now, run.id, ttl=timedelta(0))
    steal_at = now + timedelta(seconds=1)
    policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(0), max_claim_attempts=9, now=steal_at)
    proposal = claimed(successor(run, now), lease.claim_token)
    committed, stolen = await _race(
        k,
        round_,
        lambda: k.b.transitions.commit_claimed(TENANTLESS, proposal, []),
        lambda: k.b.runs.claim_due(policy),
    )
    leases = k.isa(stolen, ClaimBatch, "claim_due").leases
    k.eq([x.run_id for x in leases], [run.id], f"round {round_}: the steal leases the run")
    steal = leases[0]
    if isinstance(committed, Run):
        k.eq(steal.checkpoint_seq, 2, f"round {round_}: committed first, stolen after")
    else:
        k.isa(committed, StaleCheckpoint, f"round {round_}: the commit lost its token")
        k.eq(steal.checkpoint_seq, 1, f"round {round_}: stolen first")
    stored = k.isa(await k.b.runs.fetch_run(TENANTLESS, run.id), Run, "fetch_run")
    k.eq(stored.checkpoint_seq, steal.checkpoint_seq, f"round {round_}: stored sequence")
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token, steal_at),
        ClaimLost,
        f"round {round_}: the old token is dead",
    )
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run.id, steal.claim_token, steal_at),
        ClaimRefreshed,
        f"round {round_}: the stealer holds the run",
    )
    await _finish(k, run.id)


@invariant("RACE-COMMIT-VS-STEAL")
async def test_commit_races_a_steal(docket_kit: Kit) -> None:
    k = docket_kit
    for round_ in range(k.rounds):
        await _commit_races_a_steal_round(k, round_)


async def _release_races_a_steal_round(k: Kit, round_: int) -> None:
    now = _when(k, round_)
    run = await seed(k, TENANTLESS, k.name(f"r{round_}"), wake_at=now)
    lease = await k.claim_one(now, run.id, ttl=timedelta(0))
    steal_at = now + timedelta(seconds=1)
    policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(0), max_claim_attempts=9, now=steal_at)
    _, stolen = await _race(
        k,
        round_,
        lambda: k.b.runs.release_claim(TENANTLESS, run.id, lease.claim_token, steal_at),
        lambda: k.b.runs.claim_due(policy),
    )
    leases = k.isa(stolen, ClaimBatch, "claim_due").leases
    k.eq([x.run_id for x in leases], [run.id], f"round {round_}: one lease either way")
    info = await k.info(TENANTLESS, run.id)
    k.eq(
        (info.claimed_at, info.wake_at, info.claim_attempts),
        (steal_at, None, 2),
        f"round {round_}: the stealer holds the run; a stale release changes nothing",
    )
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run.id, leases[0].claim_token, steal_at),
        ClaimRefreshed,
        f"round {round_}: the new token holds",
    )
    await _finish(k, run.id)


@invariant("RACE-RELEASE-VS-STEAL")
async def test_release_races_a_steal(docket_kit: Kit) -> None:
    k = docket_kit
    for round_ in range(k.rounds):
        await _release_races_a_steal_round(k, round_)


async def _abandon_races_a_steal_round(k: Kit, round_: int) -> None:
    now = _when(k, round_)
    run = await seed(k, TENANTLESS, k.name(f"r{round_}"), wake_at=now)
    lease = await k.claim_one(now, run.id, ttl=timedelta(0))
    steal_at = now + timedelta(seconds=1)
    claim = ClaimPolicy(limit=1, orphan_ttl=timedelta(0), max_claim_attempts=9, now=steal_at)
    abandon = AbandonPolicy(
        expected_checkpoint_seq=1, retry_at=steal_at, max_claim_abandons=5, now=steal_at
    )
    abandoned, stolen = await _race(
        k,
        round_,
        lambda: k.b.runs.abandon_claim(TENANTLESS, run.id, lease.claim_token, abandon),
        lambda: k.b.runs.claim_due(claim),
    )
    leases = k.isa(stolen, ClaimBatch, "claim_due").leases
    k.eq([x.run_id for x in leases], [run.id], f"round {round_}: one lease either way")
    info = await k.info(TENANTLESS, run.id)
    if isinstance(abandoned, Rescheduled):
        k.eq(
            (info.claim_abandons, info.claim_attempts),
            (1, 1),
            f"round {round_}: abandoned first (attempt handed back), then leased",
        )
    else:
        k.isa(abandoned, StaleAbandon, f"round {round_}: the abandon came too late")
        k.eq(
            (info.claim_abandons, info.claim_attempts),
            (0, 2),
            f"round {round_}: stolen first, the abandon changed nothing",
        )
    k.eq((info.claimed_at, info.wake_at), (steal_at, None), f"round {round_}: claimed")
    k.isa(
        await k.b.runs.refresh_claim(TENANTLESS, run.id, leases[0].claim_token, steal_at),
        ClaimRefreshed,
        f"round {round_}: the stealer holds the run",
    )
    await _finish(k, run.id)


@invariant("RACE-ABANDON-VS-STEAL")
async def test_abandon_races_a_steal(docket_kit: Kit) -> None:
    k = docket_kit
    for round_ in range(k.rounds):
        await _abandon_races_a_steal_round(k, round_)


async def _concurrent_saves_of_one_version_round(k: Kit, round_: int) -> None:
    document = graph_document(k.name(f"g{round_}"), round_)
    ref = graph_ref(document)
    results = await _race(
        k, round_, *[lambda: k.b.graphs.save_graph(TENANTLESS, ref, document)] * 3
    )
    versions = [k.isa(r, GraphVersion, f"round {round_}: save_graph") for r in results]
    k.eq(len(set(versions)), 1, f"round {round_}: every save answers the same version")
    page = await k.b.graphs.list_graph_versions(TENANTLESS, ref.graph_id, GraphListQuery(limit=5))
    k.eq(list(page.versions), versions[:1], f"round {round_}: one version stored")


@invariant("RACE-SAVE-GRAPH")
async def test_concurrent_saves_of_one_version(docket_kit: Kit) -> None:
    k = docket_kit
    for round_ in range(k.rounds):
        await _concurrent_saves_of_one_version_round(k, round_)


async def _refresh_races_a_retained_commit_round(k: Kit, round_: int) -> None:
    if k.subject.clock is not None:
        k.subject.clock.advance(timedelta(seconds=1))
    now = await k.b.now()
    run = await seed(k, TENANTLESS, k.name(f"r{round_}"), wake_at=now)
    lease = await k.claim_one(now, run.id, ttl=DAY)
    if k.subject.clock is not None:
        k.subject.clock.advance(timedelta(seconds=1))
    proposal = claimed(successor(run, now), lease.claim_token)
    refreshed, committed = await _race(
        k,
        round_,
        lambda: k.b.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token),
        lambda: k.b.transitions.commit_claimed(TENANTLESS, proposal, []),
    )
    k.isa(committed, Run, f"round {round_}: a refresh never fences out its holder")
    fresh = k.isa(refreshed, ClaimRefreshed, f"round {round_}: the holder may refresh")
    info = await k.info(TENANTLESS, run.id)
    k.check(
        info.claimed_at is not None
        and info.claimed_at >= fresh.claimed_at
        and info.claimed_at >= lease.claimed_at,
        f"round {round_}: claimed_at {info.claimed_at} never regresses "
        f"(refreshed to {fresh.claimed_at}, leased at {lease.claimed_at})",
    )
    await _finish(k, run.id)


@invariant("RACE-REFRESH-VS-RETAIN")
async def test_refresh_races_a_retained_commit(docket_kit: Kit) -> None:
    k = docket_kit
    for round_ in range(k.rounds):
        await _refresh_races_a_retained_commit_round(k, round_)
