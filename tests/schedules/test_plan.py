"""The pure schedule logic: cron + time zone validation, ticks across DST, and each step
of the ticker's decision (catch-up, overlap policies, the next state)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice

import attrs
import pytest

from docket.records import CronSchedule, Overlap
from docket.schedules import CronSpec, parse_cron, run_id_for, schedule_metadata, step

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def spec(cron: str, tz: str = "UTC") -> CronSpec:
    parsed = parse_cron(cron, tz)
    assert isinstance(parsed, CronSpec), parsed
    return parsed


def schedule(cron: str = "* * * * *", **changes: object) -> CronSchedule:
    base = CronSchedule(
        id="nightly",
        graph_id="g",
        cron=cron,
        created_at=T0,
        updated_at=T0,
        next_tick_at=T0 + timedelta(minutes=1),
    )
    return attrs.evolve(base, **changes)  # type: ignore[arg-type]


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


# -- validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cron", "tz", "fragment"),
    [
        ("61 * * * *", "UTC", "not a valid cron expression"),
        ("* * *", "UTC", "not a valid cron expression"),
        ("", "UTC", "non-empty cron expression"),
        ("0 0 31 2 *", "UTC", "not a valid cron expression"),
        ("* * * * *", "Mars/Olympus", "not an IANA time zone"),
        ("* * * * *", "", "not an IANA time zone"),
        ("* * * * *", "../etc/passwd", "not an IANA time zone"),
    ],
)
def test_a_bad_cron_or_time_zone_is_named(cron: str, tz: str, fragment: str) -> None:
    problems = parse_cron(cron, tz)
    assert isinstance(problems, list)
    assert any(fragment in p for p in problems), problems


def test_six_fields_tick_every_second() -> None:
    ticks = list(islice(spec("* * * * * *").ticks_after(T0), 3))
    assert ticks == [T0 + timedelta(seconds=s) for s in (1, 2, 3)]


# -- DST (America/New_York: 2026-03-08 02:00 -> 03:00, 2026-11-01 02:00 -> 01:00) --------


def test_a_fixed_time_in_the_skipped_hour_fires_once_at_the_end_of_the_gap() -> None:
    ticks = list(islice(spec("30 2 * * *", "America/New_York").ticks_after(utc(2026, 3, 7, 12)), 2))
    # 03:00 EDT (07:00 UTC) on the day of the gap, then 02:30 EDT (06:30 UTC) again
    assert ticks == [utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)]


def test_a_fixed_time_in_the_repeated_hour_fires_once_at_its_first_occurrence() -> None:
    ticks = list(
        islice(spec("30 1 * * *", "America/New_York").ticks_after(utc(2026, 10, 31, 12)), 2)
    )
    assert ticks == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]  # 01:30 EDT, then EST


def test_a_wildcard_hour_follows_real_time_through_the_repeated_hour() -> None:
    ticks = list(
        islice(spec("*/30 * * * *", "America/New_York").ticks_after(utc(2026, 11, 1, 4, 45)), 4)
    )
    # 01:00 EDT, 01:30 EDT, 01:00 EST, 01:30 EST: both occurrences
    assert ticks == [
        utc(2026, 11, 1, 5),
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 1, 6),
        utc(2026, 11, 1, 6, 30),
    ]


def test_ticks_from_inside_the_repeated_hour_never_go_back_in_time() -> None:
    # 01:40 EST (the second 01:40): the 01:45 of the first occurrence is already past
    start = utc(2026, 11, 1, 6, 40)
    first = spec("45 1 * * *", "America/New_York").first_after(start)
    assert first is not None and first > start
    assert first == utc(2026, 11, 2, 6, 45)


def test_last_between_finds_a_tick_long_ago_without_walking_every_second() -> None:
    every_second = spec("* * * * * *")
    assert every_second.last_between(utc(2020, 1, 1), T0) == T0
    yearly = spec("0 0 1 1 *")
    assert yearly.last_between(utc(2020, 1, 1), T0) == utc(2026, 1, 1)
    assert yearly.last_between(utc(2026, 1, 2), T0) is None


def test_run_ids_and_metadata_name_the_tick_in_utc() -> None:
    tick = datetime(2026, 6, 1, 14, 0, 5, tzinfo=UTC)
    assert run_id_for("nightly", tick) == "nightly@20260601T140005Z"
    assert schedule_metadata("nightly", tick) == {
        "id": "nightly",
        "tick": "2026-06-01T14:00:05+00:00",
    }


# -- one step ----------------------------------------------------------------------------


def test_a_due_tick_starts_its_run_and_moves_the_cursor() -> None:
    s = schedule()
    now = T0 + timedelta(minutes=1, seconds=2)
    decided = step(spec(s.cron), s, now, previous_unfinished=False)
    tick = T0 + timedelta(minutes=1)
    assert decided.start == tick
    assert decided.schedule is not None
    assert decided.schedule.next_tick_at == tick + timedelta(minutes=1)
    assert decided.schedule.last_tick_at == tick
    assert decided.schedule.last_run_id == "nightly@20260601T120100Z"


def test_nothing_is_due_before_the_tick_or_while_paused() -> None:
    s = schedule()
    assert step(spec(s.cron), s, T0, previous_unfinished=False).schedule is None
    later = T0 + timedelta(hours=1)
    assert (
        step(spec(s.cron), attrs.evolve(s, paused=True), later, previous_unfinished=False).schedule
        is None
    )


def run_steps(
    s: CronSchedule, now: datetime, unfinished: bool = False
) -> tuple[list[datetime], CronSchedule]:
    """Steps until nothing is due (what the ticker does): the started ticks, final state."""
    started: list[datetime] = []
    cron = spec(s.cron, s.timezone)
    for _ in range(10_000):
        decided = step(cron, s, now, previous_unfinished=unfinished)
        if decided.schedule is None:
            return started, s
        if decided.start is not None:
            started.append(decided.start)
        s = decided.schedule
    raise AssertionError("the steps never settle")


def test_without_catchup_an_hour_of_missed_ticks_starts_only_the_latest() -> None:
    s = schedule()
    now = T0 + timedelta(hours=1, seconds=30)
    started, final = run_steps(s, now)
    assert started == [T0 + timedelta(hours=1)]
    assert final.next_tick_at == T0 + timedelta(hours=1, minutes=1)


def test_catchup_starts_the_missed_ticks_inside_the_window_and_no_older() -> None:
    s = schedule(catchup_ms=10 * 60 * 1000)
    now = T0 + timedelta(hours=1, seconds=30)
    started, final = run_steps(s, now)
    # 11:50:30..now -> the ticks at 12:51 .. 13:00 (10 of them), none older
    assert started == [T0 + timedelta(minutes=m) for m in range(51, 61)]
    assert final.next_tick_at == T0 + timedelta(hours=1, minutes=1)


def test_overlap_skip_starts_nothing_while_the_previous_run_is_unfinished() -> None:
    s = schedule(overlap=Overlap.SKIP, last_run_id="nightly@x")
    now = T0 + timedelta(minutes=1, seconds=1)
    decided = step(spec(s.cron), s, now, previous_unfinished=True)
    assert decided.start is None and decided.schedule is not None
    assert decided.schedule.next_tick_at == T0 + timedelta(minutes=2)
    assert decided.schedule.last_run_id == "nightly@x"
    assert decided.skipped == (T0 + timedelta(minutes=1),)


def test_overlap_allow_starts_anyway() -> None:
    s = schedule(overlap=Overlap.ALLOW, last_run_id="nightly@x")
    decided = step(spec(s.cron), s, T0 + timedelta(minutes=1), previous_unfinished=True)
    assert decided.start == T0 + timedelta(minutes=1)


def test_buffer_one_holds_one_tick_drops_later_ones_and_starts_it_when_the_run_ends() -> None:
    cron = spec("* * * * *")
    s = schedule(overlap=Overlap.BUFFER_ONE, last_run_id="nightly@x")
    first = T0 + timedelta(minutes=1)
    held = step(cron, s, first, previous_unfinished=True)
    assert held.start is None and held.schedule is not None
    assert held.schedule.buffered_tick_at == first
    s = held.schedule
    # two more ticks pass while the run goes on: dropped, the held one stays
    now = T0 + timedelta(minutes=3, seconds=5)
    dropped = step(cron, s, now, previous_unfinished=True)
    assert dropped.start is None and dropped.schedule is not None
    assert dropped.schedule.buffered_tick_at == first
    assert dropped.schedule.next_tick_at == T0 + timedelta(minutes=4)
    s = dropped.schedule
    assert step(cron, s, now, previous_unfinished=True).schedule is None  # waits, no write
    # the run ended: the held tick starts (late), nothing else
    released = step(cron, s, now, previous_unfinished=False)
    assert released.start == first
    assert released.schedule is not None and released.schedule.buffered_tick_at is None
    assert released.schedule.last_run_id == run_id_for("nightly", first)
    assert step(cron, released.schedule, now, previous_unfinished=True).schedule is None


def test_a_yearly_tick_moves_the_cursor_a_year_on() -> None:
    s = schedule("0 0 1 1 *", next_tick_at=utc(2027, 1, 1))
    cron = spec(s.cron)
    decided = step(cron, s, utc(2027, 1, 1) + timedelta(seconds=1), previous_unfinished=False)
    assert decided.start == utc(2027, 1, 1)
    assert decided.schedule is not None and decided.schedule.next_tick_at == utc(2028, 1, 1)


def test_skip_passes_every_tick_due_now_in_one_step() -> None:
    s = schedule(overlap=Overlap.SKIP, last_run_id="nightly@x", catchup_ms=3_600_000)
    now = T0 + timedelta(minutes=30, seconds=5)
    decided = step(spec(s.cron), s, now, previous_unfinished=True)
    assert decided.start is None and decided.schedule is not None
    assert decided.schedule.next_tick_at == T0 + timedelta(minutes=31)  # one write, not 30
