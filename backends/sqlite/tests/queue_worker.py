"""A worker process for the queue race test (run as a script, not collected).

``python queue_worker.py DB NAME GO`` — open the file, create ``ready-NAME`` beside
``GO``, wait until ``GO`` exists, then race the other worker for slots:

* ``keep`` and ``rate``: acquire and never release, counting what was granted;
* ``lim``: acquire, renew, release, many times, recording each held slot's interval
  on the machine-wide monotonic clock (taken after the grant returned and before the
  release was sent, so inside the ledger's own holding).

Prints one JSON line: ``{"kept": n, "rated": n, "held": [[start, end], ...]}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TypeVar

from docket_sqlite import SQLiteBackend
from docket_sqlite.errors import RetryableStoreError

T = TypeVar("T")
ROUNDS = 60


async def patiently(call: Callable[[], Awaitable[T]]) -> T:
    """Retry while the file stays busy past the busy timeout (a loaded machine)."""
    for _ in range(100):
        try:
            return await call()
        except RetryableStoreError:
            await asyncio.sleep(0.01)
    return await call()


async def main(path: str, name: str, go: Path) -> None:
    backend = SQLiteBackend(path)
    queues = backend.queues
    await backend.open()
    (go.parent / f"ready-{name}").touch()
    while not go.exists():
        await asyncio.sleep(0.005)
    day = timedelta(days=1)
    kept = rated = 0
    held: list[list[float]] = []
    for index in range(ROUNDS):
        ids = [f"{name}-{index}-{k}" for k in range(2)]
        kept += await patiently(partial(queues.acquire_slots, "keep", [f"k{ids[0]}"], day))
        rated += await patiently(partial(queues.acquire_slots, "rate", [f"r{ids[0]}"], day))
        granted = await patiently(partial(queues.acquire_slots, "lim", ids, day))
        start = time.monotonic()
        if granted:
            renewed = await patiently(partial(queues.renew_slots, "lim", ids, day))
            assert renewed == granted, (renewed, granted)
        end = time.monotonic()
        await patiently(partial(queues.release_slots, "lim", ids))
        held.extend([start, end] for _ in range(granted))
    await backend.close()
    sys.stdout.write(json.dumps({"kept": kept, "rated": rated, "held": held}) + "\n")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
