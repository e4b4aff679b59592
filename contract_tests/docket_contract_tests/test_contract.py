"""Bundle shape and negotiation: CONTRACT-CALLBACK-COMPLETENESS, NEGOTIATION."""

from __future__ import annotations

import inspect
from datetime import UTC, timedelta
from typing import Any

import attrs
import pytest

from docket.contract import (
    Backend,
    BackendContractError,
    Capabilities,
    ContractDefect,
    EventStore,
    GraphStore,
    Limits,
    RunStore,
    TransitionStore,
    negotiate,
)
from docket.contract.capabilities import CONTRACT_VERSION, TRANSITIONS_VERSION
from docket_contract_tests.kit import Kit, invariant


@invariant("CONTRACT-CALLBACK-COMPLETENESS")
async def test_bundle_negotiates(docket_kit: Kit) -> None:
    k = docket_kit
    caps = negotiate(k.b)
    k.isa(caps, Capabilities, "negotiate(backend)")
    k.eq(caps.contract_version, CONTRACT_VERSION, "declared contract_version")
    k.eq(caps.transitions_version, TRANSITIONS_VERSION, "declared transitions_version")
    k.check(isinstance(k.b, Backend), "the bundle is a docket.contract.Backend")
    for accessor, protocol in (
        ("graphs", GraphStore),
        ("runs", RunStore),
        ("events", EventStore),
        ("transitions", TransitionStore),
    ):
        store = getattr(k.b, accessor)
        k.check(isinstance(store, protocol), f"backend.{accessor} is a {protocol.__name__}")
        for name, member in vars(protocol).items():
            if inspect.iscoroutinefunction(member):
                k.check(
                    inspect.iscoroutinefunction(getattr(store, name, None)),
                    f"backend.{accessor}.{name} is an async def",
                )
    k.eq(k.b.capabilities(), caps, "capabilities() is stable between calls")


@invariant("CONTRACT-CALLBACK-COMPLETENESS")
async def test_declared_limits_and_clock(docket_kit: Kit) -> None:
    k = docket_kit
    limits = k.b.capabilities().limits
    k.isa(limits, Limits, "capabilities().limits")
    for field in attrs.fields(Limits):
        value = getattr(limits, field.name)
        k.check(
            isinstance(value, int) and not isinstance(value, bool) and value > 0,
            f"limit {field.name} is a positive int, got {value!r}",
        )
    first = await k.b.now()
    second = await k.b.now()
    for moment in (first, second):
        k.check(moment.utcoffset() == timedelta(0), f"now() is aware UTC, got {moment!r}")
        k.eq(moment.astimezone(UTC), moment, "now() is in UTC")
    k.check(second >= first, f"now() never goes back: {first} then {second}")


class _Proxy:
    """A bundle that forwards to the subject, with one thing broken."""

    def __init__(self, inner: Backend, **overrides: Any) -> None:
        self._inner = inner
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self._overrides:
            value = self._overrides[name]
            if value is _MISSING:
                raise AttributeError(name)
            return value
        return getattr(self._inner, name)


_MISSING = object()


class _SyncStore:
    """A store whose methods are forwarded synchronously (not ``async def``)."""

    def __init__(self, inner: object, sync_name: str) -> None:
        self._inner = inner
        self._sync = sync_name

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name == self._sync:

            def sync(*args: Any, **kwargs: Any) -> Any:
                return value(*args, **kwargs)

            return sync
        return value


class _RenamedStore:
    """A store one of whose methods takes differently named parameters."""

    def __init__(self, inner: object, name: str) -> None:
        self._inner = inner
        self._name = name

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name == self._name:

            async def renamed(scope: Any, ident: Any, *rest: Any) -> Any:
                return await value(scope, ident, *rest)

            return renamed
        return value


def _caps(backend: Backend, **changes: Any) -> Any:
    declared = backend.capabilities()
    return lambda: attrs.evolve(declared, **changes)


NEGOTIATION_DEFECTS: dict[str, tuple[Any, ContractDefect]] = {
    "no-capabilities": (lambda b: _Proxy(b, capabilities=_MISSING), ContractDefect.NO_CAPABILITIES),
    "capabilities-not-declared": (
        lambda b: _Proxy(b, capabilities=lambda: {"contract_version": 2}),
        ContractDefect.INVALID_CAPABILITIES,
    ),
    "contract-v1": (
        lambda b: _Proxy(b, capabilities=_caps(b, contract_version=1)),
        ContractDefect.CONTRACT_V1_REMOVED,
    ),
    "contract-v3": (
        lambda b: _Proxy(b, capabilities=_caps(b, contract_version=3)),
        ContractDefect.UNSUPPORTED_CONTRACT,
    ),
    "transitions-v2": (
        lambda b: _Proxy(b, capabilities=_caps(b, transitions_version=2)),
        ContractDefect.UNSUPPORTED_TRANSITIONS,
    ),
    "zero-limit": (
        lambda b: _Proxy(
            b,
            capabilities=_caps(
                b, limits=attrs.evolve(b.capabilities().limits, max_events_per_transition=0)
            ),
        ),
        ContractDefect.INVALID_LIMITS,
    ),
    "missing-graphs": (lambda b: _Proxy(b, graphs=None), ContractDefect.MISSING_STORE),
    "missing-events": (lambda b: _Proxy(b, events=None), ContractDefect.MISSING_STORE),
    "incomplete-runs": (
        lambda b: _Proxy(b, runs=_Proxy(b.runs, claim_due=_MISSING)),
        ContractDefect.INCOMPLETE_STORE,
    ),
    "sync-transition": (
        lambda b: _Proxy(b, transitions=_SyncStore(b.transitions, "commit_claimed")),
        ContractDefect.NOT_ASYNC,
    ),
    "renamed-parameters": (
        lambda b: _Proxy(b, events=_RenamedStore(b.events, "fetch_latest_event")),
        ContractDefect.BAD_SIGNATURE,
    ),
    "no-wait-for-work": (
        lambda b: _Proxy(b, wait_for_work=_MISSING),
        ContractDefect.MISSING_LIFECYCLE,
    ),
}


@invariant("NEGOTIATION")
@pytest.mark.parametrize("defect", sorted(NEGOTIATION_DEFECTS))
async def test_negotiation_rejects_each_defect(docket_kit: Kit, defect: str) -> None:
    """The subject's own bundle, broken in one way, fails negotiation with its own code."""
    k = docket_kit
    negotiate(k.b)  # the intact bundle passes
    build, code = NEGOTIATION_DEFECTS[defect]
    broken = build(k.b)
    try:
        negotiate(broken)
    except BackendContractError as exc:
        k.eq(exc.code, code, f"negotiation defect code for {defect}")
        k.check(str(exc).strip(), "the defect message says what to change")
        return
    k.fail(f"negotiate accepted a bundle with defect {defect}")
