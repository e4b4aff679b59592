"""Tables, timestamps and the JSON shapes of runs and events."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from docket.errors import DocketError
from docket.records import (
    Event,
    RunInfo,
    RunSummary,
    format_timestamp,
    run_to_dict,
)
from docket.values import JSONValue


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


def one_line(text: str) -> str:
    """A message on one line (drivers' messages may span several)."""
    return " ".join(text.split())


def error_explanation(exc: DocketError) -> list[str]:
    """The reasons behind an error, one line each, that its message does not already say:
    ``details["reasons"]`` (rejected input), ``["problems"]`` (settings) and
    ``["diagnostics"]`` (a graph that does not compile)."""
    lines: list[str] = []
    for key in ("reasons", "problems", "diagnostics"):
        raw = exc.details.get(key)
        for item in raw if isinstance(raw, list) else []:
            line = one_line(_diagnostic_line(item) if isinstance(item, dict) else str(item))
            if line and line not in exc.message and line not in lines:
                lines.append(line)
    return lines


def _diagnostic_line(item: dict[str, JSONValue]) -> str:
    # the shape of Diagnostic.to_dict(), printed as str(Diagnostic) prints it
    head = " ".join(str(item[k]) for k in ("severity", "code") if item.get(k))
    where = item.get("path") or "/"
    return f"{head} {where}: {item.get('message', '')}".strip()
