"""CPU cost of the commit path's pure parts, per transition (deterministic, no I/O).

    python bench/profile_commit.py            # best-of timings, microseconds per call

Captures the transitions of one ``chain_10`` run (committed to the reference memory
backend) and times, on each of them: the shared validator, the canonical encoding of the
run, and decoding the stored run document back. Best of several repeats, so a busy
machine inflates the numbers less than a throughput benchmark.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import docket.contract.memory as memory
from bench.profile_durable import NODES, graph_of
from docket.contract.capabilities import Limits
from docket.contract.validate import validate_commit_claimed, validate_commit_unclaimed
from docket.graph.compiler import compile_graph
from docket.records import run_from_json, run_to_json
from docket.testing import run_inline

Captured = tuple[str, Any, Any, Any, Any]  # kind, owner, expected, proposal, events


def capture(shape: str) -> list[Captured]:
    """The (validated) commits one ``shape`` run makes on the reference backend."""
    seen: list[Captured] = []
    claimed = getattr(memory, "validate_commit_claimed")  # noqa: B009  (patched below)
    unclaimed = getattr(memory, "validate_commit_unclaimed")  # noqa: B009

    def spy_claimed(owner: Any, proposal: Any, events: Any, limits: Any) -> Any:
        seen.append(("claimed", owner, None, proposal, events))
        return claimed(owner, proposal, events, limits)

    def spy_unclaimed(owner: Any, expected: Any, proposal: Any, events: Any, limits: Any) -> Any:
        seen.append(("unclaimed", owner, expected, proposal, events))
        return unclaimed(owner, expected, proposal, events, limits)

    setattr(memory, "validate_commit_claimed", spy_claimed)  # noqa: B010
    setattr(memory, "validate_commit_unclaimed", spy_unclaimed)  # noqa: B010
    try:
        result = compile_graph(graph_of(shape), NODES)
        run_inline(result, {"value": 1}, commit_to=True)
    finally:
        setattr(memory, "validate_commit_claimed", claimed)  # noqa: B010
        setattr(memory, "validate_commit_unclaimed", unclaimed)  # noqa: B010
    return seen


def best_us(fn: Callable[[], object], calls: int, repeat: int = 7) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - started)
    return best / calls * 1e6


def main() -> int:
    shape = sys.argv[1] if len(sys.argv) > 1 else "chain_10"
    seen = capture(shape)
    limits = Limits()
    if not seen:
        print("no commits captured")
        return 1
    kinds = {captured[0] for captured in seen}

    def validate_all() -> None:
        for kind, owner, expected, proposal, events in seen:
            if kind == "claimed":
                validate_commit_claimed(owner, proposal, events, limits)
            else:
                validate_commit_unclaimed(owner, expected, proposal, events, limits)

    runs = [proposal.run for _, _, _, proposal, _ in seen]
    docs = [run_to_json(run) for run in runs]
    n = len(seen)
    print(f"{shape}: {n} commits ({', '.join(sorted(kinds))}); microseconds per commit:")
    print(f"  validate        {best_us(validate_all, 20) / n:8.1f}")
    print(f"  run_to_json     {best_us(lambda: [run_to_json(r) for r in runs], 20) / n:8.1f}")
    print(f"  run_from_json   {best_us(lambda: [run_from_json(d) for d in docs], 20) / n:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
