"""The facade's reads: which graph version a call means and its runtime graph, pages of
runs and events, and waiting for a run to settle.

:class:`~docket.facade.Docket` keeps the methods (their docstrings and signatures are
the public API, mirrored by the blocking twin); each resolves the tenant and checks that
the Docket is open, then hands its arguments here, so the checks run in the same order
and a refused call still reads nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import assert_never

from docket import errors
from docket._facade_args import parse_statuses, require_limit, require_ref, seconds_ok
from docket.contract import errors as contract
from docket.contract.proposals import EventListQuery, RunListQuery
from docket.contract.protocols import Backend
from docket.errors import (
    AwaitTimeout,
    CorruptData,
    GraphMismatch,
    InvalidGraph,
    InvalidOptions,
    RunPoisoned,
    from_contract,
)
from docket.graph.compiler import RuntimeGraph
from docket.records import EventPage, GraphRef, OwnerScope, Run, RunCursor, RunStatus
from docket.runtime.graphs import GraphCache

__all__ = ["await_settled", "event_page", "resolve_ref", "run_query", "runtime_graph"]


async def resolve_ref(store: Backend, owner: OwnerScope, graph: GraphRef | str) -> GraphRef:
    """``graph`` itself, or the latest version of the graph id it names."""
    if isinstance(graph, str):
        if not graph:
            raise InvalidOptions("a graph id must be a non-empty string")
        found = await store.graphs.fetch_latest_graph_ref(owner, graph)
        if isinstance(found, contract.NotFound):
            raise from_contract(found, subject=f"graph {graph!r}")
        return found
    require_ref(graph)
    return graph


async def runtime_graph(describe: GraphCache, owner: OwnerScope, ref: GraphRef) -> RuntimeGraph:
    """The runtime graph of ``ref`` (compiled once per cache), or the typed error that
    says why there is none."""
    compiled = await describe.get(owner, ref)
    if isinstance(compiled, RuntimeGraph):
        return compiled
    about = f"{ref.graph_id} ({ref.graph_hash[:12]})"
    match compiled.kind:
        case "missing":
            raise errors.NotFound(f"no such graph {about}", details={"what": "graph"})
        case "mismatch":
            raise GraphMismatch(compiled.message, details=compiled.details())
        case "corrupt":
            raise CorruptData(compiled.message)
        case "invalid":
            raise InvalidGraph(compiled.message, details=compiled.details())
        case _:
            assert_never(compiled.kind)


async def await_settled(
    store: Backend, owner: OwnerScope, run_id: str, *, timeout: float, poll_interval: float
) -> Run:
    """Poll until the run waits or ends (``Docket.await_run``)."""
    if not seconds_ok(timeout, zero=True):
        raise InvalidOptions(f"timeout must be >= 0 seconds, got {timeout!r}")
    if not seconds_ok(poll_interval, zero=False):
        raise InvalidOptions(f"poll_interval must be > 0 seconds, got {poll_interval!r}")
    deadline = time.monotonic() + timeout
    while True:
        info = await store.runs.inspect_run(owner, run_id)
        if isinstance(info, contract.NotFound):
            raise from_contract(info, subject=f"run {run_id!r}")
        if info.poisoned:
            raise RunPoisoned(
                f"run {run_id!r} is poisoned ({info.poison_reason})",
                info,
                details={"poison_reason": info.poison_reason},
            )
        if info.run.status is RunStatus.WAITING or info.run.status.terminal:
            return info.run
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AwaitTimeout(
                f"run {run_id!r} is still {info.run.status} after {timeout} s",
                details={"status": str(info.run.status)},
            )
        await asyncio.sleep(min(poll_interval, remaining))


def run_query(
    *,
    limit: int,
    before: RunCursor | None,
    status: RunStatus | str | Iterable[RunStatus | str] | None,
    graph_id: str | None,
    graph_hash: str | None,
) -> RunListQuery:
    """The store query of ``Docket.list_runs``, its arguments checked."""
    require_limit(limit)
    if before is not None and not isinstance(before, RunCursor):
        raise InvalidOptions("before must be a RunCursor (a page's next_before)")
    for name, value in (("graph_id", graph_id), ("graph_hash", graph_hash)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InvalidOptions(f"{name} must be a non-empty string")
    return RunListQuery(
        limit=limit,
        before=before,
        graph_id=graph_id,
        graph_hash=graph_hash,
        statuses=parse_statuses(status),
    )


async def event_page(
    store: Backend, owner: OwnerScope, run_id: str, *, after_seq: int, limit: int
) -> EventPage:
    """One page of ``Docket.list_events``, its arguments checked."""
    require_limit(limit)
    if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
        raise InvalidOptions(f"after_seq must be an integer >= 0, got {after_seq!r}")
    page = await store.events.list_events(
        owner, run_id, EventListQuery(after_seq=after_seq, limit=limit)
    )
    if isinstance(page, contract.NotFound | contract.CorruptEventRow):
        raise from_contract(page, subject=f"run {run_id!r}")
    return page
