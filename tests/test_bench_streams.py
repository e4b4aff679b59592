"""The benchmark's stream and history sections measure what they say: every follower
yields every commit (``missed`` counts the ones that did not), and docket's history bytes
are the stored events of a run that really ran its steps."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench.history_bytes import HistoryBytes, docket_history_bytes, history_lines
from bench.report import Report
from bench.stores import Env, Place
from bench.streams import StreamLatency, stream_latency, stream_lines, stream_table


def test_stream_latency_on_memory_and_sqlite_sees_every_commit_at_every_follower(
    tmp_path: Path,
) -> None:
    env = Env(tmp_path)
    for backend in ("memory", "sqlite"):
        found = asyncio.run(stream_latency(Place(backend, env, "s"), 3, 4))
        assert found.unavailable is None, found
        assert (found.commits, found.missed) == (4, 0)
        assert 0 < found.p50_ms <= found.p99_ms <= found.max_ms
        # the memory backend pushes (``streams``); SQLite's feed is its own branch's
        assert found.feed or backend != "memory"
    lines = stream_lines([found])
    assert lines[0].startswith("stream sqlite 3 p50_ms=") and lines[0].endswith("missed=0")


def test_a_stream_cell_that_cannot_run_says_why(tmp_path: Path) -> None:
    env = Env(tmp_path)  # no Redis server started
    found = asyncio.run(stream_latency(Place("redis", env, "s"), 1, 2))
    assert found.unavailable == "server not started"
    assert "unavailable: server not started" in stream_table([found])


def test_docket_history_bytes_are_the_stored_events_of_the_run(tmp_path: Path) -> None:
    place = Place("sqlite", Env(tmp_path), "history")
    found = asyncio.run(docket_history_bytes(place, 40))
    assert found.unavailable is None, found
    # at least one 1 KB message per step is stored (each step's delta), and a full copy
    # at checkpoints 1 and 32 at most adds the chat twice more
    assert 40 * 1024 < found.stored_bytes < 4 * 40 * 1024 + 40 * 2048
    assert found.rows > 40 and found.file_bytes > found.stored_bytes // 2


def test_history_lines_give_bytes_per_step_growth_and_the_ratio() -> None:
    found = [
        HistoryBytes("docket", 50, 50 * 3000),
        HistoryBytes("langgraph", 50, 50 * 30000),
        HistoryBytes("docket", 200, 200 * 6000),
        HistoryBytes("langgraph", 200, 200 * 120000),
    ]
    assert history_lines(found) == [
        "history docket bytes_per_step@50=3000",
        "history docket bytes_per_step@200=6000",
        "history docket growth@200/50=2.00",
        "history langgraph bytes_per_step@50=30000",
        "history langgraph bytes_per_step@200=120000",
        "history langgraph growth@200/50=4.00",
        "history 50 docket/langgraph=0.100",
        "history 200 docket/langgraph=0.050",
    ]
    report = Report(streams=[StreamLatency("memory", 1, 3, True, 1.0, 2.0, 2.0, 0.5)])
    report.history = found
    assert "### History storage" in report.markdown()
    assert "stream memory 1 p50_ms=1.00 p99_ms=2.00 missed=0" in list(report.lines())
