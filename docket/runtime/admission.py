"""Admission limits in the runtime (``Feature.ADMISSION``): starting, releasing, healing.

A queue whose config sets ``admission_limit`` / ``tenant_admission_limit`` counts its
unfinished runs in the backend's admission ledger (:mod:`docket.contract.admission`).
``Docket.start_run`` asks the ledger to ``admit`` a start before it initialises the run;
a held start is kept by the store as the opaque bytes of :func:`encode_start` until an
admitted run of the queue finishes. This module is the runtime side, one implementation
for every path:

* :func:`encode_start` / :func:`decode_start` — a start as the store keeps it: the
  initialising proposal, its events and the owner, as versioned JSON built from the
  records' own codecs (a start that does not decode raises :class:`StartDecodeError`);
* :class:`Admissions` — :meth:`~Admissions.finished` is called after every commit that
  may end a run (a worker's drain, the facade's signals such as ``cancel_run``): for a
  run marked with :data:`ADMISSION_METADATA` that just reached a terminal status it
  calls ``finish_admitted`` and initialises every promoted start;
  :meth:`~Admissions.reconcile` is a worker's periodic repair of what a crashed caller
  left (docs/queues.md#admission-limits).

A poisoned run is not finished (``retry_poisoned_run`` resumes it): it keeps its count
until it ends, e.g. by ``cancel_run``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import attrs

from docket.contract.capabilities import Feature
from docket.contract.errors import Conflict, NotFound, Retryable
from docket.contract.protocols import AdmissionStore, Backend, QueueStore
from docket.errors import CorruptData
from docket.proposals import InitProposal
from docket.records import (
    Checkpoint,
    CheckpointType,
    Event,
    HeldStart,
    OwnerScope,
    Run,
    event_from_dict,
    event_to_dict,
    format_timestamp,
    owner_scope,
    parse_timestamp,
    run_from_dict,
    run_to_dict,
    tenant_id_of,
)
from docket.runtime.lifecycle import CommitContext, CommitPolicy, Observers, commit
from docket.telemetry import Telemetry, stamp_logger
from docket.values import canonical_json

__all__ = [
    "ADMISSION_METADATA",
    "START_VERSION",
    "AdmissionReport",
    "Admissions",
    "DecodedStart",
    "StartDecodeError",
    "admission_queue",
    "decode_start",
    "encode_start",
]

log = stamp_logger(logging.getLogger("docket.worker"))

#: The run metadata entry naming the queue whose admission ledger counts the run: whoever
#: commits the run's end knows from it to release the count.
ADMISSION_METADATA: Final = "docket.admission"
#: A reconcile pass reads ``list_queues`` (which also counts depth) once in this many.
LEDGER_SCAN_EVERY: Final = 12
#: The version of :func:`encode_start`'s JSON (``"v"``); another version does not decode.
START_VERSION: Final = 1


class StartDecodeError(CorruptData):
    """A held start's stored bytes are not a start this version can decode."""


@attrs.frozen(kw_only=True)
class DecodedStart:
    """What a held start holds: the owner and the ``initialize`` call to make."""

    owner: OwnerScope
    proposal: InitProposal
    events: tuple[Event, ...]


def encode_start(owner: OwnerScope, proposal: InitProposal, events: Sequence[Event]) -> bytes:
    """The bytes a store keeps for a start (decoded by :func:`decode_start`)."""
    return canonical_json(
        {
            "v": START_VERSION,
            "tenant": tenant_id_of(owner),
            "transition_id": proposal.transition_id,
            "run": run_to_dict(proposal.run),
            "wake_at": format_timestamp(proposal.wake_at),
            "checkpoint_type": str(proposal.checkpoint_type),
            "queue": proposal.queue,
            "priority": proposal.priority,
            "events": [event_to_dict(event) for event in events],
        }
    )


