"""A run's children as a person reads them (layer 3): which child runs a parent asked
for, and where each one stands.

Pure: the facade (:mod:`docket._facade_family`) reads the parent's events and the child
runs, and :func:`children_of` turns them into :class:`ChildInfo` entries. The parent's
history is the source — one ``child_started`` event per child it ever asked for, so a
failed attempt's child stays listed beside its retry's — and the parent's parked tasks
add the children it waits for now, in case their events were pruned. The other way
round, a child names its parent in its metadata (:meth:`ParentLink.of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from docket.core.children import ParentLink, awaited_children
from docket.records import (
    Event,
    EventType,
    InterruptState,
    InterruptStatus,
    Run,
    RunSummary,
)
from docket.values import JSONDict

__all__ = ["ChildInfo", "ChildStart", "ParentLink", "child_starts", "children_of"]


@attrs.frozen(kw_only=True)
class ChildStart:
    """One child the parent asked for: the attempt of ``task_id`` that runs it."""

    child_run_id: str
    task_id: str
    node_id: str
    attempt: int
    step: int


@attrs.frozen(kw_only=True)
class ChildInfo:
    """One child run of a parent, as :meth:`docket.Docket.children` reports it.

    ``run`` is the child's summary, or ``None`` while it does not exist yet (the parent
    committed the ask; the start follows that commit). ``awaited``: the parent's task
    still waits for this child (false once its outcome was handed over, or for an earlier
    attempt's child). ``open_interrupts``: the questions the child waits on, to answer on
    the child (``resolve_interrupt(child_run_id, ...)``).
    """

    child_run_id: str
    task_id: str
    node_id: str
    attempt: int
    step: int
    awaited: bool
    run: RunSummary | None
    open_interrupts: tuple[InterruptState, ...] = ()

    @property
    def status(self) -> str:
        """The child's status, or ``"not started"``."""
        return "not started" if self.run is None else str(self.run.status)

    def to_json(self) -> JSONDict:
        """The entry as ``docket runs show --json`` prints it (``children``)."""
        run = self.run
        return {
            "child_run_id": self.child_run_id,
            "task_id": self.task_id,
            "node_id": self.node_id,
            "attempt": self.attempt,
            "step": self.step,
            "awaited": self.awaited,
            "started": run is not None,
            "status": self.status,
            "checkpoint_seq": None if run is None else run.checkpoint_seq,
            "open_interrupts": [
                {
                    "id": i.id,
                    "node_id": i.node_id,
                    "resume_channel": i.resume_channel,
                    "schema": i.schema,
                    "metadata": i.metadata,
                }
                for i in self.open_interrupts
            ],
        }


def child_starts(parent: Run, events: Iterable[Event]) -> tuple[ChildStart, ...]:
    """Every child ``parent`` asked for, in the order it asked: its ``child_started``
    events, then the children its parked tasks wait for whose event is not among
    ``events`` (pruned). Each child once."""
    found: dict[str, ChildStart] = {}
    for event in events:
        if event.type is not EventType.CHILD_STARTED:
            continue
        ident, attempt = event.payload.get("child_run_id"), event.payload.get("attempt")
        if not isinstance(ident, str) or event.task_id is None or event.node_id is None:
            continue
        if not isinstance(attempt, int) or isinstance(attempt, bool):
            continue
        found.setdefault(
            ident,
            ChildStart(
                child_run_id=ident,
                task_id=event.task_id,
                node_id=event.node_id,
                attempt=attempt,
                step=event.step,
            ),
        )
    for ident, task in awaited_children(parent).items():
        found.setdefault(
            ident,
            ChildStart(
                child_run_id=ident,
                task_id=task.task_id,
                node_id=task.node_id,
                attempt=task.attempt,
                step=task.step,
            ),
        )
    return tuple(found.values())


def children_of(
    parent: Run,
    starts: Iterable[ChildStart],
    runs: Mapping[str, Run],
    tenant_id: str | None,
) -> tuple[ChildInfo, ...]:
    """Each start with its child run from ``runs`` (by child run id; missing = not
    started). A run with the child's id that does not name ``parent`` as its parent is
    not this child (its id was taken), so it counts as not started."""
    awaited = awaited_children(parent)
    out: list[ChildInfo] = []
    for start in starts:
        child = runs.get(start.child_run_id)
        link = None if child is None else ParentLink.of(child)
        if child is not None and (link is None or link.run_id != parent.id):
            child = None
        out.append(
            ChildInfo(
                child_run_id=start.child_run_id,
                task_id=start.task_id,
                node_id=start.node_id,
                attempt=start.attempt,
                step=start.step,
                awaited=start.child_run_id in awaited,
                run=None if child is None else RunSummary.of(child, tenant_id),
                open_interrupts=()
                if child is None
                else tuple(
                    i for i in child.interrupts.values() if i.status is InterruptStatus.OPEN
                ),
            )
        )
    return tuple(out)
