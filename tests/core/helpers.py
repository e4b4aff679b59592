"""Test plumbing for the core suite.

``inline``/``resume``/``resolve``/``step`` call the inline runner with the contract
validator on and, unless told otherwise, a memory backend committing every proposal (so
every test proves the proposals are acceptable), then check the history invariants of
runtime-spec §12 case 2 on what came back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from docket.contract.memory import MemoryBackend
from docket.core.history import rebuild_at
from docket.graph.model import Graph
from docket.records import Checkpoint, Event, EventType, Run, run_problems
from docket.testing import (
    InlineResult,
    resolve_interrupt_inline,
    resume_inline,
    run_inline,
    step_inline,
)
from tests.core.fixtures import NODES


def check_history(checkpoints: Sequence[Checkpoint], *, after: Run | None = None) -> None:
    """Checkpoint seqs count on from ``after`` (or 1), events are contiguous, each
    checkpoint ends with its one ``checkpoint_committed`` event carrying its envelope."""
    seq = 1 if after is None else after.checkpoint_seq + 1
    event = 1 if after is None else after.event_seq + 1
    seen: list[Event] = []
    for checkpoint in checkpoints:
        assert checkpoint.seq == seq == checkpoint.run.checkpoint_seq
        seqs = [e.seq for e in checkpoint.events]
        assert seqs == list(range(event, event + len(seqs))), seqs
        kinds = [e.type for e in checkpoint.events]
        assert kinds.count(EventType.CHECKPOINT_COMMITTED) == 1
        last = checkpoint.events[-1]
        assert last.type is EventType.CHECKPOINT_COMMITTED
        assert last.metadata == checkpoint.metadata
        assert last.step == checkpoint.run.step
        assert last.payload["status"] == str(checkpoint.run.status)
        if after is None:  # the whole history is here: every checkpoint reads back exactly
            seen.extend(checkpoint.events)
            rebuilt = rebuild_at(seen, checkpoint.seq)
            assert rebuilt is not None
            assert rebuilt.channels == checkpoint.run.channels
            assert rebuilt.changed_channels == checkpoint.run.changed_channels
            assert rebuilt.pending_nodes == checkpoint.run.pending_nodes
        assert checkpoint.metadata["checkpoint_seq"] == checkpoint.seq
        assert checkpoint.metadata["checkpoint_type"] == str(checkpoint.type)
        assert checkpoint.run.event_seq == seqs[-1]
        assert all(e.timestamp == checkpoint.created_at for e in checkpoint.events)
        assert all(e.run_id == checkpoint.run.id for e in checkpoint.events)
        assert all(e.metadata == {} for e in checkpoint.events[:-1])
        assert run_problems(checkpoint.run) == []
        seq += 1
        event += len(seqs)


def _defaults(options: dict[str, Any]) -> dict[str, Any]:
    options.setdefault("nodes", NODES)
    options.setdefault("validate", True)
    options.setdefault("commit_to", True)
    return options


def inline(graph: Graph, input: dict[str, Any] | None = None, **options: Any) -> InlineResult:
    result = run_inline(graph, input or {}, **_defaults(options))
    check_history(result.checkpoints)
    return result


def resume(graph: Graph, run: Run, **options: Any) -> InlineResult:
    result = resume_inline(graph, run, **_defaults(options))
    check_history(result.checkpoints, after=run)
    return result


def resolve(
    graph: Graph, previous: InlineResult, interrupt_id: str, value: object, **options: Any
) -> InlineResult:
    options.setdefault("commit_to", previous.backend)
    result = resolve_interrupt_inline(
        graph, previous.run, interrupt_id, value, **_defaults(options)
    )
    check_history(result.checkpoints, after=previous.run)
    return result


def step(
    graph: Graph, run: Run, backend: MemoryBackend | bool | None, **options: Any
) -> InlineResult:
    """One commit; ``backend`` is the store holding ``run`` (``True``: a new one, for a
    ``created`` run; ``None``: validate only)."""
    options.setdefault("commit_to", True if backend is True else backend or None)
    result = step_inline(graph, run, **_defaults(options))
    if run.checkpoint_seq:
        check_history(result.checkpoints, after=run)
    else:
        check_history(result.checkpoints)
    return result


def events_of(result: InlineResult, kind: EventType) -> list[Event]:
    return [e for e in result.events if e.type is kind]


def types(checkpoint: Checkpoint) -> list[str]:
    """Runtime event types of a checkpoint (without the trailing checkpoint event)."""
    return [str(e.type) for e in checkpoint.events[:-1]]
