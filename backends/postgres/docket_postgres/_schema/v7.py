"""Schema version 7: durable time (a waiting run may be due) and cron schedules."""

from __future__ import annotations

from typing import Final

from docket_postgres._schema.v3 import V3
from docket_postgres._schema.v5 import rewritten
from docket_postgres._schema.v6 import CLAIM_DUE_ARGS, INDEX_PROBES

# Version 7, durable time (``Feature.TIMERS``): a *waiting* run may have a wake (a
# deadline, a message wait that gives up) and a claim takes it when it is due, or when
# its claim expired, exactly as it takes a running one. A waiting run with no wake (an
# ``External`` wait) is never due. So:
#
# * ``live`` no longer refuses a wake, a claim or poison on a waiting run; it still
#   refuses a wake and a claim together (a claim clears the wake) on any run, and a
#   running run must keep exactly one of them unless poisoned.
# * The claim indexes no longer name the status: ready is "healthy, unclaimed, has a
#   wake" (which leaves External waits out of the index), claimed is "healthy, claimed".
# * ``claim_due`` drops its status tests and the fair policy's tenant walk asks for a
#   wake instead; the rest of the function is unchanged. A ``CREATE OR REPLACE``
#   resets the planner options version 6 set, so they are set again after it.
_READY: Final = "poisoned_at IS NULL AND claim_token IS NULL AND wake_at IS NOT NULL"
_CLAIMED: Final = "poisoned_at IS NULL AND claim_token IS NOT NULL"
_V3_CLAIM_DUE: Final = next(f for f in V3 if "FUNCTION @schema@.claim_due(" in f)
_WALK_FIRST: Final = (
    "                 WHERE r.status = 'running' AND r.poisoned_at IS NULL AND "
    "r.claim_token IS NULL\n"
)
_WALK_NEXT: Final = (
    "                        WHERE r.status = 'running' AND r.poisoned_at IS NULL\n"
    "                          AND r.claim_token IS NULL AND r.tenant > w.tenant\n"
)
_V7_CLAIM_DUE: Final = (
    rewritten(
        _V3_CLAIM_DUE,
        (
            (
                _WALK_FIRST,
                "                 WHERE r.wake_at IS NOT NULL AND r.poisoned_at IS NULL AND "
                "r.claim_token IS NULL\n",
            ),
            (
                _WALK_NEXT,
                "                        WHERE r.wake_at IS NOT NULL AND r.poisoned_at IS NULL\n"
                "                          AND r.claim_token IS NULL AND r.tenant > w.tenant\n",
            ),
        ),
    )
    .replace("r.status = 'running' AND ", "")
    .replace(" AND r.status = 'running'\n", "\n")
)
assert "'running'" not in _V7_CLAIM_DUE

# Cron schedules (``Feature.SCHEDULES``): one row per schedule and owner, the document
# (``schedule_to_json``) beside the columns the store reads: ``version`` (the fence of
# every change: an update is ``UPDATE ... WHERE version = expected``), ``due_at`` (NULL
# when paused or done; the ticker's index) — both copies of the document's fields.
# Listing across owners reads ``schedules_by_id``; within one owner, the primary key.
SCHEDULES: Final[tuple[str, ...]] = (
    """CREATE TABLE @schema@.schedules (
    tenant      text COLLATE "C" NOT NULL,
    schedule_id text COLLATE "C" NOT NULL CHECK (schedule_id <> ''),
    version     bigint      NOT NULL CHECK (version >= 1),
    due_at      timestamptz,
    document    bytea       NOT NULL,
    PRIMARY KEY (tenant, schedule_id)
)""",
    """CREATE INDEX schedules_due ON @schema@.schedules (due_at, schedule_id, tenant)
    WHERE due_at IS NOT NULL""",
    """CREATE INDEX schedules_by_id ON @schema@.schedules (schedule_id, tenant)""",
)

V7: Final[tuple[str, ...]] = (
    "ALTER TABLE @schema@.live DROP CONSTRAINT live_idle_unless_running_check",
    """ALTER TABLE @schema@.live ADD CONSTRAINT live_wake_or_claim_check
    CHECK (wake_at IS NULL OR claim_token IS NULL)""",
    "DROP INDEX @schema@.live_due",
    "DROP INDEX @schema@.live_due_by_tenant",
    "DROP INDEX @schema@.live_claimed",
    f"CREATE INDEX live_due ON @schema@.live (wake_at, run_id, tenant) WHERE {_READY}",
    f"""CREATE INDEX live_due_by_tenant ON @schema@.live (tenant, wake_at, run_id)
    WHERE {_READY}""",
    f"""CREATE INDEX live_claimed ON @schema@.live (claimed_at, run_id, tenant)
    WHERE {_CLAIMED}""",
    _V7_CLAIM_DUE,
    f"ALTER FUNCTION @schema@.claim_due({CLAIM_DUE_ARGS}) {INDEX_PROBES} ROWS 16",
    *SCHEDULES,
)
