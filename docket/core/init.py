"""Building and initializing a run.

:func:`build_initial_run` makes the in-memory ``created`` run; :func:`initialize` turns it
into the first moment (``run_initialized``): the input is validated and stored in its
``input:`` channels, and the ``$start`` edges whose guards hold are fired. For a run that
is already ``running`` or ``waiting`` it gives the *resumed* initialization used by the
processless driver (graph state untouched); for a terminal run there is nothing to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import attrs

from docket.core.barrier import edge_entry
from docket.core.errors import GraphMismatch, GuardEvaluationFailed, InvalidInput
from docket.core.moment import Continue, Entry, Moment, Park, ParkReason, Terminated, propose
from docket.core.state import guard_view
from docket.graph.compiler import ChannelKind, RuntimeEdge, RuntimeGraph
from docket.graph.guards import GuardEvalError, evaluate
from docket.graph.model import FINISH
from docket.graph.schema import validate
from docket.proposals import External
from docket.records import ChannelState, CheckpointType, EventType, Run, RunStatus
from docket.values import JSONDict, JSONValue, NonDurableValue, coerce_durable

__all__ = ["build_initial_run", "check_graph", "initialize", "parse_input"]


def build_initial_run(
    rtg: RuntimeGraph,
    input: Mapping[str, object] | None,
    *,
    run_id: str,
    now: datetime,
    metadata: Mapping[str, JSONValue] | None = None,
) -> Run:
    """The ``created`` run (memory only): identity, pinned graph, raw input, metadata.

    The input is checked by :func:`initialize`; ``metadata`` is stored as given and
    never interpreted.
    """
    return Run(
        id=run_id,
        graph_id=rtg.graph_id,
        graph_hash=rtg.graph_hash,
        status=RunStatus.CREATED,
        started_at=now,
        updated_at=now,
        input=dict(input or {}),  # type: ignore[arg-type]  # checked by initialize
        metadata=dict(metadata or {}),
    )


def check_graph(rtg: RuntimeGraph, run: Run) -> GraphMismatch | None:
    if (run.graph_id, run.graph_hash) == (rtg.graph_id, rtg.graph_hash):
        return None
    return GraphMismatch(
        f"run {run.id!r} is pinned to graph {run.graph_id!r} ({run.graph_hash[:12]}), "
        f"not {rtg.graph_id!r} ({rtg.graph_hash[:12]})",
        details={
            "run": {"graph_id": run.graph_id, "graph_hash": run.graph_hash},
            "graph": {"graph_id": rtg.graph_id, "graph_hash": rtg.graph_hash},
        },
    )


def parse_input(rtg: RuntimeGraph, value: object) -> JSONDict | InvalidInput:
    """The coerced input, or every reason it is rejected (in a fixed order: unknown keys,
    missing or null required inputs, then schema violations, each group sorted)."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        return InvalidInput(
            "the run input must be a map",
            phase="init",
            details={"reasons": [f"expected a map, got {type(value).__name__}"]},
        )
    try:
        coerced = coerce_durable(value, "input")
    except NonDurableValue as exc:
        return InvalidInput(
            "the run input is not durable", phase="init", details={"reasons": list(exc.reasons)}
        )
    assert isinstance(coerced, dict)  # a coerced Mapping is a dict
    declared = {c.public_id: c for c in rtg.channels.values() if c.kind is ChannelKind.INPUT}
    reasons: list[JSONValue] = [
        f'unknown input "{k}"' for k in sorted(coerced) if k not in declared
    ]
    for key in sorted(declared):
        channel = declared[key]
        if not channel.required:
            continue
        if key not in coerced and channel.default is None:
            reasons.append(f'required input "{key}" is missing')
        elif key in coerced and coerced[key] is None:
            reasons.append(f'required input "{key}" is null')
    for key in sorted(coerced):
        known = declared.get(key)
        if known is not None and known.schema is not None and coerced[key] is not None:
            reasons.extend(validate(known.schema, coerced[key], f'input "{key}"'))
    if reasons:
        return InvalidInput("the run input is invalid", phase="init", details={"reasons": reasons})
    return coerced


def initialize(
    rtg: RuntimeGraph, run: Run, *, now: datetime
) -> Moment | Terminated | GraphMismatch | InvalidInput | GuardEvaluationFailed:
    """The initialization moment of ``run`` (fresh for ``created``, resumed otherwise)."""
    mismatch = check_graph(rtg, run)
    if mismatch is not None:
        return mismatch
    if run.status.terminal:
        return Terminated(run)
    if run.status is not RunStatus.CREATED:
        resumed = attrs.evolve(run, updated_at=now)
        entry = Entry(type=EventType.RUN_INITIALIZED, step=run.step, payload={"resumed": True})
        waiting = run.status is RunStatus.WAITING
        return propose(
            resumed,
            CheckpointType.RUN_INITIALIZED,
            [entry],
            Park(External(), ParkReason.AWAITING_INTERRUPTS) if waiting else Continue(),
            now,
        )

    checked = parse_input(rtg, run.input)
    if isinstance(checked, InvalidInput):
        return checked
    provided = sorted(checked)
    channels = {
        f"input:{k}": ChannelState(channel_id=f"input:{k}", value=checked[k], version=1)
        for k in provided
    }
    view = guard_view(rtg, channels, frozenset(provided))
    fired: list[RuntimeEdge] = []
    for edge_id in sorted(rtg.start_edges):
        edge = rtg.edges[edge_id]
        if edge.guard is not None:
            verdict = evaluate(edge.guard, view)
            if isinstance(verdict, GuardEvalError):
                return GuardEvaluationFailed(
                    f"edge {edge.id} guard evaluation failed",
                    phase="init",
                    details={"edge_id": edge.id, "reasons": list[JSONValue](verdict.reasons)},
                )
            if not verdict.value:
                continue
        fired.append(edge)
    for edge in fired:
        if edge.target != FINISH:
            channels[edge.channel_id] = ChannelState(
                channel_id=edge.channel_id, value=True, version=1
            )
    activated = [e.channel_id for e in fired if e.target != FINISH]
    started = attrs.evolve(
        run,
        status=RunStatus.RUNNING,
        input=checked,
        channels=channels,
        changed_channels=frozenset([*(f"input:{k}" for k in provided), *activated]),
        started_at=now,
        updated_at=now,
    )
    inputs: list[JSONValue] = list(provided)
    entries = [Entry(type=EventType.RUN_INITIALIZED, step=0, payload={"inputs": inputs})]
    entries += [
        Entry(
            type=EventType.CHANNEL_UPDATED,
            step=0,
            channel_id=f"input:{k}",
            payload={"version": 1},
        )
        for k in provided
    ]
    entries += [edge_entry(e, 0) for e in sorted(fired, key=lambda e: (e.target == FINISH, e.id))]
    return propose(started, CheckpointType.RUN_INITIALIZED, entries, Continue(), now)
