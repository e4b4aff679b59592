"""The contract kit checks itself: it passes on the reference backend, it names the
invariant a broken backend fails, and it stays out of runs that did not ask for it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import attrs
from docket_contract_tests.mutants import MUTANTS

from docket.clock import Clock
from docket.contract import Backend, Capabilities, Feature, Limits
from docket.contract.feed import FeedHub
from docket.contract.memory import MemoryBackend

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_there_are_at_least_twelve_negative_controls() -> None:
    # The controls themselves run as their own step of `make test`
    # (python -m docket_contract_tests.negative, which exits non-zero on a miss);
    # running them again here would double the suite's slowest step.
    assert len(MUTANTS) >= 12


def test_kit_passes_on_the_memory_backend() -> None:
    done = _run(
        "-m",
        "pytest",
        "--pyargs",
        "docket_contract_tests",
        "--docket-backend",
        "memory://",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    summary = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, summary
    assert int(passed.group(1)) >= 60, summary
    assert "failed" not in summary and "error" not in summary, summary


def test_kit_is_not_collected_without_a_backend() -> None:
    done = _run("-m", "pytest", "--pyargs", "docket_contract_tests", "-q", "-p", "no:cacheprovider")
    assert done.returncode == 5, done.stdout + done.stderr  # pytest: no tests collected
    assert "its cases were not collected" in done.stdout


def test_invariant_selection_and_node_ids() -> None:
    done = _run(
        "-m",
        "pytest",
        "--pyargs",
        "docket_contract_tests",
        "--docket-backend",
        "memory://",
        "--docket-invariant",
        "CLAIM-TTL-BOUNDARY",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert ids and all("[CLAIM-TTL-BOUNDARY" in line for line in ids), ids


def test_a_mutant_failure_names_its_invariant() -> None:
    done = _run(
        "-m",
        "pytest",
        "--pyargs",
        "docket_contract_tests",
        "--docket-backend-factory",
        "docket_contract_tests.mutants:ttl_off_by_one",
        "--docket-invariant",
        "CLAIM-TTL-BOUNDARY",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[CLAIM-TTL-BOUNDARY]" in done.stdout


def test_a_reopen_that_is_never_due_is_caught() -> None:
    done = _run(
        "-m",
        "pytest",
        "--pyargs",
        "docket_contract_tests",
        "--docket-backend-factory",
        "docket_contract_tests.mutants:reopen_never_due",
        "--docket-invariant",
        "T-REOPEN-1",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[T-REOPEN-1]" in done.stdout and "OPERATIONAL-TUPLE-AUDIT" in done.stdout


def test_a_store_that_loses_a_parked_childs_task_fields_is_caught() -> None:
    done = _run(
        "-m",
        "pytest",
        "--pyargs",
        "docket_contract_tests",
        "--docket-backend-factory",
        "docket_contract_tests.mutants_children:drops_task_metadata",
        "--docket-invariant",
        "CHILD-PARK-ROUNDTRIP",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[CHILD-PARK-ROUNDTRIP] fetch_run: the parked parent" in done.stdout
    assert "child_runs: declared, FAILED by CHILD-PARK-ROUNDTRIP" in done.stdout


def test_every_child_mutant_is_a_negative_control() -> None:
    from docket_contract_tests.mutants_children import CHILD_MUTANTS
    from docket_contract_tests.negative import _registry

    assert len(CHILD_MUTANTS) >= 4
    assert set(CHILD_MUTANTS) <= set(_registry())
    assert all(
        m.catches and all(c.startswith("CHILD-") for c in m.catches) for m in CHILD_MUTANTS.values()
    )


def test_the_summary_says_which_features_were_declared_and_how_they_went() -> None:
    features = "FEATURE-PRUNE,FEATURE-DURABLE-REOPEN,FEATURE-DURABLE-FSYNC"
    common = ["--docket-invariant", features, "-q", "-p", "no:cacheprovider"]
    kit = ["-m", "pytest", "--pyargs", "docket_contract_tests"]
    done = _run(*kit, "--docket-backend", "memory://", *common)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "docket contract kit: optional features" in done.stdout
    assert "prune: declared, passed (cases FEATURE-PRUNE)" in done.stdout
    assert "durable: not declared (not checked; cases FEATURE-DURABLE-REOPEN)" in done.stdout
    assert "claim.fair: no kit case ran for it" in done.stdout
    mutant = "docket_contract_tests.mutants_promises:claims_durable"
    done = _run(*kit, "--docket-backend-factory", mutant, *common)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "durable: declared, FAILED by FEATURE-DURABLE-REOPEN" in done.stdout


def test_every_time_mutant_is_a_negative_control() -> None:
    from docket_contract_tests.mutants_time import TIME_MUTANTS
    from docket_contract_tests.negative import _registry

    assert len(TIME_MUTANTS) >= 12
    assert set(TIME_MUTANTS) <= set(_registry())
    prefixes = ("TIMER-", "MESSAGE-", "SCHED-")
    assert all(
        m.catches and all(c.startswith(prefixes) for c in m.catches) for m in TIME_MUTANTS.values()
    )


STREAM_IDS = (
    "STREAM-BAD-INPUT, STREAM-EMISSION-BOUND, STREAM-EMISSION-ORDER, "
    "STREAM-NOTICE-AFTER-COMMIT, STREAM-NOTICE-REFUSED, STREAM-SCOPE, STREAM-SUBSCRIPTION-CLOSE"
)


class _WithoutStreams(MemoryBackend):
    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return attrs.evolve(caps, features=caps.features - {Feature.STREAMS})


def memory_without_streams(clock: Clock | None = None, limits: Limits | None = None) -> Backend:
    """The memory backend declaring everything but ``streams`` (a kit factory)."""
    return _WithoutStreams(clock=clock, limits=limits)


def test_every_stream_mutant_is_a_negative_control() -> None:
    from docket_contract_tests.mutants_streams import STREAM_MUTANTS
    from docket_contract_tests.negative import _registry

    assert len(STREAM_MUTANTS) >= 6
    assert set(STREAM_MUTANTS) <= set(_registry())
    assert all(
        m.catches and all(c.startswith("STREAM-") for c in m.catches)
        for m in STREAM_MUTANTS.values()
    )


def test_the_stream_cases_pass_on_memory_and_name_what_a_broken_feed_breaks() -> None:
    ids = STREAM_IDS.replace(" ", "")
    common = ["--docket-invariant", ids, "-q", "-p", "no:cacheprovider"]
    kit = ["-m", "pytest", "--pyargs", "docket_contract_tests"]
    done = _run(*kit, "--docket-backend", "memory://", *common)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"streams: declared, passed (cases {STREAM_IDS})" in done.stdout
    mutant = "docket_contract_tests.mutants_streams:notice_on_refused"
    done = _run(*kit, "--docket-backend-factory", mutant, *common)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[STREAM-NOTICE-REFUSED] after refused transitions: notice" in done.stdout
    assert "streams: declared, FAILED by STREAM-NOTICE-REFUSED" in done.stdout


def test_the_stream_cases_check_nothing_when_streams_is_not_declared() -> None:
    done = _run(
        "-m",
        "pytest",
        "--pyargs",
        "docket_contract_tests",
        "--docket-backend-factory",
        "tests.test_contract_kit_meta:memory_without_streams",
        "--docket-invariant",
        STREAM_IDS.replace(" ", ""),
        "-q",
        "-p",
        "no:cacheprovider",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"streams: not declared (not checked; cases {STREAM_IDS})" in done.stdout


class _SmallFeed(MemoryBackend):
    def __init__(self, clock: Clock | None = None, limits: Limits | None = None) -> None:
        super().__init__(clock=clock, limits=limits)
        self.feed = FeedHub(limit=2)  # a reader that falls behind overflows at once


def memory_with_a_small_feed(clock: Clock | None = None, limits: Limits | None = None) -> Backend:
    """The memory backend whose subscriptions keep at most two items (a kit factory)."""
    return _SmallFeed(clock=clock, limits=limits)


def test_a_subscription_that_overflowed_answers_nothing_once_closed() -> None:
    # FeedHub kept the overflow flag through close, so get on a closed subscription
    # that had fallen behind answered a run_id=None notice instead of nothing.
    done = _run(
        "-m",
        "pytest",
        "--pyargs",
        "docket_contract_tests",
        "--docket-backend-factory",
        "tests.test_contract_kit_meta:memory_with_a_small_feed",
        "--docket-invariant",
        "STREAM-SUBSCRIPTION-CLOSE",
        "-q",
        "-p",
        "no:cacheprovider",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "streams: declared, passed (cases STREAM-SUBSCRIPTION-CLOSE)" in done.stdout


QUEUE_IDS = (
    "QUEUE-BAD-INPUT, QUEUE-CONFIG, QUEUE-FIFO, QUEUE-FILTER, QUEUE-LIMIT, QUEUE-PAUSE, "
    "QUEUE-PRIORITY, QUEUE-RATE, QUEUE-SLOT-RETURN, QUEUE-START"
)


class _WithoutQueues(MemoryBackend):
    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return attrs.evolve(caps, features=caps.features - {Feature.QUEUES})


def memory_without_queues(clock: Clock | None = None, limits: Limits | None = None) -> Backend:
    """The memory backend declaring everything but ``queues`` (a kit factory)."""
    return _WithoutQueues(clock=clock, limits=limits)


def test_every_queue_mutant_is_a_negative_control() -> None:
    from docket_contract_tests.mutants_queues import QUEUE_MUTANTS
    from docket_contract_tests.negative import _registry

    assert len(QUEUE_MUTANTS) >= 11
    assert set(QUEUE_MUTANTS) <= set(_registry())
    assert all(
        m.catches and all(c.startswith("QUEUE-") for c in m.catches) for m in QUEUE_MUTANTS.values()
    )


def test_the_queue_cases_pass_on_memory_and_name_what_a_broken_ledger_breaks() -> None:
    ids = QUEUE_IDS.replace(" ", "")
    common = ["--docket-invariant", ids, "-q", "-p", "no:cacheprovider"]
    kit = ["-m", "pytest", "--pyargs", "docket_contract_tests"]
    done = _run(*kit, "--docket-backend", "memory://", *common)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"queues: declared, passed (cases {QUEUE_IDS})" in done.stdout
    mutant = "docket_contract_tests.mutants_queues:limit_off_by_one"
    limit = ["--docket-invariant", "QUEUE-LIMIT", "-q", "-p", "no:cacheprovider"]
    done = _run(*kit, "--docket-backend-factory", mutant, *limit)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[QUEUE-LIMIT] round 0: 4 slots held at once in a queue limited to 3" in done.stdout
    assert "queues: declared, FAILED by QUEUE-LIMIT" in done.stdout


def test_the_queue_cases_check_nothing_when_queues_is_not_declared() -> None:
    # a backend written before queues (like the KV adapter) still passes the kit
    done = _run(
        "-m",
        "pytest",
        "--pyargs",
        "docket_contract_tests",
        "--docket-backend-factory",
        "tests.test_contract_kit_meta:memory_without_queues",
        "--docket-invariant",
        QUEUE_IDS.replace(" ", ""),
        "-q",
        "-p",
        "no:cacheprovider",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"queues: not declared (not checked; cases {QUEUE_IDS})" in done.stdout


ADMISSION_IDS = (
    "ADMIT-AGAIN, ADMIT-BAD-INPUT, ADMIT-DROP, ADMIT-FIND, ADMIT-FINISH, ADMIT-LIMIT, "
    "ADMIT-ORDER, ADMIT-RAISE, ADMIT-START-BYTES, ADMIT-STATUS, ADMIT-TENANT"
)


class _WithoutAdmission(MemoryBackend):
    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return attrs.evolve(caps, features=caps.features - {Feature.ADMISSION})


def memory_without_admission(clock: Clock | None = None, limits: Limits | None = None) -> Backend:
    """The memory backend declaring everything but ``admission`` (a kit factory)."""
    return _WithoutAdmission(clock=clock, limits=limits)


def test_every_admission_mutant_is_a_negative_control() -> None:
    from docket_contract_tests.mutants_admission import ADMISSION_MUTANTS
    from docket_contract_tests.negative import _registry

    assert len(ADMISSION_MUTANTS) >= 11
    assert set(ADMISSION_MUTANTS) <= set(_registry())
    assert all(
        m.catches and all(c.startswith("ADMIT-") for c in m.catches)
        for m in ADMISSION_MUTANTS.values()
    )


def test_the_admission_cases_pass_on_memory_and_name_what_an_over_admitting_ledger_breaks() -> None:
    ids = ADMISSION_IDS.replace(" ", "")
    common = ["--docket-invariant", ids, "-q", "-p", "no:cacheprovider"]
    kit = ["-m", "pytest", "--pyargs", "docket_contract_tests"]
    done = _run(*kit, "--docket-backend", "memory://", *common)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"admission: declared, passed (cases {ADMISSION_IDS})" in done.stdout
    mutant = "docket_contract_tests.mutants_admission:over_admit_by_one"
    limit = ["--docket-invariant", "ADMIT-LIMIT", "-q", "-p", "no:cacheprovider"]
    done = _run(*kit, "--docket-backend-factory", mutant, *limit)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "[ADMIT-LIMIT] round 0: starts admitted of 8 racing" in done.stdout
    assert "admission: declared, FAILED by ADMIT-LIMIT" in done.stdout


def test_the_admission_cases_check_nothing_when_admission_is_not_declared() -> None:
    # a backend written before admission limits (like the LMDB example) still passes
    done = _run(
        "-m",
        "pytest",
        "--pyargs",
        "docket_contract_tests",
        "--docket-backend-factory",
        "tests.test_contract_kit_meta:memory_without_admission",
        "--docket-invariant",
        ADMISSION_IDS.replace(" ", ""),
        "-q",
        "-p",
        "no:cacheprovider",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"admission: not declared (not checked; cases {ADMISSION_IDS})" in done.stdout
