"""Redis against the reference: the kit's differential driver, given a Redis factory.

What the streams send, how answers are compared and how a difference is reported is
:mod:`docket_contract_tests.differential`; here each seed gets its own key prefix on the
session's throwaway Redis, or on its throwaway Cluster. The streams use the same run ids
in every owner scope (one tenant id, ``c}{``, breaks naive hash tags), so ``claim_due``
and SYSTEM listings order candidates of several scopes — several cluster nodes — exactly
like the reference. The kit's own tests check that the first 30 of ``SEEDS`` reach every
kind of answer.
"""

from __future__ import annotations

import pytest
from docket_contract_tests.differential import SEEDS, run_seed
from docket_redis import RedisBackend
from docket_redis.testing import RedisCluster, RedisServer, with_prefix


@pytest.mark.parametrize("seed", SEEDS[:30])  # 30, the single server's budget before the driver
def test_same_answers_as_the_reference_on_one_redis(
    redis_single: RedisServer, prefix: str, seed: int
) -> None:
    url = with_prefix(redis_single.url, prefix)
    run_seed(lambda clock: RedisBackend.from_url(url, clock=clock), seed)


@pytest.mark.parametrize("seed", range(1000, 1004))
def test_same_answers_as_the_reference_on_a_cluster(
    redis_cluster_nodes: RedisCluster, prefix: str, seed: int
) -> None:
    url = with_prefix(redis_cluster_nodes.url, prefix)
    run_seed(lambda clock: RedisBackend.from_url(url, clock=clock), seed)
