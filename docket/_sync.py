"""The blocking twin of :class:`docket.facade.Docket`: :class:`SyncDocket`.

It owns an event loop in a daemon thread and hands each call to it, so the twin holds no
logic of its own: every public method delegates to the ``Docket`` method of the same name
with the same parameters and defaults, and takes that method's docstring (copied below the
class). ``tests/facade/test_sync_twin.py`` holds the two to the same signatures, so a
method added to ``Docket`` without its twin fails the suite.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeVar

from docket._sync_history import SyncHistoryMethods
from docket._sync_queues import SyncQueueMethods
from docket._sync_schedules import SyncScheduleMethods
from docket._sync_streams import SyncStreamMethods
from docket.contract.protocols import Backend
from docket.core.family import ChildInfo
from docket.errors import RuntimeUnavailable
from docket.facade import DEFAULT_AWAIT_POLL, Docket, DrainSummary
from docket.graph.model import Graph
from docket.records import (
    Event,
    EventPage,
    GraphRef,
    GraphVersionCursor,
    GraphVersionPage,
    Run,
    RunCursor,
    RunInfo,
    RunPage,
    RunStatus,
)
from docket.runtime.messages import SendResult
from docket.runtime.worker import Worker, WorkerStats
from docket.telemetry import Telemetry

__all__ = ["SyncDocket"]

_T = TypeVar("_T")


class _LoopThread:
    """One event loop running forever in a daemon thread; coroutines are submitted to it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="docket-sync-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a SyncDocket cannot be called from its own event loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        async def cancel_rest() -> None:
            current = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
            await self.loop.shutdown_asyncgens()

        if self.loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(cancel_rest(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class SyncDocket(
    SyncScheduleMethods, SyncHistoryMethods, SyncStreamMethods, SyncQueueMethods
):  # docket/_sync_*.py
    """The blocking twin of :class:`Docket`, for scripts and REPLs.

    It owns an event loop in a background thread, so an in-process worker started with
    :meth:`start_worker` keeps executing runs while your code blocks on other calls::

        with SyncDocket("sqlite:///app.db", nodes=registry) as docket:
            ref = docket.save_graph(graph)
            docket.start_worker()
            run = docket.start_run(ref, {"topic": "otters"})
            print(docket.await_run(run.id, timeout=30).output)

    Same arguments, methods and exceptions as :class:`Docket`.
    """

    def __init__(self, backend: str | Backend, **options: Any) -> None:
        self.docket = Docket(backend, **options)
        self._loop: _LoopThread | None = None
        self._worker: Worker | None = None

    @property
    def telemetry(self) -> Telemetry:
        """The wrapped Docket's telemetry bus (handlers run on the background loop)."""
        return self.docket.telemetry

    def _call(self, make: Callable[[], Awaitable[_T]]) -> _T:
        if self._loop is None:
            raise RuntimeUnavailable("the SyncDocket is not open: use 'with SyncDocket(...)'")

        async def run() -> _T:
            return await make()

        return self._loop.call(run())

    def open(self) -> SyncDocket:
        if self._loop is None:
            self._loop = _LoopThread()
            try:
                self._call(self.docket.open)
            except BaseException:
                self._loop.stop()
                self._loop = None
                raise
        return self

    def close(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            loop.call(self.docket.close())
        finally:
            loop.stop()

    def __enter__(self) -> SyncDocket:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- workers -----------------------------------------------------------------------------

    def start_worker(
        self, *, concurrency: int | None = None, queues: Collection[str] | None = None
    ) -> None:
        """Start a worker on the background loop (one per SyncDocket); ``queues``: serve
        only these named queues (``Docket.worker``)."""
        if self._worker is not None and self._worker.running:
            raise RuntimeError("this SyncDocket already runs a worker")

        async def start() -> Worker:
            worker = self.docket.worker(concurrency=concurrency, queues=queues)
            await worker.check_queues()
            worker.start()
            return worker

        self._worker = self._call(start)

    def stop_worker(self) -> WorkerStats | None:
        """Stop the worker gracefully; returns its counters (``None`` if none ran)."""
        worker, self._worker = self._worker, None
        if worker is None:
            return None
        self._call(worker.stop)
        return worker.stats

    # -- the API -----------------------------------------------------------------------------

    def save_graph(self, graph: Graph, *, tenant_id: str | None = None) -> GraphRef:
        return self._call(lambda: self.docket.save_graph(graph, tenant_id=tenant_id))

    def fetch_graph(self, ref: GraphRef, *, tenant_id: str | None = None) -> Graph:
        return self._call(lambda: self.docket.fetch_graph(ref, tenant_id=tenant_id))

    def latest_graph_ref(self, graph_id: str, *, tenant_id: str | None = None) -> GraphRef:
        return self._call(lambda: self.docket.latest_graph_ref(graph_id, tenant_id=tenant_id))

    def list_graph_versions(
        self,
        graph_id: str,
        *,
        limit: int = 100,
        before: GraphVersionCursor | None = None,
        tenant_id: str | None = None,
    ) -> GraphVersionPage:
        return self._call(
            lambda: self.docket.list_graph_versions(
                graph_id, limit=limit, before=before, tenant_id=tenant_id
            )
        )

    def start_run(
        self,
        graph: GraphRef | str,
        input: Mapping[str, object] | None = None,
        *,
        run_id: str | None = None,
        metadata: Mapping[str, object] | None = None,
        tenant_id: str | None = None,
        start_at: datetime | None = None,
        deadline: datetime | None = None,
        timeout: timedelta | None = None,
        idempotency_key: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> Run:
        return self._call(
            lambda: self.docket.start_run(
                graph,
                input,
                run_id=run_id,
                metadata=metadata,
                tenant_id=tenant_id,
                start_at=start_at,
                deadline=deadline,
                timeout=timeout,
                idempotency_key=idempotency_key,
                queue=queue,
                priority=priority,
            )
        )

    def send(
        self,
        run_id: str,
        topic: str,
        payload: object = None,
        *,
        idempotency_key: str | None = None,
        tenant_id: str | None = None,
    ) -> SendResult:
        return self._call(
            lambda: self.docket.send(
                run_id, topic, payload, idempotency_key=idempotency_key, tenant_id=tenant_id
            )
        )

    def resolve_interrupt(
        self, run_id: str, interrupt_id: str, value: object, *, tenant_id: str | None = None
    ) -> Run:
        return self._call(
            lambda: self.docket.resolve_interrupt(run_id, interrupt_id, value, tenant_id=tenant_id)
        )

    def cancel_run(self, run_id: str, *, tenant_id: str | None = None) -> Run:
        return self._call(lambda: self.docket.cancel_run(run_id, tenant_id=tenant_id))

    def retry_poisoned_run(self, run_id: str, *, tenant_id: str | None = None) -> Run:
        return self._call(lambda: self.docket.retry_poisoned_run(run_id, tenant_id=tenant_id))

    def retry_run(
        self, run_id: str, *, reason: str | None = None, tenant_id: str | None = None
    ) -> Run:
        return self._call(lambda: self.docket.retry_run(run_id, reason=reason, tenant_id=tenant_id))

    def fetch_run(self, run_id: str, *, tenant_id: str | None = None) -> Run:
        return self._call(lambda: self.docket.fetch_run(run_id, tenant_id=tenant_id))

    def inspect_run(self, run_id: str, *, tenant_id: str | None = None) -> RunInfo:
        return self._call(lambda: self.docket.inspect_run(run_id, tenant_id=tenant_id))

    def await_run(
        self,
        run_id: str,
        *,
        timeout: float,
        poll_interval: float = DEFAULT_AWAIT_POLL,
        tenant_id: str | None = None,
    ) -> Run:
        return self._call(
            lambda: self.docket.await_run(
                run_id, timeout=timeout, poll_interval=poll_interval, tenant_id=tenant_id
            )
        )

    def list_runs(
        self,
        *,
        limit: int = 100,
        before: RunCursor | None = None,
        status: RunStatus | str | Iterable[RunStatus | str] | None = None,
        graph_id: str | None = None,
        graph_hash: str | None = None,
        tenant_id: str | None = None,
        all_tenants: bool = False,
    ) -> RunPage:
        return self._call(
            lambda: self.docket.list_runs(
                limit=limit,
                before=before,
                status=status,
                graph_id=graph_id,
                graph_hash=graph_hash,
                tenant_id=tenant_id,
                all_tenants=all_tenants,
            )
        )

    def list_events(
        self,
        run_id: str,
        *,
        after_seq: int = 0,
        limit: int = 250,
        tenant_id: str | None = None,
    ) -> EventPage:
        return self._call(
            lambda: self.docket.list_events(
                run_id, after_seq=after_seq, limit=limit, tenant_id=tenant_id
            )
        )

    def history(self, run_id: str, *, tenant_id: str | None = None) -> tuple[Event, ...]:
        return self._call(lambda: self.docket.history(run_id, tenant_id=tenant_id))

    def children(self, run_id: str, *, tenant_id: str | None = None) -> tuple[ChildInfo, ...]:
        return self._call(lambda: self.docket.children(run_id, tenant_id=tenant_id))

    def drain_due(self, *, max_runs: int = 100) -> DrainSummary:
        return self._call(lambda: self.docket.drain_due(max_runs=max_runs))


def _copy_docstrings() -> None:
    """``help(SyncDocket.list_runs)`` reads ``Docket.list_runs``'s text: one source."""
    for name, method in vars(SyncDocket).items():
        original = getattr(Docket, name, None)
        if callable(method) and not method.__doc__ and original is not None:
            method.__doc__ = original.__doc__


_copy_docstrings()
