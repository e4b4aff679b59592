"""The facade's read of a run's children (:meth:`docket.Docket.children`).

It reads the parent, its ``child_started`` events and each child run, and hands them to
:func:`docket.core.family.children_of`. A parent whose graph has no child node is
answered from its document alone (no event scan), so the run page and ``runs show`` of
an ordinary run cost one read more, not a history walk.
"""

from __future__ import annotations

import asyncio
from typing import Final

from docket.contract import errors as contract
from docket.contract.proposals import EventListQuery
from docket.contract.protocols import Backend
from docket.core.family import ChildInfo, child_starts, children_of
from docket.errors import from_contract
from docket.graph.compiler import RuntimeGraph
from docket.records import Event, GraphRef, OwnerScope, Run, tenant_id_of
from docket.runtime.graphs import GraphCache

__all__ = ["read_children"]

_EVENT_PAGE: Final = 1000
#: child runs read at once (a map over a child node may have thousands)
_READS_AT_ONCE: Final = 8


async def read_children(
    store: Backend, graphs: GraphCache, owner: OwnerScope, run_id: str
) -> tuple[ChildInfo, ...]:
    """Every child run ``run_id`` asked for, in the order it asked (raises ``NotFound``)."""
    parent = await store.runs.fetch_run(owner, run_id)
    if isinstance(parent, contract.NotFound):
        raise from_contract(parent, subject=f"run {run_id!r}")
    events: list[Event] = []
    if await _may_have_children(graphs, owner, parent):
        after = 0
        while True:
            page = await store.events.list_events(
                owner, run_id, EventListQuery(after_seq=after, limit=_EVENT_PAGE)
            )
            if isinstance(page, contract.NotFound | contract.CorruptEventRow):
                raise from_contract(page, subject=f"run {run_id!r}")
            events.extend(page.events)
            if not page.has_more:
                break
            after = page.next_after_seq
    starts = child_starts(parent, events)
    gate = asyncio.Semaphore(_READS_AT_ONCE)

    async def fetch(ident: str) -> tuple[str, Run | None]:
        async with gate:
            found = await store.runs.fetch_run(owner, ident)
        return ident, None if isinstance(found, contract.NotFound) else found

    found = await asyncio.gather(*(fetch(s.child_run_id) for s in starts))
    runs = {ident: run for ident, run in found if run is not None}
    return children_of(parent, starts, runs, tenant_id_of(owner))


async def _may_have_children(graphs: GraphCache, owner: OwnerScope, run: Run) -> bool:
    """False only when the run's graph is known to have no child node (a graph that
    cannot be read is scanned: its history still says what it asked for)."""
    rtg = await graphs.get(owner, GraphRef(run.graph_id, run.graph_hash))
    if not isinstance(rtg, RuntimeGraph):
        return True
    return rtg.has_children
