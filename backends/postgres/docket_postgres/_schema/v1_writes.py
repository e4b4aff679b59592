"""Schema version 1: the write functions (``save_graph``, ``initialize_run``,
``commit_run``), one call each, one transaction, all or nothing.

Later versions replace parts of these bodies (:mod:`~docket_postgres._schema.v2`,
:mod:`~docket_postgres._schema.v5`); ``schema.sql`` beside :mod:`docket_postgres.schema`
shows every statement as it is applied.
"""

from __future__ import annotations

from typing import Final

# `@schema@` is replaced by the double-quoted schema name (see ``render``).
WRITES: Final[tuple[str, ...]] = (
    # -- save_graph: insert once; a re-save answers the first publication ------------------
    """CREATE FUNCTION @schema@.save_graph(
    p_tenant text, p_graph_id text, p_graph_hash text, p_document bytea, p_now timestamptz)
RETURNS TABLE (o_published_at timestamptz, o_same boolean)
LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN QUERY
    WITH ins AS (
        INSERT INTO @schema@.graphs AS g (tenant, graph_id, graph_hash, document, published_at)
        VALUES (p_tenant, p_graph_id, p_graph_hash, p_document,
                coalesce(p_now, clock_timestamp()))
        ON CONFLICT (tenant, graph_id, graph_hash) DO NOTHING
        RETURNING g.published_at)
    SELECT ins.published_at, true FROM ins;
    IF FOUND THEN
        RETURN;
    END IF;
    -- a new statement, so a version committed by a racing save is visible here
    RETURN QUERY
    SELECT g.published_at, g.document = p_document FROM @schema@.graphs g
    WHERE g.tenant = p_tenant AND g.graph_id = p_graph_id AND g.graph_hash = p_graph_hash;
END
$fn$""",
    # -- initialize ---------------------------------------------------------------------
    """CREATE FUNCTION @schema@.initialize_run(
    p_tenant text, p_run_id text, p_transition_id text, p_digest text,
    p_graph_id text, p_graph_hash text, p_status text, p_step bigint,
    p_checkpoint_seq bigint, p_event_seq bigint, p_started_at timestamptz,
    p_updated_at timestamptz, p_finished_at timestamptz, p_run_json bytea,
    p_checkpoint_type text, p_wake_at timestamptz, p_now timestamptz,
    p_seqs bigint[], p_events bytea[], p_hashes bytea[])
RETURNS TABLE (o_outcome text, o_digest text, o_run_json bytea, o_announced boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_announce boolean := false;
BEGIN
    PERFORM 1 FROM @schema@.graphs g
    WHERE g.tenant = p_tenant AND g.graph_id = p_graph_id AND g.graph_hash = p_graph_hash;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_graph'::text, NULL::text, NULL::bytea, false;
        RETURN;
    END IF;
    INSERT INTO @schema@.runs (
        tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq, event_seq,
        started_at, updated_at, finished_at, run_json, latest_checkpoint_type)
    VALUES (
        p_tenant, p_run_id, p_graph_id, p_graph_hash, p_status, p_step, p_checkpoint_seq,
        p_event_seq, p_started_at, p_updated_at, p_finished_at, p_run_json,
        p_checkpoint_type)
    ON CONFLICT (tenant, run_id) DO NOTHING;
    IF NOT FOUND THEN
        -- taken (perhaps by a racing initialize that has just committed: new snapshot)
        RETURN QUERY SELECT 'exists'::text,
            (SELECT t.digest FROM @schema@.transitions t WHERE t.tenant = p_tenant
                AND t.run_id = p_run_id AND t.transition_id = p_transition_id),
            (SELECT r.run_json FROM @schema@.runs r
                WHERE r.tenant = p_tenant AND r.run_id = p_run_id),
            false;
        RETURN;
    END IF;
    INSERT INTO @schema@.live (tenant, run_id, status, wake_at)
    VALUES (p_tenant, p_run_id, p_status, p_wake_at);
    INSERT INTO @schema@.transitions (tenant, run_id, transition_id, digest)
    VALUES (p_tenant, p_run_id, p_transition_id, p_digest);
    INSERT INTO @schema@.events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
    SELECT p_tenant, p_run_id, e.seq, e.body, e.hash, v_now
    FROM unnest(p_seqs, p_events, p_hashes) AS e(seq, body, hash);
    IF p_wake_at <= v_now THEN
        PERFORM pg_notify('docket_wake', '@name@');
        v_announce := true;
    END IF;
    RETURN QUERY SELECT 'written'::text, NULL::text, NULL::bytea, v_announce;
END
$fn$""",
    # -- commit_claimed / commit_unclaimed -------------------------------------------------
    # Writes only when every post-lookup rule holds; otherwise it writes nothing and
    # answers the facts (read under the row lock) the shared rules need to name the error.
    """CREATE FUNCTION @schema@.commit_run(
    p_tenant text, p_run_id text, p_transition_id text, p_digest text,
    p_graph_id text, p_graph_hash text, p_started_at timestamptz,
    p_expected bigint, p_claimed boolean, p_token text,
    p_status text, p_step bigint, p_checkpoint_seq bigint, p_event_seq bigint,
    p_updated_at timestamptz, p_finished_at timestamptz, p_run_json bytea,
    p_checkpoint_type text, p_schedule text, p_wake_at timestamptz, p_now timestamptz,
    p_seqs bigint[], p_events bytea[], p_hashes bytea[])
RETURNS TABLE (
    o_outcome text, o_digest text, o_graph_id text, o_graph_hash text,
    o_started_at timestamptz, o_checkpoint_seq bigint, o_token_held boolean,
    o_event_seq bigint, o_stored bytea[], o_run_json bytea, o_announced boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    cur record;
    v_digest text;
    v_stored bytea[];
    v_new bigint;
    v_held boolean;
    v_ok boolean;
    v_token text;
    v_claimed_at timestamptz;
    v_wake timestamptz;
    v_announce boolean := false;
BEGIN
    -- lock order everywhere: the run row, then its live row
    SELECT r.graph_id, r.graph_hash, r.started_at, r.checkpoint_seq, r.event_seq
    INTO cur FROM @schema@.runs r
    WHERE r.tenant = p_tenant AND r.run_id = p_run_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::text, NULL::text, NULL::text,
            NULL::timestamptz, NULL::bigint, NULL::boolean, NULL::bigint, NULL::bytea[],
            NULL::bytea, false;
        RETURN;
    END IF;
    SELECT t.digest INTO v_digest FROM @schema@.transitions t
    WHERE t.tenant = p_tenant AND t.run_id = p_run_id AND t.transition_id = p_transition_id;
    -- what is stored at each re-sent sequence (NULL: new, or pruned)
    SELECT array_agg(e.content_sha256 ORDER BY s.i) INTO v_stored
    FROM unnest(p_seqs) WITH ORDINALITY AS s(seq, i)
    LEFT JOIN @schema@.events e
        ON e.tenant = p_tenant AND e.run_id = p_run_id AND e.seq = s.seq
        AND s.seq <= cur.event_seq;
    SELECT count(*) INTO v_new FROM unnest(p_seqs) AS s(seq) WHERE s.seq > cur.event_seq;
    SELECT l.claim_token, l.claimed_at INTO v_token, v_claimed_at FROM @schema@.live l
    WHERE l.tenant = p_tenant AND l.run_id = p_run_id
    FOR UPDATE;
    v_held := coalesce(v_token = p_token, false);
    v_ok := v_digest IS NULL
        AND cur.graph_id = p_graph_id AND cur.graph_hash = p_graph_hash
        AND cur.started_at = p_started_at
        AND cur.checkpoint_seq = p_expected
        AND (NOT p_claimed OR v_held)
        AND p_event_seq >= cur.event_seq
        AND v_new = p_event_seq - cur.event_seq
        AND NOT EXISTS (
            SELECT 1 FROM unnest(p_seqs, p_hashes, v_stored) AS x(seq, hash, stored)
            WHERE x.seq <= cur.event_seq AND x.stored IS NOT NULL AND x.stored <> x.hash);
    IF NOT v_ok THEN
        RETURN QUERY SELECT 'refused'::text, v_digest, cur.graph_id::text,
            cur.graph_hash::text, cur.started_at, cur.checkpoint_seq, v_held, cur.event_seq,
            v_stored,
            CASE WHEN v_digest IS NOT NULL THEN (SELECT r.run_json FROM @schema@.runs r
                WHERE r.tenant = p_tenant AND r.run_id = p_run_id) END,
            false;
        RETURN;
    END IF;
    IF p_schedule = 'retain' THEN
        v_claimed_at := greatest(v_claimed_at, v_now);  -- a commit never moves it back
        v_wake := NULL;
    ELSE
        v_token := NULL;
        v_claimed_at := NULL;
        v_wake := CASE p_schedule WHEN 'immediate' THEN v_now WHEN 'at' THEN p_wake_at END;
    END IF;
    UPDATE @schema@.runs SET
        status = p_status, step = p_step, checkpoint_seq = p_checkpoint_seq,
        event_seq = p_event_seq, updated_at = p_updated_at, finished_at = p_finished_at,
        run_json = p_run_json, latest_checkpoint_type = p_checkpoint_type,
        ended_at = CASE WHEN p_status IN ('done', 'failed', 'cancelled') THEN v_now END
    WHERE tenant = p_tenant AND run_id = p_run_id;
    IF p_status IN ('done', 'failed', 'cancelled') THEN
        DELETE FROM @schema@.live WHERE tenant = p_tenant AND run_id = p_run_id;
    ELSE
        -- every commit resets the claim health (attempts, abandons, poison)
        INSERT INTO @schema@.live AS l (tenant, run_id, status, wake_at, claim_token, claimed_at)
        VALUES (p_tenant, p_run_id, p_status, v_wake, v_token, v_claimed_at)
        ON CONFLICT (tenant, run_id) DO UPDATE SET
            status = excluded.status, wake_at = excluded.wake_at,
            claim_token = excluded.claim_token, claimed_at = excluded.claimed_at,
            claim_attempts = 0, claim_abandons = 0, poisoned_at = NULL, poison_reason = NULL;
    END IF;
    INSERT INTO @schema@.transitions (tenant, run_id, transition_id, digest)
    VALUES (p_tenant, p_run_id, p_transition_id, p_digest);
    INSERT INTO @schema@.events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
    SELECT p_tenant, p_run_id, e.seq, e.body, e.hash, v_now
    FROM unnest(p_seqs, p_events, p_hashes) AS e(seq, body, hash)
    WHERE e.seq > cur.event_seq;
    IF v_wake IS NOT NULL AND v_wake <= v_now THEN
        PERFORM pg_notify('docket_wake', '@name@');
        v_announce := true;
    END IF;
    RETURN QUERY SELECT 'written'::text, NULL::text, NULL::text, NULL::text,
        NULL::timestamptz, NULL::bigint, NULL::boolean, NULL::bigint, NULL::bytea[],
        NULL::bytea, v_announce;
END
$fn$""",
)
