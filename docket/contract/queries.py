"""Shared checks of queries and policies, and the portable claim selection order.

Malformed queries and policies are programmer errors: they raise ``ValueError`` or
``TypeError`` (they never reach storage). :func:`select_claims` is the one statement
of which due runs a ``claim_due`` call takes, for backends that select in Python.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from docket.contract.proposals import (
    AbandonPolicy,
    ClaimClass,
    ClaimPolicy,
    EventListQuery,
    GraphListQuery,
    RunListQuery,
)
from docket.records import DURABLE_STATUSES, GraphVersionCursor, RunCursor, queue_name_problem
from docket.values import utc


def _positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _aware(name: str, value: object) -> None:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got {value!r}")


def require_run_id(run_id: object) -> str:
    """``run_id`` itself when it is a string; a store operation given anything else
    raises ``TypeError`` (a caller's bug, not a stored state)."""
    if not isinstance(run_id, str):
        raise TypeError(f"run_id must be a string, got {type(run_id).__name__}")
    return run_id


def require_seq(seq: object) -> None:
    _positive("seq", seq)


def require_claim_policy(policy: ClaimPolicy) -> None:
    if not isinstance(policy, ClaimPolicy):
        raise TypeError(f"expected ClaimPolicy, got {type(policy).__name__}")
    _positive("limit", policy.limit)
    _positive("max_claim_attempts", policy.max_claim_attempts)
    if not isinstance(policy.orphan_ttl, timedelta) or policy.orphan_ttl < timedelta(0):
        raise ValueError(f"orphan_ttl must be a non-negative timedelta, got {policy.orphan_ttl!r}")
    if policy.preference is not None and not isinstance(policy.preference, ClaimClass):
        raise ValueError(f"preference must be a ClaimClass or None, got {policy.preference!r}")
    if policy.now is not None:
        _aware("now", policy.now)
    queues = policy.queues
    if queues is not None:
        if not isinstance(queues, frozenset) or not queues:
            raise ValueError(f"queues must be a non-empty frozenset or None, got {queues!r}")
        for name in queues:
            problem = queue_name_problem(name)
            if problem:
                raise ValueError(problem)


def require_abandon_policy(policy: AbandonPolicy, now: datetime) -> None:
    if not isinstance(policy, AbandonPolicy):
        raise TypeError(f"expected AbandonPolicy, got {type(policy).__name__}")
    seq = policy.expected_checkpoint_seq
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise ValueError(f"expected_checkpoint_seq must be a non-negative integer, got {seq!r}")
    _positive("max_claim_abandons", policy.max_claim_abandons)
    _aware("retry_at", policy.retry_at)
    if policy.retry_at < now:
        raise ValueError(f"retry_at {policy.retry_at.isoformat()} is before now {now.isoformat()}")
    backoff = policy.backoff
    if backoff is not None and not (
        isinstance(backoff.base, timedelta)
        and isinstance(backoff.cap, timedelta)
        and timedelta(0) < backoff.base <= backoff.cap
    ):
        raise ValueError("backoff needs 0 < base <= cap")


def require_run_query(query: RunListQuery) -> None:
    if not isinstance(query, RunListQuery):
        raise TypeError(f"expected RunListQuery, got {type(query).__name__}")
    _positive("limit", query.limit)
    if query.before is not None and not isinstance(query.before, RunCursor):
        raise TypeError("before must be a RunCursor or None")
    if query.statuses is not None and (
        not isinstance(query.statuses, frozenset)
        or not query.statuses
        or not query.statuses <= DURABLE_STATUSES
    ):
        raise ValueError("statuses must be None or a non-empty frozenset of durable statuses")
    for name in ("graph_id", "graph_hash"):
        if getattr(query, name) is not None and not isinstance(getattr(query, name), str):
            raise TypeError(f"{name} must be a string or None")


def require_event_query(query: EventListQuery) -> None:
    if not isinstance(query, EventListQuery):
        raise TypeError(f"expected EventListQuery, got {type(query).__name__}")
    _positive("limit", query.limit)
    after = query.after_seq
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise ValueError(f"after_seq must be a non-negative integer, got {after!r}")


def require_graph_query(query: GraphListQuery) -> None:
    if not isinstance(query, GraphListQuery):
        raise TypeError(f"expected GraphListQuery, got {type(query).__name__}")
    _positive("limit", query.limit)
    if query.before is not None and not isinstance(query.before, GraphVersionCursor):
        raise TypeError("before must be a GraphVersionCursor or None")


def abandon_wake(policy: AbandonPolicy, abandons: int, now: datetime) -> datetime:
    """When a run handed back by ``abandon_claim`` (not poisoned) is due again.

    ``abandons`` is the run's count before this hand-back. With ``non_poisoning`` and a
    ``backoff``: ``now + min(base * 2**abandons, cap)`` (the exponent stops at 30, so
    the product stays in range); otherwise ``retry_at``.
    """
    backoff = policy.backoff
    if policy.non_poisoning and backoff is not None:
        return now + min(backoff.base * (1 << min(abandons, 30)), backoff.cap)
    return utc(policy.retry_at)


C = TypeVar("C", bound=tuple[datetime, str, str | None])


def select_claims(
    ready: Sequence[C],
    expired: Sequence[C],
    limit: int,
    preference: ClaimClass | None,
    priority: Callable[[C], int] | None = None,
) -> list[C]:
    """Which candidates one ``claim_due`` takes; candidates are ``(eligible_at, run_id, tenant)``.

    ``eligible_at`` is the wake for ready runs and the claim time for expired ones.
    Ties break on ``(eligible_at, run_id, tenant)``. With a demand of one, the preferred
    class goes first and an empty class never wastes the demand; with a demand of two
    or more and both classes present, each class is guaranteed one outcome, then the
    rest goes oldest first. ``priority`` (``Feature.QUEUES``) gives a candidate's run
    priority: higher goes first, ahead of ``eligible_at`` (strict: see
    docs/execution.md#priorities for starvation).
    """

    def order(c: C) -> tuple[int, datetime, str, str]:
        return (-priority(c) if priority else 0, c[0], c[1], c[2] or "")

    ready_sorted = sorted(ready, key=order)
    expired_sorted = sorted(expired, key=order)
    merged = sorted([*ready_sorted, *expired_sorted], key=order)
    if limit == 1 and preference is not None:
        first, second = (
            (ready_sorted, expired_sorted)
            if preference is ClaimClass.READY
            else (expired_sorted, ready_sorted)
        )
        return (first or second)[:1]
    if limit >= 2 and ready_sorted and expired_sorted:
        chosen = [ready_sorted[0], expired_sorted[0]]
        rest = [c for c in merged if c is not ready_sorted[0] and c is not expired_sorted[0]]
        return sorted(chosen + rest[: limit - 2], key=order)
    return merged[:limit]


__all__ = [
    "abandon_wake",
    "require_abandon_policy",
    "require_claim_policy",
    "require_event_query",
    "require_graph_query",
    "require_run_id",
    "require_run_query",
    "require_seq",
    "select_claims",
]
