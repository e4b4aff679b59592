"""Negative controls for the ``child_runs`` cases (CHILD-*): stores that keep a parked
parent or its child almost, but not exactly, right.

Like :mod:`.mutants` — whose ``_Reference`` copy of the memory backend these extend —
each class breaks exactly one rule, names the invariant ids meant to catch it, and is
exposed as a factory::

    pytest --pyargs docket_contract_tests \\
        --docket-backend-factory docket_contract_tests.mutants_children:drops_task_metadata

``python -m docket_contract_tests.negative`` runs them with the others. Each bug sits
where child runs lean on a store (a parked task's fields, a signal that commits a
barrier, a parked run's fence, a start of a run naming a parent) and is caught by the
CHILD-* case named in ``catches``; an older case may catch one as well.
"""

from __future__ import annotations

import json

from docket.contract import EventConflict, TransitionResult
from docket.contract.memory import _Row
from docket.contract.proposals import Immediate, InitProposal, ReleaseClaim, Schedule
from docket.contract.validate import ValidationResult, ValidTransition
from docket.records import PARENT_KEY, CheckpointType, OwnerScope, run_from_json, tenant_id_of
from docket.values import canonical_json
from docket_contract_tests.mutants import _factory, _Reference


class DropsTaskMetadata(_Reference):
    bug = "a run's active tasks are written without their metadata and started_at"
    catches = ("CHILD-PARK-ROUNDTRIP",)

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
        tasks = document.get("active_tasks") or {}
        if not tasks:
            return
        for task in tasks.values():  # the bug: a task is stored as its fixed columns only
            task["metadata"], task["started_at"] = {}, None
        row.run_json = canonical_json(document)
        row.run = run_from_json(row.run_json)


class SignalBarrierKeepsWake(_Reference):
    bug = "an unclaimed step_committed commit keeps the run's earlier wake (the child timer)"
    catches = ("CHILD-HANDOFF-UNCLAIMED",)

    def _apply(
        self,
        row: _Row,
        transition_id: str,
        checkpoint_type: CheckpointType,
        schedule: Schedule,
        valid: ValidTransition,
        new: list[int],
    ) -> None:
        earlier = row.wake_at
        super()._apply(row, transition_id, checkpoint_type, schedule, valid, new)
        step = checkpoint_type is CheckpointType.STEP_COMMITTED
        at_once = isinstance(schedule, ReleaseClaim) and isinstance(schedule.wake, Immediate)
        if valid.claim_token is None and step and at_once and earlier is not None:
            row.wake_at = earlier  # the bug: only "parking" checkpoints reschedule


class ParkedFenceOpen(_Reference):
    bug = "a signal to a parked (retry_scheduled) run skips the checkpoint fence: both land"
    catches = ("CHILD-HANDOFF-RACE",)

    @staticmethod
    def _open(row: _Row, token: str | None) -> bool:
        # the bug: "nothing runs while it is parked", so there is no race to fence
        return token is None and row.latest_checkpoint_type is CheckpointType.RETRY_SCHEDULED

    def _fences_hold(self, row: _Row, expected: int, token: str | None) -> bool:
        return self._open(row, token) or super()._fences_hold(row, expected, token)

    def _conflict(self, row: _Row, valid: ValidTransition, old: list[int]) -> EventConflict | None:
        if self._open(row, valid.claim_token):
            return None  # the later hand-off's events at taken seqs are dropped, it lands
        return super()._conflict(row, valid, old)


class ChildStartUpserts(_Reference):
    bug = "initialize of a run naming a parent overwrites a run already stored under its id"
    catches = ("CHILD-START-IDEMPOTENT",)

    def _initialize(
        self, owner: OwnerScope, proposal: InitProposal, valid: ValidationResult
    ) -> TransitionResult:
        if isinstance(valid, ValidTransition) and PARENT_KEY in valid.run.metadata:
            with self._lock:  # the bug: a child's start is an upsert
                key = (tenant_id_of(owner), valid.run.id)
                row = self._runs.get(key)
                if row is not None and proposal.transition_id not in row.transitions:
                    del self._runs[key]
        return super()._initialize(owner, proposal, valid)


drops_task_metadata = _factory(DropsTaskMetadata)
signal_barrier_keeps_wake = _factory(SignalBarrierKeepsWake)
parked_fence_open = _factory(ParkedFenceOpen)
child_start_upserts = _factory(ChildStartUpserts)

#: These mutants by factory name (all of them must be caught).
CHILD_MUTANTS: dict[str, type[_Reference]] = {
    "drops_task_metadata": DropsTaskMetadata,
    "signal_barrier_keeps_wake": SignalBarrierKeepsWake,
    "parked_fence_open": ParkedFenceOpen,
    "child_start_upserts": ChildStartUpserts,
}

__all__ = ["CHILD_MUTANTS", *CHILD_MUTANTS]
