"""The backend split by concern (issue #24): four store objects over one engine.

``graphs``/``runs``/``events``/``transitions`` are distinct objects, each implementing
its own store Protocol and no other's; the optional members sit where
``docket/contract/protocols.py`` puts them, so ``negotiate`` and the runtime find them;
the stores follow the engine across a close and re-open; what the package did twice
(option checks, the scripts' clock) it does once; and every module of the package stays
small enough to read in one sitting.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from importlib import resources
from pathlib import Path

import docket_redis
import pytest
from docket_redis import RedisBackend, parse_url
from docket_redis.testing import (
    T0,
    RedisServer,
    claim_one,
    publish_graph,
    start_run,
    with_prefix,
)
from docket_redis.transport import SCRIPT_NAMES

from docket.contract import negotiate
from docket.contract.protocols import (
    STORE_PROTOCOLS,
    Backend,
    ChainedCommits,
    ClaimedRuns,
    ClaimedStarts,
    Migratable,
    SampledNow,
)
from docket.records import TENANTLESS

#: The most lines one module of the package may have (docs/backends/redis.md, "Modules").
MODULE_LINES = 800


def test_each_store_is_its_own_object_with_only_its_own_operations() -> None:
    backend = RedisBackend.from_url("redis://127.0.0.1:1/0")  # never opened: no server
    stores = {name: getattr(backend, name) for name in STORE_PROTOCOLS}
    assert len({id(store) for store in (backend, *stores.values())}) == 5, stores
    for name, store in stores.items():
        implements = {other for other, p in STORE_PROTOCOLS.items() if isinstance(store, p)}
        assert implements == {name}, f"backend.{name} implements {sorted(implements)}"
        assert getattr(backend, name) is store  # one object per store, not one per read
    # the optional members, where protocols.py says they belong
    assert isinstance(backend.runs, ClaimedRuns)
    assert isinstance(backend.transitions, ChainedCommits)
    assert isinstance(backend.transitions, ClaimedStarts)
    assert isinstance(backend, SampledNow) and isinstance(backend, Migratable)
    assert isinstance(backend, Backend)
    assert negotiate(backend).name == "redis"


def test_the_stores_follow_the_engine_across_a_close_and_reopen(
    redis_single: RedisServer, prefix: str
) -> None:
    async def body() -> None:
        backend = RedisBackend.from_url(with_prefix(redis_single.url, prefix))
        graphs, runs, transitions = backend.graphs, backend.runs, backend.transitions
        for attempt in range(2):  # close() swaps in a fresh transport: stores must use it
            await backend.open()
            try:
                ref = await publish_graph(backend, TENANTLESS)
                assert (await graphs.fetch_latest_graph_ref(TENANTLESS, ref.graph_id)) == ref
                run = await start_run(backend, TENANTLESS, f"r{attempt}", ref)
                lease = await claim_one(backend, T0, orphan_ttl=timedelta(hours=1))
                assert lease.run_id == run.id
                assert await runs.claimed_run(TENANTLESS, run.id, lease.claim_token) == run
                assert await runs.fetch_run(TENANTLESS, run.id) == run
                assert transitions is backend.transitions
            finally:
                await backend.close()

    asyncio.run(body())


def test_every_module_reads_in_one_sitting() -> None:
    package = Path(docket_redis.__file__).parent
    sizes = {
        path.name: len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(package.glob("*.py"))
    }
    too_long = {name: lines for name, lines in sizes.items() if lines > MODULE_LINES}
    assert not too_long, f"split these by concern (at most {MODULE_LINES} lines): {too_long}"


def test_the_constructor_and_from_url_check_options_alike() -> None:
    url = "redis://127.0.0.1:1/0"
    for bad, message in (
        ({"clock": 3}, "clock must be a callable"),
        ({"limits": {}}, "limits must be docket.contract.Limits"),
    ):
        with pytest.raises(TypeError, match=message):
            RedisBackend.from_url(url, **bad)
        with pytest.raises(TypeError, match=message):
            RedisBackend(parse_url(url), **bad)
    with pytest.raises(TypeError, match="prefix must be a string"):
        RedisBackend.from_url(url, prefix=7)
    with pytest.raises(ValueError, match="prefix must be a non-empty string"):
        RedisBackend(parse_url(url), prefix=7)  # type: ignore[arg-type]


def test_the_scripts_share_one_clock() -> None:
    folder = resources.files("docket_redis").joinpath("lua")
    for name in SCRIPT_NAMES:
        body = folder.joinpath(f"{name}.lua").read_text(encoding="utf-8")
        assert "local function clock" not in body, f"{name}.lua defines its own clock()"
        if "clock(" in body:
            assert "-- #include clock\n" in body, f"{name}.lua calls clock() without it"
