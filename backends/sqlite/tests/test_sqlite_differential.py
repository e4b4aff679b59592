"""SQLite against the reference: the kit's differential driver, given a SQLite factory.

What the streams send, how answers are compared and how a difference is reported is
:mod:`docket_contract_tests.differential`; here each seed gets a fresh store, in memory
(every seed of ``SEEDS``) or in a WAL file (a few more seeds). The kit's own tests check
that ``SEEDS`` reach every kind of answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docket_contract_tests.differential import SEEDS, run_seed
from docket_sqlite import SQLiteBackend

from docket.clock import ManualClock


@pytest.mark.parametrize("seed", SEEDS)
def test_same_answers_as_the_reference_in_memory(seed: int) -> None:
    run_seed(lambda clock: SQLiteBackend(":memory:", clock=clock), seed)


@pytest.mark.parametrize("seed", range(1000, 1003))
def test_same_answers_as_the_reference_on_a_file(tmp_path: Path, seed: int) -> None:
    def on_a_file(clock: ManualClock) -> SQLiteBackend:
        return SQLiteBackend(tmp_path / "twin.db", clock=clock, synchronous="NORMAL")

    run_seed(on_a_file, seed)
