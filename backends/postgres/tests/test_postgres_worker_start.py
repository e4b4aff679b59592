"""A worker process started while PostgreSQL is down waits for it instead of exiting."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from docket_postgres.testing import ThrowawayPostgres

from docket import SyncDocket
from docket.records import RunStatus
from tests.runtime import worker_app
from tests.runtime.crash_checks import EXPECTED_OUTPUT, spawn_worker, until, worker_processes


def test_a_worker_started_during_an_outage_waits_for_the_database(
    tmp_path: Path, pg_server: ThrowawayPostgres, schema_name: Callable[[str], str]
) -> None:
    url = pg_server.url(schema=schema_name("outage"))
    with SyncDocket(url, nodes=worker_app.NODES) as docket:
        ref = docket.save_graph(worker_app.FIVE_STEPS)
        docket.start_run(ref, run_id="after-outage")
    err = tmp_path / "w.err"
    pg_server.stop_server(mode="fast")  # clean: the throwaway server does not fsync
    down = True
    try:
        with worker_processes() as procs:
            procs.append(spawn_worker(url, tmp_path, "w"))
            until(lambda: "not reachable yet" in err.read_text(), 60, "a retry message")
            time.sleep(1.0)  # a few more tries fail while the server stays down
            assert procs[0].poll() is None, err.read_text()
            pg_server.start_server()
            down = False
            with SyncDocket(url, nodes=worker_app.NODES) as docket:
                done = docket.await_run("after-outage", timeout=60)
                assert done.status is RunStatus.DONE and done.output == EXPECTED_OUTPUT
            procs[0].send_signal(signal.SIGTERM)
            assert procs[0].wait(timeout=30) == 0, err.read_text()
    finally:
        if down:  # leave the session's server running for the other tests
            pg_server.start_server()
