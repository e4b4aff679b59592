"""Cron schedules, the pure part (no I/O): the cron library's use, and the ticker's
decisions. The ticker that acts on them is :mod:`docket.runtime.schedules`; the stored
record is :class:`docket.records.CronSchedule`; docs/schedules.md has the concepts."""

from docket.schedules.cron import CronSpec, cron_problems, parse_cron, tick_label
from docket.schedules.plan import (
    Step,
    manual_run_id,
    run_id_for,
    schedule_metadata,
    step,
)

__all__ = [
    "CronSpec",
    "Step",
    "cron_problems",
    "manual_run_id",
    "parse_cron",
    "run_id_for",
    "schedule_metadata",
    "step",
    "tick_label",
]
