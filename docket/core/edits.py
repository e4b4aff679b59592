"""Operator changes to state: editing a live or failed run, and forking a run from a past
checkpoint. Both are pure functions of committed data returning a moment.

A patch maps public state-field ids to *new values* (they replace the field; reducers are
not applied: an operator states what the field should hold). Values must be durable and
fit the field's schema; inputs and unknown names are refused. Every problem is reported
together and nothing is written (:class:`~docket.core.errors.InvalidInput`).

**Edit** (``update_state``): a waiting or running run stays as it was (same status, same
wake: a waiting run still waits, a parked attempt is still parked) with the fields
replaced; a failed run stays failed, ready for ``retry_run`` with the corrected state.
The edited fields do not count as changed by a step (no node is triggered by an edit).
One ``state_edited`` event records the fields and the operator's reason.

**Fork**: a new run pinned to the same graph version, initialized with the channels,
step, changed channels and pending nodes the source had at the checkpoint (patched), so
its first superstep is the one that was due after that checkpoint. Attempts in flight at
the checkpoint start afresh (their pending writes are not carried over). The new run's
metadata names its source (``docket.forked_from``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from docket.core.errors import InvalidInput, TerminalRun, UnusableRun
from docket.core.history import Rebuilt
from docket.core.moment import Continue, Entry, Moment, Park, ParkReason, propose
from docket.core.reopen import check_reason
from docket.core.waits import resting_wake
from docket.graph.compiler import ChannelKind, RuntimeGraph
from docket.graph.schema import validate
from docket.proposals import Terminal
from docket.records import (
    FORKED_FROM_KEY,
    ChannelState,
    CheckpointType,
    EventType,
    Run,
    RunStatus,
)
from docket.values import JSONDict, JSONValue, NonDurableValue, coerce_durable

__all__ = ["check_patch", "edit_state", "fork_run"]


def check_patch(rtg: RuntimeGraph, patch: object, *, phase: str) -> JSONDict | InvalidInput:
    """The coerced patch, or every reason it is refused (unknown or input fields, values
    that are not durable or do not fit their field's schema), sorted by field."""
    if not isinstance(patch, Mapping):
        problem = f"a patch must be a map of field -> value, got {type(patch).__name__}"
        return InvalidInput(problem, phase=phase, details={"reasons": [problem]})
    try:
        coerced = coerce_durable(patch, "patch")
    except NonDurableValue as exc:
        return InvalidInput(
            "the patch is not durable", phase=phase, details={"reasons": list(exc.reasons)}
        )
    assert isinstance(coerced, dict)
    fields = {c.public_id: c for c in rtg.channels.values() if c.kind is ChannelKind.STATE}
    inputs = {c.public_id for c in rtg.channels.values() if c.kind is ChannelKind.INPUT}
    reasons: list[JSONValue] = []
    for key in sorted(coerced):
        channel = fields.get(key)
        if channel is None:
            why = "an input (inputs are fixed at start)" if key in inputs else "not a state field"
            reasons.append(f'"{key}" is {why}')
        elif channel.schema is not None and coerced[key] is not None:
            reasons.extend(validate(channel.schema, coerced[key], f'field "{key}"'))
    if not coerced:
        reasons.append("the patch changes no field")
    if reasons:
        return InvalidInput("the patch is invalid", phase=phase, details={"reasons": reasons})
    return coerced


def _patched(channels: Mapping[str, ChannelState], patch: JSONDict) -> dict[str, ChannelState]:
    out = dict(channels)
    for key, value in sorted(patch.items()):
        cid = f"state:{key}"
        old = out.get(cid)
        out[cid] = ChannelState(
            channel_id=cid,
            value=value,
            version=1 if old is None else old.version + 1,
            barrier_seen=() if old is None else old.barrier_seen,
        )
    return out


def _updates(patch: JSONDict, step: int) -> list[Entry]:
    return [
        Entry(
            type=EventType.CHANNEL_UPDATED,
            step=step,
            channel_id=f"state:{key}",
            payload={"writers": ["$operator"]},
        )
        for key in sorted(patch)
    ]


def edit_state(
    rtg: RuntimeGraph, run: Run, patch: object, *, reason: str | None, now: datetime
) -> Moment | InvalidInput | TerminalRun | UnusableRun:
    """The moment replacing ``patch``'s fields of ``run`` (waiting, running or failed).

    Checked in order: the reason, the run's status (done or cancelled: ``TerminalRun``;
    never initialized: ``UnusableRun``), the patch. Whether a *running* run may be edited
    (only when no worker can be changing it, e.g. poisoned) is the caller's decision.
    """
    bad = check_reason(reason)
    if bad is not None:
        return InvalidInput(bad.message.replace("retry", "edit"), phase="edit", details=bad.details)
    if run.status in (RunStatus.DONE, RunStatus.CANCELLED):
        return TerminalRun(
            f"run {run.id!r} is {run.status}; fork it to change its state",
            phase="edit",
            details={"status": str(run.status)},
        )
    if run.status is RunStatus.CREATED:
        return UnusableRun(f"run {run.id!r} was never initialized", phase="edit")
    checked = check_patch(rtg, patch, phase="edit")
    if isinstance(checked, InvalidInput):
        return checked
    fields: list[JSONValue] = list(sorted(checked))
    payload: JSONDict = {"fields": fields, "previous_status": str(run.status)}
    if reason is not None:
        payload["reason"] = reason
    entries = [Entry(type=EventType.STATE_EDITED, step=run.step, payload=payload)]
    entries += _updates(checked, run.step)
    changes = {"channels": _patched(run.channels, checked), "updated_at": max(now, run.updated_at)}
    if run.status is RunStatus.FAILED:
        return propose(
            run,
            CheckpointType.RUN_FAILED,
            entries,
            Park(Terminal(), ParkReason.STATE_EDITED),
            now,
            changes=changes,
        )
    return propose(
        run,
        CheckpointType.INTERRUPT_RESOLVED,  # outside input recorded, nothing ran
        entries,
        Park(resting_wake(run, now), ParkReason.STATE_EDITED),
        now,
        changes=changes,
    )


def fork_run(
    rtg: RuntimeGraph,
    source: Run,
    at: Rebuilt,
    patch: object,
    *,
    run_id: str,
    now: datetime,
    metadata: Mapping[str, JSONValue] | None = None,
) -> Moment | InvalidInput:
    """The first moment of run ``run_id``, forked from ``source`` as rebuilt ``at`` one of
    its checkpoints, with ``patch`` (``None`` or ``{}``: no change) applied."""
    checked: JSONDict = {}
    if patch is not None and patch != {}:
        found = check_patch(rtg, patch, phase="fork")
        if isinstance(found, InvalidInput):
            return found
        checked = found
    origin: JSONDict = {"run_id": source.id, "checkpoint_seq": at.checkpoint.checkpoint_seq}
    base = Run(
        id=run_id,
        graph_id=source.graph_id,
        graph_hash=source.graph_hash,
        status=RunStatus.RUNNING,
        started_at=now,
        updated_at=now,
        input=dict(source.input),
        metadata={**dict(metadata or {}), FORKED_FROM_KEY: origin},
    )
    fields: list[JSONValue] = list(sorted(checked))
    entries = [
        Entry(
            type=EventType.RUN_INITIALIZED,
            step=at.checkpoint.step,
            payload={"forked_from": origin, "patched": fields},
        )
    ]
    entries += _updates(checked, at.checkpoint.step)
    return propose(
        base,
        CheckpointType.RUN_INITIALIZED,
        entries,
        Continue(),
        now,
        changes={
            "channels": _patched(at.channels, checked),
            "step": at.checkpoint.step,
            "changed_channels": at.changed_channels,
            "pending_nodes": at.pending_nodes,
        },
    )
