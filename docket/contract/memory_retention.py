"""The memory backend's retention pass (``Prunable``), over its run rows."""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import datetime, timedelta

from docket.contract.memory_rows import MemoryRow
from docket.contract.retention import PruneResult

__all__ = ["prune_rows"]


def prune_rows(
    runs: MutableMapping[tuple[str | None, str], MemoryRow],
    moment: datetime,
    event_age: timedelta | None,
    run_age: timedelta | None,
    batch_size: int,
) -> PruneResult:
    """Delete up to ``batch_size`` events written, and runs finished, more than an age
    before ``moment`` (the caller holds the backend's lock). A pruned event leaves a hole
    below the run's ``event_seq``, which stays as it was."""
    events: list[tuple[datetime, MemoryRow, int]] = []
    if event_age is not None:
        events = [
            (written, row, seq)
            for row in runs.values()
            for seq, written in row.event_times.items()
            if written < moment - event_age
        ]
        events = sorted(events, key=lambda doomed: doomed[0])[:batch_size]
        for _, row, seq in events:
            del row.events[seq], row.event_times[seq]
    doomed_runs: list[tuple[datetime, tuple[str | None, str]]] = []
    if run_age is not None:
        doomed_runs = [
            (row.ended_at, key)
            for key, row in runs.items()
            if row.ended_at is not None and row.ended_at < moment - run_age
        ]
        doomed_runs = sorted(doomed_runs, key=lambda doomed: doomed[0])[:batch_size]
        for _, key in doomed_runs:
            del runs[key]
    return PruneResult(ran=True, events=len(events), runs=len(doomed_runs))
