"""A process that starts runs beside its own worker (eager starts), for the crash test.

``python -m tests.runtime.eager_starter N`` opens ``worker_app.create()`` (configured by
the same environment variables as the worker processes), starts a worker with N slots,
starts N runs of ``worker_app.FIVE_STEPS`` (``eager-<i>``) — each written already claimed
by that worker — logs ``<pid> <run id>`` per start to ``started-<pid>.log`` and then
waits to be killed. Run with ``DOCKET_TEST_HOLD_AFTER=0`` its node attempts hang, so it
dies holding every run it started.
"""

from __future__ import annotations

import asyncio
import os
import sys

from tests.runtime import worker_app


async def main(runs: int) -> None:
    async with worker_app.create() as docket:
        ref = await docket.save_graph(worker_app.FIVE_STEPS)
        async with docket.worker(concurrency=runs, name="starter") as worker:
            for index in range(runs):
                run = await docket.start_run(ref, run_id=f"eager-{index}")
                worker_app._log("started", f"{os.getpid()} {run.id}")
            assert worker.stats.eager_starts == runs, worker.stats
            await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
