"""The application the ceiling's worker processes run:
``docket worker --app bench.worker_app:create`` (imported in each process).

The bench's own node registry (``bench.shapes.NODES``: the async no-op nodes), on the
store named by ``DOCKET_BACKEND``. ``DOCKET_BENCH_POLL`` sets the poll interval in
seconds (0.02 by default: an idle worker notices new runs from another process only by
polling, and the trials are a few seconds long).
"""

from __future__ import annotations

import os

from bench.shapes import NODES
from docket import Docket


def create() -> Docket:
    return Docket(
        os.environ["DOCKET_BACKEND"],
        nodes=NODES,
        poll_interval=float(os.environ.get("DOCKET_BENCH_POLL", "0.02")),
    )
