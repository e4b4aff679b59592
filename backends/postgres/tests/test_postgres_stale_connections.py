"""A server restart leaves every idle pooled connection dead. A read that meets one is
sent again on another, and the pool is asked to test the rest, so a worker's reads after
the restart (the claimed run, the store clock it stamps settled work with) do not fail."""

from __future__ import annotations

import asyncio
import time

from docket_postgres import PostgresBackend
from docket_postgres.testing import ThrowawayPostgres

from docket.contract.errors import StoreError


def test_reads_after_a_restart_never_meet_a_dead_pooled_connection() -> None:
    async def body() -> None:
        async with ThrowawayPostgres() as server:
            backend = PostgresBackend(
                server.conninfo(), schema="stale", pool_min_size=4, notify=False
            )
            try:
                await backend.now()
                pool = backend._engine.pool  # the test watches the pool fill
                assert pool is not None
                deadline = time.monotonic() + 30
                while pool.get_stats().get("pool_available", 0) < 4:
                    assert time.monotonic() < deadline, pool.get_stats()
                    await asyncio.sleep(0.05)
                await asyncio.to_thread(server.restart, mode="immediate", down_for=0.2)
                failures: list[str] = []
                for _ in range(12):  # more reads than there are dead connections
                    try:
                        await backend.now()
                    except StoreError as exc:
                        failures.append(str(exc))
                assert failures == []
            finally:
                await backend.close()

    asyncio.run(body())
