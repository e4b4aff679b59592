"""Persistence: what the backend reports for each server setting, the warning at open(),
and a run that survives a SIGKILL of a server running with ``appendfsync always``."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from docket_contract_tests.fixtures import claimed, event, successor
from docket_redis.testing import T0, claim_one, opened, publish_graph, redis_server, start_run

from docket.clock import ManualClock
from docket.contract import EventListQuery, Feature, Limits
from docket.records import EventPage, Run, RunInfo, Tenant

#: Declared whatever the server's persistence.
_ALWAYS = frozenset(
    {
        Feature.NOTIFY,
        Feature.REOPEN_FAILED,
        Feature.CHILD_RUNS,
        Feature.TIMERS,
        Feature.MESSAGES,
        Feature.SCHEDULES,
        Feature.STREAMS,
        Feature.PRUNE,
        Feature.QUEUES,
        Feature.ADMISSION,
    }
)


@pytest.mark.parametrize(
    ("appendonly", "appendfsync", "features", "warned"),
    [
        (False, "everysec", set[str](), True),
        (True, "no", {Feature.DURABLE}, False),
        (True, "everysec", {Feature.DURABLE}, False),
        (True, "always", {Feature.DURABLE, Feature.DURABLE_FSYNC}, False),
    ],
)
def test_capabilities_report_the_servers_persistence(
    caplog: pytest.LogCaptureFixture,
    prefix: str,
    appendonly: bool,
    appendfsync: str,
    features: set[str],
    warned: bool,
) -> None:
    with redis_server(appendonly=appendonly, appendfsync=appendfsync) as server:

        async def body() -> None:
            caplog.clear()
            limits = Limits(max_events_per_transition=7)
            with caplog.at_level(logging.INFO, logger="docket_redis"):
                async with opened(server.url, prefix, limits=limits) as backend:
                    caps = backend.capabilities()
                    assert caps.features == frozenset(features) | _ALWAYS
                    assert caps.limits == limits
                    (node,) = backend.persistence
                    assert (node.appendonly, node.appendfsync) == (appendonly, appendfsync)
            warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert bool(warnings) == warned, [r.getMessage() for r in caplog.records]
            if warned:
                assert "without AOF" in warnings[0].getMessage()

        asyncio.run(body())


def test_before_open_nothing_is_promised(prefix: str) -> None:
    from docket_redis import RedisBackend

    backend = RedisBackend.from_url(f"redis://127.0.0.1:1/0?prefix={prefix}")
    assert backend.capabilities().features == _ALWAYS


def test_a_committed_run_survives_a_crash_with_appendfsync_always(
    tmp_path: Path, prefix: str
) -> None:
    """SIGKILL the server right after the commits are acknowledged; restart; all there."""
    owner = Tenant("acme")
    clock = ManualClock(T0)
    with redis_server(appendonly=True, appendfsync="always", directory=tmp_path) as server:

        async def before() -> tuple[Run, str, object, object]:
            async with opened(server.url, prefix, clock=clock) as backend:
                assert Feature.DURABLE_FSYNC in backend.capabilities().features
                ref = await publish_graph(backend, owner)
                run = await start_run(backend, owner, "r1", ref, events=1)
                lease = await claim_one(backend, T0)
                nxt = successor(run, T0, new_events=2)
                events = [event(run.id, 2, T0), event(run.id, 3, T0)]
                landed = await backend.transitions.commit_claimed(
                    owner, claimed(nxt, lease.claim_token), events
                )
                assert landed == nxt
                info = await backend.runs.inspect_run(owner, "r1")
                page = await backend.events.list_events(owner, "r1", EventListQuery())
                return nxt, lease.claim_token, info, page

        nxt, token, info, page = asyncio.run(before())
        server.kill()  # no shutdown, no final fsync
        server.start()

        async def after() -> None:
            async with opened(server.url, prefix, clock=clock) as backend:
                assert await backend.runs.fetch_run(owner, "r1") == nxt
                assert await backend.runs.inspect_run(owner, "r1") == info
                again = await backend.events.list_events(owner, "r1", EventListQuery())
                assert isinstance(again, EventPage) and again == page
                # the claim survived too, and the restarted server (with an empty script
                # cache) takes the holder's next commit
                assert isinstance(info, RunInfo) and info.claimed_at == T0
                final = successor(nxt, T0)
                assert (
                    await backend.transitions.commit_claimed(owner, claimed(final, token), [])
                    == final
                )

        asyncio.run(after())


def test_an_evicting_server_is_warned_about(caplog: pytest.LogCaptureFixture, prefix: str) -> None:
    with redis_server(
        appendonly=True, appendfsync="always", extra=("--maxmemory-policy", "allkeys-lru")
    ) as server:

        async def body() -> None:
            with caplog.at_level(logging.WARNING, logger="docket_redis"):
                async with opened(server.url, prefix) as backend:
                    (node,) = backend.persistence
                    assert node.eviction == "allkeys-lru"
            messages = [r.getMessage() for r in caplog.records]
            assert any("maxmemory-policy allkeys-lru" in m for m in messages), messages

        asyncio.run(body())
