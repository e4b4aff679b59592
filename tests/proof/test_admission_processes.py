"""The proof of issue #25's admission limit: 4 worker processes (``docket worker``, 8
slots each), one queue whose admission limit is 3, 60 runs that park on a durable timer
for most of their life — the number of *unfinished* runs computed from the workers'
records never exceeds 3 and reaches 3, every run finishes, and nothing stays admitted
or held once they have. On every backend whose store declares ``Feature.ADMISSION``
(throwaway servers on 127.0.0.1).

The records are the workers' own (``tests/proof/admission_app.py``): a run's life is its
first node's start .. its last node's end on the machine-wide monotonic clock, so
overlaps are counted from what ran, not from what the store says. A parked run holds no
claim and no worker, so an execution limit would not bound these lives; the control runs
the same workers without the limit and sees more than 3 lives at once.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final

import pytest

from docket import SyncDocket
from docket.backends import from_url
from docket.contract.capabilities import Feature
from docket.records import RunStatus
from tests.proof import admission_app
from tests.proof.test_queue_limit_processes import _url, explain, most_at_once, wait_for
from tests.runtime.crash_checks import spawn_worker, stop_workers, worker_processes

APP: Final = "tests.proof.admission_app:create"
WORKERS: Final = 4
CONCURRENCY: Final = 8
QUEUE: Final = "onboarding"
KINDS: Final = ("sqlite", "postgres", "redis", "redis-cluster")
#: A URL of each kind, never opened: enough to read what its backend declares.
_PROBES: Final = {
    "sqlite": "sqlite:///never-opened.db",
    "postgres": "postgresql://127.0.0.1:1/never",
    "redis": "redis://127.0.0.1:1/0",
    "redis-cluster": "redis://127.0.0.1:1/0",
}


def declares_admission(kind: str) -> bool:
    return Feature.ADMISSION in from_url(_PROBES[kind]).capabilities().features


def lives(log_dir: Path) -> dict[str, tuple[float, float]]:
    """Each run's life from the workers' records: (first ``enter``, last ``leave``); a run
    with no ``leave`` yet is alive until now."""
    enters: dict[str, float] = {}
    leaves: dict[str, float] = {}
    for path in sorted(log_dir.glob("runs-*.log")):
        for line in path.read_text().splitlines():
            kind, run_id, when, _pid = line.split()
            if kind == "enter":
                enters[run_id] = min(enters.get(run_id, float(when)), float(when))
            else:
                leaves[run_id] = max(leaves.get(run_id, float(when)), float(when))
    return {run_id: (start, leaves.get(run_id, float("inf"))) for run_id, start in enters.items()}


def test_a_life_is_first_enter_to_last_leave(tmp_path: Path) -> None:
    (tmp_path / "runs-1.log").write_text("enter a 1.0 1\nenter a 2.0 1\nleave a 3.0 1\n")
    (tmp_path / "runs-2.log").write_text("leave a 4.0 2\nenter b 2.5 2\n")
    assert lives(tmp_path) == {"a": (1.0, 4.0), "b": (2.5, float("inf"))}


def campaign(url: str, log_dir: Path, runs: int, limit: int | None) -> tuple[list[float], int]:
    """Start ``runs`` runs in the queue (mixed priorities), run the workers until every
    one is done and the queue's ledger is empty, stop them. Answers the lives (as
    overlap spans) and the most starts the store counted admitted at one reading."""
    with SyncDocket(url, nodes=admission_app.NODES) as docket:
        ref = docket.save_graph(admission_app.GRAPH)
        if limit is None:
            docket.configure_queue(QUEUE)  # the control: a queue that admits everything
        else:
            docket.configure_queue(QUEUE, admission_limit=limit)
        for index in range(runs):
            docket.start_run(ref, run_id=f"a{index:03}", queue=QUEUE, priority=index % 3 - 1)
        admitted_seen = 0
        with worker_processes() as procs:
            for index in range(WORKERS):
                procs.append(
                    spawn_worker(
                        url,
                        log_dir,
                        f"w{index}",
                        concurrency=CONCURRENCY,
                        app=APP,
                        DOCKET_TEST_CLAIM_TTL="5",
                        DOCKET_TEST_POLL="0.1",
                        DOCKET_TEST_PARK="0.3",
                    )
                )

            def counted() -> tuple[int, int]:
                (status,) = [s for s in docket.queues() if s.config.name == QUEUE]
                return status.admitted, status.held

            def done() -> bool:
                nonlocal admitted_seen
                admitted_seen = max(admitted_seen, counted()[0])
                page = docket.list_runs(limit=1000, status=RunStatus.DONE)
                return len(page.runs) == runs

            def ledger_empty() -> bool:
                return counted() == (0, 0)

            wait_for(f"all {runs} runs done", done, procs, timeout=240)
            wait_for("the queue's ledger empty", ledger_empty, procs, timeout=30)
            try:
                stop_workers(procs)
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{explain(procs)}") from None
    spans = lives(log_dir)
    assert set(spans) == {f"a{index:03}" for index in range(runs)}, sorted(spans)
    return [edge for span in spans.values() for edge in span], admitted_seen


def peak(edges: list[float]) -> int:
    """The most lives at one moment (``edges`` alternate start, end)."""
    recorded = [("", edges[i], edges[i + 1]) for i in range(0, len(edges), 2)]
    return most_at_once(recorded)


@pytest.mark.parametrize("kind", [kind for kind in KINDS if declares_admission(kind)])
def test_four_worker_processes_never_have_more_than_three_runs_of_a_queue_unfinished(
    kind: str, tmp_path: Path
) -> None:
    runs, limit = 60, 3
    started = time.monotonic()
    edges, admitted_seen = campaign(_url(kind), tmp_path, runs, limit)
    most = peak(edges)
    print(
        f"\n{kind}: {runs} runs through a queue admitting {limit} on {WORKERS} worker "
        f"processes x {CONCURRENCY}: at most {most} unfinished at once (the store counted "
        f"at most {admitted_seen} admitted), {time.monotonic() - started:.1f} s"
    )
    assert most <= limit
    assert admitted_seen <= limit
    # and the limit was the bound, not an idle system: 3 were unfinished at once
    assert most == limit


def test_without_the_limit_the_same_workers_have_more_than_three_unfinished(
    tmp_path: Path,
) -> None:
    """The control: the life count sees what the limit prevents (no admission needed)."""
    edges, _ = campaign(_url("sqlite"), tmp_path, runs=20, limit=None)
    assert peak(edges) > 3
