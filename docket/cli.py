"""The ``docket`` command line.

Graph documents (no backend needed)::

    docket graph check FILE.json      diagnostics (exit 1 on errors, 0 with warnings only)
    docket graph hash FILE.json       the graph hash of the effective document
    docket graph render FILE.json --format mermaid|dot

Against a backend (``--backend URL`` or ``DOCKET_BACKEND``; ``--app module:attr`` uses an
application's :class:`~docket.Docket` — its backend, node registry and tenant mode)::

    docket graph publish FILE.json    compile and store; prints the graph reference
    docket runs list|show|events|watch|cancel|retry|resolve
    docket worker --app module:attr [--concurrency N] [--processes N] [--ui-port N]
    docket ui [--host 127.0.0.1] [--port 8787] [--token T] [--worker]   the web console
    docket migrate [--sql]            upgrade the store's schema (or print its DDL)
    docket backup DEST                a consistent copy of a SQLite database
    docket backends                   installed backends (and the chosen one's capabilities)

Output is a human-readable table or text; ``--json`` prints JSON for scripts. Exit codes:
0 success, 1 a refused request or a document with errors (the typed error is printed to
stderr), 2 usage, file or configuration errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from docket.contract.capabilities import BackendContractError, negotiate
from docket.contract.errors import StoreError
from docket.contract.protocols import Backend
from docket.contract.registry import UnknownBackend, available, from_url
from docket.errors import DocketError, Retryable
from docket.facade import Docket, SyncDocket
from docket.graph.compiler import CompileResult, compile_graph
from docket.graph.model import Diagnostic, Graph
from docket.graph.nodes import NodeContext, NodeDefinition, NodeRegistry, NodeReturn, NodeState
from docket.graph.render import to_dot, to_mermaid
from docket.graph.wire import GraphLoadError, from_json
from docket.records import (
    Event,
    GraphRef,
    RunCursor,
    RunInfo,
    RunSummary,
    format_timestamp,
    parse_timestamp,
    run_to_dict,
)
from docket.records import Failure as RunFailure
from docket.values import JSONValue

__all__ = ["load_app", "main"]

ENV_BACKEND = "DOCKET_BACKEND"
ENV_UI_TOKEN = "DOCKET_UI_TOKEN"

_UNKNOWN_NODES_HELP = (
    "the CLI has no node registry, so by default every implementation named in the file "
    "is reported as unknown_implementation; with this flag each name is accepted as a "
    "placeholder whose config is not checked (its config defaults are then not filled in, "
    "so the hash matches the published one only if each node's config lists them)"
)

_T = TypeVar("_T")


class _Failed(Exception):
    """Stop a command with an exit code (the message is already printed)."""

    def __init__(self, code: int) -> None:
        self.code = code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docket", description="docket workflow engine")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_graph_commands(commands)
    _add_run_commands(commands)
    _add_worker_command(commands)
    _add_admin_commands(commands)
    _add_ui_command(commands)
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except _Failed as failed:
        return failed.code
    except DocketError as exc:
        _print_error(args, exc)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


def _print_error(args: argparse.Namespace, exc: DocketError) -> None:
    if getattr(args, "json", False):
        print(json.dumps({"error": exc.to_dict()}, ensure_ascii=False), file=sys.stderr)
    else:
        print(f"docket: {exc}", file=sys.stderr)


def _fail(message: str, code: int = 2) -> _Failed:
    print(f"docket: {message}", file=sys.stderr)
    return _Failed(code)


# -- connecting to a backend ---------------------------------------------------------------------


def _connection_options(parser: argparse.ArgumentParser, *, tenant: bool = True) -> None:
    parser.add_argument(
        "--backend",
        metavar="URL",
        default=None,
        help=f"backend URL, e.g. sqlite:///app.db (default: ${ENV_BACKEND})",
    )
    parser.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        default=None,
        help="use an application's Docket (or a factory returning one): its backend, "
        "nodes and tenant mode",
    )
    if tenant:
        parser.add_argument("--tenant", metavar="ID", default=None, help="the tenant to act as")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def load_app(spec: str) -> Docket:
    """The :class:`Docket` named by ``module:attr`` (a Docket, a SyncDocket, or a callable
    returning either). The current directory is importable, as for ``python -m``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise _fail(f"--app expects MODULE:ATTR, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise _fail(f"cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise _fail(f"{module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not isinstance(target, Docket | SyncDocket) and callable(target):
        target = target()
    if isinstance(target, SyncDocket):
        target = target.docket
    if not isinstance(target, Docket):
        raise _fail(f"{spec} is not a docket.Docket (nor a factory returning one)")
    return target


def _backend_url(args: argparse.Namespace) -> str | None:
    url = args.backend or os.environ.get(ENV_BACKEND)
    return url or None


def _docket(args: argparse.Namespace) -> Docket:
    url = _backend_url(args)
    tenant = getattr(args, "tenant", None)
    if args.app:
        app = load_app(args.app)
        if url is None or args.backend is None:
            return app
        return Docket(url, nodes=app.nodes, tenant_mode=app.tenant_mode, settings=app.settings)
    if url is None:
        raise _fail(f"no backend: pass --backend URL or set {ENV_BACKEND}")
    return Docket(url, tenant_mode="required" if tenant is not None else "none")


def _raw_backend(args: argparse.Namespace) -> Backend:
    url = _backend_url(args)
    if args.app and args.backend is None:
        return load_app(args.app).backend
    if url is None:
        raise _fail(f"no backend: pass --backend URL or set {ENV_BACKEND}")
    try:
        return from_url(url)
    except (UnknownBackend, ValueError, TypeError) as exc:
        raise _fail(str(exc)) from None


def _with_docket(args: argparse.Namespace, action: Callable[[Docket], Awaitable[_T]]) -> _T:
    docket = _docket(args)

    async def go() -> _T:
        async with docket:
            return await action(docket)

    return _run(go())


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    return asyncio.run(coro)


# -- output helpers -------------------------------------------------------------------------------


def _emit(value: JSONValue) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [headers, *rows]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _stamp(moment: datetime | None) -> str | None:
    return None if moment is None else format_timestamp(moment)


def _summary_json(summary: RunSummary) -> JSONValue:
    return {
        "id": summary.id,
        "tenant_id": summary.tenant_id,
        "graph_id": summary.graph_id,
        "graph_hash": summary.graph_hash,
        "status": str(summary.status),
        "step": summary.step,
        "checkpoint_seq": summary.checkpoint_seq,
        "started_at": _stamp(summary.started_at),
        "updated_at": _stamp(summary.updated_at),
        "finished_at": _stamp(summary.finished_at),
    }


def _info_json(info: RunInfo) -> JSONValue:
    return {
        "run": run_to_dict(info.run),
        "tenant_id": info.tenant_id,
        "wake_at": _stamp(info.wake_at),
        "claimed_at": _stamp(info.claimed_at),
        "claim_attempts": info.claim_attempts,
        "claim_abandons": info.claim_abandons,
        "poisoned_at": _stamp(info.poisoned_at),
        "poison_reason": info.poison_reason,
        "latest_checkpoint_type": str(info.latest_checkpoint_type),
    }


def _event_json(event: Event) -> JSONValue:
    return {
        "seq": event.seq,
        "type": str(event.type),
        "step": event.step,
        "timestamp": format_timestamp(event.timestamp),
        "node_id": event.node_id,
        "channel_id": event.channel_id,
        "task_id": event.task_id,
        "payload": event.payload,
    }


def _event_row(event: Event) -> list[str]:
    where = event.node_id or event.channel_id or ""
    detail = "" if not event.payload else json.dumps(event.payload, ensure_ascii=False)
    if len(detail) > 60:
        detail = detail[:59] + "…"
    return [str(event.seq), str(event.step), _when(event.timestamp), str(event.type), where, detail]


_EVENT_HEADERS = ("SEQ", "STEP", "TIME", "TYPE", "NODE/CHANNEL", "PAYLOAD")
_STREAM_WIDTHS = (5, 4, 20, 22, 16, 0)  # ``runs watch`` prints rows as they come


def _stream_line(cells: Sequence[str]) -> str:
    return "  ".join(
        cell.ljust(width) for cell, width in zip(cells, _STREAM_WIDTHS, strict=True)
    ).rstrip()


# -- docket runs ----------------------------------------------------------------------------------


def _add_run_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    runs = commands.add_parser("runs", help="list, inspect and steer runs")
    sub = runs.add_subparsers(dest="runs_command", required=True, metavar="COMMAND")

    listing = sub.add_parser("list", help="runs, newest first")
    _connection_options(listing)
    listing.add_argument("--status", action="append", default=None, help="filter (repeatable)")
    listing.add_argument("--graph", dest="graph_id", default=None, help="filter by graph id")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument(
        "--before", default=None, metavar="STARTED_AT,RUN_ID", help="page after this cursor"
    )
    listing.add_argument("--all-tenants", action="store_true", help="every tenant's runs")
    listing.set_defaults(run=_runs_list)

    show = sub.add_parser("show", help="one run: status, interrupts, output, claim state")
    _connection_options(show)
    show.add_argument("run_id")
    show.set_defaults(run=_runs_show)

    events = sub.add_parser("events", help="a run's event timeline")
    _connection_options(events)
    events.add_argument("run_id")
    events.add_argument("--after", type=int, default=0, metavar="SEQ")
    events.add_argument("--limit", type=int, default=1000)
    events.set_defaults(run=_runs_events)

    watch = sub.add_parser("watch", help="follow a run's events until it waits or ends")
    _connection_options(watch)
    watch.add_argument("run_id")
    watch.add_argument("--timeout", type=float, default=None, metavar="SECONDS")
    watch.add_argument("--interval", type=float, default=0.5, metavar="SECONDS")
    watch.set_defaults(run=_runs_watch)

    cancel = sub.add_parser("cancel", help="cancel a running or waiting run")
    _connection_options(cancel)
    cancel.add_argument("run_id")
    cancel.set_defaults(run=_runs_cancel)

    retry = sub.add_parser("retry", help="make a poisoned run due again")
    _connection_options(retry)
    retry.add_argument("run_id")
    retry.set_defaults(run=_runs_retry)

    resolve = sub.add_parser("resolve", help="answer an open interrupt")
    _connection_options(resolve)
    resolve.add_argument("run_id")
    resolve.add_argument("interrupt_id")
    resolve.add_argument(
        "value", help="the answer as JSON; text that is not JSON is taken as a string"
    )
    resolve.set_defaults(run=_runs_resolve)


def _cursor(text: str | None) -> RunCursor | None:
    if text is None:
        return None
    stamp, sep, run_id = text.partition(",")
    try:
        if not sep or not run_id:
            raise ValueError("missing run id")
        return RunCursor(parse_timestamp(stamp), run_id)
    except ValueError as exc:
        raise _fail(f"--before expects STARTED_AT,RUN_ID ({exc})") from None


def _runs_list(args: argparse.Namespace) -> int:
    before = _cursor(args.before)
    page = _with_docket(
        args,
        lambda d: d.list_runs(
            limit=args.limit,
            before=before,
            status=args.status,
            graph_id=args.graph_id,
            tenant_id=args.tenant,
            all_tenants=args.all_tenants,
        ),
    )
    cursor = page.next_before
    next_text = (
        f"{format_timestamp(cursor.started_at)},{cursor.run_id}"
        if cursor is not None and page.has_more
        else None
    )
    if args.json:
        _emit(
            {
                "runs": [_summary_json(s) for s in page.runs],
                "has_more": page.has_more,
                "next_before": next_text,
            }
        )
        return 0
    rows = [
        [
            s.id,
            s.tenant_id or "-",
            s.graph_id,
            str(s.status),
            str(s.step),
            str(s.checkpoint_seq),
            _when(s.started_at),
            _when(s.updated_at),
        ]
        for s in page.runs
    ]
    headers = ("RUN", "TENANT", "GRAPH", "STATUS", "STEP", "CKPT", "STARTED", "UPDATED")
    _table(headers, rows)
    if next_text is not None:
        print(f"(more: --before {next_text})")
    elif not rows:
        print("(no runs)")
    return 0


def _runs_show(args: argparse.Namespace) -> int:
    info = _with_docket(args, lambda d: d.inspect_run(args.run_id, tenant_id=args.tenant))
    if args.json:
        _emit(_info_json(info))
        return 0
    run = info.run
    lines = [
        ("run", run.id),
        ("tenant", info.tenant_id or "-"),
        ("graph", f"{run.graph_id} ({run.graph_hash[:12]})"),
        ("status", str(run.status)),
        ("step", str(run.step)),
        ("checkpoint", f"{run.checkpoint_seq} ({info.latest_checkpoint_type})"),
        ("events", str(run.event_seq)),
        ("started", _when(run.started_at)),
        ("updated", _when(run.updated_at)),
        ("finished", _when(run.finished_at)),
        ("wake at", _when(info.wake_at)),
        ("claimed at", _when(info.claimed_at)),
        ("claims", f"{info.claim_attempts} attempts, {info.claim_abandons} hand-backs"),
    ]
    if info.poisoned:
        lines.append(("POISONED", f"{_when(info.poisoned_at)} ({info.poison_reason})"))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print(f"{key:<{width}}  {value}")
    open_ones = [i for i in run.interrupts.values() if str(i.status) == "open"]
    for interrupt in open_ones:
        schema = json.dumps(interrupt.schema, ensure_ascii=False) if interrupt.schema else "-"
        print(
            f"interrupt {interrupt.id}: node {interrupt.node_id} waits for "
            f"{interrupt.resume_channel!r} (schema {schema})"
        )
    if run.output is not None:
        print(f"output  {json.dumps(run.output, ensure_ascii=False)}")
    if run.failure is not None:
        _print_failure(run.failure)
    return 0


#: Traceback lines ``runs show`` prints per failed node (``--json`` has the whole record).
SHOW_TRACEBACK_LINES = 10


def _print_failure(failure: RunFailure) -> None:
    """The failure's code and message, then per failed node its reason, the exception it
    raised (type, message, the traceback's last lines) and its ``Failure`` details."""
    print(f"failure  {failure.code}: {failure.message}")
    details = failure.details
    errors, raised, told = (details.get(k) for k in ("errors", "exceptions", "details"))
    errors = errors if isinstance(errors, dict) else {}
    raised = raised if isinstance(raised, dict) else {}
    told = told if isinstance(told, dict) else {}
    for node_id in sorted({*errors, *raised, *told}):
        print(f"  node {node_id}: {errors.get(node_id, '-')}")
        error = raised.get(node_id)
        if isinstance(error, dict):
            print(f"    raised {error.get('type')}: {error.get('message')}")
            lines = str(error.get("traceback") or "").rstrip("\n").split("\n")
            shown = lines[-SHOW_TRACEBACK_LINES:]
            cut = len(lines) - len(shown)
            print(f"    traceback{f' (last {len(shown)} of {len(lines)} lines)' if cut else ''}:")
            for line in shown:
                print(f"      {line}")
        if node_id in told:
            print(f"    details {json.dumps(told[node_id], ensure_ascii=False, sort_keys=True)}")


def _runs_events(args: argparse.Namespace) -> int:
    page = _with_docket(
        args,
        lambda d: d.list_events(
            args.run_id, after_seq=args.after, limit=args.limit, tenant_id=args.tenant
        ),
    )
    if args.json:
        _emit(
            {
                "events": [_event_json(e) for e in page.events],
                "next_after_seq": page.next_after_seq,
                "has_more": page.has_more,
                "latest_seq": page.latest_seq,
            }
        )
        return 0
    _table(_EVENT_HEADERS, [_event_row(e) for e in page.events])
    if page.has_more:
        print(f"(more: --after {page.next_after_seq})")
    return 0


def _runs_watch(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise _fail("--interval must be positive")

    async def watch(docket: Docket) -> int:
        deadline = None if args.timeout is None else time.monotonic() + args.timeout
        after = 0
        widths = False
        while True:
            info = await docket.inspect_run(args.run_id, tenant_id=args.tenant)
            page = await docket.list_events(
                args.run_id, after_seq=after, limit=1000, tenant_id=args.tenant
            )
            for event in page.events:
                if args.json:
                    print(json.dumps(_event_json(event), ensure_ascii=False), flush=True)
                else:
                    if not widths:
                        print(_stream_line(_EVENT_HEADERS))
                        widths = True
                    print(_stream_line(_event_row(event)), flush=True)
            after = page.next_after_seq
            status = info.run.status
            if page.has_more:
                continue
            if info.poisoned or status.terminal or str(status) == "waiting":
                state = "poisoned" if info.poisoned else str(status)
                if not args.json:
                    print(f"run {args.run_id} is {state}")
                return 0
            if deadline is not None and time.monotonic() >= deadline:
                if not args.json:
                    print(f"run {args.run_id} is still {status} (timeout)")
                return 1
            await asyncio.sleep(args.interval)

    return _with_docket(args, watch)


def _run_line(args: argparse.Namespace, verb: str, info: RunInfo) -> int:
    if args.json:
        _emit(_info_json(info))
    else:
        run = info.run
        print(f"run {run.id} {verb}: {run.status} (checkpoint {run.checkpoint_seq})")
    return 0


def _runs_cancel(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> RunInfo:
        await d.cancel_run(args.run_id, tenant_id=args.tenant)
        return await d.inspect_run(args.run_id, tenant_id=args.tenant)

    return _run_line(args, "cancelled", _with_docket(args, go))


def _runs_retry(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> RunInfo:
        await d.retry_poisoned_run(args.run_id, tenant_id=args.tenant)
        return await d.inspect_run(args.run_id, tenant_id=args.tenant)

    return _run_line(args, "retried", _with_docket(args, go))


def _runs_resolve(args: argparse.Namespace) -> int:
    try:
        value: object = json.loads(args.value)
    except ValueError:
        value = args.value

    async def go(d: Docket) -> RunInfo:
        await d.resolve_interrupt(args.run_id, args.interrupt_id, value, tenant_id=args.tenant)
        return await d.inspect_run(args.run_id, tenant_id=args.tenant)

    return _run_line(args, "resolved", _with_docket(args, go))


# -- docket worker --------------------------------------------------------------------------------


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
    worker.set_defaults(run=_worker)


def _worker(args: argparse.Namespace) -> int:
    if args.processes < 1:
        raise _fail("--processes must be at least 1")
    if args.concurrency is not None and args.concurrency < 1:
        raise _fail("--concurrency must be at least 1")
    if args.ui_port is not None and not 0 < args.ui_port < 65536:
        raise _fail("--ui-port must be 1..65535")
    if args.processes > 1:
        if args.ui_port is not None:
            raise _fail("--ui-port serves from one process: use --processes 1 or docket ui")
        return _supervise(args)
    early: list[int] = []  # a stop signal that arrives while the app is still loading

    def remember(signum: int, _frame: object) -> None:
        early.append(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, remember)
    docket = load_app(args.app)
    return _run(_serve(docket, args.concurrency, early, args.ui_port))


async def _serve(
    docket: Docket, concurrency: int | None, early: list[int], ui_port: int | None = None
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
            f"poll {settings.poll_interval} s",
            file=sys.stderr,
            flush=True,
        )
        if ui_port is None:
            stats = await docket.run_worker(concurrency=concurrency, stop=stop)
        else:
            from docket.ui.serve import DEFAULT_HOST, serving_alongside

            token = os.environ.get(ENV_UI_TOKEN) or None
            async with serving_alongside(
                docket, host=DEFAULT_HOST, port=ui_port, token=token
            ) as console:
                print(f"docket console: {console}", file=sys.stderr, flush=True)
                stats = await docket.run_worker(concurrency=concurrency, stop=stop)
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
            await asyncio.wait_for(stop.wait(), delay)
        delay = min(delay * 2, 5.0)
    return False


def _supervise(args: argparse.Namespace) -> int:
    """Start ``--processes`` single-process workers and forward SIGINT/SIGTERM to them."""
    command = [sys.executable, "-m", "docket.cli", "worker", "--app", args.app]
    if args.concurrency is not None:
        command += ["--concurrency", str(args.concurrency)]
    children = [subprocess.Popen(command) for _ in range(args.processes)]
    forwarded: set[int] = set()

    def forward(signum: int, _frame: object) -> None:
        forwarded.add(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        codes = [child.wait() for child in children]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    # a child the forwarded signal stopped before it could install its handler: clean too
    return max((0 if -code in forwarded else code for code in codes), key=abs)


# -- docket migrate / backup / backends -----------------------------------------------------------


def _add_admin_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate = commands.add_parser("migrate", help="upgrade the store's schema to this release")
    _connection_options(migrate, tenant=False)
    migrate.add_argument("--sql", action="store_true", help="print the schema's DDL instead")
    migrate.set_defaults(run=_migrate)

    backup = commands.add_parser("backup", help="copy a consistent snapshot (SQLite)")
    _connection_options(backup, tenant=False)
    backup.add_argument("destination", type=Path, metavar="DEST")
    backup.set_defaults(run=_backup)

    backends = commands.add_parser("backends", help="installed backends and capabilities")
    backends.add_argument("--backend", metavar="URL", default=None, help="also negotiate this")
    backends.add_argument("--json", action="store_true")
    backends.set_defaults(run=_backends, app=None)


def _migrate(args: argparse.Namespace) -> int:
    backend = _raw_backend(args)
    schema_versions = getattr(backend, "schema_versions", None)
    migrate = getattr(backend, "migrate", None)
    schema_sql = getattr(backend, "schema_sql", None)
    if not (callable(schema_versions) and callable(migrate) and callable(schema_sql)):
        raise _fail(f"{backend!r} has no versioned schema to migrate", code=1)
    if args.sql:
        sys.stdout.write(str(schema_sql()))
        return 0

    async def go() -> tuple[object, object]:
        try:
            result = await migrate()
        finally:
            await backend.close()
        assert isinstance(result, tuple) and len(result) == 2
        return result[0], result[1]

    try:
        found, current = _run(go())
    except (ValueError, OSError) as exc:
        raise _fail(str(exc), code=1) from None
    except Exception as exc:  # the store's own errors (schema too new, unreadable file)
        raise _fail(f"migration failed: {exc}", code=1) from None
    if args.json:
        _emit({"from_version": _json_int(found), "to_version": _json_int(current)})
    elif found == current:
        print(f"{backend!r}: schema is current (version {current})")
    else:
        print(f"{backend!r}: migrated schema from version {found or 'none'} to {current}")
    return 0


def _json_int(value: object) -> JSONValue:
    return value if isinstance(value, int) else None


def _backup(args: argparse.Namespace) -> int:
    backend = _raw_backend(args)
    copy = getattr(backend, "backup", None)
    if not callable(copy):
        raise _fail(f"{backend!r} cannot make backups; use the database's own tools", code=1)

    async def go() -> None:
        try:
            await backend.open()
            await copy(args.destination)
        finally:
            await backend.close()

    try:
        _run(go())
    except (ValueError, OSError) as exc:
        raise _fail(str(exc), code=1) from None
    except Exception as exc:
        raise _fail(f"backup failed: {exc}", code=1) from None
    destination = str(args.destination.resolve())
    if args.json:
        _emit({"backup": destination})
    else:
        print(f"backed up {backend!r} to {destination}")
    return 0


def _backends(args: argparse.Namespace) -> int:
    factories = available()
    report: dict[str, JSONValue] = {
        "installed": [
            {"name": f.name, "schemes": list(f.schemes), "description": f.description}
            for f in sorted(factories.values(), key=lambda f: f.name)
        ]
    }
    url = _backend_url(args)
    if url is not None:
        try:
            backend = from_url(url)
            caps = negotiate(backend)
        except (UnknownBackend, ValueError, TypeError, BackendContractError) as exc:
            raise _fail(f"{url}: {exc}", code=1) from None
        limits = caps.limits
        report["backend"] = {
            "url": url,
            "name": caps.name,
            "contract_version": caps.contract_version,
            "transitions_version": caps.transitions_version,
            "features": list[JSONValue](sorted(caps.features)),
            "limits": {
                "max_events_per_transition": limits.max_events_per_transition,
                "max_event_bytes": limits.max_event_bytes,
                "max_run_bytes": limits.max_run_bytes,
                "max_graph_bytes": limits.max_graph_bytes,
                "max_id_bytes": limits.max_id_bytes,
            },
            "migratable": callable(getattr(backend, "migrate", None)),
            "backup": callable(getattr(backend, "backup", None)),
        }
    if args.json:
        _emit(report)
        return 0
    rows = [
        [f.name, ", ".join(s + "://" for s in f.schemes), f.description]
        for f in sorted(factories.values(), key=lambda f: f.name)
    ]
    _table(("BACKEND", "SCHEMES", "DESCRIPTION"), rows)
    chosen = report.get("backend")
    if isinstance(chosen, dict):
        print()
        for key in ("url", "name", "contract_version", "transitions_version"):
            print(f"{key:<26} {chosen[key]}")
        features = chosen["features"]
        assert isinstance(features, list)
        print(f"{'features':<26} {', '.join(str(f) for f in features) or '-'}")
        chosen_limits = chosen["limits"]
        assert isinstance(chosen_limits, dict)
        for key, value in chosen_limits.items():
            print(f"{key:<26} {value}")
        print(f"{'migrate / backup':<26} {chosen['migratable']} / {chosen['backup']}")
    return 0


# -- docket graph ---------------------------------------------------------------------------------


def _add_graph_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    graph = commands.add_parser("graph", help="check, hash, render and publish graph documents")
    sub = graph.add_subparsers(dest="graph_command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="compile a graph document and print its diagnostics")
    _compile_options(check)
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.set_defaults(run=_check)

    hash_ = sub.add_parser("hash", help="print the content hash of a valid graph document")
    _compile_options(hash_)
    hash_.set_defaults(run=_hash)

    render = sub.add_parser("render", help="draw a graph document as Mermaid or Graphviz DOT")
    render.add_argument("file", type=Path, metavar="FILE.json")
    render.add_argument("--format", choices=("mermaid", "dot"), default="mermaid")
    render.set_defaults(run=_render)

    publish = sub.add_parser("publish", help="compile a graph document and store it")
    publish.add_argument("file", type=Path, metavar="FILE.json")
    publish.add_argument("--allow-unknown-nodes", action="store_true", help=_UNKNOWN_NODES_HELP)
    _connection_options(publish)
    publish.set_defaults(run=_publish)


def _compile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE.json")
    parser.add_argument("--allow-unknown-nodes", action="store_true", help=_UNKNOWN_NODES_HELP)
    parser.add_argument(
        "--max-supersteps",
        type=int,
        default=None,
        metavar="N",
        help="host ceiling on supersteps, as a worker would apply it",
    )


def _load(path: Path) -> Graph:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"docket: cannot read {path}: {exc}", file=sys.stderr)
        raise _Failed(2) from None
    try:
        return from_json(text)
    except GraphLoadError as exc:
        _print_to_stderr(path, exc.diagnostics)
        raise _Failed(1) from None


def _placeholder(state: NodeState, ctx: NodeContext) -> NodeReturn:
    raise RuntimeError(f"node {ctx.node_id!r} is a CLI placeholder and cannot run")


def _placeholders(graph: Graph, base: NodeRegistry | None = None) -> NodeRegistry:
    registry = NodeRegistry()
    if base is not None:
        for name in base:
            definition = base.get(name)
            assert definition is not None
            registry.register(definition)
    for name in sorted({n.implementation for n in graph.nodes.values() if n.implementation}):
        if name not in registry:
            registry.register(NodeDefinition(name, _placeholder))
    return registry


def _compile(args: argparse.Namespace) -> tuple[Graph, CompileResult]:
    graph = _load(args.file)
    registry = _placeholders(graph) if args.allow_unknown_nodes else NodeRegistry()
    limit = args.max_supersteps
    if limit is not None and limit < 1:
        print("docket: --max-supersteps must be a positive integer", file=sys.stderr)
        raise _Failed(2)
    return graph, compile_graph(graph, registry, max_supersteps=limit)


def _check(args: argparse.Namespace) -> int:
    _, result = _compile(args)
    if args.json:
        report = {
            "ok": result.ok,
            "graph_hash": result.graph_hash,
            "diagnostics": [d.to_dict() for d in result.diagnostics],
        }
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        for diagnostic in result.diagnostics:
            print(f"{args.file}: {diagnostic}")
        errors, warnings = len(result.errors), len(result.warnings)
        verdict = "ok" if result.ok else "invalid"
        print(f"{args.file}: {verdict}, {_count(errors, 'error')}, {_count(warnings, 'warning')}")
    return 0 if result.ok else 1


def _hash(args: argparse.Namespace) -> int:
    _, result = _compile(args)
    if not result.ok:
        _print_to_stderr(args.file, result.errors)
        return 1
    print(result.graph_hash)
    return 0


def _render(args: argparse.Namespace) -> int:
    graph = _load(args.file)
    sys.stdout.write(to_mermaid(graph) if args.format == "mermaid" else to_dot(graph))
    return 0


def _publish(args: argparse.Namespace) -> int:
    graph = _load(args.file)
    base = _docket(args)
    docket = base
    if args.allow_unknown_nodes:
        docket = Docket(
            base.backend,
            nodes=_placeholders(graph, base.nodes),
            tenant_mode=base.tenant_mode,
            settings=base.settings,
        )

    async def go() -> GraphRef:
        try:
            async with docket:
                return await docket.save_graph(graph, tenant_id=args.tenant)
        finally:
            if docket is not base:  # the borrowed backend is still the first Docket's
                await base.backend.close()

    ref = _run(go())
    if args.json:
        _emit({"graph_id": ref.graph_id, "graph_hash": ref.graph_hash})
    else:
        print(f"published {ref.graph_id} {ref.graph_hash}")
    return 0


def _print_to_stderr(path: Path, diagnostics: Sequence[Diagnostic]) -> None:
    for diagnostic in diagnostics:
        print(f"{path}: {diagnostic}", file=sys.stderr)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


# -- docket ui --------------------------------------------------------------------------------


def _add_ui_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ui = commands.add_parser("ui", help="serve the web console")
    _connection_options(ui, tenant=False)
    ui.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ui.add_argument("--port", type=int, default=8787, help="port (default 8787)")
    ui.add_argument(
        "--token",
        default=None,
        help=f"access token every page needs (default: ${ENV_UI_TOKEN}; none: open console)",
    )
    ui.add_argument(
        "--worker",
        action="store_true",
        help="also run a worker in this process (needs --app for the node implementations)",
    )
    ui.set_defaults(run=_ui)


def _ui(args: argparse.Namespace) -> int:
    try:
        from docket.ui.serve import serve
    except ImportError as exc:
        raise _fail(f"the console needs the ui extra (pip install 'docket[ui]'): {exc}") from None
    if not 0 < args.port < 65536:
        raise _fail("--port must be 1..65535")
    if args.worker and not args.app:
        raise _fail("--worker needs --app (a worker runs the application's nodes)")
    token = args.token or os.environ.get(ENV_UI_TOKEN) or None
    docket = _docket(args)
    if args.host not in ("127.0.0.1", "localhost", "::1") and token is None:
        print(
            f"docket ui: warning: listening on {args.host} without an access token",
            file=sys.stderr,
        )
    print(f"docket console on http://{args.host}:{args.port}/", file=sys.stderr, flush=True)
    serve(docket, host=args.host, port=args.port, token=token, run_worker=args.worker)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
