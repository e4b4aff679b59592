"""The queue ledger's rules (``Feature.QUEUES``), written once for every backend.

A limited queue's claims go through slots: :func:`grant` decides how many of a claimer's
requested slots it gets from the queue's config, the slots held now and the rate bucket;
:class:`SlotLedger` is the whole ledger of one queue as plain data, with the four
operations a ``QueueStore`` performs atomically. The memory backend keeps one per queue;
the SQL backends load a queue's row and slots inside their transaction and apply the same
operations; the Redis scripts mirror them in Lua, and the contract kit holds every backend
to the same answers (docs/contract.md#queues).

Times: a slot held until ``expires_at`` still counts at ``expires_at`` and is free
strictly after it (as a claim is expired strictly after ``orphan_ttl``). The bucket holds
``rate.count`` tokens, starts full, refills continuously at ``count / period`` and never
above ``count``; a grant takes one token per slot, and a refunded slot puts its token back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

from docket.contract.proposals import ClaimPolicy
from docket.contract.queries import require_claim_policy
from docket.records import (
    DEFAULT_QUEUE,
    QueueConfig,
    RateLimit,
    queue_config_problems,
    queue_name_problem,
)

#: Tolerance when flooring a token count computed in floating point (a refill that lands
#: on a whole token must grant it on every backend).
TOKEN_EPSILON = 1e-9


def require_queue_name(name: object) -> str:
    problem = queue_name_problem(name)
    if problem:
        raise ValueError(problem)
    assert isinstance(name, str)
    return name


def require_queue_config(config: object) -> QueueConfig:
    problems = queue_config_problems(config)
    if problems:
        raise ValueError("invalid queue config: " + "; ".join(problems))
    assert isinstance(config, QueueConfig)
    return config


def require_slot_request(name: object, holders: Sequence[str], ttl: object) -> None:
    """A malformed ``acquire_slots``/``renew_slots``/``release_slots`` call raises here."""
    require_queue_name(name)
    if isinstance(holders, str) or not all(isinstance(h, str) and h for h in holders):
        raise ValueError("holders: expected a sequence of non-empty strings")
    if len(set(holders)) != len(holders):
        raise ValueError("holders: duplicate holder ids")
    if any(len(h.encode()) > 255 for h in holders):
        raise ValueError("holders: an id is longer than 255 bytes")
    if not isinstance(ttl, timedelta) or ttl < timedelta(0):
        raise ValueError(f"ttl: expected a non-negative timedelta, got {ttl!r}")


def require_fused_request(
    policy: ClaimPolicy, name: object, holders: Sequence[str], release: Sequence[str]
) -> None:
    """A malformed ``claim_with_slots`` call (``SlotClaims``) raises here: the policy, the
    name and both holder lists as their own calls check them, at least one holder, and no
    holder both released and requested."""
    require_claim_policy(policy)
    require_slot_request(name, holders, policy.orphan_ttl)
    require_slot_request(name, release, policy.orphan_ttl)
    if not holders:
        raise ValueError("holders: ask for at least one slot")
    if set(holders) & set(release):
        raise ValueError("holders: a holder is both released and requested")


def refill(rate: RateLimit, tokens: float, refilled_at: datetime, now: datetime) -> float:
    """The bucket's tokens at ``now``, from ``tokens`` at ``refilled_at`` (never above
    ``rate.count``; a clock that went back refills nothing)."""
    elapsed = (now - refilled_at).total_seconds()
    if elapsed <= 0:
        return min(float(rate.count), tokens)
    return min(float(rate.count), tokens + elapsed * rate.per_second)


def grant(config: QueueConfig, live: int, tokens: float | None, want: int) -> int:
    """How many slots of ``want`` a queue grants with ``live`` slots held and ``tokens``
    in its bucket (after refill; ``None`` when it has no rate)."""
    if config.paused or want <= 0:
        return 0
    granted = want
    if config.execution_limit is not None:
        granted = min(granted, config.execution_limit - live)
    if config.rate is not None:
        granted = min(granted, math.floor((tokens or 0.0) + TOKEN_EPSILON))
    return max(0, granted)


def default_config(name: str = DEFAULT_QUEUE) -> QueueConfig:
    return QueueConfig(name=name)


@attrs.define
class SlotLedger:
    """One queue's ledger: config, held slots (holder -> expires_at) and rate bucket."""

    config: QueueConfig
    holders: dict[str, datetime] = attrs.Factory(dict)
    tokens: float = 0.0
    refilled_at: datetime | None = None

    @classmethod
    def new(cls, config: QueueConfig, now: datetime) -> SlotLedger:
        count = float(config.rate.count) if config.rate is not None else 0.0
        return cls(config=config, tokens=count, refilled_at=now)

    def reconfigure(self, config: QueueConfig, now: datetime) -> None:
        """A new config keeps the held slots; a new rate starts full, a changed one keeps
        its tokens (capped at the new size)."""
        old = self.config.rate
        self._refill(now)
        if config.rate is not None:
            self.tokens = (
                float(config.rate.count) if old is None else min(self.tokens, config.rate.count)
            )
        self.config = config
        self.refilled_at = now

    def live(self, now: datetime) -> int:
        """Drop expired slots; the number still held."""
        for holder in [h for h, at in self.holders.items() if at < now]:
            del self.holders[holder]
        return len(self.holders)

    def _refill(self, now: datetime) -> None:
        rate = self.config.rate
        if rate is not None and self.refilled_at is not None:
            self.tokens = refill(rate, self.tokens, self.refilled_at, now)
            self.refilled_at = max(self.refilled_at, now)

    def acquire(self, holders: Sequence[str], ttl: timedelta, now: datetime) -> int:
        live = self.live(now)
        self._refill(now)
        fresh = [h for h in holders if h not in self.holders]
        n = grant(self.config, live, self.tokens if self.config.rate else None, len(fresh))
        for holder in fresh[:n]:
            self.holders[holder] = now + ttl
        if self.config.rate is not None:
            self.tokens -= n
        return n

    def renew(self, holders: Sequence[str], ttl: timedelta, now: datetime) -> int:
        self.live(now)
        held = [h for h in holders if h in self.holders]
        for holder in held:
            self.holders[holder] = now + ttl
        return len(held)

    def release(self, holders: Sequence[str], refund: bool, now: datetime) -> None:
        self.live(now)
        held = [h for h in holders if self.holders.pop(h, None) is not None]
        rate = self.config.rate
        if refund and rate is not None and held:
            self._refill(now)
            self.tokens = min(float(rate.count), self.tokens + len(held))


__all__ = [
    "TOKEN_EPSILON",
    "SlotLedger",
    "default_config",
    "grant",
    "refill",
    "require_fused_request",
    "require_queue_config",
    "require_queue_name",
    "require_slot_request",
]
