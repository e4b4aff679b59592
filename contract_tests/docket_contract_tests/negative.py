"""Negative controls: prove the kit catches every mutant in :mod:`.mutants`,
:mod:`.mutants_promises`, :mod:`.mutants_children`, :mod:`.mutants_time`,
:mod:`.mutants_streams`, :mod:`.mutants_queues` and :mod:`.mutants_admission`.

``python -m docket_contract_tests.negative`` runs the whole kit (in-process
``pytest.main``) against the ``control`` copy of the reference backend, which must pass,
and then against each mutant, which must fail at least one case of an invariant the
mutant is meant to break. It prints one row per mutant (name, caught, the invariant ids
of the failing cases) and, last, ``negative controls: C/K caught``; the exit status is
non-zero unless every mutant was caught and the control passed.

Options: ``--rounds N`` (concurrency repetitions, default 50, never below 50),
``--jobs N`` (mutants run in N worker processes, default: CPU count, max 4),
``--only NAME`` (repeatable), ``-v`` (print each run's pytest output).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

MIN_ROUNDS = 50


@dataclass
class Outcome:
    """What one kit run against one backend factory produced."""

    name: str
    exit_code: int = 0
    passed: int = 0
    failed_ids: list[str] = field(default_factory=list)
    failed_nodes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    output: str = ""


class _Recorder:
    """A pytest plugin object that records each case's result and invariant id."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            ident = dict(report.user_properties).get("docket_invariant")
            self.outcome.failed_ids.append(str(ident or "?"))
            self.outcome.failed_nodes.append(report.nodeid)
        elif report.passed and report.when == "call":
            self.outcome.passed += 1


def run_kit(factory: str, rounds: int, name: str | None = None) -> Outcome:
    """Run the whole kit in this process against ``module:callable``."""
    outcome = Outcome(name=name or factory)
    args = [
        "--pyargs",
        "docket_contract_tests",
        "--docket-backend-factory",
        factory,
        "--docket-rounds",
        str(rounds),
        "-q",
        "--tb=line",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    ]
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        args += ["-p", "docket_contract_tests.plugin"]
    buffer = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        code = pytest.main(args, plugins=[_Recorder(outcome)])
    outcome.seconds = time.monotonic() - started
    outcome.exit_code = int(code)
    outcome.output = buffer.getvalue()
    return outcome


def _run_mutant(job: tuple[str, int]) -> Outcome:
    name, rounds = job
    return run_kit(f"{_registry()[name].__module__}:{name}", rounds, name)


def _registry() -> dict[str, Any]:
    """Every mutant class by factory name; its factory lives in the class's module."""
    from docket_contract_tests.mutants import MUTANTS
    from docket_contract_tests.mutants_admission import ADMISSION_MUTANTS
    from docket_contract_tests.mutants_children import CHILD_MUTANTS
    from docket_contract_tests.mutants_promises import PROMISE_MUTANTS
    from docket_contract_tests.mutants_queues import QUEUE_MUTANTS
    from docket_contract_tests.mutants_streams import STREAM_MUTANTS
    from docket_contract_tests.mutants_time import TIME_MUTANTS

    return {
        **MUTANTS,
        **PROMISE_MUTANTS,
        **CHILD_MUTANTS,
        **TIME_MUTANTS,
        **STREAM_MUTANTS,
        **QUEUE_MUTANTS,
        **ADMISSION_MUTANTS,
    }


def _caught(name: str, outcome: Outcome) -> bool:
    expected = set(_registry()[name].catches)
    # exit code 1 = some cases failed; anything else (usage/collection errors) proves nothing
    return outcome.exit_code == 1 and bool(expected & set(outcome.failed_ids))


def main(argv: Sequence[str] | None = None) -> int:
    from docket_contract_tests.mutants_promises import _mutant_dir

    registry = _registry()

    parser = argparse.ArgumentParser(prog="python -m docket_contract_tests.negative")
    parser.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    parser.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("-v", "--verbose", action="store_true")
    options = parser.parse_args(argv)
    rounds = max(MIN_ROUNDS, options.rounds)
    names = options.only or list(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        parser.error(f"unknown mutant(s): {', '.join(unknown)}")

    started = time.monotonic()
    _mutant_dir()  # made here, so its workers share it and this process removes it
    jobs = [(name, rounds) for name in names]
    if options.jobs > 1 and len(jobs) > 1:
        context = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
        with ProcessPoolExecutor(max_workers=options.jobs, mp_context=context) as pool:
            control_future = pool.submit(run_kit, "docket_contract_tests.mutants:control", rounds)
            outcomes = list(pool.map(_run_mutant, jobs))
            control = control_future.result()
    else:
        control = run_kit("docket_contract_tests.mutants:control", rounds, "control")
        outcomes = [_run_mutant(job) for job in jobs]

    control_ok = control.exit_code == 0 and control.passed > 0 and not control.failed_ids
    print(
        f"{'control':<30} {'passes' if control_ok else 'FAILS'}  "
        f"({control.passed} cases passed in {control.seconds:.1f}s)"
    )
    if not control_ok or options.verbose:
        print(control.output)
    width = max(len(n) for n in names)
    caught = 0
    for name, outcome in zip(names, outcomes, strict=True):
        ok = _caught(name, outcome)
        caught += ok
        ids = sorted(set(outcome.failed_ids))
        expected = registry[name].catches
        note = "" if ok else f"  (expected one of {', '.join(expected)}; exit {outcome.exit_code})"
        print(
            f"{name:<{width}}  caught={'yes' if ok else 'no':<3}  "
            f"{len(outcome.failed_nodes):>3} failed  by {', '.join(ids) or '-'}{note}"
        )
        if options.verbose or not ok:
            print(f"    bug: {registry[name].bug}")
        if options.verbose:
            print(outcome.output)
    print(f"elapsed {time.monotonic() - started:.1f}s, {rounds} rounds per race")
    print(f"negative controls: {caught}/{len(names)} caught")
    return 0 if caught == len(names) and control_ok else 1


if __name__ == "__main__":
    sys.exit(main())
