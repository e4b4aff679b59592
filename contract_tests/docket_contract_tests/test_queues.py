"""Named queues and their limits (the optional ``queues`` feature): QUEUE-LIMIT,
QUEUE-SLOT-RETURN, QUEUE-FILTER, QUEUE-PRIORITY, QUEUE-FIFO, QUEUE-RATE, QUEUE-PAUSE,
QUEUE-CONFIG, QUEUE-START, QUEUE-BAD-INPUT, QUEUE-FUSED (a store offering the optional
fused claim, ``SlotClaims``, only).

A backend that declares ``queues`` keeps each run's queue and priority beside it
(``initialize``), honours ``ClaimPolicy.queues`` and priority order in ``claim_due``, and
has ``backend.queues``, a :class:`~docket.contract.protocols.QueueStore`: the queues'
configs and the slot ledger that enforces their limits, by the rules of
:mod:`docket.contract.queues` (docs/contract.md#queues). Without the feature the cases
check nothing.

Times: ``acquire_slots`` and ``renew_slots`` take the kit's ``now``; ``set_queue``,
``release_slots`` and ``list_queues`` read the backend's own clock. The cases that count
tokens or expiries therefore inject times an hour past ``t0``, where the backend's clock
(at most minutes past ``t0`` during a case) refills nothing and expires nothing, and the
cases that reconfigure a rate give it a period of a day, so the seconds a case takes
refill far less than a token.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import attrs

from docket.contract import (
    At,
    ClaimBatch,
    ClaimPolicy,
    Feature,
    InvalidTransition,
    Lease,
    NotFound,
    ReleaseClaim,
    Terminal,
)
from docket.contract.protocols import ClaimedStarts, QueueStore, SlotClaims
from docket.records import (
    DEFAULT_QUEUE,
    MAX_PRIORITY,
    MIN_PRIORITY,
    TENANTLESS,
    CheckpointType,
    GraphRef,
    OwnerScope,
    QueueConfig,
    QueueStatus,
    RateLimit,
    Run,
    RunStatus,
    Tenant,
)
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    init_proposal,
    junk,
    new_run,
    save_graph,
    successor,
)
from docket_contract_tests.kit import Kit, invariant

DAY = timedelta(days=1)
US = timedelta(microseconds=1)
#: Claims in these cases may take a run again and again (released, expired).
ATTEMPTS = 1_000_000
#: QUEUE-LIMIT: the queue's execution limit and the claimers racing for it each round.
LIMIT = 3
CLAIMERS = 8
#: How far past ``t0`` the token and expiry cases inject their times (module docstring).
AHEAD = timedelta(hours=1)


def _store(k: Kit) -> QueueStore | None:
    if not k.declares(Feature.QUEUES):
        return None
    store = getattr(k.b, "queues", None)
    k.check(
        isinstance(store, QueueStore),
        f"the backend declares queues but backend.queues is {store!r}, not a QueueStore",
    )
    assert isinstance(store, QueueStore)
    return store


async def _start(
    k: Kit,
    owner: OwnerScope,
    ref: GraphRef,
    *,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    wake_at: datetime | None = None,
    run_id: str | None = None,
) -> Run:
    """Initialize a run in ``queue`` at ``priority``; it must succeed."""
    run = new_run(run_id or k.fresh("run"), ref, k.t0)
    proposal = attrs.evolve(init_proposal(run, wake_at or k.t0), queue=queue, priority=priority)
    result = await k.b.transitions.initialize(owner, proposal, [])
    k.eq(k.isa(result, Run, f"initialize in queue {queue!r}"), run, "initialize returns the run")
    return run


async def _claim(
    k: Kit,
    now: datetime,
    queues: Iterable[str] | None,
    *,
    limit: int = 1,
    ttl: timedelta = DAY,
) -> ClaimBatch:
    """``claim_due`` with ``ClaimPolicy.queues`` (``None``: every queue)."""
    policy = ClaimPolicy(
        limit=limit,
        orphan_ttl=ttl,
        max_claim_attempts=ATTEMPTS,
        now=now,
        queues=None if queues is None else frozenset(queues),
    )
    batch = k.isa(await k.b.runs.claim_due(policy), ClaimBatch, "claim_due")
    k.check(
        len(batch.leases) + len(batch.poisoned) <= limit,
        f"claim_due returned {len(batch.leases)} leases for a limit of {limit}",
    )
    ids = [(lease.owner, lease.run_id) for lease in batch.leases]
    k.check(len(ids) == len(set(ids)), f"one claim_due leased a run twice: {ids}")
    return batch


async def _claimed_ids(
    k: Kit, now: datetime, queues: Iterable[str] | None, limit: int = 1
) -> list[str]:
    return [lease.run_id for lease in (await _claim(k, now, queues, limit=limit)).leases]


async def _status(k: Kit, store: QueueStore, name: str) -> QueueStatus:
    listed = [s for s in await store.list_queues() if s.config.name == name]
    k.eq(len(listed), 1, f"list_queues rows for queue {name!r}")
    return k.isa(listed[0], QueueStatus, f"list_queues row of {name!r}")


async def _running(k: Kit, store: QueueStore, name: str) -> int:
    return (await _status(k, store, name)).running


async def _grants(
    k: Kit,
    store: QueueStore,
    name: str,
    holders: Sequence[str],
    now: datetime | None,
    want: int,
    what: str,
    ttl: timedelta = DAY,
) -> None:
    got = await store.acquire_slots(name, holders, ttl, now=now)
    k.eq(got, want, f"{what}: acquire_slots({len(holders)} holders) granted")


# -- QUEUE-LIMIT ------------------------------------------------------------------------------


@dataclass
class _Round:
    """What one round's claimers saw (one event loop: no lock needed)."""

    held: int = 0  # slots held now, as the claimers know it (granted and not yet released)
    claims: int = 0  # leases held now
    granted: int = 0
    asked: int = 0
    everyone_asked: asyncio.Event = field(default_factory=asyncio.Event)


