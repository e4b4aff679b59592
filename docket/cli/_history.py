"""``docket runs history|show-at|fork|edit`` (state history) and ``docket prune``
(retention). See docs/history.md."""

from __future__ import annotations

import argparse
import json

from docket.cli._common import _connection_options, _fail, _with_docket
from docket.cli._messages import parse_duration
from docket.cli._output import _emit, _info_json, _stamp, _table, _when
from docket.contract.retention import PruneResult
from docket.facade import Docket
from docket.records import CheckpointInfo, HistoryPage, RunInfo, RunSnapshot
from docket.values import JSONValue

__all__ = ["add_history_commands"]


def add_history_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the history commands under ``docket runs`` (made by ``_add_run_commands``)
    and ``docket prune``."""
    sub = _runs_subcommands(commands)

    history = sub.add_parser("history", help="a run's checkpoints (state history)")
    _connection_options(history)
    history.add_argument("run_id")
    history.add_argument("--after", type=int, default=0, metavar="SEQ")
    history.add_argument("--limit", type=int, default=100)
    history.set_defaults(run=_runs_history)

    show_at = sub.add_parser("show-at", help="a run's state as committed at one checkpoint")
    _connection_options(show_at)
    show_at.add_argument("run_id")
    show_at.add_argument("checkpoint_seq", type=int, metavar="SEQ")
    show_at.set_defaults(run=_runs_show_at)

    fork = sub.add_parser("fork", help="start a new run from one of a run's checkpoints")
    _connection_options(fork)
    fork.add_argument("run_id")
    fork.add_argument("--at", type=int, default=None, metavar="SEQ", help="default: latest")
    fork.add_argument("--id", dest="new_id", default=None, metavar="NEW", help="the new run id")
    fork.add_argument("--patch", default=None, metavar="JSON", help="fields to replace")
    fork.set_defaults(run=_runs_fork)

    edit = sub.add_parser("edit", help="replace state fields of a waiting or failed run")
    _connection_options(edit)
    edit.add_argument("run_id")
    edit.add_argument("--patch", required=True, metavar="JSON", help="fields to replace")
    edit.add_argument("--reason", default=None, help="why (recorded in the state_edited event)")
    edit.set_defaults(run=_runs_edit)

    prune = commands.add_parser("prune", help="retention: delete old events and finished runs")
    _connection_options(prune, tenant=False)
    prune.add_argument("--events-older-than", default=None, metavar="DUR", help="e.g. 7d")
    prune.add_argument("--runs-older-than", default=None, metavar="DUR", help="e.g. 30d")
    prune.add_argument("--batch", type=int, default=1000, metavar="N", help="rows per pass")
    prune.add_argument("--until-done", action="store_true", help="passes until a short one")
    prune.set_defaults(run=_prune)


def _runs_subcommands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    runs = commands.choices["runs"]
    for action in runs._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise AssertionError("docket runs has no subcommands")  # registered before this


def _checkpoint_json(info: CheckpointInfo) -> JSONValue:
    return {
        "checkpoint_seq": info.checkpoint_seq,
        "checkpoint_type": str(info.checkpoint_type),
        "status": str(info.status),
        "step": info.step,
        "created_at": _stamp(info.created_at),
        "first_event_seq": info.first_event_seq,
        "event_seq": info.event_seq,
        "changed": list(info.changed),
        "next": list(info.next),
        "readable": info.readable,
    }


def _runs_history(args: argparse.Namespace) -> int:
    page: HistoryPage = _with_docket(
        args,
        lambda d: d.state_history(
            args.run_id, after=args.after, limit=args.limit, tenant_id=args.tenant
        ),
        must_exist=True,
    )
    if args.json:
        _emit(
            {
                "checkpoints": [_checkpoint_json(c) for c in page.checkpoints],
                "next_after": page.next_after,
                "has_more": page.has_more,
                "oldest_available": page.oldest_available,
                "latest": page.latest,
            }
        )
        return 0
    rows = [
        [
            str(c.checkpoint_seq),
            str(c.step),
            _when(c.created_at),
            str(c.checkpoint_type),
            str(c.status),
            ",".join(c.changed) or "-",
            ",".join(c.next) or "-",
            "" if c.readable else "pruned",
        ]
        for c in page.checkpoints
    ]
    _table(("SEQ", "STEP", "TIME", "TYPE", "STATUS", "CHANGED", "NEXT", ""), rows)
    if page.oldest_available is not None and page.oldest_available > 1:
        print(f"(checkpoints before {page.oldest_available} were pruned)")
    if page.has_more:
        print(f"(more: --after {page.next_after})")
    return 0


def _snapshot_json(at: RunSnapshot) -> JSONValue:
    return {
        "run_id": at.run_id,
        "graph_id": at.graph_id,
        "graph_hash": at.graph_hash,
        "checkpoint_seq": at.checkpoint_seq,
        "checkpoint_type": str(at.checkpoint_type),
        "status": str(at.status),
        "step": at.step,
        "created_at": _stamp(at.created_at),
        "event_seq": at.event_seq,
        "state": at.state,
        "next": list(at.next),
        "pending_nodes": list(at.pending_nodes),
    }


def _runs_show_at(args: argparse.Namespace) -> int:
    at: RunSnapshot = _with_docket(
        args,
        lambda d: d.fetch_run_at(args.run_id, args.checkpoint_seq, tenant_id=args.tenant),
        must_exist=True,
    )
    if args.json:
        _emit(_snapshot_json(at))
        return 0
    print(
        f"run {at.run_id} at checkpoint {at.checkpoint_seq} ({at.checkpoint_type}): "
        f"{at.status}, step {at.step}, {_when(at.created_at)}"
    )
    print(f"next      {', '.join(at.next) or '-'}")
    print("state")
    for key, value in sorted(at.state.items()):
        print(f"  {key}: {json.dumps(value, ensure_ascii=False)}")
    return 0


def _patch(text: str | None) -> dict[str, object] | None:
    if text is None:
        return None
    try:
        parsed: object = json.loads(text)
    except ValueError as exc:
        raise _fail(f"--patch is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise _fail(f"--patch must be a JSON object, got {type(parsed).__name__}")
    return parsed


def _changed(args: argparse.Namespace, verb: str, info: RunInfo) -> int:
    if args.json:
        _emit(_info_json(info))
    else:
        run = info.run
        print(f"run {run.id} {verb}: {run.status} (checkpoint {run.checkpoint_seq})")
    return 0


def _runs_fork(args: argparse.Namespace) -> int:
    patch = _patch(args.patch)

    async def go(d: Docket) -> RunInfo:
        run = await d.fork_run(
            args.run_id, at=args.at, new_run_id=args.new_id, patch=patch, tenant_id=args.tenant
        )
        return await d.inspect_run(run.id, tenant_id=args.tenant)

    return _changed(args, f"forked from {args.run_id}", _with_docket(args, go, must_exist=True))


def _runs_edit(args: argparse.Namespace) -> int:
    patch = _patch(args.patch)

    async def go(d: Docket) -> RunInfo:
        await d.update_state(args.run_id, patch, reason=args.reason, tenant_id=args.tenant)
        return await d.inspect_run(args.run_id, tenant_id=args.tenant)

    return _changed(args, "edited", _with_docket(args, go, must_exist=True))


def _prune(args: argparse.Namespace) -> int:
    events = (
        None
        if args.events_older_than is None
        else parse_duration(args.events_older_than, "--events-older-than")
    )
    runs = (
        None
        if args.runs_older_than is None
        else parse_duration(args.runs_older_than, "--runs-older-than")
    )
    if events is None and runs is None:
        raise _fail("nothing to prune: pass --events-older-than and/or --runs-older-than")
    if args.batch < 1:
        raise _fail("--batch must be at least 1")
    result: PruneResult = _with_docket(
        args,
        lambda d: d.prune(
            events_older_than=events,
            runs_older_than=runs,
            batch_size=args.batch,
            until_done=args.until_done,
        ),
        must_exist=True,
    )
    if args.json:
        _emit({"ran": result.ran, "events": result.events, "runs": result.runs})
    elif not result.ran:
        print("another pruner holds the store's pruning lock: nothing was done")
    else:
        print(f"pruned {result.events} events and {result.runs} finished runs")
    return 0
