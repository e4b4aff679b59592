"""One ticker process for the SQLite race test: ticker passes over a shared SQLite file
for ``seconds`` of wall time, then prints the run ids it wrote as one JSON line.

    python -m tests.schedules.sqlite_ticker DB_PATH SECONDS
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from docket.facade import Docket
from docket.runtime.graphs import GraphCache
from docket.runtime.lifecycle import random_ids
from docket.runtime.schedules import ScheduleTicker
from tests.schedules.helpers import nodes


async def main(path: str, seconds: float) -> None:
    async with Docket(f"sqlite:///{path}", nodes=nodes) as docket:
        backend = docket.backend
        ticker = ScheduleTicker(
            backend, GraphCache(backend, nodes, executable=False), docket.settings, ids=random_ids
        )
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await ticker.tick()
            await asyncio.sleep(0.02)  # a poll interval, as a worker's ticker has
        print(json.dumps({"started": ticker.report.started, "already": ticker.report.already}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
