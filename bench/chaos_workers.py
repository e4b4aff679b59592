"""The chaos campaign's worker processes (``bench/chaos.py``): ``docket worker --app
bench.chaos_app:create`` processes started, SIGKILLed and stopped by name, and the logs
they write to the campaign directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import attrs

__all__ = ["APP", "Workers", "read_lines"]

ROOT = Path(__file__).resolve().parents[1]
APP = "bench.chaos_app:create"


@attrs.define
class Workers:
    """The worker processes of a campaign, by name (``w0``, ``w1``, …)."""

    url: str
    directory: Path
    ttl: float
    poll: float
    concurrency: int
    live: dict[str, subprocess.Popen[bytes]] = attrs.field(factory=dict)
    killed: dict[str, float] = attrs.field(factory=dict)  # name -> unix time of the SIGKILL
    died: list[str] = attrs.field(factory=list)  # exited without being told to
    failed_at_start: list[str] = attrs.field(factory=list)  # died before opening the store
    count: int = 0

    def spawn(self, **extra: str) -> str:
        name = f"w{self.count}"
        self.count += 1
        env = dict(os.environ)
        env.update(
            DOCKET_BACKEND=self.url,
            DOCKET_CHAOS_DIR=str(self.directory),
            DOCKET_CHAOS_WORKER=name,
            DOCKET_CHAOS_TTL=str(self.ttl),
            DOCKET_CHAOS_POLL=str(self.poll),
            **extra,
        )
        self.live[name] = subprocess.Popen(
            [
                sys.executable,
                "-c",
                # ``docket worker``, the command line's entry point (as the console script)
                "import sys; from docket.cli import main; sys.exit(main(sys.argv[1:]))",
                "worker",
                "--app",
                APP,
                "--concurrency",
                str(self.concurrency),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(self.directory / f"{name}.err").open("wb"),
        )
        return name

    def ready(self, name: str) -> bool:
        return "docket worker" in (self.directory / f"{name}.err").read_text(errors="replace")

    def wait_ready(self, names: list[str], timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not all(self.ready(name) for name in names):
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers {names} did not start within {timeout}s")
            for name in names:
                if self.live[name].poll() is not None:
                    raise RuntimeError(f"worker {name} exited at start: {self.tail(name)}")
            time.sleep(0.05)

    def tail(self, name: str) -> str:
        return (self.directory / f"{name}.err").read_text(errors="replace")[-1500:]

    def kill(self, name: str) -> float:
        proc = self.live.pop(name)
        proc.send_signal(signal.SIGKILL)
        at = time.time()
        proc.wait(timeout=10)
        self.killed[name] = at
        return at

    def reap(self) -> list[str]:
        """Workers that exited on their own (a bug: a worker must outlive any store
        trouble); they are replaced."""
        gone = [name for name, proc in self.live.items() if proc.poll() is not None]
        for name in gone:
            del self.live[name]
            # a worker started while the server is down waits for it (docket worker
            # retries opening the store), so leaving early is a bug as well
            self.died.append(name)
            if not self.ready(name):
                self.failed_at_start.append(name)
            self.spawn()
        return gone

    def stop_all(self, timeout: float = 30.0) -> dict[str, int | None]:
        # a worker still importing has no SIGTERM handler yet: let it start first
        self.reap()
        self.wait_ready(sorted(self.live))
        for proc in self.live.values():
            proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for name, proc in self.live.items():
            try:
                codes[name] = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
                codes[name] = None
        self.live.clear()
        return codes

    def kill_all(self) -> None:
        for proc in self.live.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        self.live.clear()


def read_lines(directory: Path, prefix: str) -> list[list[str]]:
    out: list[list[str]] = []
    for path in sorted(directory.glob(f"{prefix}-*.log")):
        out += [line.split() for line in path.read_text().splitlines() if line.strip()]
    return out
