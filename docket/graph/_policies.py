"""Node and graph policies as the compiler reads them (layer 2): ``node_policies`` resolves
a node's ``timeout_ms``/``retry``/``max_concurrency``/``limiter``; ``max_supersteps`` is the graph's
superstep limit, capped by the host's ceiling. The validator reports what these find;
lowering uses what they resolve to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, cast

from docket.graph.nodes import NodePolicies, RetryPolicy
from docket.records import priority_problem, queue_name_problem
from docket.values import JSONValue

__all__ = ["node_policies", "queue_policies"]

_MAX_SUPERSTEPS: Final = "max_supersteps"
#: Graph-level defaults for a run's named queue and priority there (``start_run``
#: overrides them; docs/queues.md).
QUEUE_POLICY: Final = "queue"
PRIORITY_POLICY: Final = "priority"
#: A node's cross-worker limiter: the name of a queue whose ledger its attempts take
#: slots in (docs/queues.md#limiting-node-executions).
LIMITER_POLICY: Final = "limiter"


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_RETRY_KEYS: Final = frozenset({"max_attempts", "backoff_ms"})


def node_policies(policies: Mapping[str, JSONValue]) -> tuple[NodePolicies, list[tuple[str, str]]]:
    """Resolve a node's policies; every problem is a ``(policy key, message)`` pair.

        ``timeout_ms``: a positive integer or absent/``None`` (the host default applies).
        ``retry``: absent/``None`` or ``{"max_attempts": int >= 1, "backoff_ms": int >= 0}``
        (defaults 1 and 0). ``max_concurrency``: a positive integer or absent/``None`` (no
        limit): at most that many attempts of the node run at once in one worker process
        (``docket.runtime.gates``). ``limiter``: a queue name or absent/``None``: each attempt
    takes a slot of that queue's ledger across every worker (``docket.runtime.limiters``).
    ``on_error`` is reserved. Other keys are ignored.
    """
    problems: list[tuple[str, str]] = []
    if "on_error" in policies:
        problems.append(("on_error", "the on_error policy is reserved and not supported"))
    raw_timeout, timeout = policies.get("timeout_ms"), None
    if _positive_int(raw_timeout):
        timeout = cast(int, raw_timeout)
    elif raw_timeout is not None:
        problems.append(
            ("timeout_ms", f"timeout_ms must be a positive integer, got {raw_timeout!r}")
        )
    raw_limit, limit = policies.get("max_concurrency"), None
    if _positive_int(raw_limit):
        limit = cast(int, raw_limit)
    elif raw_limit is not None:
        problems.append(
            (
                "max_concurrency",
                f"max_concurrency must be a positive integer, got {raw_limit!r}",
            )
        )
    raw_limiter, limiter = policies.get(LIMITER_POLICY), None
    if raw_limiter is not None and (problem := queue_name_problem(raw_limiter)):
        problems.append((LIMITER_POLICY, f"limiter must be a queue name: {problem}"))
    elif raw_limiter is not None:
        limiter = cast(str, raw_limiter)
    retry, raw = RetryPolicy(), policies.get("retry")
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - _RETRY_KEYS)
        if unknown:
            problems.append(("retry", f"retry policy has unknown keys {unknown}"))
        values: dict[str, int] = {}
        for key, low in (("max_attempts", 1), ("backoff_ms", 0)):
            value = raw.get(key, low)
            if not _int(value):
                problems.append(("retry", f"retry {key} must be an integer, got {value!r}"))
            elif cast(int, value) < low:
                problems.append(("retry", f"retry {key} must be at least {low}, got {value!r}"))
            else:
                values[key] = cast(int, value)
        retry = RetryPolicy(**values)
    elif raw is not None:
        problems.append(("retry", f"retry must be a map of max_attempts/backoff_ms, got {raw!r}"))
    return NodePolicies(timeout, retry, limit, limiter), problems


def _resolve_limit(policy: JSONValue, host: int | None) -> int | None:
    own = cast(int, policy) if _positive_int(policy) else None
    if own is None:
        return host
    return own if host is None else min(own, host)


def queue_policies(
    policies: Mapping[str, JSONValue],
) -> tuple[str | None, int | None, list[tuple[str, str]]]:
    """A graph's ``queue`` and ``priority`` policies (``None`` when absent) and every
    problem as a ``(policy key, message)`` pair (a problem's value reads as absent)."""
    problems: list[tuple[str, str]] = []
    queue, priority = policies.get(QUEUE_POLICY), policies.get(PRIORITY_POLICY)
    if queue is not None and (problem := queue_name_problem(queue)):
        problems.append((QUEUE_POLICY, problem))
        queue = None
    if priority is not None and (problem := priority_problem(priority)):
        problems.append((PRIORITY_POLICY, problem))
        priority = None
    return cast("str | None", queue), cast("int | None", priority), problems
