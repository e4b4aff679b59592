"""Tenant isolation sweep: every facade and store operation, tenant A's ids used by tenant B.

The list of operations is introspected — every public method of :class:`~docket.Docket`
and every method of the store Protocols in ``docket.contract.protocols`` — and each one
must appear in a table below, either with how to call it with tenant A's ids from another
scope and what that must answer, or as exempt with the reason it names no tenant's data.
A new operation therefore fails :func:`test_the_tables_cover_every_operation` until
someone decides how it is isolated.

Each call is checked on memory, SQLite, PostgreSQL and Redis: it answers "not found"
(the typed error, ``None``-like or an empty page, as the operation defines), and
everything tenant A owns reads back exactly as before (as tenant A and in system scope).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)

from docket import Docket, SyncDocket, errors
from docket.contract import (
    AbandonPolicy,
    ClaimBatch,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    EventListQuery,
    GraphListQuery,
    NotFound,
    RunListQuery,
    StaleAbandon,
)
from docket.contract.capabilities import Feature
from docket.contract.protocols import STORE_PROTOCOLS
from docket.records import (
    SYSTEM,
    TENANTLESS,
    EventPage,
    GraphRef,
    GraphVersion,
    GraphVersionPage,
    OwnerScope,
    Run,
    RunPage,
    RunStatus,
    SchedulePage,
    Tenant,
)
from tests.fuzz.backends import OpenStore
from tests.fuzz.test_facade_fuzz import NODES, fuzz_graph

TENANT_A = "tenant-a"
TENANT_B = "tenant-b"

# -- the introspected operations --------------------------------------------------------------


def facade_operations() -> set[str]:
    return {n for n, _ in inspect.getmembers(Docket, inspect.isfunction) if not n.startswith("_")}


def store_operations() -> set[str]:
    return {
        f"{accessor}.{name}"
        for accessor, protocol in STORE_PROTOCOLS.items()
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(value)
    }


# -- the facade table -----------------------------------------------------------------------------


@dataclass
class FacadeWorld:
    """Tenant A's data: a published graph and a run waiting on interrupt ``question``."""

    ref: GraphRef
    run_id: str


FacadeCall = Callable[[Docket, FacadeWorld], Awaitable[object]]


def _not_found(result: object) -> str | None:
    return None if isinstance(result, errors.NotFound) else f"expected NotFound, got {result!r}"


def _no_run_of_a(result: object) -> str | None:
    if isinstance(result, RunPage) and not result.runs:
        return None
    return f"expected an empty page, got {result!r}"


def _no_versions(result: object) -> str | None:
    if isinstance(result, GraphVersionPage) and not result.versions:
        return None
    return f"expected no versions, got {result!r}"


#: Tenant A's schedule (created where the backend stores schedules).
SCHEDULE = "shared-schedule"


def _no_schedule(result: object) -> str | None:
    if isinstance(result, errors.NotFound | errors.Unsupported):
        return None
    return f"expected NotFound (or Unsupported), got {result!r}"


def _not_deleted(result: object) -> str | None:
    if result is False or isinstance(result, errors.Unsupported):
        return None
    return f"expected False (nothing deleted), got {result!r}"


def _no_schedules(result: object) -> str | None:
    if isinstance(result, errors.Unsupported):
        return None
    if isinstance(result, SchedulePage) and not result.schedules:
        return None
    return f"expected no schedules, got {result!r}"


def _own_ref(result: object) -> str | None:
    return None if isinstance(result, GraphRef) else f"expected B's own GraphRef, got {result!r}"


async def _scope_items(docket: Docket, tenant_id: str) -> object:
    """What a scope stream yields in a moment (A's run is untouched meanwhile, so any
    item would be A's: a re-read leaking another tenant's runs shows here)."""
    items: list[object] = []
    async with docket.stream_scope(tenant_id=tenant_id) as stream:
        try:
            async with asyncio.timeout(0.2):
                items.extend([item async for item in stream])
        except TimeoutError:
            pass
    return items


def _nothing_streamed(result: object) -> str | None:
    if result == [] or isinstance(result, errors.Unsupported):
        return None
    return f"expected no stream items (or Unsupported), got {result!r}"


