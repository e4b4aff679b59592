"""One durable cell: every engine on one backend, shape and in-flight level, in rounds.

Per round, each engine runs in a fresh place named for the cell: docket
(``bench/durable.py``), LangGraph (ibid.) and DBOS (``bench/dbos_peer.py``; on SQLite
twice, default journal and WAL). Each engine's best round is kept: a shared machine only
ever slows a trial down, and alternating the engines gives all the same chances. A round
that fails its read-back checks gates that engine's result for the cell, whatever the
other round did.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.dbos_peer import dbos_trial, engines
from bench.durable import Result, docket_trial, langgraph_trial
from bench.stores import Place


async def run_cell(
    place_of: Callable[[str], Place],
    shape: str,
    inflight: int,
    runs: int,
    warmup: int,
    rounds: int = 1,
    dbos_runs: int = 0,
) -> list[Result]:
    """docket, LangGraph and (with ``dbos_runs`` > 0) DBOS, ``rounds`` times; DBOS runs
    ``dbos_runs`` measured runs (it is several times slower: see docs/benchmarks.md)."""
    probe = place_of("x")
    backend = probe.backend
    trial = f"{backend.replace('-', '_')}_{shape}_{inflight}"
    best: dict[str, Result] = {}
    order = ["docket", "langgraph"]
    for round_ in range(rounds):
        suffix = f"_{round_}" if round_ else ""
        try:
            mine = await docket_trial(place_of(f"d_{trial}{suffix}"), shape, runs, inflight, warmup)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"[:160]
            mine = Result(backend, "docket", shape, inflight, gated=reason)
        found = [
            mine,
            await langgraph_trial(place_of(f"lg_{trial}{suffix}"), shape, runs, inflight, warmup),
        ]
        if dbos_runs:
            for engine in engines(probe.kind):
                wal = engine == "dbos-wal"
                name = f"{'dbw' if wal else 'db'}_{trial}{suffix}"
                warm = max(2, warmup * dbos_runs // max(1, runs))
                found.append(
                    await dbos_trial(place_of(name), shape, dbos_runs, inflight, warm, wal=wal)
                )
                if engine not in order:
                    order.append(engine)
        for result in found:
            kept = best.get(result.engine)
            if kept is None or _better(result, kept):
                best[result.engine] = result
    return [best[engine] for engine in order]


def _better(new: Result, kept: Result) -> bool:
    """Whether ``new`` replaces ``kept`` as an engine's reported round."""
    if kept.gated is not None:
        return False  # one failed invariant check gates the cell
    if new.gated is not None:
        return True
    if new.unavailable is not None:
        return False
    if kept.unavailable is not None:
        return True
    return new.runs_per_s > kept.runs_per_s
