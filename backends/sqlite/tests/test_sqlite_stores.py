"""The package's shape (issue #24): four distinct store objects over one shared engine.

``SQLiteBackend`` hands out one object per contract store, each serving only its own
Protocol's operations (and the optional ones ``docket/contract/protocols.py`` puts on
that store), and the modules stay small enough to read in one sitting. The behaviour
itself is the contract kit's and the other tests' to check; these pin the split.
"""

from __future__ import annotations

import asyncio
import inspect
from datetime import UTC, datetime
from pathlib import Path

import docket_sqlite
from docket_contract_tests.fixtures import graph_document, graph_ref
from docket_sqlite import SQLiteBackend

from docket.clock import ManualClock
from docket.contract.capabilities import negotiate
from docket.contract.protocols import (
    STORE_PROTOCOLS,
    ChainedCommits,
    ClaimedStarts,
    Migratable,
)
from docket.records import TENANTLESS, GraphVersion

T0 = datetime(2030, 1, 1, tzinfo=UTC)
# Optional operations the contract places on a store (see docket/contract/protocols.py).
OPTIONAL = {"transitions": {"initialize_claimed", "commit_claimed_chain"}}


def _operations(obj: object) -> set[str]:
    return {
        name
        for name, value in inspect.getmembers(type(obj))
        if not name.startswith("_") and inspect.iscoroutinefunction(value)
    }


def _protocol_operations(protocol: type) -> set[str]:
    return {
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(value)
    }


def test_each_store_is_its_own_object_with_only_its_own_operations() -> None:
    backend = SQLiteBackend(":memory:", clock=ManualClock(T0))
    stores = {name: getattr(backend, name) for name in STORE_PROTOCOLS}
    assert len({id(store) for store in [backend, *stores.values()]}) == 5, stores
    for name, store in stores.items():
        protocol = STORE_PROTOCOLS[name]
        assert isinstance(store, protocol), name
        assert getattr(backend, name) is store, f"{name} is built once, not per access"
        expected = _protocol_operations(protocol) | OPTIONAL.get(name, set())
        assert _operations(store) == expected, name
    # the optional Protocols are found where the runtime looks for them
    assert isinstance(backend.transitions, ClaimedStarts)
    assert isinstance(backend.transitions, ChainedCommits)
    assert isinstance(backend, Migratable)
    assert negotiate(backend).name == "sqlite"


def test_stores_taken_before_open_follow_the_backend_through_close(tmp_path: Path) -> None:
    async def body() -> None:
        backend = SQLiteBackend(tmp_path / "stores.db", clock=ManualClock(T0))
        graphs = backend.graphs  # taken before open: the store opens the backend lazily
        document = graph_document("stores")
        ref = graph_ref(document)
        assert isinstance(await graphs.save_graph(TENANTLESS, ref, document), GraphVersion)
        await backend.close()
        assert await graphs.fetch_graph(TENANTLESS, ref) == document, "reopens after close"
        await backend.close()

    asyncio.run(body())


def test_every_module_reads_in_one_sitting() -> None:
    folder = Path(docket_sqlite.__file__).parent
    sizes = {path.name: len(path.read_text().splitlines()) for path in folder.glob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > 800} == {}
