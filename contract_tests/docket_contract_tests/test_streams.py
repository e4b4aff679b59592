"""The live feed (the optional ``streams`` feature): STREAM-NOTICE-AFTER-COMMIT,
STREAM-NOTICE-REFUSED, STREAM-SCOPE, STREAM-EMISSION-ORDER, STREAM-EMISSION-BOUND,
STREAM-SUBSCRIPTION-CLOSE, STREAM-BAD-INPUT.

A backend that declares ``streams`` has ``backend.feed``, an
:class:`~docket.contract.EventFeed` (docs/contract.md#feed). After every transition that
wrote, each subscription whose scope admits the run's tenant receives a
:class:`~docket.records.CommitNotice` naming the run, its graph and the seqs written, and
the store already shows those events when the notice arrives. A refused transition
announces nothing the store does not have. Emissions reach the subscriptions of their
tenant in the order one publisher sent them, equal to what was sent after
``bounded_emission``. The kit opens every subscription before it acts (items published
before ``subscribe`` returned are not owed) and waits for what it is owed for at most
``WAIT`` seconds, reading as items arrive. Without the feature the cases check nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import attrs
import pytest

from docket.contract import (
    EventFeed,
    EventListQuery,
    External,
    Feature,
    FeedSubscription,
    ReleaseClaim,
)
from docket.contract.protocols import ClaimedStarts
from docket.records import (
    MAX_EMISSION_BYTES,
    SYSTEM,
    TENANTLESS,
    CommitNotice,
    Emission,
    EventPage,
    FeedItem,
    OwnerScope,
    Run,
    RunStatus,
    Scope,
    Tenant,
    bounded_emission,
    tenant_id_of,
)
from docket.values import JSONValue, canonical_json
from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    init_proposal,
    new_run,
    save_graph,
    seed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant

OWNERS = pytest.mark.parametrize(
    "owner", [TENANTLESS, Tenant("acme")], ids=["tenantless", "tenant"]
)
#: How long a case waits for an item the feed owes it (a loaded machine, a real broker).
WAIT = 20.0
#: One ``get`` while waiting; short, so a case notices what arrived without delay.
POLL = 0.5
#: How soon ``get`` on a closed subscription must return (well under ``WAIT``).
PROMPT = 5.0

Check = Callable[[FeedItem], Awaitable[None]]


def _feed(k: Kit) -> EventFeed | None:
    if not k.declares(Feature.STREAMS):
        return None
    feed = getattr(k.b, "feed", None)
    k.check(
        isinstance(feed, EventFeed),
        f"the backend declares streams but backend.feed is {feed!r}, not an EventFeed",
    )
    assert isinstance(feed, EventFeed)
    return feed


@contextlib.asynccontextmanager
async def _subscribed(
    k: Kit, feed: EventFeed, *scopes: Scope
) -> AsyncIterator[list[FeedSubscription]]:
    """Subscriptions of ``scopes`` (opened in order), closed when the block ends."""
    subs: list[FeedSubscription] = []
    try:
        for scope in scopes:
            sub = await feed.subscribe(scope)
            k.check(isinstance(sub, FeedSubscription), f"subscribe({scope}) returned {sub!r}")
            subs.append(sub)
        yield subs
    finally:
        for sub in subs:
            await sub.close()


async def _until(
    k: Kit,
    sub: FeedSubscription,
    done: Callable[[list[FeedItem]], bool],
    what: str,
    check: Check | None = None,
) -> list[FeedItem]:
    """Read ``sub`` until ``done(items)``, checking each item as it arrives."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    got: list[FeedItem] = []
    while not done(got):
        left = deadline - loop.time()
        if left <= 0:
            k.fail(f"{what}: not received within {WAIT:.0f}s; received {got!r}")
        batch = await sub.get(min(left, POLL))
        for item in batch:
            k.isa(item, CommitNotice | Emission, f"{what}: a feed item")  # type: ignore[arg-type]
            if check is not None:
                await check(item)
            got.append(item)
    return got


def _notices(items: Sequence[FeedItem], run_id: str) -> list[CommitNotice]:
    return [i for i in items if isinstance(i, CommitNotice) and i.run_id == run_id]


def _emissions(items: Sequence[FeedItem], run_id: str) -> list[Emission]:
    return [i for i in items if isinstance(i, Emission) and i.run_id == run_id]


