"""Capabilities a backend declares, and negotiation that checks the whole bundle (layer 4).

:func:`negotiate` is what a runtime calls before trusting a backend: it checks the
declaration (contract version 2, transitions version 1, sane limits) and the shape of
the bundle (all four stores present, every operation an ``async def`` with the contract's
parameters, and so is every optional member a store or the bundle provides). Each defect
fails with its own :class:`BackendContractError` code and a message that says what to
change.
"""

from __future__ import annotations

import inspect
from enum import StrEnum
from typing import Final

import attrs

CONTRACT_VERSION: Final = 2
TRANSITIONS_VERSION: Final = 1


class Feature(StrEnum):
    """Optional abilities a backend may declare; the contract kit selects suites by them."""

    NOTIFY = "notify"  # wait_for_work is woken by announcements, not only by timeouts
    DURABLE = "durable"  # commits survive a process crash
    DURABLE_FSYNC = "durable.fsync"  # ... and a machine crash
    FAIR_CLAIMS = "claim.fair"  # claim_due admits due work breadth-first across tenants
    PRUNE = "prune"  # events may be pruned by retention
    # commit_unclaimed may move a failed run back to running (an operator's retry), with
    # the operational state of any running run: due, claimable, listed as running
    REOPEN_FAILED = "reopen_failed"
    # child runs: run documents with child_running tasks and child timers round-trip,
    # and commit_unclaimed takes any moment of a parked run (a child's hand-off may
    # commit the parent's barrier or fail it), not only a signal's
    CHILD_RUNS = "child_runs"
    # durable time: sleeping tasks and their sleep timers round-trip; a waiting run may have
    # a wake (a deadline, a message wait's timeout) and claim_due takes it when it is due;
    # initialize honours a wake_at in the future (a delayed start)
    TIMERS = "timers"
    # messages: a run's mailbox (run metadata) and tasks waiting for a message round-trip,
    # and commit_unclaimed takes a running run at any moment (a message delivered or kept)
    MESSAGES = "messages"
    # cron schedules: backend.schedules is a ScheduleStore (docs/contract.md#schedules)
    SCHEDULES = "schedules"
    # live feed: backend.feed is an EventFeed pushing commit notices (after the commit is
    # readable) and node emissions to subscribers in any process (docs/contract.md#feed)
    STREAMS = "streams"
    # flow control: initialize keeps a run's queue and priority, claim_due honours
    # ClaimPolicy.queues and priority order, and backend.queues is a QueueStore (queue
    # configs and the slot ledger that enforces limits; docs/contract.md#queues)
    QUEUES = "queues"
    # backend.admissions is an AdmissionStore: admission limits (unfinished runs per queue
    # and per tenant within it) with held starts; needs QUEUES (docs/contract.md#admission)
    ADMISSION = "admission"


@attrs.frozen(kw_only=True)
class Limits:
    """Size limits, measured on canonical JSON bytes; exceeding one is ``TooLarge``."""

    max_events_per_transition: int = 1_000
    max_event_bytes: int = 1 << 20  # payload + metadata of one event
    max_run_bytes: int = 16 << 20  # one run document
    max_graph_bytes: int = 8 << 20  # one graph document
    max_id_bytes: int = 255  # run, graph, tenant and transition ids (UTF-8)


@attrs.frozen(kw_only=True)
class Capabilities:
    contract_version: int = CONTRACT_VERSION
    transitions_version: int = TRANSITIONS_VERSION
    limits: Limits = Limits()
    features: frozenset[str] = frozenset()
    name: str = ""


class ContractDefect(StrEnum):
    NO_CAPABILITIES = "no_capabilities"
    INVALID_CAPABILITIES = "invalid_capabilities"
    CONTRACT_V1_REMOVED = "contract_v1_removed"
    UNSUPPORTED_CONTRACT = "unsupported_contract"
    UNSUPPORTED_TRANSITIONS = "unsupported_transitions"
    INVALID_LIMITS = "invalid_limits"
    MISSING_STORE = "missing_store"
    INCOMPLETE_STORE = "incomplete_store"
    NOT_ASYNC = "not_async"
    BAD_SIGNATURE = "bad_signature"
    MISSING_LIFECYCLE = "missing_lifecycle"


class BackendContractError(TypeError):
    """A backend that does not honour the contract; ``code`` names the defect."""

    def __init__(self, code: ContractDefect, message: str) -> None:
        self.code = code
        super().__init__(f"[{code}] {message}")


