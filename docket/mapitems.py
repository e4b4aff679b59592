"""What a run's map nodes are doing: each item of a map's latest superstep and its state.

(layer 7) :func:`map_progress` is pure: it reads only the run document, its events and
(when it can be read) the run's graph, so ``docket runs show`` and the console's run page
say the same thing (docs/console.md, "Maps"). :func:`read_map_progress` gathers those
through the facade.

Where each state comes from (docs/execution.md, "Maps"):

* **done** — a ``node_completed`` event with payload ``item`` (the step committed), or a
  pending write of the current superstep (the item finished; a sibling holds the barrier);
* **failed** — the run failed at this superstep and ``failure.details.items`` (or a
  permanent ``node_failed`` event) names the item;
* **retrying** — a parked task in ``run.active_tasks``; its timer says when it is due;
* **interrupt** — the item's ``interrupt_requested`` event names an interrupt still open
  (or the item's interrupt request waits as a pending write);
* **pending** — none of those: not run yet, running now (nothing durable says so until
  the superstep settles), or its work was dropped (a sibling's interrupt, or the run
  failed) and it runs again when the run goes on. A map the running run has activated
  but whose items have no record yet shows every item pending, over the list its
  superstep reads.

Only the latest superstep in which a map node has a record is shown: a map inside a loop
runs again at every turn, and the older turns are history (``runs events`` has them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Final

import attrs

from docket import errors
from docket.graph.model import FieldKind, Graph
from docket.records import (
    Event,
    EventType,
    GraphRef,
    InterruptStatus,
    Run,
    RunStatus,
    WriteKind,
    format_timestamp,
    item_index,
)
from docket.values import JSONDict, JSONValue

if TYPE_CHECKING:
    from docket.facade import Docket

__all__ = [
    "MAP_EVENTS",
    "ItemState",
    "MapItem",
    "MapProgress",
    "map_progress",
    "read_map_progress",
]

#: The most recent events :func:`read_map_progress` reads (a map's latest superstep is
#: at the end of the timeline; 10,000 items, the default ceiling, fit with their retries).
MAP_EVENTS: Final = 30_000
_PAGE: Final = 1000


class ItemState(StrEnum):
    DONE = "done"
    FAILED = "failed"
    RETRYING = "retrying"
    INTERRUPT = "interrupt"
    PENDING = "pending"


@attrs.frozen(kw_only=True)
class MapItem:
    """One item of a map node's superstep.

    ``attempt`` is the attempt that finished (done), failed (failed), or comes next
    (retrying); ``reason`` the latest failure's reason; ``retry_at`` when a retrying item
    is due; ``interrupt_id`` the open interrupt it asked (``None`` while the request
    still waits at the barrier).
    """

    index: int
    task_id: str
    state: ItemState
    attempt: int | None = None
    reason: str | None = None
    retry_at: datetime | None = None
    interrupt_id: str | None = None

    def to_json(self) -> JSONDict:
        return {
            "index": self.index,
            "task_id": self.task_id,
            "state": str(self.state),
            "attempt": self.attempt,
            "reason": self.reason,
            "retry_at": None if self.retry_at is None else format_timestamp(self.retry_at),
            "interrupt_id": self.interrupt_id,
        }


@attrs.frozen(kw_only=True)
class MapProgress:
    """A map node's items in superstep ``step`` (``None``: the node has not run yet).

    ``total`` is the number of items (``None`` when nothing says how many); ``items`` has
    one entry per index ``0 .. total - 1`` when ``total`` is known, else those on record.
    """

    node_id: str
    over: str | None
    step: int | None
    total: int | None
    items: tuple[MapItem, ...] = ()

    def counts(self) -> dict[str, int]:
        """Items per state, in :class:`ItemState` order, states with none left out."""
        out = {str(s): sum(1 for i in self.items if i.state is s) for s in ItemState}
        return {k: v for k, v in out.items() if v}

    def unfinished(self) -> tuple[MapItem, ...]:
        return tuple(i for i in self.items if i.state is not ItemState.DONE)

    def to_json(self) -> JSONDict:
        items: list[JSONValue] = [i.to_json() for i in self.items]
        return {
            "node_id": self.node_id,
            "over": self.over,
            "step": self.step,
            "total": self.total,
            "counts": dict[str, JSONValue](self.counts()),
            "items": items,
        }


def map_progress(run: Run, events: Iterable[Event], graph: Graph | None) -> tuple[MapProgress, ...]:
    """Each map node of ``run`` (by id) with the items of its latest superstep.

    ``graph`` names the map nodes and their ``over`` fields; without it (it could not be
    read) the map nodes are those whose tasks carry an item index in ``events`` or the
    run document. ``events`` may be any suffix of the timeline (retention, paging).
    """
    seen = list(events)
    maps: dict[str, str | None] = {}
    if graph is not None:
        for node_id, node in graph.nodes.items():
            if node.map:
                over = node.map.get("over")
                maps[node_id] = over if isinstance(over, str) else None
    else:
        tasks: list[tuple[str | None, str | None]] = [(e.node_id, e.task_id) for e in seen]
        tasks += [(t.node_id, t.task_id) for t in run.active_tasks.values()]
        tasks += [(w.node_id, w.task_id) for w in run.pending_writes]
        for owner, task in tasks:
            if owner is not None and task is not None and item_index(task) is not None:
                maps.setdefault(owner, None)
    return tuple(_one(run, seen, graph, n, maps[n]) for n in sorted(maps))


_ITEM_EVENTS: Final = frozenset(
    {EventType.NODE_COMPLETED, EventType.NODE_FAILED, EventType.INTERRUPT_REQUESTED}
)


def _failed_items(run: Run, node_id: str) -> set[int]:
    if run.status is not RunStatus.FAILED or run.failure is None:
        return set()
    items = run.failure.details.get("items")
    listed = items.get(node_id) if isinstance(items, dict) else None
    return {i for i in listed if isinstance(i, int)} if isinstance(listed, list) else set()


def _current(run: Run, graph: Graph | None, node_id: str) -> bool:
    """Whether ``node_id`` works in the run's current superstep: the run document holds
    some of its items' work, or it is activated there (and may be running right now)."""
    return (
        any(t.node_id == node_id for t in run.active_tasks.values())
        or any(w.node_id == node_id for w in run.pending_writes)
        or bool(_failed_items(run, node_id))
        or _activated(run, graph, node_id)
    )


