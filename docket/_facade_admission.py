"""The facade's admission limits (``Feature.ADMISSION``): starts a limit holds, and how the
facade reports them. docs/queues.md#admission-limits has the concepts.

A start into a queue whose config is ``admission_limited`` is built and validated exactly
as any other (bad input fails at start), marked with
:data:`~docket.runtime.admission.ADMISSION_METADATA`, and offered to the store's ledger
(``admit``) before it is initialised:

* ``ADMITTED`` — initialised at once, as without a limit (never eagerly claimed);
* ``HELD`` — the store keeps it; the run is not in the run store. ``start_run`` answers
  it as a :class:`~docket.records.Run` whose status is ``RunStatus.QUEUED`` (reported by
  the facade only, never stored), ``checkpoint_seq`` 0. ``inspect_run``, ``fetch_run``
  and ``await_run`` find it in the ledger while the run store does not have it;
  ``cancel_run`` drops it (the run never existed: afterwards it is ``NotFound``);
  signals and messages raise ``InactiveRun`` (details ``status=queued``).

:class:`AdmissionMethods` adds ``Docket.admissions(queue)``: the ledger for operators.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

import attrs

from docket._facade_keyed import started_before
from docket._facade_queues import queue_store
from docket._facade_reads import await_settled
from docket.contract import errors as contract
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.protocols import AdmissionStore, Backend
from docket.errors import (
    AwaitTimeout,
    Conflict,
    InactiveRun,
    InvalidOptions,
    NotFound,
    from_contract,
)
from docket.proposals import InitProposal
from docket.records import (
    Admission,
    AdmissionView,
    Event,
    HeldStart,
    OwnerScope,
    Run,
    RunInfo,
    RunStatus,
    queue_name_problem,
    tenant_id_of,
)
from docket.runtime.admission import (
    ADMISSION_METADATA,
    Admissions,
    admission_queue,
    decode_start,
    encode_start,
)
from docket.runtime.queues import QueueView, admission_unsupported

__all__ = [
    "ADMISSION_METADATA",
    "MAX_ADMISSION_PAGE",
    "AdmissionMethods",
    "admit_start",
    "admitted_refused",
    "await_admitted",
    "cancel_queued",
    "find_queued",
    "queued_info",
    "queued_run",
    "require_active",
    "starts_admitted",
]

#: The most starts of each kind ``Docket.admissions`` answers.
MAX_ADMISSION_PAGE: Final = 10_000


class AdmissionMethods:
    """The admission methods of :class:`~docket.Docket`."""

    if TYPE_CHECKING:
        _store: Backend

        @property
        def capabilities(self) -> Capabilities: ...
        def _ready(self) -> None: ...

    async def admissions(self, queue: str, *, limit: int = 1000) -> AdmissionView:
        """A queue's admission ledger, for operators: the admitted starts (counted
        against its limits, by admission order) and the held ones in promotion order
        (priority, highest first, then FIFO), at most ``limit`` of each. Each
        :class:`~docket.records.HeldStart` names its run, tenant, priority and when it
        was held or admitted. ``Unsupported`` without ``Feature.ADMISSION``."""
        self._ready()
        store = admission_store(self._store, self.capabilities, "read an admission ledger")
        problem = queue_name_problem(queue)
        if problem:
            raise InvalidOptions(problem, phase="queue")
        if (
            not isinstance(limit, int)
            or isinstance(limit, bool)
            or not 1 <= limit <= MAX_ADMISSION_PAGE
        ):
            raise InvalidOptions(f"limit must be 1..{MAX_ADMISSION_PAGE}, got {limit!r}")
        return await store.admissions(queue, limit)


def admission_store(backend: Backend, caps: Capabilities, action: str) -> AdmissionStore:
    """``backend.admissions``, or ``Unsupported``."""
    queue_store(backend, caps, action)  # no queues: the queue refusal
    if Feature.ADMISSION not in caps.features:
        raise admission_unsupported(action, caps.name or "unnamed")
    store: AdmissionStore = getattr(backend, "admissions")  # noqa: B009  # optional store
    return store


async def starts_admitted(view: QueueView, caps: Capabilities, queue: str) -> bool:
    """Whether a start in ``queue`` must be admitted first: its config (from the cached
    view: no round trip per start) sets an admission limit."""
    if view.store is None:
        return False
    config = await view.config(queue)
    if config is None or not config.admission_limited:
        return False
    if Feature.ADMISSION not in caps.features:  # a config written through another backend
        raise admission_unsupported(f"start a run in queue {queue!r}", caps.name or "unnamed")
    return True


def queued_run(run: Run) -> Run:
    """How the facade reports a start that is not initialised yet."""
    return attrs.evolve(run, status=RunStatus.QUEUED, checkpoint_seq=0, event_seq=0)


def queued_info(entry: HeldStart) -> RunInfo:
    """``inspect_run`` of a start the ledger has and the run store does not."""
    start = decode_start(entry.start)
    return RunInfo(
        run=queued_run(start.proposal.run),
        tenant_id=entry.tenant,
        wake_at=None,
        claimed_at=None,
        claim_attempts=0,
        claim_abandons=0,
        poisoned_at=None,
        poison_reason=None,
        latest_checkpoint_type=start.proposal.checkpoint_type,
        queue=entry.queue,
        priority=entry.priority,
    )


async def admit_start(
    admissions: Admissions,
    owner: OwnerScope,
    proposal: InitProposal,
    events: Sequence[Event],
    *,
    explicit_id: bool,
    key: str | None,
) -> Run | None:
    """Offer a start to the ledger: ``None`` when admitted (initialise it now), else the
    run to answer (queued, or the run a keyed start made before). A held run id (a keyed
    start again, or ``run_id=`` of a held run) answers the start held first; a
    ``run_id=`` held by another start, or taken by a run, is ``Conflict``."""
    store = admissions.store
    assert store is not None  # starts_admitted checked the feature
    run = proposal.run
    if explicit_id or key is not None:
        # a run id in use must not be counted, nor held to fail only when promoted
        found = await admissions.backend.runs.fetch_run(owner, run.id)
        if isinstance(found, Run):
            taken = contract.Conflict(f"run {run.id!r} exists")
            if key is None:
                raise from_contract(taken, subject=f"run {run.id!r}")
            return await started_before(admissions.backend, owner, key, run.graph_id, taken)
    start = encode_start(owner, proposal, events)
    tenant = tenant_id_of(owner)
    answer = await store.admit(proposal.queue, run.id, tenant, proposal.priority, start)
    if not isinstance(answer, Admission):
        raise NotFound(
            f"no queue {proposal.queue!r}",
            phase="start",
            details={"what": "queue", "queue": proposal.queue},
        )
    if answer is Admission.ADMITTED:
        return None
    held = await store.held_start(run.id, tenant)
    if held is None or held.start == start:  # ours (or promoted and gone since)
        return queued_run(run)
    first = decode_start(held.start).proposal.run
    if explicit_id or first.graph_id != run.graph_id:
        raise Conflict(f"run {run.id!r} is taken (a queued start)", details={"run_id": run.id})
    return queued_run(first)


async def admitted_refused(admissions: Admissions, owner: OwnerScope, run: Run) -> None:
    """An admitted start's ``initialize`` was refused: free its count unless the run
    stored under its id is the ledger's (a repeated start of a running admitted run)."""
    queue = admission_queue(run)
    if queue is None:
        return
    found = await admissions.backend.runs.fetch_run(owner, run.id)
    if isinstance(found, Run) and admission_queue(found) == queue and not found.status.terminal:
        return
    await admissions.release(queue, [run.id])


