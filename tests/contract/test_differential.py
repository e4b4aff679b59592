"""The kit's differential driver checks itself: the reference agrees with itself on every
seed, the seeds the backends run reach every kind of answer, a broken backend is caught
with a report naming the seed, the first differing field and the operations, and the
command line says the same."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import attrs
import pytest
from docket_contract_tests import mutants
from docket_contract_tests.differential import (
    SEEDS,
    Divergence,
    first_difference,
    missing_kinds,
    run_seed,
)
from docket_contract_tests.kit import CLOCK_START

from docket.clock import ManualClock
from docket.contract import Backend, ClaimBatch, Lease, StaleCheckpoint
from docket.contract.memory import MemoryBackend
from docket.records import TENANTLESS

ROOT = Path(__file__).resolve().parents[2]


def _reference(clock: ManualClock) -> Backend:
    return MemoryBackend(clock=clock)


def test_the_seeds_the_backends_run_reach_every_kind_of_answer() -> None:
    """A guard against a vacuous comparison. The stream depends only on the seed and the
    reference's answers, so what it reaches against the reference it reaches against any
    backend that agrees; Redis runs the first 30 seeds, the others all of SEEDS."""
    kinds = {seed: run_seed(_reference, seed) for seed in SEEDS}  # also: no self-divergence
    first_30 = set().union(*(kinds[seed] for seed in SEEDS[:30]))
    assert missing_kinds(first_30) == [], f"seeds 0-29 never produced {missing_kinds(first_30)}"


def test_a_seed_replays_exactly() -> None:
    """Transition ids come from the seed too, so a reported seed is a reproduction."""
    calls: list[list[str]] = []
    for _ in range(2):
        try:
            run_seed(mutants.no_token_fence, 0)
        except Divergence as divergence:
            calls.append(list(divergence.calls))
    assert len(calls) == 2 and calls[0] == calls[1]


# Each breaks one rule on a different path: commit fencing, tenant isolation on reads,
# event pages, claim expiry, claim order, abandon fencing.
CAUGHT = [
    "no_token_fence",
    "tenant_leak_on_read",
    "cursor_skips_row",
    "ttl_off_by_one",
    "preference_ignored",
    "abandon_ignores_checkpoint",
]


@pytest.mark.parametrize("name", CAUGHT)
def test_the_driver_catches_a_broken_backend(name: str) -> None:
    factory = getattr(mutants, name)
    for seed in SEEDS:
        try:
            run_seed(factory, seed)
        except Divergence as divergence:
            report = str(divergence)
            assert divergence.seed == seed and f"seed {seed}, step {divergence.step}:" in report
            assert f"first difference at {divergence.path}:" in report
            assert divergence.calls[-1].endswith(divergence.call)
            assert all(f"{n:>4}. " in report for n in range(1, len(divergence.calls) + 1))
            return
    pytest.fail(f"the differential driver never caught the {name} mutant on seeds {SEEDS}")


def test_the_faithful_copy_of_the_reference_is_not_flagged() -> None:
    for seed in SEEDS[:5]:
        run_seed(mutants.control, seed)


def test_the_first_difference_is_a_path_into_the_answer() -> None:
    lease = Lease(
        run_id="r1",
        owner=TENANTLESS,
        graph_id="g",
        graph_hash="h",
        checkpoint_seq=2,
        claim_token="T0",
        claimed_at=CLOCK_START,
        claim_attempt=1,
        orphan_ttl=timedelta(seconds=60),
    )
    reference = ClaimBatch(leases=(lease, lease))
    other = ClaimBatch(leases=(lease, attrs.evolve(lease, claim_attempt=2)))
    assert first_difference(reference, reference) is None
    assert first_difference(reference, other) == ("answer.leases[1].claim_attempt", 1, 2)
    shorter = ClaimBatch(leases=(lease,))
    assert first_difference(reference, shorter) == ("len(answer.leases)", 2, 1)
    fenced = StaleCheckpoint(reason="fence lost")
    assert first_difference(fenced, reference) == ("answer", fenced, reference)
    assert first_difference({"a": 1}, {"a": 1, "b": 2})[0] == "answer['b']"  # type: ignore[index]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "docket_contract_tests.differential", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _tails(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nstdout …{done.stdout[-3000:]}\nstderr …{done.stderr[-3000:]}"


def test_the_command_line_runs_a_url_and_a_factory() -> None:
    agreed = _cli("--backend", "memory://", "--seeds", "3")
    assert agreed.returncode == 0, _tails(agreed)
    assert agreed.stdout.splitlines()[-1] == "differential: 3/3 seeds agree", _tails(agreed)
    broken = _cli(
        "--backend-factory", "docket_contract_tests.mutants:no_token_fence", "--seed", "0"
    )
    assert broken.returncode == 1, _tails(broken)
    assert "seed 0: DIFFERS" in broken.stdout and "first difference at" in broken.stdout, _tails(
        broken
    )
    assert broken.stdout.splitlines()[-1] == "differential: 0/1 seeds agree", _tails(broken)
    unknown = _cli("--backend-factory", "docket_contract_tests.mutants:no_such_thing")
    assert unknown.returncode == 2, _tails(unknown)  # argparse's usage error
    assert "cannot load docket_contract_tests.mutants:no_such_thing" in unknown.stderr, _tails(
        unknown
    )