#: operation → (how tenant B uses tenant A's ids, what it must answer).
FACADE: dict[str, tuple[FacadeCall, Callable[[object], str | None]]] = {
    # Graphs are per scope: B may publish the same graph; that makes B's copy, not A's.
    "save_graph": (lambda d, w: d.save_graph(fuzz_graph(), tenant_id=TENANT_B), _own_ref),
    "fetch_graph": (lambda d, w: d.fetch_graph(w.ref, tenant_id=TENANT_B), _not_found),
    "latest_graph_ref": (
        lambda d, w: d.latest_graph_ref(w.ref.graph_id, tenant_id=TENANT_B),
        _not_found,
    ),
    "list_graph_versions": (
        lambda d, w: d.list_graph_versions(w.ref.graph_id, tenant_id=TENANT_B),
        _no_versions,
    ),
    "start_run": (lambda d, w: d.start_run(w.ref, {"name": "b"}, tenant_id=TENANT_B), _not_found),
    "resolve_interrupt": (
        lambda d, w: d.resolve_interrupt(
            w.run_id, "question", {"approved": True}, tenant_id=TENANT_B
        ),
        _not_found,
    ),
    "cancel_run": (lambda d, w: d.cancel_run(w.run_id, tenant_id=TENANT_B), _not_found),
    "retry_poisoned_run": (
        lambda d, w: d.retry_poisoned_run(w.run_id, tenant_id=TENANT_B),
        _not_found,
    ),
    "retry_run": (
        lambda d, w: d.retry_run(w.run_id, reason="b", tenant_id=TENANT_B),
        _not_found,
    ),
    "fetch_run": (lambda d, w: d.fetch_run(w.run_id, tenant_id=TENANT_B), _not_found),
    "inspect_run": (lambda d, w: d.inspect_run(w.run_id, tenant_id=TENANT_B), _not_found),
    "await_run": (lambda d, w: d.await_run(w.run_id, timeout=0, tenant_id=TENANT_B), _not_found),
    "list_runs": (lambda d, w: d.list_runs(tenant_id=TENANT_B), _no_run_of_a),
    "list_events": (lambda d, w: d.list_events(w.run_id, tenant_id=TENANT_B), _not_found),
    "history": (lambda d, w: d.history(w.run_id, tenant_id=TENANT_B), _not_found),
    "children": (lambda d, w: d.children(w.run_id, tenant_id=TENANT_B), _not_found),
    "send": (lambda d, w: d.send(w.run_id, "topic", 1, tenant_id=TENANT_B), _not_found),
    # state history (docs/history.md)
    "state_history": (lambda d, w: d.state_history(w.run_id, tenant_id=TENANT_B), _not_found),
    "fetch_run_at": (lambda d, w: d.fetch_run_at(w.run_id, 1, tenant_id=TENANT_B), _not_found),
    "fork_run": (
        lambda d, w: d.fork_run(w.run_id, new_run_id="b-fork", tenant_id=TENANT_B),
        _not_found,
    ),
    "update_state": (
        lambda d, w: d.update_state(w.run_id, {"applied": True}, tenant_id=TENANT_B),
        _not_found,
    ),
    # A's schedule (on backends that store schedules; elsewhere each is Unsupported)
    "create_schedule": (
        lambda d, w: d.create_schedule(
            SCHEDULE, w.ref.graph_id, cron="0 * * * *", tenant_id=TENANT_B
        ),
        _no_schedule,
    ),
    "get_schedule": (lambda d, w: d.get_schedule(SCHEDULE, tenant_id=TENANT_B), _no_schedule),
    "pause_schedule": (
        lambda d, w: d.pause_schedule(SCHEDULE, tenant_id=TENANT_B),
        _no_schedule,
    ),
    "resume_schedule": (
        lambda d, w: d.resume_schedule(SCHEDULE, tenant_id=TENANT_B),
        _no_schedule,
    ),
    "trigger_schedule": (
        lambda d, w: d.trigger_schedule(SCHEDULE, tenant_id=TENANT_B),
        _no_schedule,
    ),
    "delete_schedule": (
        lambda d, w: d.delete_schedule(SCHEDULE, tenant_id=TENANT_B),
        _not_deleted,
    ),
    "list_schedules": (lambda d, w: d.list_schedules(tenant_id=TENANT_B), _no_schedules),
    # streams (docs/streams.md): B cannot follow A's run, and B's scope shows none of A's
    "stream": (lambda d, w: anext(d.stream(w.run_id, tenant_id=TENANT_B)), _not_found),
    "stream_scope": (lambda d, w: _scope_items(d, TENANT_B), _nothing_streamed),
}

