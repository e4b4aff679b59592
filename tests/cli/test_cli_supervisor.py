"""``docket worker --processes N`` (issue 18, item 8): the supervisor restarts a child that
dies, and its children stop when it is SIGKILLed. Real processes on a real SQLite file."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from docket import SyncDocket
from tests.cli import cli_app
from tests.cli.helpers import APP, ROOT, cli_env, docket_command

WAIT = 120.0  # seconds; generous for a loaded 2-core machine


class Supervisor:
    """A running ``docket worker --processes 2`` whose stderr (and its children's, which
    they inherit) is collected line by line."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [*docket_command(), "worker", "--app", APP, "--processes", "2"],
            cwd=ROOT,
            env=cli_env(env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._incoming: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._incoming.put(line.rstrip("\n"))
        self._incoming.put(None)  # every writer (supervisor and children) has exited

    def wait_for(self, what: str, found: Callable[[list[str]], bool]) -> None:
        deadline = time.monotonic() + WAIT
        while not found(self.lines):
            left = deadline - time.monotonic()
            try:
                line = self._incoming.get(timeout=max(left, 0.01))
            except queue.Empty:
                line = None
            if line is None and not found(self.lines):
                raise AssertionError(self.report(f"gave up waiting for {what}"))
            if line is not None:
                self.lines.append(line)

    def started(self) -> list[int]:  # as the supervisor logs them
        return [int(m[1]) for line in self.lines if (m := re.search(r"worker (\d+) started", line))]

    def ready(self) -> set[int]:  # workers that opened the store, by their own line
        return {int(m[1]) for x in self.lines if (m := re.match(r"docket worker (\d+): \w", x))}

    def report(self, why: str) -> str:
        code = self.proc.poll()
        tail = "\n".join(self.lines[-40:])
        return f"{why}; supervisor exit code {code}; stderr tail:\n{tail}"


@contextmanager
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    db = tmp_path / "app.db"
    with SyncDocket(f"sqlite:///{db}", nodes=cli_app.NODES) as docket:
        docket.save_graph(cli_app.GRAPH)  # the store exists before the workers race to it
    running = Supervisor({"DOCKET_BACKEND": f"sqlite:///{db}"})
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait(timeout=WAIT)
        for pid in {*running.started(), *running.ready()}:  # leave no worker behind
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _said(text: str, *, anywhere: bool = False) -> Callable[[list[str]], bool]:
    def found(lines: list[str]) -> bool:
        return any((text in line) if anywhere else line.startswith(text) for line in lines)

    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited


def test_a_dead_child_is_restarted_and_counted(tmp_path: Path) -> None:
    with supervisor(tmp_path) as sup:
        sup.wait_for("two ready workers", lambda _: len(sup.ready()) == 2)
        victim = min(sup.ready())
        os.kill(victim, signal.SIGKILL)
        sup.wait_for("a third ready worker", lambda _: len(sup.ready()) == 3)
        assert any(
            f"worker {victim} exited (killed by SIGKILL); restart in 0.5 s" in line
            for line in sup.lines
        ), sup.report("no restart line")
        sup.proc.send_signal(signal.SIGTERM)
        sup.wait_for(
            "the supervisor's last line", lambda ls: any("stopped: 1 restart" in x for x in ls)
        )
        code = sup.proc.wait(timeout=WAIT)
        assert code == 0, sup.report("unclean stop")
        assert not any(_alive(pid) for pid in sup.ready()), sup.report("a worker outlived it")


def test_children_stop_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    with supervisor(tmp_path) as sup:
        sup.wait_for("two ready workers", lambda _: len(sup.ready()) == 2)
        children = sorted(sup.ready())  # from the workers' own first lines
        sup.proc.kill()
        sup.proc.wait(timeout=WAIT)
        for pid in children:  # each stops gracefully: it prints its summary line
            # two workers share the supervisor's stderr: their lines may run together
            stopped = _said(f"docket worker {pid} stopped:", anywhere=True)
            sup.wait_for(f"worker {pid} to stop", stopped)
        deadline = time.monotonic() + WAIT
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)  # the stopped workers' exit is reaped by init
        assert not any(_alive(pid) for pid in children), sup.report("orphans left running")


def test_a_child_with_a_usage_error_is_not_restarted(tmp_path: Path) -> None:
    result = subprocess.run(
        [*docket_command(), "worker", "--app", "no_such_module:app", "--processes", "2"],
        cwd=ROOT,
        env=cli_env({"DOCKET_BACKEND": f"sqlite:///{tmp_path / 'app.db'}"}),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "failed with a usage error; stopping" in result.stderr
    assert "stopped: 0 restarts" in result.stderr
