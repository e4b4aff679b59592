"""Reading script answers, and the run summary the stores write and read.

Every script answers a list whose first item is a code (``OK``, ``NOT_FOUND`` …); the
helpers here read such answers and turn unreadable stored data into
:func:`~docket_redis.errors.corrupt`. The summary ``list_runs`` answers from is written
by the transition scripts (:func:`encode_summary`) and read back by the run store
(:func:`decode_summary`), so both halves of its format live here, side by side.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import orjson

from docket.records import Run, RunStatus, RunSummary, run_from_json
from docket.values import from_micros, to_micros
from docket_redis.errors import corrupt
from docket_redis.keys import ScopeKeys


def text(value: Any) -> str:
    """A string reply (RESP2 answers bytes)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    raise TypeError(f"expected a string reply, got {value!r}")


def code(reply: Any) -> str:
    """The code a script answered with (its reply's first item)."""
    if not isinstance(reply, list) or not reply:
        raise corrupt(f"unexpected script answer {reply!r}")
    return text(reply[0])


def opt_time(value: Any) -> datetime | None:
    return None if value is None else from_micros(int(text(value)))


def decode_run(data: Any) -> Run:
    try:
        return run_from_json(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise corrupt(f"a stored run document cannot be read: {exc}") from exc


def encode_summary(run: Run) -> str:
    """The summary list_runs returns (index fields only; never the run document)."""
    # orjson: the same compact text json.dumps(separators=(",", ":"), ensure_ascii=False)
    # gives, at a fraction of the cost (once per commit)
    return orjson.dumps(
        {
            "g": run.graph_id,
            "h": run.graph_hash,
            "s": run.status.value,
            "n": run.step,
            "c": run.checkpoint_seq,
            "a": to_micros(run.started_at),
            "u": to_micros(run.updated_at),
            "f": None if run.finished_at is None else to_micros(run.finished_at),
        }
    ).decode()


def decode_summary(keys: ScopeKeys, run_id: str, stored: bytes) -> tuple[int, RunSummary]:
    """``(listing order, summary)`` from a stored ``<order>|<encode_summary>`` entry."""
    try:
        order, _, body = stored.partition(b"|")
        fields = json.loads(body)
        finished = fields["f"]
        return int(order), RunSummary(
            id=run_id,
            tenant_id=keys.tenant_id,
            graph_id=str(fields["g"]),
            graph_hash=str(fields["h"]),
            status=RunStatus(fields["s"]),
            step=int(fields["n"]),
            checkpoint_seq=int(fields["c"]),
            started_at=from_micros(int(fields["a"])),
            updated_at=from_micros(int(fields["u"])),
            finished_at=None if finished is None else from_micros(int(finished)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise corrupt(f"the summary of run {run_id!r} cannot be read: {exc}") from exc
