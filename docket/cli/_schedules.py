"""``docket schedules``: create, list, show, pause, resume, delete and trigger cron schedules."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta

from docket.cli._common import _connection_options, _fail, _with_docket
from docket.cli._output import _emit, _table, _when
from docket.facade import Docket
from docket.records import CronSchedule, GraphRef, Overlap, Run, schedule_to_dict

_HEADERS = ("ID", "GRAPH", "CRON", "TIMEZONE", "NEXT TICK", "PAUSED", "OVERLAP", "LAST RUN")


def _add_schedule_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    schedules = commands.add_parser("schedules", help="cron schedules that start runs")
    sub = schedules.add_subparsers(dest="schedules_command", required=True, metavar="COMMAND")

    create = sub.add_parser("create", help="store a schedule")
    _connection_options(create)
    create.add_argument("schedule_id")
    create.add_argument("graph_id", help="graph id (its newest version at each tick)")
    create.add_argument("--cron", required=True, help="cron expression (5 or 6 fields)")
    create.add_argument("--timezone", default="UTC", help="IANA time zone (default UTC)")
    create.add_argument("--input", default=None, metavar="JSON", help="the runs' input")
    create.add_argument("--hash", default=None, help="pin this graph version")
    create.add_argument(
        "--overlap", default="skip", choices=[o.value for o in Overlap], help="default skip"
    )
    create.add_argument(
        "--catchup", type=float, default=0.0, metavar="SECONDS", help="missed-tick window"
    )
    create.add_argument("--paused", action="store_true", help="create it paused")
    create.set_defaults(run=_create)

    listing = sub.add_parser("list", help="schedules, by id")
    _connection_options(listing)
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--all-tenants", action="store_true", help="every tenant's schedules")
    listing.set_defaults(run=_list)

    for name, helptext, action in (
        ("show", "one schedule", _show),
        ("pause", "stop starting runs", _pause),
        ("resume", "start ticking again from now (no catch-up of the pause)", _resume),
        ("delete", "delete a schedule (its runs stay)", _delete),
        ("trigger", "start a run now, outside the cron", _trigger),
    ):
        parser = sub.add_parser(name, help=helptext)
        _connection_options(parser)
        parser.add_argument("schedule_id")
        parser.set_defaults(run=action)


def _print(args: argparse.Namespace, schedules: list[CronSchedule]) -> None:
    if args.json:
        _emit([schedule_to_dict(s) for s in schedules])
        return
    _table(
        _HEADERS,
        [
            (
                s.id,
                s.graph_id if s.graph_hash is None else f"{s.graph_id}@{s.graph_hash[:12]}",
                s.cron,
                s.timezone,
                _when(s.next_tick_at),
                "yes" if s.paused else "no",
                s.overlap.value,
                s.last_run_id or "-",
            )
            for s in schedules
        ],
    )


def _one(args: argparse.Namespace, schedule: CronSchedule) -> int:
    if args.json:
        _emit(schedule_to_dict(schedule))
    else:
        _print(args, [schedule])
    return 0


def _create(args: argparse.Namespace) -> int:
    run_input: dict[str, object] | None = None
    if args.input is not None:
        try:
            parsed: object = json.loads(args.input)
        except ValueError as exc:
            raise _fail(f"--input is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise _fail(f"--input must be a JSON object, got {type(parsed).__name__}")
        run_input = parsed
    if args.catchup < 0:
        raise _fail("--catchup must be >= 0 seconds")

    async def go(d: Docket) -> CronSchedule:
        graph: GraphRef | str = args.graph_id
        if args.hash:
            graph = GraphRef(args.graph_id, args.hash)
        return await d.create_schedule(
            args.schedule_id,
            graph,
            cron=args.cron,
            input=run_input,
            timezone=args.timezone,
            overlap=args.overlap,
            catchup=timedelta(seconds=args.catchup),
            paused=args.paused,
            tenant_id=args.tenant,
        )

    return _one(args, _with_docket(args, go, must_exist=True))


def _list(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> list[CronSchedule]:
        page = await d.list_schedules(
            limit=args.limit, tenant_id=args.tenant, all_tenants=args.all_tenants
        )
        return list(page.schedules)

    _print(args, _with_docket(args, go, must_exist=True))
    return 0


def _show(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> CronSchedule:
        return await d.get_schedule(args.schedule_id, tenant_id=args.tenant)

    return _one(args, _with_docket(args, go, must_exist=True))


def _pause(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> CronSchedule:
        return await d.pause_schedule(args.schedule_id, tenant_id=args.tenant)

    return _one(args, _with_docket(args, go, must_exist=True))


def _resume(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> CronSchedule:
        return await d.resume_schedule(args.schedule_id, tenant_id=args.tenant)

    return _one(args, _with_docket(args, go, must_exist=True))


def _delete(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> bool:
        return await d.delete_schedule(args.schedule_id, tenant_id=args.tenant)

    if not _with_docket(args, go, must_exist=True):
        raise _fail(f"no such schedule {args.schedule_id!r}", code=1)
    if args.json:
        _emit({"deleted": args.schedule_id})
    else:
        print(f"deleted {args.schedule_id}")
    return 0


def _trigger(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> Run:
        return await d.trigger_schedule(args.schedule_id, tenant_id=args.tenant)

    run = _with_docket(args, go, must_exist=True)
    if args.json:
        _emit({"run_id": run.id, "status": str(run.status)})
    else:
        print(f"started {run.id} ({run.status})")
    return 0
