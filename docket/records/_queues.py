"""Named queues as stored records (layer 1): a queue's limits and what a store reports.

A run names one queue when it starts (``InitProposal.queue``, ``"default"`` unless told)
and a priority within it. A queue's :class:`QueueConfig` says how much of it may run at
once across every worker (``execution_limit``: runs holding a claim), how fast claims may
be handed out (``rate``: a token bucket kept by the backend) and whether it is paused.
The store keeps the configs and the slot ledger; the rules that decide a grant are
:mod:`docket.contract.queues`, one implementation for every backend.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

import attrs

from docket.values import JSONDict, canonical_json

#: The queue a run joins when it names none; it exists without being configured.
DEFAULT_QUEUE: Final = "default"
#: Priorities a run may carry; higher is claimed first, FIFO (by due time) within one.
MIN_PRIORITY: Final = -100
MAX_PRIORITY: Final = 100
#: A queue name: 1-64 characters of letters, digits, ``_ . - :``.
QUEUE_NAME: Final = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def queue_name_problem(name: object) -> str | None:
    """Why ``name`` is not a queue name, or ``None``."""
    if not isinstance(name, str) or QUEUE_NAME.fullmatch(name) is None:
        return f"queue: expected 1-64 characters of letters, digits, '_.-:', got {name!r}"
    return None


def priority_problem(priority: object) -> str | None:
    """Why ``priority`` is not a run priority, or ``None``."""
    if (
        not isinstance(priority, int)
        or isinstance(priority, bool)
        or not MIN_PRIORITY <= priority <= MAX_PRIORITY
    ):
        return f"priority: expected an integer {MIN_PRIORITY}..{MAX_PRIORITY}, got {priority!r}"
    return None


@attrs.frozen(kw_only=True)
class RateLimit:
    """At most ``count`` claims per ``period``, as a bucket of ``count`` tokens refilled
    evenly over ``period`` (so a burst of ``count`` is allowed after a quiet period)."""

    count: int
    period: timedelta

    @property
    def per_second(self) -> float:
        return self.count / self.period.total_seconds()


@attrs.frozen(kw_only=True)
class QueueConfig:
    """One queue's limits. ``None`` means unlimited; a paused queue hands out no claims
    (runs already claimed finish their step; nothing new starts executing).

    ``admission_limit`` (``Feature.ADMISSION``) caps the queue's *unfinished* runs: a run
    started beyond it is held by the store, not yet initialised, until an admitted run
    finishes. ``tenant_admission_limit`` caps them per tenant (owner scope) within the
    queue, on top of the queue-wide cap. Pausing does not stop admission."""

    name: str
    execution_limit: int | None = None
    rate: RateLimit | None = None
    paused: bool = False
    admission_limit: int | None = None
    tenant_admission_limit: int | None = None

    @property
    def admission_limited(self) -> bool:
        """Whether a start in this queue must be admitted by the store first."""
        return self.admission_limit is not None or self.tenant_admission_limit is not None

    @property
    def limited(self) -> bool:
        """Whether a claim in this queue must take a slot from the ledger first."""
        return self.paused or self.execution_limit is not None or self.rate is not None


@attrs.frozen(kw_only=True)
class QueueStatus:
    """What ``list_queues`` reports: the config, the slots held now (``running``: claims
    counted against the limit) and ``depth`` (runs of the queue due now and unclaimed).
    With ``Feature.ADMISSION``: ``admitted`` (runs counted against the admission limit)
    and ``held`` (starts waiting to be admitted); 0 elsewhere."""

    config: QueueConfig
    running: int
    depth: int
    admitted: int = 0
    held: int = 0


class Admission(StrEnum):
    """What ``admit`` answers for a start."""

    ADMITTED = "admitted"  # counted against the limits: initialise the run now
    HELD = "held"  # kept by the store until an admitted run of the queue finishes


@attrs.frozen(kw_only=True)
class HeldStart:
    """A start the admission ledger keeps: held (waiting), or admitted (counted) until its
    run finishes. ``start`` is opaque to the store (the runtime's encoding of the
    initialising proposal); ``seq`` orders starts of one queue (FIFO within a priority)."""

    queue: str
    run_id: str
    tenant: str | None
    priority: int
    seq: int
    start: bytes
    at: datetime  # when it was held, or admitted


@attrs.frozen(kw_only=True)
class AdmissionView:
    """One queue's admission ledger: every admitted start (by ``seq``) and the held ones
    in promotion order (priority, highest first, then ``seq``), at most ``limit`` each."""

    admitted: tuple[HeldStart, ...]
    held: tuple[HeldStart, ...]


def queue_config_problems(config: object) -> list[str]:
    """Every reason ``config`` cannot be stored (empty when it can)."""
    if not isinstance(config, QueueConfig):
        return [f"expected QueueConfig, got {type(config).__name__}"]
    problems = [p for p in (queue_name_problem(config.name),) if p]
    limit = config.execution_limit
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        problems.append(f"execution_limit: expected a positive integer or None, got {limit!r}")
    rate = config.rate
    if rate is not None:
        if not isinstance(rate, RateLimit):
            problems.append(f"rate: expected RateLimit or None, got {rate!r}")
        else:
            if not isinstance(rate.count, int) or isinstance(rate.count, bool) or rate.count < 1:
                problems.append(f"rate.count: expected a positive integer, got {rate.count!r}")
            if not isinstance(rate.period, timedelta) or rate.period < timedelta(milliseconds=1):
                # stored in whole milliseconds: a shorter period would store as zero
                problems.append(f"rate.period: expected at least 1 ms, got {rate.period!r}")
            elif rate.period % timedelta(milliseconds=1):
                problems.append(f"rate.period: expected whole milliseconds, got {rate.period!r}")
    if not isinstance(config.paused, bool):
        problems.append(f"paused: expected a bool, got {config.paused!r}")
    for field in ("admission_limit", "tenant_admission_limit"):
        value = getattr(config, field)
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            problems.append(f"{field}: expected a positive integer or None, got {value!r}")
    return problems


def queue_config_to_dict(config: QueueConfig) -> JSONDict:
    """The one storage encoding of a config (every backend stores this JSON)."""
    out: JSONDict = {"name": config.name, "paused": config.paused}
    if config.execution_limit is not None:
        out["execution_limit"] = config.execution_limit
    if config.rate is not None:
        out["rate"] = {
            "count": config.rate.count,
            "period_ms": round(config.rate.period.total_seconds() * 1000),
        }
    # written only when set, so a config without them encodes as it always did
    if config.admission_limit is not None:
        out["admission_limit"] = config.admission_limit
    if config.tenant_admission_limit is not None:
        out["tenant_admission_limit"] = config.tenant_admission_limit
    return out


def queue_config_to_json(config: QueueConfig) -> bytes:
    return canonical_json(queue_config_to_dict(config))


def queue_config_from_dict(data: Any) -> QueueConfig:
    """Decode :func:`queue_config_to_dict`; raises ``ValueError`` for anything else."""
    if not isinstance(data, dict):
        raise ValueError(f"queue config: expected an object, got {data!r}")
    try:
        rate = data.get("rate")
        config = QueueConfig(
            name=data["name"],
            execution_limit=data.get("execution_limit"),
            rate=None
            if rate is None
            else RateLimit(count=rate["count"], period=timedelta(milliseconds=rate["period_ms"])),
            paused=data.get("paused", False),
            admission_limit=data.get("admission_limit"),
            tenant_admission_limit=data.get("tenant_admission_limit"),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"queue config: malformed {data!r}") from exc
    problems = queue_config_problems(config)
    if problems:
        raise ValueError("queue config: " + "; ".join(problems))
    return config


def queue_config_from_json(text: str | bytes) -> QueueConfig:
    import json

    return queue_config_from_dict(json.loads(text))
