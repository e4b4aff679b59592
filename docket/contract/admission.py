"""The admission ledger's rules (``Feature.ADMISSION``), written once for every backend.

A queue with an admission limit (:attr:`QueueConfig.admission_limited`) counts its
*unfinished* runs. A start asks the store to ``admit`` it first: under the limits it is
admitted (counted) and the caller initialises the run; otherwise the store holds it, with
its opaque start, until an admitted run of the queue finishes (``finish_admitted``), which
frees that count and promotes held starts into it in the same atomic step.

The rules:

* :func:`admits` — a start is admissible while the queue's admitted count is under
  ``admission_limit`` and its tenant's under ``tenant_admission_limit`` (each ``None``:
  no cap). Pausing does not stop admission.
* A new start is admitted only when it is admissible *and* its tenant has no held start
  (so a new start never overtakes its own tenant's queue); otherwise it is held.
* Promotion walks held starts by priority (highest first), then ``seq`` (FIFO), skipping
  a start whose tenant is at its cap, and stops when the queue is at its cap.
* ``admit`` of a run id the ledger already has answers its current state and changes
  nothing (a retried start is not counted twice).

:class:`AdmissionBook` is one queue's ledger as plain data with those operations; the
memory backend keeps one per queue and the contract kit holds every backend to its
answers (docs/contract.md#admission).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

import attrs

from docket.contract.queues import require_queue_name
from docket.records import Admission, AdmissionView, HeldStart, QueueConfig, priority_problem

#: Largest ``start`` a store must keep for one held start (bytes).
MAX_START_BYTES = 4 * 1024 * 1024


def admits(config: QueueConfig, admitted: int, tenant_admitted: int) -> bool:
    """Whether one more start fits: ``admitted`` runs counted in the queue now, and
    ``tenant_admitted`` of them the start's tenant's."""
    if config.admission_limit is not None and admitted >= config.admission_limit:
        return False
    limit = config.tenant_admission_limit
    return limit is None or tenant_admitted < limit


def promotion_key(start: HeldStart) -> tuple[int, int]:
    """Held starts are promoted in ascending order of this key."""
    return (-start.priority, start.seq)


def require_admit_request(
    name: object, run_id: object, tenant: object, priority: object, start: object
) -> None:
    """A malformed ``admit`` raises ``ValueError`` here, before anything is stored."""
    require_queue_name(name)
    require_run_ids([run_id])
    if tenant is not None and (not isinstance(tenant, str) or not tenant):
        raise ValueError(f"tenant: expected a non-empty string or None, got {tenant!r}")
    problem = priority_problem(priority)
    if problem:
        raise ValueError(problem)
    if not isinstance(start, bytes):
        raise ValueError(f"start: expected bytes, got {type(start).__name__}")
    if len(start) > MAX_START_BYTES:
        raise ValueError(f"start: {len(start)} bytes is over {MAX_START_BYTES}")


def require_run_ids(run_ids: object) -> Sequence[str]:
    if isinstance(run_ids, str | bytes) or not isinstance(run_ids, Sequence):
        raise ValueError("run_ids: expected a sequence of run ids")
    for run_id in run_ids:
        if not isinstance(run_id, str) or not run_id or len(run_id.encode()) > 255:
            raise ValueError(f"run_id: expected 1-255 bytes of text, got {run_id!r}")
    return run_ids


@attrs.define
class AdmissionBook:
    """One queue's admission ledger: admitted and held starts by run id."""

    admitted: dict[str, HeldStart] = attrs.Factory(dict)
    held: dict[str, HeldStart] = attrs.Factory(dict)
    next_seq: int = 1

    def tenant_admitted(self, tenant: str | None) -> int:
        return sum(1 for s in self.admitted.values() if s.tenant == tenant)

    def admit(
        self,
        config: QueueConfig,
        run_id: str,
        tenant: str | None,
        priority: int,
        start: bytes,
        now: datetime,
    ) -> Admission:
        if run_id in self.admitted:
            return Admission.ADMITTED
        if run_id in self.held:
            return Admission.HELD
        entry = HeldStart(
            queue=config.name,
            run_id=run_id,
            tenant=tenant,
            priority=priority,
            seq=self.next_seq,
            start=start,
            at=now,
        )
        self.next_seq += 1
        waiting = any(s.tenant == tenant for s in self.held.values())
        if not waiting and admits(config, len(self.admitted), self.tenant_admitted(tenant)):
            self.admitted[run_id] = entry
            return Admission.ADMITTED
        self.held[run_id] = entry
        return Admission.HELD

    def promote(self, config: QueueConfig, now: datetime) -> list[HeldStart]:
        counts = Counter(s.tenant for s in self.admitted.values())
        promoted: list[HeldStart] = []
        for entry in sorted(self.held.values(), key=promotion_key):
            if config.admission_limit is not None and len(self.admitted) >= config.admission_limit:
                break
            if not admits(config, len(self.admitted), counts[entry.tenant]):
                continue
            del self.held[entry.run_id]
            entry = attrs.evolve(entry, at=now)
            self.admitted[entry.run_id] = entry
            counts[entry.tenant] += 1
            promoted.append(entry)
        return promoted

    def finish(self, config: QueueConfig, run_ids: Sequence[str], now: datetime) -> list[HeldStart]:
        for run_id in run_ids:
            self.admitted.pop(run_id, None)
        return self.promote(config, now)

    def drop(self, run_id: str) -> HeldStart | None:
        return self.held.pop(run_id, None)

    def view(self, limit: int) -> AdmissionView:
        admitted = sorted(self.admitted.values(), key=lambda s: s.seq)[:limit]
        held = sorted(self.held.values(), key=promotion_key)[:limit]
        return AdmissionView(admitted=tuple(admitted), held=tuple(held))


__all__ = [
    "MAX_START_BYTES",
    "AdmissionBook",
    "admits",
    "promotion_key",
    "require_admit_request",
    "require_run_ids",
]
