"""The facade's signals: :class:`SignalMethods`, mixed into :class:`~docket.Docket`.

Every method here changes a run with one unclaimed, fenced commit of a pure mutation
(answering an interrupt, sending a message, cancelling, retrying), re-evaluated on a
lost race (:func:`docket.runtime.lifecycle.signal`); a refused one writes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, cast

from docket import errors
from docket._facade_admission import cancel_queued, require_active
from docket._facade_args import require_id
from docket._facade_spans import lifecycle
from docket._facade_time import require_feature
from docket.contract import errors as contract
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.protocols import Backend
from docket.core.errors import CoreError
from docket.core.messages import deliver_message
from docket.core.mutations import cancel_run, resolve_interrupt
from docket.core.reopen import check_reason, reopen_failed_run
from docket.errors import (
    InvalidInput,
    NotRetryable,
    Unsupported,
    from_contract,
    from_core,
)
from docket.graph.compiler import RuntimeGraph
from docket.records import GraphRef, OwnerScope, Run, RunStatus
from docket.runtime.admission import admission_queue
from docket.runtime.children import Children
from docket.runtime.drain import Drainer, host_limits
from docket.runtime.graphs import GraphCache
from docket.runtime.lifecycle import (
    CommitPolicy,
    Ids,
    Mutation,
    Observers,
    SignalResult,
    signal,
)
from docket.runtime.messages import SendResult, sent, wait_for_holder
from docket.settings import Settings
from docket.telemetry import Telemetry
from docket.values import JSONValue

__all__ = ["SignalMethods"]

#: How long a send waits for a worker holding the run to let go before committing anyway.
_SEND_PATIENCE: Final = 5.0


class SignalMethods:
    """The signal methods of :class:`~docket.Docket` (which provides what is declared
    under ``TYPE_CHECKING``)."""

    if TYPE_CHECKING:
        _store: Backend
        _ids: Ids
        _describe: GraphCache
        _observers: Observers
        _policy: CommitPolicy
        _child_runs: Children | None
        _drainer: Drainer
        settings: Settings
        telemetry: Telemetry

        @property
        def capabilities(self) -> Capabilities: ...
        def _owner(self, tenant_id: object) -> OwnerScope: ...
        def _ready(self) -> None: ...
        async def _fetch(self, owner: OwnerScope, run_id: str) -> Run: ...
        async def _runtime_graph(self, owner: OwnerScope, ref: GraphRef) -> RuntimeGraph: ...

    @lifecycle("docket.run.resolve_interrupt", run_id_first=True)
    async def resolve_interrupt(
        self, run_id: str, interrupt_id: str, value: object, *, tenant_id: str | None = None
    ) -> Run:
        """Answer an open interrupt; returns the committed run (``running`` again).

        Raises ``NotFound`` (run or interrupt), ``AlreadyResolved``, ``InactiveRun``,
        ``InvalidInput`` (the value fails the interrupt's schema or the resume field), or
        ``StaleCheckpoint`` if the run kept moving through every evaluation.
        """
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        require_id("interrupt_id", interrupt_id)
        current = await self._fetch(owner, run_id)
        rtg = await self._runtime_graph(owner, GraphRef(current.graph_id, current.graph_hash))
        return await self._signal(
            owner,
            run_id,
            lambda run, now: resolve_interrupt(rtg, run, interrupt_id, value, now=now),
        )

    async def send(
        self,
        run_id: str,
        topic: str,
        payload: object = None,
        *,
        idempotency_key: str | None = None,
        tenant_id: str | None = None,
    ) -> SendResult:
        """Send a durable message to a run (docs/execution.md#messages).

        An attempt waiting on ``topic`` (a node that returned ``Receive``) takes it in the
        same commit; otherwise it is kept, in order, for the next attempt that asks. A key
        accepted before changes nothing (``duplicate``). Raises ``NotFound``,
        ``InactiveRun``, ``InvalidInput`` (payload refused by the topic's schema or the
        waiting node's field), ``Unsupported`` (backend without ``messages``) or
        ``StaleCheckpoint``; nothing is written then.
        """
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        if not isinstance(topic, str) or not topic:
            raise InvalidInput(
                "topic must be a non-empty string", details={"reasons": [f"topic: {topic!r}"]}
            )
        if idempotency_key is not None:
            require_id("idempotency_key", idempotency_key)
        require_feature(self.capabilities, Feature.MESSAGES, "sending a message")
        current = await self._fetch(owner, run_id)
        rtg = await self._runtime_graph(owner, GraphRef(current.graph_id, current.graph_hash))
        value = cast("JSONValue", payload)
        patience = min(self.settings.claim_ttl, _SEND_PATIENCE)
        await wait_for_holder(self._store.runs, owner, run_id, patience, lambda: 0.02)
        limits = host_limits(self.settings)
        answer = await self._signal_result(
            owner,
            run_id,
            lambda run, now: deliver_message(
                rtg, run, topic, value, key=idempotency_key, now=now, ids=self._ids, limits=limits
            ),
        )
        checkpoint = answer.checkpoint
        return sent(answer.run, None if checkpoint is None else checkpoint.events)

    @lifecycle("docket.run.cancel", run_id_first=True)
    async def cancel_run(self, run_id: str, *, tenant_id: str | None = None) -> Run:
        """Cancel a running or waiting run (a cancelled one comes back unchanged).

        Node code already running is not interrupted; its results can no longer commit.
        A run an admission limit holds (``queued``) is dropped from its queue and comes
        back ``cancelled`` without ever having been stored (docs/queues.md).
        Raises ``NotFound`` or ``InactiveRun`` (done or failed).
        """
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        try:
            return await self._signal(owner, run_id, lambda run, now: cancel_run(run, now=now))
        except errors.InactiveRun as exc:
            if exc.details.get("status") != str(RunStatus.QUEUED):
                raise
        dropped = await cancel_queued(self._drainer.admissions, owner, run_id)
        if dropped is not None:
            return dropped
        # promoted since: it is a run now, cancelled as any other
        return await self._signal(owner, run_id, lambda run, now: cancel_run(run, now=now))

    def _children(self) -> Children:
        if self._child_runs is None:
            self._child_runs = Children(
                self._store,
                self._describe,
                self.settings,
                ids=self._ids,
                limits=host_limits(self.settings),
                observers=self._observers,
                telemetry=self.telemetry,
                queues=self._drainer.queues,
            )
        return self._child_runs

    async def _signal(
        self,
        owner: OwnerScope,
        run_id: str,
        mutate: Mutation,
    ) -> Run:
        return (await self._signal_result(owner, run_id, mutate)).run

    async def _signal_result(
        self,
        owner: OwnerScope,
        run_id: str,
        mutate: Mutation,
    ) -> SignalResult:
        result = await signal(
            self._store,
            owner,
            run_id,
            mutate,
            ids=self._ids,
            policy=self._policy,
            attempts=self.settings.signal_attempts,
            observers=self._observers,
            telemetry=self.telemetry,
        )
        if isinstance(result, SignalResult):
            if result.previous is not None and Children.concerned(result.previous, result.run):
                # a cancelled parent cancels its children; a child that ended hands off
                await self._children().after_commit(owner, result.previous, result.run)
            if (
                result.previous is not None
                and result.run.status.terminal
                and admission_queue(result.run) is not None
            ):
                await self._drainer.admissions.finished(result.previous, result.run)
            return result
        if isinstance(result, contract.NotFound):
            await require_active(self._drainer.admissions, owner, run_id)
        if isinstance(result, CoreError):
            raise from_core(result)
        raise from_contract(result, subject=f"run {run_id!r}")

    @lifecycle("docket.run.retry_poisoned", run_id_first=True)
    async def retry_poisoned_run(self, run_id: str, *, tenant_id: str | None = None) -> Run:
        """Make a poisoned run due again (its claim counters reset); a healthy run is
        returned unchanged. Raises ``NotFound`` or ``InactiveRun``."""
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        answer = await self._store.runs.retry_poisoned_run(owner, run_id)
        if isinstance(answer, contract.NotFound | contract.InactiveRun):
            raise from_contract(answer, subject=f"run {run_id!r}")
        return answer

    @lifecycle("docket.run.retry", run_id_first=True)
    async def retry_run(
        self, run_id: str, *, reason: str | None = None, tenant_id: str | None = None
    ) -> Run:
        """Retry a failed or a poisoned run; returns the committed run.

        A **failed** run is reopened from its last committed checkpoint (a fenced signal,
        like :meth:`cancel_run`): the failed superstep runs again with a fresh attempt
        budget, nothing committed before it runs again, and a ``run_retried`` event
        records ``reason`` and the failure it clears. A **poisoned** run is made due
        again (:meth:`retry_poisoned_run`; ``reason`` is not stored for it).

        Raises ``NotFound``; ``InactiveRun`` (done or cancelled); ``NotRetryable`` (running
        or waiting and not poisoned — e.g. another operator retried it first);
        ``InvalidInput`` (a blank or overlong reason); ``Unsupported`` when the backend
        does not declare the ``reopen_failed`` feature; ``StaleCheckpoint``.
        """
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        bad = check_reason(reason)
        if bad is not None:
            raise from_core(bad)
        # one read answers both questions: the run's status and whether it is poisoned
        found = await self._store.runs.inspect_run(owner, run_id)
        if isinstance(found, contract.NotFound):
            raise from_contract(found, subject=f"run {run_id!r}")
        current = found.run
        if current.status is RunStatus.FAILED:
            if Feature.REOPEN_FAILED not in self.capabilities.features:
                raise Unsupported(
                    f"run {run_id!r} failed, and this backend "
                    f"({self.capabilities.name or 'unnamed'}) does not declare the "
                    f"{Feature.REOPEN_FAILED!s} feature a retry of a failed run needs",
                    phase="retry",
                    details={"feature": str(Feature.REOPEN_FAILED)},
                )
            return await self._signal(
                owner, run_id, lambda run, now: reopen_failed_run(run, reason=reason, now=now)
            )
        if current.status.terminal:
            raise errors.InactiveRun(
                f"run {run_id!r} is {current.status} and cannot be retried",
                phase="retry",
                details={"status": str(current.status)},
            )
        if not found.poisoned:
            raise NotRetryable(
                f"run {run_id!r} is {found.run.status} and not poisoned: there is nothing "
                "to retry (was it retried already?)",
                phase="retry",
                details={"status": str(found.run.status)},
            )
        answer = await self._store.runs.retry_poisoned_run(owner, run_id)
        if isinstance(answer, contract.NotFound | contract.InactiveRun):
            raise from_contract(answer, subject=f"run {run_id!r}")
        return answer

    # -- runs: reads -------------------------------------------------------------------------
