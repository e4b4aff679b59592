"""Retention (``Feature.PRUNE``): FEATURE-PRUNE, RETENTION-SEQ-ARITHMETIC.

A backend that declares ``prune`` provides :class:`~docket.contract.Prunable`; the kit
uses ``prune`` itself as its hook to cause retention. ``prune`` deletes events written,
and runs finished, strictly more than an age before ``now`` (a row exactly at the
boundary survives), at most ``batch_size`` of each per pass, never a live run; bad
arguments raise ``ValueError``. Retention never changes sequence arithmetic: the run's
``event_seq`` (and ``EventPage.latest_seq``) stays, reads show the hole, a commit that
moves the event seq back or skips the next one is invalid, the correct next seq
succeeds, and a re-sent pruned event is dropped rather than re-inserted. Without the
feature these cases check nothing (the kit's summary says "not declared").
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import attrs

from docket.contract import (
    EventListQuery,
    Feature,
    InvalidTransition,
    NotFound,
    Prunable,
    PruneResult,
    ReleaseClaim,
    Terminal,
)
from docket.records import TENANTLESS, EventPage, RunStatus
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    event,
    events_for,
    seed,
    seed_claimed,
    successor,
)
from docket_contract_tests.kit import Kit, invariant

HOUR = timedelta(hours=1)
US = timedelta(microseconds=1)


def _pruner(k: Kit) -> Prunable | None:
    if not k.declares(Feature.PRUNE):
        return None
    k.check(
        isinstance(k.b, Prunable),
        "the backend declares prune but has no Prunable.prune (docket.contract.Prunable)",
    )
    assert isinstance(k.b, Prunable)
    return k.b


async def _page(k: Kit, run_id: str, after: int = 0, limit: int = 100) -> EventPage:
    got = await k.b.events.list_events(
        TENANTLESS, run_id, EventListQuery(after_seq=after, limit=limit)
    )
    return k.isa(got, EventPage, f"list_events({run_id!r}, after {after})")


@invariant("FEATURE-PRUNE")
async def test_prune_removes_old_events_and_finished_runs(docket_kit: Kit) -> None:
    k = docket_kit
    pruner = _pruner(k)
    if pruner is None:
        return
    live = await seed(k, TENANTLESS, events=2)
    done_run, lease = await seed_claimed(k, TENANTLESS, k.name("done"), now=k.t0)
    finished = successor(done_run, k.t0, new_events=1, status=RunStatus.DONE)
    await commit_claimed_ok(
        k,
        TENANTLESS,
        claimed(finished, lease.claim_token, schedule=ReleaseClaim(Terminal())),
        events_for(finished, k.t0, [1]),
    )
    before = await k.snapshot(TENANTLESS, live.id)
    bad: list[dict[str, Any]] = [
        {"event_age": -US},
        {"run_age": "1h"},
        {"batch_size": 0},
        {"batch_size": True},
    ]
    for options in bad:
        call = functools.partial(pruner.prune, **options)
        await k.raises_async(ValueError, call, f"prune({options})")
    await k.unchanged(TENANTLESS, live.id, before, "after refused prunes")
    got = await pruner.prune(event_age=HOUR, run_age=HOUR, now=k.t0 + HOUR)
    k.eq(got, PruneResult(True, 0, 0), "rows written at t0 or later survive a cut at t0")
    await k.unchanged(TENANTLESS, live.id, before, "after a prune that deletes nothing")
    cut = await k.b.now() + HOUR + US
    got = await pruner.prune(event_age=HOUR, batch_size=2, now=cut)
    k.eq(got, PruneResult(True, 2, 0), "one pass deletes at most batch_size events")
    got = await pruner.prune(event_age=HOUR, now=cut)
    k.eq(got, PruneResult(True, 1, 0), "the next pass deletes the rest")
    k.eq(await k.events(TENANTLESS, live.id), (), "a live run's old events are pruned")
    k.eq(await k.events(TENANTLESS, done_run.id), (), "a finished run's old events are pruned")
    info = await k.info(TENANTLESS, live.id)
    k.eq(info, before.info, "pruning events changes no run")
    got = await pruner.prune(run_age=HOUR, now=cut)
    k.eq(got, PruneResult(True, 0, 1), "the finished run is pruned, the live one is not")
    await k.absent(TENANTLESS, done_run.id, "a pruned finished run")
    k.eq(await k.info(TENANTLESS, live.id), before.info, "the live run is kept")


@invariant("RETENTION-SEQ-ARITHMETIC")
async def test_retention_never_changes_sequence_arithmetic(docket_kit: Kit) -> None:
    k = docket_kit
    pruner = _pruner(k)
    if pruner is None:
        return
    run, lease = await seed_claimed(k, TENANTLESS, events=3)
    sent = events_for(run, k.t0, [1, 2, 3])
    pruned = await pruner.prune(event_age=HOUR, now=await k.b.now() + HOUR + US)
    k.eq(pruned, PruneResult(True, 3, 0), "events 1..3 pruned")
    for seq in (1, 2, 3):
        k.isa(await k.b.events.fetch_event(TENANTLESS, run.id, seq), NotFound, f"pruned {seq}")
    k.eq(await k.b.events.fetch_latest_event(TENANTLESS, run.id), None, "no event retained")
    page = await _page(k, run.id)
    k.eq(
        (page.events, page.latest_seq, page.oldest_available_seq, page.latest_available_seq),
        ((), 3, None, None),
        "the page: no events, latest_seq still 3, nothing available",
    )
    info = await k.info(TENANTLESS, run.id)
    k.eq(info.run.event_seq, 3, "the run's event_seq stays 3")
    before = await k.snapshot(TENANTLESS, run.id)
    back = attrs.evolve(successor(run, k.at(1)), event_seq=2)
    got = await k.b.transitions.commit_claimed(
        TENANTLESS, claimed(back, lease.claim_token), sent[:2]
    )
    k.isa(got, InvalidTransition, "a commit moving event_seq back into the pruned range")
    await k.unchanged(TENANTLESS, run.id, before, "after a commit moving event_seq back")
    skip = successor(run, k.at(1), new_events=1)
    got = await k.b.transitions.commit_claimed(
        TENANTLESS, claimed(skip, lease.claim_token), [sent[2]]
    )
    k.isa(got, InvalidTransition, "a commit re-publishing pruned seq 3 instead of the next, 4")
    await k.unchanged(TENANTLESS, run.id, before, "after re-publishing a pruned seq")
    nxt = successor(run, k.at(1), new_events=2)
    fresh = [event(run.id, seq, k.at(1)) for seq in (4, 5)]
    await commit_claimed_ok(k, TENANTLESS, claimed(nxt, lease.claim_token), [sent[2], *fresh])
    k.isa(
        await k.b.events.fetch_event(TENANTLESS, run.id, 3),
        NotFound,
        "the re-sent pruned event 3 was dropped, not re-inserted",
    )
    k.eq(await k.events(TENANTLESS, run.id), tuple(fresh), "events 4..5 follow the hole")
    k.eq(await k.b.events.fetch_latest_event(TENANTLESS, run.id), fresh[-1], "latest event")
    page = await _page(k, run.id, limit=1)
    k.eq(
        (page.events, page.has_more, page.latest_seq, page.oldest_available_seq),
        ((fresh[0],), True, 5, 4),
        "the first page after the hole",
    )
    page = await _page(k, run.id, after=1)
    k.eq(
        (page.events, page.oldest_available_seq, page.latest_available_seq, page.latest_seq),
        (tuple(fresh), 4, 5, 5),
        "a cursor inside the hole reads on from the oldest retained event",
    )