#: Operations that name no tenant's data, and why.
FACADE_EXEMPT: dict[str, str] = {
    "open": "lifecycle of the Docket itself",
    "close": "lifecycle of the Docket itself",
    "worker": "workers serve every tenant; a lease carries its run's owner",
    "run_worker": "workers serve every tenant; a lease carries its run's owner",
    "drain_due": "drains whatever is due, in each run's own scope",
    "prune": "retention spans every tenant: an operator's operation by age, naming no data",
    "queues": "queues are namespace-wide: an operator's view of every queue, no tenant's data",
    "queue": "queues are namespace-wide: a queue's config names no tenant's data",
    "configure_queue": "queues are namespace-wide: an operator's setting",
    "pause_queue": "queues are namespace-wide: an operator's setting",
    "resume_queue": "queues are namespace-wide: an operator's setting",
    "admissions": "an operator's view of one queue's admission ledger, every tenant's starts "
    "(as the console's Queues page shows them); a tenant reads its own run with inspect_run",
}

# -- the store table ------------------------------------------------------------------------------


@dataclass
class StoreWorld:
    """Tenant A's data: a graph, and a claimed run with two events."""

    document: dict[str, Any]
    ref: GraphRef
    run: Run
    token: str


StoreCall = Callable[[Any, OwnerScope, StoreWorld], Awaitable[object]]


def _is(kind: type | tuple[type, ...]) -> Callable[[object], str | None]:
    def check(result: object) -> str | None:
        return None if isinstance(result, kind) else f"expected {kind}, got {result!r}"

    return check


def _empty_runs(result: object) -> str | None:
    return None if isinstance(result, RunPage) and not result.runs else f"got {result!r}"


def _empty_versions(result: object) -> str | None:
    ok = isinstance(result, GraphVersionPage) and not result.versions
    return None if ok else f"got {result!r}"


def _nothing(result: object) -> str | None:
    return None if result is None else f"expected None, got {result!r}"


def _abandon(world: StoreWorld) -> AbandonPolicy:
    return AbandonPolicy(
        expected_checkpoint_seq=world.run.checkpoint_seq,
        retry_at=world.run.started_at + timedelta(days=3650),
        max_claim_abandons=5,
    )


def _claimed_next(world: StoreWorld) -> tuple[Any, Any]:
    nxt = successor(world.run, world.run.started_at, new_events=1)
    return claimed(nxt, world.token), events_for(nxt, nxt.updated_at, [world.run.event_seq + 1])


def _unclaimed_next(world: StoreWorld) -> tuple[Any, Any]:
    nxt = successor(world.run, world.run.started_at, new_events=1)
    return unclaimed(nxt), events_for(nxt, nxt.updated_at, [world.run.event_seq + 1])


