"""The terminal moments a run can reach by itself: completion and failure.

Completion is quiescence: when the next plan finds nothing to run and no open interrupt,
a separate ``run_completed`` moment projects the outputs. Every failure (a node failing
permanently, the superstep limit, a guard that cannot be evaluated, a corrupted policy or
parked task) goes through :func:`failure_moment`: the active superstep is discarded,
channels and step stay as they were, and the last runtime event is ``run_failed``.

One exception: a node failure (:func:`superstep_failure`) keeps the pending writes of the
siblings that finished in the failed superstep, so that an operator's retry
(:mod:`docket.core.reopen`) runs only the nodes that did not finish. Nothing of them
commits while the run is failed; they commit at the barrier of the retried superstep.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import attrs

from docket.core.captured import (
    FAILURE_DETAILS_BUDGET,
    FAILURE_TRACEBACK_BUDGET,
    MAX_FAILURE_NODES,
    ErrorInfo,
    bound_details,
)
from docket.core.errors import CoreError
from docket.core.moment import Entry, Moment, Park, ParkReason, propose
from docket.core.plan import work_order
from docket.core.state import project_outputs
from docket.graph.compiler import RuntimeGraph
from docket.proposals import Terminal
from docket.records import (
    CheckpointType,
    EventType,
    PendingWrite,
    Run,
    RunFailure,
    RunStatus,
    item_index,
)
from docket.values import JSONDict, JSONValue

__all__ = [
    "AttemptFailure",
    "completion_moment",
    "error_failure",
    "failure_moment",
    "node_failed_entry",
    "superstep_failure",
]


@attrs.frozen(kw_only=True)
class AttemptFailure:
    """One failed attempt, as reported in ``node_failed`` events: its reason, and what
    went wrong when it is known (the exception raised, the node's ``Failure`` details)."""

    node_id: str
    task_id: str
    attempt: int
    reason: str
    error: ErrorInfo | None = None
    details: JSONDict | None = None


def node_failed_entry(failure: AttemptFailure, step: int, *, permanent: bool) -> Entry:
    """``node_failed`` with ``attempt``, ``reason``, ``permanent`` and, when known,
    ``error`` (type, message, traceback) and ``details``."""
    payload: JSONDict = {
        "attempt": failure.attempt,
        "reason": failure.reason,
        "permanent": permanent,
    }
    if failure.error is not None:
        payload["error"] = failure.error.to_json()
    if failure.details:
        payload["details"] = failure.details
    return Entry(
        type=EventType.NODE_FAILED,
        step=step,
        node_id=failure.node_id,
        task_id=failure.task_id,
        payload=payload,
    )


def completion_moment(rtg: RuntimeGraph, run: Run, now: datetime) -> Moment:
    """``done``: outputs projected from the effective channel values; step unchanged."""
    done = attrs.evolve(
        run,
        status=RunStatus.DONE,
        output=project_outputs(rtg, run.channels),
        finished_at=now,
        updated_at=now,
    )
    outputs: list[JSONValue] = list(sorted(rtg.outputs))
    entry = Entry(type=EventType.RUN_COMPLETED, step=run.step, payload={"outputs": outputs})
    return propose(
        done,
        CheckpointType.RUN_COMPLETED,
        [entry],
        Park(Terminal(), ParkReason.RUN_COMPLETED),
        now,
    )


def failure_moment(
    run: Run,
    failure: RunFailure,
    now: datetime,
    entries: Sequence[Entry] = (),
    *,
    kept: Sequence[PendingWrite] = (),
    new_writes: Sequence[PendingWrite] = (),
) -> Moment:
    """``failed`` with ``failure``; ``entries`` precede the final ``run_failed`` event.

    ``kept`` are the pending writes the failed run holds for a retry (only a node failure
    keeps any); ``new_writes`` are those of them this moment created (for the envelope).
    """
    failed = attrs.evolve(
        run,
        status=RunStatus.FAILED,
        failure=failure,
        output=None,
        finished_at=now,
        updated_at=now,
        active_tasks={},
        pending_writes=tuple(kept),
        timers={},
    )
    payload: JSONDict = {**failure.details, "reason": failure.code, "message": failure.message}
    last = Entry(type=EventType.RUN_FAILED, step=run.step, node_id=failure.node_id, payload=payload)
    return propose(
        failed,
        CheckpointType.RUN_FAILED,
        [*entries, last],
        Park(Terminal(), ParkReason.RUN_FAILED),
        now,
        new_writes=new_writes,
    )


def error_failure(error: CoreError) -> RunFailure:
    """The run failure recorded for a typed core error (its code, message and details)."""
    return RunFailure(
        code=error.code, message=error.message, node_id=error.node_id, details=error.details
    )


def superstep_failure(
    run: Run,
    retried: Sequence[AttemptFailure],
    permanent: Sequence[AttemptFailure],
    now: datetime,
    writes: Sequence[PendingWrite] = (),
) -> Moment:
    """A superstep with at least one permanent failure: no write of it commits.

    The results of the siblings that finished (``writes`` of this dispatch, and the run's
    pending writes from earlier attempts of the superstep), except those of the failed
    nodes, stay on the failed run as pending writes, ordered by node as a retry park
    orders them; every unfinished task (failed, or parked for a retry) is dropped, to be
    planned afresh by a retry.

    Events: ``node_failed`` (not permanent) for each attempt that would have been retried,
    then ``node_failed`` (permanent) for each permanent failure, then ``run_failed``.
    """
    nodes = sorted({f.node_id for f in permanent})
    ordered = sorted(permanent, key=lambda f: work_order(f.node_id, f.task_id))
    errors: JSONDict = {}
    for f in ordered:  # a map's first failed item speaks for its node
        errors.setdefault(f.node_id, f.reason)
    label = f"node {nodes[0]}" if len(nodes) == 1 else f"nodes {', '.join(nodes)}"
    details: JSONDict = {"nodes": list[JSONValue](nodes), "errors": errors}
    items: dict[str, list[JSONValue]] = {}
    for f in ordered:
        if (index := item_index(f.task_id)) is not None:
            items.setdefault(f.node_id, []).append(index)
    if items:  # only when a map item failed, so other failures keep their documents
        details["items"] = dict[str, JSONValue](items)
    details.update(_what_went_wrong(ordered))
    failure = RunFailure(
        code="node_failed",
        message=f"{label} failed permanently",
        node_id=nodes[0] if len(nodes) == 1 else None,
        details=details,
    )
    entries = [
        *(node_failed_entry(f, run.step, permanent=False) for f in retried),
        *(node_failed_entry(f, run.step, permanent=True) for f in permanent),
    ]
    # a failed task's own write (one the barrier rejected) is never kept: it runs again
    # (a failed map item drops only its own write; its finished siblings' stay)
    nodes_out = {f.node_id for f in permanent if item_index(f.task_id) is None}
    tasks_out = {f.task_id for f in permanent}

    def keep(write: PendingWrite) -> bool:
        return write.node_id not in nodes_out and write.task_id not in tasks_out

    new_writes = sorted(filter(keep, writes), key=_write_order)
    kept = sorted(filter(keep, (*run.pending_writes, *new_writes)), key=_write_order)
    return failure_moment(run, failure, now, entries, kept=kept, new_writes=new_writes)


def _write_order(write: PendingWrite) -> tuple[str, int]:
    return work_order(write.node_id, write.task_id)


def _what_went_wrong(ordered: Sequence[AttemptFailure]) -> JSONDict:
    """``exceptions`` and ``details`` (node -> value) of the permanent failures that have
    them, each key only when not empty, so failures without either keep their documents.
    At most ``MAX_FAILURE_NODES`` nodes, sharing the failure budgets (see captured)."""
    raised = [f for f in ordered if f.error is not None][:MAX_FAILURE_NODES]
    told = [f for f in ordered if f.details][:MAX_FAILURE_NODES]
    out: JSONDict = {}
    if raised:
        share = FAILURE_TRACEBACK_BUDGET // len(raised)
        out["exceptions"] = {
            f.node_id: f.error.clipped(share).to_json() for f in raised if f.error is not None
        }
    if told:
        share = FAILURE_DETAILS_BUDGET // len(told)
        out["details"] = {f.node_id: bound_details(dict(f.details or {}), share) for f in told}
    return out
