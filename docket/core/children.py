"""Child runs, the pure part: identities, the parent link, and handing a child's end to
its parent.

A child node's attempt does not call code: it asks for a child run, and the parent parks
the task (``child_running``) until the child ends. Everything here is a pure function of
committed runs, so any process — the child's worker, the parent's worker on a recheck,
an operator's cancel — computes the same hand-off:

- :func:`child_run_id` derives the child's id from the parent's task, attempt and the
  checkpoint the attempt was planned from, so a replayed dispatch asks for the same child
  and an operator's retry of a failed parent (a new checkpoint) asks for a new one;
- :func:`child_outcome` reads a finished child as the attempt's outcome (``done`` → the
  ``output`` mapping as the node's update; ``failed`` → a retryable failure; ``cancelled``
  → a permanent one);
- :func:`deliver` settles that outcome into the parent's parked superstep, exactly as if
  the attempt had run under a claim: the moment it returns is committed with
  ``commit_unclaimed`` fenced on the parent's checkpoint, and once committed the task no
  longer waits for that child, so a second hand-off finds nothing to do (no output is
  applied twice).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Protocol

import attrs

from docket.core.errors import InvalidPolicy, UnusableRun
from docket.core.moment import Moment
from docket.core.outcomes import Completed, Failed, format_reason
from docket.core.plan import Dispatch, HostLimits, resumed_activations
from docket.core.settle import settle
from docket.graph.children import ChildSpec
from docket.graph.compiler import RuntimeGraph
from docket.records import PARENT_KEY, TASK_CHILD_RUNNING, Run, RunStatus, TaskState
from docket.values import JSONDict, JSONValue

__all__ = [
    "AttemptOf",
    "ParentLink",
    "awaited_children",
    "child_input",
    "child_outcome",
    "child_run_id",
    "deliver",
    "parent_link",
    "waiting_task",
]


def child_run_id(task_id: str, attempt: int, checkpoint_seq: int) -> str:
    """``<task>:<attempt>@<seq>``: the child of ``attempt`` of ``task`` planned from the
    parent's checkpoint ``checkpoint_seq``."""
    return f"{task_id}:{attempt}@{checkpoint_seq}"


@attrs.frozen(kw_only=True)
class ParentLink:
    """Where a child run reports its end: the parent run and the waiting task."""

    run_id: str
    task_id: str
    node_id: str
    attempt: int
    # the parent's pinned graph: a hand-off compiles it before reading the parent
    graph_id: str | None = None
    graph_hash: str | None = None

    def to_json(self) -> JSONDict:
        doc: JSONDict = {
            "run_id": self.run_id,
            "task_id": self.task_id,
            "node_id": self.node_id,
            "attempt": self.attempt,
        }
        if self.graph_id is not None and self.graph_hash is not None:
            doc["graph_id"], doc["graph_hash"] = self.graph_id, self.graph_hash
        return doc

    @classmethod
    def of(cls, run: Run) -> ParentLink | None:
        """The link a child run carries in its metadata (``None`` for a top-level run)."""
        raw = run.metadata.get(PARENT_KEY)
        if not isinstance(raw, dict):
            return None
        run_id, task_id, node_id, attempt = (
            raw.get("run_id"),
            raw.get("task_id"),
            raw.get("node_id"),
            raw.get("attempt"),
        )
        if not (isinstance(run_id, str) and isinstance(task_id, str) and isinstance(node_id, str)):
            return None
        if not isinstance(attempt, int) or isinstance(attempt, bool):
            return None
        graph_id, graph_hash = raw.get("graph_id"), raw.get("graph_hash")
        return cls(
            run_id=run_id,
            task_id=task_id,
            node_id=node_id,
            attempt=attempt,
            graph_id=graph_id if isinstance(graph_id, str) else None,
            graph_hash=graph_hash if isinstance(graph_hash, str) else None,
        )


