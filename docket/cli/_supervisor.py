"""``docket worker --processes N``: a supervisor that keeps N worker processes running.

Each child is a plain ``docket worker`` process. It holds the read end of a pipe whose
write end only the supervisor has, so when the supervisor dies, even by SIGKILL, the
kernel closes that end, the child reads end-of-file and stops itself as if sent SIGTERM
(gracefully: runs in flight commit or hand back their claims). A pipe works on every
POSIX system and whatever thread started the child; ``PR_SET_PDEATHSIG`` is Linux-only
and fires when the *thread* that forked exits.

A child that exits while the supervisor is not stopping is restarted after a backoff
(``RESTART_FIRST`` doubling to ``RESTART_MAX`` per slot, back to the start once a child
has run ``HEALTHY_AFTER`` seconds); every exit and restart is logged to stderr and the
restarts are counted in the final line. A child that exits with 2, a usage or
configuration error that restarting cannot fix, stops the supervisor (exit 2).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Final

import attrs

SUPERVISOR_FD: Final = "--supervisor-fd"
RESTART_FIRST: Final = 0.5  # seconds before the first restart of a slot
RESTART_MAX: Final = 30.0
HEALTHY_AFTER: Final = 60.0  # a child that ran this long resets its slot's backoff
_TICK: Final = 0.1  # how often exits are noticed; a restart waits far longer anyway
_USAGE: Final = 2  # the CLI's exit code for usage and configuration errors


@attrs.define
class _Slot:
    index: int
    child: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    delay: float = RESTART_FIRST
    restart_at: float | None = None  # when a dead child's replacement is due
    code: int | None = None  # the last child's exit code
    told: bool = False  # the stop signal was passed on to the current child


def supervise(app: str, concurrency: int | None, processes: int, extra: Sequence[str] = ()) -> int:
    """Run ``processes`` workers until SIGINT/SIGTERM (passed on to them); the exit code
    is the worst child's, a child stopped by the passed-on signal counting as clean."""
    command = [sys.executable, "-m", "docket.cli", "worker", "--app", app]
    if concurrency is not None:
        command += ["--concurrency", str(concurrency)]
    command += extra  # further worker options, passed on as given (retention)
    return _Supervisor(command, processes).run()


class _Supervisor:
    def __init__(self, command: list[str], processes: int) -> None:
        self.read_end, self.write_end = os.pipe()  # not inheritable; pass_fds shares one
        self.command = [*command, SUPERVISOR_FD, str(self.read_end)]
        self.slots = [_Slot(i) for i in range(processes)]
        self.stop: list[int] = []  # the signal to pass on, once one arrived
        self.restarts = 0
        self.fatal = False

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for slot in self.slots:
                self._spawn(slot)
            while True:
                now = time.monotonic()
                for slot in self.slots:
                    self._tend(slot, now)
                if self.stop and all(slot.child is None for slot in self.slots):
                    break
                time.sleep(_TICK)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            os.close(self.write_end)  # children still running (after an error) see EOF
            os.close(self.read_end)
        self._log(f"stopped: {self.restarts} restart{'' if self.restarts == 1 else 's'}")
        if self.fatal:
            return _USAGE
        stopped = [0 if s.code is None or -s.code in self.stop else s.code for s in self.slots]
        return max(stopped, key=abs)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if not self.stop:  # only record it: the loop passes it on (no work in a handler)
            self.stop.append(signum)

    def _tend(self, slot: _Slot, now: float) -> None:
        child = slot.child
        if child is not None and self.stop and not slot.told and child.poll() is None:
            child.send_signal(self.stop[0])
            slot.told = True
        if child is not None and (code := child.poll()) is not None:
            slot.child, slot.code = None, code
            if self.stop:
                return
            if code == _USAGE:
                self._log(f"worker {child.pid} failed with a usage error; stopping")
                self.fatal = True
                self.stop.append(signal.SIGTERM)
                return
            if now - slot.started >= HEALTHY_AFTER:
                slot.delay = RESTART_FIRST
            slot.restart_at = now + slot.delay
            self._log(
                f"worker {child.pid} exited ({_describe_exit(code)}); restart in {slot.delay:g} s"
            )
            slot.delay = min(slot.delay * 2, RESTART_MAX)
        due = slot.restart_at is not None and slot.restart_at <= now
        if slot.child is None and not self.stop and due:
            self._spawn(slot)
            self.restarts += 1

    def _spawn(self, slot: _Slot) -> None:
        slot.child = subprocess.Popen(self.command, pass_fds=(self.read_end,))
        slot.started, slot.restart_at, slot.told = time.monotonic(), None, False
        self._log(f"worker {slot.child.pid} started (slot {slot.index})")

    def _log(self, text: str) -> None:
        print(f"docket supervisor {os.getpid()}: {text}", file=sys.stderr, flush=True)


def stop_with_supervisor(fd: int) -> None:
    """In a child: stop gracefully (SIGTERM to itself) when the supervisor's end of the
    pipe closes, which the kernel does when the supervisor exits however it dies."""

    def watch() -> None:
        try:
            while os.read(fd, 1):  # the supervisor never writes: only EOF ends this
                pass
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="docket-supervisor-watch", daemon=True).start()


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
