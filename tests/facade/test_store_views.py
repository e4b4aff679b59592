"""Generic code calls store operations on the stores, never on the backend bundle.

Backends may return a distinct object from each of ``graphs``, ``runs``, ``events`` and
``transitions``. ``SplitMemory`` is the reference backend shaped that way: each property
returns a view holding only its store's operations, and every store operation called on
the bundle itself fails. The facade, a worker drain and the inline runner's ``commit_to``
all run on it.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from docket import Docket, errors
from docket.contract.memory import MemoryBackend
from docket.contract.protocols import (
    STORE_PROTOCOLS,
    ChainedCommits,
    ClaimedRuns,
    ClaimedStarts,
    EventStore,
    GraphStore,
    RunStore,
    TransitionStore,
)
from docket.records import TENANTLESS, RunStatus
from docket.testing import run_inline
from tests.core import fixtures as fx


def _operations(*protocols: type) -> frozenset[str]:
    return frozenset(
        name
        for protocol in protocols
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(value)
    )


_STORES = {
    "graphs": _operations(GraphStore),
    "runs": _operations(RunStore, ClaimedRuns),
    "events": _operations(EventStore),
    "transitions": _operations(TransitionStore, ChainedCommits, ClaimedStarts),
}
_ALL = frozenset().union(*_STORES.values())


class _StoreView:
    """One store of a ``SplitMemory``: only that store's operations (optional ones too,
    where the reference backend has them), bound to the shared state."""

    def __init__(self, backend: SplitMemory, names: frozenset[str]) -> None:
        self._backend, self._names = backend, names

    def __getattr__(self, name: str) -> Any:
        if name not in self._names or not hasattr(MemoryBackend, name):
            raise AttributeError(name)
        return getattr(MemoryBackend, name).__get__(self._backend)


class SplitMemory(MemoryBackend):
    """The reference backend with four distinct store objects and a bare bundle."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._views = {store: _StoreView(self, names) for store, names in _STORES.items()}

    @property
    def graphs(self) -> Any:
        return self._views["graphs"]

    @property
    def runs(self) -> Any:
        return self._views["runs"]

    @property
    def events(self) -> Any:
        return self._views["events"]

    @property
    def transitions(self) -> Any:
        return self._views["transitions"]

    def __getattribute__(self, name: str) -> Any:
        if name in _ALL:
            raise AssertionError(f"{name} was called on the backend bundle, not on its store")
        return super().__getattribute__(name)


def test_the_split_backend_keeps_each_operation_on_its_own_store() -> None:
    backend = SplitMemory()
    assert set(_STORES) == set(STORE_PROTOCOLS)
    assert len({id(getattr(backend, store)) for store in _STORES}) == 4
    assert callable(backend.runs.claim_due) and not hasattr(backend.graphs, "claim_due")
    with pytest.raises(AssertionError, match="bundle"):
        backend.fetch_run  # noqa: B018  # the attribute read itself is refused


def test_a_facade_flow_uses_only_the_stores() -> None:
    async def scenario() -> None:
        async with Docket(SplitMemory(), nodes=fx.NODES) as docket:
            ref = await docket.save_graph(fx.interrupt_review("ask"))
            assert await docket.latest_graph_ref("interrupt_review") == ref
            assert (await docket.list_graph_versions("interrupt_review")).versions
            assert await docket.fetch_graph(ref) == fx.interrupt_review("ask")
            await docket.start_run(ref, run_id="r")
            await docket.drain_due()
            assert (await docket.fetch_run("r")).status is RunStatus.WAITING
            await docket.resolve_interrupt("r", "ask", "approved")
            await docket.drain_due()
            done = await docket.await_run("r", timeout=0)
            assert done.output == {"applied": "approved"}
            assert (await docket.inspect_run("r")).run == done
            assert [run.id for run in (await docket.list_runs()).runs] == ["r"]
            assert len(await docket.history("r")) == done.event_seq
            with pytest.raises(errors.InactiveRun):
                await docket.cancel_run("r")

    asyncio.run(scenario())


def test_the_inline_runner_commits_through_the_stores() -> None:
    backend = SplitMemory()
    result = run_inline(fx.minimal_linear(), {"value": "hi"}, nodes=fx.NODES, commit_to=backend)
    assert result.run.output == {"result": "hi"}
    stored = asyncio.run(backend.runs.fetch_run(TENANTLESS, result.run.id))
    assert stored == result.run
