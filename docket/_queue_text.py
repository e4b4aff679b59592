"""Queue limits as people type them, for the command line and the console.

``docket queues set-limit NAME 5`` and the console's limit form read an execution limit
as ``N`` or ``none``; ``set-rate NAME 20/1s`` and the rate form read a rate as
``COUNT/PERIOD`` (period ``500ms``, ``1s``, ``s``, ``2m``, ``1h``, ``1d``; a bare number
is seconds) or ``none``; ``set-admission NAME 3 --per-tenant 1`` and the admission form
read admission limits as an execution limit is read. These parsers only check the *shape*
of the text and raise ``ValueError`` with the reason; whether a value is allowed (a limit
of 0, a rate of 0 per second) is the facade's decision (``Docket.configure_queue``), so
both surfaces refuse exactly what the API refuses, with its reasons.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

from docket.records import HeldStart, QueueStatus, RateLimit, format_timestamp
from docket.values import JSONValue

__all__ = [
    "admission_shown",
    "format_limit",
    "format_rate",
    "held_start_json",
    "parse_limit",
    "parse_rate",
    "queue_status_json",
]

_NONE: Final = frozenset({"none", "unlimited", "-"})
_LIMIT: Final = re.compile(r"[+-]?\d{1,18}")
_RATE: Final = re.compile(
    r"(?P<count>[+-]?\d{1,18})\s*/\s*(?P<number>\d{1,12}(?:\.\d{1,6})?)?(?P<unit>ms|s|m|h|d)?"
)
_LONGEST_MS: Final = 1000 * 86_400_000
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_limit(text: str, what: str = "execution limit") -> int | None:
    """``"5"`` -> 5, ``"none"`` -> ``None`` (no limit); ``ValueError`` for anything else
    (its reason names ``what``: an admission limit is read the same way)."""
    cleaned = text.strip()
    if cleaned.lower() in _NONE:
        return None
    if _LIMIT.fullmatch(cleaned) is None:
        raise ValueError(
            f"{what}: expected a whole number (at most 18 digits) or 'none', got {text!r}"
        )
    return int(cleaned)


def parse_rate(text: str) -> RateLimit | None:
    """``"20/1s"`` -> 20 per second, ``"none"`` -> ``None``; ``ValueError`` otherwise.

    The period must be a whole number of milliseconds, at least one: that is how a rate
    is stored (``queue_config_to_dict``), so a finer period would not read back the same.
    """
    cleaned = text.strip()
    if cleaned.lower() in _NONE:
        return None
    found = _RATE.fullmatch(cleaned)
    if found is None or (found["number"] is None and found["unit"] is None):
        raise ValueError(
            f"rate: expected COUNT/PERIOD like 20/1s, 100/m or 5/500ms, or 'none', got {text!r}"
        )
    millis = float(found["number"] or 1) * _UNIT_MS[found["unit"] or "s"]
    if millis < 1 or abs(millis - round(millis)) > 1e-6:
        raise ValueError(f"rate: the period must be a whole number of milliseconds, got {text!r}")
    if millis > _LONGEST_MS:
        raise ValueError(f"rate: the period must be at most 1000 days, got {text!r}")
    return RateLimit(count=int(found["count"]), period=timedelta(milliseconds=round(millis)))


def format_limit(limit: int | None) -> str:
    return "none" if limit is None else str(limit)


def format_rate(rate: RateLimit | None) -> str:
    """``20/1s``-style text that :func:`parse_rate` reads back to the same rate."""
    if rate is None:
        return "none"
    millis = round(rate.period.total_seconds() * 1000)
    for unit in ("d", "h", "m", "s"):
        size = _UNIT_MS[unit]
        if millis % size == 0:
            return f"{rate.count}/{millis // size}{unit}"
    return f"{rate.count}/{millis}ms"


def admission_shown(status: QueueStatus) -> bool:
    """Whether a queue's admission figures are worth showing: it has an admission limit,
    or starts it admitted or held before a limit was removed are still counted."""
    return status.config.admission_limited or status.admitted > 0 or status.held > 0


def queue_status_json(status: QueueStatus) -> dict[str, JSONValue]:
    """One ``list_queues`` row for scripts (``docket queues list --json``). The admission
    keys are there only when :func:`admission_shown` (as the stored config carries its
    admission fields only when set), so a queue without them reads as it always did."""
    config = status.config
    rate: JSONValue = None
    if config.rate is not None:
        rate = {
            "count": config.rate.count,
            "period_ms": round(config.rate.period.total_seconds() * 1000),
            "text": format_rate(config.rate),
        }
    return {
        "name": config.name,
        "execution_limit": config.execution_limit,
        "rate": rate,
        "paused": config.paused,
        "limited": config.limited,
        "running": status.running,
        "depth": status.depth,
    } | _admission_json(status)


def _admission_json(status: QueueStatus) -> dict[str, JSONValue]:
    if not admission_shown(status):
        return {}
    return {
        "admission_limit": status.config.admission_limit,
        "tenant_admission_limit": status.config.tenant_admission_limit,
        "admitted": status.admitted,
        "held": status.held,
    }


def held_start_json(start: HeldStart, state: str) -> dict[str, JSONValue]:
    """One start of a queue's admission ledger (``docket queues held --json``); ``state``
    is ``admitted`` or ``held``, ``since`` when it was held or admitted. The opaque start
    itself is the runtime's and is not shown."""
    return {
        "state": state,
        "run_id": start.run_id,
        "tenant": start.tenant,
        "priority": start.priority,
        "seq": start.seq,
        "since": format_timestamp(start.at),
    }
