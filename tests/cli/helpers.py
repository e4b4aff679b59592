"""Running the real ``docket`` console script (the one this environment installed)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.cli.cli_app:create"


def docket_command() -> list[str]:
    """The installed ``docket`` script next to this interpreter (``python -m docket.cli``
    only when the script is missing, e.g. an environment without console scripts)."""
    script = Path(sys.executable).parent / "docket"
    if script.exists():
        return [str(script)]
    found = shutil.which("docket")
    return [found] if found else [sys.executable, "-m", "docket.cli"]


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DOCKET_BACKEND", None)
    env.update(extra or {})
    return env


def docket_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*docket_command(), *args],
        cwd=ROOT,
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def free_port() -> int:
    """A local TCP port nobody listens on (it was free a moment ago)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def explain(result: subprocess.CompletedProcess[str]) -> str:
    out, err = result.stdout[-2000:], result.stderr[-2000:]
    return f"exit {result.returncode}\nstdout: {out}\nstderr: {err}"
