"""Every example runs, and says what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_quickstart_pauses_resolves_and_prints_the_output() -> None:
    done = subprocess.run(
        [sys.executable, str(HERE / "quickstart.py")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "is waiting" in out
    assert "is done" in out
    assert "'receipt': 'paid 420.0 for ada'" in out
    assert "interrupt_resolved" in out and "run_completed" in out
