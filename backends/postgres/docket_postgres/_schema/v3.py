"""Schema version 3: group statements apply their usual writes set-wise; a set-wise
fast path for blind claims."""

from __future__ import annotations

from typing import Final

from docket_postgres._schema.v1_claims import CLAIMS

# Version 3: group statements apply their usual writes set-wise — a handful of statements
# for the whole group instead of a dozen per write (the server's time went per statement,
# not per row). For ``commit_runs`` the usual commit is the first of its run in the group,
# sends only new events and passes every fence; for ``initialize_runs`` it is the first of
# its run id, of a published graph, and the id is free. Every other write of the group
# (refusals, replays, re-sent events, a second write to one run) then goes through
# ``commit_run`` / ``initialize_run`` one at a time, after them, in the group's order, so
# every answer is what it was. The caller now also sends, per write, where its events
# start in the flattened arrays and whether it is the first write to its run in the
# group, and per event the write it belongs to (``p_firsts``, ``p_solo``, ``p_owners``).
# Rows are locked as by ``commit_run``: per run, the run row and then its live row, runs
# in (owner, run id) order. The group is walked with ``unnest(...) WITH ORDINALITY``
# (estimated at a few rows; ``generate_series`` is estimated at 1000, and the cached
# plans then scanned whole tables instead of probing primary keys).
COMMIT_RUNS_V2_ARGS: Final = (
    "text[], text[], text[], text[], text[], text[], timestamptz[], bigint[], boolean[], "
    "text[], text[], bigint[], bigint[], bigint[], timestamptz[], timestamptz[], bytea[], "
    "text[], text[], timestamptz[], timestamptz, integer[], bigint[], bytea[], bytea[]"
)
INITIALIZE_RUNS_V2_ARGS: Final = (
    "text[], text[], text[], text[], text[], text[], text[], bigint[], bigint[], bigint[], "
    "timestamptz[], timestamptz[], timestamptz[], bytea[], text[], timestamptz[], "
    "timestamptz, integer[], bigint[], bytea[], bytea[]"
)
# Version 3 also gives ``claim_due`` a set-wise fast path: with the blind policy and no
# expired claim anywhere, a claim is just the first ready runs in (wake, run id, owner)
# order that no one else holds — one statement (``FOR UPDATE SKIP LOCKED`` on the due
# index) instead of a statement or two per candidate. Anything else, or nothing found
# that way, takes the general passes as before.
_V1_CLAIM_DUE: Final = next(f for f in CLAIMS if "FUNCTION @schema@.claim_due(" in f)
_CLAIM_DECLARE: Final = "    v_any boolean;\nBEGIN\n"
_CLAIM_PASSES: Final = "    FOR v_pass IN 1 .. 3 LOOP\n"
assert _V1_CLAIM_DUE.count(_CLAIM_DECLARE) == 1 and _V1_CLAIM_DUE.count(_CLAIM_PASSES) == 1
_V3_CLAIM_DUE: Final = (
    _V1_CLAIM_DUE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    .replace(_CLAIM_DECLARE, "    v_any boolean;\n    f record;\nBEGIN\n")
    .replace(
        _CLAIM_PASSES,
        """    IF NOT p_fair AND NOT EXISTS (
            SELECT 1 FROM @schema@.live r
            WHERE r.status = 'running' AND r.poisoned_at IS NULL
              AND r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff) THEN
        -- no expired claim: the first ready runs no one holds, in the general order
        FOR f IN
            SELECT r.tenant, r.run_id, r.wake_at, r.claim_attempts FROM @schema@.live r
            WHERE r.status = 'running' AND r.poisoned_at IS NULL
              AND r.claim_token IS NULL AND r.wake_at <= v_now
            ORDER BY r.wake_at, r.run_id, r.tenant
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED
        LOOP
            c_tenant := array_append(c_tenant, f.tenant);
            c_id := array_append(c_id, f.run_id);
            c_at := array_append(c_at, f.wake_at);
            c_attempts := array_append(c_attempts, f.claim_attempts);
        END LOOP;
    END IF;
    FOR v_pass IN 1 .. 3 LOOP
        EXIT WHEN cardinality(c_id) > 0;  -- the fast path above found work
""",
    )
)

