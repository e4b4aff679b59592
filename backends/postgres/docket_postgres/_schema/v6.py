"""Schema version 6: the set-wise functions probe keys whatever the statistics say."""

from __future__ import annotations

from typing import Final

from docket_postgres._schema.v3 import COMMIT_RUNS_V2_ARGS
from docket_postgres._schema.v5 import INITIALIZE_RUNS_V3_ARGS, rewritten

_COMMIT_RUNS_V3_ARGS: Final = f"{COMMIT_RUNS_V2_ARGS}, integer[], boolean[], integer[]"
# version 5's tokens come right after the wakes
_INITIALIZE_RUNS_V5_ARGS: Final = rewritten(
    INITIALIZE_RUNS_V3_ARGS,
    (("timestamptz[], timestamptz, integer[]", "timestamptz[], text[], timestamptz, integer[]"),),
)
CLAIM_DUE_ARGS: Final = "integer, interval, integer, text, timestamptz, boolean"
# Probing a key, whatever the statistics say (the set-wise functions' SET clauses below).
INDEX_PROBES: Final = (
    "SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off"
)

# Version 6: the set-wise functions (group commits, group starts, claims) join their
# batch to the tables by key whatever the statistics say, and a claim is expected to
# return a handful of runs.
#
# A function's statements are planned once per session (generic plans) and kept until
# the table's statistics change. A session that first ran them while the tables were
# new (never analyzed) got hash joins over a scan of the whole ``runs`` table, and kept
# them until autovacuum's next ANALYZE: every commit then read every run. With hash and
# merge joins and sequential scans off inside these functions, the only plan left is
# the intended one, one index probe per write. (A later ``CREATE OR REPLACE`` of these
# functions must repeat the SET clauses: it replaces them.) ``claim_due`` is estimated at
# 16 rows instead of 1000, so the claim statement reads the claimed runs' documents by
# key rather than by scanning ``runs`` for them.
V6: Final[tuple[str, ...]] = (
    f"ALTER FUNCTION @schema@.commit_runs({_COMMIT_RUNS_V3_ARGS}) {INDEX_PROBES}",
    f"ALTER FUNCTION @schema@.initialize_runs({_INITIALIZE_RUNS_V5_ARGS}) {INDEX_PROBES}",
    f"ALTER FUNCTION @schema@.claim_due({CLAIM_DUE_ARGS}) {INDEX_PROBES} ROWS 16",
)
