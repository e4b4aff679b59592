"""``lmdb://`` URLs and the factory's options: malformed input is refused before anything
is opened or created."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from docket_lmdb import DEFAULT_MAP_SIZE, parse_url

from docket.clock import ManualClock
from docket.contract import Limits, negotiate
from docket.contract.registry import from_url


def test_urls_name_a_directory_absolute_or_relative(tmp_path: Path) -> None:
    assert parse_url(f"lmdb://{tmp_path}/db") == (f"{tmp_path}/db", DEFAULT_MAP_SIZE)
    assert parse_url(f"lmdb://{tmp_path}/db?map_size=65536") == (f"{tmp_path}/db", 65536)
    path, _ = parse_url("lmdb://relative/db")
    assert Path(path).is_absolute() and path.endswith("/relative/db")


@pytest.mark.parametrize(
    "url",
    [
        "lmdb://",
        "sqlite:///x.db",
        "lmdb:///tmp/x?map_size=big",
        "lmdb:///tmp/x?map_size=0",
        "lmdb:///tmp/x?sync=no",
        "lmdb:///tmp/x#frag",
    ],
)
def test_malformed_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        parse_url(url)


def test_the_factory_takes_the_kits_clock_and_limits_and_nothing_else(tmp_path: Path) -> None:
    url = f"lmdb://{tmp_path}/db"
    limits = Limits(max_events_per_transition=5)
    backend = from_url(url, clock=ManualClock(datetime.now(UTC)), limits=limits)
    negotiate(backend)
    assert backend.capabilities().limits == limits
    assert {"durable", "durable.fsync", "notify"} <= backend.capabilities().features
    with pytest.raises(TypeError, match="does not take map"):
        from_url(url, map=1)
    with pytest.raises(TypeError, match="clock"):
        from_url(url, clock="now")
    assert not (tmp_path / "db").exists()  # nothing is created before open