async def find_queued(admissions: Admissions, owner: OwnerScope, run_id: str) -> RunInfo | None:
    """The queued run ``run_id`` when the ledger has its start (``None`` otherwise, and
    on a backend without admission)."""
    store = admissions.store
    if store is None:
        return None
    entry = await store.held_start(run_id, tenant_id_of(owner))
    return None if entry is None else queued_info(entry)


async def cancel_queued(admissions: Admissions, owner: OwnerScope, run_id: str) -> Run | None:
    """Drop a held start: the cancelled run (never stored), or ``None`` when the ledger
    holds no such start."""
    store = admissions.store
    if store is None:
        return None
    entry = await store.held_start(run_id, tenant_id_of(owner))
    if entry is None:
        return None
    dropped = await store.drop_held(entry.queue, run_id)
    if dropped is None:  # promoted meanwhile: the caller cancels the run itself
        return None
    run = decode_start(dropped.start).proposal.run
    return attrs.evolve(run, status=RunStatus.CANCELLED, checkpoint_seq=0, event_seq=0)


async def require_active(admissions: Admissions, owner: OwnerScope, run_id: str) -> None:
    """``InactiveRun`` for a queued run (a signal or message cannot reach it yet)."""
    if await find_queued(admissions, owner, run_id) is not None:
        raise InactiveRun(
            f"run {run_id!r} is queued by an admission limit: it cannot take signals "
            "or messages until it starts",
            details={"run_id": run_id, "status": str(RunStatus.QUEUED)},
        )


async def await_admitted(
    store: Backend,
    admissions: Admissions,
    owner: OwnerScope,
    run_id: str,
    timeout: float,
    poll_interval: float,
) -> Run:
    """``Docket.await_run``: a queued run is waited for too (until it starts and then
    waits or ends, within ``timeout``)."""
    started = time.monotonic()
    wait = timeout  # the caller's own value first: await_settled validates it
    while True:
        try:
            return await await_settled(
                store, owner, run_id, timeout=wait, poll_interval=poll_interval
            )
        except NotFound:
            if await find_queued(admissions, owner, run_id) is None:
                raise
        remaining = timeout - (time.monotonic() - started)
        if remaining <= 0:
            raise AwaitTimeout(
                f"run {run_id!r} is still queued after {timeout} s",
                details={"status": str(RunStatus.QUEUED)},
            )
        await asyncio.sleep(min(poll_interval, remaining))
        wait = max(timeout - (time.monotonic() - started), 0.0)
