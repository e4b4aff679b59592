"""Fault injection: the real runtime on the backend under test, with faults in between.

FAULT-LOST-REPLY-REPLAY: a commit reaches the backend, which commits it, and the reply
is lost. The runtime must send the *same* proposal again (same ``transition_id``); the
backend must recognise it and answer the stored run; the run converges with no
duplicate checkpoint or event.

FAULT-SERVER-ERROR-MID-BATCH: one call in the middle of a sequence fails with a server
error (a claim poll, one commit of several, a commit answered ``Retryable``, a claim
whose reply is lost). Between the failure and the retry the store shows exactly the
last committed state, and the worker recovers by itself.

FAULT-SLOW-COMMIT-PAST-TTL: a commit is held up past its claim's TTL and another worker
steals the run in between. When the late commit arrives the backend refuses it with
``StaleCheckpoint`` (the fence the contract defines for a lost claim) and changes
nothing; the stealer then commits the run to the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timedelta

from docket import Docket, Settings
from docket.contract import (
    ClaimBatch,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    Lease,
    StaleCheckpoint,
)
from docket.graph.builder import GraphBuilder
from docket.graph.guards import equals, not_
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.schema import S
from docket.records import TENANTLESS, Event, EventType, GraphRef, Run, RunInfo, RunStatus
from docket.runtime.drain import Drainer
from docket.runtime.graphs import GraphCache
from docket.runtime.lifecycle import random_ids
from docket.values import JSONDict
from docket_contract_tests.faults import FaultKind, FaultyBackend, LostReply
from docket_contract_tests.kit import Kit, Snapshot, invariant

NODES = NodeRegistry()
FINISH_AT = 3.0


@NODES.node("fault_increment")
def _increment(state: NodeState, ctx: NodeContext) -> JSONDict:
    count = state.get("count", 0.0)
    assert isinstance(count, float)
    return {"count": count + 1.0}


def counter_graph(graph_id: str) -> Graph:
    """Counts to ``FINISH_AT`` one superstep at a time: several claimed commits per run."""
    return (
        GraphBuilder(graph_id)
        .field("count", S.float(), default=0.0)
        .node("increment", "fault_increment")
        .edge("start", START, "increment")
        .edge("again", "increment", "increment", guard=not_(equals("count", FINISH_AT)))
        .edge("done", "increment", FINISH, guard=equals("count", FINISH_AT))
        .output("count")
        .build()
    )


def _settings(**changes: object) -> Settings:
    base: dict[str, object] = {
        "claim_ttl": 60.0,
        "poll_interval": 0.05,
        "commit_backoff": 0.001,
        "concurrency": 4,
        "shutdown_timeout": 10.0,
    }
    return Settings(**{**base, **changes})  # type: ignore[arg-type]  # test overrides


def _docket(backend: FaultyBackend, **settings: object) -> Docket:
    return Docket(backend, nodes=NODES, settings=_settings(**settings))


def _drainer(backend: FaultyBackend, settings: Settings) -> Drainer:
    return Drainer(backend, GraphCache(backend, NODES, executable=True), settings, ids=random_ids)


def check_history(k: Kit, run: Run, events: Sequence[Event], what: str) -> None:
    """A whole history: events 1..event_seq once each, one checkpoint mark per checkpoint."""
    k.eq([e.seq for e in events], list(range(1, run.event_seq + 1)), f"{what}: event seqs")
    marks = [
        e.metadata.get("checkpoint_seq") for e in events if e.type is EventType.CHECKPOINT_COMMITTED
    ]
    k.eq(marks, list(range(1, run.checkpoint_seq + 1)), f"{what}: checkpoint marks")


async def _finished(k: Kit, run_id: str, what: str) -> Run:
    info = await k.info(TENANTLESS, run_id)
    run = info.run
    k.eq(run.status, RunStatus.DONE, f"{what}: status")
    k.eq(run.output, {"count": FINISH_AT}, f"{what}: output")
    k.check(info.claimed_at is None and info.wake_at is None, f"{what}: a done run is parked")
    check_history(k, run, await k.events(TENANTLESS, run_id), what)
    return run


async def _claim_at(k: Kit, when: datetime, ttl: timedelta) -> ClaimBatch:
    policy = ClaimPolicy(limit=5, orphan_ttl=ttl, max_claim_attempts=10, now=when)
    return k.isa(await k.b.runs.claim_due(policy), ClaimBatch, "claim_due")


async def _past(k: Kit, moment: datetime) -> datetime:
    """Move the case's manual clock to ``moment`` if it has one; the time to claim at."""
    clock = k.subject.clock
    if clock is not None and clock() < moment:
        clock.set(moment)
        return await k.b.now()
    return moment


