"""URLs, the factory behind ``sqlite://``, negotiation and declared capabilities."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from docket_sqlite import SQLiteBackend, Target, factory, parse_url

from docket.clock import ManualClock
from docket.contract import Feature, Limits, negotiate
from docket.contract.registry import available, from_url

CLOCK_START = datetime(2026, 7, 15, 12, tzinfo=UTC)


def test_entry_point_registers_the_factory() -> None:
    found = available()
    assert found["sqlite"] is factory
    assert factory.schemes == ("sqlite",)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///:memory:", None),
        ("sqlite://", None),
        ("sqlite:///", None),
        ("sqlite:////abs/dir/app.db", "/abs/dir/app.db"),
        ("sqlite:////abs/with%20space.db", "/abs/with space.db"),
        ("SQLITE:////abs/upper.db", "/abs/upper.db"),
    ],
)
def test_url_forms(url: str, expected: str | None) -> None:
    target, options = parse_url(url)
    assert target == Target(expected)
    assert options == {}


def test_relative_url_resolves_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    target, _ = parse_url("sqlite:///data/app.db")
    assert target.path == str(tmp_path / "data" / "app.db")
    monkeypatch.chdir("/")
    assert target.path == str(tmp_path / "data" / "app.db"), "resolved once, at parse time"


def test_url_options() -> None:
    target, options = parse_url("sqlite:////x/app.db?synchronous=NORMAL&busy_timeout=2.5")
    assert target.path == "/x/app.db"
    assert options == {"synchronous": "NORMAL", "busy_timeout": "2.5"}
    backend = from_url("sqlite:////x/app.db?synchronous=normal&busy_timeout=2.5")
    assert isinstance(backend, SQLiteBackend)
    assert Feature.DURABLE_FSYNC not in backend.capabilities().features


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://host/app.db",
        "sqlite:///app.db?journal=wal",
        "sqlite:///app.db?synchronous=FULL&synchronous=NORMAL",
        "sqlite:///app.db#frag",
        "postgres:///app.db",
        "sqlite:///app.db?synchronous=OFF",
        "sqlite:///app.db?busy_timeout=soon",
    ],
)
def test_bad_urls_raise(url: str) -> None:
    with pytest.raises(ValueError):
        if url.startswith("postgres"):
            parse_url(url)
        else:
            from_url(url)


def test_unknown_and_ill_typed_options_raise(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.db"
    with pytest.raises(TypeError):
        from_url(url, namespace="x")
    with pytest.raises(TypeError):
        from_url(url, clock="now")
    with pytest.raises(TypeError):
        from_url(url, limits={"max_run_bytes": 1})
    with pytest.raises(ValueError):
        from_url(url, synchronous="EXTRA")
    with pytest.raises(ValueError):
        from_url(url, busy_timeout=-1)
    with pytest.raises(TypeError):
        from_url(url, busy_timeout=True)


def test_options_reach_the_backend(tmp_path: Path) -> None:
    clock = ManualClock(CLOCK_START)
    limits = Limits(max_events_per_transition=7)
    backend = from_url(f"sqlite:///{tmp_path}/a.db", clock=clock, limits=limits)
    assert isinstance(backend, SQLiteBackend)
    assert backend.path == str(tmp_path / "a.db")
    assert backend.capabilities().limits == limits
    assert asyncio.run(backend.now()) == CLOCK_START


def test_negotiation_and_features(tmp_path: Path) -> None:
    full = SQLiteBackend(tmp_path / "full.db")
    caps = negotiate(full)
    assert caps.name == "sqlite"
    assert caps.features == {
        Feature.NOTIFY,
        Feature.DURABLE,
        Feature.DURABLE_FSYNC,
        Feature.REOPEN_FAILED,
        Feature.CHILD_RUNS,
        Feature.TIMERS,
        Feature.MESSAGES,
        Feature.SCHEDULES,
        Feature.PRUNE,
        Feature.STREAMS,
        Feature.QUEUES,
        Feature.ADMISSION,
    }
    normal = SQLiteBackend(tmp_path / "normal.db", synchronous="NORMAL")
    assert negotiate(normal).features == {
        Feature.NOTIFY,
        Feature.DURABLE,
        Feature.REOPEN_FAILED,
        Feature.CHILD_RUNS,
        Feature.TIMERS,
        Feature.MESSAGES,
        Feature.SCHEDULES,
        Feature.PRUNE,
        Feature.STREAMS,
        Feature.QUEUES,
        Feature.ADMISSION,
    }
    memory = SQLiteBackend(":memory:")
    assert negotiate(memory).features == {
        Feature.NOTIFY,
        Feature.REOPEN_FAILED,
        Feature.CHILD_RUNS,
        Feature.TIMERS,
        Feature.MESSAGES,
        Feature.SCHEDULES,
        Feature.PRUNE,
        Feature.STREAMS,
        Feature.QUEUES,
        Feature.ADMISSION,
    }
    assert memory.path is None
