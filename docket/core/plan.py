"""Plan: which nodes run next, and the activations (identities and policies) they run with.

Identities are pure functions of the committed run: the task of node ``n`` in superstep
``s`` of run ``r`` is ``"r:s:n"``, attempt ``k`` of it has the idempotency key
``"r:s:n:k"``, and every activation of one fresh superstep shares one snapshot and its
``input_hash = content_hash(snapshot)``. Planning twice from the same run gives the same
activations, which is what makes a crashed superstep replayable.

A map node (``docket.graph.maps``) has one task per item of the list its ``over`` holds in
that snapshot: item ``i`` is task ``"r:s:n[i]"``, its snapshot is the superstep's with the
item under the map's ``as`` name. An empty list gives no task: the node completes at once
with no writes (``Dispatch.settled``). A list longer than the map's ``max_items`` or the
host's ``max_map_items`` fails the run (``map_too_large``), never truncated.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Final, TypeAlias

import attrs

from docket.core.errors import (
    IncompatibleExecutionPolicy,
    InvalidPolicy,
    MapFailed,
    MapTooLarge,
    UnusableRun,
)
from docket.core.outcomes import TaskOutcome
from docket.core.state import snapshot, source_versions
from docket.graph.compiler import RuntimeGraph, RuntimeNode
from docket.graph.nodes import NodePolicies, RetryPolicy
from docket.records import (
    InterruptState,
    InterruptStatus,
    PendingWrite,
    Run,
    TaskFailure,
    TaskState,
    WriteKind,
    idempotency_key,
    item_index,
    item_task_id,
    task_id,
)
from docket.values import JSONDict, JSONValue, content_hash

__all__ = [
    "DEFAULT_MAX_MAP_ITEMS",
    "DEFAULT_TIMEOUT_MS",
    "Activation",
    "Blocked",
    "Dispatch",
    "HostLimits",
    "OverLimit",
    "PlanResult",
    "Quiescent",
    "Runnable",
    "candidates",
    "candidates_of",
    "check_execution_policy",
    "fresh_activations",
    "map_items",
    "node_policy",
    "open_ids_of",
    "open_interrupt_ids",
    "plan",
    "planned_work",
    "resumed_activations",
    "superstep_limit",
    "work_order",
]

#: Attempt timeout of a node that declares none (runtime decision: 60 s).
DEFAULT_TIMEOUT_MS: Final = 60_000
#: Host ceiling on the items of one map activation.
DEFAULT_MAX_MAP_ITEMS: Final = 10_000


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _optional_positive(_: object, attribute: attrs.Attribute[int | None], value: object) -> None:
    if value is not None and not _positive(value):
        raise ValueError(f"{attribute.name} must be a positive integer or None, got {value!r}")


def _required_positive(_: object, attribute: attrs.Attribute[int], value: object) -> None:
    if not _positive(value):
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen(kw_only=True)
class HostLimits:
    """What the host allows, whatever the graph says.

    ``max_supersteps`` is a ceiling (the graph policy can lower it, never raise it);
    ``max_attempt_ms`` caps every attempt's timeout (a node declaring more is incompatible
    with this host); ``default_timeout_ms`` applies to nodes that declare no timeout.
    """

    max_supersteps: int | None = attrs.field(default=None, validator=_optional_positive)
    max_attempt_ms: int | None = attrs.field(default=None, validator=_optional_positive)
    default_timeout_ms: int = attrs.field(default=DEFAULT_TIMEOUT_MS, validator=_required_positive)
    #: Ceiling on the items of one map activation (a graph's ``max_items`` can only lower it).
    max_map_items: int = attrs.field(default=DEFAULT_MAX_MAP_ITEMS, validator=_required_positive)


@attrs.frozen(kw_only=True)
class Activation:
    """One attempt of one node in one superstep: what the executor runs, data only."""

    run_id: str
    task_id: str
    node_id: str
    step: int
    attempt: int
    idempotency_key: str
    snapshot: JSONDict
    source_versions: dict[str, int]
    config: JSONDict
    timeout_ms: int
    retry: RetryPolicy
    failures: tuple[TaskFailure, ...] = ()
    recorded_input_hash: str | None = None  # a parked attempt's, as its task recorded it
    item_index: int | None = None  # a map item's index; its item is in the snapshot

    @functools.cached_property
    def input_hash(self) -> str:
        """``content_hash(snapshot)``, or the recorded hash of a parked attempt.

        Worked out when first read: only an attempt that parks (a retry) records it, so a
        superstep that commits never hashes the whole state (a long history made this
        the dearest part of planning)."""
        if self.recorded_input_hash is not None:
            return self.recorded_input_hash
        return content_hash(self.snapshot)


@attrs.frozen(kw_only=True)
class Dispatch:
    """Node work the core needs done before it can propose the next moment.

    Run the activations (concurrently), then hand their outcomes to ``settle``.
    ``resumed`` is true when they are parked attempts of a superstep already in flight.
    """

    run: Run
    activations: tuple[Activation, ...]
    now: datetime
    resumed: bool
    settled: tuple[PendingWrite, ...] = ()  # map nodes over an empty list: done, no writes
    # parked attempts whose outcome the core knows without running them (a sleep that
    # ended, a message wait that timed out): settled with the executor's outcomes
    decided: tuple[tuple[Activation, TaskOutcome], ...] = ()


# -- the plan -----------------------------------------------------------------------------


@attrs.frozen
class Quiescent:
    """Nothing is activated and no interrupt is open: the run is complete."""


@attrs.frozen
class Blocked:
    """Nothing can run until one of these open interrupts is resolved."""

    interrupt_ids: tuple[str, ...]


@attrs.frozen
class OverLimit:
    """Nodes are activated but the run already used its ``limit`` supersteps."""

    limit: int


@attrs.frozen
class Runnable:
    node_ids: tuple[str, ...]


PlanResult: TypeAlias = Quiescent | Blocked | OverLimit | Runnable | UnusableRun


def work_order(node_id: str, task: str) -> tuple[str, int]:
    """The one order of a superstep's tasks and results: by node, a map's items by index
    (so a map's writes fold in item order whatever order they finished in)."""
    index = item_index(task)
    return node_id, -1 if index is None else index


def open_interrupt_ids(run: Run) -> tuple[str, ...]:
    return open_ids_of(run.interrupts)


def open_ids_of(interrupts: Mapping[str, InterruptState]) -> tuple[str, ...]:
    """:func:`open_interrupt_ids` of a run whose interrupts are ``interrupts``."""
    return tuple(sorted(i.id for i in interrupts.values() if i.status is InterruptStatus.OPEN))


def candidates(rtg: RuntimeGraph, run: Run) -> tuple[str, ...]:
    """Nodes to run next, sorted: not paused on an open interrupt, and either waiting to
    re-run after a resolution (``pending_nodes``) or subscribed to a changed channel."""
    return candidates_of(rtg, run.interrupts, run.changed_channels, run.pending_nodes)


def candidates_of(
    rtg: RuntimeGraph,
    interrupts: Mapping[str, InterruptState],
    changed: frozenset[str],
    pending: frozenset[str],
) -> tuple[str, ...]:
    """:func:`candidates` of a run with these interrupts, changed channels and pending
    nodes (for a caller that has not built that run yet)."""
    paused = {i.node_id for i in interrupts.values() if i.status is InterruptStatus.OPEN}
    nodes = rtg.nodes
    return tuple(
        node_id
        for node_id in rtg.node_order
        if node_id not in paused
        and (node_id in pending or not changed.isdisjoint(nodes[node_id].subscribe))
    )


def superstep_limit(rtg: RuntimeGraph, limits: HostLimits) -> int | None:
    """The graph's limit capped by the host ceiling (``None``: unbounded)."""
    bounds = [b for b in (rtg.max_supersteps, limits.max_supersteps) if b is not None]
    return min(bounds) if bounds else None


def plan(rtg: RuntimeGraph, run: Run, limits: HostLimits) -> PlanResult:
    """What runs next. A run with pending writes and no parked task is a reopened failed
    superstep (:mod:`docket.core.reopen`): its finished nodes wait at the barrier, so only
    the others are planned (an empty plan then is an :class:`UnusableRun`, never completion).
    """
    nodes = candidates(rtg, run)
    if run.pending_writes:
        # a map node may have unfinished items left: fresh_activations skips the others
        written = {w.node_id for w in run.pending_writes}
        nodes = tuple(n for n in nodes if n not in written or rtg.nodes[n].map is not None)
        if not nodes:
            return UnusableRun(
                "the pending writes cover every planned node: nothing is left to retry",
                phase="plan",
                details={"nodes": list[JSONValue](sorted(written))},
            )
    if not nodes:
        waiting = open_interrupt_ids(run)
        return Blocked(waiting) if waiting else Quiescent()
    limit = superstep_limit(rtg, limits)
    if limit is not None and run.step >= limit:
        return OverLimit(limit)
    return Runnable(nodes)


# -- policies -----------------------------------------------------------------------------


def node_policy(node: RuntimeNode, limits: HostLimits) -> tuple[int, RetryPolicy] | InvalidPolicy:
    """The attempt timeout (ms) and retry policy a node runs with.

    A declared timeout is used as is (capped by ``limits.max_attempt_ms``); no timeout means
    ``limits.default_timeout_ms``, also capped. A policy a compiler would never produce
    (a corrupted runtime graph) is an :class:`InvalidPolicy`.
    """
    policies = node.policies
    problems: list[str] = []
    if not isinstance(policies, NodePolicies):
        problems.append(f"policies must be NodePolicies, got {type(policies).__name__}")
    else:
        if policies.timeout_ms is not None and not _positive(policies.timeout_ms):
            problems.append(f"timeout_ms must be a positive integer, got {policies.timeout_ms!r}")
        retry = policies.retry
        if not isinstance(retry, RetryPolicy):
            problems.append(f"retry must be a RetryPolicy, got {type(retry).__name__}")
        else:
            if not _positive(retry.max_attempts):
                problems.append(
                    f"retry max_attempts must be a positive integer, got {retry.max_attempts!r}"
                )
            backoff = retry.backoff_ms
            if not isinstance(backoff, int) or isinstance(backoff, bool) or backoff < 0:
                problems.append(f"retry backoff_ms must be a non-negative integer, got {backoff!r}")
    if problems:
        return InvalidPolicy(
            f"node {node.public_id!r} has an invalid policy: " + "; ".join(problems),
            phase="plan",
            node_id=node.public_id,
            details={"reasons": list(problems)},
        )
    timeout = policies.timeout_ms or limits.default_timeout_ms
    if limits.max_attempt_ms is not None:
        timeout = min(timeout, limits.max_attempt_ms)
    return timeout, policies.retry


def check_execution_policy(
    rtg: RuntimeGraph, limits: HostLimits
) -> IncompatibleExecutionPolicy | None:
    """The first node (by id) whose declared timeout exceeds the host maximum, if any."""
    if limits.max_attempt_ms is None:
        return None
    for node_id in sorted(rtg.nodes):
        declared = getattr(rtg.nodes[node_id].policies, "timeout_ms", None)
        if isinstance(declared, int) and declared > limits.max_attempt_ms:
            return IncompatibleExecutionPolicy(
                f"node {node_id!r} declares a {declared} ms timeout, above the host maximum "
                f"of {limits.max_attempt_ms} ms",
                phase="plan",
                node_id=node_id,
                details={"timeout_ms": declared, "max_attempt_elapsed_ms": limits.max_attempt_ms},
            )
    return None


# -- activations --------------------------------------------------------------------------


def fresh_activations(
    rtg: RuntimeGraph, run: Run, node_ids: Iterable[str], limits: HostLimits
) -> tuple[Activation, ...] | InvalidPolicy | MapFailed:
    """First attempts of a new superstep, all against one snapshot of the committed run."""
    planned = planned_work(rtg, run, node_ids, limits)
    return planned if isinstance(planned, InvalidPolicy | MapFailed) else planned[0]


def planned_work(
    rtg: RuntimeGraph, run: Run, node_ids: Iterable[str], limits: HostLimits
) -> tuple[tuple[Activation, ...], tuple[PendingWrite, ...]] | InvalidPolicy | MapFailed:
    """:func:`fresh_activations`, and the completions of map nodes over an empty list.

    Tasks that already have a pending write (a reopened failed superstep) are left out."""
    view = snapshot(rtg, run.channels)
    versions = source_versions(rtg, run.channels)
    done = {w.task_id for w in run.pending_writes}
    out: list[Activation] = []
    settled: list[PendingWrite] = []
    for node_id in sorted(node_ids):
        node = rtg.nodes[node_id]
        policy = node_policy(node, limits)
        if isinstance(policy, InvalidPolicy):
            return policy
        task = task_id(run.id, run.step, node_id)
        if node.map is not None:
            items = map_items(node, view, limits)
            if isinstance(items, MapFailed):
                return items
            if not items and task not in done:
                settled.append(
                    PendingWrite(
                        task_id=task, node_id=node_id, attempt=1, kind=WriteKind.UPDATE, value={}
                    )
                )
            for index, item in enumerate(items):
                item_task = item_task_id(task, index)
                if item_task in done:
                    continue
                out.append(
                    Activation(
                        run_id=run.id,
                        task_id=item_task,
                        node_id=node_id,
                        step=run.step,
                        attempt=1,
                        idempotency_key=idempotency_key(item_task, 1),
                        snapshot={**view, node.map.item: item},
                        source_versions=versions,
                        config=node.config,
                        timeout_ms=policy[0],
                        retry=policy[1],
                        item_index=index,
                    )
                )
            continue
        out.append(
            Activation(
                run_id=run.id,
                task_id=task,
                node_id=node_id,
                step=run.step,
                attempt=1,
                idempotency_key=idempotency_key(task, 1),
                snapshot=view,
                source_versions=versions,
                config=node.config,
                timeout_ms=policy[0],
                retry=policy[1],
            )
        )
    return tuple(out), tuple(settled)


def map_items(
    node: RuntimeNode, view: Mapping[str, JSONValue], limits: HostLimits
) -> list[JSONValue] | MapFailed:
    """The items a map node runs over in this snapshot, or why it cannot run."""
    spec = node.map
    assert spec is not None
    value = view.get(spec.over)
    if not isinstance(value, list):
        shown = "missing" if spec.over not in view else type(value).__name__
        return MapFailed(
            f"map node {node.public_id!r} maps over {spec.over!r}, which holds no list ({shown})",
            phase="plan",
            node_id=node.public_id,
            details={"over": spec.over, "found": shown},
        )
    bounds = [b for b in (spec.max_items, limits.max_map_items) if b is not None]
    limit = min(bounds)
    if len(value) > limit:
        return MapTooLarge(
            f"map node {node.public_id!r} got {len(value)} items from {spec.over!r}, "
            f"more than its limit of {limit}",
            phase="plan",
            node_id=node.public_id,
            details={"over": spec.over, "items": len(value), "limit": limit},
        )
    return value


def resumed_activations(
    rtg: RuntimeGraph, run: Run, tasks: Iterable[TaskState], limits: HostLimits
) -> tuple[Activation, ...] | UnusableRun | InvalidPolicy:
    """Parked attempts, identity copied from their task records; config and policies come
    from the graph again."""
    out: list[Activation] = []
    for task in sorted(tasks, key=lambda t: work_order(t.node_id, t.task_id)):
        node = rtg.nodes.get(task.node_id)
        if node is None:
            return UnusableRun(
                f"parked task {task.task_id!r} names node {task.node_id!r}, "
                "which the graph does not have",
                phase="plan",
                node_id=task.node_id,
                details={"task_id": task.task_id},
            )
        policy = node_policy(node, limits)
        if isinstance(policy, InvalidPolicy):
            return policy
        out.append(
            Activation(
                run_id=run.id,
                task_id=task.task_id,
                node_id=task.node_id,
                step=task.step,
                attempt=task.attempt,
                recorded_input_hash=task.input_hash,
                idempotency_key=task.idempotency_key,
                snapshot=task.snapshot,
                source_versions=dict(task.source_versions),
                config=node.config,
                timeout_ms=policy[0],
                retry=policy[1],
                failures=task.failures,
                item_index=item_index(task.task_id),
            )
        )
    return tuple(out)
