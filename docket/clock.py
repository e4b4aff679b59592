"""Clocks. The pure core never reads one; the runtime and some backends are given one."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol

from docket.values import utc


class Clock(Protocol):
    def __call__(self) -> datetime: ...


def system_clock() -> datetime:
    """The host's wall clock, aware UTC, microsecond precision."""
    return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to (tests, deterministic simulations)."""

    def __init__(self, start: datetime) -> None:
        self._now = utc(start)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, moment: datetime) -> None:
        with self._lock:
            self._now = utc(moment)

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now += delta
            return self._now


__all__ = ["Clock", "ManualClock", "system_clock"]
