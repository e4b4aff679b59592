"""The facade's named queues: :class:`QueueMethods`, mixed into :class:`~docket.Docket`.

Queues are namespace-wide (not per tenant). A queue's config lives in the backend's
queue store (``Feature.QUEUES``); the limits it sets are enforced on every claim by the
slot ledger (:mod:`docket.contract.queues`), so a change takes effect on every worker's
next claim, without restarting anything. docs/queues.md has the concepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Final, Literal

from docket.contract import errors as contract
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.protocols import Backend, QueueStore
from docket.errors import InvalidOptions, NotFound, Unsupported
from docket.graph.compiler import RuntimeGraph, queue_policies
from docket.graph.model import Graph
from docket.records import (
    DEFAULT_QUEUE,
    QueueConfig,
    QueueStatus,
    RateLimit,
    priority_problem,
    queue_config_problems,
    queue_name_problem,
)
from docket.runtime.queues import (
    QueueRuntime,
    admission_unsupported,
    queues_unsupported,
    run_queue,
    uses_queues,
)
from docket.runtime.worker import Worker
from docket.values import JSONValue

__all__ = [
    "UNCHANGED",
    "QueueMethods",
    "eager_slot",
    "queue_store",
    "require_admission_options",
    "require_graph_queue",
    "require_queue_options",
    "start_queue",
]


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


#: ``configure_queue``'s "keep what is stored" for a field.
UNCHANGED: Final = _Unchanged()


def queue_store(backend: Backend, caps: Capabilities, action: str) -> QueueStore:
    """``backend.queues``, or ``Unsupported`` when the backend does not declare queues."""
    if Feature.QUEUES not in caps.features:
        raise queues_unsupported(action, caps.name or "unnamed")
    store: QueueStore = getattr(backend, "queues")  # noqa: B009  # optional store
    return store


def require_queue_options(queue: object, priority: object) -> tuple[str, int]:
    """A start's ``queue``/``priority`` (``None``: the defaults), or ``InvalidOptions``."""
    name = DEFAULT_QUEUE if queue is None else queue
    rank = 0 if priority is None else priority
    problems = [p for p in (queue_name_problem(name), priority_problem(rank)) if p]
    if problems:
        raise InvalidOptions(
            "; ".join(problems), phase="start", details={"reasons": list[JSONValue](problems)}
        )
    assert isinstance(name, str) and isinstance(rank, int)
    return name, rank


class QueueMethods:
    """The queue methods of :class:`~docket.Docket`."""

    if TYPE_CHECKING:
        _store: Backend

        @property
        def capabilities(self) -> Capabilities: ...
        def _ready(self) -> None: ...

    def _queues(self, action: str) -> QueueStore:
        self._ready()
        return queue_store(self._store, self.capabilities, action)

    async def queues(self) -> Sequence[QueueStatus]:
        """Every configured queue (and ``"default"``) with its slots held now and depth."""
        return await self._queues("list queues").list_queues()

    async def queue(self, name: str) -> QueueConfig:
        """A queue's config; ``NotFound`` for a queue never configured."""
        store = self._queues("read a queue")
        _require_name(name)
        found = await store.fetch_queue(name)
        if isinstance(found, contract.NotFound):
            raise NotFound(f"no queue {name!r}", phase="queue", details={"what": "queue"})
        return found

    async def configure_queue(
        self,
        name: str,
        *,
        execution_limit: int | _Unchanged | None = UNCHANGED,
        rate: RateLimit | _Unchanged | None = UNCHANGED,
        paused: bool | _Unchanged = UNCHANGED,
        admission_limit: int | _Unchanged | None = UNCHANGED,
        tenant_admission_limit: int | _Unchanged | None = UNCHANGED,
    ) -> QueueConfig:
        """Create a queue or change some of its settings (the rest are kept). ``None``
        removes a limit. Takes effect on every worker's next claim.

        ``admission_limit`` caps the queue's unfinished runs, ``tenant_admission_limit``
        each tenant's within it: a run started beyond them is held, ``queued``, until a
        slot frees (docs/queues.md#admission-limits). Setting either on a backend
        without ``Feature.ADMISSION`` raises ``Unsupported`` and stores nothing."""
        store = self._queues("configure a queue")
        _require_name(name)
        require_admission_options(self.capabilities, admission_limit, tenant_admission_limit)
        found = await store.fetch_queue(name)
        current = QueueConfig(name=name) if isinstance(found, contract.NotFound) else found
        config = QueueConfig(
            name=name,
            execution_limit=current.execution_limit
            if isinstance(execution_limit, _Unchanged)
            else execution_limit,
            rate=current.rate if isinstance(rate, _Unchanged) else rate,
            paused=current.paused if isinstance(paused, _Unchanged) else paused,
            admission_limit=current.admission_limit
            if isinstance(admission_limit, _Unchanged)
            else admission_limit,
            tenant_admission_limit=current.tenant_admission_limit
            if isinstance(tenant_admission_limit, _Unchanged)
            else tenant_admission_limit,
        )
        problems = queue_config_problems(config)
        if problems:
            raise InvalidOptions(
                "; ".join(problems), phase="queue", details={"reasons": list[JSONValue](problems)}
            )
        return await store.set_queue(config)

    async def pause_queue(self, name: str) -> QueueConfig:
        """No new claims in the queue until resumed (claimed runs finish their step)."""
        await self.queue(name)  # an unknown queue is NotFound, not created paused
        return await self.configure_queue(name, paused=True)

    async def resume_queue(self, name: str) -> QueueConfig:
        """Claims in the queue start again (within ``queue_refresh`` on every worker)."""
        await self.queue(name)
        return await self.configure_queue(name, paused=False)


