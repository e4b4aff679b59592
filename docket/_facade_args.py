"""The facade's argument checks: each raises the facade's typed error for bad input
before anything is read or stored (private; :mod:`docket.facade` uses them)."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping
from typing import Final

from docket.contract.protocols import Backend
from docket.contract.registry import UnknownBackend, from_url
from docket.errors import InvalidBackend, InvalidInput, InvalidOptions
from docket.records import DURABLE_STATUSES, GraphRef, RunStatus
from docket.values import JSONDict, NonDurableValue, coerce_durable

MAX_PAGE: Final = 1000


def resolve_backend(
    backend: str | Backend, options: Mapping[str, object] | None
) -> tuple[Backend, bool]:
    if isinstance(backend, str):
        try:
            return from_url(backend, **dict(options or {})), True
        except (UnknownBackend, ValueError, TypeError) as exc:
            raise InvalidBackend(str(exc)) from None
    if options:
        raise InvalidBackend("backend_options apply only to a backend given as a URL")
    return backend, False


def require_ref(ref: object) -> None:
    if (
        not isinstance(ref, GraphRef)
        or not isinstance(ref.graph_id, str)
        or not isinstance(ref.graph_hash, str)
        or not ref.graph_id
        or not ref.graph_hash
    ):
        raise InvalidOptions(f"expected a GraphRef with a graph id and hash, got {shown(ref)}")
    require_id("graph_id", ref.graph_id)
    require_id("graph_hash", ref.graph_hash)


def require_id(name: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidOptions(f"{name} must be a non-empty string, got {shown(value)}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: no store can even look it up
            raise InvalidOptions(f"{name} is not valid Unicode text: {shown(value)}") from None


def require_limit(limit: object) -> None:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise InvalidOptions(f"limit must be an integer from 1 to {MAX_PAGE}, got {shown(limit)}")


_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = 80


def shown(value: object) -> str:
    """A bounded repr for error messages: arbitrary caller values may be huge or deep."""
    return _REPR.repr(value)


def seconds_ok(value: object, *, zero: bool) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool) or value != value:
        return False
    return value >= 0 if zero else value > 0


def parse_statuses(
    status: RunStatus | str | Iterable[RunStatus | str] | None,
) -> frozenset[RunStatus] | None:
    if status is None:
        return None
    given: list[object] = [status] if isinstance(status, str) else list(status)
    if not given:
        raise InvalidOptions("status must name at least one status")
    out: set[RunStatus] = set()
    for item in given:
        try:
            parsed = RunStatus(item) if isinstance(item, str) else None
        except ValueError:
            parsed = None
        if parsed is RunStatus.QUEUED:
            raise InvalidOptions(
                "queued runs are held by their queue's admission limit and are not in the "
                "run store yet: list them with Docket.admissions(queue) "
                "(CLI: docket queues held QUEUE)"
            )
        if parsed is None or parsed not in DURABLE_STATUSES:
            names = ", ".join(sorted(s.value for s in DURABLE_STATUSES))
            raise InvalidOptions(f"unknown run status {item!r} (one of {names})")
        out.add(parsed)
    return frozenset(out)


def durable_metadata(metadata: Mapping[str, object] | None) -> JSONDict:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidInput(
            "run metadata must be a map", details={"reasons": ["metadata is not a map"]}
        )
    try:
        value = coerce_durable(metadata, "metadata")
    except NonDurableValue as exc:
        raise InvalidInput(
            "run metadata is not durable", details={"reasons": list(exc.reasons)}
        ) from None
    assert isinstance(value, dict)
    return value
