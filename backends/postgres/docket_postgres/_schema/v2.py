"""Schema version 2: group commit (``commit_runs``, ``initialize_runs``), a
``commit_run`` that skips the stored-event lookup for new events, lz4 run documents."""

from __future__ import annotations

from typing import Final

from docket_postgres._schema.v1_writes import WRITES

# Version 2 also replaces ``commit_run`` with a body that skips looking up stored events
# when every sent event is new (the usual commit): two statements less per commit.
_V1_EVENT_LOOKUP: Final = """\
    -- what is stored at each re-sent sequence (NULL: new, or pruned)
    SELECT array_agg(e.content_sha256 ORDER BY s.i) INTO v_stored
    FROM unnest(p_seqs) WITH ORDINALITY AS s(seq, i)
    LEFT JOIN @schema@.events e
        ON e.tenant = p_tenant AND e.run_id = p_run_id AND e.seq = s.seq
        AND s.seq <= cur.event_seq;
    SELECT count(*) INTO v_new FROM unnest(p_seqs) AS s(seq) WHERE s.seq > cur.event_seq;"""
_V2_EVENT_LOOKUP: Final = """\
    IF coalesce(array_length(p_seqs, 1), 0) = 0 OR p_seqs[1] > cur.event_seq THEN
        -- every sent event is new (sequences ascend: the shared validator checked)
        v_stored := NULL;
        v_new := coalesce(array_length(p_seqs, 1), 0);
    ELSE
        -- what is stored at each re-sent sequence (NULL: new, or pruned)
        SELECT array_agg(e.content_sha256 ORDER BY s.i) INTO v_stored
        FROM unnest(p_seqs) WITH ORDINALITY AS s(seq, i)
        LEFT JOIN @schema@.events e
            ON e.tenant = p_tenant AND e.run_id = p_run_id AND e.seq = s.seq
            AND s.seq <= cur.event_seq;
        SELECT count(*) INTO v_new FROM unnest(p_seqs) AS s(seq) WHERE s.seq > cur.event_seq;
    END IF;"""
_V1_COMMIT_RUN: Final = next(f for f in WRITES if "FUNCTION @schema@.commit_run(" in f)
assert _V1_COMMIT_RUN.count(_V1_EVENT_LOOKUP) == 1
_V2_COMMIT_RUN: Final = _V1_COMMIT_RUN.replace(
    "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1
).replace(_V1_EVENT_LOOKUP, _V2_EVENT_LOOKUP)

# Version 2: group commit. ``commit_runs`` applies several runs' commits in one statement
# (one round trip, one transaction), each exactly as ``commit_run`` would apply it alone
# (``initialize_runs`` does the same for ``initialize_run``),
# in the order given (the caller sorts by owner and run id, so two batches lock rows in
# the same order). A commit's refusal is its own answer and writes nothing of it; an error
# aborts the whole statement, and the caller then resends each commit alone (they are
# idempotent by transition id). Events arrive flattened: ``p_counts[i]`` of them belong to
# commit ``i``, in order.
V2: Final[tuple[str, ...]] = (
    _V2_COMMIT_RUN,
    # Run documents are rewritten at every commit; a long one (a growing conversation) was
    # TOAST-compressed with pglz each time, several milliseconds per 200 KB. lz4 costs a
    # fraction of that; servers built without it keep pglz.
    """DO $do$
BEGIN
    IF 'lz4' = ANY ((SELECT enumvals FROM pg_catalog.pg_settings
                     WHERE name = 'default_toast_compression')::text[]) THEN
        EXECUTE 'ALTER TABLE @schema@.runs ALTER COLUMN run_json SET COMPRESSION lz4';
    END IF;
END
$do$""",
    """CREATE FUNCTION @schema@.commit_runs(
    p_tenants text[], p_run_ids text[], p_transition_ids text[], p_digests text[],
    p_graph_ids text[], p_graph_hashes text[], p_started_ats timestamptz[],
    p_expected bigint[], p_claimed boolean[], p_tokens text[],
    p_statuses text[], p_steps bigint[], p_checkpoint_seqs bigint[], p_event_seqs bigint[],
    p_updated_ats timestamptz[], p_finished_ats timestamptz[], p_run_jsons bytea[],
    p_checkpoint_types text[], p_schedules text[], p_wake_ats timestamptz[], p_now timestamptz,
    p_counts integer[], p_seqs bigint[], p_events bytea[], p_hashes bytea[])
RETURNS TABLE (
    o_index integer, o_outcome text, o_digest text, o_graph_id text, o_graph_hash text,
    o_started_at timestamptz, o_checkpoint_seq bigint, o_token_held boolean,
    o_event_seq bigint, o_stored bytea[], o_run_json bytea, o_announced boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_first integer := 1;
    v_last integer;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_run_ids, 1), 0) LOOP
        v_last := v_first + p_counts[i] - 1;
        RETURN QUERY SELECT i, c.* FROM @schema@.commit_run(
            p_tenants[i], p_run_ids[i], p_transition_ids[i], p_digests[i],
            p_graph_ids[i], p_graph_hashes[i], p_started_ats[i],
            p_expected[i], p_claimed[i], p_tokens[i],
            p_statuses[i], p_steps[i], p_checkpoint_seqs[i], p_event_seqs[i],
            p_updated_ats[i], p_finished_ats[i], p_run_jsons[i],
            p_checkpoint_types[i], p_schedules[i], p_wake_ats[i], p_now,
            coalesce(p_seqs[v_first:v_last], '{}'), coalesce(p_events[v_first:v_last], '{}'),
            coalesce(p_hashes[v_first:v_last], '{}')) c;
        v_first := v_last + 1;
    END LOOP;
END
$fn$""",
    """CREATE FUNCTION @schema@.initialize_runs(
    p_tenants text[], p_run_ids text[], p_transition_ids text[], p_digests text[],
    p_graph_ids text[], p_graph_hashes text[], p_statuses text[], p_steps bigint[],
    p_checkpoint_seqs bigint[], p_event_seqs bigint[], p_started_ats timestamptz[],
    p_updated_ats timestamptz[], p_finished_ats timestamptz[], p_run_jsons bytea[],
    p_checkpoint_types text[], p_wake_ats timestamptz[], p_now timestamptz,
    p_counts integer[], p_seqs bigint[], p_events bytea[], p_hashes bytea[])
RETURNS TABLE (
    o_index integer, o_outcome text, o_digest text, o_run_json bytea, o_announced boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_first integer := 1;
    v_last integer;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_run_ids, 1), 0) LOOP
        v_last := v_first + p_counts[i] - 1;
        RETURN QUERY SELECT i, c.* FROM @schema@.initialize_run(
            p_tenants[i], p_run_ids[i], p_transition_ids[i], p_digests[i],
            p_graph_ids[i], p_graph_hashes[i], p_statuses[i], p_steps[i],
            p_checkpoint_seqs[i], p_event_seqs[i], p_started_ats[i],
            p_updated_ats[i], p_finished_ats[i], p_run_jsons[i],
            p_checkpoint_types[i], p_wake_ats[i], p_now,
            coalesce(p_seqs[v_first:v_last], '{}'), coalesce(p_events[v_first:v_last], '{}'),
            coalesce(p_hashes[v_first:v_last], '{}')) c;
        v_first := v_last + 1;
    END LOOP;
END
$fn$""",
)
