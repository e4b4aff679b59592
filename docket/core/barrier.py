"""The barrier: commit one finished superstep.

Given every result of the superstep (parked siblings and this dispatch's results, one per
node), the barrier

1. re-validates every write and interrupt request (stored data is checked like fresh data);
2. folds the writes through the field reducers with writers in node-id order and
   re-validates the committed values (``reducers.commit_step``); each written channel's
   version goes up by one, equal value or not;
3. consumes the activations the superstep ran on (ephemeral edge values go back to
   ``None``), except those aimed at a node paused on an open interrupt, which are kept
   until that node runs again;
4. collects the outgoing edges of the nodes that completed; a fan-in (barrier) edge
   remembers which sources completed and fires once all of them have; guards are
   evaluated on the new state; a fired edge to a node bumps its channel, a fired edge to
   ``$finish`` only records an event;
5. opens the requested interrupts and advances the step.

The run is ``waiting`` afterwards exactly when nothing can run and an interrupt is open.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

from docket.core.errors import UnusableRun
from docket.core.finish import AttemptFailure, error_failure, failure_moment, superstep_failure
from docket.core.interrupts import duplicate_ids, request_problems
from docket.core.moment import Continue, Disposition, Entry, Moment, Park, ParkReason, propose
from docket.core.outcomes import format_reason
from docket.core.plan import candidates_of, open_ids_of, work_order
from docket.core.state import committed_fields, guard_view
from docket.graph.compiler import ChannelKind, RuntimeEdge, RuntimeGraph
from docket.graph.guards import GuardEvalError, evaluate
from docket.graph.model import FINISH
from docket.graph.reducers import FieldRule, StepRejected, commit_step
from docket.proposals import External
from docket.records import (
    ChannelState,
    CheckpointType,
    EventType,
    InterruptState,
    InterruptStatus,
    PendingWrite,
    Run,
    RunFailure,
    RunStatus,
    WriteKind,
    item_index,
)
from docket.values import JSONDict, JSONValue

__all__ = ["commit_barrier"]

IdGenerator = Callable[[str], str]


def _fresh_interrupt_id(ids: IdGenerator, taken: set[str]) -> str:
    for _ in range(1000):
        candidate = ids("interrupt")
        if candidate not in taken:
            return candidate
    raise ValueError("the id generator keeps returning interrupt ids that are already taken")


def commit_barrier(
    rtg: RuntimeGraph,
    run: Run,
    writes: Sequence[PendingWrite],
    now: datetime,
    ids: IdGenerator,
    *,
    fields: Mapping[str, FieldRule] | None = None,
    inputs: tuple[str, ...] | None = None,
    extra: Sequence[Entry] = (),
) -> Moment:
    """Commit the superstep whose results are ``writes`` (one per task, any order).

    ``extra`` events come first (what the dispatch itself did: a message taken).

    ``fields``/``inputs`` are ``rtg.field_rule_map``/``rtg.input_ids`` when the caller
    already has them. A map node's items write as ``node[i]``, folded in item order; a map
    node any of whose items asked for an interrupt writes nothing and does not complete
    (it runs again, every item, once its interrupts are answered)."""
    ordered = sorted(writes, key=lambda w: work_order(w.node_id, w.task_id))
    strangers = sorted({w.node_id for w in ordered if w.node_id not in rtg.nodes})
    if strangers:
        lost = UnusableRun(
            f"pending results name nodes the graph does not have: {', '.join(strangers)}",
            phase="commit",
            details={"nodes": list[JSONValue](strangers)},
        )
        return failure_moment(run, error_failure(lost), now)
    requests = [w for w in ordered if w.kind is WriteKind.INTERRUPT]
    interrupting = {w.node_id for w in requests}
    done = [w for w in ordered if w.kind is WriteKind.UPDATE and w.node_id not in interrupting]
    by_writer = {writer_label(w): w for w in ordered}
    updates = {writer_label(w): w.value for w in done}

    errors: dict[str, str] = {}
    twice = duplicate_ids([w.value for w in requests])
    for write in requests:
        problems = request_problems(rtg, run, write.node_id, write.value)
        ident = write.value.get("id")
        if isinstance(ident, str) and ident in twice:
            problems.append(f"interrupt id {ident!r} is requested twice in one superstep")
        if problems:
            errors[writer_label(write)] = format_reason("invalid_interrupt", "; ".join(problems))
    if fields is None:
        fields = rtg.field_rule_map
    if inputs is None:
        inputs = rtg.input_ids
    step = commit_step(
        fields, inputs, committed_fields(rtg, run.channels), updates, order=list(updates)
    )
    if isinstance(step, StepRejected):
        for writer, reasons in step.errors.items():
            errors[writer] = format_reason("invalid_state_update", "; ".join(reasons))
    if errors or isinstance(step, StepRejected):
        failed = [
            AttemptFailure(
                node_id=by_writer[writer].node_id,
                task_id=by_writer[writer].task_id,
                attempt=by_writer[writer].attempt,
                reason=errors[writer],
            )
            for writer in sorted(errors, key=lambda w: work_order(*_task_of(by_writer[w])))
        ]
        fresh = [w for w in ordered if w not in run.pending_writes]
        return superstep_failure(run, (), failed, now, fresh)

    channels = dict(run.channels)
    for field_id in sorted(step.values):
        channel_id = f"state:{field_id}"
        previous = channels.get(channel_id)
        version = 1 if previous is None else previous.version + 1
        channels[channel_id] = ChannelState(
            channel_id=channel_id, value=step.values[field_id], version=version
        )

    paused = {i.node_id for i in run.interrupts.values() if i.status is InterruptStatus.OPEN}
    kept: set[str] = set()
    for channel_id in sorted(run.changed_channels):
        channel = rtg.channels.get(channel_id)
        edge = rtg.edges.get(channel.public_id) if channel is not None else None
        if channel is None or channel.kind is not ChannelKind.EDGE or edge is None:
            continue
        if edge.target in paused:
            kept.add(channel_id)  # the target cannot run yet: keep its activation
            continue
        state = channels.get(channel_id)
        if state is not None and state.value is not None:
            channels[channel_id] = ChannelState(
                channel_id=state.channel_id,
                value=None,
                version=state.version,
                barrier_seen=state.barrier_seen,
            )

    completed = {w.node_id for w in done}
    outgoing = sorted({e for n in completed for e in rtg.nodes[n].outgoing_edges})
    eligible: list[RuntimeEdge] = []
    for edge_id in outgoing:
        edge = rtg.edges[edge_id]
        if edge.barrier:
            state = channels.get(edge.channel_id) or ChannelState(channel_id=edge.channel_id)
            seen = set(state.barrier_seen) | (completed & set(edge.sources))
            if seen >= set(edge.sources):
                channels[edge.channel_id] = attrs.evolve(state, barrier_seen=())
            else:
                channels[edge.channel_id] = attrs.evolve(state, barrier_seen=tuple(sorted(seen)))
                continue
        eligible.append(edge)

    # Most edges carry no guard: build the state a guard reads only when one does.
    view = (
        guard_view(rtg, channels, step.changed)
        if any(e.guard is not None for e in eligible)
        else None
    )
    fired: list[RuntimeEdge] = []
    finished: list[RuntimeEdge] = []
    for edge in eligible:
        if edge.guard is not None:
            assert view is not None  # built above for any guarded edge
            verdict = evaluate(edge.guard, view)
            if isinstance(verdict, GuardEvalError):
                failure = RunFailure(
                    code="guard_evaluation_failed",
                    message=f"edge {edge.id} guard evaluation failed",
                    details={"edge_id": edge.id, "reasons": list[JSONValue](verdict.reasons)},
                )
                return failure_moment(run, failure, now)
            if not verdict.value:
                continue
        if edge.target == FINISH:
            finished.append(edge)
            continue
        state = channels.get(edge.channel_id)
        channels[edge.channel_id] = (
            ChannelState(channel_id=edge.channel_id, value=True, version=1)
            if state is None
            else ChannelState(
                channel_id=state.channel_id,
                value=True,
                version=state.version + 1,
                barrier_seen=state.barrier_seen,
            )
        )
        fired.append(edge)

    interrupts = dict(run.interrupts)
    taken = set(interrupts) | {i for w in requests if isinstance(i := w.value.get("id"), str) and i}
    opened: list[tuple[InterruptState, PendingWrite]] = []
    for write in requests:
        request = write.value
        ident = request.get("id")
        if not isinstance(ident, str) or not ident:
            ident = _fresh_interrupt_id(ids, taken)
            taken.add(ident)
        metadata = request.get("metadata")
        schema = request.get("schema")
        opening = InterruptState(
            id=ident,
            node_id=write.node_id,
            status=InterruptStatus.OPEN,
            resume_channel=str(request["resume_channel"]),
            schema=schema if isinstance(schema, dict) else None,
            created_at=now,
            metadata=metadata if isinstance(metadata, dict) else {},
        )
        interrupts[ident] = opening
        opened.append((opening, write))
    opened.sort(key=lambda pair: pair[0].id)

    changed = {f"state:{f}" for f in step.changed} | {e.channel_id for e in fired} | kept
    changed_channels = frozenset(changed)
    pending_nodes = frozenset((run.pending_nodes - completed) | interrupting)
    # The next run is built once, by propose; whether it waits depends only on these.
    waiting = bool(open_ids_of(interrupts)) and not candidates_of(
        rtg, interrupts, changed_channels, pending_nodes
    )
    proposed: dict[str, Any] = {
        "channels": channels,
        "changed_channels": changed_channels,
        "pending_nodes": pending_nodes,
        "interrupts": interrupts,
        "active_tasks": {},
        "pending_writes": (),
        "timers": {},
        "step": run.step + 1,
        "updated_at": now,
        "status": RunStatus.WAITING if waiting else RunStatus.RUNNING,
    }

    entries: list[Entry] = list(extra)
    for write in done:
        payload: JSONDict = {"attempt": write.attempt}
        if (index := item_index(write.task_id)) is not None:
            payload["item"] = index
        elif rtg.nodes[write.node_id].map is not None:
            payload["items"] = 0  # a map over an empty list: done, and nothing ran
        entries.append(
            Entry(
                type=EventType.NODE_COMPLETED,
                step=run.step,
                node_id=write.node_id,
                task_id=write.task_id,
                payload=payload,
            )
        )
    for field_id in sorted(step.values):
        writers: list[JSONValue] = list(step.writers[field_id])
        entries.append(
            Entry(
                type=EventType.CHANNEL_UPDATED,
                step=run.step,
                channel_id=f"state:{field_id}",
                payload={"writers": writers},
            )
        )
    for edge in [*fired, *finished]:
        entries.append(edge_entry(edge, run.step))
    for opening, write in opened:
        entries.append(
            Entry(
                type=EventType.INTERRUPT_REQUESTED,
                step=run.step,
                node_id=write.node_id,
                task_id=write.task_id,
                payload={
                    "attempt": write.attempt,
                    "interrupt_id": opening.id,
                    "resume_channel": opening.resume_channel,
                },
            )
        )
    checkpoint = CheckpointType.INTERRUPT_REQUESTED if opened else CheckpointType.STEP_COMMITTED
    disposition: Disposition = (
        Park(External(), ParkReason.AWAITING_INTERRUPTS) if waiting else Continue()
    )
    return propose(run, checkpoint, entries, disposition, now, changes=proposed)


def writer_label(write: PendingWrite) -> str:
    """The writer a result is folded and reported as: its node, or ``node[i]`` for item
    ``i`` of a map (``channel_updated`` events list these)."""
    index = item_index(write.task_id)
    return write.node_id if index is None else f"{write.node_id}[{index}]"


def _task_of(write: PendingWrite) -> tuple[str, str]:
    return write.node_id, write.task_id


def edge_entry(edge: RuntimeEdge, step: int) -> Entry:
    """The ``edge_triggered`` event of a fired edge (start edges included)."""
    payload: JSONDict = {"edge_id": edge.id, "to": edge.target}
    return Entry(
        type=EventType.EDGE_TRIGGERED, step=step, channel_id=edge.channel_id, payload=payload
    )