def _covers(run_id: str, first: int, last: int) -> Callable[[list[FeedItem]], bool]:
    def done(items: list[FeedItem]) -> bool:
        return any(n.first_seq <= first and n.last_seq >= last for n in _notices(items, run_id))

    return done


def _readable(k: Kit, owner: OwnerScope, run: Run, what: str) -> Check:
    """A check that every notice of ``run`` names it rightly and that the store already
    has the events it announces (read the moment the notice arrives)."""

    async def check(item: FeedItem) -> None:
        if not isinstance(item, CommitNotice) or item.run_id != run.id:
            return
        k.eq(
            (item.tenant_id, item.graph_id),
            (tenant_id_of(owner), run.graph_id),
            f"{what}: the notice's tenant and graph",
        )
        k.check(
            1 <= item.first_seq <= item.last_seq,
            f"{what}: a notice announces seqs first..last, got {item!r}",
        )
        page = await k.b.events.list_events(
            owner, run.id, EventListQuery(after_seq=item.last_seq - 1, limit=1)
        )
        shown = [e.seq for e in page.events] if isinstance(page, EventPage) else page
        k.check(
            shown == [item.last_seq],
            f"{what}: notice {item!r} arrived but the store shows {shown!r} at its last_seq "
            "(announced before the commit was readable, or events it never wrote)",
        )

    return check


async def _announced(
    k: Kit,
    subs: Sequence[FeedSubscription],
    owner: OwnerScope,
    run: Run,
    first: int,
    commit: Callable[[], Awaitable[object]],
    what: str,
) -> None:
    """Commit (``run`` is the proposed value) while every subscription reads; each must
    receive a notice covering seqs ``first..run.event_seq``, readable on arrival."""
    check = _readable(k, owner, run, what)
    done = _covers(run.id, first, run.event_seq)
    readers = [
        asyncio.ensure_future(_until(k, sub, done, f"{what}: the notice of {run.id!r}", check))
        for sub in subs
    ]
    try:
        result = await commit()
        k.isa(result, Run, what)
        await asyncio.gather(*readers)
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)


def _emission(run_id: str, k: Kit, seq: int, data: JSONValue, kind: str = "token") -> Emission:
    return Emission(
        tenant_id=None,
        run_id=run_id,
        node_id="writer",
        task_id=f"{run_id}:writer:1",
        attempt=1,
        seq=seq,
        kind=kind,
        data=data,
        at=k.at(seq, us=seq),
    )


def _as_received(owner: OwnerScope, emission: Emission) -> Emission:
    """What a subscriber gets for ``emission`` published as ``owner``."""
    return bounded_emission(attrs.evolve(emission, tenant_id=tenant_id_of(owner)))


@invariant("STREAM-NOTICE-AFTER-COMMIT")
@OWNERS
async def test_each_commit_is_noticed_once_readable(docket_kit: Kit, owner: OwnerScope) -> None:
    k = docket_kit
    feed = _feed(k)
    if feed is None:
        return
    async with _subscribed(k, feed, owner, SYSTEM) as subs:
        ref = await save_graph(k, owner)
        run = new_run(k.fresh("run"), ref, k.t0, event_seq=2)
        await _announced(
            k,
            subs,
            owner,
            run,
            1,
            lambda: k.b.transitions.initialize(
                owner, init_proposal(run, k.t0), events_for(run, k.t0, [1, 2])
            ),
            "initialize",
        )
        lease = await k.claim_one(k.t0, run.id)
        parked = successor(run, k.at(1), new_events=2, status=RunStatus.WAITING)
        await _announced(
            k,
            subs,
            owner,
            parked,
            3,
            lambda: k.b.transitions.commit_claimed(
                owner,
                claimed(parked, lease.claim_token, schedule=ReleaseClaim(External())),
                events_for(parked, k.at(1), [3, 4]),
            ),
            "commit_claimed",
        )
        woken = successor(parked, k.at(2), new_events=1, status=RunStatus.RUNNING)
        await _announced(
            k,
            subs,
            owner,
            woken,
            5,
            lambda: k.b.transitions.commit_unclaimed(
                owner, parked.checkpoint_seq, unclaimed(woken), events_for(woken, k.at(2), [5])
            ),
            "commit_unclaimed",
        )
        starts = k.b.transitions
        if isinstance(starts, ClaimedStarts):
            held = new_run(k.fresh("run"), ref, k.t0, event_seq=1)
            await _announced(
                k,
                subs,
                owner,
                held,
                1,
                lambda: starts.initialize_claimed(
                    owner, init_proposal(held, k.t0), events_for(held, k.t0, [1]), "tok-feed"
                ),
                "initialize_claimed",
            )


