"""Runtime settings: one frozen value, validated when a :class:`~docket.Docket` opens.

Times are in seconds (floats). Every default is chosen for a production worker on the
SQLite default backend; tests shorten the claim TTL and the poll interval.

============================  ==========  ====================================================
setting                       default     meaning
============================  ==========  ====================================================
``claim_ttl``                 30.0        a claim not refreshed for this long may be taken
                                          over by another worker (recovery of a dead worker)
``poll_interval``             1.0         longest pause between two ``claim_due`` polls of an
                                          idle worker (each pause is jittered down to half)
``concurrency``               10          runs one worker drains at the same time
``node_timeout``              60.0        attempt timeout of a node that declares none
``max_attempt_time``          3600.0      host maximum for any attempt; a node declaring more
                                          is incompatible with this host
``max_supersteps``            10000       host ceiling on supersteps (a graph may only lower
                                          it)
``max_map_items``             10000       host ceiling on the items of one map activation (a
                                          graph's ``max_items`` may only lower it)
``max_claim_attempts``        5           claims without progress before a run is poisoned
``max_claim_abandons``        5           hand-backs (unusable graph) before poisoning
``drain_max_moments``         100         commits one drain makes before yielding the run
``drain_max_seconds``         30.0        time one drain works before yielding the run
``shutdown_timeout``          30.0        how long a stopping worker lets in-flight drains
                                          finish before it cancels them and releases claims
``commit_attempts``           5           tries of one proposal when the store answers
                                          ``Retryable`` or fails with an unknown outcome
``commit_backoff``            0.05        first pause between those tries (doubles each time)
``signal_attempts``           4           evaluations of a signal (resolve, cancel) that keeps
                                          losing the checkpoint race
``abandon_backoff``           5.0         delay before a run whose graph cannot be used here
                                          is offered again
``incompatible_backoff``      30.0        first delay before a run whose node timeouts exceed
                                          this host is offered again (doubles, capped below)
``incompatible_backoff_cap``  3600.0      cap of that delay
``child_recheck``             5.0         first delay before a parent looks at a child run it
                                          waits for (the child's own hand-off normally wakes
                                          it first; this bounds a lost one)
``child_recheck_cap``         300.0       longest such delay (it grows with the wait)
``schedule_poll``             None        longest pause between two looks of a worker's ticker
                                          at the due cron schedules (``None``: ``poll_interval``)
``eager_starts``              True        a run started through a Docket whose running worker
                                          has a free slot is written already claimed by that
                                          worker and drained at once (when the backend
                                          declares ``ClaimedStarts``)
``prune_events_after``        None        a worker prunes events written longer ago than this
                                          (``None``: never; docs/history.md#retention)
``prune_runs_after``          None        a worker prunes runs finished longer ago than this,
                                          with their events (``None``: never)
``prune_every``               3600.0      how often a worker runs a retention pass (when one
                                          of the two above is set)
``queue_refresh``             1.0         longest time a claimer uses its view of the queue
                                          configs before reading them again (a limit change
                                          takes effect within it; docs/queues.md)
``admission_reconcile``       5.0         how often a worker re-reads the admission ledgers to
                                          finish runs and start promoted runs a crashed
                                          caller left (docs/queues.md#admission-limits)
``admission_grace``           3600.0      an admitted start whose run does not exist is
                                          started by reconcile only this long after admission
============================  ==========  ====================================================

The recovery bound of a dead worker's run is ``claim_ttl + poll_interval`` (while some
worker has a free slot); see ``docs/operations.md``.
"""

from __future__ import annotations

import math
from typing import Final

import attrs

from docket.errors import InvalidSettings
from docket.values import JSONValue

__all__ = ["DEFAULT_SETTINGS", "InvalidSettings", "Settings"]


_SECONDS: Final = (
    "claim_ttl",
    "poll_interval",
    "node_timeout",
    "drain_max_seconds",
    "commit_backoff",
    "abandon_backoff",
    "incompatible_backoff",
    "incompatible_backoff_cap",
    "child_recheck",
    "child_recheck_cap",
    "prune_every",
    "queue_refresh",
    "admission_reconcile",
    "admission_grace",
)
_COUNTS: Final = (
    "concurrency",
    "max_claim_attempts",
    "max_claim_abandons",
    "drain_max_moments",
    "commit_attempts",
    "max_map_items",
    "signal_attempts",
)


