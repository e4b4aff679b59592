"""A worker process for the admission race test (run as a script, not collected).

``python admission_worker.py DB NAME GO`` — open the file, create ``ready-NAME`` beside
``GO``, wait until ``GO`` exists, then race the other workers:

* ``keep``: admit one start and never finish it;
* ``churn``: admit ``ROUNDS`` starts (tenants and priorities mixed); own every start this
  process was told is admitted (by ``admit``, or promoted by one of its
  ``finish_admitted`` calls), finish the oldest owned one now and then, and at the end
  finish every owned one, recording each admitted start's interval on the machine-wide
  monotonic clock (taken after the answer that admitted it returned and before its
  finish was sent, so inside the ledger's own counting).

Prints one JSON line: ``{"kept": n, "rounds": n, "promoted": n,
"admitted": [[run_id, tenant, start, end], ...]}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from docket_sqlite import SQLiteBackend

from docket.records import Admission

ROUNDS = 20
TENANTS = ("t1", "t2", None, "t3")


async def main(path: str, name: str, go: Path) -> None:
    # a long busy timeout: eight writers on a loaded machine queue for the lock
    backend = SQLiteBackend(path, busy_timeout=60.0, synchronous="NORMAL")
    adm = backend.admissions
    await backend.open()
    (go.parent / f"ready-{name}").touch()
    while not go.exists():
        await asyncio.sleep(0.005)
    kept = int(await adm.admit("keep", f"keep-{name}", None, 0, b"k") == Admission.ADMITTED)
    owned: list[tuple[str, str | None, float]] = []
    done: list[tuple[str, str | None, float, float]] = []
    promoted = 0

    async def finish_oldest() -> None:
        nonlocal promoted
        run_id, tenant, start = owned.pop(0)
        end = time.monotonic()
        done.append((run_id, tenant, start, end))
        for entry in await adm.finish_admitted("churn", [run_id]):
            owned.append((entry.run_id, entry.tenant, time.monotonic()))
            promoted += 1

    number = int(name.lstrip("p"))
    for index in range(ROUNDS):
        run_id = f"{name}-{index}"
        tenant = TENANTS[(number + index) % len(TENANTS)]
        answer = await adm.admit("churn", run_id, tenant, index % 3, run_id.encode())
        if answer == Admission.ADMITTED:
            owned.append((run_id, tenant, time.monotonic()))
        if owned and (index % 3 == 2 or len(owned) > 1):
            await finish_oldest()
    while owned:
        await finish_oldest()
    await backend.close()
    report = {"kept": kept, "rounds": ROUNDS, "promoted": promoted, "admitted": done}
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
