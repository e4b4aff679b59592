"""Retention (layer 4): what one ``prune`` pass did, and the checks of its arguments.

``prune`` is the optional :class:`~docket.contract.protocols.Prunable` operation of a
backend that declares ``Feature.PRUNE``. Pruning never changes sequence arithmetic: a
run's ``event_seq`` stays what it was, readers see the hole through
``EventPage.oldest_available_seq``, and a re-sent pruned event is dropped (see
:func:`docket.contract.validate.compare_event`).
"""

from __future__ import annotations

from datetime import timedelta

import attrs


@attrs.frozen
class PruneResult:
    """What one ``prune`` pass did.

    ``ran`` is ``False`` when another pruner held the store's pruning lock (nothing was
    done); ``events`` and ``runs`` count the rows deleted (a run's own events and
    transition records go with it and are not counted).
    """

    ran: bool
    events: int
    runs: int


def require_prune_args(
    event_age: object, run_age: object, batch_size: object
) -> tuple[timedelta | None, timedelta | None, int]:
    """Raise ``ValueError`` on ages that are not ``None`` or a non-negative ``timedelta``,
    or a ``batch_size`` that is not a positive integer; return them typed."""
    for name, age in (("event_age", event_age), ("run_age", run_age)):
        if age is not None and (not isinstance(age, timedelta) or age < timedelta(0)):
            raise ValueError(f"{name} must be a non-negative timedelta or None, got {age!r}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    assert event_age is None or isinstance(event_age, timedelta)
    assert run_age is None or isinstance(run_age, timedelta)
    return event_age, run_age, batch_size


__all__ = ["PruneResult", "require_prune_args"]