# -- (a) lost replies -------------------------------------------------------------------------


@invariant("FAULT-LOST-REPLY-REPLAY")
async def test_lost_replies_are_replayed_by_transition_id(docket_kit: Kit) -> None:
    k = docket_kit
    proxy = FaultyBackend(k.b)
    plan = proxy.plan
    faults = [
        plan.add("save_graph", 1, FaultKind.LOST_REPLY),
        plan.add("initialize", 1, FaultKind.LOST_REPLY),
        plan.add("commit_claimed", 1, FaultKind.LOST_REPLY),
        plan.add("commit_claimed", 3, FaultKind.LOST_REPLY),
    ]
    async with _docket(proxy) as docket:
        ref = await docket.save_graph(counter_graph(k.name("counter")))
        run = await docket.start_run(ref, run_id=k.name("r"))
        k.eq(run.checkpoint_seq, 1, "start_run after a lost reply answers the initialized run")
        summary = await docket.drain_due()
        k.eq([o.kind for o in summary.outcomes], ["parked"], "the drain parks the run")
        final = await _finished(k, run.id, "after lost replies")
    k.check(all(f.fired.is_set() for f in faults), "every planned fault fired")

    for operation in ("initialize", "commit_claimed"):
        calls = plan.of(operation)
        k.check(all(c.reached_backend for c in calls), f"{operation}: every call was sent")
        for fault in (f for f in faults if f.operation == operation):
            lost = calls[fault.nth - 1]
            resent = calls[fault.nth]
            k.isa(lost.answer, Run, f"{operation} #{fault.nth} committed before its reply was lost")
            k.eq(resent.transition_id, lost.transition_id, f"{operation}: the replay reuses the id")
            k.eq(resent.answer, lost.answer, f"{operation}: the replay answers the stored run")
    committed = [c.transition_id for c in plan.of("commit_claimed")]
    k.eq(
        len(set(committed)),
        final.checkpoint_seq - 1,
        "one distinct claimed transition per checkpoint after the first (replays add none)",
    )
    k.eq(len(committed), final.checkpoint_seq - 1 + 2, "each lost reply cost exactly one resend")


@invariant("FAULT-LOST-REPLY-REPLAY")
async def test_a_signal_whose_reply_is_lost_is_replayed(docket_kit: Kit) -> None:
    k = docket_kit
    proxy = FaultyBackend(k.b)
    fault = proxy.plan.add("commit_unclaimed", 1, FaultKind.LOST_REPLY)
    async with _docket(proxy) as docket:
        ref = await docket.save_graph(counter_graph(k.name("counter")))
        run = await docket.start_run(ref, run_id=k.name("r"))
        cancelled = await docket.cancel_run(run.id)
    k.check(fault.fired.is_set(), "the fault fired")
    k.eq(cancelled.status, RunStatus.CANCELLED, "cancel_run answers the cancelled run")
    calls = proxy.plan.of("commit_unclaimed")
    k.eq(len(calls), 2, "one lost reply, one replay")
    k.eq(calls[1].transition_id, calls[0].transition_id, "the replay reuses the transition id")
    k.eq(calls[1].answer, calls[0].answer, "the replay answers the stored run")
    info = await k.info(TENANTLESS, run.id)
    k.eq(info.run, cancelled, "stored run")
    k.eq(info.run.checkpoint_seq, 2, "one cancel checkpoint, not two")
    check_history(k, info.run, await k.events(TENANTLESS, run.id), "after a replayed cancel")


# -- (b) server errors in the middle of a sequence ----------------------------------------------


