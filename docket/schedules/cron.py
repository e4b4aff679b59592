"""Cron expressions in an IANA time zone: validation and the ticks between two instants.

Parsing and calendar arithmetic are :mod:`cronsim`'s (docs/schedules.md explains the
choice); this module only fixes how docket uses it: every instant in and out is an aware
UTC datetime, ticks are whole seconds, and the DST rules are cronsim's Debian-cron ones:

* a tick at a fixed local time that falls in a **skipped** hour (spring forward) fires
  once, at the first valid local time after the gap (``30 2 * * *`` -> 03:00);
* a tick at a fixed local time in a **repeated** hour (fall back) fires once, at its
  first occurrence;
* an expression whose minute or hour field is a wildcard (``*/15 * * * *``) follows real
  time: in a repeated hour it fires in both occurrences, in a skipped one not at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from cronsim import CronSim, CronSimError

__all__ = ["CronSpec", "cron_problems", "parse_cron", "tick_label"]

_EPSILON = timedelta(microseconds=1)
#: A cron expression that has no tick for this long ends (cronsim gives up after 50 years).
_PROBE_START = timedelta(minutes=1)


def _zone(timezone: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        return None


def cron_problems(cron: object, timezone: object) -> list[str]:
    """Why ``cron`` in ``timezone`` cannot be a schedule (empty when it can)."""
    problems: list[str] = []
    if not isinstance(timezone, str) or not timezone or _zone(timezone) is None:
        problems.append(f"timezone {timezone!r} is not an IANA time zone name")
    if not isinstance(cron, str) or not cron.strip():
        problems.append("cron must be a non-empty cron expression")
    else:
        try:
            CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC))
        except (CronSimError, ValueError, IndexError, KeyError) as exc:
            problems.append(f"cron {cron!r} is not a valid cron expression: {exc}")
    return problems


@attrs.frozen
class CronSpec:
    """A valid cron expression in a time zone (build it with :func:`parse_cron`)."""

    cron: str
    timezone: str
    zone: ZoneInfo = attrs.field(eq=False, repr=False)

    def ticks_after(self, after: datetime) -> Iterator[datetime]:
        """Every tick strictly after ``after``, ascending, as UTC datetimes (ends when the
        expression has no further tick)."""
        after = after.astimezone(UTC)
        try:
            for local in CronSim(self.cron, after.astimezone(self.zone)):
                tick = local.astimezone(UTC)
                # cronsim's wall-clock mode forgets fold: a start inside a repeated hour
                # may hand back a tick of its first occurrence, before ``after``
                if tick > after:
                    yield tick
        except StopIteration:  # cronsim gives up after 50 years without a match
            return

    def first_after(self, after: datetime) -> datetime | None:
        return next(iter(self.ticks_after(after)), None)

    def first_from(self, start: datetime) -> datetime | None:
        """The first tick at or after ``start``."""
        return self.first_after(start - _EPSILON)

    def last_between(self, start: datetime, end: datetime) -> datetime | None:
        """The latest tick in ``[start, end]`` (``None``: none there). Probes backwards in
        growing windows, so the work is about the ticks in twice the gap to ``end``."""
        width = _PROBE_START
        while True:
            low = max(start, end - width)
            found = None
            for tick in self.ticks_after(low - _EPSILON):
                if tick > end:
                    break
                found = tick
            if found is not None or low == start:
                return found
            width *= 8


def parse_cron(cron: str, timezone: str = "UTC") -> CronSpec | list[str]:
    """The spec, or the problems of :func:`cron_problems`."""
    problems = cron_problems(cron, timezone)
    if problems:
        return problems
    zone = _zone(timezone)
    assert zone is not None
    return CronSpec(cron, timezone, zone)


def tick_label(tick: datetime) -> str:
    """A tick as it appears in a run id: ``YYYYMMDDTHHMMSSZ`` (UTC)."""
    return tick.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
