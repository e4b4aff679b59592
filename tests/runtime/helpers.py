"""Shared plumbing of the runtime, facade and CLI suites.

``memory_docket`` builds a :class:`~docket.Docket` over a reference backend whose clock is
a :class:`~docket.clock.ManualClock` — the Docket has no clock of its own, so moving the
backend's clock moves everything (claims, expiry, retry timers). ``check_stored_history``
reads a run's events back and checks the history invariants: contiguous event sequences
from 1, one ``checkpoint_committed`` per checkpoint, checkpoint sequences 1..n without gaps.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from docket import Docket
from docket.clock import ManualClock
from docket.contract.memory import MemoryBackend
from docket.records import Event, EventType, Run
from tests.core.fixtures import NODES

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)


def memory_docket(
    clock: ManualClock | None = None, backend: MemoryBackend | None = None, **options: Any
) -> tuple[Docket, MemoryBackend, ManualClock]:
    clock = clock or ManualClock(T0)
    backend = backend or MemoryBackend(clock=clock)
    options.setdefault("nodes", NODES)
    return Docket(backend, **options), backend, clock


def check_events(run: Run, events: Sequence[Event]) -> list[int]:
    """Assert the stored history of ``run`` is whole; return its checkpoint sequences."""
    assert [e.seq for e in events] == list(range(1, run.event_seq + 1))
    assert all(e.run_id == run.id for e in events)
    marks = [e for e in events if e.type is EventType.CHECKPOINT_COMMITTED]
    seqs = [m.metadata["checkpoint_seq"] for m in marks]
    assert seqs == list(range(1, run.checkpoint_seq + 1)), seqs
    assert events[-1].type is EventType.CHECKPOINT_COMMITTED
    return [int(str(s)) for s in seqs]


def later(clock: ManualClock, seconds: float) -> datetime:
    return clock.advance(timedelta(seconds=seconds))
