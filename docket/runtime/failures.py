"""What a worker tells its operators about failures: failed node attempts and poisoned runs.

Every failed node attempt a drain settles is logged on ``docket.worker`` — WARNING when
it will be retried, ERROR when it is permanent (it fails the run) — with the run id,
tenant, node, task and attempt in the message and as ``extra`` (the record attributes
``run_id``, ``tenant_id``, ``node_id``, ``task_id``, ``attempt``), so a log pipeline can
index them. A permanent failure's record also carries the traceback the attempt kept.

A run is poisoned either by ``claim_due`` (claimed too often without progress) or by
``abandon_claim`` (handed back too often: this deployment cannot use its graph, e.g. after
a deploy renamed a node implementation). The drain reports the second kind as a
:class:`~docket.contract.proposals.PoisonedClaim` in its outcome, so the worker handles
both the same way: log ERROR, call ``on_poisoned``, count it in ``WorkerStats``.
"""

from __future__ import annotations

import logging

from docket.contract.errors import Poisoned
from docket.contract.proposals import Lease, PoisonedClaim
from docket.core.moment import Moment
from docket.records import EventType
from docket.telemetry import stamp_logger

__all__ = ["log_failed_attempts", "poisoned_claim"]

log = stamp_logger(logging.getLogger("docket.worker"))


def log_failed_attempts(moment: Moment, tenant_id: str | None) -> None:
    """Log each ``node_failed`` event of ``moment`` (settled, not yet committed)."""
    run_id = moment.run.id
    for event in moment.events:
        if event.type is not EventType.NODE_FAILED:
            continue
        payload = event.payload
        attempt = payload.get("attempt")
        extra = {
            "run_id": run_id,
            "tenant_id": tenant_id,
            "node_id": event.node_id,
            "task_id": event.task_id,
            "attempt": attempt,
        }
        where = (
            f"node {event.node_id} of run {run_id} (tenant {tenant_id or '-'}, "
            f"task {event.task_id}, attempt {attempt})"
        )
        reason = payload.get("reason")
        if payload.get("permanent") is not True:
            log.warning("%s failed and will be retried: %s", where, reason, extra=extra)
            continue
        error = payload.get("error")
        trace = error.get("traceback") if isinstance(error, dict) else None
        if isinstance(trace, str) and trace:
            extra["traceback"] = trace
            log.error("%s failed permanently: %s\n%s", where, reason, trace.rstrip(), extra=extra)
        else:
            log.error("%s failed permanently: %s", where, reason, extra=extra)


def poisoned_claim(lease: Lease, answer: object) -> PoisonedClaim | None:
    """The poisoned run, when ``abandon_claim`` answered ``Poisoned``."""
    if not isinstance(answer, Poisoned):
        return None
    return PoisonedClaim(
        run_id=lease.run_id,
        owner=lease.owner,
        poisoned_at=answer.poisoned_at,
        poison_reason=answer.reason,
    )
