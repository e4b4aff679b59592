"""The memory backend's stored rows: one per run, one per graph version."""

from __future__ import annotations

from datetime import datetime

import attrs

from docket.records import DEFAULT_QUEUE, CheckpointType, Run, RunStatus

__all__ = ["MemoryGraphRow", "MemoryRow"]


@attrs.define
class MemoryRow:
    """One stored run: its document (as bytes), operational state, events, transitions."""

    tenant: str | None
    run_json: bytes
    run: Run  # decoded once at write time; never handed out
    latest_checkpoint_type: CheckpointType
    wake_at: datetime | None = None
    claim_token: str | None = None
    claimed_at: datetime | None = None
    claim_attempts: int = 0
    claim_abandons: int = 0
    poisoned_at: datetime | None = None
    poison_reason: str | None = None
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    transitions: dict[str, str] = attrs.Factory(dict)
    events: dict[int, tuple[bytes, bytes]] = attrs.Factory(dict)  # seq -> (json, content)
    event_times: dict[int, datetime] = attrs.Factory(dict)  # seq -> written at (retention)
    ended_at: datetime | None = None  # when it last became terminal (retention)

    @property
    def poisoned(self) -> bool:
        return self.poisoned_at is not None

    def due(self, now: datetime) -> bool:
        """Running, unclaimed, healthy and woken by ``now``."""
        return (
            self.run.status is RunStatus.RUNNING
            and self.claim_token is None
            and not self.poisoned
            and self.wake_at is not None
            and self.wake_at <= now
        )


@attrs.define
class MemoryGraphRow:
    data: bytes
    published_at: datetime
