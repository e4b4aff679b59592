"""A real driver-level fault: every connection of the backend is terminated by the server
(``pg_terminate_backend``) after a commit landed and before its reply was used.

The kit's fault proxy loses the reply of the first claimed commit (the database did
commit it); then, before the runtime resends the same proposal, the server kills every
connection of the backend's pool. The resend must get through on fresh connections, be
recognised by its ``transition_id`` and answered with the stored run, and the run must
finish with a whole history and no duplicate checkpoint.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from docket_contract_tests.faults import FaultKind, FaultyBackend
from docket_contract_tests.test_faults import FINISH_AT, NODES, counter_graph
from docket_postgres.testing import ThrowawayPostgres, connect, open_backend

from docket import Docket, Settings
from docket.records import EventType, Run, RunStatus


async def _terminate(url: str, app_name: str) -> int:
    conn = await connect(url)
    try:
        cursor = await conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (app_name,),
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0
    finally:
        await conn.close()


def test_a_commit_is_replayed_after_the_server_killed_every_connection(
    pg_server: ThrowawayPostgres, schema_name: Callable[[str], str]
) -> None:
    async def scenario() -> None:
        url = pg_server.conninfo()
        backend = await open_backend(url, schema_name("fault"))
        killed: list[int] = []
        try:
            proxy = FaultyBackend(backend)
            lost = proxy.plan.add("commit_claimed", 1, FaultKind.LOST_REPLY)

            async def sever(operation: str, nth: int) -> None:
                if operation == "commit_claimed" and nth == 2:
                    killed.append(await _terminate(url, backend.app_name))

            proxy.plan.before = sever
            settings = Settings(claim_ttl=60.0, commit_backoff=0.01, commit_attempts=8)
            async with Docket(proxy, nodes=NODES, settings=settings) as docket:
                ref = await docket.save_graph(counter_graph("killed"))
                run = await docket.start_run(ref, run_id="killed-run")
                summary = await asyncio.wait_for(docket.drain_due(), 60)
                assert [o.kind for o in summary.outcomes] == ["parked"], summary
                final = await docket.fetch_run(run.id)
                history = await docket.history(run.id)
        finally:
            await backend.close()

        assert lost.fired.is_set() and killed and killed[0] >= 1, killed
        assert isinstance(lost.answer, Run), lost.answer  # the first send did commit
        assert final.status is RunStatus.DONE and final.output == {"count": FINISH_AT}
        assert [e.seq for e in history] == list(range(1, final.event_seq + 1))
        marks = [
            e.metadata["checkpoint_seq"]
            for e in history
            if e.type is EventType.CHECKPOINT_COMMITTED
        ]
        assert marks == list(range(1, final.checkpoint_seq + 1))
        sent = [c for c in proxy.plan.of("commit_claimed") if c.reached_backend]
        assert sent[1].transition_id == sent[0].transition_id, "the resend reuses the id"
        assert len({c.transition_id for c in sent}) == final.checkpoint_seq - 1

    asyncio.run(scenario())
