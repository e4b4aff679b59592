"""The whole contract kit against Redis, as part of the ordinary test run.

The kit is a pytest plugin that needs its own ``--docket-backend`` option, so it runs in
a child pytest, once against the session's single Redis and once against its Cluster.
``{namespace}`` in the key prefix gives every case an empty store.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from docket_redis.testing import RedisCluster, RedisServer

ROUNDS = 50


def _run_kit(url: str, cwd: Path) -> None:
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
            "--docket-backend",
            url,
            "--docket-rounds",
            str(ROUNDS),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        check=False,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"{summary}\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    match = re.search(r"(\d+) passed", summary)
    assert match and int(match.group(1)) > 200, summary
    assert not re.search(r"failed|error|skipped|xfail", summary), summary


@pytest.mark.parametrize("where", ["single", "cluster"])
def test_the_contract_kit_passes(
    request: pytest.FixtureRequest, tmp_path: Path, where: str
) -> None:
    if where == "single":
        server: RedisServer = request.getfixturevalue("redis_single")
        url = f"{server.url}?prefix=kit:{{namespace}}"
    else:
        cluster: RedisCluster = request.getfixturevalue("redis_cluster_nodes")
        url = f"{cluster.url}?prefix=kit:{{namespace}}"
    _run_kit(url, tmp_path)
