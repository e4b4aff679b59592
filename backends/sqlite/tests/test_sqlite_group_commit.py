"""Group commit: several writes in one SQLite transaction, each still all-or-nothing.

The writer thread applies every write queued while it was busy in one ``BEGIN IMMEDIATE
… COMMIT``, one SAVEPOINT per write. These tests hold the writer thread on a gate so the
writes really do queue up, then check that each one kept its own outcome: a fenced-out
commit or a failing job in the batch changes nothing of its own and nothing of the
others, and a process killed mid-batch keeps everything it acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_sqlite import SQLiteBackend
from docket_sqlite._threads import Done as _Done

from docket.contract import (
    ClaimBatch,
    ClaimPolicy,
    EventListQuery,
    StaleCheckpoint,
)
from docket.records import TENANTLESS, EventPage, GraphVersion, Run

T = TypeVar("T")
WORKER = Path(__file__).with_name("group_commit_worker.py")
START = datetime(2030, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)


async def _claimed_runs(backend: SQLiteBackend, count: int) -> list[tuple[Run, str]]:
    document = graph_document("group")
    ref = graph_ref(document)
    await backend.graphs.save_graph(TENANTLESS, ref, document)
    runs = []
    for index in range(count):
        run = new_run(f"run-{index}", ref, START, event_seq=1)
        stored = await backend.transitions.initialize(
            TENANTLESS, init_proposal(run, START), events_for(run, START, [1])
        )
        assert stored == run
        runs.append(run)
    batch = await backend.runs.claim_due(
        ClaimPolicy(limit=count, orphan_ttl=DAY, max_claim_attempts=5, now=START)
    )
    assert isinstance(batch, ClaimBatch)
    tokens = {lease.run_id: lease.claim_token for lease in batch.leases}
    assert set(tokens) == {run.id for run in runs}
    return [(run, tokens[run.id]) for run in runs]


class Gate:
    """Holds the writer thread inside a write job until opened; records its statements."""

    def __init__(self, backend: SQLiteBackend) -> None:
        self.backend = backend
        self.opened = threading.Event()
        self.statements: list[str] = []

    async def close(self) -> asyncio.Task[None]:
        def trace(conn: sqlite3.Connection) -> None:
            conn.set_trace_callback(self.statements.append)

        await self.backend._engine.writer.run(trace)

        def hold(conn: sqlite3.Connection) -> _Done[None]:
            self.opened.wait(30)
            return _Done(None, commit=False)

        held = asyncio.ensure_future(self.backend._engine.write(hold))
        while not self._holding():
            await asyncio.sleep(0.001)
        return held

    def _holding(self) -> bool:
        return any(s.startswith("BEGIN") for s in self.statements)

    async def queued(self, count: int) -> None:
        deadline = time.monotonic() + 30
        while len(self.backend._engine.writer.pending) < count:
            assert time.monotonic() < deadline, "the writes never queued up"
            await asyncio.sleep(0.001)

    def begins_after_hold(self) -> int:
        return sum(s.startswith("BEGIN") for s in self.statements) - 1


async def _batched(gate: Gate, jobs: list[Awaitable[T]]) -> list[T | BaseException]:
    held = await gate.close()
    tasks = [asyncio.ensure_future(job) for job in jobs]
    await gate.queued(len(tasks))
    gate.opened.set()
    await held
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def _events(backend: SQLiteBackend, run_id: str) -> list[int]:
    page = await backend.events.list_events(TENANTLESS, run_id, EventListQuery(limit=100))
    assert isinstance(page, EventPage)
    return [e.seq for e in page.events]


def test_a_fenced_out_commit_in_a_batch_leaves_the_others_committed(tmp_path: Path) -> None:
    async def case() -> None:
        backend = SQLiteBackend(tmp_path / "group.db")
        runs = await _claimed_runs(backend, 6)
        proposals = []
        for index, (run, token) in enumerate(runs):
            nxt = successor(run, START, new_events=2)
            if index == 4:  # proposes checkpoint 3 over 2, but the store holds 1
                nxt = successor(successor(run, START, new_events=1), START, new_events=1)
            events = events_for(nxt, START, [2, 3])
            if index == 1:
                token = "not-the-claim-token"
            proposals.append((nxt, claimed(nxt, token), events))
        gate = Gate(backend)
        answers = await _batched(
            gate,
            [backend.transitions.commit_claimed(TENANTLESS, p, e) for _, p, e in proposals],
        )
        assert gate.begins_after_hold() == 1, "all six commits shared one transaction"
        assert sum(s.startswith("SAVEPOINT") for s in gate.statements) == 6
        for index, ((nxt, _, _), answer) in enumerate(zip(proposals, answers, strict=True)):
            stored = await backend.runs.fetch_run(TENANTLESS, nxt.id)
            if index in (1, 4):  # wrong token, wrong expected checkpoint
                assert isinstance(answer, StaleCheckpoint), answer
                assert isinstance(stored, Run) and stored.checkpoint_seq == 1
                assert await _events(backend, nxt.id) == [1]
            else:
                assert answer == nxt
                assert stored == nxt
                assert await _events(backend, nxt.id) == [1, 2, 3]
        await backend.close()

    asyncio.run(case())


def test_a_job_that_fails_in_a_batch_is_undone_alone(tmp_path: Path) -> None:
    async def case() -> None:
        backend = SQLiteBackend(tmp_path / "group.db")
        runs = await _claimed_runs(backend, 3)

        def half_done(conn: sqlite3.Connection) -> _Done[None]:
            conn.execute("UPDATE docket_runs SET step = 999 WHERE run_id = 'run-0'")
            raise RuntimeError("the job broke after writing")

        commits: list[Awaitable[Any]] = []
        for run, token in runs:
            nxt = successor(run, START, new_events=1)
            proposal = claimed(nxt, token)
            commits.append(
                backend.transitions.commit_claimed(
                    TENANTLESS, proposal, events_for(nxt, START, [2])
                )
            )
        gate = Gate(backend)
        answers = await _batched(gate, [commits[0], backend._engine.write(half_done), *commits[1:]])
        assert gate.begins_after_hold() == 1
        assert isinstance(answers[1], RuntimeError)
        for run, _ in runs:
            stored = await backend.runs.fetch_run(TENANTLESS, run.id)
            assert isinstance(stored, Run)
            assert stored.checkpoint_seq == 2 and stored.step == run.step + 1
        with sqlite3.connect(tmp_path / "group.db") as conn:
            steps = dict(conn.execute("SELECT run_id, step FROM docket_runs"))
        assert 999 not in steps.values()
        await backend.close()

    asyncio.run(case())


def test_a_long_queue_is_drained_in_full_batches(tmp_path: Path) -> None:
    """150 writes queued behind a busy writer: every one answered, in three transactions."""

    async def case() -> None:
        backend = SQLiteBackend(tmp_path / "group.db")
        documents = [graph_document(f"queued-{index}") for index in range(150)]
        gate = Gate(backend)
        saves: list[Awaitable[object]] = [
            backend.graphs.save_graph(TENANTLESS, graph_ref(document), document)
            for document in documents
        ]
        answers = await _batched(gate, saves)
        assert all(isinstance(answer, GraphVersion) for answer in answers), answers
        assert gate.begins_after_hold() == 3, "batches of at most 64 writes"
        for document in documents:
            assert await backend.graphs.fetch_graph(TENANTLESS, graph_ref(document)) == document
        await backend.close()

    asyncio.run(case())


def test_writes_racing_a_close_are_all_answered_and_acknowledged_ones_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "closing.db"

    async def case() -> list[object]:
        backend = SQLiteBackend(path)
        await backend.open()
        documents = [graph_document(f"racing-{index}") for index in range(60)]
        saves = [
            asyncio.ensure_future(
                backend.graphs.save_graph(TENANTLESS, graph_ref(document), document)
            )
            for document in documents
        ]
        await asyncio.sleep(0)  # let them queue up
        await backend.close()
        # none is left waiting on a writer that went away
        answers = await asyncio.wait_for(asyncio.gather(*saves, return_exceptions=True), 60)
        reopened = SQLiteBackend(path)
        for document, answer in zip(documents, answers, strict=True):
            if isinstance(answer, GraphVersion):
                stored = await reopened.graphs.fetch_graph(TENANTLESS, graph_ref(document))
                assert stored == document, "an acknowledged write is in the file"
        await reopened.close()
        return list(answers)

    answers = asyncio.run(case())
    assert any(isinstance(answer, GraphVersion) for answer in answers), answers


def test_a_batch_whose_commit_fails_answers_every_job_with_the_error(tmp_path: Path) -> None:
    """If the shared transaction is lost, nobody in the batch is told it committed."""

    async def case() -> None:
        backend = SQLiteBackend(tmp_path / "group.db")
        runs = await _claimed_runs(backend, 2)

        def abort_everything(conn: sqlite3.Connection) -> _Done[None]:
            conn.execute("ROLLBACK")  # the transaction is gone under the batch
            raise sqlite3.OperationalError("disk I/O error")

        commits: list[Awaitable[Any]] = []
        for run, token in runs:
            nxt = successor(run, START, new_events=1)
            commits.append(
                backend.transitions.commit_claimed(
                    TENANTLESS, claimed(nxt, token), events_for(nxt, START, [2])
                )
            )
        gate = Gate(backend)
        answers = await _batched(
            gate, [commits[0], backend._engine.write(abort_everything), commits[1]]
        )
        assert not any(isinstance(answer, Run) for answer in answers), answers
        for run, _ in runs:
            stored = await backend.runs.fetch_run(TENANTLESS, run.id)
            assert isinstance(stored, Run) and stored.checkpoint_seq == 1
        await backend.close()

    asyncio.run(case())


def test_a_writer_killed_mid_batch_keeps_every_acknowledged_commit(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(path), "w", "8"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    acknowledged: dict[str, tuple[int, int]] = {}
    deadline = time.monotonic() + 120
    while len(acknowledged) < 40 and time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        fields = json.loads(line)
        acknowledged[fields["run"]] = (fields["checkpoint_seq"], fields["event_seq"])
    os.kill(process.pid, signal.SIGKILL)
    # read the rest through the same text stream: communicate() reads the raw pipe and
    # would skip lines readline() already buffered (acknowledged commits, lost)
    out = process.stdout.read()
    err = process.stderr.read() if process.stderr is not None else ""
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL, err
    for line in out.splitlines():
        fields = json.loads(line)
        acknowledged[fields["run"]] = (fields["checkpoint_seq"], fields["event_seq"])
    assert len(acknowledged) >= 40, f"the writer stopped early:\n{err}"

    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]

    async def check() -> None:
        backend = SQLiteBackend(path)
        for run_id, (checkpoint_seq, event_seq) in acknowledged.items():
            stored = await backend.runs.fetch_run(TENANTLESS, run_id)
            assert isinstance(stored, Run), run_id
            # At most one unacknowledged commit per writer task can have landed after.
            assert stored.checkpoint_seq in (checkpoint_seq, checkpoint_seq + 1), run_id
            assert stored.event_seq >= event_seq
            assert await _events(backend, run_id) == list(range(1, stored.event_seq + 1))
        await backend.close()

    asyncio.run(check())
