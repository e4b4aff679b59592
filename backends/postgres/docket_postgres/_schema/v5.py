"""Schema version 5: a run can start claimed (``ClaimedStarts``)."""

from __future__ import annotations

from typing import Final

from docket_postgres._schema.v1_writes import WRITES
from docket_postgres._schema.v3 import INITIALIZE_RUNS_V2_ARGS, V3

# Version 5: a run can start claimed (``ClaimedStarts``, an eager start). The start
# functions take the claim token after the wake (NULL: a plain start); a claimed start's
# live row holds the token, claimed at the start's wake time, one claim attempt counted,
# no wake, and it is not announced (the worker that wrote it drains it).
_V1_INITIALIZE_RUN: Final = next(
    f for f in WRITES if "CREATE FUNCTION @schema@.initialize_run(" in f
)
_V3_INITIALIZE_RUNS: Final = next(f for f in V3 if "CREATE FUNCTION @schema@.initialize_runs(" in f)
_INITIALIZE_RUN_V1_ARGS: Final = (
    "text, text, text, text, text, text, text, bigint, bigint, bigint, timestamptz, "
    "timestamptz, timestamptz, bytea, text, timestamptz, timestamptz, bigint[], bytea[], "
    "bytea[]"
)
INITIALIZE_RUNS_V3_ARGS: Final = f"{INITIALIZE_RUNS_V2_ARGS}, integer[], boolean[], integer[]"


def rewritten(statement: str, replacements: tuple[tuple[str, str], ...]) -> str:
    """``statement`` with each ``(old, new)`` applied; each ``old`` must occur once."""
    for old, new in replacements:
        assert statement.count(old) == 1, old
        statement = statement.replace(old, new)
    return statement


V5: Final[tuple[str, ...]] = (
    f"DROP FUNCTION @schema@.initialize_runs({INITIALIZE_RUNS_V3_ARGS})",
    f"DROP FUNCTION @schema@.initialize_run({_INITIALIZE_RUN_V1_ARGS})",
    rewritten(
        _V1_INITIALIZE_RUN,
        (
            (
                "p_wake_at timestamptz, p_now timestamptz,",
                "p_wake_at timestamptz, p_token text,\n    p_now timestamptz,",
            ),
            (
                """    INSERT INTO @schema@.live (tenant, run_id, status, wake_at)
    VALUES (p_tenant, p_run_id, p_status, p_wake_at);""",
                """    INSERT INTO @schema@.live (
        tenant, run_id, status, wake_at, claim_token, claimed_at, claim_attempts)
    VALUES (p_tenant, p_run_id, p_status,
            CASE WHEN p_token IS NULL THEN p_wake_at END, p_token,
            CASE WHEN p_token IS NOT NULL THEN p_wake_at END,
            CASE WHEN p_token IS NULL THEN 0 ELSE 1 END);""",
            ),
            (
                "    IF p_wake_at <= v_now THEN",
                "    IF p_token IS NULL AND p_wake_at <= v_now THEN",
            ),
        ),
    ),
    rewritten(
        _V3_INITIALIZE_RUNS,
        (
            (
                "p_checkpoint_types text[], p_wake_ats timestamptz[], p_now timestamptz,",
                "p_checkpoint_types text[], p_wake_ats timestamptz[], p_tokens text[],\n"
                "    p_now timestamptz,",
            ),
            (
                "        v_due := coalesce(p_wake_ats[f.i] <= v_now, false);",
                "        v_due := p_tokens[f.i] IS NULL\n"
                "            AND coalesce(p_wake_ats[f.i] <= v_now, false);",
            ),
            (
                """        INSERT INTO @schema@.live (tenant, run_id, status, wake_at)
        SELECT p_tenants[b.i], b.id, p_statuses[b.i], p_wake_ats[b.i]
        FROM""",
                """        INSERT INTO @schema@.live (
            tenant, run_id, status, wake_at, claim_token, claimed_at, claim_attempts)
        SELECT p_tenants[b.i], b.id, p_statuses[b.i],
               CASE WHEN p_tokens[b.i] IS NULL THEN p_wake_ats[b.i] END, p_tokens[b.i],
               CASE WHEN p_tokens[b.i] IS NOT NULL THEN p_wake_ats[b.i] END,
               CASE WHEN p_tokens[b.i] IS NULL THEN 0 ELSE 1 END
        FROM""",
            ),
            (
                "            p_checkpoint_types[i], p_wake_ats[i], p_now,",
                "            p_checkpoint_types[i], p_wake_ats[i], p_tokens[i], p_now,",
            ),
        ),
    ),
)