def decode_start(data: bytes) -> DecodedStart:
    """Decode :func:`encode_start`; :class:`StartDecodeError` for anything else."""
    try:
        doc: Any = json.loads(data)
        if not isinstance(doc, dict) or doc.get("v") != START_VERSION:
            version = doc.get("v") if isinstance(doc, dict) else None
            raise ValueError(f"expected a version {START_VERSION} start, got version {version!r}")
        tenant = doc["tenant"]
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            raise ValueError(f"tenant: expected a non-empty string or null, got {tenant!r}")
        if not isinstance(doc["events"], list):
            raise ValueError("events: expected a list")
        proposal = InitProposal(
            transition_id=_text(doc["transition_id"], "transition_id"),
            run=run_from_dict(doc["run"]),
            wake_at=parse_timestamp(_text(doc["wake_at"], "wake_at")),
            checkpoint_type=CheckpointType(doc["checkpoint_type"]),
            queue=_text(doc["queue"], "queue"),
            priority=int(doc["priority"]),
        )
        events = tuple(event_from_dict(event) for event in doc["events"])
    except (ValueError, KeyError, TypeError) as exc:  # json and record errors are ValueErrors
        raise StartDecodeError(f"a held start does not decode: {exc}"[:1000]) from None
    return DecodedStart(owner=owner_scope(tenant), proposal=proposal, events=events)


def _text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected text, got {value!r}")
    return value


def admission_queue(run: Run) -> str | None:
    """The queue whose admission ledger counts ``run`` (``None``: none does)."""
    queue = run.metadata.get(ADMISSION_METADATA)
    return queue if isinstance(queue, str) else None


@attrs.define
class AdmissionReport:
    """What one :meth:`Admissions.reconcile` pass did (for logs and tests)."""

    finished: int = 0  # admitted runs found terminal (or gone past the grace) and released
    started: int = 0  # starts initialised (admitted without a run, or promoted)


