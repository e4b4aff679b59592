"""Negotiation checks the whole bundle; discovery maps URL schemes to installed backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from docket.contract import (
    BackendContractError,
    Capabilities,
    ContractDefect,
    Feature,
    Limits,
    negotiate,
)
from docket.contract.memory import MemoryBackend
from docket.contract.registry import UnknownBackend, available, from_url, scheme_of


def test_the_memory_backend_negotiates() -> None:
    caps = negotiate(MemoryBackend())
    assert caps.contract_version == 2 and caps.transitions_version == 1
    assert caps.limits == Limits()


class Declares(MemoryBackend):
    def __init__(self, caps: object) -> None:
        super().__init__()
        self._caps = caps

    def capabilities(self) -> Any:
        return self._caps


class WithoutStore(MemoryBackend):
    @property
    def events(self) -> Any:
        return None


class HalfStore:
    async def fetch_event(self, owner: object, run_id: str, seq: int) -> None: ...


class IncompleteEvents(MemoryBackend):
    @property
    def events(self) -> Any:
        return HalfStore()


class SyncRuns(MemoryBackend):
    def fetch_run(self, owner: Any, run_id: str) -> Any:
        return None


class RenamedParams(MemoryBackend):
    async def fetch_run(self, scope: Any, ident: str) -> Any:
        return None


class NoClock(MemoryBackend):
    now = None  # type: ignore[assignment]


class NoCapabilities:
    pass


CASES: list[tuple[Callable[[], object], ContractDefect, str]] = [
    (NoCapabilities, ContractDefect.NO_CAPABILITIES, "capabilities()"),
    (
        lambda: Declares({"contract_version": 2}),
        ContractDefect.INVALID_CAPABILITIES,
        "Capabilities",
    ),
    (lambda: Declares(Capabilities(contract_version=1)), ContractDefect.CONTRACT_V1_REMOVED, "v"),
    (lambda: Declares(Capabilities(contract_version=3)), ContractDefect.UNSUPPORTED_CONTRACT, "3"),
    (
        lambda: Declares(Capabilities(transitions_version=2)),
        ContractDefect.UNSUPPORTED_TRANSITIONS,
        "exactly 1",
    ),
    (
        lambda: Declares(Capabilities(limits=Limits(max_event_bytes=0))),
        ContractDefect.INVALID_LIMITS,
        "max_event_bytes",
    ),
    (WithoutStore, ContractDefect.MISSING_STORE, "WithoutStore.events"),
    (IncompleteEvents, ContractDefect.INCOMPLETE_STORE, "EventStore.fetch_latest_event"),
    (SyncRuns, ContractDefect.NOT_ASYNC, "fetch_run"),
    (RenamedParams, ContractDefect.BAD_SIGNATURE, "(owner, run_id)"),
    (NoClock, ContractDefect.MISSING_LIFECYCLE, "now"),
]


@pytest.mark.parametrize(("make", "code", "fragment"), CASES, ids=[c[1].value for c in CASES])
def test_each_defect_has_its_own_code_and_message(
    make: Callable[[], object], code: ContractDefect, fragment: str
) -> None:
    with pytest.raises(BackendContractError) as caught:
        negotiate(make())
    assert caught.value.code is code
    assert fragment in str(caught.value)


def test_memory_is_always_available_and_each_url_gets_a_fresh_store() -> None:
    assert "memory" in available()
    first, second = from_url("memory://"), from_url("memory://")
    assert isinstance(first, MemoryBackend) and first is not second


def test_unknown_schemes_say_what_to_install() -> None:
    with pytest.raises(UnknownBackend, match="pip install docket-cassandra"):
        from_url("cassandra://localhost/db")
    with pytest.raises(ValueError, match="no scheme"):
        scheme_of("app.db")


def test_memory_factory_refuses_unknown_options_and_paths() -> None:
    with pytest.raises(TypeError, match="pool_size"):
        from_url("memory://", pool_size=3)
    with pytest.raises(ValueError, match="no host or path"):
        from_url("memory://somewhere")
    backend = from_url("memory://", limits=Limits(max_events_per_transition=3))
    assert attrs.asdict(negotiate(backend).limits)["max_events_per_transition"] == 3


def test_docket_backends_lists_what_is_installed() -> None:
    import docket.backends

    installed = docket.backends.available()
    assert installed["memory"].schemes == ("memory",)
    assert "sqlite" in installed and "sqlite" in installed["sqlite"].schemes
    assert isinstance(docket.backends.from_url("memory://"), MemoryBackend)


def test_a_broken_backend_package_does_not_hide_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import EntryPoint

    import docket.contract.registry as registry

    points = [
        EntryPoint("exploding", "no_such_module_xyz:factory", registry.GROUP),
        EntryPoint("wrongtype", "os:sep", registry.GROUP),
    ]
    monkeypatch.setattr(registry, "entry_points", lambda group: points)
    assert set(registry.available()) == {"memory"}
    assert set(registry.broken()) == {"exploding", "wrongtype"}
    assert isinstance(registry.from_url("memory://"), MemoryBackend)
    with pytest.raises(UnknownBackend, match="exploding"):
        registry.from_url("exploding://x")


class MisnamedClaimedStart(MemoryBackend):
    async def initialize_claimed(  # the defect under test
        self, owner: Any, proposal: Any, events: Any, token: str
    ) -> Any:
        return None


class SyncPrune(MemoryBackend):
    def prune(self, **options: Any) -> Any:  # the defect under test
        return None


class RenamedSampledNow(MemoryBackend):
    async def sampled_now(self, hint: Any) -> Any:
        return None


@pytest.mark.parametrize(
    ("backend", "code", "names"),
    [
        (
            MisnamedClaimedStart,
            ContractDefect.BAD_SIGNATURE,
            "backend.transitions.initialize_claimed",
        ),
        (SyncPrune, ContractDefect.NOT_ASYNC, "backend.prune"),
        (RenamedSampledNow, ContractDefect.BAD_SIGNATURE, "backend.sampled_now"),
    ],
)
def test_optional_members_are_checked_when_present(
    backend: Callable[[], MemoryBackend], code: ContractDefect, names: str
) -> None:
    with pytest.raises(BackendContractError) as raised:
        negotiate(backend())
    assert raised.value.code is code
    assert names in str(raised.value)


# -- the live feed (Feature.STREAMS): backend.feed is checked only when declared -------------


class StreamsWithoutFeed(MemoryBackend):
    @property  # the defect under test: no feed at all
    def feed(self) -> Any:
        return None

    @feed.setter
    def feed(self, value: Any) -> None:
        pass


class SyncFeed:
    def subscribe(self, scope: Any) -> Any:  # the defect under test
        return None

    async def publish(self, owner: Any, emission: Any) -> None:
        return None


class RenamedFeed:
    async def subscribe(self, scope: Any) -> Any:
        return None

    async def publish(self, scope: Any, item: Any) -> None:  # the defect under test
        return None


class HalfFeed:
    async def subscribe(self, scope: Any) -> Any:
        return None


def _with_feed(feed: object) -> Callable[[], MemoryBackend]:
    def build() -> MemoryBackend:
        backend = MemoryBackend()
        backend.feed = feed  # type: ignore[assignment]  # a broken feed on purpose
        return backend

    return build


@pytest.mark.parametrize(
    ("make", "code", "fragment"),
    [
        (StreamsWithoutFeed, ContractDefect.MISSING_STORE, "declares 'streams' but has no .feed"),
        (_with_feed(SyncFeed()), ContractDefect.NOT_ASYNC, "backend.feed.subscribe"),
        (_with_feed(RenamedFeed()), ContractDefect.BAD_SIGNATURE, "backend.feed.publish"),
        (_with_feed(HalfFeed()), ContractDefect.INCOMPLETE_STORE, "EventFeed.publish"),
    ],
    ids=["no-feed", "sync-subscribe", "renamed-publish", "no-publish"],
)
def test_a_backend_declaring_streams_needs_a_whole_async_feed(
    make: Callable[[], MemoryBackend], code: ContractDefect, fragment: str
) -> None:
    backend = make()
    assert Feature.STREAMS in backend.capabilities().features
    with pytest.raises(BackendContractError) as raised:
        negotiate(backend)
    assert raised.value.code is code
    assert fragment in str(raised.value)


class NoStreams(MemoryBackend):
    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return attrs.evolve(caps, features=caps.features - {Feature.STREAMS})


@pytest.mark.parametrize("feed", [None, SyncFeed()], ids=["no-feed", "broken-feed"])
def test_a_backend_without_streams_negotiates_whatever_its_feed(feed: object) -> None:
    backend = NoStreams()
    backend.feed = feed  # type: ignore[assignment]  # ignored without the feature
    assert Feature.STREAMS not in negotiate(backend).features
