"""Worker processes on one PostgreSQL database: the multi-process SIGKILL test of the
SQLite backend (``tests/runtime/test_processes.py``) with 4 workers and 500 runs,
checked through the facade's reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from docket_postgres.testing import ThrowawayPostgres

from tests.runtime.crash_checks import sigkill_scenario


def test_four_workers_finish_500_runs_on_postgres_through_a_sigkill_and_a_restart(
    tmp_path: Path, pg_server: ThrowawayPostgres, schema_name: Callable[[str], str]
) -> None:
    url = pg_server.url(schema=schema_name("crash"))
    report = sigkill_scenario(url, tmp_path, workers=4, runs=500)
    print("\n" + report.summary("postgres"))