#: operation → (how another scope uses tenant A's ids, what it must answer).
STORE: dict[str, tuple[StoreCall, Callable[[object], str | None]]] = {
    # Per-scope graphs: the intruder publishing A's document makes its own copy.
    "graphs.save_graph": (
        lambda b, o, w: b.graphs.save_graph(o, w.ref, w.document),
        _is(GraphVersion),
    ),
    "graphs.fetch_graph": (lambda b, o, w: b.graphs.fetch_graph(o, w.ref), _is(NotFound)),
    "graphs.fetch_latest_graph_ref": (
        lambda b, o, w: b.graphs.fetch_latest_graph_ref(o, w.ref.graph_id),
        _is(NotFound),
    ),
    "graphs.list_graph_versions": (
        lambda b, o, w: b.graphs.list_graph_versions(o, w.ref.graph_id, GraphListQuery()),
        _empty_versions,
    ),
    "runs.fetch_run": (lambda b, o, w: b.runs.fetch_run(o, w.run.id), _is(NotFound)),
    "runs.inspect_run": (lambda b, o, w: b.runs.inspect_run(o, w.run.id), _is(NotFound)),
    "runs.list_runs": (lambda b, o, w: b.runs.list_runs(o, RunListQuery()), _empty_runs),
    "runs.refresh_claim": (
        lambda b, o, w: b.runs.refresh_claim(o, w.run.id, w.token),
        _is(ClaimLost),
    ),
    "runs.release_claim": (lambda b, o, w: b.runs.release_claim(o, w.run.id, w.token), _nothing),
    "runs.abandon_claim": (
        lambda b, o, w: b.runs.abandon_claim(o, w.run.id, w.token, _abandon(w)),
        _is(StaleAbandon),
    ),
    "runs.retry_poisoned_run": (
        lambda b, o, w: b.runs.retry_poisoned_run(o, w.run.id),
        _is(NotFound),
    ),
    "events.fetch_event": (lambda b, o, w: b.events.fetch_event(o, w.run.id, 1), _is(NotFound)),
    "events.fetch_latest_event": (
        lambda b, o, w: b.events.fetch_latest_event(o, w.run.id),
        _is(NotFound),
    ),
    "events.list_events": (
        lambda b, o, w: b.events.list_events(o, w.run.id, EventListQuery()),
        _is(NotFound),
    ),
    # A's graph is not in the intruder's scope, so a run of it cannot start there.
    "transitions.initialize": (
        lambda b, o, w: b.transitions.initialize(
            o, init_proposal(new_run(w.run.id, w.ref, w.run.started_at), w.run.started_at), []
        ),
        _is(NotFound),
    ),
    "transitions.commit_claimed": (
        lambda b, o, w: b.transitions.commit_claimed(o, *_claimed_next(w)),
        _is(NotFound),
    ),
    "transitions.commit_unclaimed": (
        lambda b, o, w: b.transitions.commit_unclaimed(
            o, w.run.checkpoint_seq, *_unclaimed_next(w)
        ),
        _is(NotFound),
    ),
}

STORE_EXEMPT: dict[str, str] = {
    "runs.claim_due": "takes no scope: it serves every tenant and each lease names its owner",
}


#: Operations that succeed in the caller's own scope (publishing a graph): they run last,
#: so that A's graph never exists in the intruder's scope while the others are checked.
OWN_SCOPE = {"save_graph", "graphs.save_graph"}


def _own_scope_last(item: tuple[str, object]) -> tuple[bool, str]:
    return item[0] in OWN_SCOPE, item[0]


def test_the_tables_cover_every_operation() -> None:
    facade = facade_operations()
    assert set(FACADE) | set(FACADE_EXEMPT) == facade, "a facade operation is not in the table"
    assert not set(FACADE) & set(FACADE_EXEMPT)
    for name in FACADE_EXEMPT:
        assert "tenant_id" not in inspect.signature(getattr(Docket, name)).parameters, name
    for name in FACADE:
        assert "tenant_id" in inspect.signature(getattr(Docket, name)).parameters, name
    # The blocking twin delegates to Docket: each of its tenant operations is one of these.
    for name, method in inspect.getmembers(SyncDocket, inspect.isfunction):
        if "tenant_id" in inspect.signature(method).parameters:
            assert name in FACADE, f"SyncDocket.{name} has no Docket twin in the table"
    store = store_operations()
    assert set(STORE) | set(STORE_EXEMPT) == store, "a store operation is not in the table"
    assert not set(STORE) & set(STORE_EXEMPT)


# -- the sweep ------------------------------------------------------------------------------------


async def _facade_view(docket: Docket, world: FacadeWorld) -> tuple[object, ...]:
    """Everything of A's, read as A and as the operator (all tenants)."""
    everyone = await docket.list_runs(all_tenants=True, limit=1000)
    schedules: object = None
    if Feature.SCHEDULES in docket.capabilities.features:
        schedules = await docket.get_schedule(SCHEDULE, tenant_id=TENANT_A)
    return (
        schedules,
        await docket.inspect_run(world.run_id, tenant_id=TENANT_A),
        await docket.history(world.run_id, tenant_id=TENANT_A),
        await docket.fetch_graph(world.ref, tenant_id=TENANT_A),
        await docket.list_graph_versions(world.ref.graph_id, tenant_id=TENANT_A),
        await docket.list_runs(tenant_id=TENANT_A),
        sorted(((s.id, s.tenant_id, s.checkpoint_seq) for s in everyone.runs), key=repr),
    )