@invariant("STREAM-NOTICE-REFUSED")
@OWNERS
async def test_a_refused_transition_announces_nothing_unwritten(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    feed = _feed(k)
    if feed is None:
        return
    async with _subscribed(k, feed, owner) as (sub,):
        run = await seed(k, owner, events=1)
        lease = await k.claim_one(k.t0, run.id)
        check = _readable(k, owner, run, "after refused transitions")
        # each refusal proposes seqs 2..4; the store keeps event_seq 1
        ahead = successor(run, k.at(1), new_events=3)
        evs = events_for(ahead, k.at(1), [2, 3, 4])
        tr = k.b.transitions
        refusals: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("wrong claim token", lambda: tr.commit_claimed(owner, claimed(ahead, "tok-x"), evs)),
            (
                "stale checkpoint",
                lambda: tr.commit_unclaimed(owner, run.checkpoint_seq + 1, unclaimed(ahead), evs),
            ),
            (
                "run already exists",
                lambda: tr.initialize(
                    owner,
                    init_proposal(attrs.evolve(run, event_seq=3), k.t0),
                    events_for(run, k.t0, [1, 2, 3]),
                ),
            ),
            (
                "skipped event seq",
                lambda: tr.commit_claimed(owner, claimed(ahead, lease.claim_token), evs[1:]),
            ),
        ]
        for what, refused in refusals:
            k.check(not isinstance(await refused(), Run), f"{what}: the transition was accepted")
        # a commit that does write (seq 2 only) marks where the refusals' notices would be
        marker = successor(run, k.at(2), new_events=1)
        written = await tr.commit_claimed(
            owner, claimed(marker, lease.claim_token), events_for(marker, k.at(2), [2])
        )
        k.isa(written, Run, "the commit after the refusals")
        await _until(k, sub, _covers(run.id, 2, 2), "the notice of the commit that wrote", check)
        # anything already delivered behind it is read too
        for item in await sub.get(0):
            await check(item)


@invariant("STREAM-SCOPE")
async def test_a_subscription_sees_only_its_scope(docket_kit: Kit) -> None:
    k = docket_kit
    feed = _feed(k)
    if feed is None:
        return
    owners: list[OwnerScope] = [k.tenant("a"), k.tenant("b"), TENANTLESS]
    async with _subscribed(k, feed, *owners, SYSTEM) as subs:
        runs = [await seed(k, owner, events=1) for owner in owners]
        sent = []
        for owner, run in zip(owners, runs, strict=True):
            emission = _emission(run.id, k, 1, {"from": str(owner)})
            await feed.publish(owner, emission)
            sent.append(_as_received(owner, emission))
        markers = [await seed(k, owner, events=1) for owner in owners]

        def seen(indexes: Sequence[int]) -> Callable[[list[FeedItem]], bool]:
            def done(items: list[FeedItem]) -> bool:
                return all(
                    _notices(items, runs[i].id)
                    and _notices(items, markers[i].id)
                    and _emissions(items, runs[i].id)
                    for i in indexes
                )

            return done

        for index, (owner, sub) in enumerate(zip(owners, subs, strict=False)):
            items = await _until(k, sub, seen([index]), f"{owner}'s own items")
            items.extend(await sub.get(0))
            leaked = [
                i
                for i in items
                if i.tenant_id != tenant_id_of(owner)
                and not (isinstance(i, CommitNotice) and i.run_id is None)
            ]
            k.eq(leaked, [], f"a {owner} subscription received another scope's items")
            k.eq(_emissions(items, runs[index].id), [sent[index]], f"{owner}'s emission")
        everything = await _until(k, subs[-1], seen(range(3)), "System's items of every scope")
        for index, owner in enumerate(owners):
            notices = _notices(everything, runs[index].id)
            k.check(
                all(n.tenant_id == tenant_id_of(owner) for n in notices),
                f"System: the notices of {owner}'s run name its tenant: {notices!r}",
            )
            got = _emissions(everything, runs[index].id)
            k.eq(got, [sent[index]], f"System: {owner}'s emission")


