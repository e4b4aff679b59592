"""The benchmark keeps each engine's best durable round, and a failed check gates a cell."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bench import cells
from bench.cells import _better
from bench.durable import Result


def _result(engine: str, seconds: float, **extra: Any) -> Result:
    return Result("sqlite", engine, "chain_10", 8, runs=100, seconds=seconds, **extra)


def test_the_faster_round_is_kept_and_a_gated_round_sticks() -> None:
    slow, fast = _result("docket", 2.0), _result("docket", 1.0)
    gated = _result("docket", 0.5, gated="run r1 still claimed")
    missing = _result("langgraph", 0.0, unavailable="no server")
    assert _better(fast, slow) and not _better(slow, fast)
    assert _better(gated, fast), "a failed invariant check replaces a good round"
    assert not _better(fast, gated), "and no later round hides it"
    assert _better(fast, missing) and not _better(missing, fast)


def test_run_cell_alternates_engines_and_reports_the_best_of_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []
    docket_seconds = iter([3.0, 1.5])
    langgraph_seconds = iter([2.0, 4.0])

    async def docket_trial(place: Any, shape: str, runs: int, inflight: int, warmup: int) -> Result:
        order.append(f"docket {place}")
        return _result("docket", next(docket_seconds))

    async def langgraph_trial(
        place: Any, shape: str, runs: int, inflight: int, warmup: int
    ) -> Result:
        order.append(f"langgraph {place}")
        return _result("langgraph", next(langgraph_seconds))

    class Place:
        backend = "sqlite"
        kind = "sqlite"

        def __init__(self, name: str) -> None:
            self.name = name

        def __str__(self) -> str:
            return self.name

    monkeypatch.setattr(cells, "docket_trial", docket_trial)
    monkeypatch.setattr(cells, "langgraph_trial", langgraph_trial)
    cell = asyncio.run(cells.run_cell(Place, "chain_10", 8, 100, 0, rounds=2))  # type: ignore[arg-type]  # a stand-in place
    assert order == [
        "docket d_sqlite_chain_10_8",
        "langgraph lg_sqlite_chain_10_8",
        "docket d_sqlite_chain_10_8_1",
        "langgraph lg_sqlite_chain_10_8_1",
    ]
    assert [(r.engine, r.seconds) for r in cell] == [("docket", 1.5), ("langgraph", 2.0)]