def parent_link(parent: Run, task_id: str, node_id: str, attempt: int) -> JSONDict:
    """The child's metadata naming its parent."""
    link = ParentLink(
        run_id=parent.id,
        task_id=task_id,
        node_id=node_id,
        attempt=attempt,
        graph_id=parent.graph_id,
        graph_hash=parent.graph_hash,
    )
    return {PARENT_KEY: link.to_json()}


def child_input(spec: ChildSpec, snapshot: Mapping[str, JSONValue]) -> JSONDict:
    """The child's input: each mapped name read from the attempt's snapshot (a name the
    snapshot lacks is left out, so the child's own defaults and required checks apply)."""
    return {name: snapshot[source] for name, source in spec.input.items() if source in snapshot}


class AttemptOf(Protocol):
    """What names an attempt (a parked :class:`TaskState` or an ``Activation``)."""

    @property
    def task_id(self) -> str: ...
    @property
    def node_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...


def child_outcome(spec: ChildSpec, task: AttemptOf, child: Run) -> Completed | Failed | None:
    """The attempt's outcome once ``child`` has ended (``None`` while it has not)."""
    task_id, node_id, attempt = task.task_id, task.node_id, task.attempt
    details: JSONDict = {"child_run_id": child.id}
    match child.status:
        case RunStatus.DONE:
            output = child.output or {}
            update = {field: output.get(name) for field, name in spec.output.items()}
            return Completed(task_id=task_id, node_id=node_id, attempt=attempt, update=update)
        case RunStatus.FAILED:
            failure = child.failure
            text = "" if failure is None else f"{failure.code}: {failure.message}"
            if failure is not None:
                details["failure"] = {"code": failure.code, "message": failure.message}
            return Failed(
                reason=format_reason("child_failed", f"child run {child.id!r} failed: {text}"),
                retryable=True,
                details=details,
                task_id=task_id,
                node_id=node_id,
                attempt=attempt,
            )
        case RunStatus.CANCELLED:
            return Failed(
                reason=format_reason("child_cancelled", f"child run {child.id!r} was cancelled"),
                retryable=False,
                details=details,
                task_id=task_id,
                node_id=node_id,
                attempt=attempt,
            )
        case _:
            return None


def waiting_task(run: Run, child_run_id: str) -> TaskState | None:
    """The parked task of ``run`` waiting for ``child_run_id``, if any."""
    for task in run.active_tasks.values():
        if task.status == TASK_CHILD_RUNNING and task.metadata.get("child_run_id") == child_run_id:
            return task
    return None


def awaited_children(run: Run) -> dict[str, TaskState]:
    """Every child ``run`` waits for, by child run id."""
    out: dict[str, TaskState] = {}
    for task in run.active_tasks.values():
        ident = task.metadata.get("child_run_id")
        if task.status == TASK_CHILD_RUNNING and isinstance(ident, str):
            out[ident] = task
    return out


def deliver(
    rtg: RuntimeGraph,
    parent: Run,
    outcome: Completed | Failed,
    *,
    now: datetime,
    ids: Callable[[str], str],
    limits: HostLimits,
) -> Moment | UnusableRun | InvalidPolicy | None:
    """The parent's moment once the task ``outcome`` names has its child's outcome;
    ``None`` when the parent no longer waits for that attempt (already handed off,
    cancelled, failed, or another attempt)."""
    if parent.status is not RunStatus.RUNNING:
        return None
    task = parent.active_tasks.get(outcome.task_id)
    if task is None or task.status != TASK_CHILD_RUNNING or task.attempt != outcome.attempt:
        return None
    activations = resumed_activations(rtg, parent, [task], limits)
    if isinstance(activations, UnusableRun | InvalidPolicy):
        return activations
    dispatch = Dispatch(run=parent, activations=activations, now=now, resumed=True)
    return settle(rtg, dispatch, [outcome], now=now, ids=ids)
