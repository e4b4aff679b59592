"""Negative controls for durable time, messages and schedules (TIMER-*, MESSAGE-*, SCHED-*).

Like :mod:`.mutants` — whose ``_Reference`` copy of the memory backend these extend —
each class breaks exactly one rule, names the invariant ids meant to catch it, and is
exposed as a factory::

    pytest --pyargs docket_contract_tests \\
        --docket-backend-factory docket_contract_tests.mutants_time:waiting_never_claimed

``python -m docket_contract_tests.negative`` runs them with the others. The claim and
commit bugs override the memory backend's seams (``_claimable``, ``_fences_hold``,
``_apply``, ``_initialize``); the schedule bugs swap in a copy of the reference
:class:`~docket.contract.memory_schedules.MemorySchedules` with one rule broken.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import ClassVar

import attrs

from docket.contract import Conflict, NotFound, StaleCheckpoint, TooLarge, TransitionResult
from docket.contract.capabilities import Limits
from docket.contract.memory import _Row
from docket.contract.memory_schedules import MemorySchedules
from docket.contract.proposals import InitProposal, Schedule
from docket.contract.schedules import for_create, page_of
from docket.contract.validate import ValidationResult, ValidTransition
from docket.records import (
    TIMER_MESSAGE,
    CheckpointType,
    CronSchedule,
    OwnerScope,
    RunStatus,
    ScheduleCursor,
    SchedulePage,
    Scope,
    require_owner,
    run_from_json,
    tenant_id_of,
)
from docket.values import canonical_json, utc
from docket_contract_tests.mutants import _factory, _Reference

# -- claims and commits ---------------------------------------------------------------------


class WaitingNeverClaimed(_Reference):
    bug = "claim_due takes only running runs: a waiting run's due wake is never claimed"
    catches = ("TIMER-WAITING-DUE",)

    def _claimable(self, row: _Row) -> bool:
        return row.run.status is RunStatus.RUNNING and super()._claimable(row)


class ExternalClaimed(_Reference):
    bug = "a run released waiting on External is stored due at once (claimed like Immediate)"
    catches = ("TIMER-WAITING-DUE",)

    def _apply(
        self,
        row: _Row,
        transition_id: str,
        checkpoint_type: CheckpointType,
        schedule: Schedule,
        valid: ValidTransition,
        new: list[int],
    ) -> None:
        super()._apply(row, transition_id, checkpoint_type, schedule, valid, new)
        if row.run.status is RunStatus.WAITING and row.wake_at is None and not row.claim_token:
            row.wake_at = self._now(None)  # the bug: "waiting" treated as "due when asked"


class WaitingClaimNeverExpires(_Reference):
    bug = "an expired claim on a waiting run is never reclaimed (only running runs are)"
    catches = ("TIMER-WAITING-DUE",)

    def _claimable(self, row: _Row) -> bool:
        held = row.claim_token is not None and row.run.status is RunStatus.WAITING
        return not held and super()._claimable(row)


class DelayedStartDueAtOnce(_Reference):
    bug = "initialize stores a future wake_at as due now (a delayed start runs at once)"
    catches = ("TIMER-DELAYED-START",)

    def _initialize(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidationResult
    ) -> TransitionResult:
        result = super()._initialize(owner, proposal, valid)
        if isinstance(valid, ValidTransition):
            with self._lock:
                row = self._runs.get((tenant_id_of(owner), valid.run.id))
                now = self._now(None)
                if row is not None and row.wake_at is not None and row.wake_at > now:
                    row.wake_at = now
        return result


class DropsMessageTimers(_Reference):
    bug = "a run's message timers are not written (only retry, child and sleep timers are)"
    catches = ("TIMER-TASKS-ROUNDTRIP",)

    def _apply(
        self,
        row: _Row,
        transition_id: str,
        checkpoint_type: CheckpointType,
        schedule: Schedule,
        valid: ValidTransition,
        new: list[int],
    ) -> None:
        super()._apply(row, transition_id, checkpoint_type, schedule, valid, new)
        document = json.loads(row.run_json)
        timers = document.get("timers") or {}
        kept = {k: t for k, t in timers.items() if t.get("kind") != TIMER_MESSAGE}
        if kept != timers:
            document["timers"] = kept
            row.run_json = canonical_json(document)
            row.run = run_from_json(row.run_json)


class SendToHeldRunRefused(_Reference):
    bug = "commit_unclaimed on a running run a worker holds is StaleCheckpoint (sends wait)"
    catches = ("MESSAGE-UNCLAIMED-ANY",)

    def _fences_hold(self, row: _Row, expected: int, token: str | None) -> bool:
        if token is None and row.claim_token is not None:
            return False  # the bug: only parked runs take unclaimed commits
        return super()._fences_hold(row, expected, token)


# -- schedules ------------------------------------------------------------------------------


class _WithSchedules(_Reference):
    """The reference backend with another schedule store (``store``)."""

    store: ClassVar[type[MemorySchedules]] = MemorySchedules

    def __init__(
        self, clock: Callable[[], datetime] | None = None, limits: Limits | None = None
    ) -> None:
        super().__init__(clock=clock, limits=limits)
        self.schedules = self.store(self._clock, self._limits)


class _NoVersionFence(MemorySchedules):
    async def update_schedule(
        self, owner: OwnerScope, schedule: CronSchedule, expected_version: int
    ) -> CronSchedule | NotFound | StaleCheckpoint | TooLarge:
        if not isinstance(expected_version, int) or isinstance(expected_version, bool):
            raise TypeError("expected_version must be an int")
        current = None
        if isinstance(schedule, CronSchedule):
            current = self._rows.get((tenant_id_of(require_owner(owner)), schedule.id))
        # the bug: the write goes over whatever version is stored
        version = current.version if current is not None else expected_version
        return await super().update_schedule(owner, schedule, version)


class ScheduleNoVersionFence(_WithSchedules):
    bug = "update_schedule writes over any stored version (no version fence)"
    catches = ("SCHED-UPDATE-FENCE",)
    store = _NoVersionFence


def _unpaused_due(schedule: CronSchedule) -> datetime | None:
    return attrs.evolve(schedule, paused=False).due_at


class _DuePaused(MemorySchedules):
    async def due_schedules(
        self, now: datetime | None = None, limit: int = 100
    ) -> tuple[CronSchedule, ...]:
        await super().due_schedules(now, limit)  # the reference's argument checks
        moment = utc(now) if now is not None else utc(self._clock())
        with self._lock:  # the bug: due by its ticks, paused or not
            due = [
                (at, s)
                for s in self._rows.values()
                if (at := _unpaused_due(s)) is not None and at <= moment
            ]
        due.sort(key=lambda pair: (pair[0], pair[1].id, pair[1].tenant_id or ""))
        return tuple(s for _, s in due[:limit])


class ScheduleDuePaused(_WithSchedules):
    bug = "due_schedules returns paused schedules too"
    catches = ("SCHED-DUE",)
    store = _DuePaused


class _ListLeaks(MemorySchedules):
    async def list_schedules(
        self, scope: Scope, after: ScheduleCursor | None = None, limit: int = 100
    ) -> SchedulePage:
        with self._lock:  # the bug: every scope sees every tenant's schedules
            rows = list(self._rows.values())
        return page_of(rows, after, limit)


class ScheduleListLeaks(_WithSchedules):
    bug = "list_schedules ignores the scope: a tenant lists every tenant's schedules"
    catches = ("SCHED-LIST",)
    store = _ListLeaks


class _DeleteAnyScope(MemorySchedules):
    async def delete_schedule(self, owner: OwnerScope, schedule_id: str) -> bool:
        await super().fetch_schedule(owner, schedule_id)  # the reference's argument checks
        with self._lock:  # the bug: the id is deleted in whichever scope holds it
            keys = [key for key in self._rows if key[1] == schedule_id]
            for key in keys:
                del self._rows[key]
        return bool(keys)


class ScheduleDeleteAnyScope(_WithSchedules):
    bug = "delete_schedule deletes the id in every scope, not only the owner's"
    catches = ("SCHED-DELETE",)
    store = _DeleteAnyScope


class _Unchecked(MemorySchedules):
    async def create_schedule(
        self, owner: OwnerScope, schedule: CronSchedule
    ) -> CronSchedule | Conflict | TooLarge:
        # the bug: the document is stored as sent, never checked
        stored = attrs.evolve(schedule, version=1, tenant_id=tenant_id_of(require_owner(owner)))
        with self._lock:
            key = (stored.tenant_id, stored.id)
            if key in self._rows:
                return Conflict(f"schedule {stored.id!r} already exists")
            self._rows[key] = stored
        return stored


class ScheduleUnchecked(_WithSchedules):
    bug = "create_schedule stores a malformed schedule instead of raising"
    catches = ("SCHED-BAD-INPUT",)
    store = _Unchecked


class _NoSizeLimit(MemorySchedules):
    async def create_schedule(
        self, owner: OwnerScope, schedule: CronSchedule
    ) -> CronSchedule | Conflict | TooLarge:
        stored = for_create(owner, schedule, self._limits)  # the bug: no check_limit
        with self._lock:
            key = (stored.tenant_id, stored.id)
            if key in self._rows:
                return Conflict(f"schedule {stored.id!r} already exists")
            self._rows[key] = stored
        return stored


class ScheduleNoSizeLimit(_WithSchedules):
    bug = "create_schedule stores a schedule past max_run_bytes"
    catches = ("SCHED-TOO-LARGE",)
    store = _NoSizeLimit


waiting_never_claimed = _factory(WaitingNeverClaimed)
external_claimed = _factory(ExternalClaimed)
waiting_claim_never_expires = _factory(WaitingClaimNeverExpires)
delayed_start_due_at_once = _factory(DelayedStartDueAtOnce)
drops_message_timers = _factory(DropsMessageTimers)
send_to_held_run_refused = _factory(SendToHeldRunRefused)
schedule_no_version_fence = _factory(ScheduleNoVersionFence)
schedule_due_paused = _factory(ScheduleDuePaused)
schedule_list_leaks = _factory(ScheduleListLeaks)
schedule_delete_any_scope = _factory(ScheduleDeleteAnyScope)
schedule_unchecked = _factory(ScheduleUnchecked)
schedule_no_size_limit = _factory(ScheduleNoSizeLimit)

#: These mutants by factory name (all of them must be caught).
TIME_MUTANTS: dict[str, type[_Reference]] = {
    "waiting_never_claimed": WaitingNeverClaimed,
    "external_claimed": ExternalClaimed,
    "waiting_claim_never_expires": WaitingClaimNeverExpires,
    "delayed_start_due_at_once": DelayedStartDueAtOnce,
    "drops_message_timers": DropsMessageTimers,
    "send_to_held_run_refused": SendToHeldRunRefused,
    "schedule_no_version_fence": ScheduleNoVersionFence,
    "schedule_due_paused": ScheduleDuePaused,
    "schedule_list_leaks": ScheduleListLeaks,
    "schedule_delete_any_scope": ScheduleDeleteAnyScope,
    "schedule_unchecked": ScheduleUnchecked,
    "schedule_no_size_limit": ScheduleNoSizeLimit,
}

__all__ = ["TIME_MUTANTS", *TIME_MUTANTS]
