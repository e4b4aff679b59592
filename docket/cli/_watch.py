"""``docket runs watch RUN``: follow a run through ``Docket.stream``.

Committed events print as table rows as they commit (``--json``: one JSON object per
line); what the run's nodes emit prints between them: consecutive ``token`` emissions
of one attempt inline on one line (a model's answer as it is written), any other kind
as its own line. The watch ends when the run finishes, or waits for an answer (its
latest checkpoint says ``waiting``: someone has to act), or after ``--timeout``
(exit 1). ``--after SEQ`` starts after an event already seen. No polling here: the
stream is pushed where the backend has a live feed (docs/streams.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from docket.cli._common import _fail, _with_docket
from docket.cli._output import _EVENT_HEADERS, _event_json, _event_row, _stream_line
from docket.facade import Docket
from docket.records import Emission, Event, EventsPruned, EventType, RunStatus, format_timestamp
from docket.values import JSONValue

__all__ = ["add_watch_options", "runs_watch"]


def add_watch_options(watch: argparse.ArgumentParser) -> None:
    watch.add_argument("--after", type=int, default=0, metavar="SEQ", help="start after SEQ")
    watch.add_argument(
        "--no-emissions", action="store_true", help="committed events only, not what nodes emit"
    )


def _emission_json(item: Emission) -> JSONValue:
    return {
        "emission": {
            "run_id": item.run_id,
            "node_id": item.node_id,
            "task_id": item.task_id,
            "attempt": item.attempt,
            "seq": item.seq,
            "kind": item.kind,
            "data": item.data,
            "at": format_timestamp(item.at),
        }
    }


class _Printer:
    """The watch's output: rows, and token runs kept on one line until something else."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.header = False
        self.inline: str | None = None  # the attempt whose tokens are being written

    def _end_inline(self) -> None:
        if self.inline is not None:
            print(flush=True)
            self.inline = None

    def event(self, event: Event) -> None:
        if self.as_json:
            print(json.dumps(_event_json(event), ensure_ascii=False), flush=True)
            return
        self._end_inline()
        if not self.header:
            print(_stream_line(_EVENT_HEADERS))
            self.header = True
        print(_stream_line(_event_row(event)), flush=True)

    def emission(self, item: Emission) -> None:
        if self.as_json:
            print(json.dumps(_emission_json(item), ensure_ascii=False), flush=True)
            return
        attempt = f"{item.task_id}#{item.attempt}"
        if item.kind == "token" and isinstance(item.data, str):
            if self.inline != attempt:
                self._end_inline()
                print(f"  {item.node_id} > ", end="")
                self.inline = attempt
            print(item.data, end="", flush=True)
            return
        self._end_inline()
        data = json.dumps(item.data, ensure_ascii=False)
        print(f"  {item.node_id} ~ {item.kind}: {data}", flush=True)

    def pruned(self, item: EventsPruned) -> None:
        if self.as_json:
            gone = {"first_seq": item.first_seq, "last_seq": item.last_seq}
            print(json.dumps({"pruned": gone}), flush=True)
            return
        self._end_inline()
        print(f"  (events {item.first_seq}..{item.last_seq} were removed by retention)")

    def note(self, text: str) -> None:
        self._end_inline()
        if not self.as_json:
            print(text, flush=True)


def _waiting(event: Event) -> bool:
    return event.type is EventType.CHECKPOINT_COMMITTED and event.payload.get("status") == str(
        RunStatus.WAITING
    )


async def _follow(docket: Docket, args: argparse.Namespace, out: _Printer) -> str | None:
    """Print the stream; the run's state it stopped at (``None``: it ended)."""
    info = await docket.inspect_run(args.run_id, tenant_id=args.tenant)
    if info.poisoned:
        return "poisoned"
    if info.run.status is RunStatus.WAITING and info.run.event_seq <= args.after:
        return "waiting"  # nothing after the cursor until someone answers
    stream = docket.stream(
        args.run_id,
        after_seq=args.after,
        emissions=not args.no_emissions,
        tenant_id=args.tenant,
    )
    async with stream:
        async for item in stream:
            if isinstance(item, Emission):
                out.emission(item)
            elif isinstance(item, EventsPruned):
                out.pruned(item)
            else:
                out.event(item)
                if _waiting(item):
                    run = await docket.fetch_run(args.run_id, tenant_id=args.tenant)
                    if run.status is RunStatus.WAITING and run.event_seq <= item.seq:
                        return "waiting"
    return None


def runs_watch(args: argparse.Namespace) -> int:
    if args.interval <= 0:  # kept for old scripts: the stream needs no interval
        raise _fail("--interval must be positive")
    if args.after < 0:
        raise _fail("--after must be >= 0")
    out = _Printer(args.json)

    async def watch(docket: Docket) -> int:
        try:
            async with asyncio.timeout(args.timeout):
                state = await _follow(docket, args, out)
        except TimeoutError:
            run = await docket.fetch_run(args.run_id, tenant_id=args.tenant)
            out.note(f"run {args.run_id} is still {run.status} (timeout)")
            return 1
        if state is None:
            state = str((await docket.fetch_run(args.run_id, tenant_id=args.tenant)).status)
        out.note(f"run {args.run_id} is {state}")
        return 0

    code: int = _with_docket(args, watch, must_exist=True)
    sys.stdout.flush()
    return code
