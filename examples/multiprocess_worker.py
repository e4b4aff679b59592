"""Several worker processes sharing one SQLite file.

The script publishes a three-step graph, starts 30 runs, then launches

    docket worker --app multiprocess_worker:app --processes 3 --concurrency 4

(three worker processes under one supervisor), waits until every run is done, and stops
the workers with SIGTERM (a graceful shutdown). Each run records which process executed
each of its steps, so the output shows the work spread over the processes. Claims make
sure no step commits twice, whichever process runs it.

    python examples/multiprocess_worker.py
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from docket import (
    FINISH,
    START,
    Docket,
    GraphBuilder,
    NodeContext,
    NodeRegistry,
    NodeState,
    R,
    S,
    SyncDocket,
)

HERE = Path(__file__).resolve().parent
RUNS = 30

nodes = NodeRegistry()


@nodes.node("pipeline.step")
async def step(state: NodeState, ctx: NodeContext) -> dict[str, list[str]]:
    await asyncio.sleep(0.02)  # some I/O
    return {"done_by": [f"{ctx.node_id}@{os.getpid()}"]}


graph = (
    GraphBuilder("pipeline")
    .field("done_by", S.list(S.string()), reducer=R.append())
    .node("fetch", "pipeline.step")
    .node("resize", "pipeline.step")
    .node("store", "pipeline.step")
    .edge("begin", START, "fetch")
    .edge("next", "fetch", "resize")
    .edge("last", "resize", "store")
    .edge("end", "store", FINISH)
    .output("done_by")
    .build()
)


def app() -> Docket:
    """What ``docket worker --app multiprocess_worker:app`` runs in each process."""
    return Docket(os.environ["DOCKET_BACKEND"], nodes=nodes, poll_interval=0.2)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="docket-multiprocess-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'pipeline.db'}"
        with SyncDocket(url, nodes=nodes) as docket:
            ref = docket.save_graph(graph)
            for index in range(RUNS):
                docket.start_run(ref, run_id=f"image-{index:02}")
            print(f"started {RUNS} runs of {ref.graph_id}; launching 3 worker processes")
            command = [sys.executable, "-m", "docket.cli", "worker"]
            command += ["--app", "multiprocess_worker:app", "--processes", "3"]
            command += ["--concurrency", "4"]
            supervisor = subprocess.Popen(
                command,
                cwd=HERE,
                env={**os.environ, "DOCKET_BACKEND": url},
                stderr=subprocess.DEVNULL,
            )
            started = time.monotonic()
            try:
                while True:
                    done = docket.list_runs(status="done", limit=1000).runs
                    if len(done) == RUNS or time.monotonic() - started > 60:
                        break
                    time.sleep(0.1)
            finally:
                supervisor.send_signal(signal.SIGTERM)
                supervisor.communicate(timeout=60)
            elapsed = time.monotonic() - started
            steps: Counter[str] = Counter()
            runs_by: Counter[int] = Counter()
            for summary in done:
                run = docket.fetch_run(summary.id)
                assert run.output is not None
                trail = run.output["done_by"]
                assert isinstance(trail, list)
                pids = [str(item).split("@")[1] for item in trail]
                steps.update(pids)
                runs_by[len(set(pids))] += 1
            print(f"{len(done)} of {RUNS} runs done in {elapsed:.1f}s")
            print(f"steps executed per worker process: {dict(sorted(steps.items()))}")
            print(
                f"runs drained start to finish by one process: {runs_by[1]} "
                "(a worker keeps its claim from step to step)"
            )
            print(f"workers stopped with SIGTERM: exit code {supervisor.returncode}")


if __name__ == "__main__":
    main()
