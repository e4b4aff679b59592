"""Worker processes on one Redis server with AOF fsynced before every reply: the
multi-process SIGKILL test of the SQLite backend (``tests/runtime/test_processes.py``),
checked through the facade's reads."""

from __future__ import annotations

import secrets
from pathlib import Path

from docket_redis.testing import redis_server, with_prefix

from docket import SyncDocket
from tests.runtime import worker_app
from tests.runtime.crash_checks import check_finished_runs, sigkill_scenario


def test_three_workers_finish_200_runs_on_redis_through_a_sigkill_and_a_restart(
    tmp_path: Path,
) -> None:
    runs = 200
    with redis_server(appendonly=True, appendfsync="always") as server:
        for name, value in (("appendonly", "yes"), ("appendfsync", "always")):
            assert server.command("CONFIG", "GET", name).split() == [name, value]
        url = with_prefix(server.url, f"crash{secrets.token_hex(4)}")
        report = sigkill_scenario(url, tmp_path, workers=3, runs=runs)
        # and what the workers committed is on disk: SIGKILL the server too, restart it
        # from its AOF alone, and check the same things again
        server.kill()
        server.start()
        with SyncDocket(url, nodes=worker_app.NODES) as docket:
            assert check_finished_runs(docket, runs) == report.checkpoints
    print("\n" + report.summary("redis (AOF always)"))
