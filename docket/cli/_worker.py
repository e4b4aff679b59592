"""``docket worker``: one worker process, or a supervisor of several."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys

from docket.cli._common import (
    ENV_UI_TOKEN,
    _fail,
    _run,
    load_app,
)
from docket.cli._retention import add_prune_options, prune_argv, with_prune_settings
from docket.cli._supervisor import SUPERVISOR_FD, stop_with_supervisor, supervise
from docket.contract.errors import StoreError
from docket.errors import DocketError, Retryable
from docket.facade import Docket


def _add_worker_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = commands.add_parser("worker", help="run workers for an application")
    worker.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        required=True,
        help="the application's Docket, or a factory returning one",
    )
    worker.add_argument("--concurrency", type=int, default=None, help="runs drained at once")
    worker.add_argument(
        "--processes", type=int, default=1, help="worker processes to start (default 1)"
    )
    worker.add_argument(
        "--ui-port",
        type=int,
        default=None,
        metavar="N",
        help="also serve the web console on 127.0.0.1:N (token from $DOCKET_UI_TOKEN)",
    )
    worker.add_argument(
        "--queues",
        default=None,
        metavar="A,B",
        help="claim only runs of these named queues (default: every queue)",
    )
    add_prune_options(worker)
    # internal: the pipe a supervisor hands its children (see docket.cli._supervisor)
    worker.add_argument(SUPERVISOR_FD, type=int, default=None, help=argparse.SUPPRESS)
    worker.set_defaults(run=_worker)


def _worker(args: argparse.Namespace) -> int:
    if args.processes < 1:
        raise _fail("--processes must be at least 1")
    if args.concurrency is not None and args.concurrency < 1:
        raise _fail("--concurrency must be at least 1")
    if args.ui_port is not None and not 0 < args.ui_port < 65536:
        raise _fail("--ui-port must be 1..65535")
    queues = _queues(args.queues)
    if args.processes > 1:
        if args.ui_port is not None:
            raise _fail("--ui-port serves from one process: use --processes 1 or docket ui")
        extra = prune_argv(args) + ([] if queues is None else ["--queues", args.queues])
        return supervise(args.app, args.concurrency, args.processes, extra)
    early: list[int] = []  # a stop signal that arrives while the app is still loading

    def remember(signum: int, _frame: object) -> None:
        early.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, remember)
    if args.supervisor_fd is not None:
        stop_with_supervisor(args.supervisor_fd)
    docket = with_prune_settings(load_app(args.app), args)
    return _run(_serve(docket, args.concurrency, early, args.ui_port, queues))


def _queues(text: str | None) -> frozenset[str] | None:
    """``--queues a,b`` as names (checked against the store when the worker starts)."""
    if text is None:
        return None
    names = frozenset(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise _fail("--queues expects queue names separated by commas")
    return names


async def _serve(
    docket: Docket,
    concurrency: int | None,
    early: list[int],
    ui_port: int | None = None,
    queues: frozenset[str] | None = None,
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    if early:
        stop.set()
    if not await _open_when_reachable(docket, stop):
        return 0  # stopped before the store could be reached
    async with docket:
        settings = docket.settings
        print(
            f"docket worker {os.getpid()}: {docket.backend!r}, concurrency "
            f"{concurrency or settings.concurrency}, claim TTL {settings.claim_ttl} s, "
            f"poll {settings.poll_interval} s"
            + ("" if queues is None else f", queues {','.join(sorted(queues))}"),
            file=sys.stderr,
            flush=True,
        )
        if ui_port is None:
            stats = await docket.run_worker(concurrency=concurrency, stop=stop, queues=queues)
        else:
            from docket.ui.serve import DEFAULT_HOST, serving_alongside

            token = os.environ.get(ENV_UI_TOKEN) or None
            async with serving_alongside(
                docket, host=DEFAULT_HOST, port=ui_port, token=token
            ) as console:
                print(f"docket console: {console}", file=sys.stderr, flush=True)
                stats = await docket.run_worker(concurrency=concurrency, stop=stop, queues=queues)
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(stats.outcomes.items())) or "none"
    print(
        f"docket worker {os.getpid()} stopped: {stats.leases} leases, {stats.commits} commits, "
        f"{stats.poisoned} poisoned; drains: {outcomes}",
        file=sys.stderr,
        flush=True,
    )
    return 0


def _gives_up_on(exc: Exception) -> bool:
    """Whether opening the store failed for good: a contract or configuration error, or a
    failure the backend classified as permanent (schema too new, authentication, ...).
    Anything else (the server is down or restarting) is worth another try."""
    if isinstance(exc, DocketError):
        return not isinstance(exc, Retryable)
    return isinstance(exc, StoreError) and not exc.retryable


async def _open_when_reachable(docket: Docket, stop: asyncio.Event) -> bool:
    """Open the Docket, retrying with capped backoff while the store is unreachable, so a
    worker started during a database outage waits for it instead of exiting. False when
    a stop signal came first."""
    delay = 0.2
    while not stop.is_set():
        try:
            await docket.open()
            return True
        except Exception as exc:
            if _gives_up_on(exc):
                raise
            print(
                f"docket worker {os.getpid()}: the store is not reachable yet "
                f"({type(exc).__name__}: {exc}); retrying in {delay:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):  # 3.11's wait_for can lose a cancel
                await stop.wait()
        delay = min(delay * 2, 5.0)
    return False
