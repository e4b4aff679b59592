"""Events: EVENT-CURSOR-GAPS (contiguous form), EVENT-PAGING-LIMITS, EVENT-SEQ-DISCIPLINE,
TRANSITION-EVENT-CANONICAL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from docket.contract import (
    EventConflict,
    EventListQuery,
    InvalidTransition,
    NotFound,
)
from docket.records import TENANTLESS, Event, EventPage, EventType, Run
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    event,
    events_for,
    init_proposal,
    junk,
    new_run,
    save_graph,
    seed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant


def _page(k: Kit, got: object, what: str) -> EventPage:
    return k.isa(got, EventPage, what)


@invariant("EVENT-CURSOR-GAPS")
async def test_contiguous_events_page_with_bounds(docket_kit: Kit) -> None:
    k = docket_kit
    a, b = k.tenant("a"), k.tenant("b")
    run = await seed(k, a, events=4)
    sent = events_for(run, k.t0, range(1, 5))
    latest = await k.b.events.fetch_latest_event(a, run.id)
    k.eq(latest, sent[3], "latest event is seq 4")
    p = _page(k, await k.b.events.list_events(a, run.id, EventListQuery(limit=1)), "page 1")
    k.eq(
        (list(p.events), p.next_after_seq, p.has_more),
        ([sent[0]], 1, True),
        "after 0, limit 1",
    )
    k.eq(
        (p.oldest_available_seq, p.latest_available_seq, p.latest_seq),
        (1, 4, 4),
        "bounds 1..4, latest_seq 4",
    )
    p = _page(
        k,
        await k.b.events.list_events(a, run.id, EventListQuery(after_seq=1, limit=10)),
        "page 2",
    )
    k.eq((list(p.events), p.next_after_seq, p.has_more), (sent[1:], 4, False), "after 1")
    for after in (4, 10):
        p = _page(
            k,
            await k.b.events.list_events(a, run.id, EventListQuery(after_seq=after, limit=3)),
            f"after {after}",
        )
        k.eq(
            (p.events, p.next_after_seq, p.has_more, p.latest_seq),
            ((), after, False, 4),
            f"after {after}: empty, echoing the cursor",
        )
    for seq in range(1, 5):
        k.eq(await k.b.events.fetch_event(a, run.id, seq), sent[seq - 1], f"fetch_event {seq}")
    k.isa(await k.b.events.fetch_event(a, run.id, 5), NotFound, "fetch_event past the end")
    k.isa(await k.b.events.list_events(b, run.id, EventListQuery()), NotFound, "wrong tenant")
    k.isa(await k.b.events.fetch_latest_event(b, run.id), NotFound, "wrong tenant latest")


@invariant("EVENT-CURSOR-GAPS")
async def test_run_without_events(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS, events=0)
    k.eq(await k.b.events.fetch_latest_event(TENANTLESS, run.id), None, "no latest event")
    p = _page(k, await k.b.events.list_events(TENANTLESS, run.id, EventListQuery()), "page")
    k.eq(
        (p.events, p.next_after_seq, p.has_more),
        ((), 0, False),
        "empty page",
    )
    k.eq(
        (p.oldest_available_seq, p.latest_available_seq, p.latest_seq),
        (None, None, 0),
        "null bounds, latest_seq 0",
    )
    k.isa(await k.b.events.fetch_event(TENANTLESS, run.id, 1), NotFound, "no event 1")
    k.isa(
        await k.b.events.list_events(TENANTLESS, k.name("ghost"), EventListQuery()),
        NotFound,
        "ghost run",
    )


@invariant("EVENT-PAGING-LIMITS")
async def test_paging_through_many_events(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS, events=7)
    sent = events_for(run, k.t0, range(1, 8))
    seen: list[Event] = []
    after = 0
    shapes: list[tuple[int, bool]] = []
    while True:
        p = _page(
            k,
            await k.b.events.list_events(
                TENANTLESS, run.id, EventListQuery(after_seq=after, limit=3)
            ),
            f"page after {after}",
        )
        shapes.append((len(p.events), p.has_more))
        k.eq(
            (p.oldest_available_seq, p.latest_available_seq, p.latest_seq),
            (1, 7, 7),
            "bounds of every page",
        )
        seen.extend(p.events)
        if not p.has_more:
            break
        k.eq(p.next_after_seq, p.events[-1].seq, "next_after_seq is the last seq")
        after = p.next_after_seq
    k.eq(shapes, [(3, True), (3, True), (1, False)], "pages of 3, 3, 1")
    k.eq(seen, sent, "paging yields every event once, in order")
    middle = _page(
        k,
        await k.b.events.list_events(TENANTLESS, run.id, EventListQuery(after_seq=2, limit=2)),
        "middle page",
    )
    k.eq([e.seq for e in middle.events], [3, 4], "after 2, limit 2")


BAD_EVENT_READS: dict[str, Callable[[Kit, Run], Any]] = {
    "list-limit-zero": lambda k, r: k.b.events.list_events(
        TENANTLESS, r.id, EventListQuery(limit=0)
    ),
    "list-limit-negative": lambda k, r: k.b.events.list_events(
        TENANTLESS, r.id, EventListQuery(limit=-1)
    ),
    "list-after-negative": lambda k, r: k.b.events.list_events(
        TENANTLESS, r.id, EventListQuery(after_seq=-1)
    ),
    "fetch-seq-zero": lambda k, r: k.b.events.fetch_event(TENANTLESS, r.id, 0),
    "fetch-seq-negative": lambda k, r: k.b.events.fetch_event(TENANTLESS, r.id, -2),
}


@invariant("EVENT-PAGING-LIMITS")
@pytest.mark.parametrize("case", sorted(BAD_EVENT_READS))
async def test_bad_event_reads_raise(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS, events=2)
    await k.raises_async(ValueError, lambda: BAD_EVENT_READS[case](k, run), f"{case} is misuse")


# -- sequence discipline ------------------------------------------------------------------------


INIT_SEQS: dict[str, tuple[int, list[int]]] = {
    "gap": (3, [1, 3]),
    "missing-tail": (2, [1]),
    "missing-head": (2, [2]),
    "past-event-seq": (1, [1, 2]),
    "events-without-event-seq": (0, [1]),
    "event-seq-without-events": (2, []),
}


@invariant("EVENT-SEQ-DISCIPLINE")
@pytest.mark.parametrize("case", sorted(INIT_SEQS))
async def test_initialize_publishes_exactly_one_to_event_seq(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    event_seq, seqs = INIT_SEQS[case]
    run = new_run(k.name("r"), ref, k.t0, event_seq=event_seq)
    got = await k.b.transitions.initialize(
        TENANTLESS, init_proposal(run, k.t0), events_for(run, k.t0, seqs)
    )
    k.isa(got, InvalidTransition, f"initialize with event_seq {event_seq} and seqs {seqs}")
    await k.absent(TENANTLESS, run.id, f"after a rejected initialize ({case})")


COMMIT_SEQS: dict[str, tuple[int, list[int]]] = {
    # stored event_seq is 2; (proposed event_seq, seqs sent)
    "skip": (4, [4]),
    "gap": (5, [3, 5]),
    "incomplete": (4, [3]),
    "none-sent": (3, []),
    "goes-back": (1, []),
    "past-event-seq": (3, [3, 4]),
}


@invariant("EVENT-SEQ-DISCIPLINE")
@pytest.mark.parametrize("case", sorted(COMMIT_SEQS))
async def test_commit_publishes_exactly_the_next_seqs(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS, events=2)
    lease = await k.claim_one(k.t0, run.id)
    event_seq, seqs = COMMIT_SEQS[case]
    nxt = attrs.evolve(successor(run, k.at(1)), event_seq=event_seq)
    before = await k.snapshot(TENANTLESS, run.id)
    evs = events_for(nxt, k.at(1), seqs)
    got = await k.b.transitions.commit_claimed(TENANTLESS, claimed(nxt, lease.claim_token), evs)
    k.isa(got, InvalidTransition, f"claimed commit {case}: event_seq {event_seq}, seqs {seqs}")
    await k.unchanged(TENANTLESS, run.id, before, f"claimed commit {case}")
    got = await k.b.transitions.commit_unclaimed(TENANTLESS, 1, unclaimed(nxt), evs)
    k.isa(got, InvalidTransition, f"unclaimed commit {case}")
    await k.unchanged(TENANTLESS, run.id, before, f"unclaimed commit {case}")


@invariant("EVENT-SEQ-DISCIPLINE")
async def test_resent_identical_events_are_accepted(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS, events=2)
    stored = events_for(run, k.t0, [1, 2])
    lease = await k.claim_one(k.t0, run.id)
    nxt = successor(run, k.at(1), new_events=2)
    new = events_for(nxt, k.at(1), [3, 4])
    # re-sent stored events (in any order) + the new ones, one of them twice
    batch = [new[1], stored[1], new[0], stored[0], new[1]]
    await commit_claimed_ok(k, TENANTLESS, claimed(nxt, lease.claim_token), batch)
    k.eq(list(await k.events(TENANTLESS, run.id)), stored + new, "events 1..4 stored once")
    # a run whose event_seq stays put may re-send old events and publish none
    again = successor(nxt, k.at(2))
    await commit_claimed_ok(k, TENANTLESS, claimed(again, lease.claim_token), stored[:1])
    k.eq(len(await k.events(TENANTLESS, run.id)), 4, "nothing new published")


# -- canonical event content --------------------------------------------------------------------


@invariant("TRANSITION-EVENT-CANONICAL")
async def test_stored_conflict_rejects_the_whole_commit(docket_kit: Kit) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS, events=1)
    lease = await k.claim_one(k.t0, run.id)
    before = await k.snapshot(TENANTLESS, run.id)
    nxt = successor(run, k.at(1), new_events=1)
    changed = event(run.id, 1, k.t0, payload={"seq": 1, "changed": True})
    fresh = event(run.id, 2, k.at(1))
    got = await k.b.transitions.commit_claimed(
        TENANTLESS, claimed(nxt, lease.claim_token), [changed, fresh]
    )
    k.eq(got, EventConflict(1), "different content at stored seq 1")
    await k.unchanged(TENANTLESS, run.id, before, "after the event conflict")
    k.isa(await k.b.events.fetch_event(TENANTLESS, run.id, 2), NotFound, "event 2 not stored")


EQUAL_LOOKING: dict[str, Callable[[Event], Event]] = {
    "int-vs-float": lambda e: attrs.evolve(e, payload={**e.payload, "seq": float(e.seq)}),
    "metadata": lambda e: attrs.evolve(e, metadata={"k": 1}),
    "type": lambda e: attrs.evolve(e, type=EventType.NODE_COMPLETED),
    "step": lambda e: attrs.evolve(e, step=e.step + 1),
    "timestamp-1us": lambda e: attrs.evolve(
        e, timestamp=e.timestamp.replace(microsecond=(e.timestamp.microsecond + 1) % 1_000_000)
    ),
    "node-id": lambda e: attrs.evolve(e, node_id="start"),
    "bool-vs-int": lambda e: attrs.evolve(e, payload={**e.payload, "flag": 1}),
}


@invariant("TRANSITION-EVENT-CANONICAL")
@pytest.mark.parametrize("change", sorted(EQUAL_LOOKING))
async def test_event_identity_is_canonical_content(docket_kit: Kit, change: str) -> None:
    """Any difference in canonical content at a stored seq is EventConflict (1 is not 1.0)."""
    k = docket_kit
    run = await seed(k, TENANTLESS)
    lease = await k.claim_one(k.t0, run.id)
    nxt = successor(run, k.at(1), new_events=1)
    original = event(run.id, 1, k.at(1), payload={"seq": 1, "flag": True})
    await commit_claimed_ok(k, TENANTLESS, claimed(nxt, lease.claim_token), [original])
    before = await k.snapshot(TENANTLESS, run.id)
    variant = EQUAL_LOOKING[change](original)
    later = successor(nxt, k.at(2))
    got = await k.b.transitions.commit_claimed(
        TENANTLESS, claimed(later, lease.claim_token), [variant]
    )
    k.eq(got, EventConflict(1), f"re-sent event 1 differing by {change}")
    await k.unchanged(TENANTLESS, run.id, before, f"after {change}")
    same = attrs.evolve(original, payload=dict(original.payload))
    await commit_claimed_ok(k, TENANTLESS, claimed(later, lease.claim_token), [same])


BATCH_DEFECTS: dict[str, tuple[Callable[[Run, Kit], list[Any]], type]] = {
    "identical-duplicates-collapse": (
        lambda r, k: [event(r.id, 1, k.t0), event(r.id, 2, k.t0), event(r.id, 1, k.t0)],
        Run,
    ),
    "contradictory-duplicates": (
        lambda r, k: [event(r.id, 1, k.t0), event(r.id, 2, k.t0), event(r.id, 1, k.at(1))],
        EventConflict,
    ),
    "event-of-another-run": (
        lambda r, k: [event(r.id, 1, k.t0), event(r.id + "-other", 2, k.t0)],
        InvalidTransition,
    ),
    "not-an-event": (
        lambda r, k: [event(r.id, 1, k.t0), {"run_id": r.id, "seq": 2}],
        InvalidTransition,
    ),
    "none-item": (lambda r, k: [event(r.id, 1, k.t0), None], InvalidTransition),
    "seq-zero": (
        lambda r, k: [attrs.evolve(event(r.id, 1, k.t0), seq=0), event(r.id, 2, k.t0)],
        InvalidTransition,
    ),
    "naive-timestamp": (
        lambda r, k: [
            event(r.id, 1, k.t0),
            attrs.evolve(event(r.id, 2, k.t0), timestamp=k.t0.replace(tzinfo=None)),
        ],
        InvalidTransition,
    ),
    "type-not-an-event-type": (
        lambda r, k: [
            event(r.id, 1, k.t0),
            attrs.evolve(event(r.id, 2, k.t0), type=junk("custom")),
        ],
        InvalidTransition,
    ),
    "non-durable-payload": (
        lambda r, k: [event(r.id, 1, k.t0), event(r.id, 2, k.t0, payload={"x": float("nan")})],
        InvalidTransition,
    ),
}


@invariant("TRANSITION-EVENT-CANONICAL")
@pytest.mark.parametrize("case", sorted(BATCH_DEFECTS))
async def test_initialize_batch_rules(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    run = new_run(k.name("r"), ref, k.t0, event_seq=2)
    build, outcome = BATCH_DEFECTS[case]
    got = await k.b.transitions.initialize(TENANTLESS, init_proposal(run, k.t0), build(run, k))
    if outcome is Run:
        k.eq(got, run, f"initialize with {case}")
        k.eq(
            list(await k.events(TENANTLESS, run.id)),
            events_for(run, k.t0, [1, 2]),
            "duplicates collapse to one stored event per seq",
        )
        return
    k.isa(got, outcome, f"initialize with {case}")
    await k.absent(TENANTLESS, run.id, f"after {case}")