async def _claimer(
    k: Kit,
    store: QueueStore,
    queue: str,
    round_: int,
    index: int,
    waiting: dict[str, Run],
    seen: _Round,
) -> None:
    """Take a slot, claim in the queue with it, hold until every claimer has asked for a
    slot, end the claim (commit or release) and give the slot back."""
    now = k.at(10 * (round_ + 1))
    holder = f"{k.ns}-r{round_}-c{index}"
    got = await store.acquire_slots(queue, [holder], DAY, now=now)
    k.check(got in (0, 1), f"round {round_}: acquire_slots of one holder granted {got!r}")
    if got:
        seen.held += 1
        seen.granted += 1
        k.check(
            seen.held <= LIMIT,
            f"round {round_}: {seen.held} slots held at once in a queue limited to {LIMIT}",
        )
    seen.asked += 1
    if seen.asked == CLAIMERS:
        seen.everyone_asked.set()
    if not got:
        return
    try:
        batch = await _claim(k, now, [queue])
        k.eq(len(batch.leases), 1, f"round {round_}: a claim with a slot, {CLAIMERS} runs due")
        lease = batch.leases[0]
        k.check(
            lease.run_id in waiting,
            f"round {round_}: claim_due(queues={{{queue!r}}}) leased {lease.run_id!r}, "
            "not a run of that queue",
        )
        seen.claims += 1
        k.check(seen.claims <= LIMIT, f"round {round_}: {seen.claims} claims held at once")
        await seen.everyone_asked.wait()
        seen.claims -= 1
        await _end(k, lease, waiting, now, finish=(round_ + index) % 2 == 0)
    finally:
        seen.held -= 1
        await store.release_slots(queue, [holder])


async def _end(k: Kit, lease: Lease, waiting: dict[str, Run], now: datetime, finish: bool) -> None:
    """End a claim: finish the run (it leaves the queue) or release it (due again)."""
    if not finish:
        await k.b.runs.release_claim(lease.owner, lease.run_id, lease.claim_token, now)
        return
    run = waiting.pop(lease.run_id)
    done = successor(run, now, status=RunStatus.DONE)
    await commit_claimed_ok(
        k,
        lease.owner,
        claimed(
            done,
            lease.claim_token,
            schedule=ReleaseClaim(Terminal()),
            checkpoint_type=CheckpointType.RUN_COMPLETED,
        ),
    )


