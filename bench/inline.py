"""In memory: docket's inline runner vs LangGraph, median wall time per run.

    python bench/inline.py [--batches 15] [--batch-size 40] [--warmup 30]

(``bench/compare.py`` runs this as its first section.) The shapes are those of
``bench/shapes.py``. Contenders, timed in the same process and interleaved batch by batch
so machine noise hits them alike:

- ``docket``: ``docket.testing.run_inline_async`` on a precompiled runtime graph. Every
  run builds its full run document and all of its events and checkpoints (the contract
  validator and the backend commit are off, as in a unit test); ``child_run``'s child
  graph (precompiled too) is given as ``graphs=``, and runs inline, to its end, as the
  calling node's attempt (a run document, events and checkpoints of its own);
- ``langgraph``: the compiled ``StateGraph`` without a checkpointer, ``ainvoke``;
- ``langgraph_inmemorysaver``: the same with ``InMemorySaver`` (a fresh thread per run).

Both engines run the same ``async def`` no-op nodes, all on one event loop (no thread hop
on either side).

The ratio reported is docket's time over LangGraph-with-``InMemorySaver``'s (below 1
means docket is faster). LangGraph is only imported here; docket does not depend on it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.shapes import NODES, SHAPES, SUPERSTEPS, docket_children, docket_graph, langgraph_app
from docket.graph.compiler import RuntimeGraph, compile_graph
from docket.graph.model import Graph
from docket.records import RunStatus
from docket.testing import run_inline_async

CONTENDERS = ("docket", "langgraph", "langgraph_inmemorysaver")
# the start, one checkpoint per superstep, and the finish (``child_run``: the parent's;
# inline, the child runs within the calling node's attempt: no park, no hand-off commit)
EXPECTED_CHECKPOINTS = {shape: SUPERSTEPS[shape] + 2 for shape in SHAPES} | {"child_run": 3}
# what a run's output must be (the shapes without declared outputs have none)
EXPECTED_OUTPUT = {"child_run": {"result": 1}}


Runner = Callable[[], Awaitable[None]]


def _compiled(graph: Graph) -> RuntimeGraph:
    result = compile_graph(graph, NODES)
    if not result.ok or result.runtime is None:
        raise RuntimeError(f"{graph.id}: {result.errors}")
    return result.runtime


def docket_runner(shape: str) -> Runner:
    rtg = _compiled(docket_graph(shape))
    children = {child.id: _compiled(child) for child in docket_children(shape)}
    expected = EXPECTED_CHECKPOINTS[shape]
    output = EXPECTED_OUTPUT.get(shape, {})

    async def run() -> None:
        done = await run_inline_async(rtg, {"value": 1}, graphs=children)
        ended = done.run.status, len(done.checkpoints), done.output
        if ended != (RunStatus.DONE, expected, output):
            raise AssertionError(f"{shape}: ended {ended}")

    return run


def langgraph_runner(shape: str, *, saver: bool) -> Runner:
    from langgraph.checkpoint.memory import InMemorySaver

    app: Any = langgraph_app(shape, InMemorySaver() if saver else None)
    threads = itertools.count()

    async def run() -> None:
        config = {"configurable": {"thread_id": f"t{next(threads)}"}} if saver else None
        await app.ainvoke({"value": 1}, config)

    return run


async def per_run_seconds(fn: Runner, batch_size: int) -> float:
    started = time.perf_counter()
    for _ in range(batch_size):
        await fn()
    return (time.perf_counter() - started) / batch_size


def measure(batches: int, batch_size: int, warmup: int) -> dict[str, dict[str, float]]:
    """Median seconds per run, per shape and contender (LangGraph missing: docket only),
    on a fresh event loop of this thread."""
    return asyncio.run(_measure(batches, batch_size, warmup))


async def _measure(batches: int, batch_size: int, warmup: int) -> dict[str, dict[str, float]]:
    medians: dict[str, dict[str, float]] = {}
    for shape in SHAPES:
        row: dict[str, Runner] = {"docket": docket_runner(shape)}
        try:
            row["langgraph"] = langgraph_runner(shape, saver=False)
            row["langgraph_inmemorysaver"] = langgraph_runner(shape, saver=True)
        except ImportError:
            pass
        for fn in row.values():
            for _ in range(warmup):
                await fn()
        samples: dict[str, list[float]] = {name: [] for name in row}
        gc.collect()
        for _ in range(batches):
            for name, fn in row.items():
                samples[name].append(await per_run_seconds(fn, batch_size))
        medians[shape] = {name: statistics.median(s) for name, s in samples.items()}
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--batches", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args(argv)
    medians = measure(args.batches, args.batch_size, args.warmup)
    print(f"median time per run, µs ({args.batches} batches of {args.batch_size})")
    print(f"{'shape':<12}" + "".join(f"{n:>26}" for n in CONTENDERS))
    for shape, row in medians.items():
        print(f"{shape:<12}" + "".join(f"{row.get(n, 0.0) * 1e6:>26.0f}" for n in CONTENDERS))
    for shape, row in medians.items():
        if "langgraph_inmemorysaver" in row:
            ratio = row["docket"] / row["langgraph_inmemorysaver"]
            print(f"ratio {shape} inline 1 docket/langgraph={ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
