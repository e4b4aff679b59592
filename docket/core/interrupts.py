"""Interrupt requests: the durable form a node's ``Interrupt`` takes, and its checks.

A request is held as a pending write until its superstep's barrier commits, then becomes
an open :class:`~docket.records.InterruptState`. The same checks run when the node returns
it (settle) and again when the barrier commits it (a parked request is stored data and is
re-validated like any other).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sized

from docket.graph.compiler import ChannelKind, RuntimeGraph
from docket.graph.nodes import Interrupt
from docket.graph.schema import Schema, schema_from_json, schema_problems, schema_to_json
from docket.records import Run
from docket.values import JSONDict, NonDurableValue, coerce_durable

__all__ = ["duplicate_ids", "request_from_interrupt", "request_problems", "resume_field_problem"]


def resume_field_problem(rtg: RuntimeGraph, field_id: object) -> str | None:
    channel = rtg.channels.get(f"state:{field_id}") if isinstance(field_id, str) else None
    if channel is None or channel.kind is not ChannelKind.STATE:
        return f"resume channel {field_id!r} is not a declared state field"
    return None


def request_problems(rtg: RuntimeGraph, run: Run, node_id: str, request: JSONDict) -> list[str]:
    """Why a stored request cannot become an open interrupt of ``run`` (empty: it can)."""
    out: list[str] = []
    ident = request.get("id")
    if ident is not None and (not isinstance(ident, str) or not ident):
        out.append("an interrupt id must be a non-empty string")
    elif isinstance(ident, str) and ident in run.interrupts:
        out.append(f"interrupt id {ident!r} already exists on the run")
    owner = request.get("node_id")
    if owner is not None and owner != node_id:
        out.append(f"the request belongs to node {owner!r}, not {node_id!r}")
    problem = resume_field_problem(rtg, request.get("resume_channel"))
    if problem:
        out.append(problem)
    schema = request.get("schema")
    if schema is not None:
        try:
            out.extend(schema_problems(schema_from_json(schema)))
        except ValueError as exc:
            out.append(f"the resolution schema is malformed: {exc}")
    if not isinstance(request.get("metadata", {}), dict):
        out.append("interrupt metadata must be a map")
    return out


def request_from_interrupt(
    rtg: RuntimeGraph, run: Run, node_id: str, interrupt: object
) -> JSONDict | list[str]:
    """The durable request for what a node returned, or the reasons it is invalid."""
    if not isinstance(interrupt, Interrupt):
        return [f"expected an Interrupt, got {type(interrupt).__name__}"]
    schema_json: JSONDict | None = None
    if interrupt.schema is not None:
        if not isinstance(interrupt.schema, Schema):
            return [f"the resolution schema must be a Schema, got {type(interrupt.schema)}"]
        problems = schema_problems(interrupt.schema)
        if problems:
            return [f"the resolution schema is invalid: {p}" for p in problems]
        try:
            schema_json = schema_to_json(interrupt.schema)
        except (ValueError, NonDurableValue) as exc:
            return [f"the resolution schema cannot be stored: {exc}"]
    try:
        metadata = coerce_durable(interrupt.metadata, "metadata")
    except NonDurableValue as exc:
        return [f"interrupt metadata is not durable: {exc}"]
    request: JSONDict = {
        "id": interrupt.id,
        "node_id": node_id,
        "resume_channel": interrupt.resume_channel,
        "schema": schema_json,
        "metadata": metadata,
    }
    return request_problems(rtg, run, node_id, request) or request


def duplicate_ids(requests: Iterable[JSONDict]) -> set[str]:
    """Explicit ids that more than one request of one superstep uses."""
    if isinstance(requests, Sized) and len(requests) < 2:
        return set()  # the usual case, without building a Counter
    counts = Counter(r.get("id") for r in requests)
    return {i for i, n in counts.items() if isinstance(i, str) and n > 1}
