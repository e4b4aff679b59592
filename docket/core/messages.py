"""A message sent to a run, as a pure mutation of the committed run (layer 3).

:func:`deliver_message` is what ``Docket.send`` commits (unclaimed, fenced on the
checkpoint; re-evaluated on a lost race like any signal):

* a key the run has accepted before changes nothing (``Unchanged``: the same message is
  never delivered twice);
* the payload is checked against the topic's schema when the graph declares topics
  (graph policy ``topics: {name: schema}``; an undeclared topic is refused then), and
  against the state field of the attempt that would take it;
* an attempt waiting on the topic takes it in the same commit (oldest waiting attempt
  first); otherwise the message is kept in the mailbox, in order, for the next attempt
  that asks (``docket.core.waits``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from docket.core.errors import (
    CoreError,
    GraphMismatch,
    InvalidInput,
    InvalidPolicy,
    TerminalRun,
    UnusableRun,
)
from docket.core.init import check_graph
from docket.core.moment import Entry, Moment, Park, ParkReason, Unchanged, propose
from docket.core.outcomes import Receiving
from docket.core.plan import Dispatch, HostLimits, resumed_activations, work_order
from docket.core.settle import settle
from docket.core.waits import accepted_keys, keep_message, resting_wake
from docket.graph.compiler import RuntimeGraph
from docket.graph.nodes import Receive
from docket.graph.reducers import RejectedUpdate, validate_update
from docket.graph.schema import SchemaFormatError, schema_from_json, validate
from docket.records import (
    TASK_WAITING_MESSAGE,
    CheckpointType,
    EventType,
    Run,
    RunStatus,
    TaskState,
)
from docket.values import JSONDict, JSONValue, durable_errors

__all__ = ["deliver_message", "topic_problems"]

_TOPICS = "topics"


def topic_problems(rtg: RuntimeGraph, topic: str, payload: JSONValue) -> list[str]:
    """Why ``payload`` may not be sent on ``topic`` to a run of ``rtg`` (empty: it may)."""
    problems = [f"payload: {p}" for p in durable_errors(payload, "payload")]
    if problems:
        return problems
    declared = rtg.policies.get(_TOPICS)
    if not isinstance(declared, dict):
        return []
    if topic not in declared:
        known = ", ".join(sorted(declared)) or "none"
        return [f"topic {topic!r} is not declared by graph {rtg.graph_id!r} (declared: {known})"]
    doc = declared[topic]
    if doc is None:
        return []
    try:
        schema = schema_from_json(doc, (_TOPICS, topic))
    except SchemaFormatError as exc:
        return [f"the graph's schema of topic {topic!r} is unusable: {exc}"]
    return validate(schema, payload, "payload")


def _waiting_on(run: Run, topic: str) -> list[TaskState]:
    tasks = [
        t
        for t in run.active_tasks.values()
        if t.status == TASK_WAITING_MESSAGE and t.metadata.get("topic") == topic
    ]
    return sorted(tasks, key=lambda t: work_order(t.node_id, t.task_id))


def _receive_of(task: TaskState, topic: str) -> Receive:
    into = task.metadata.get("into")
    update = task.metadata.get("update")
    return Receive(
        topic,
        into=into if isinstance(into, str) else None,
        update=update if isinstance(update, dict) else {},
    )


def deliver_message(
    rtg: RuntimeGraph,
    run: Run,
    topic: str,
    payload: JSONValue,
    *,
    key: str | None,
    now: datetime,
    ids: Callable[[str], str],
    limits: HostLimits | None = None,
) -> Moment | Unchanged | CoreError:
    """The commit that delivers (or keeps) one message, or why it cannot be sent."""
    if run.status is RunStatus.CREATED:
        return UnusableRun(f"run {run.id!r} was never initialized", phase="message")
    mismatch: GraphMismatch | None = check_graph(rtg, run)
    if mismatch is not None:
        return mismatch
    if run.status.terminal:
        return TerminalRun(
            f"run {run.id!r} is {run.status} and takes no more messages",
            phase="message",
            details={"status": str(run.status)},
        )
    if key is not None and key in accepted_keys(run):
        return Unchanged(run)
    problems = topic_problems(rtg, topic, payload)
    if problems:
        return InvalidInput(
            f"message refused: {problems[0]}",
            phase="message",
            details={"reasons": list[JSONValue](problems)},
        )
    kept, message = keep_message(run, topic, payload, key, now)
    waiting = _waiting_on(run, topic)
    if not waiting:
        entry_payload: JSONDict = {"topic": topic, "message_seq": message.seq}
        if key is not None:
            entry_payload["key"] = key
        entry = Entry(type=EventType.MESSAGE_RECEIVED, step=run.step, payload=entry_payload)
        return propose(
            kept,
            CheckpointType.INTERRUPT_RESOLVED,  # outside input recorded, nothing ran
            [entry],
            Park(resting_wake(run, now), ParkReason.MESSAGE_KEPT),
            now,
            changes={"updated_at": max(now, run.updated_at)},
        )
    task = waiting[0]
    receive = _receive_of(task, topic)
    value: JSONDict = dict(receive.update)
    if receive.into is not None:
        value[receive.into] = payload
    checked = validate_update(task.node_id, value, rtg.field_rule_map, rtg.input_ids)
    if isinstance(checked, RejectedUpdate):  # refused: nothing is kept, nothing consumed
        return InvalidInput(
            f"message refused by node {task.node_id!r}: {checked.reasons[0]}",
            phase="message",
            node_id=task.node_id,
            details={"reasons": list[JSONValue](checked.reasons)},
        )
    activations = resumed_activations(rtg, kept, [task], limits or HostLimits())
    if isinstance(activations, UnusableRun | InvalidPolicy):
        return activations
    outcome = Receiving(
        task_id=task.task_id, node_id=task.node_id, attempt=task.attempt, receive=receive
    )
    dispatch = Dispatch(
        run=kept, activations=(), now=now, resumed=True, decided=((activations[0], outcome),)
    )
    return settle(rtg, dispatch, (), now=now, ids=ids)