@invariant("STREAM-EMISSION-ORDER")
@OWNERS
async def test_emissions_arrive_in_order_as_sent(docket_kit: Kit, owner: OwnerScope) -> None:
    k = docket_kit
    feed = _feed(k)
    if feed is None:
        return
    async with _subscribed(k, feed, owner, SYSTEM) as subs:
        run = await seed(k, owner)
        sent = [
            _emission(
                run.id,
                k,
                i,
                {"i": i, "text": "tök " * i, "nested": [i, {"none": None, "q": i / 4}]},
            )
            for i in range(1, 101)
        ]
        for emission in sent:
            await feed.publish(owner, emission)
        want = [_as_received(owner, e) for e in sent]
        for scope, sub in zip((owner, SYSTEM), subs, strict=True):
            items = await _until(
                k, sub, lambda got: len(_emissions(got, run.id)) >= 100, f"{scope}: 100 emissions"
            )
            k.eq(_emissions(items, run.id), want, f"{scope}: the emissions, in publish order")


@invariant("STREAM-EMISSION-BOUND")
@OWNERS
async def test_an_emission_up_to_the_bound_arrives_whole_a_larger_one_as_overflow(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    feed = _feed(k)
    if feed is None:
        return
    async with _subscribed(k, feed, owner) as (sub,):
        run = await seed(k, owner)
        at_bound = _emission(run.id, k, 1, "x" * (MAX_EMISSION_BYTES - 2))  # "..." quoted
        over = _emission(run.id, k, 2, "y" * (MAX_EMISSION_BYTES - 1))
        huge = _emission(run.id, k, 3, ["z" * 1024] * 1024)
        assert len(canonical_json(at_bound.data)) == MAX_EMISSION_BYTES
        for emission in (at_bound, over, huge):
            await feed.publish(owner, emission)
        items = await _until(
            k, sub, lambda got: len(_emissions(got, run.id)) >= 3, "three emissions"
        )
        got = _emissions(items, run.id)
        k.eq(got[0], _as_received(owner, at_bound), "an emission of exactly the bound")
        for index, sent in ((1, over), (2, huge)):
            size = len(canonical_json(sent.data))
            k.eq(
                got[index].data,
                {"overflow": True, "bytes": size},
                f"an emission of {size} bytes arrives as the overflow marker",
            )
            k.eq(got[index], _as_received(owner, sent), "the overflowed emission's other fields")


@invariant("STREAM-SUBSCRIPTION-CLOSE")
@OWNERS
async def test_a_closed_subscription_returns_nothing_at_once(
    docket_kit: Kit, owner: OwnerScope
) -> None:
    k = docket_kit
    feed = _feed(k)
    if feed is None:
        return
    async with _subscribed(k, feed, owner, owner) as (closed, witness):
        await closed.close()
        await closed.close()  # idempotent
        run = await seed(k, owner, events=1)
        await feed.publish(owner, _emission(run.id, k, 1, "after close"))
        await _until(
            k,
            witness,
            lambda got: bool(_notices(got, run.id) and _emissions(got, run.id)),
            "the open subscription's items",
        )
        loop = asyncio.get_running_loop()
        started = loop.time()
        got = await closed.get(WAIT)
        elapsed = loop.time() - started
        k.eq(list(got), [], "get on a closed subscription")
        k.check(elapsed < PROMPT, f"get on a closed subscription waited {elapsed:.1f}s")


@invariant("STREAM-BAD-INPUT")
async def test_publish_as_system_and_a_negative_timeout_are_refused(docket_kit: Kit) -> None:
    k = docket_kit
    feed = _feed(k)
    if feed is None:
        return
    owner = k.tenant("a")
    async with _subscribed(k, feed, SYSTEM) as (sub,):
        run = await seed(k, owner)
        await k.raises_async(
            ValueError,
            lambda: feed.publish(SYSTEM, _emission(run.id, k, 1, "as system")),  # type: ignore[arg-type]
            "publish(System, ...)",
        )
        await k.raises_async(ValueError, lambda: sub.get(-1), "get(-1)")
        await k.raises_async(ValueError, lambda: sub.get(-0.001), "get(-0.001)")
        # the refused publish delivered nothing: a later one arrives alone
        await feed.publish(owner, _emission(run.id, k, 2, "as owner"))
        items = await _until(k, sub, lambda got: bool(_emissions(got, run.id)), "the emission")
        k.eq([e.seq for e in _emissions(items, run.id)], [2], "emissions received")
