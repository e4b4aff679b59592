"""Child process for the group-commit crash test (run by ``test_sqlite_group_commit``).

``python group_commit_worker.py DB PREFIX TASKS`` — ``TASKS`` concurrent writers on one
backend, each initializing runs and committing successors to them as fast as it can, so
the writer thread keeps applying several commits per transaction. After each commit
returns, one JSON line says what was acknowledged; the parent SIGKILLs the process at an
arbitrary moment and checks that everything acknowledged is on disk.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from datetime import UTC, datetime, timedelta

from docket_contract_tests.fixtures import (
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)
from docket_sqlite import SQLiteBackend

from docket.contract import At
from docket.records import TENANTLESS, GraphRef, Run

LATER = timedelta(days=365)


def say(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def writer(backend: SQLiteBackend, ref: GraphRef, prefix: str, start: datetime) -> None:
    wake = At(start + LATER)  # never due: nobody claims these runs
    for index in itertools.count():
        run = new_run(f"{prefix}-{index:05}", ref, start, event_seq=1)
        got = await backend.transitions.initialize(
            TENANTLESS, init_proposal(run, start + LATER), events_for(run, start, [1])
        )
        assert got == run, got
        say(run=run.id, checkpoint_seq=run.checkpoint_seq, event_seq=run.event_seq)
        for _ in range(3):
            nxt = successor(run, start, new_events=2)
            events = events_for(nxt, start, range(run.event_seq + 1, nxt.event_seq + 1))
            got = await backend.transitions.commit_unclaimed(
                TENANTLESS, run.checkpoint_seq, unclaimed(nxt, wake=wake), events
            )
            assert isinstance(got, Run) and got == nxt, got
            say(run=nxt.id, checkpoint_seq=nxt.checkpoint_seq, event_seq=nxt.event_seq)
            run = nxt


async def main(path: str, prefix: str, tasks: int) -> int:
    backend = SQLiteBackend(path)
    document = graph_document("group")
    ref = graph_ref(document)
    await backend.graphs.save_graph(TENANTLESS, ref, document)
    start = datetime.now(UTC)
    await asyncio.gather(*(writer(backend, ref, f"{prefix}{i}", start) for i in range(tasks)))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
