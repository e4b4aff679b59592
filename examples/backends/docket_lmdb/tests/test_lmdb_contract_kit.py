"""The whole contract kit against the example LMDB plugin, as every backend runs it.

The kit is a pytest plugin with its own ``--docket-backend`` option, so it runs in a
child pytest, on a fresh LMDB environment per case (the ``{namespace}`` placeholder).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def test_the_contract_kit_passes_on_lmdb(tmp_path: Path) -> None:
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
            f"lmdb://{tmp_path.as_posix()}/kit-{{namespace}}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, f"{summary}\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    match = re.search(r"(\d+) passed", summary)
    assert match and int(match.group(1)) > 300, summary
    assert not re.search(r"failed|error|skipped|xfail", summary), summary