@attrs.frozen(kw_only=True)
class Settings:
    """How a runtime instance claims, executes and commits. See the module table."""

    claim_ttl: float = 30.0
    poll_interval: float = 1.0
    concurrency: int = 10
    node_timeout: float = 60.0
    max_attempt_time: float | None = 3600.0
    max_supersteps: int | None = 10_000
    max_map_items: int = 10_000
    max_claim_attempts: int = 5
    max_claim_abandons: int = 5
    drain_max_moments: int = 100
    drain_max_seconds: float = 30.0
    shutdown_timeout: float = 30.0
    commit_attempts: int = 5
    commit_backoff: float = 0.05
    signal_attempts: int = 4
    abandon_backoff: float = 5.0
    incompatible_backoff: float = 30.0
    incompatible_backoff_cap: float = 3600.0
    child_recheck: float = 5.0
    child_recheck_cap: float = 300.0
    eager_starts: bool = True
    schedule_poll: float | None = None  # None: poll_interval (docs/schedules.md)
    prune_events_after: float | None = None  # retention: docket/runtime/retention.py
    prune_runs_after: float | None = None
    prune_every: float = 3600.0
    queue_refresh: float = 1.0  # Feature.QUEUES: docket/runtime/queues.py
    admission_reconcile: float = 5.0  # Feature.ADMISSION: docket/runtime/admission.py
    admission_grace: float = 3600.0

    def problems(self) -> list[str]:
        """Every reason these settings cannot run (empty when they can)."""
        out: list[str] = []
        for name in _SECONDS:
            value = getattr(self, name)
            if not _number(value) or not value > 0:
                out.append(f"{name} must be a positive number of seconds, got {value!r}")
        if not _number(self.shutdown_timeout) or self.shutdown_timeout < 0:
            out.append(f"shutdown_timeout must be >= 0 seconds, got {self.shutdown_timeout!r}")
        for name in _COUNTS:
            value = getattr(self, name)
            if not _integer(value) or value < 1:
                out.append(f"{name} must be a positive integer, got {value!r}")
        if self.schedule_poll is not None and (
            not _number(self.schedule_poll) or not self.schedule_poll > 0
        ):
            out.append(
                f"schedule_poll must be a positive number of seconds or None, "
                f"got {self.schedule_poll!r}"
            )
        for name in ("prune_events_after", "prune_runs_after"):
            age = getattr(self, name)
            if age is not None and (not _number(age) or not age > 0):
                out.append(f"{name} must be a positive number of seconds or None, got {age!r}")
        if not isinstance(self.eager_starts, bool):
            out.append(f"eager_starts must be True or False, got {self.eager_starts!r}")
        if self.max_supersteps is not None and (
            not _integer(self.max_supersteps) or self.max_supersteps < 1
        ):
            out.append(
                f"max_supersteps must be a positive integer or None, got {self.max_supersteps!r}"
            )
        if self.max_attempt_time is not None:
            if not _number(self.max_attempt_time) or not self.max_attempt_time > 0:
                out.append(
                    "max_attempt_time must be a positive number of seconds or None, "
                    f"got {self.max_attempt_time!r}"
                )
            elif _number(self.node_timeout) and self.node_timeout > self.max_attempt_time:
                out.append(
                    f"node_timeout ({self.node_timeout} s) must not exceed max_attempt_time "
                    f"({self.max_attempt_time} s)"
                )
        if (
            _number(self.incompatible_backoff)
            and _number(self.incompatible_backoff_cap)
            and self.incompatible_backoff > self.incompatible_backoff_cap
        ):
            out.append("incompatible_backoff must not exceed incompatible_backoff_cap")
        if (
            _number(self.child_recheck)
            and _number(self.child_recheck_cap)
            and self.child_recheck > self.child_recheck_cap
        ):
            out.append("child_recheck must not exceed child_recheck_cap")
        if _number(self.claim_ttl) and self.claim_ttl > 0 and self.claim_ttl < 0.003:
            out.append("claim_ttl must be at least 3 ms (the heartbeat runs every claim_ttl / 3)")
        return out

    def validate(self) -> Settings:
        """Return ``self``, or raise :class:`InvalidSettings` naming every problem."""
        found = self.problems()
        if found:
            raise InvalidSettings(
                "invalid docket settings: " + "; ".join(found),
                details={"problems": list[JSONValue](found)},
            )
        return self

    @property
    def heartbeat_interval(self) -> float:
        """How often a worker refreshes a claim it holds: a third of the TTL."""
        return self.claim_ttl / 3

    @property
    def recovery_bound(self) -> float:
        """Longest time before a dead worker's run is claimed again by an idle worker."""
        return self.claim_ttl + self.poll_interval

    @property
    def schedule_interval(self) -> float:
        """How often a worker's ticker looks at the due schedules."""
        return self.poll_interval if self.schedule_poll is None else self.schedule_poll

    @property
    def node_timeout_ms(self) -> int:
        return max(1, math.ceil(self.node_timeout * 1000))

    @property
    def max_attempt_ms(self) -> int | None:
        if self.max_attempt_time is None:
            return None
        return max(1, math.ceil(self.max_attempt_time * 1000))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


DEFAULT_SETTINGS: Final = Settings()
