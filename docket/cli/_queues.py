"""``docket queues``: list named queues and change their limits (docs/operations.md#queues).

::

    docket queues list                      name, limit, rate, paused, running, depth
    docket queues set-limit NAME N|none     runs of NAME holding a claim at once
    docket queues set-rate NAME COUNT/PERIOD|none    e.g. 20/1s, 100/m, 5/500ms
    docket queues pause NAME | resume NAME  stop / restart handing out claims
    docket queues set-admission NAME N|none [--per-tenant N|none]
                                            unfinished runs of NAME at once (and per tenant)
    docket queues held NAME [--limit N]     NAME's admitted and held starts

``list`` adds ADMISSION, PER-TENANT, ADMITTED and HELD columns when some queue has an
admission limit (or still counts starts admitted or held under one), and its ``--json``
rows carry the admission keys only for such queues, so a store without admission limits
lists as it always did. ``set-admission NAME N`` keeps the per-tenant limit stored unless
``--per-tenant`` is given; like ``set-limit`` it creates a queue that does not exist.
``held`` refuses an unknown queue (exit 1, not found) and a backend without admission
(exit 1, unsupported); it lists the admitted starts (by admission order) and then the held
ones (in the order they will be admitted), each with its tenant, priority and since when.

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
    admission_shown,
    format_limit,
    format_rate,
    held_start_json,
    parse_limit,
    parse_rate,
    queue_status_json,
)
from docket.cli._common import _connection_options, _fail, _with_docket
from docket.cli._output import _emit, _table, _when
from docket.facade import Docket
from docket.records import AdmissionView, QueueConfig, QueueStatus, RateLimit

__all__ = ["add_queue_commands"]

_HEADERS = ("NAME", "LIMIT", "RATE", "PAUSED", "RUNNING", "DEPTH")
_ADMISSION_HEADERS = ("ADMISSION", "PER-TENANT", "ADMITTED", "HELD")
_HELD_HEADERS = ("STATE", "RUN", "TENANT", "PRIORITY", "SINCE")


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

    admission = sub.add_parser(
        "set-admission", help="at most N runs of the queue unfinished at once (and per tenant)"
    )
    _connection_options(admission, tenant=False)
    admission.add_argument("name")
    admission.add_argument("limit", metavar="N|none")
    admission.add_argument(
        "--per-tenant",
        metavar="N|none",
        default=None,
        help="at most N unfinished runs of one tenant (default: keep what is stored)",
    )
    admission.set_defaults(run=_set_admission)

    held = sub.add_parser("held", help="the queue's admitted and held starts")
    _connection_options(held, tenant=False)
    held.add_argument("name")
    held.add_argument("--limit", type=int, default=1000, help="at most N of each (default 1000)")
    held.set_defaults(run=_held)


def _print(args: argparse.Namespace, statuses: Sequence[QueueStatus]) -> None:
    if args.json:
        _emit([queue_status_json(s) for s in statuses])
        return
    _table(*_rows(statuses))


def _rows(statuses: Sequence[QueueStatus]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The table: the admission columns only when some queue has admission figures."""
    if not any(admission_shown(s) for s in statuses):
        return _HEADERS, [_row(s) for s in statuses]
    return _HEADERS + _ADMISSION_HEADERS, [_row(s) + _admission_row(s) for s in statuses]


def _admission_row(status: QueueStatus) -> tuple[str, ...]:
    config = status.config
    return (
        format_limit(config.admission_limit),
        format_limit(config.tenant_admission_limit),
        str(status.admitted),
        str(status.held),
    )


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
        _table(*_rows([status]))
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


def _set_admission(args: argparse.Namespace) -> int:
    try:
        limit = parse_limit(args.limit, "admission limit")
        per_tenant = (
            None if args.per_tenant is None else parse_limit(args.per_tenant, "per-tenant limit")
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None

    async def go(d: Docket) -> tuple[QueueConfig, Sequence[QueueStatus]]:
        if args.per_tenant is None:  # keep the stored per-tenant limit
            config = await d.configure_queue(args.name, admission_limit=limit)
        else:
            config = await d.configure_queue(
                args.name, admission_limit=limit, tenant_admission_limit=per_tenant
            )
        return config, await d.queues()

    return _changed(args, *_with_docket(args, go, must_exist=True))


def _held(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise _fail(f"--limit: expected a positive integer, got {args.limit}")

    async def go(d: Docket) -> AdmissionView:
        await d.queue(args.name)  # an unknown queue is NotFound, not an empty list
        return await d.admissions(args.name, limit=args.limit)

    view = _with_docket(args, go, must_exist=True)
    starts = [("admitted", s) for s in view.admitted] + [("held", s) for s in view.held]
    if args.json:
        _emit([held_start_json(start, state) for state, start in starts])
        return 0
    _table(
        _HELD_HEADERS,
        [(state, s.run_id, s.tenant or "-", str(s.priority), _when(s.at)) for state, s in starts],
    )
    return 0
