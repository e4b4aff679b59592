"""``docket runs``: list, inspect and steer runs."""

from __future__ import annotations

import argparse
import json
from typing import Any

from docket.cli._children import family_json, parent_line, print_children
from docket.cli._common import (
    _connection_options,
    _fail,
    _with_docket,
)
from docket.cli._maps import _maps_json, _print_maps
from docket.cli._messages import add_send, add_time_options, print_waits, time_options
from docket.cli._output import (
    _EVENT_HEADERS,
    _emit,
    _event_json,
    _event_row,
    _info_json,
    _summary_json,
    _table,
    _when,
    one_line,
)
from docket.cli._watch import add_watch_options, runs_watch
from docket.core.family import ChildInfo
from docket.facade import Docket
from docket.mapitems import MapProgress, read_map_progress
from docket.records import (
    InterruptState,
    RunCursor,
    RunFailure,
    RunInfo,
    format_timestamp,
    parse_timestamp,
)


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
    add_watch_options(watch)  # docket/cli/_watch.py: the watch follows Docket.stream
    watch.set_defaults(run=runs_watch)

    cancel = sub.add_parser("cancel", help="cancel a running or waiting run")
    _connection_options(cancel)
    cancel.add_argument("run_id")
    cancel.set_defaults(run=_runs_cancel)

    retry = sub.add_parser(
        "retry",
        help="resume a failed run from its last checkpoint, or make a poisoned run due again",
    )
    _connection_options(retry)
    retry.add_argument("run_id")
    retry.add_argument("--reason", help="why (recorded in the run_retried event of a failed run)")
    retry.set_defaults(run=_runs_retry)

    resolve = sub.add_parser("resolve", help="answer an open interrupt")
    _connection_options(resolve)
    resolve.add_argument("run_id")
    resolve.add_argument("interrupt_id")
    resolve.add_argument(
        "value", help="the answer as JSON; text that is not JSON is taken as a string"
    )
    resolve.set_defaults(run=_runs_resolve)

    start = sub.add_parser("start", help="start a run of a published graph's latest version")
    _connection_options(start)
    start.add_argument("graph_id", metavar="GRAPH")
    start.add_argument("--input", default=None, metavar="JSON", help="the run input, an object")
    start.add_argument("--run-id", default=None, metavar="ID", help="default: a generated id")
    start.add_argument(
        "--idempotency-key",
        default=None,
        metavar="KEY",
        help="name the run after KEY; a key used before returns its run (not with --run-id)",
    )
    start.add_argument("--queue", default=None, help="the named queue the run waits in")
    start.add_argument(
        "--priority", type=int, default=None, help="its priority there (-100..100, higher first)"
    )
    add_time_options(start)
    start.set_defaults(run=_runs_start)
    add_send(sub, _connection_options)


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
        must_exist=True,
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
    async def read(
        d: Docket,
    ) -> tuple[RunInfo, tuple[MapProgress, ...], tuple[ChildInfo, ...]]:
        info = await d.inspect_run(args.run_id, tenant_id=args.tenant)
        maps = await read_map_progress(d, info.run, tenant_id=args.tenant)
        return info, maps, await d.children(args.run_id, tenant_id=args.tenant)

    info, maps, children = _with_docket(args, read, must_exist=True)
    if args.json:
        shown = _info_json(info)
        if isinstance(shown, dict):
            if maps:  # only graphs with maps: others keep their shape
                shown["maps"] = _maps_json(maps)
            shown.update(family_json(info.run, children))
        _emit(shown)
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
    link = parent_line(run)
    if link is not None:
        lines.insert(1, link)
    if info.poisoned:
        lines.append(("POISONED", f"{_when(info.poisoned_at)} ({info.poison_reason})"))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        print(f"{key:<{width}}  {value}")
    open_ones = [i for i in run.interrupts.values() if str(i.status) == "open"]
    for interrupt in open_ones:
        _print_open_interrupt(interrupt)
    print_waits(run)
    if run.output is not None:
        print(f"output  {json.dumps(run.output, ensure_ascii=False)}")
    if run.failure is not None:
        _print_failure(run.failure)
    _print_maps(maps)
    print_children(args, children)
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
        must_exist=True,
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

    return _run_line(args, "cancelled", _with_docket(args, go, must_exist=True))


def _runs_retry(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> RunInfo:
        await d.retry_run(args.run_id, reason=args.reason, tenant_id=args.tenant)
        return await d.inspect_run(args.run_id, tenant_id=args.tenant)

    return _run_line(args, "retried", _with_docket(args, go, must_exist=True))


def _runs_resolve(args: argparse.Namespace) -> int:
    try:
        value: object = json.loads(args.value)
    except ValueError:
        value = args.value

    async def go(d: Docket) -> RunInfo:
        await d.resolve_interrupt(args.run_id, args.interrupt_id, value, tenant_id=args.tenant)
        return await d.inspect_run(args.run_id, tenant_id=args.tenant)

    return _run_line(args, "resolved", _with_docket(args, go, must_exist=True))


def _print_open_interrupt(interrupt: InterruptState) -> None:
    """What an operator needs to answer it: the question (``metadata["question"]``, as the
    console shows it) and the schema the answer must match."""
    print(
        f"interrupt {interrupt.id}: node {interrupt.node_id} waits for {interrupt.resume_channel!r}"
    )
    question = interrupt.metadata.get("question")
    if isinstance(question, str):
        print(f"  question  {one_line(question)}")
    schema = json.dumps(interrupt.schema, ensure_ascii=False) if interrupt.schema else "-"
    print(f"  schema    {schema}")


def _runs_start(args: argparse.Namespace) -> int:
    run_input: dict[str, object] | None = None
    if args.input is not None:
        try:
            parsed: object = json.loads(args.input)
        except ValueError as exc:
            raise _fail(f"--input is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise _fail(f"--input must be a JSON object, got {type(parsed).__name__}")
        run_input = parsed
    timing: dict[str, Any] = time_options(args)

    async def go(d: Docket) -> RunInfo:
        run = await d.start_run(
            args.graph_id,
            run_input,
            run_id=args.run_id,
            tenant_id=args.tenant,
            idempotency_key=args.idempotency_key,
            queue=args.queue,
            priority=args.priority,
            **timing,
        )
        return await d.inspect_run(run.id, tenant_id=args.tenant)

    return _run_line(args, "started", _with_docket(args, go, must_exist=True))
