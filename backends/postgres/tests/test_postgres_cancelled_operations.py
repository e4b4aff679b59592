"""An operation cancelled mid-flight (a worker stopping while a slot release is on the
wire) must not leave a pooled connection that answers later statements wrongly.

It did: the slot ledger's transactions ran in psycopg's pipeline mode, a cancelled one
went back to the pool still in that mode, and every later statement on the connection
read an earlier one's result, so ``fetch_run`` of an existing run answered ``NotFound``
(the queue benchmark's read-back caught it). The engine no longer pipelines, and a
statement whose result is not its own is an error, never "no rows"."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from datetime import timedelta

from docket_contract_tests.fixtures import graph_document, graph_ref, init_proposal, new_run
from docket_postgres.testing import open_backend

from docket.contract import NotFound
from docket.contract.errors import StoreError
from docket.records import TENANTLESS, GraphVersion, QueueConfig, Run

Names = Callable[[str], str]


def test_cancelled_ledger_operations_leave_no_connection_that_misreads(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        backend = await open_backend(pg_url, schema_name("cancel"), pool_max_size=3)
        try:
            document = graph_document("g")
            ref = graph_ref(document)
            assert isinstance(
                await backend.graphs.save_graph(TENANTLESS, ref, document), GraphVersion
            )
            now = await backend.now()
            run = new_run("r1", ref, now)
            assert (
                await backend.transitions.initialize(TENANTLESS, init_proposal(run, now), []) == run
            )
            queues = backend.queues
            await queues.set_queue(QueueConfig(name="q", execution_limit=1000))
            shuffle = random.Random(25)
            misreads: list[str] = []
            holders = [f"h{i}" for i in range(150)]
            for holder in holders:
                assert await queues.acquire_slots("q", [holder], timedelta(minutes=5)) == 1
                # cancelled at some point of its flight: before, during or after the send
                release = asyncio.ensure_future(queues.release_slots("q", [holder]))
                await asyncio.sleep(shuffle.random() * 0.004)
                release.cancel()
                await asyncio.gather(release, return_exceptions=True)
                for _ in range(3):  # one read per pooled connection
                    try:
                        got = await backend.runs.fetch_run(TENANTLESS, "r1")
                    except StoreError as exc:  # the server is up: no read may fail either
                        misreads.append(f"error: {exc}")
                        continue
                    if not isinstance(got, Run) or got.id != "r1":
                        misreads.append(repr(got))
            assert misreads == [], f"{len(misreads)} reads answered wrongly: {misreads[:3]}"
            assert not isinstance(await backend.runs.fetch_run(TENANTLESS, "r1"), NotFound)
            # the ledger agrees: every slot, released by its cancelled call or now, is free
            await queues.release_slots("q", holders)
            (status,) = [s for s in await queues.list_queues() if s.config.name == "q"]
            assert status.running == 0
        finally:
            await backend.close()

    asyncio.run(body())
