"""Schema version 4: ``commit_runs`` takes a run's later writes of a group set-wise."""

from __future__ import annotations

from typing import Final

# Version 4: ``commit_runs`` takes a run's later writes of a group set-wise too. The
# worker sends a run's completion right behind its last superstep (``ChainedCommits``),
# so a group often holds two writes per run; the second went through ``commit_run`` alone
# (a dozen statements each). Now the set-wise statements run in passes: pass k takes the
# k-th write of each run whose earlier write took pass k-1, reading the run and live rows
# that pass just wrote (this transaction already holds their locks, so no new row is
# locked after the first pass). Every other write still goes one at a time, after them,
# in the group's order; the answers are what they were. Same arguments as version 3.
V4: Final[tuple[str, ...]] = (
    """CREATE OR REPLACE FUNCTION @schema@.commit_runs(
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
    v_ok boolean[] := array_fill(false, ARRAY[v_n]);  -- write i took a set-wise pass
    v_pass boolean[];  -- write i took this pass
    v_try boolean[] := coalesce(p_solo, '{}');  -- write i is a candidate of this pass
    v_more boolean := v_n > 0;
    v_token text[] := array_fill(NULL::text, ARRAY[v_n]);  -- its live row afterwards
    v_claimed_at timestamptz[] := array_fill(NULL::timestamptz, ARRAY[v_n]);
    v_wake timestamptz[] := array_fill(NULL::timestamptz, ARRAY[v_n]);
    v_any boolean;
    v_ends boolean;
    v_stays boolean;
    v_announce boolean := false;
    v_due boolean;
    f record;
BEGIN
    WHILE v_more LOOP
        v_pass := array_fill(false, ARRAY[v_n]);
        v_any := false;
        v_ends := false;
        v_stays := false;
        -- Lock each candidate's run row and then its live row, in (owner, run id) order,
        -- and read their latest values (a later pass reads what the one before wrote).
        -- Runs without a live row (finished, or unknown) are not usual commits. The
        -- transition lookup reads this statement's snapshot, which may predate a commit
        -- the locks waited for; such a commit moved the checkpoint, so the fence below
        -- fails and the write goes the one-at-a-time way, which reads again.
        FOR f IN
            SELECT b.i::integer AS i,
                   coalesce(t.digest IS NULL
                       AND r.graph_id = p_graph_ids[b.i]
                       AND r.graph_hash = p_graph_hashes[b.i]
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
            WHERE v_try[b.i]
            ORDER BY b.i  -- the caller sorted by owner and run id
            FOR UPDATE OF r, l
        LOOP
            CONTINUE WHEN NOT f.ok;
            v_ok[f.i] := true;
            v_pass[f.i] := true;
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
        EXIT WHEN NOT v_any;
        UPDATE @schema@.runs r SET
            status = p_statuses[b.i], step = p_steps[b.i],
            checkpoint_seq = p_checkpoint_seqs[b.i], event_seq = p_event_seqs[b.i],
            updated_at = p_updated_ats[b.i], finished_at = p_finished_ats[b.i],
            run_json = p_run_jsons[b.i], latest_checkpoint_type = p_checkpoint_types[b.i],
            ended_at = CASE WHEN p_statuses[b.i] IN ('done', 'failed', 'cancelled')
                            THEN v_now END
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_pass[b.i] AND r.tenant = p_tenants[b.i] AND r.run_id = b.id;
        IF v_ends THEN
            DELETE FROM @schema@.live l
            USING unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE v_pass[b.i] AND p_statuses[b.i] IN ('done', 'failed', 'cancelled')
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
            WHERE v_pass[b.i] AND p_statuses[b.i] NOT IN ('done', 'failed', 'cancelled')
              AND l.tenant = p_tenants[b.i] AND l.run_id = b.id;
        END IF;
        INSERT INTO @schema@.transitions (tenant, run_id, transition_id, digest)
        SELECT p_tenants[b.i], b.id, p_transition_ids[b.i], p_digests[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_pass[b.i];
        INSERT INTO @schema@.events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
        SELECT p_tenants[p_owners[e.j]], p_run_ids[p_owners[e.j]], e.seq, e.body, e.hash, v_now
        FROM unnest(p_seqs, p_events, p_hashes) WITH ORDINALITY AS e(seq, body, hash, j)
        WHERE v_pass[p_owners[e.j]];
        -- the next pass: each write right behind one of its run that took this pass
        v_more := false;
        FOR i IN 2 .. v_n LOOP
            v_try[i] := v_pass[i - 1] AND NOT p_solo[i];
            v_more := v_more OR v_try[i];
        END LOOP;
        v_try[1] := false;
    END LOOP;
    IF v_announce THEN
        PERFORM pg_notify('docket_wake', '@name@');
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
)
