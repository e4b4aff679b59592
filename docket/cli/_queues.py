"""``docket queues``: list named queues and change their limits (docs/operations.md#queues).

::

    docket queues list                      name, limit, rate, paused, running, depth
    docket queues set-limit NAME N|none     runs of NAME holding a claim at once
    docket queues set-rate NAME COUNT/PERIOD|none    e.g. 20/1s, 100/m, 5/500ms
    docket queues pause NAME | resume NAME  stop / restart handing out claims

``set-limit`` and ``set-rate`` create a queue that does not exist yet (``set-limit NAME
none`` creates an unlimited one); ``pause`` and ``resume`` refuse an unknown queue (exit
1, not found). Queues are namespace-wide, so there is no ``--tenant``. Text that is not a
number or a rate is a usage error (exit 2); a value the facade refuses (a limit of 0) is
a refused request (exit 1, with its reasons). Either way nothing is written. Every
change goes through :meth:`Docket.configure_queue` and takes effect on every worker's
next claim.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from docket._queue_text import (
    format_limit,
    format_rate,
    parse_limit,
    parse_rate,
    queue_status_json,
)
from docket.cli._common import _connection_options, _fail, _with_docket
from docket.cli._output import _emit, _table
from docket.facade import Docket
from docket.records import QueueConfig, QueueStatus, RateLimit

__all__ = ["add_queue_commands"]

_HEADERS = ("NAME", "LIMIT", "RATE", "PAUSED", "RUNNING", "DEPTH")


def add_queue_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    queues = commands.add_parser("queues", help="named queues: limits, rates, pause")
    sub = queues.add_subparsers(dest="queues_command", required=True, metavar="COMMAND")

    listing = sub.add_parser("list", help="every queue with its limits, running and depth")
    _connection_options(listing, tenant=False)
    listing.set_defaults(run=_list)

    limit = sub.add_parser("set-limit", help="at most N runs of the queue claimed at once")
    _connection_options(limit, tenant=False)
    limit.add_argument("name")
    limit.add_argument("limit", metavar="N|none")
    limit.set_defaults(run=_set_limit)

    rate = sub.add_parser("set-rate", help="at most COUNT claims per PERIOD (e.g. 20/1s)")
    _connection_options(rate, tenant=False)
    rate.add_argument("name")
    rate.add_argument("rate", metavar="COUNT/PERIOD|none")
    rate.set_defaults(run=_set_rate)

    for name, helptext, action in (
        ("pause", "hand out no new claims in the queue", _pause),
        ("resume", "hand out claims again", _resume),
    ):
        parser = sub.add_parser(name, help=helptext)
        _connection_options(parser, tenant=False)
        parser.add_argument("name")
        parser.set_defaults(run=action)


def _print(args: argparse.Namespace, statuses: Sequence[QueueStatus]) -> None:
    if args.json:
        _emit([queue_status_json(s) for s in statuses])
        return
    _table(_HEADERS, [_row(s) for s in statuses])


def _row(status: QueueStatus) -> tuple[str, ...]:
    config = status.config
    return (
        config.name,
        format_limit(config.execution_limit),
        format_rate(config.rate),
        "yes" if config.paused else "no",
        # an unlimited queue's claims take no slots, so the ledger cannot count them
        str(status.running) if config.limited else "-",
        str(status.depth),
    )


def _list(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> Sequence[QueueStatus]:
        return await d.queues()

    _print(args, _with_docket(args, go, must_exist=True))
    return 0


def _changed(args: argparse.Namespace, config: QueueConfig, statuses: Sequence[QueueStatus]) -> int:
    """Print the queue as it is now (its row of ``list``)."""
    found = [s for s in statuses if s.config.name == config.name]
    status = found[0] if found else QueueStatus(config=config, running=0, depth=0)
    if args.json:
        _emit(queue_status_json(status))
    else:
        _table(_HEADERS, [_row(status)])
    return 0


def _set_limit(args: argparse.Namespace) -> int:
    try:
        limit = parse_limit(args.limit)
    except ValueError as exc:
        raise _fail(str(exc)) from None

    async def go(d: Docket) -> tuple[QueueConfig, Sequence[QueueStatus]]:
        config = await d.configure_queue(args.name, execution_limit=limit)
        return config, await d.queues()

    return _changed(args, *_with_docket(args, go, must_exist=True))


def _set_rate(args: argparse.Namespace) -> int:
    try:
        rate: RateLimit | None = parse_rate(args.rate)
    except ValueError as exc:
        raise _fail(str(exc)) from None

    async def go(d: Docket) -> tuple[QueueConfig, Sequence[QueueStatus]]:
        config = await d.configure_queue(args.name, rate=rate)
        return config, await d.queues()

    return _changed(args, *_with_docket(args, go, must_exist=True))


def _pause(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> tuple[QueueConfig, Sequence[QueueStatus]]:
        config = await d.pause_queue(args.name)
        return config, await d.queues()

    return _changed(args, *_with_docket(args, go, must_exist=True))


def _resume(args: argparse.Namespace) -> int:
    async def go(d: Docket) -> tuple[QueueConfig, Sequence[QueueStatus]]:
        config = await d.resume_queue(args.name)
        return config, await d.queues()

    return _changed(args, *_with_docket(args, go, must_exist=True))