def _activated(run: Run, graph: Graph | None, node_id: str) -> bool:
    """A running run plans ``node_id`` for its current superstep: as the core plans it,
    an edge into it fired (its channel ``edge:<id>`` changed) or it waits to run again
    after an answer (``pending_nodes``), and no open interrupt of its own pauses it."""
    if graph is None or run.status is not RunStatus.RUNNING:
        return False
    if any(
        i.node_id == node_id and i.status is InterruptStatus.OPEN for i in run.interrupts.values()
    ):
        return False
    return node_id in run.pending_nodes or any(
        f"edge:{edge_id}" in run.changed_channels
        for edge_id, edge in graph.edges.items()
        if edge.target == node_id
    )


def _one(
    run: Run, events: Sequence[Event], graph: Graph | None, node_id: str, over: str | None
) -> MapProgress:
    mine = [e for e in events if e.node_id == node_id and e.task_id and e.type in _ITEM_EVENTS]
    steps = {e.step for e in mine} | ({run.step} if _current(run, graph, node_id) else set())
    if not steps:
        return MapProgress(node_id=node_id, over=over, step=None, total=None)
    step = max(steps)
    # a retried failed run reruns the same superstep: what came before the retry is over
    retried = max(
        (e.seq for e in events if e.type is EventType.RUN_RETRIED and e.step == step), default=0
    )
    seen = _Seen()
    seen.read_events(e for e in mine if e.step == step and e.seq > retried)
    if step == run.step:
        seen.read_document(run, node_id)
    known = seen.indexes()
    if seen.empty:
        total: int | None = 0
    elif seen.committed:  # the node completed in that step: every item did
        total = max(known, default=-1) + 1
    else:
        listed = _list_value(run, graph, over)
        total = None if listed is None else max(listed, max(known, default=-1) + 1)
    prefix = f"{run.id}:{step}:{node_id}"
    items = tuple(
        seen.item(run, node_id, index, f"{prefix}[{index}]")
        for index in (range(total) if total is not None else sorted(known))
    )
    return MapProgress(node_id=node_id, over=over, step=step, total=total, items=items)


