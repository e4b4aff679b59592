"""Child runs on a real PostgreSQL server: the shared end-to-end scenario
(tests/runtime/child_scenarios.py) through a real worker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from docket_postgres.testing import ThrowawayPostgres

from docket import Docket
from tests.runtime import child_scenarios as e2e


def test_children_end_to_end_on_postgres(
    pg_server: ThrowawayPostgres, schema_name: Callable[[str], str]
) -> None:
    url = pg_server.url(schema=schema_name("children"))

    async def scenario() -> None:
        async with Docket(url, **e2e.options()) as d:
            await e2e.run_scenario(d)

    asyncio.run(scenario())