class Admissions:
    """The admission ledger as this process's runtime uses it (one per Docket)."""

    def __init__(
        self,
        backend: Backend,
        policy: CommitPolicy,
        *,
        observers: Observers | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.backend = backend
        self._backend = backend
        self._policy = policy
        self._observers = observers or Observers()
        self._telemetry = telemetry if telemetry is not None else Telemetry()
        self._store: AdmissionStore | None = None
        self._known = False
        self._ledgers: set[str] = set()  # queues a pass found limited or with a ledger
        self._passes = 0

    @property
    def store(self) -> AdmissionStore | None:
        """``backend.admissions`` when the backend declares admission (looked up once)."""
        if not self._known:
            if Feature.ADMISSION in self._backend.capabilities().features:
                self._store = getattr(self._backend, "admissions")  # noqa: B009  # optional
            self._known = True
        return self._store

    # -- release and promotion ----------------------------------------------------------

    async def finished(self, before: Run | None, after: Run) -> None:
        """Called after a commit of ``after`` (``before``: the run it replaced, when
        known): release its count when it just ended. Best effort — a failure is logged
        and left to :meth:`reconcile`."""
        if not after.status.terminal or (before is not None and before.status.terminal):
            return
        queue = admission_queue(after)
        if queue is None:
            return
        try:
            await self.release(queue, [after.id])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "releasing the admission of run %s in queue %s failed (%s); "
                "a worker's reconcile will",
                after.id,
                queue,
                exc,
            )

    async def release(self, queue: str, run_ids: Sequence[str]) -> int:
        """``finish_admitted`` for ``run_ids`` and initialise every start it promoted;
        answers how many were initialised."""
        store = self.store
        if store is None:
            return 0
        promoted = await store.finish_admitted(queue, list(run_ids))
        return await self.start_all(promoted)

    async def start_all(self, promoted: Sequence[HeldStart]) -> int:
        """Initialise admitted starts; a start that can never be initialised (it does
        not decode, or the store refuses it for good) is finished, and what that
        promotes is started in turn."""
        started = 0
        todo = list(promoted)
        while todo:
            entry = todo.pop(0)
            outcome = await self.initialise(entry)
            if outcome is True:
                started += 1
            elif outcome is False and self.store is not None:
                todo.extend(await self.store.finish_admitted(entry.queue, [entry.run_id]))
        return started

    async def initialise(self, entry: HeldStart) -> bool | None:
        """Initialise one admitted start: ``True`` when its run exists now (this call
        or an earlier one wrote it: ``Conflict`` is success), ``False`` when it never
        can be, ``None`` when the outcome is unknown (left to reconcile)."""
        try:
            start = decode_start(entry.start)
        except StartDecodeError as exc:
            log.error("the admitted start of run %s cannot be started: %s", entry.run_id, exc)
            return False
        write = functools.partial(
            self._backend.transitions.initialize, start.owner, start.proposal, start.events
        )
        try:
            stored = await commit(write, self._policy, what=f"start of run {entry.run_id}")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "starting admitted run %s failed (%s); reconcile retries", entry.run_id, exc
            )
            return None
        if isinstance(stored, Run):
            self._deliver(start, stored)
            return True
        if isinstance(stored, Conflict):  # written already (by its starter, or a retry)
            return True
        if isinstance(stored, Retryable):
            log.warning("starting admitted run %s: %s; reconcile retries", entry.run_id, stored)
            return None
        log.error("the store refused admitted run %s for good: %r", entry.run_id, stored)
        return False

    def _deliver(self, start: DecodedStart, stored: Run) -> None:
        tenant_id = tenant_id_of(start.owner)
        if not self._telemetry and not self._observers:
            return
        checkpoint = Checkpoint(
            type=start.proposal.checkpoint_type,
            seq=stored.checkpoint_seq,
            run=stored,
            events=start.events,
            created_at=stored.updated_at,
        )
        if self._telemetry:
            self._telemetry.committed(checkpoint, operation="start", tenant_id=tenant_id)
        if self._observers:
            context = CommitContext(tenant_id=tenant_id, operation="start")
            self._observers.deliver(checkpoint, context)

    # -- crash repair ---------------------------------------------------------------------

    async def _ledger_queues(self, queues: QueueStore) -> list[str]:
        """The queues a pass repairs: those limited now, and those it found with a ledger
        before (a limit removed while starts were counted). The configs alone are the
        cheap read (``list_queues`` counts depth too); every ``LEDGER_SCAN_EVERY``-th pass
        reads it anyway, to find a ledger left in a queue whose limit was removed before
        this worker saw it."""
        self._passes += 1
        if self._passes % LEDGER_SCAN_EVERY == 1:
            for status in await queues.list_queues():
                if status.config.admission_limited or status.admitted or status.held:
                    self._ledgers.add(status.config.name)
        else:
            for config in await queues.queue_configs():
                if config.admission_limited:
                    self._ledgers.add(config.name)
        return sorted(self._ledgers)

    async def reconcile(
        self, now: datetime, *, settle: timedelta, grace: timedelta
    ) -> AdmissionReport:
        """One repair pass over every queue with an admission limit or a ledger: finish
        admitted runs that are terminal, start admitted starts whose run does not exist
        (admitted at least ``settle`` ago — its starter may be writing it now — and at
        most ``grace`` ago: an older one's run may have finished and been removed by
        retention, and must not run twice; it is finished instead), then
        ``promote_held`` (a raised limit, a promotion a crashed caller began)."""
        report = AdmissionReport()
        store = self.store
        if store is None:
            return report
        queues: QueueStore = getattr(self._backend, "queues")  # noqa: B009  # ADMISSION needs it
        for name in await self._ledger_queues(queues):
            view = await store.admissions(name)
            if not view.admitted and not view.held:
                self._ledgers.discard(name)
                continue
            done: list[str] = []
            for entry in view.admitted:
                owner = owner_scope(entry.tenant)
                found = await self._backend.runs.fetch_run(owner, entry.run_id)
                if isinstance(found, Run):
                    if found.status.terminal:
                        done.append(entry.run_id)
                    continue
                assert isinstance(found, NotFound)
                age = now - entry.at
                if age < settle:
                    continue
                if age <= grace:
                    outcome = await self.initialise(entry)
                    if outcome is True:
                        report.started += 1
                    elif outcome is False:
                        done.append(entry.run_id)
                    continue
                log.warning(
                    "admitted run %s of queue %s was admitted %s ago and does not exist: "
                    "releasing its count without starting it",
                    entry.run_id,
                    name,
                    age,
                )
                done.append(entry.run_id)
            if done:
                report.finished += len(done)
                report.started += await self.start_all(await store.finish_admitted(name, done))
            report.started += await self.start_all(await store.promote_held(name))
        return report
