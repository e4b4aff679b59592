"""``docket runs send`` and the time options of ``docket runs start`` (durable time and
messages, docs/execution.md#durable-time-and-messages)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta

from docket.cli._common import _fail, _with_docket
from docket.cli._output import _emit, one_line
from docket.core.waits import pending_messages
from docket.facade import Docket
from docket.records import DEADLINE_KEY, TASK_SLEEPING, TASK_WAITING_MESSAGE, Run
from docket.runtime.messages import SendResult

__all__ = [
    "add_send",
    "add_time_options",
    "parse_duration",
    "parse_instant",
    "print_waits",
    "time_options",
]


def print_waits(run: Run) -> None:
    """``runs show``: the run's deadline, what its parked attempts wait for (a time, a
    message) and the messages kept for it."""
    deadline = run.metadata.get(DEADLINE_KEY)
    if isinstance(deadline, str):
        print(f"deadline  {deadline} (then the run fails: deadline_exceeded)")
    for task in sorted(run.active_tasks.values(), key=lambda t: t.task_id):
        if task.status == TASK_SLEEPING:
            print(f"sleeping  node {task.node_id} until {task.metadata.get('until')}")
        elif task.status == TASK_WAITING_MESSAGE:
            until = task.metadata.get("timeout_at")
            limit = f" until {until}" if isinstance(until, str) else ""
            topic = task.metadata.get("topic")
            print(f"waiting   node {task.node_id} for a message on {topic!r}{limit}")
    kept = pending_messages(run)
    if kept:
        print(f"mailbox ({len(kept)} kept):")
        for message in kept:
            text = json.dumps(message.payload, ensure_ascii=False)
            print(f"  #{message.seq} {message.topic!r} sent {message.sent_at}: {one_line(text)}")


def parse_instant(text: str, option: str) -> datetime:
    """An ISO-8601 instant; one without a UTC offset is refused (ambiguous)."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _fail(f"{option} is not an ISO-8601 time: {text!r}") from None
    if moment.utcoffset() is None:
        raise _fail(f"{option} needs a UTC offset (e.g. 2026-12-24T18:00:00+01:00 or ...Z)")
    return moment.astimezone(UTC)


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, option: str) -> timedelta:
    """``90s``, ``15m``, ``2h``, ``7d``, ``500ms`` or plain seconds."""
    number, unit = text, "s"
    for suffix in sorted(_UNITS, key=len, reverse=True):
        if text.endswith(suffix):
            number, unit = text[: -len(suffix)], suffix
            break
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise _fail(f"{option} is not a duration like 90s, 15m, 2h or 7d: {text!r}") from None
    if value <= 0:
        raise _fail(f"{option} must be positive, got {text!r}")
    return timedelta(seconds=value)


def add_time_options(start: argparse.ArgumentParser) -> None:
    start.add_argument("--start-at", metavar="TIME", help="start later (ISO-8601 with offset)")
    start.add_argument("--deadline", metavar="TIME", help="fail the run after this time")
    start.add_argument("--timeout", metavar="DURATION", help="deadline after the start (2h, 7d)")


def time_options(args: argparse.Namespace) -> dict[str, object]:
    """The ``start_run`` keyword arguments the options give."""
    found: dict[str, object] = {}
    if getattr(args, "start_at", None):
        found["start_at"] = parse_instant(args.start_at, "--start-at")
    if getattr(args, "deadline", None):
        found["deadline"] = parse_instant(args.deadline, "--deadline")
    if getattr(args, "timeout", None):
        found["timeout"] = parse_duration(args.timeout, "--timeout")
    return found


def add_send(sub: argparse._SubParsersAction[argparse.ArgumentParser], options: object) -> None:
    send = sub.add_parser("send", help="send a durable message to a run")
    assert callable(options)
    options(send)
    send.add_argument("run_id")
    send.add_argument("topic")
    send.add_argument(
        "payload", nargs="?", default="null", help="JSON; text that is not JSON is a string"
    )
    send.add_argument("--key", default=None, help="idempotency key: a repeat delivers nothing")
    send.set_defaults(run=_runs_send)


def _runs_send(args: argparse.Namespace) -> int:
    try:
        payload: object = json.loads(args.payload)
    except ValueError:
        payload = args.payload

    async def go(d: Docket) -> SendResult:
        return await d.send(
            args.run_id, args.topic, payload, idempotency_key=args.key, tenant_id=args.tenant
        )

    result = _with_docket(args, go, must_exist=True)
    what = "duplicate" if result.duplicate else "delivered" if result.delivered else "kept"
    if args.json:
        _emit(
            {
                "run_id": result.run.id,
                "topic": args.topic,
                "result": what,
                "message_seq": result.message_seq,
                "status": str(result.run.status),
                "checkpoint_seq": result.run.checkpoint_seq,
            }
        )
    else:
        seq = "" if result.message_seq is None else f" #{result.message_seq}"
        print(
            f"message{seq} on {args.topic!r} to run {result.run.id}: {what} "
            f"({result.run.status}, checkpoint {result.run.checkpoint_seq})"
        )
    return 0
