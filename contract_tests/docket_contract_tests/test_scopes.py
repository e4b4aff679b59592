"""Scopes and tenancy: SCOPE-OWNER-ISOLATION, OWNER-SCOPED-RUN-IDS, RETRY-POISONED-SCOPED,
OWNER-SCOPED-SUMMARIES."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from docket.contract import (
    AbandonPolicy,
    ClaimLost,
    ClaimRefreshed,
    EventListQuery,
    External,
    GraphListQuery,
    InactiveRun,
    NotFound,
    RunListQuery,
    StaleAbandon,
)
from docket.records import (
    SYSTEM,
    TENANTLESS,
    Event,
    EventPage,
    GraphRef,
    GraphVersion,
    OwnerScope,
    Run,
    RunInfo,
    RunStatus,
    RunSummary,
    tenant_id_of,
)
from docket_contract_tests.fixtures import (
    claimed,
    commit_unclaimed_ok,
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

# -- graphs -------------------------------------------------------------------------------------


@invariant("SCOPE-OWNER-ISOLATION")
async def test_graphs_are_owned(docket_kit: Kit) -> None:
    k = docket_kit
    a, b = k.tenant("a"), k.tenant("b")
    document = graph_document(k.name("g"))
    ref = graph_ref(document)
    for owner in (TENANTLESS, a):
        k.isa(await k.b.graphs.save_graph(owner, ref, document), GraphVersion, f"save in {owner}")
    for owner in (TENANTLESS, a):
        k.eq(await k.b.graphs.fetch_graph(owner, ref), document, f"fetch_graph in {owner}")
        k.eq(await k.b.graphs.fetch_latest_graph_ref(owner, ref.graph_id), ref, f"latest {owner}")
    k.isa(await k.b.graphs.fetch_graph(b, ref), NotFound, "fetch_graph in another tenant")
    k.isa(
        await k.b.graphs.fetch_latest_graph_ref(b, ref.graph_id),
        NotFound,
        "fetch_latest_graph_ref in another tenant",
    )
    page = await k.b.graphs.list_graph_versions(b, ref.graph_id, GraphListQuery(limit=5))
    k.eq(page.versions, (), "list_graph_versions in another tenant")
    k.eq(page.has_more, False, "list_graph_versions in another tenant: has_more")
    # a run can only be initialized against a graph of its own owner
    run = new_run(k.name("r"), ref, k.t0)
    got = await k.b.transitions.initialize(b, init_proposal(run, k.t0), [])
    k.isa(got, NotFound, "initialize in tenant B against tenant A's graph")
    await k.absent(b, run.id, "after initialize against a foreign graph")


GRAPH_OPS: dict[str, Callable[[Any, Any], Awaitable[object]]] = {
    "save_graph": lambda b, ref: b.graphs.save_graph(SYSTEM, ref, graph_document(ref.graph_id)),
    "fetch_graph": lambda b, ref: b.graphs.fetch_graph(SYSTEM, ref),
    "fetch_latest_graph_ref": lambda b, ref: b.graphs.fetch_latest_graph_ref(SYSTEM, ref.graph_id),
    "list_graph_versions": lambda b, ref: b.graphs.list_graph_versions(
        SYSTEM, ref.graph_id, GraphListQuery()
    ),
}


@invariant("SCOPE-OWNER-ISOLATION")
async def test_graph_operations_refuse_system(docket_kit: Kit) -> None:
    k = docket_kit
    ref = await save_graph(k, TENANTLESS)
    for name, op in GRAPH_OPS.items():
        await k.raises_async(ValueError, functools.partial(op, k.b, ref), f"{name}(SYSTEM, ...)")
    k.isa(await k.b.graphs.fetch_graph(TENANTLESS, ref), dict, "graph still there")


# -- runs and events ----------------------------------------------------------------------------


@invariant("SCOPE-OWNER-ISOLATION")
async def test_runs_and_events_are_owned(docket_kit: Kit) -> None:
    k = docket_kit
    a, b = k.tenant("a"), k.tenant("b")
    in_a = await seed(k, a, k.name("ra"), events=2)
    loose = await seed(k, TENANTLESS, k.name("rl"), events=1)
    for run, owner, strangers in ((in_a, a, (b, TENANTLESS)), (loose, TENANTLESS, (a, b))):
        k.eq(await k.b.runs.fetch_run(owner, run.id), run, f"fetch_run by its owner {owner}")
        info = await k.info(owner, run.id)
        k.eq(info.run, run, "inspect_run by its owner")
        k.isa(await k.b.events.fetch_event(owner, run.id, 1), Event, "fetch_event by owner")
        k.isa(await k.b.events.fetch_latest_event(owner, run.id), Event, "latest by owner")
        page = await k.b.events.list_events(owner, run.id, EventListQuery())
        k.isa(page, EventPage, "list_events by its owner")
        for other in strangers:
            what = f"{run.id} read by {other}"
            k.isa(await k.b.runs.fetch_run(other, run.id), NotFound, f"fetch_run: {what}")
            k.isa(await k.b.runs.inspect_run(other, run.id), NotFound, f"inspect_run: {what}")
            k.isa(await k.b.events.fetch_event(other, run.id, 1), NotFound, f"event: {what}")
            k.isa(await k.b.events.fetch_latest_event(other, run.id), NotFound, f"latest: {what}")
            k.isa(
                await k.b.events.list_events(other, run.id, EventListQuery()),
                NotFound,
                f"list_events: {what}",
            )
    everything = await k.b.runs.list_runs(SYSTEM, RunListQuery(limit=10))
    k.eq(
        {(s.id, s.tenant_id) for s in everything.runs},
        {(in_a.id, a.id), (loose.id, None)},
        "list_runs(SYSTEM) sees every tenant, with tenant ids",
    )
    for scope, want in ((a, {in_a.id}), (b, set()), (TENANTLESS, {loose.id})):
        listed = await k.b.runs.list_runs(scope, RunListQuery(limit=10))
        k.eq({s.id for s in listed.runs}, want, f"list_runs({scope})")


#: SYSTEM where an owner scope is required: deliberate misuse, typed as such.
AS_OWNER: Any = SYSTEM

SINGLE_RUN_OPS: dict[str, Callable[[Kit, Run, str], Awaitable[object]]] = {
    "fetch_run": lambda k, run, tok: k.b.runs.fetch_run(AS_OWNER, run.id),
    "inspect_run": lambda k, run, tok: k.b.runs.inspect_run(AS_OWNER, run.id),
    "refresh_claim": lambda k, run, tok: k.b.runs.refresh_claim(AS_OWNER, run.id, tok, k.t0),
    "release_claim": lambda k, run, tok: k.b.runs.release_claim(AS_OWNER, run.id, tok, k.t0),
    "abandon_claim": lambda k, run, tok: k.b.runs.abandon_claim(
        AS_OWNER,
        run.id,
        tok,
        AbandonPolicy(expected_checkpoint_seq=1, retry_at=k.at(60), max_claim_abandons=3, now=k.t0),
    ),
    "retry_poisoned_run": lambda k, run, tok: k.b.runs.retry_poisoned_run(AS_OWNER, run.id, k.t0),
    "fetch_event": lambda k, run, tok: k.b.events.fetch_event(AS_OWNER, run.id, 1),
    "fetch_latest_event": lambda k, run, tok: k.b.events.fetch_latest_event(AS_OWNER, run.id),
    "list_events": lambda k, run, tok: k.b.events.list_events(AS_OWNER, run.id, EventListQuery()),
    "initialize": lambda k, run, tok: k.b.transitions.initialize(
        AS_OWNER, init_proposal(new_run(k.name("other"), _ref(run), k.t0), k.t0), []
    ),
    "commit_claimed": lambda k, run, tok: k.b.transitions.commit_claimed(
        AS_OWNER, claimed(successor(run, k.at(1)), tok), []
    ),
    "commit_unclaimed": lambda k, run, tok: k.b.transitions.commit_unclaimed(
        AS_OWNER, 1, unclaimed(successor(run, k.at(1))), []
    ),
}


def _ref(run: Run) -> GraphRef:
    return GraphRef(run.graph_id, run.graph_hash)


@invariant("SCOPE-OWNER-ISOLATION")
@pytest.mark.parametrize("operation", sorted(SINGLE_RUN_OPS))
async def test_single_run_operations_refuse_system(docket_kit: Kit, operation: str) -> None:
    """SYSTEM is not an owner: naming one run with it is programmer misuse (ValueError)."""
    k = docket_kit
    run = await seed(k, TENANTLESS, events=1)
    lease = await k.claim_one(k.t0, run.id)
    before = await k.snapshot(TENANTLESS, run.id)
    await k.raises_async(
        ValueError,
        lambda: SINGLE_RUN_OPS[operation](k, run, lease.claim_token),
        f"{operation}(SYSTEM, ...)",
    )
    await k.unchanged(TENANTLESS, run.id, before, f"after {operation}(SYSTEM)")
    k.eq(len(await k.all_runs()), 1, "no run was created")


@invariant("SCOPE-OWNER-ISOLATION")
@pytest.mark.parametrize("scope", ["none", "string", "tenant-id-string"])
async def test_reads_refuse_non_scopes(docket_kit: Kit, scope: str) -> None:
    k = docket_kit
    run = await seed(k, TENANTLESS)
    bogus: Any = {"none": None, "string": "tenantless", "tenant-id-string": run.id}[scope]
    await k.raises_async(
        (TypeError, ValueError), lambda: k.b.runs.fetch_run(bogus, run.id), "fetch_run(bogus)"
    )
    await k.raises_async(
        (TypeError, ValueError),
        lambda: k.b.runs.list_runs(bogus, RunListQuery()),
        "list_runs(bogus)",
    )
    await k.raises_async(
        (TypeError, ValueError),
        lambda: k.b.events.list_events(bogus, run.id, EventListQuery()),
        "list_events(bogus)",
    )


# -- owner-scoped run ids -----------------------------------------------------------------------


@invariant("OWNER-SCOPED-RUN-IDS")
async def test_same_run_id_in_two_tenants_is_two_runs(docket_kit: Kit) -> None:
    k = docket_kit
    a, b = k.tenant("a"), k.tenant("b")
    run_id = k.name("shared")
    in_a = await seed(k, a, run_id, events=1, input={"who": "a"})
    # no cross-tenant existence oracle: B initializes the same id as a new run
    in_b = await seed(k, b, run_id, events=2, input={"who": "b"}, wake_at=k.at(30))
    loose = await seed(k, TENANTLESS, run_id, input={"who": "nobody"}, wake_at=k.at(60))
    for owner, run in ((a, in_a), (b, in_b), (TENANTLESS, loose)):
        k.eq(await k.b.runs.fetch_run(owner, run_id), run, f"fetch_run({owner})")
        info = await k.info(owner, run_id)
        k.eq(info.tenant_id, tenant_id_of(owner), "RunInfo.tenant_id")
        k.eq(len(await k.events(owner, run_id)), run.event_seq, f"events of {owner}'s run")
    listed = await k.all_runs()
    k.eq(
        sorted((s.tenant_id or "", s.id) for s in listed),
        sorted([(a.id, run_id), (b.id, run_id), ("", run_id)]),
        "list_runs(SYSTEM) shows three runs",
    )
    # a commit in A touches only A's run
    await commit_unclaimed_ok(k, a, unclaimed(successor(in_a, k.at(1))))
    k.eq(await k.b.runs.fetch_run(b, run_id), in_b, "B's run is untouched by A's commit")
    k.eq(await k.b.runs.fetch_run(TENANTLESS, run_id), loose, "the tenantless run is untouched")
    # claims lease each run under its own owner
    batch = await k.claim(k.at(120), limit=10)
    k.eq(
        sorted((str(lease.owner), lease.run_id) for lease in batch.leases),
        sorted((str(o), run_id) for o in (a, b, TENANTLESS)),
        "claim_due leases the three runs, each with its owner",
    )


@invariant("OWNER-SCOPED-RUN-IDS")
async def test_wrong_owner_is_not_found(docket_kit: Kit) -> None:
    k = docket_kit
    a, b = k.tenant("a"), k.tenant("b")
    run = await seed(k, a, events=1)
    lease = await k.claim_one(k.t0, run.id)
    k.eq(lease.owner, a, "the lease names the run's owner")
    before = await k.snapshot(a, run.id)
    nxt = successor(run, k.at(1), new_events=1)
    evs = [event(run.id, 2, k.at(1))]
    for other in (b, TENANTLESS):
        got = await k.b.transitions.commit_claimed(other, claimed(nxt, lease.claim_token), evs)
        k.isa(got, NotFound, f"commit_claimed by {other}")
        got = await k.b.transitions.commit_unclaimed(other, 1, unclaimed(nxt), evs)
        k.isa(got, NotFound, f"commit_unclaimed by {other}")
        k.isa(
            await k.b.runs.refresh_claim(other, run.id, lease.claim_token, k.at(2)),
            ClaimLost,
            f"refresh_claim by {other}",
        )
        await k.b.runs.release_claim(other, run.id, lease.claim_token, k.at(2))
        policy = AbandonPolicy(
            expected_checkpoint_seq=1, retry_at=k.at(60), max_claim_abandons=3, now=k.at(2)
        )
        k.isa(
            await k.b.runs.abandon_claim(other, run.id, lease.claim_token, policy),
            StaleAbandon,
            f"abandon_claim by {other}",
        )
        k.isa(
            await k.b.runs.retry_poisoned_run(other, run.id, k.at(2)),
            NotFound,
            f"retry_poisoned_run by {other}",
        )
    await k.unchanged(a, run.id, before, "after every operation by a wrong owner")
    k.isa(
        await k.b.runs.refresh_claim(a, run.id, lease.claim_token, k.at(3)),
        ClaimRefreshed,
        "the owner's claim still holds",
    )


@invariant("RETRY-POISONED-SCOPED")
async def test_retry_poisoned_is_scoped(docket_kit: Kit) -> None:
    k = docket_kit
    a, b = k.tenant("a"), k.tenant("b")
    run = await seed(k, a)
    await k.claim_one(k.t0, run.id, ttl=timedelta(0), max_attempts=1)
    batch = await k.claim(k.at(1), ttl=timedelta(0), max_attempts=1)
    k.eq([p.run_id for p in batch.poisoned], [run.id], "the second launch poisons")
    k.eq(batch.poisoned[0].owner, a, "the poisoned outcome names the owner")
    before = await k.snapshot(a, run.id)
    for other in (b, TENANTLESS):
        got = await k.b.runs.retry_poisoned_run(other, run.id, k.at(2))
        k.isa(got, NotFound, f"retry_poisoned_run by {other}")
    await k.unchanged(a, run.id, before, "a foreign retry changes nothing")
    got = await k.b.runs.retry_poisoned_run(a, run.id, k.at(3))
    k.eq(got, run, "retry_poisoned_run by the owner returns the run")
    info = await k.info(a, run.id)
    k.eq(
        (info.poisoned_at, info.poison_reason, info.wake_at, info.claim_attempts),
        (None, None, k.at(3), 0),
        "recovered: poison cleared, due at the retry's now, attempts reset",
    )
    k.isa(await k.b.runs.retry_poisoned_run(b, k.name("ghost"), k.at(3)), NotFound, "ghost run")
    k.check(not isinstance(got, InactiveRun), "a running run is not inactive")


@invariant("SCOPE-OWNER-ISOLATION")
async def test_summaries_are_index_columns(docket_kit: Kit) -> None:
    k = docket_kit
    a = k.tenant("a")
    run = await seed(k, a, events=1)
    page = await k.b.runs.list_runs(a, RunListQuery(limit=5))
    k.eq(page.runs, (RunSummary.of(run, a.id),), "list_runs summary of the run")
    info = await k.info(a, run.id)
    k.isa(info, RunInfo, "inspect_run")


@invariant("OWNER-SCOPED-SUMMARIES")
async def test_each_owner_lists_exactly_its_own_summary(docket_kit: Kit) -> None:
    k = docket_kit
    a, b = k.tenant("a"), k.tenant("b")
    run_id = k.name("same")
    ref_a = await save_graph(k, a, "ga")
    ref_b = await save_graph(k, b, "gb")
    ref_t = await save_graph(k, TENANTLESS, "gt")
    run_a = await seed(k, a, run_id, ref=ref_a, events=1)
    run_t = await seed(k, TENANTLESS, run_id, ref=ref_t, started_at=k.at(2))
    run_b = await seed(k, b, run_id, ref=ref_b, started_at=k.at(5))
    waiting = successor(run_b, k.at(7), status=RunStatus.WAITING)
    await commit_unclaimed_ok(k, b, unclaimed(waiting, wake=External()))
    mine: dict[OwnerScope, RunSummary] = {
        a: RunSummary.of(run_a, a.id),
        b: RunSummary.of(waiting, b.id),
        TENANTLESS: RunSummary.of(run_t, None),
    }
    refs: dict[OwnerScope, GraphRef] = {a: ref_a, b: ref_b, TENANTLESS: ref_t}
    for owner, summary in mine.items():
        page = await k.b.runs.list_runs(owner, RunListQuery(limit=10))
        k.eq(page.runs, (summary,), f"list_runs({owner}) shows exactly its own summary")
        for other, ref in refs.items():
            got = await k.b.runs.list_runs(owner, RunListQuery(limit=10, graph_id=ref.graph_id))
            want = (summary,) if other == owner else ()
            k.eq(got.runs, want, f"list_runs({owner}) filtered by {other}'s graph id")
            got = await k.b.runs.list_runs(
                owner, RunListQuery(limit=10, graph_id=ref.graph_id, graph_hash=ref.graph_hash)
            )
            k.eq(got.runs, want, f"list_runs({owner}) filtered by {other}'s graph version")
        for status in (RunStatus.RUNNING, RunStatus.WAITING):
            got = await k.b.runs.list_runs(
                owner, RunListQuery(limit=10, statuses=frozenset({status}))
            )
            want = (summary,) if summary.status is status else ()
            k.eq(got.runs, want, f"list_runs({owner}) filtered by status {status}")
    everything = await k.all_runs()
    k.eq(
        sorted(everything, key=repr),
        sorted(mine.values(), key=repr),
        "list_runs(SYSTEM) shows each owner's own summary of the shared run id",
    )
