"""What a due schedule does at ``now``: one step of the ticker's decision (no I/O).

A step handles the earliest thing due — the buffered tick, else the tick at
``next_tick_at`` (after jumping over missed ticks too old to catch up) — and returns the
tick to start a run for (if any) and the schedule's next state. The ticker repeats steps,
each fenced on the version it read, until the schedule is no longer due; so a run is only
ever started for the tick the stored cursor points at, and the run id derived from that
tick (:func:`run_id_for`) makes the start happen once however many tickers race.

Catch-up: among the ticks due at ``now``, the latest always counts as on time (a ticker
polls, so it always sees a tick a little late); an earlier one is *missed*, and starts
its run only when it is at most ``catchup_ms`` old. Overlap, when the schedule's previous
run (``last_run_id``) is unfinished: ``skip`` starts nothing for the tick, ``allow``
starts it anyway, ``buffer_one`` holds the tick (``buffered_tick_at``) until the
previous run ends, dropping every later tick due while one is held.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs

from docket.records import CronSchedule, Overlap
from docket.schedules.cron import CronSpec, tick_label
from docket.values import JSONDict

__all__ = ["Step", "manual_run_id", "run_id_for", "schedule_metadata", "step"]


def run_id_for(schedule_id: str, tick: datetime) -> str:
    """The one run a tick may start: ``<schedule_id>@<tick as YYYYMMDDTHHMMSSZ>``."""
    return f"{schedule_id}@{tick_label(tick)}"


def manual_run_id(schedule_id: str, unique: str) -> str:
    """A triggered run's id: ``<schedule_id>@manual-<unique>``."""
    return f"{schedule_id}@manual-{unique}"


def schedule_metadata(schedule_id: str, tick: datetime, *, manual: bool = False) -> JSONDict:
    """The ``docket.schedule`` metadata of a run a schedule started."""
    data: JSONDict = {"id": schedule_id, "tick": tick.astimezone(UTC).isoformat()}
    if manual:
        data["manual"] = True
    return data


@attrs.frozen(kw_only=True)
class Step:
    """One decision: ``start`` (a tick to start a run for) and the schedule's next state
    (``None``: nothing to change — a held tick waiting for the previous run)."""

    start: datetime | None
    schedule: CronSchedule | None
    skipped: tuple[datetime, ...] = ()  # ticks passed over without a run (for logs and tests)


def step(
    spec: CronSpec, schedule: CronSchedule, now: datetime, *, previous_unfinished: bool
) -> Step:
    """The next step of ``schedule`` at ``now`` (see the module docstring)."""
    now = now.astimezone(UTC)
    if schedule.paused:
        return Step(start=None, schedule=None)
    held = schedule.buffered_tick_at
    if held is not None and held <= now:
        if not previous_unfinished:
            return _started(schedule, held, now, buffered=None, next_tick=schedule.next_tick_at)
        nxt = schedule.next_tick_at
        if nxt is None or nxt > now:
            return Step(start=None, schedule=None)  # the held tick waits for the run to end
        # one tick is held already: every later one due now is dropped
        after = spec.first_after(now)
        dropped = (nxt,)
        return Step(
            start=None,
            schedule=attrs.evolve(schedule, next_tick_at=after, updated_at=now),
            skipped=dropped,
        )
    nxt = schedule.next_tick_at
    if nxt is None or nxt > now:
        return Step(start=None, schedule=None)
    tick, skipped = _first_eligible(spec, schedule, nxt, now)
    following = spec.first_after(tick)
    if not previous_unfinished or schedule.overlap is Overlap.ALLOW:
        return _started(schedule, tick, now, buffered=held, next_tick=following, skipped=skipped)
    if schedule.overlap is Overlap.BUFFER_ONE and held is None:
        return Step(
            start=None,
            schedule=attrs.evolve(
                schedule, next_tick_at=following, buffered_tick_at=tick, updated_at=now
            ),
            skipped=skipped,
        )
    # skip: the tick starts nothing, and neither does any other tick due now (the run
    # that blocks it is still going), so the cursor jumps past them all in one write
    return Step(
        start=None,
        schedule=attrs.evolve(schedule, next_tick_at=spec.first_after(now), updated_at=now),
        skipped=(*skipped, tick),
    )


def _first_eligible(
    spec: CronSpec, schedule: CronSchedule, nxt: datetime, now: datetime
) -> tuple[datetime, tuple[datetime, ...]]:
    """The first due tick that may start a run (at most ``catchup_ms`` old, or the latest
    due), and the first missed tick jumped over (if any) to reach it."""
    oldest = now - timedelta(milliseconds=schedule.catchup_ms)
    if nxt >= oldest:
        return nxt, ()
    recent = spec.first_from(oldest)
    if recent is not None and recent <= now:
        return recent, (nxt,)
    latest = spec.last_between(nxt, now)
    if latest is None or latest == nxt:  # (None: a cursor that is no tick of the cron)
        return nxt, ()
    return latest, (nxt,)


def _started(
    schedule: CronSchedule,
    tick: datetime,
    now: datetime,
    *,
    buffered: datetime | None,
    next_tick: datetime | None,
    skipped: tuple[datetime, ...] = (),
) -> Step:
    return Step(
        start=tick,
        schedule=attrs.evolve(
            schedule,
            next_tick_at=next_tick,
            buffered_tick_at=buffered,
            last_tick_at=tick,
            last_run_id=run_id_for(schedule.id, tick),
            updated_at=now,
        ),
        skipped=skipped,
    )