@attrs.define
class _Seen:
    """What the events and the run document say about one superstep's items."""

    done: dict[int, int | None] = attrs.Factory(dict)  # index -> the attempt that finished
    failures: dict[int, tuple[int | None, str | None, bool]] = attrs.Factory(dict)
    asked: dict[int, str | None] = attrs.Factory(dict)  # index -> interrupt id
    opening: set[int] = attrs.Factory(set)  # asked, the request still at the barrier
    retrying: dict[int, MapItem] = attrs.Factory(dict)
    failed: set[int] = attrs.Factory(set)
    empty: bool = False  # a map over an empty list completed
    committed: bool = False  # the superstep committed the node's results

    def read_events(self, events: Iterable[Event]) -> None:
        for e in events:
            index = item_index(e.task_id or "")
            attempt = e.payload.get("attempt")
            tried = attempt if isinstance(attempt, int) else None
            if e.type is EventType.NODE_COMPLETED:
                self.committed = True
                if index is None:
                    self.empty = e.payload.get("items") == 0
                else:
                    self.done[index] = tried
            elif index is None:
                continue
            elif e.type is EventType.NODE_FAILED:
                reason = e.payload.get("reason")
                permanent = e.payload.get("permanent") is True
                self.failures[index] = (
                    tried,
                    reason if isinstance(reason, str) else None,
                    permanent,
                )
            else:
                ident = e.payload.get("interrupt_id")
                self.asked[index] = ident if isinstance(ident, str) else None

    def read_document(self, run: Run, node_id: str) -> None:
        """The current superstep's pending writes, parked tasks and failure."""
        for write in run.pending_writes:
            if write.node_id != node_id or (index := item_index(write.task_id)) is None:
                continue
            if write.kind is WriteKind.INTERRUPT:  # not opened yet: the barrier opens it
                ident = write.value.get("id")
                self.asked[index] = ident if isinstance(ident, str) and ident else None
                self.opening.add(index)
            else:
                self.done[index] = write.attempt
        for task in run.active_tasks.values():
            if task.node_id != node_id or (index := item_index(task.task_id)) is None:
                continue
            timer = run.timers.get(task.task_id)
            self.retrying[index] = MapItem(
                index=index,
                task_id=task.task_id,
                state=ItemState.RETRYING,
                attempt=task.attempt,
                reason=task.failures[-1].reason if task.failures else None,
                retry_at=None if timer is None else timer.fires_at,
            )
        self.failed = _failed_items(run, node_id)
        if run.status is RunStatus.FAILED:
            self.failed |= {i for i, (_, _, permanent) in self.failures.items() if permanent}

    def indexes(self) -> set[int]:
        return {*self.done, *self.failures, *self.asked, *self.retrying, *self.failed}

    def item(self, run: Run, node_id: str, index: int, task_id: str) -> MapItem:
        """The item's state: done, else failed, retrying, waiting on an interrupt, pending."""
        tried, reason, _ = self.failures.get(index, (None, None, False))
        if index in self.done:
            return MapItem(
                index=index, task_id=task_id, state=ItemState.DONE, attempt=self.done[index]
            )
        if index in self.failed:
            if reason is None and run.failure is not None:  # its event is gone (retention)
                said_by_node = run.failure.details.get("errors")
                said = said_by_node.get(node_id) if isinstance(said_by_node, dict) else None
                reason = said if isinstance(said, str) else None
            return MapItem(
                index=index, task_id=task_id, state=ItemState.FAILED, attempt=tried, reason=reason
            )
        if index in self.retrying:
            return self.retrying[index]
        if index in self.opening or (index in self.asked and _is_open(run, self.asked[index])):
            return MapItem(
                index=index,
                task_id=task_id,
                state=ItemState.INTERRUPT,
                interrupt_id=self.asked[index],
            )
        return MapItem(
            index=index, task_id=task_id, state=ItemState.PENDING, attempt=tried, reason=reason
        )


def _is_open(run: Run, interrupt_id: str | None) -> bool:
    found = None if interrupt_id is None else run.interrupts.get(interrupt_id)
    return found is not None and found.status is InterruptStatus.OPEN


def _list_value(run: Run, graph: Graph | None, over: str | None) -> int | None:
    """How many items the ``over`` list holds in the run's committed state (what the
    map's unfinished superstep runs over: state only changes when a superstep commits)."""
    field = None if graph is None or over is None else graph.field(over)
    if field is None:
        return None
    prefix = "input" if field.kind is FieldKind.INPUT else "state"
    channel = run.channels.get(f"{prefix}:{field.id}")
    value = channel.value if channel is not None and channel.version > 0 else field.default
    return len(value) if isinstance(value, list) else None


async def read_map_progress(
    docket: Docket, run: Run, *, tenant_id: str | None = None, graph: Graph | None = None
) -> tuple[MapProgress, ...]:
    """:func:`map_progress` of ``run``, reading its graph (unless given) and its latest
    :data:`MAP_EVENTS` events; a graph without map nodes reads no events."""
    if graph is None:
        try:
            graph = await docket.fetch_graph(
                GraphRef(run.graph_id, run.graph_hash), tenant_id=tenant_id
            )
        except (errors.NotFound, errors.CorruptData):
            graph = None  # the events still show which nodes ran items
    if graph is not None and not any(n.map for n in graph.nodes.values()):
        return ()
    events: list[Event] = []
    after = max(0, run.event_seq - MAP_EVENTS)
    while True:
        page = await docket.list_events(run.id, after_seq=after, limit=_PAGE, tenant_id=tenant_id)
        events.extend(page.events)
        if not page.has_more or not page.events:
            break
        after = page.next_after_seq
    return map_progress(run, events, graph)
