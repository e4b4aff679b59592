"""A process for the schedule-store tests (run as a script, not collected).

``python schedule_worker.py DB NAME COUNT GO`` — say it is ready, wait until the file
``GO`` exists, then add ``COUNT`` to the ``metadata["counter"]`` of schedule ``shared``
one at a time, each as a read followed by an update fenced on the version read,
starting over whenever the fence says someone else wrote first. Prints one JSON line
per update it won, with the version it wrote, so the parent can check that no two
writers won the same version.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import attrs
from docket_sqlite import RetryableStoreError, SQLiteBackend

from docket.contract import StaleCheckpoint
from docket.records import TENANTLESS, CronSchedule


async def main(db: str, name: str, count: int, go: Path) -> None:
    backend = SQLiteBackend(db, busy_timeout=30)
    await backend.open()
    sys.stdout.write(json.dumps({"ready": name}) + "\n")
    sys.stdout.flush()
    deadline = time.monotonic() + 60
    while not go.exists():  # a start line, so the processes really overlap
        if time.monotonic() > deadline:
            raise SystemExit("the go file never appeared")
        await asyncio.sleep(0.005)
    store = backend.schedules
    won = 0
    while won < count:
        current = await store.fetch_schedule(TENANTLESS, "shared")
        assert isinstance(current, CronSchedule), current
        counter = current.metadata["counter"]
        assert isinstance(counter, int)
        changed = attrs.evolve(current, metadata={"counter": counter + 1, "by": name})
        try:
            got = await store.update_schedule(TENANTLESS, changed, current.version)
        except RetryableStoreError:
            continue
        if isinstance(got, StaleCheckpoint):
            continue
        assert isinstance(got, CronSchedule), got
        won += 1
        sys.stdout.write(json.dumps({"name": name, "version": got.version}) + "\n")
        sys.stdout.flush()
    await backend.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])))
