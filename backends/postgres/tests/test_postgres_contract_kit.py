"""The whole contract kit against PostgreSQL, as part of the ordinary test run.

The kit is a pytest plugin with its own options, so it runs in a child pytest, three
ways: on the kit's manual clock (the backend's ``clock=`` testing seam) with the
tenant-blind claim policy; on the database's own clock (``clock_timestamp()``, through
the ``database_clock_backend`` factory, which takes no ``clock=``); and, for the cases
about claims (the only ones a claim policy can change), with the fair claim policy.
Every case gets a fresh schema (``{namespace}`` in the URL).

The concurrency cases repeat ``--docket-rounds`` times; the suite uses fewer rounds than
the kit's default 50 to stay quick (the default is run by hand; see the docs).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docket_postgres.testing import URL_ENV, ThrowawayPostgres

#: The invariants whose cases claim, steal, release, abandon or poison runs.
CLAIM_INVARIANTS = ",".join(
    [
        "ABANDON-AFTER-RETAINED-COMMIT",
        "ABANDON-ESCALATION",
        "ABANDON-NON-POISONING-BACKOFF",
        "CHILD-HANDOFF-RACE",
        "CHILD-HANDOFF-UNCLAIMED",
        "CHILD-PARK-ROUNDTRIP",
        "CHILD-START-IDEMPOTENT",
        "CLAIM-BACKEND-CLOCK",
        "CLAIM-CONCURRENT-EXCLUSIVE",
        "CLAIM-DEMAND1-PREFERENCE",
        "CLAIM-DOES-NOT-TOUCH-DOCUMENT",
        "CLAIM-FUTURE-WAKE",
        "CLAIM-MAX-ATTEMPTS-POISON",
        "CLAIM-READY-EXPIRED-CLASSES",
        "CLAIM-TTL-BOUNDARY",
        "CLAIM-TTL-SUBMILLISECOND",
        "CLAIMED-START",
        "COMMIT-RESETS-HEALTH",
        "MESSAGE-UNCLAIMED-ANY",
        "RACE-ABANDON-VS-STEAL",
        "RACE-COMMIT-VS-STEAL",
        "RACE-RELEASE-VS-STEAL",
        "REFRESH-AFTER-RELEASE",
        "RETRY-POISONED-SCOPED",
        "RETRY-POISONED-TERMINAL-FIRST",
        "RUN-CLAIM-LIVENESS-RECOVERY",
        "SIGNAL-CLEARS-POISON",
        "T-REOPEN-1",
        "T-REOPEN-2",
        "TIMER-DELAYED-START",
        "TIMER-WAITING-DUE",
    ]
)

#: variant: (how the backend is named, schema pattern, extra URL options, rounds, only)
VARIANTS: dict[str, tuple[str, str, str, int, str]] = {
    "manual-clock": ("url", "kit_{namespace}", "", 20, ""),
    "database-clock": ("factory", "", "", 10, ""),
    "fair-policy": ("url", "kitf_{namespace}", "&claim_policy=fair", 20, CLAIM_INVARIANTS),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_contract_kit_passes(
    pg_server: ThrowawayPostgres, tmp_path: Path, variant: str
) -> None:
    how, schema, extra, rounds, only = VARIANTS[variant]
    if how == "url":
        target = ["--docket-backend", f"{pg_server.conninfo()}?schema={schema}{extra}"]
    else:
        target = ["--docket-backend-factory", "docket_postgres.testing:database_clock_backend"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--pyargs",
            "docket_contract_tests",
            *target,
            "--docket-rounds",
            str(rounds),
            *(["--docket-invariant", only] if only else []),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env={**os.environ, URL_ENV: pg_server.conninfo()},
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"{summary}\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    match = re.search(r"(\d+) passed", summary)
    assert match and int(match.group(1)) > (50 if only else 250), summary
    assert not re.search(r"failed|error|skipped|xfail", summary), summary
