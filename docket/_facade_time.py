"""The facade's part of durable time: when a run may start, and when it must end.

``start_run(..., start_at=, deadline=, timeout=)`` and the graph policy ``run_timeout_ms``
become the run's first wake and its ``docket.deadline`` metadata. Both need a backend that
declares ``Feature.TIMERS`` (a waiting run with a deadline must be claimable when it
passes); on one that does not, the start is refused and nothing is written.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from docket.contract.capabilities import Capabilities, Feature
from docket.core.waits import with_deadline
from docket.errors import InvalidInput, Unsupported
from docket.graph.compiler import RuntimeGraph
from docket.records import START_AT_KEY, format_timestamp
from docket.values import JSONDict, utc

__all__ = ["RUN_TIMEOUT_POLICY", "require_feature", "run_timing"]

#: Graph policy: every run of the graph gets this deadline (ms after it starts) unless the
#: start names its own.
RUN_TIMEOUT_POLICY = "run_timeout_ms"


def require_feature(capabilities: Capabilities, feature: Feature, what: str) -> None:
    if feature in capabilities.features:
        return
    raise Unsupported(
        f"{what} needs a backend that declares {feature.value!r}; "
        f"backend {capabilities.name or '?'} does not",
        details={"feature": feature.value},
    )


def _aware(name: str, value: object) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInput(
            f"{name} must be an aware datetime",
            phase="init",
            details={"reasons": [f"{name}: expected an aware datetime, got {value!r}"]},
        )
    return utc(value)


def run_timing(
    rtg: RuntimeGraph,
    metadata: JSONDict,
    now: datetime,
    capabilities: Capabilities,
    *,
    start_at: datetime | None,
    deadline: datetime | None,
    timeout: timedelta | None,
) -> tuple[JSONDict, datetime | None]:
    """The run's metadata with its deadline, and its first wake when it starts later
    (``None``: at once). Raises ``InvalidInput`` or ``Unsupported``; writes nothing."""
    if deadline is not None and timeout is not None:
        raise InvalidInput(
            "give a deadline or a timeout, not both",
            phase="init",
            details={"reasons": ["deadline and timeout are both set"]},
        )
    begins = now
    wake: datetime | None = None
    if start_at is not None:
        start = _aware("start_at", start_at)
        if start > now:
            begins, wake = start, start
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
        raise InvalidInput(
            "timeout must be a positive timedelta",
            phase="init",
            details={"reasons": [f"timeout: expected a positive timedelta, got {timeout!r}"]},
        )
    ends = _aware("deadline", deadline) if deadline is not None else None
    if ends is None and timeout is not None:
        ends = begins + timeout
    policy = rtg.policies.get(RUN_TIMEOUT_POLICY)
    if ends is None and isinstance(policy, int) and not isinstance(policy, bool) and policy > 0:
        ends = begins + timedelta(milliseconds=policy)
    if wake is not None or ends is not None:
        require_feature(capabilities, Feature.TIMERS, "a delayed start or a run deadline")
    if ends is not None and ends <= begins:
        raise InvalidInput(
            "the deadline is already past when the run would start",
            phase="init",
            details={"reasons": [f"deadline {ends.isoformat()} <= start {begins.isoformat()}"]},
        )
    if wake is not None:
        metadata = {**metadata, START_AT_KEY: format_timestamp(wake)}
    return (with_deadline(metadata, ends) if ends is not None else metadata), wake