@invariant("QUEUE-LIMIT")
async def test_racing_claimers_never_exceed_the_execution_limit(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    queue = k.name("limited")
    await store.set_queue(QueueConfig(name=queue, execution_limit=LIMIT))
    ref = await save_graph(k, TENANTLESS)
    # always due in another queue: a claim that ignores its queues may take it
    await _start(k, TENANTLESS, ref, queue=k.name("other"))
    waiting: dict[str, Run] = {}
    for round_ in range(k.rounds):
        now = k.at(10 * (round_ + 1))
        while len(waiting) < CLAIMERS:  # a full queue: every slot finds a run to claim
            run = await _start(k, TENANTLESS, ref, queue=queue, wake_at=now)
            waiting[run.id] = run
        seen = _Round()

        def claimer(
            index: int, seen: _Round = seen, r: int = round_
        ) -> Callable[[], Awaitable[None]]:
            return lambda: _claimer(k, store, queue, r, index, waiting, seen)

        await k.gather_barrier(*(claimer(i) for i in range(CLAIMERS)))
        # no holder lets go before every claimer has asked: the round reaches the limit
        k.eq(seen.granted, LIMIT, f"round {round_}: slots granted to {CLAIMERS} racing claimers")
        k.eq(await _running(k, store, queue), 0, f"round {round_}: slots held after the round")


# -- QUEUE-SLOT-RETURN ------------------------------------------------------------------------


@invariant("QUEUE-SLOT-RETURN")
async def test_slots_come_back_on_release_and_strictly_after_expiry(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    queue = k.name("one")
    await store.set_queue(QueueConfig(name=queue, execution_limit=1))
    base = k.t0 + AHEAD

    def at(seconds: float) -> datetime:
        return base + timedelta(seconds=seconds)

    # released: free at once
    await _grants(k, store, queue, ["h1"], at(0), 1, "the first slot")
    await _grants(k, store, queue, ["h2"], at(0), 0, "a second slot while h1 holds it")
    k.eq(await _running(k, store, queue), 1, "running while h1 holds the slot")
    await store.release_slots(queue, ["h1", "nobody"])  # an unknown holder is ignored
    k.eq(await _running(k, store, queue), 0, "running after h1's release")
    await _grants(k, store, queue, ["h2"], at(0), 1, "the slot right after h1's release")
    await store.release_slots(queue, ["h2"])
    # not released: held at expires_at, free strictly after it
    await _grants(k, store, queue, ["h3"], at(0), 1, "a slot for 10 s", ttl=timedelta(seconds=10))
    await _grants(k, store, queue, ["h4"], at(10), 0, "at h3's expires_at (it still counts)")
    await _grants(k, store, queue, ["h4"], at(10) + US, 1, "1 us after h3's expires_at")
    await store.release_slots(queue, ["h4"])
    # renewed: the expiry moves to now + ttl
    ten = timedelta(seconds=10)
    await _grants(k, store, queue, ["h5"], at(100), 1, "a slot for 10 s", ttl=ten)
    k.eq(await store.renew_slots(queue, ["h5"], ten, now=at(105)), 1, "renew of a held slot")
    await _grants(k, store, queue, ["h6"], at(112), 0, "after the old expiry, before the new")
    await _grants(k, store, queue, ["h6"], at(115), 0, "at the renewed expires_at")
    await _grants(k, store, queue, ["h6"], at(115) + US, 1, "1 us after the renewed expiry")
    await store.release_slots(queue, ["h6"])
    # an expired slot is not revived by a renew, nor is one never held
    await _grants(k, store, queue, ["h7"], at(200), 1, "a slot for 1 s", ttl=timedelta(seconds=1))
    k.eq(await store.renew_slots(queue, ["h7"], DAY, now=at(202)), 0, "renew of an expired slot")
    k.eq(await store.renew_slots(queue, ["never"], DAY, now=at(202)), 0, "renew of no slot")
    await _grants(k, store, queue, ["h8"], at(202), 1, "the slot h7's renew did not revive")
    k.eq(await store.renew_slots(queue, ["h7", "h8"], DAY, now=at(203)), 1, "renew of h7 and h8")
    # h3 and h7 expired at injected times still ahead of the backend's clock, which
    # list_queues reads: released, they are gone whether or not a grant swept them
    await store.release_slots(queue, ["h3", "h7", "h8"])
    k.eq(await _running(k, store, queue), 0, "running after every release")


# -- QUEUE-FILTER -----------------------------------------------------------------------------


@invariant("QUEUE-FILTER")
async def test_a_claim_takes_only_runs_of_its_queues(docket_kit: Kit) -> None:
    k = docket_kit
    if _store(k) is None:
        return
    qa, qb, qc = k.name("qa"), k.name("qb"), k.name("qc")
    ref = await save_graph(k, TENANTLESS)
    tenant = k.tenant("t")
    tref = await save_graph(k, tenant)
    # ready class: due runs of three queues, the other queues' due first
    b1 = await _start(k, TENANTLESS, ref, queue=qb, wake_at=k.at(1))
    c1 = await _start(k, tenant, tref, queue=qc, wake_at=k.at(2))
    d1 = await _start(k, TENANTLESS, ref, wake_at=k.at(3))  # the default queue
    a1 = await _start(k, tenant, tref, queue=qa, wake_at=k.at(4))
    a2 = await _start(k, TENANTLESS, ref, queue=qa, wake_at=k.at(5))
    got = await _claimed_ids(k, k.at(10), [qa], limit=5)
    k.eq(sorted(got), sorted([a1.id, a2.id]), f"claim_due(queues={{{qa!r}}}, limit=5)")
    k.eq(await _claimed_ids(k, k.at(10), [qa], limit=5), [], "the queue is drained")
    got = await _claimed_ids(k, k.at(10), [qb, DEFAULT_QUEUE], limit=5)
    k.eq(sorted(got), sorted([b1.id, d1.id]), "claim_due(queues={qb, default})")
    # expired class: b1's claim (taken at t+10, ttl 1 day) expires; qa's claims do too
    after = k.at(10) + DAY + US
    got = await _claimed_ids(k, after, [qc], limit=5)
    k.eq(got, [c1.id], "claim_due(queues={qc}) with qa's and qb's claims expired")
    got = await _claimed_ids(k, after, [qa], limit=5)
    k.eq(sorted(got), sorted([a1.id, a2.id]), "claim_due(queues={qa}) of expired claims")
    k.eq(await _claimed_ids(k, after, [qa], limit=5), [], "qa's expired claims were retaken")
    got = await _claimed_ids(k, after, None, limit=5)
    k.eq(sorted(got), sorted([b1.id, d1.id]), "claim_due(queues=None) takes every queue's")


# -- QUEUE-PRIORITY and QUEUE-FIFO ------------------------------------------------------------


@invariant("QUEUE-PRIORITY")
async def test_a_higher_priority_is_claimed_first(docket_kit: Kit) -> None:
    k = docket_kit
    if _store(k) is None:
        return
    queue = k.name("prio")
    ref = await save_graph(k, TENANTLESS)
    tenant = k.tenant("t")
    tref = await save_graph(k, tenant)
    # the later due, the higher the priority: due-time order is the reverse of the rule's
    low = await _start(k, TENANTLESS, ref, queue=queue, priority=MIN_PRIORITY, wake_at=k.at(1))
    zero = await _start(k, TENANTLESS, ref, queue=queue, wake_at=k.at(2))
    five = await _start(k, TENANTLESS, ref, queue=queue, priority=5, wake_at=k.at(3))
    fifty = await _start(k, tenant, tref, queue=queue, priority=50, wake_at=k.at(4))
    top = await _start(k, TENANTLESS, ref, queue=queue, priority=MAX_PRIORITY, wake_at=k.at(5))
    later = await _start(k, TENANTLESS, ref, queue=queue, priority=MAX_PRIORITY, wake_at=k.at(60))
    got = [await _claimed_ids(k, k.at(10), [queue]) for _ in range(6)]
    want = [[top.id], [fifty.id], [five.id], [zero.id], [low.id], []]
    k.eq(got, want, "one-run claims at t+10, in order (the run due at t+60 is not due)")
    k.eq(await _claimed_ids(k, k.at(60), [queue]), [later.id], "the last, once due")
    # a batch takes the highest priorities, not the oldest
    batch = [
        await _start(k, TENANTLESS, ref, queue=queue, priority=p, wake_at=k.at(100 + i))
        for i, p in enumerate([-5, 1, -1, 7, 3])
    ]
    taken = await _claimed_ids(k, k.at(200), [queue], limit=3)
    k.eq(
        sorted(taken),
        sorted(r.id for r in batch if r is not batch[0] and r is not batch[2]),
        "a claim of 3 of 5 due runs takes priorities 7, 3 and 1",
    )
    # across classes: an expired claim of a higher priority goes before a ready run
    other = k.name("prio2")
    held = await _start(k, TENANTLESS, ref, queue=other, priority=10, wake_at=k.at(300))
    k.eq(await _claimed_ids(k, k.at(300), [other]), [held.id], "the priority-10 run's claim")
    ready = await _start(k, TENANTLESS, ref, queue=other, wake_at=k.at(301))
    expired = k.at(300) + DAY + US
    k.eq(
        await _claimed_ids(k, expired, [other]),
        [held.id],
        "a one-run claim: the expired priority-10 claim before the ready priority-0 run",
    )
    k.eq(await _claimed_ids(k, expired, [other]), [ready.id], "then the ready run")


@invariant("QUEUE-FIFO")
async def test_equal_priorities_are_claimed_by_due_time(docket_kit: Kit) -> None:
    k = docket_kit
    if _store(k) is None:
        return
    queue = k.name("fifo")
    ref = await save_graph(k, TENANTLESS)
    # started in another order than they are due, with ids that sort another way again
    third = await _start(
        k, TENANTLESS, ref, queue=queue, priority=7, wake_at=k.at(3), run_id=k.name("a-third")
    )
    first = await _start(
        k, TENANTLESS, ref, queue=queue, priority=7, wake_at=k.at(1), run_id=k.name("z-first")
    )
    second = await _start(
        k, TENANTLESS, ref, queue=queue, priority=7, wake_at=k.at(2), run_id=k.name("m-second")
    )
    lower = await _start(
        k, TENANTLESS, ref, queue=queue, priority=6, wake_at=k.at(0), run_id=k.name("b-lower")
    )
    got = [await _claimed_ids(k, k.at(10), [queue]) for _ in range(4)]
    k.eq(got, [[first.id], [second.id], [third.id], [lower.id]], "one-run claims, in order")
    # a released run is due again at its release: behind a run due before that
    again = k.name("fifo-again")
    x = await _start(k, TENANTLESS, ref, queue=again, wake_at=k.at(1))
    y = await _start(k, TENANTLESS, ref, queue=again, wake_at=k.at(2))
    (lease,) = (await _claim(k, k.at(10), [again])).leases
    k.eq(lease.run_id, x.id, "the older of two equal-priority runs")
    await k.b.runs.release_claim(lease.owner, x.id, lease.claim_token, k.at(11))
    order = [await _claimed_ids(k, k.at(12), [again]) for _ in range(2)]
    k.eq(order, [[y.id], [x.id]], "after x's release at t+11: y (due t+2), then x")


# -- QUEUE-RATE -------------------------------------------------------------------------------


@invariant("QUEUE-RATE")
async def test_a_rate_is_a_bucket_that_refills_evenly_up_to_its_size(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    queue = k.name("rate")
    rate = RateLimit(count=4, period=timedelta(seconds=4))  # a token a second
    await store.set_queue(QueueConfig(name=queue, rate=rate))
    base = k.t0 + AHEAD
    n = iter(range(1_000_000))

    def holders(count: int) -> list[str]:
        return [f"h{next(n)}" for _ in range(count)]

    def at(seconds: float) -> datetime:
        return base + timedelta(seconds=seconds)

    async def grants(count: int, now: datetime, want: int, what: str) -> list[str]:
        asked = holders(count)
        await _grants(k, store, queue, asked, now, want, what)
        return asked[:want]

    await grants(5, at(0), 4, "a full bucket: a burst of count")
    await grants(1, at(0), 0, "an empty bucket")
    await grants(1, at(0.5), 0, "half a token")
    await grants(2, at(1), 1, "one second: one token")
    await grants(1, at(1) + US, 0, "a microsecond later")
    await grants(3, at(3.5), 2, "2.5 seconds later: two whole tokens")
    held = await grants(6, at(100), 4, "a long quiet period: never more than count")
    # a refund puts the tokens of unused slots back; a plain release does not
    await store.release_slots(queue, held[:3], refund=True)
    await grants(5, at(100), 3, "after refunding three slots")
    await store.release_slots(queue, held[3:])
    await grants(1, at(100), 0, "after a release without refund")
    # tokens are taken for the slots granted, not for those asked
    both = k.name("rate-limit")
    slow = RateLimit(count=3, period=timedelta(seconds=1000))
    await store.set_queue(QueueConfig(name=both, execution_limit=2, rate=slow))
    first = holders(3)
    k.eq(await store.acquire_slots(both, first, DAY, now=base), 2, "limit 2, three tokens")
    await store.release_slots(both, first[:2])
    second = holders(3)
    k.eq(await store.acquire_slots(both, second, DAY, now=base), 1, "the third token")
    await store.release_slots(both, second[:1])
    k.eq(await store.acquire_slots(both, holders(1), DAY, now=base), 0, "no token left")


# -- QUEUE-PAUSE ------------------------------------------------------------------------------


@invariant("QUEUE-PAUSE")
async def test_a_paused_queue_grants_nothing_until_resumed(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    queue = k.name("paused")
    await store.set_queue(QueueConfig(name=queue, paused=True))
    await _grants(k, store, queue, ["p1"], None, 0, "a paused queue with no limit")
    await store.set_queue(QueueConfig(name=queue))
    await _grants(k, store, queue, ["p1", "p2", "p3"], None, 3, "resumed, unlimited")
    # with a limit: paused while two slots are held, which stay held
    await store.set_queue(QueueConfig(name=queue, execution_limit=5, paused=True))
    await _grants(k, store, queue, ["p4"], None, 0, "paused, under its limit")
    await store.release_slots(queue, ["p3"])
    k.eq(await _running(k, store, queue), 2, "slots held through the pause")
    await store.set_queue(QueueConfig(name=queue, execution_limit=5))
    await _grants(k, store, queue, ["p4", "p5", "p6", "p7"], None, 3, "resumed: 5 - 2 held")
    # "default" can be paused too
    await store.set_queue(QueueConfig(name=DEFAULT_QUEUE, paused=True))
    await _grants(k, store, DEFAULT_QUEUE, ["d1"], None, 0, "the default queue, paused")
    await store.set_queue(QueueConfig(name=DEFAULT_QUEUE))
    await _grants(k, store, DEFAULT_QUEUE, ["d1"], None, 1, "the default queue, resumed")


# -- QUEUE-CONFIG -----------------------------------------------------------------------------


@invariant("QUEUE-CONFIG")
async def test_queue_configs_round_trip_and_keep_the_ledger(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    k.eq(await store.fetch_queue(DEFAULT_QUEUE), QueueConfig(name=DEFAULT_QUEUE), "'default'")
    k.isa(await store.fetch_queue(k.name("unknown")), NotFound, "fetch_queue of an unknown queue")
    k.eq(await store.acquire_slots(k.name("unknown"), ["u"], DAY), 0, "an unknown queue grants")
    k.isa(await store.fetch_queue(k.name("unknown")), NotFound, "acquire created no queue")
    full = QueueConfig(
        name=k.name("b-full"),
        execution_limit=2,
        rate=RateLimit(count=3, period=timedelta(days=1)),
        paused=False,
    )
    k.eq(await store.set_queue(full), full, "set_queue returns the config")
    k.eq(await store.fetch_queue(full.name), full, "fetch_queue after set_queue")
    odd = QueueConfig(name=k.name("a:odd.name_-1"), rate=RateLimit(count=1, period=US * 1000))
    await store.set_queue(odd)
    k.eq(await store.fetch_queue(odd.name), odd, "a 1 ms period and a name of every kind")
    # held slots and taken tokens survive a reconfigure
    limited = full.name
    await _grants(k, store, limited, ["s1", "s2"], None, 2, "limit 2, three tokens")
    await store.set_queue(attrs.evolve(full, execution_limit=1))
    k.eq(await _running(k, store, limited), 2, "a lower limit keeps the held slots")
    await store.release_slots(limited, ["s1"])
    await _grants(k, store, limited, ["s3"], None, 0, "held slots at the lower limit")
    await store.set_queue(attrs.evolve(full, execution_limit=3))
    await _grants(k, store, limited, ["s3", "s4"], None, 1, "the one token left")
    await store.set_queue(attrs.evolve(full, rate=RateLimit(count=5, period=timedelta(days=1))))
    await _grants(k, store, limited, ["s5"], None, 0, "a changed rate keeps its (no) tokens")
    await store.set_queue(attrs.evolve(full, execution_limit=None, rate=None))
    await _grants(k, store, limited, ["s5"], None, 1, "no limits: no bucket either")
    small = RateLimit(count=2, period=timedelta(days=1))
    await store.set_queue(attrs.evolve(full, execution_limit=None, rate=small))
    await _grants(k, store, limited, ["s6", "s7", "s8"], None, 2, "a new rate starts full")
    await store.set_queue(attrs.evolve(full, execution_limit=None, rate=None))
    await store.set_queue(attrs.evolve(full, execution_limit=None, rate=full.rate))
    await store.set_queue(attrs.evolve(full, execution_limit=None, rate=small))
    await _grants(k, store, limited, ["s9", "s10", "s11"], None, 2, "a changed rate, capped")
    # list_queues: every configured queue and "default", by name, with running and depth
    ref = await save_graph(k, TENANTLESS)
    due = [await _start(k, TENANTLESS, ref, queue=odd.name) for _ in range(3)]
    await _start(k, TENANTLESS, ref, queue=odd.name, wake_at=k.t0 + DAY)
    await _start(k, TENANTLESS, ref)
    k.eq(len(await _claimed_ids(k, k.t0, [odd.name])), 1, "a claim in the queue")
    await _grants(k, store, odd.name, ["o1"], None, 1, "one token")
    listed = await store.list_queues()
    names = [s.config.name for s in listed]
    k.eq(names, sorted([odd.name, limited, DEFAULT_QUEUE]), "list_queues: the queues, by name")
    k.eq(
        list(await store.queue_configs()),
        [s.config for s in listed],
        "queue_configs: the configs list_queues reports, in its order",
    )
    by_name = {s.config.name: s for s in listed}
    k.eq(
        by_name[odd.name],
        QueueStatus(config=odd, running=1, depth=len(due) - 1),
        "the odd queue: one slot held, two runs due and unclaimed (one claimed, one later)",
    )
    k.eq(
        by_name[DEFAULT_QUEUE],
        QueueStatus(config=QueueConfig(name=DEFAULT_QUEUE), running=0, depth=1),
        "the default queue, never configured",
    )
    k.eq(
        (by_name[limited].config, by_name[limited].running),
        (attrs.evolve(full, execution_limit=None, rate=small), 7),
        "the reconfigured queue and its held slots",
    )
    # queue_configs, the claimer's cheap read, sees a pause at once
    paused = attrs.evolve(odd, paused=True)
    await store.set_queue(paused)
    k.eq(
        [c for c in await store.queue_configs() if c.name == odd.name],
        [paused],
        "queue_configs after a pause",
    )


# -- QUEUE-START ------------------------------------------------------------------------------


@invariant("QUEUE-START")
async def test_a_run_starts_in_its_queue_at_its_priority(docket_kit: Kit) -> None:
    k = docket_kit
    if _store(k) is None:
        return
    queue = k.name("start")
    for owner in (TENANTLESS, Tenant(k.name("t"))):
        ref = await save_graph(k, owner)
        plain = await _start(k, owner, ref)
        info = await k.info(owner, plain.id)
        k.eq((info.queue, info.priority), (DEFAULT_QUEUE, 0), f"{owner}: a plain start")
        run = await _start(k, owner, ref, queue=queue, priority=-7)
        info = await k.info(owner, run.id)
        k.eq((info.queue, info.priority), (queue, -7), f"{owner}: inspect_run after initialize")
        k.eq(await k.b.runs.fetch_run(owner, run.id), run, "the run document carries neither")
        # kept through a claim, a commit and a release
        (lease,) = (await _claim(k, k.t0, [queue])).leases
        k.eq(lease.run_id, run.id, f"{owner}: a claim in the run's queue")
        step = successor(run, k.at(1))
        await commit_claimed_ok(
            k, owner, claimed(step, lease.claim_token, schedule=ReleaseClaim(At(k.at(2))))
        )
        info = await k.info(owner, run.id)
        k.eq((info.queue, info.priority), (queue, -7), f"{owner}: after a commit")
        k.eq(await _claimed_ids(k, k.at(2), [queue]), [run.id], f"{owner}: due in its queue again")
        starts = k.b.transitions
        if isinstance(starts, ClaimedStarts):
            held = new_run(k.fresh("held"), ref, k.t0)
            proposal = attrs.evolve(init_proposal(held, k.t0), queue=queue, priority=MAX_PRIORITY)
            result = await starts.initialize_claimed(owner, proposal, [], f"tok-{held.id}")
            k.eq(k.isa(result, Run, "initialize_claimed"), held, "initialize_claimed")
            info = await k.info(owner, held.id)
            k.eq((info.queue, info.priority), (queue, MAX_PRIORITY), "a claimed start")
    # a bad queue or priority is InvalidTransition and writes nothing
    ref = await save_graph(k, TENANTLESS, label="bad")
    bad: list[tuple[str, object, object]] = [
        ("an empty queue name", "", 0),
        ("a queue name with a space", "no spaces", 0),
        ("a 65-character queue name", "q" * 65, 0),
        ("a queue name that is not text", 7, 0),
        ("priority above the range", queue, MAX_PRIORITY + 1),
        ("priority below the range", queue, MIN_PRIORITY - 1),
        ("a boolean priority", queue, True),
        ("a fractional priority", queue, 1.5),
    ]
    for what, name, priority in bad:
        run = new_run(k.fresh("bad"), ref, k.t0)
        proposal = attrs.evolve(init_proposal(run, k.t0), queue=junk(name), priority=junk(priority))
        result = await k.b.transitions.initialize(TENANTLESS, proposal, [])
        k.isa(result, InvalidTransition, f"initialize with {what}")
        await k.absent(TENANTLESS, run.id, f"initialize with {what}")
        starts = k.b.transitions
        if isinstance(starts, ClaimedStarts):
            result = await starts.initialize_claimed(TENANTLESS, proposal, [], "tok-bad")
            k.isa(result, InvalidTransition, f"initialize_claimed with {what}")
            await k.absent(TENANTLESS, run.id, f"initialize_claimed with {what}")


# -- QUEUE-BAD-INPUT --------------------------------------------------------------------------


@invariant("QUEUE-BAD-INPUT")
async def test_malformed_queue_calls_raise_and_change_nothing(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    queue = k.name("strict")
    config = QueueConfig(
        name=queue, execution_limit=2, rate=RateLimit(count=2, period=timedelta(days=1))
    )
    await store.set_queue(config)
    bad_names: list[object] = ["", "no spaces", "q" * 65, "é", None, 7]
    for name in map(junk, bad_names):
        await _refused(k, f"fetch_queue({name!r})", store.fetch_queue, name)
        await _refused(k, f"acquire_slots({name!r})", store.acquire_slots, name, ["h"], DAY)
        await _refused(k, f"renew_slots({name!r})", store.renew_slots, name, ["h"], DAY)
        await _refused(k, f"release_slots({name!r})", store.release_slots, name, ["h"])
    bad_holders: list[tuple[str, object]] = [
        ("a duplicate holder", ["h1", "h2", "h1"]),
        ("an empty holder", ["h1", ""]),
        ("a holder that is not text", ["h1", 7]),
        ("a string instead of a list", "h1"),
        ("a holder of 256 bytes", ["h1", "x" * 256]),
    ]
    await _refused(k, "acquire_slots: no holders", store.acquire_slots, queue, [], DAY)
    for what, holders in bad_holders:  # renewing or releasing no holders is allowed
        await _refused(k, f"acquire_slots: {what}", store.acquire_slots, queue, junk(holders), DAY)
        await _refused(k, f"renew_slots: {what}", store.renew_slots, queue, junk(holders), DAY)
        await _refused(k, f"release_slots: {what}", store.release_slots, queue, junk(holders))
    for ttl in map(junk, (timedelta(seconds=-1), -US, 5, None)):
        await _refused(k, f"acquire_slots(ttl={ttl!r})", store.acquire_slots, queue, ["h1"], ttl)
        await _refused(k, f"renew_slots(ttl={ttl!r})", store.renew_slots, queue, ["h1"], ttl)
    bad_configs: list[tuple[str, object]] = [
        ("a limit of 0", attrs.evolve(config, execution_limit=0)),
        ("a negative limit", attrs.evolve(config, execution_limit=-1)),
        ("a boolean limit", attrs.evolve(config, execution_limit=True)),
        ("a rate of 0", attrs.evolve(config, rate=RateLimit(count=0, period=DAY))),
        ("a zero period", attrs.evolve(config, rate=RateLimit(count=1, period=timedelta(0)))),
        ("a period in seconds", attrs.evolve(config, rate=RateLimit(count=1, period=junk(60)))),
        ("paused that is not a bool", attrs.evolve(config, paused=junk("yes"))),
        ("a bad name", attrs.evolve(config, name="no spaces")),
        ("not a QueueConfig", {"name": k.name("dict")}),
    ]
    for what, bad in bad_configs:
        await _refused(k, f"set_queue: {what}", store.set_queue, junk(bad))
    # nothing changed: the config, no queue created, no slot held, both tokens there
    k.eq(await store.fetch_queue(queue), config, "the config after the refused calls")
    names = [s.config.name for s in await store.list_queues()]
    k.eq(names, sorted([DEFAULT_QUEUE, queue]), "list_queues after the refused calls")
    k.eq(await _running(k, store, queue), 0, "slots held after the refused calls")
    await _grants(k, store, queue, ["h1", "h2", "h3"], None, 2, "the limit and both tokens")
    # claim_due's queues: a non-empty frozenset of queue names
    policy = ClaimPolicy(limit=1, orphan_ttl=DAY, max_claim_attempts=3, now=k.t0)
    for what, queues in (("an empty set", frozenset()), ("a bad name", frozenset({"no spaces"}))):
        claim = attrs.evolve(policy, queues=queues)
        await _refused(k, f"claim_due(queues=<{what}>)", k.b.runs.claim_due, claim)


# -- QUEUE-FUSED ------------------------------------------------------------------------------


@invariant("QUEUE-FUSED")
async def test_the_fused_claim_holds_a_slot_per_lease_within_the_grant(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None or not isinstance(store, SlotClaims):
        return  # the fused claim is optional: the runtime composes the three calls instead
    fused: SlotClaims = store
    queue, plain, loose = k.name("fq"), k.name("fp"), k.name("fl")
    await store.set_queue(
        QueueConfig(name=queue, execution_limit=2, rate=RateLimit(count=3, period=DAY))
    )
    await store.set_queue(QueueConfig(name=loose, rate=RateLimit(count=2, period=DAY)))
    ref = await save_graph(k, TENANTLESS)
    runs = [await _start(k, TENANTLESS, ref, queue=queue, wake_at=k.at(i)) for i in (1, 2, 3)]
    other = await _start(k, TENANTLESS, ref, queue=plain, wake_at=k.at(0))
    base = k.t0 + AHEAD
    policy = ClaimPolicy(limit=1, orphan_ttl=DAY, max_claim_attempts=ATTEMPTS, now=base)

    async def claim(
        name: str, holders: list[str], release: list[str], what: str
    ) -> list[str] | None:
        got = await fused.claim_with_slots(policy, name, holders, release)
        if got is None:
            return None
        return [lease.run_id for lease in k.isa(got, ClaimBatch, what).leases]

    got = await claim(queue, ["a", "b", "c"], [], "three slots asked, a limit of 2")
    k.eq(got, [runs[0].id, runs[1].id], "the first fused claim: 2 (the limit), in claim order")
    k.eq(await _running(k, store, queue), 2, "running after the first fused claim")
    k.eq(await store.renew_slots(queue, ["c"], DAY, now=base), 0, "renew of the unused holder")
    k.eq(await store.renew_slots(queue, ["a", "b"], DAY, now=base), 2, "renew of the leased")
    await k.raises_async(
        ValueError,
        functools.partial(fused.claim_with_slots, policy, queue, ["a"], ["a"]),
        "claim_with_slots: a holder both released and requested",
    )
    got = await claim(queue, ["d", "e"], ["a"], "a's release carried")
    k.eq(got, [runs[2].id], "with a's release carried: one slot under the limit, one run")
    k.eq(await _running(k, store, queue), 2, "running after the carried release and claim")
    # three leases took the three tokens: nothing is granted, the release still happens
    k.eq(await claim(queue, ["f"], ["b"], "no token left"), None, "a grant with no token")
    k.eq(await _running(k, store, queue), 1, "running after a release carried by no grant")
    # granted but unused: no slot held, no token taken
    k.eq(await claim(loose, ["x", "y"], [], "a queue with no run"), [], "a claim of no run")
    k.eq(await _running(k, store, loose), 0, "slots held for no lease")
    await _grants(k, store, loose, ["p", "q"], base, 2, "both tokens after an unused grant")
    k.eq(await claim(k.name("nope"), ["z"], [], "an unknown queue"), None, "an unknown queue")
    k.eq(await _claimed_ids(k, base, [plain], limit=5), [other.id], "other queues untouched")


async def _refused(
    k: Kit, what: str, call: Callable[..., Awaitable[object]], *args: object
) -> None:
    """``call(*args)`` raises ``ValueError``."""
    await k.raises_async(ValueError, functools.partial(call, *args), what)