def require_admission_options(caps: Capabilities, *limits: object) -> None:
    """Admission limits need ``Feature.ADMISSION``: ``Unsupported`` when one is set
    (not ``None``, not unchanged) on a backend without it."""
    if Feature.ADMISSION in caps.features:
        return
    if any(limit is not None and not isinstance(limit, _Unchanged) for limit in limits):
        raise admission_unsupported("set an admission limit", caps.name or "unnamed")


def _require_name(name: object) -> None:
    problem = queue_name_problem(name)
    if problem:
        raise InvalidOptions(
            problem, phase="queue", details={"reasons": list[JSONValue]([problem])}
        )


async def start_queue(
    backend: Backend,
    caps: Capabilities,
    rtg: RuntimeGraph,
    queue: str | None,
    priority: int | None,
) -> tuple[str, int]:
    """The queue and priority a start writes: the caller's (checked already by
    :func:`require_queue_options`), else the graph's policies, else the defaults.
    ``Unsupported`` for anything but the defaults on a backend without queues;
    ``NotFound`` (details ``what=queue``) for a queue the backend does not know."""
    name, rank = run_queue(rtg, queue, priority)
    if not uses_queues(name, rank):
        return name, rank
    store = queue_store(backend, caps, "start a run in a named queue or with a priority")
    if name != DEFAULT_QUEUE:
        found = await store.fetch_queue(name)
        if isinstance(found, contract.NotFound):
            raise NotFound(
                f"no queue {name!r}: configure it first (Docket.configure_queue)",
                phase="start",
                details={"what": "queue", "queue": name},
            )
    return name, rank


async def eager_slot(
    queues: QueueRuntime, worker: Worker, name: str, ttl: float
) -> tuple[str, str] | Literal[False] | None:
    """An eager start's slot in ``name``: ``None`` when the queue needs none, ``False``
    when it needs one and none is free (the worker's reservation is given back: the run
    is started unclaimed and waits its turn), else ``(queue, holder)``."""
    if not await queues.limited(name):
        return None
    holder = await queues.slots.acquire_one(name, timedelta(seconds=ttl))
    if holder is None:
        worker.unreserve()
        return False
    return name, holder


def require_graph_queue(graph: Graph, caps: Capabilities) -> None:
    """A graph whose policies name a queue or a priority needs a backend with queues
    (``Unsupported`` at save otherwise; bad values are the compiler's to report)."""
    queue, priority, _ = queue_policies(graph.policies)
    if uses_queues(queue or DEFAULT_QUEUE, priority or 0) and Feature.QUEUES not in caps.features:
        raise Unsupported(
            f"graph {graph.id!r} names a queue or a priority in its policies: this backend "
            f"({caps.name or 'unnamed'}) does not declare the {Feature.QUEUES!s} feature",
            phase="queue",
            details={"feature": str(Feature.QUEUES)},
        )
