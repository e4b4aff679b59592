"""``case _: assert_never(x)`` makes mypy report a case missing from a closed union.

A ``raise TypeError`` ending type-checks whatever cases are missing; ``assert_never``
does not. One mypy run (the repo's mypy.ini, ``--strict``) checks two probes over the
real store-answer union ``docket.errors.ContractError``: one with every case, which must
pass, and one with ``contract.Permanent`` deleted, which mypy must name.
"""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

from docket.contract import errors as contract
from docket.errors import ContractError

ROOT = Path(__file__).resolve().parent.parent


def _probe(missing: type | None) -> str:
    cases = [t for t in typing.get_args(ContractError) if t is not missing]
    arms = "".join(
        f"        case contract.{t.__name__}():\n            return {t.__name__!r}\n" for t in cases
    )
    return (
        "from typing import assert_never\n"
        "from docket.contract import errors as contract\n"
        "from docket.errors import ContractError\n\n\n"
        "def name(error: ContractError) -> str:\n"
        "    match error:\n"
        f"{arms}"
        "        case _:\n"
        "            assert_never(error)\n"
    )


def test_mypy_names_the_case_a_match_leaves_out(tmp_path: Path) -> None:
    assert contract.Permanent in typing.get_args(ContractError)
    complete, partial = tmp_path / "probe_complete.py", tmp_path / "probe_partial.py"
    complete.write_text(_probe(None))
    partial.write_text(_probe(contract.Permanent))
    command = [
        *(sys.executable, "-m", "mypy", "--config-file", str(ROOT / "mypy.ini")),
        *("--strict", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary"),
        *(str(complete), str(partial)),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = (
        f"exit {done.returncode}\nstdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-2000:]}"
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 1, report
    assert not [line for line in errors if "probe_complete.py" in line], report
    assert len(errors) == 1, report
    assert "probe_partial.py" in errors[0] and '"Permanent"' in errors[0], report
    assert "assert_never" in errors[0], report
