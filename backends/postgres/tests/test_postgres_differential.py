"""PostgreSQL against the reference: the kit's differential driver, given a factory.

What the streams send, how answers are compared and how a difference is reported is
:mod:`docket_contract_tests.differential`; here each seed gets its own schema on the
session's throwaway server, and the backend's ``clock`` testing seam takes the driver's
manual clock. The kit's own tests check that ``SEEDS`` reach every kind of answer; two
longer streams run here as well.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from docket_contract_tests.differential import SEEDS, run_seed
from docket_postgres import PostgresBackend

from docket.clock import ManualClock


def _factory(url: str, schema: str) -> Callable[[ManualClock], PostgresBackend]:
    def build(clock: ManualClock) -> PostgresBackend:
        return PostgresBackend(url, schema=schema, clock=clock, pool_max_size=2)

    return build


@pytest.mark.parametrize("seed", SEEDS)
def test_same_answers_as_the_reference(
    pg_url: str, schema_name: Callable[[str], str], seed: int
) -> None:
    run_seed(_factory(pg_url, schema_name("diff")), seed)


@pytest.mark.parametrize("seed", [100, 101])
def test_same_answers_over_a_longer_stream(
    pg_url: str, schema_name: Callable[[str], str], seed: int
) -> None:
    run_seed(_factory(pg_url, schema_name("long")), seed, steps=400)