def _params(func: object) -> list[tuple[str, inspect._ParameterKind]]:
    signature = inspect.signature(func)  # type: ignore[arg-type]  # any callable
    return [
        (p.name, p.kind)
        for p in signature.parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _check_methods(owner: str, obj: object, protocol: type, names: list[str]) -> None:
    missing = [n for n in names if not callable(getattr(obj, n, None))]
    if missing:
        listed = ", ".join(f"{protocol.__name__}.{n}" for n in missing)
        raise BackendContractError(
            ContractDefect.INCOMPLETE_STORE,
            f"{owner} ({type(obj).__name__}) does not implement {listed}",
        )
    for name in names:
        method = getattr(obj, name)
        if not inspect.iscoroutinefunction(method):
            raise BackendContractError(
                ContractDefect.NOT_ASYNC,
                f"{owner}.{name} must be an 'async def' coroutine function",
            )
        want = _params(getattr(protocol, name))
        got = _params(method)
        if [n for n, _ in got[: len(want)]] != [n for n, _ in want] or any(
            p.default is inspect.Parameter.empty
            for p in list(inspect.signature(method).parameters.values())[len(want) :]
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ):
            raise BackendContractError(
                ContractDefect.BAD_SIGNATURE,
                f"{owner}.{name} takes ({', '.join(n for n, _ in got)}); "
                f"the contract says ({', '.join(n for n, _ in want)})",
            )


def _protocol_methods(protocol: type) -> list[str]:
    return sorted(
        name
        for name, value in vars(protocol).items()
        if not name.startswith("_") and inspect.iscoroutinefunction(value)
    )


def negotiate(backend: object) -> Capabilities:
    """Check ``backend`` against contract v2 / transitions v1 and return its capabilities.

    Raises :class:`BackendContractError` with a distinct code per defect.
    """
    from docket.contract.protocols import STORE_PROTOCOLS, Backend

    declare = getattr(backend, "capabilities", None)
    if not callable(declare):
        raise BackendContractError(
            ContractDefect.NO_CAPABILITIES,
            f"{type(backend).__name__} has no capabilities() method; every backend must "
            f"declare contract_version={CONTRACT_VERSION} and transitions_version="
            f"{TRANSITIONS_VERSION} by returning docket.contract.Capabilities",
        )
    caps = declare()
    if not isinstance(caps, Capabilities):
        raise BackendContractError(
            ContractDefect.INVALID_CAPABILITIES,
            f"capabilities() must return docket.contract.Capabilities, got {caps!r}",
        )
    if caps.contract_version == 1:
        raise BackendContractError(
            ContractDefect.CONTRACT_V1_REMOVED,
            "contract version 1 is no longer supported: implement the transition store "
            "(initialize/commit_claimed/commit_unclaimed) and declare contract_version=2",
        )
    if caps.contract_version != CONTRACT_VERSION:
        raise BackendContractError(
            ContractDefect.UNSUPPORTED_CONTRACT,
            f"contract_version={caps.contract_version!r} is unknown to this docket; "
            f"it speaks version {CONTRACT_VERSION}",
        )
    if caps.transitions_version != TRANSITIONS_VERSION:
        raise BackendContractError(
            ContractDefect.UNSUPPORTED_TRANSITIONS,
            f"transitions_version={caps.transitions_version!r} is not supported; "
            f"this docket needs exactly {TRANSITIONS_VERSION}",
        )
    limits = caps.limits
    bad = [
        field.name
        for field in attrs.fields(Limits)
        if not isinstance(getattr(limits, field.name), int)
        or isinstance(getattr(limits, field.name), bool)
        or getattr(limits, field.name) <= 0
    ]
    if not isinstance(limits, Limits) or bad:
        raise BackendContractError(
            ContractDefect.INVALID_LIMITS,
            f"limits must be positive integers; check {', '.join(bad) or 'the Limits type'}",
        )
    for accessor, protocol in STORE_PROTOCOLS.items():
        store = getattr(backend, accessor, None)
        if store is None:
            raise BackendContractError(
                ContractDefect.MISSING_STORE,
                f"{type(backend).__name__}.{accessor} is missing; a backend bundle must "
                f"provide a {protocol.__name__}",
            )
        _check_methods(f"backend.{accessor}", store, protocol, _protocol_methods(protocol))
    lifecycle = _protocol_methods(Backend)
    missing = [name for name in lifecycle if not callable(getattr(backend, name, None))]
    if missing:
        raise BackendContractError(
            ContractDefect.MISSING_LIFECYCLE,
            f"{type(backend).__name__} lacks {', '.join(missing)} (lifecycle, clock, wake-ups)",
        )
    _check_methods("backend", backend, Backend, lifecycle)
    _check_optional(backend)
    _check_optional_stores(backend, caps)
    return caps


def _check_optional_stores(backend: object, caps: Capabilities) -> None:
    """A feature that names a store (``schedules``) needs that store, whole and async."""
    from docket.contract.protocols import OPTIONAL_STORES

    if Feature.ADMISSION in caps.features and Feature.QUEUES not in caps.features:
        # the admission ledger reads the configs the queue store keeps
        raise BackendContractError(
            ContractDefect.INVALID_CAPABILITIES,
            "'admission' needs 'queues': declare both or neither",
        )
    for accessor, (protocol, feature) in OPTIONAL_STORES.items():
        if feature not in caps.features:
            continue
        store = getattr(backend, accessor, None)
        if store is None:
            raise BackendContractError(
                ContractDefect.MISSING_STORE,
                f"{type(backend).__name__} declares {feature!r} but has no .{accessor}; "
                f"provide a {protocol.__name__} there or drop the feature",
            )
        _check_methods(f"backend.{accessor}", store, protocol, _protocol_methods(protocol))


def _check_optional(backend: object) -> None:
    """Optional members a backend provides must be ``async def`` with the contract's
    parameters too: the runtime finds them by name, and would call them with those."""
    from docket.contract.protocols import OPTIONAL_PROTOCOLS

    for accessor, protocols in OPTIONAL_PROTOCOLS.items():
        target = getattr(backend, accessor, None) if accessor else backend
        if target is None:  # an optional store the backend does not hand out
            continue
        where = f"backend.{accessor}" if accessor else "backend"
        for protocol in protocols:
            present = [
                name
                for name in _protocol_methods(protocol)
                if callable(getattr(target, name, None))
            ]
            if present:
                _check_methods(where, target, protocol, present)


__all__ = [
    "CONTRACT_VERSION",
    "TRANSITIONS_VERSION",
    "BackendContractError",
    "Capabilities",
    "ContractDefect",
    "Feature",
    "Limits",
    "negotiate",
]