V3: Final[tuple[str, ...]] = (
    f"DROP FUNCTION @schema@.commit_runs({COMMIT_RUNS_V2_ARGS})",
    f"DROP FUNCTION @schema@.initialize_runs({INITIALIZE_RUNS_V2_ARGS})",
    _V3_CLAIM_DUE,
    """CREATE FUNCTION @schema@.commit_runs(
    p_tenants text[], p_run_ids text[], p_transition_ids text[], p_digests text[],
    p_graph_ids text[], p_graph_hashes text[], p_started_ats timestamptz[],
    p_expected bigint[], p_claimed boolean[], p_tokens text[],
    p_statuses text[], p_steps bigint[], p_checkpoint_seqs bigint[], p_event_seqs bigint[],
    p_updated_ats timestamptz[], p_finished_ats timestamptz[], p_run_jsons bytea[],
    p_checkpoint_types text[], p_schedules text[], p_wake_ats timestamptz[], p_now timestamptz,
    p_counts integer[], p_seqs bigint[], p_events bytea[], p_hashes bytea[],
    p_firsts integer[], p_solo boolean[], p_owners integer[])
RETURNS TABLE (
    o_index integer, o_outcome text, o_digest text, o_graph_id text, o_graph_hash text,
    o_started_at timestamptz, o_checkpoint_seq bigint, o_token_held boolean,
    o_event_seq bigint, o_stored bytea[], o_run_json bytea, o_announced boolean)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_n integer := coalesce(array_length(p_run_ids, 1), 0);
    v_ok boolean[] := array_fill(false, ARRAY[v_n]);  -- write i takes the set-wise path
    v_token text[] := array_fill(NULL::text, ARRAY[v_n]);  -- its live row afterwards
    v_claimed_at timestamptz[] := array_fill(NULL::timestamptz, ARRAY[v_n]);
    v_wake timestamptz[] := array_fill(NULL::timestamptz, ARRAY[v_n]);
    v_any boolean := false;
    v_ends boolean := false;
    v_stays boolean := false;
    v_announce boolean := false;
    v_due boolean;
    f record;
BEGIN
    -- Lock each first write's run row and then its live row, in (owner, run id) order, and
    -- read their latest values. Runs without a live row (finished, or unknown) are not
    -- usual commits. The transition lookup reads this statement's snapshot, which may
    -- predate a commit the locks waited for; such a commit moved the checkpoint, so the
    -- fence below fails and the write goes the one-at-a-time way, which reads again.
    FOR f IN
        SELECT b.i::integer AS i,
               coalesce(t.digest IS NULL
                   AND r.graph_id = p_graph_ids[b.i] AND r.graph_hash = p_graph_hashes[b.i]
                   AND r.started_at = p_started_ats[b.i]
                   AND r.checkpoint_seq = p_expected[b.i]
                   AND (NOT p_claimed[b.i] OR l.claim_token = p_tokens[b.i])
                   AND p_event_seqs[b.i] >= r.event_seq
                   AND p_counts[b.i] = p_event_seqs[b.i] - r.event_seq
                   AND (p_counts[b.i] = 0 OR p_seqs[p_firsts[b.i]] > r.event_seq),
                   false) AS ok,
               l.claim_token AS token, l.claimed_at AS claimed_at
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        JOIN @schema@.runs r ON r.tenant = p_tenants[b.i] AND r.run_id = b.id
        JOIN @schema@.live l ON l.tenant = r.tenant AND l.run_id = r.run_id
        LEFT JOIN @schema@.transitions t ON t.tenant = r.tenant AND t.run_id = r.run_id
            AND t.transition_id = p_transition_ids[b.i]
        WHERE p_solo[b.i]
        ORDER BY b.i  -- the caller sorted by owner and run id
        FOR UPDATE OF r, l
    LOOP
        CONTINUE WHEN NOT f.ok;
        v_ok[f.i] := true;
        v_any := true;
        IF p_statuses[f.i] IN ('done', 'failed', 'cancelled') THEN
            v_ends := true;
            v_due := false;
        ELSE
            v_stays := true;
            IF p_schedules[f.i] = 'retain' THEN
                v_token[f.i] := f.token;
                v_claimed_at[f.i] := greatest(f.claimed_at, v_now);  -- never moves back
            ELSE
                v_wake[f.i] := CASE p_schedules[f.i] WHEN 'immediate' THEN v_now
                                                     WHEN 'at' THEN p_wake_ats[f.i] END;
            END IF;
            v_due := coalesce(v_wake[f.i] <= v_now, false);
            v_announce := v_announce OR v_due;
        END IF;
        o_index := f.i;
        o_outcome := 'written';
        o_announced := v_due;
        RETURN NEXT;
    END LOOP;
    IF v_any THEN
        UPDATE @schema@.runs r SET
            status = p_statuses[b.i], step = p_steps[b.i],
            checkpoint_seq = p_checkpoint_seqs[b.i], event_seq = p_event_seqs[b.i],
            updated_at = p_updated_ats[b.i], finished_at = p_finished_ats[b.i],
            run_json = p_run_jsons[b.i], latest_checkpoint_type = p_checkpoint_types[b.i],
            ended_at = CASE WHEN p_statuses[b.i] IN ('done', 'failed', 'cancelled')
                            THEN v_now END
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i] AND r.tenant = p_tenants[b.i] AND r.run_id = b.id;
        IF v_ends THEN
            DELETE FROM @schema@.live l
            USING unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE v_ok[b.i] AND p_statuses[b.i] IN ('done', 'failed', 'cancelled')
              AND l.tenant = p_tenants[b.i] AND l.run_id = b.id;
        END IF;
        IF v_stays THEN
            -- every commit resets the claim health (attempts, abandons, poison)
            UPDATE @schema@.live l SET
                status = p_statuses[b.i], wake_at = v_wake[b.i],
                claim_token = v_token[b.i], claimed_at = v_claimed_at[b.i],
                claim_attempts = 0, claim_abandons = 0, poisoned_at = NULL,
                poison_reason = NULL
            FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE v_ok[b.i] AND p_statuses[b.i] NOT IN ('done', 'failed', 'cancelled')
              AND l.tenant = p_tenants[b.i] AND l.run_id = b.id;
        END IF;
        INSERT INTO @schema@.transitions (tenant, run_id, transition_id, digest)
        SELECT p_tenants[b.i], b.id, p_transition_ids[b.i], p_digests[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i];
        INSERT INTO @schema@.events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
        SELECT p_tenants[p_owners[e.j]], p_run_ids[p_owners[e.j]], e.seq, e.body, e.hash, v_now
        FROM unnest(p_seqs, p_events, p_hashes) WITH ORDINALITY AS e(seq, body, hash, j)
        WHERE v_ok[p_owners[e.j]];
        IF v_announce THEN
            PERFORM pg_notify('docket_wake', '@name@');
        END IF;
    END IF;
    -- everything else, one write at a time, in the group's order
    FOR i IN 1 .. v_n LOOP
        CONTINUE WHEN v_ok[i];
        RETURN QUERY SELECT i, c.* FROM @schema@.commit_run(
            p_tenants[i], p_run_ids[i], p_transition_ids[i], p_digests[i],
            p_graph_ids[i], p_graph_hashes[i], p_started_ats[i],
            p_expected[i], p_claimed[i], p_tokens[i],
            p_statuses[i], p_steps[i], p_checkpoint_seqs[i], p_event_seqs[i],
            p_updated_ats[i], p_finished_ats[i], p_run_jsons[i],
            p_checkpoint_types[i], p_schedules[i], p_wake_ats[i], p_now,
            coalesce(p_seqs[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}'),
            coalesce(p_events[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}'),
            coalesce(p_hashes[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}')) c;
    END LOOP;
END
$fn$""",
    """CREATE FUNCTION @schema@.initialize_runs(
    p_tenants text[], p_run_ids text[], p_transition_ids text[], p_digests text[],
    p_graph_ids text[], p_graph_hashes text[], p_statuses text[], p_steps bigint[],
    p_checkpoint_seqs bigint[], p_event_seqs bigint[], p_started_ats timestamptz[],
    p_updated_ats timestamptz[], p_finished_ats timestamptz[], p_run_jsons bytea[],
    p_checkpoint_types text[], p_wake_ats timestamptz[], p_now timestamptz,
    p_counts integer[], p_seqs bigint[], p_events bytea[], p_hashes bytea[],
    p_firsts integer[], p_solo boolean[], p_owners integer[])
RETURNS TABLE (
    o_index integer, o_outcome text, o_digest text, o_run_json bytea, o_announced boolean)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_n integer := coalesce(array_length(p_run_ids, 1), 0);
    v_ok boolean[] := array_fill(false, ARRAY[v_n]);  -- write i took the set-wise path
    v_any boolean := false;
    v_announce boolean := false;
    v_due boolean;
    f record;
BEGIN
    -- First writes of a run id, of a published graph: insert the run rows. A taken id
    -- (even by a racing initialize that has just committed) is skipped here and answered
    -- one at a time below.
    FOR f IN
        WITH ins AS (
            INSERT INTO @schema@.runs AS r (
                tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq,
                event_seq, started_at, updated_at, finished_at, run_json,
                latest_checkpoint_type)
            SELECT p_tenants[b.i], b.id, p_graph_ids[b.i], p_graph_hashes[b.i],
                   p_statuses[b.i], p_steps[b.i], p_checkpoint_seqs[b.i], p_event_seqs[b.i],
                   p_started_ats[b.i], p_updated_ats[b.i], p_finished_ats[b.i],
                   p_run_jsons[b.i], p_checkpoint_types[b.i]
            FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE p_solo[b.i] AND EXISTS (
                SELECT 1 FROM @schema@.graphs g WHERE g.tenant = p_tenants[b.i]
                  AND g.graph_id = p_graph_ids[b.i] AND g.graph_hash = p_graph_hashes[b.i])
            ORDER BY b.i  -- the caller sorted by owner and run id
            ON CONFLICT (tenant, run_id) DO NOTHING
            RETURNING r.tenant, r.run_id)
        SELECT b.i::integer AS i
        FROM ins JOIN unnest(p_run_ids, p_tenants, p_solo) WITH ORDINALITY AS b(id, t, solo, i)
            ON b.solo AND b.id = ins.run_id AND b.t = ins.tenant
    LOOP
        v_ok[f.i] := true;
        v_any := true;
        v_due := coalesce(p_wake_ats[f.i] <= v_now, false);
        v_announce := v_announce OR v_due;
        o_index := f.i;
        o_outcome := 'written';
        o_announced := v_due;
        RETURN NEXT;
    END LOOP;
    IF v_any THEN
        INSERT INTO @schema@.live (tenant, run_id, status, wake_at)
        SELECT p_tenants[b.i], b.id, p_statuses[b.i], p_wake_ats[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i];
        INSERT INTO @schema@.transitions (tenant, run_id, transition_id, digest)
        SELECT p_tenants[b.i], b.id, p_transition_ids[b.i], p_digests[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i];
        INSERT INTO @schema@.events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
        SELECT p_tenants[p_owners[e.j]], p_run_ids[p_owners[e.j]], e.seq, e.body, e.hash, v_now
        FROM unnest(p_seqs, p_events, p_hashes) WITH ORDINALITY AS e(seq, body, hash, j)
        WHERE v_ok[p_owners[e.j]];
        IF v_announce THEN
            PERFORM pg_notify('docket_wake', '@name@');
        END IF;
    END IF;
    FOR i IN 1 .. v_n LOOP
        CONTINUE WHEN v_ok[i];
        RETURN QUERY SELECT i, c.* FROM @schema@.initialize_run(
            p_tenants[i], p_run_ids[i], p_transition_ids[i], p_digests[i],
            p_graph_ids[i], p_graph_hashes[i], p_statuses[i], p_steps[i],
            p_checkpoint_seqs[i], p_event_seqs[i], p_started_ats[i],
            p_updated_ats[i], p_finished_ats[i], p_run_jsons[i],
            p_checkpoint_types[i], p_wake_ats[i], p_now,
            coalesce(p_seqs[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}'),
            coalesce(p_events[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}'),
            coalesce(p_hashes[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}')) c;
    END LOOP;
END
$fn$""",
)
