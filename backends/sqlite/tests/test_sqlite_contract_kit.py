"""The whole contract kit against SQLite, as part of the ordinary test run.

The kit is a pytest plugin that needs its own ``--docket-backend`` option, so it runs in
a child pytest: once on a file per case (WAL, ``synchronous=FULL``) and once on a
private in-memory database per case.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("where", ["file", "memory"])
def test_the_contract_kit_passes(tmp_path: Path, where: str) -> None:
    url = (
        f"sqlite:///{tmp_path.as_posix()}/kit-{{namespace}}.db"
        if where == "file"
        else "sqlite:///:memory:"
    )
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
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"{summary}\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    match = re.search(r"(\d+) passed", summary)
    assert match and int(match.group(1)) > 200, summary
    assert not re.search(r"failed|error|skipped|xfail", summary), summary
