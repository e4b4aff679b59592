"""The queue ledger's rules (docket.contract.queues): grants, expiry, the rate bucket."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from docket.contract.queues import SlotLedger, grant, refill, require_slot_request
from docket.records import (
    QueueConfig,
    RateLimit,
    queue_config_from_json,
    queue_config_problems,
    queue_config_to_json,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TTL = timedelta(seconds=30)


def test_grant_takes_the_smallest_of_demand_room_and_tokens() -> None:
    limited = QueueConfig(name="q", execution_limit=3)
    assert grant(limited, live=0, tokens=None, want=5) == 3
    assert grant(limited, live=2, tokens=None, want=5) == 1
    assert grant(limited, live=4, tokens=None, want=5) == 0  # over after a lowered limit
    rated = QueueConfig(name="q", rate=RateLimit(count=10, period=timedelta(seconds=1)))
    assert grant(rated, live=0, tokens=2.9999999999, want=5) == 3  # float noise grants
    assert grant(rated, live=0, tokens=2.5, want=5) == 2
    assert grant(QueueConfig(name="q", paused=True), live=0, tokens=None, want=5) == 0


def test_a_slot_counts_until_its_expiry_and_is_free_strictly_after() -> None:
    ledger = SlotLedger.new(QueueConfig(name="q", execution_limit=1), T0)
    assert ledger.acquire(["a"], TTL, T0) == 1
    assert ledger.acquire(["b"], TTL, T0 + TTL) == 0  # at expires_at: still held
    assert ledger.acquire(["b"], TTL, T0 + TTL + timedelta(microseconds=1)) == 1
    assert ledger.renew(["a"], TTL, T0 + TTL * 2) == 0  # expired: never revived


def test_renew_keeps_a_slot_and_release_frees_it() -> None:
    ledger = SlotLedger.new(QueueConfig(name="q", execution_limit=1), T0)
    ledger.acquire(["a"], TTL, T0)
    assert ledger.renew(["a", "ghost"], TTL, T0 + TTL) == 1
    assert ledger.acquire(["b"], TTL, T0 + TTL + timedelta(seconds=1)) == 0
    ledger.release(["a"], refund=False, now=T0 + TTL)
    assert ledger.acquire(["b"], TTL, T0 + TTL) == 1


def test_the_bucket_starts_full_refills_evenly_and_never_overflows() -> None:
    rate = RateLimit(count=4, period=timedelta(seconds=2))  # 2 tokens a second
    ledger = SlotLedger.new(QueueConfig(name="q", rate=rate), T0)
    assert ledger.acquire([f"a{i}" for i in range(6)], TTL, T0) == 4  # the burst
    assert ledger.acquire(["b"], TTL, T0 + timedelta(milliseconds=400)) == 0
    assert ledger.acquire(["b", "c"], TTL, T0 + timedelta(milliseconds=1000)) == 2
    assert refill(rate, 0.0, T0, T0 + timedelta(hours=1)) == 4.0
    assert refill(rate, 1.0, T0, T0 - timedelta(seconds=5)) == 1.0  # the clock went back


def test_a_refund_returns_unused_tokens_up_to_the_bucket_size() -> None:
    rate = RateLimit(count=2, period=timedelta(seconds=60))
    ledger = SlotLedger.new(QueueConfig(name="q", rate=rate), T0)
    assert ledger.acquire(["a", "b"], TTL, T0) == 2
    ledger.release(["a"], refund=True, now=T0)
    ledger.release(["ghost"], refund=True, now=T0)  # never held: no token
    assert ledger.tokens == 1.0
    assert ledger.acquire(["c", "d"], TTL, T0) == 1


def test_reconfiguring_keeps_held_slots_and_caps_tokens() -> None:
    ledger = SlotLedger.new(QueueConfig(name="q", execution_limit=5), T0)
    ledger.acquire(["a", "b", "c"], TTL, T0)
    ledger.reconfigure(QueueConfig(name="q", execution_limit=2), T0)
    assert ledger.acquire(["d"], TTL, T0) == 0  # three held, the limit is two
    ledger.reconfigure(
        QueueConfig(name="q", execution_limit=9, rate=RateLimit(count=1, period=TTL)), T0
    )
    assert ledger.tokens == 1.0  # a new rate starts full
    assert ledger.acquire(["d", "e"], TTL, T0) == 1


def test_configs_round_trip_and_bad_ones_are_explained() -> None:
    config = QueueConfig(
        name="billing.v2", execution_limit=5, rate=RateLimit(count=20, period=TTL), paused=True
    )
    assert queue_config_from_json(queue_config_to_json(config)) == config
    bad = QueueConfig(
        name="no spaces",
        execution_limit=0,
        rate=RateLimit(count=0, period=timedelta(0)),
    )
    problems = queue_config_problems(bad)
    assert len(problems) == 4, problems
    sub_ms = QueueConfig(name="q", rate=RateLimit(count=1, period=timedelta(microseconds=500)))
    assert queue_config_problems(sub_ms) == [
        "rate.period: expected at least 1 ms, got datetime.timedelta(microseconds=500)"
    ]
    odd = QueueConfig(name="q", rate=RateLimit(count=1, period=timedelta(microseconds=1500)))
    assert len(queue_config_problems(odd)) == 1  # would not round-trip its storage
    with pytest.raises(ValueError, match="queue config"):
        queue_config_from_json(b'{"name": "q", "execution_limit": -1, "paused": false}')


@pytest.mark.parametrize(
    ("name", "holders", "ttl"),
    [
        ("", ["a"], TTL),
        ("q", ["a", "a"], TTL),
        ("q", [""], TTL),
        ("q", "ab", TTL),
        ("q", ["a"], timedelta(seconds=-1)),
    ],
)
def test_malformed_slot_requests_raise(name: str, holders: list[str], ttl: timedelta) -> None:
    with pytest.raises(ValueError):
        require_slot_request(name, holders, ttl)