@invariant("FAULT-SERVER-ERROR-MID-BATCH")
async def test_a_failed_commit_mid_drain_leaves_the_last_checkpoint(docket_kit: Kit) -> None:
    k = docket_kit
    proxy = FaultyBackend(k.b)
    plan = proxy.plan
    error = plan.add("commit_claimed", 2, FaultKind.SERVER_ERROR)
    retry = plan.add("commit_claimed", 4, FaultKind.RETRYABLE)
    seen: dict[int, Snapshot] = {}

    async with _docket(proxy) as docket:
        ref = await docket.save_graph(counter_graph(k.name("counter")))
        run = await docket.start_run(ref, run_id=k.name("r"))

        async def look(operation: str, nth: int) -> None:
            # Between each failed commit and its resend (calls 3 and 5), look at the store
            # from the side: only the moments committed so far may be visible.
            if operation == "commit_claimed" and nth in (3, 5):
                seen[nth] = await k.snapshot(TENANTLESS, run.id)

        plan.before = look
        summary = await docket.drain_due()
        plan.before = None
        k.eq([o.kind for o in summary.outcomes], ["parked"], "the drain recovers and parks")
        final = await _finished(k, run.id, "after server errors")
    k.check(error.fired.is_set() and retry.fired.is_set(), "both faults fired")

    calls = plan.of("commit_claimed")
    k.eq(calls[2].transition_id, calls[1].transition_id, "the failed commit is resent as is")
    k.eq(calls[4].transition_id, calls[3].transition_id, "the Retryable commit is resent as is")
    for resend, (last_ok, checkpoint) in {3: (0, 2), 5: (2, 3)}.items():
        k.check(resend in seen, f"the store was read before resend #{resend}")
        snap = seen[resend]
        info = k.isa(snap.info, RunInfo, f"the run before resend #{resend}")
        k.eq(info.run, calls[last_ok].answer, f"the store before resend #{resend}")
        k.eq(info.run.checkpoint_seq, checkpoint, f"no partial checkpoint before #{resend}")
        events = k.isa(snap.events, tuple, f"events before resend #{resend}")
        k.eq(len(events), info.run.event_seq, f"no partial events before resend #{resend}")
    k.eq(
        len({c.transition_id for c in calls}),
        final.checkpoint_seq - 1,
        "no moment was recomputed: one transition id per checkpoint",
    )


@invariant("FAULT-SERVER-ERROR-MID-BATCH")
async def test_a_worker_recovers_from_failed_polls_and_commits(docket_kit: Kit) -> None:
    k = docket_kit
    proxy = FaultyBackend(k.b)
    plan = proxy.plan
    faults = [
        plan.add("claim_due", 1, FaultKind.SERVER_ERROR),
        plan.add("claim_due", 2, FaultKind.RETRYABLE),
        plan.add("commit_claimed", 2, FaultKind.SERVER_ERROR),
        plan.add("commit_claimed", 5, FaultKind.LOST_REPLY),
        plan.add("commit_claimed", 7, FaultKind.RETRYABLE),
    ]
    async with _docket(proxy) as docket:
        ref = await docket.save_graph(counter_graph(k.name("counter")))
        runs = [await docket.start_run(ref, run_id=k.name(f"r{i}")) for i in range(3)]
        async with docket.worker(concurrency=3):
            for run in runs:
                await docket.await_run(run.id, timeout=45)
        for run in runs:
            await _finished(k, run.id, f"run {run.id} after a faulty batch")
    k.check(all(f.fired.is_set() for f in faults), "every planned fault fired")
    leased = [
        lease.run_id
        for call in plan.of("claim_due")
        if isinstance(call.answer, ClaimBatch)
        for lease in call.answer.leases
    ]
    k.eq(sorted(leased), sorted(r.id for r in runs), "each run was leased exactly once")


