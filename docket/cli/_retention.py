"""``docket worker --prune-events-after DUR --prune-runs-after DUR [--prune-every DUR]``:
the worker's retention settings from the command line (docket/runtime/retention.py)."""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from docket.cli._messages import parse_duration
from docket.facade import Docket

__all__ = ["add_prune_options", "prune_argv", "with_prune_settings"]

_OPTIONS = (
    ("--prune-events-after", "prune_events_after", "prune events written longer ago (e.g. 7d)"),
    ("--prune-runs-after", "prune_runs_after", "prune runs finished longer ago (e.g. 30d)"),
    ("--prune-every", "prune_every", "how often to prune (default 1h)"),
)


def add_prune_options(worker: argparse.ArgumentParser) -> None:
    for flag, dest, help_text in _OPTIONS:
        worker.add_argument(flag, dest=dest, default=None, metavar="DUR", help=help_text)


def prune_argv(args: argparse.Namespace) -> list[str]:
    """The retention options as given, for a supervisor's worker processes."""
    out: list[str] = []
    for flag, dest, _ in _OPTIONS:
        value = getattr(args, dest)
        if value is not None:
            parse_duration(value, flag)  # refused here, before any process starts
            out += [flag, value]
    return out


def with_prune_settings(docket: Docket, args: argparse.Namespace) -> Docket:
    """``docket`` with the retention options applied to its settings (the app's own
    settings otherwise): the workers it makes read them."""
    given: dict[str, Any] = {
        dest: parse_duration(getattr(args, dest), flag).total_seconds()
        for flag, dest, _ in _OPTIONS
        if getattr(args, dest) is not None
    }
    if given:
        docket.settings = attrs.evolve(docket.settings, **given).validate()
    return docket
