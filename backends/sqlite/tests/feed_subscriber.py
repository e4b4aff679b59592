"""A subscriber in its own process (test_sqlite_feed.py): subscribes to a file's feed,
prints ``ready``, then collects items until it has seen a notice of ``RUN`` reaching
``LAST_SEQ`` and the emission with ``seq`` ``EMISSION_SEQ``; prints them as JSON lines.

usage: feed_subscriber.py DB_PATH TENANT|- RUN LAST_SEQ EMISSION_SEQ DEADLINE_SECONDS
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from docket_sqlite import SQLiteBackend

from docket.records import SYSTEM, CommitNotice, Emission, Scope, Tenant, feed_item_to_json


async def main(path: str, tenant: str, run_id: str, last_seq: int, emission_seq: int) -> int:
    backend = SQLiteBackend(path, feed_poll=0.02)
    scope: Scope = SYSTEM if tenant == "-" else Tenant(tenant)
    subscription = await backend.feed.subscribe(scope)
    print("ready", flush=True)
    deadline = time.monotonic() + float(sys.argv[6])
    noticed = emitted = False
    try:
        while not (noticed and emitted):
            if time.monotonic() > deadline:
                print("timed out", file=sys.stderr, flush=True)
                return 3
            for item in await subscription.get(0.5):
                print(feed_item_to_json(item).decode(), flush=True)
                if isinstance(item, CommitNotice) and item.run_id == run_id:
                    noticed = noticed or item.last_seq >= last_seq
                if isinstance(item, Emission) and item.seq == emission_seq:
                    emitted = True
    finally:
        await subscription.close()
        await backend.close()
    return 0


if __name__ == "__main__":
    path, tenant, run_id, last, emission = sys.argv[1:6]
    code = asyncio.run(main(path, tenant, run_id, int(last), int(emission)))
    print(json.dumps({"exit": code}), flush=True)
    sys.exit(code)