@invariant("FAULT-SERVER-ERROR-MID-BATCH")
async def test_a_claim_whose_reply_is_lost_is_recovered_after_the_ttl(docket_kit: Kit) -> None:
    k = docket_kit
    proxy = FaultyBackend(k.b)
    fault = proxy.plan.add("claim_due", 1, FaultKind.LOST_REPLY)
    ttl = 60.0
    async with _docket(proxy, claim_ttl=ttl) as docket:
        ref = await docket.save_graph(counter_graph(k.name("counter")))
        run = await docket.start_run(ref, run_id=k.name("r"))
        policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=ttl), max_claim_attempts=5)
        try:
            await proxy.runs.claim_due(policy)
        except LostReply:
            pass
        else:
            k.fail("the planned lost reply did not reach the caller")
        k.eq((await docket.drain_due()).outcomes, (), "the lost lease is not due to anyone")
        k.check(fault.fired.is_set(), "the fault fired")
        info = await k.info(TENANTLESS, run.id)
        k.check(info.claimed_at is not None, "the backend did take the claim")
        k.eq(info.run, run, "nothing but the claim changed")
        # Nobody holds the lease: once it expires, any claimer recovers the run.
        assert info.claimed_at is not None
        later = await _past(k, info.claimed_at + timedelta(seconds=ttl + 1))
        batch = await _claim_at(k, later, timedelta(seconds=ttl))
        k.eq([lease.run_id for lease in batch.leases], [run.id], "the expired claim is taken")
        outcome = await _drainer(proxy, docket.settings).drain(batch.leases[0])
        k.eq(outcome.kind, "parked", "the recovered run drains")
        await _finished(k, run.id, "after a lost claim reply")


# -- (c) a commit that arrives after the claim was stolen ---------------------------------------


@invariant("FAULT-SLOW-COMMIT-PAST-TTL")
async def test_a_late_commit_loses_to_the_stealer(docket_kit: Kit) -> None:
    k = docket_kit
    proxy = FaultyBackend(k.b)
    plan = proxy.plan
    stall = plan.add("commit_claimed", 1, FaultKind.STALL)
    ttl = timedelta(seconds=60)
    async with _docket(proxy, claim_ttl=ttl.total_seconds()) as docket:
        ref: GraphRef = await docket.save_graph(counter_graph(k.name("counter")))
        run = await docket.start_run(ref, run_id=k.name("r"))
        first = await _claim_at(k, await k.b.now(), ttl)
        lease_a: Lease = first.leases[0]
        slow = asyncio.ensure_future(_drainer(proxy, docket.settings).drain(lease_a))
        await asyncio.wait_for(stall.fired.wait(), 30)

        # The slow commit is in flight; its claim expires and another worker steals it.
        later = await _past(k, lease_a.claimed_at + ttl + timedelta(seconds=1))
        stolen = await _claim_at(k, later, ttl)
        k.eq([lease.run_id for lease in stolen.leases], [run.id], "the expired claim is stolen")
        lease_b = stolen.leases[0]
        k.check(lease_b.claim_token != lease_a.claim_token, "stealing replaces the token")
        before = await k.snapshot(TENANTLESS, run.id)

        stall.gate.set()
        outcome_a = await asyncio.wait_for(slow, 30)
        k.isa(stall.answer, StaleCheckpoint, "the late commit of the old holder")
        k.eq((outcome_a.kind, outcome_a.commits), ("discarded", 0), "the old holder's drain")
        await k.unchanged(TENANTLESS, run.id, before, "a late commit")
        k.isa(
            await k.b.runs.refresh_claim(TENANTLESS, run.id, lease_a.claim_token),
            ClaimLost,
            "the old token",
        )
        k.isa(
            await k.b.runs.refresh_claim(TENANTLESS, run.id, lease_b.claim_token),
            ClaimRefreshed,
            "the stealer still holds the claim after the loser's clean-up",
        )

        outcome_b = await _drainer(proxy, docket.settings).drain(lease_b)
        k.eq(outcome_b.kind, "parked", "the stealer drains the run to the end")
        final = await _finished(k, run.id, "after a stolen claim")
    tokens = {c.claim_token for c in plan.of("commit_claimed") if isinstance(c.answer, Run)}
    k.eq(tokens, {lease_b.claim_token}, "every accepted commit came from the stealer")
    k.eq(outcome_b.commits, final.checkpoint_seq - 1, "the stealer made every checkpoint")