def test_facade_operations_from_another_tenant_find_nothing(store: OpenStore) -> None:
    async def scenario() -> list[str]:
        docket = Docket(store.backend, nodes=NODES, tenant_mode="required")
        async with docket:
            ref = await docket.save_graph(fuzz_graph(), tenant_id=TENANT_A)
            run = await docket.start_run(
                ref, {"name": "a"}, run_id="shared-run-id", tenant_id=TENANT_A
            )
            await docket.drain_due()
            waiting = await docket.fetch_run(run.id, tenant_id=TENANT_A)
            assert waiting.status is RunStatus.WAITING and "question" in waiting.interrupts
            world = FacadeWorld(ref, run.id)
            if Feature.SCHEDULES in docket.capabilities.features:
                await docket.create_schedule(
                    SCHEDULE,
                    ref.graph_id,
                    cron="0 * * * *",
                    input={"name": "a"},
                    tenant_id=TENANT_A,
                    paused=True,
                )
            problems: list[str] = []
            for name, (call, check) in sorted(FACADE.items(), key=_own_scope_last):
                before = await _facade_view(docket, world)
                try:
                    result: object = await call(docket, world)
                except Exception as exc:  # the typed error is the expected answer
                    result = exc
                problem = check(result)
                if problem:
                    problems.append(f"{name}: {problem}")
                if await _facade_view(docket, world) != before:
                    problems.append(f"{name}: tenant A's data changed")
            return problems

    assert store.runner.run(scenario()) == []


async def _store_view(store: OpenStore, world: StoreWorld) -> tuple[object, ...]:
    b = store.backend
    a = Tenant(TENANT_A)
    everyone = await b.runs.list_runs(SYSTEM, RunListQuery(limit=1000))
    return (
        await b.runs.inspect_run(a, world.run.id),
        await b.events.list_events(a, world.run.id, EventListQuery(limit=1000)),
        await b.events.fetch_latest_event(a, world.run.id),
        await b.graphs.fetch_graph(a, world.ref),
        await b.graphs.list_graph_versions(a, world.ref.graph_id, GraphListQuery()),
        await b.runs.list_runs(a, RunListQuery()),
        sorted(((s.id, s.tenant_id, s.checkpoint_seq) for s in everyone.runs), key=repr),
    )


@pytest.mark.parametrize("intruder", [Tenant(TENANT_B), TENANTLESS], ids=["tenant-b", "tenantless"])
def test_store_operations_from_another_scope_find_nothing(
    store: OpenStore, intruder: OwnerScope
) -> None:
    async def scenario() -> list[str]:
        b = store.backend
        a = Tenant(TENANT_A)
        document = graph_document("isolated-graph")
        ref = graph_ref(document)
        assert isinstance(await b.graphs.save_graph(a, ref, document), GraphVersion)
        now = await b.now()
        run = new_run("shared-run-id", ref, now - timedelta(minutes=5), event_seq=2)
        events = events_for(run, run.started_at, [1, 2])
        started = await b.transitions.initialize(a, init_proposal(run, run.started_at), events)
        assert started == run, started
        policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(days=1), max_claim_attempts=5)
        batch = await b.runs.claim_due(policy)
        assert isinstance(batch, ClaimBatch) and len(batch.leases) == 1, batch
        assert batch.leases[0].owner == a
        world = StoreWorld(document, ref, run, batch.leases[0].claim_token)
        problems: list[str] = []
        for name, (call, check) in sorted(STORE.items(), key=_own_scope_last):
            before = await _store_view(store, world)
            try:
                result: object = await call(b, intruder, world)
            except Exception as exc:  # a store answers; it does not raise
                result = exc
            problem = check(result)
            if problem:
                problems.append(f"{name}: {problem}")
            if await _store_view(store, world) != before:
                problems.append(f"{name}: tenant A's data changed")
        # The claim is still A's, and A's own view was never disturbed.
        assert isinstance(await b.runs.refresh_claim(a, run.id, world.token), ClaimRefreshed)
        page = await b.events.list_events(a, run.id, EventListQuery())
        assert isinstance(page, EventPage) and [e.seq for e in page.events] == [1, 2]
        return problems

    assert store.runner.run(scenario()) == []
