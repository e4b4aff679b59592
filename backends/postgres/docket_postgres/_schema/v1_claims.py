"""Schema version 1: the claim functions (``claim_due``, ``abandon_claim``,
``retry_poisoned``) and ``prune``.

Version 3 rewrites ``claim_due`` (:mod:`~docket_postgres._schema.v3`); ``schema.sql``
beside :mod:`docket_postgres.schema` shows every statement as it is applied.
"""

from __future__ import annotations

from typing import Final

# `@schema@` is replaced by the double-quoted schema name, `@name@` by the bare name.
CLAIMS: Final[tuple[str, ...]] = (
    # -- claim_due --------------------------------------------------------------------------
    # Two lazily read streams (ready, expired), each peeked without a lock and locked one
    # row at a time with SKIP LOCKED only when chosen: the statement locks exactly what it
    # returns. See docs/backends/postgres.md for the selection rules.
    """CREATE FUNCTION @schema@.claim_due(
    p_limit integer, p_ttl interval, p_max_attempts integer, p_preference text,
    p_now timestamptz, p_fair boolean)
RETURNS TABLE (
    o_tenant text, o_run_id text, o_graph_id text, o_graph_hash text,
    o_checkpoint_seq bigint, o_token text, o_attempts integer, o_poisoned boolean,
    o_now timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_cutoff timestamptz;
    -- the ready stream: its peeked head and its cursor
    r_has boolean;
    r_end boolean;
    r_at timestamptz;
    r_id text COLLATE "C";
    r_tenant text COLLATE "C";
    r_pos integer;
    rc_at timestamptz;
    rc_id text COLLATE "C";
    rc_tenant text COLLATE "C";
    -- the fair variant: tenants with due work in a random order, a cursor per tenant
    f_tenants text[] COLLATE "C";
    f_at timestamptz[];
    f_id text[] COLLATE "C";
    f_done boolean[];
    f_n integer;
    f_live integer;
    f_pos integer;
    -- the expired stream
    e_has boolean;
    e_end boolean;
    e_at timestamptz;
    e_id text COLLATE "C";
    e_tenant text COLLATE "C";
    ec_at timestamptz;
    ec_id text COLLATE "C";
    ec_tenant text COLLATE "C";
    -- what was chosen (and locked), and what could not be locked
    c_tenant text[] COLLATE "C" := '{}';
    c_id text[] COLLATE "C" := '{}';
    c_at timestamptz[] := '{}';
    c_attempts integer[] := '{}';
    s_tenant text[] COLLATE "C";
    s_id text[] COLLATE "C";
    v_got_ready boolean := false;
    v_got_expired boolean := false;
    v_take_ready boolean;
    v_attempts integer;
    v_at timestamptz;
    v_any boolean;
BEGIN
    IF p_ttl > v_now - '0001-01-01 00:00:00+00'::timestamptz THEN
        v_cutoff := '-infinity';  -- no representable claim is that old
    ELSE
        v_cutoff := v_now - p_ttl;
    END IF;
    -- A pass reads the two classes lazily. Only a pass that took nothing can be followed
    -- by another: its peeks ran in several snapshots, so a run that changed class
    -- between them (a release, an abandon) may have been seen by neither.
    FOR v_pass IN 1 .. 3 LOOP
        r_has := false; r_end := false;
        rc_at := '-infinity'; rc_id := ''; rc_tenant := '';
        e_has := false; e_end := false;
        ec_at := '-infinity'; ec_id := ''; ec_tenant := '';
        s_tenant := '{}'; s_id := '{}';
        IF p_fair THEN
            -- tenants with due work, one index probe per tenant, shuffled
            WITH RECURSIVE walk(tenant) AS (
                (SELECT r.tenant FROM @schema@.live r
                 WHERE r.status = 'running' AND r.poisoned_at IS NULL AND r.claim_token IS NULL
                 ORDER BY r.tenant LIMIT 1)
                UNION ALL
                SELECT (SELECT r.tenant FROM @schema@.live r
                        WHERE r.status = 'running' AND r.poisoned_at IS NULL
                          AND r.claim_token IS NULL AND r.tenant > w.tenant
                        ORDER BY r.tenant LIMIT 1)
                FROM walk w WHERE w.tenant IS NOT NULL
            )
            SELECT array_agg(w.tenant ORDER BY random()) INTO f_tenants
            FROM walk w
            WHERE w.tenant IS NOT NULL AND EXISTS (
                SELECT 1 FROM @schema@.live r
                WHERE r.tenant = w.tenant AND r.status = 'running' AND r.poisoned_at IS NULL
                  AND r.claim_token IS NULL AND r.wake_at <= v_now);
            f_n := coalesce(cardinality(f_tenants), 0);
            f_live := f_n;
            f_pos := 1;
            f_at := array_fill('-infinity'::timestamptz, ARRAY[f_n]);
            f_id := array_fill(''::text, ARRAY[f_n]);
            f_done := array_fill(false, ARRAY[f_n]);
        END IF;
        LOOP
            EXIT WHEN cardinality(c_id) >= p_limit;
            IF NOT r_has AND NOT r_end THEN
                IF p_fair THEN
                    LOOP
                        IF f_live = 0 THEN
                            r_end := true;
                            EXIT;
                        END IF;
                        IF f_pos > f_n THEN
                            f_pos := 1;
                        END IF;
                        IF f_done[f_pos] THEN
                            f_pos := f_pos + 1;
                            CONTINUE;
                        END IF;
                        SELECT r.wake_at, r.run_id INTO r_at, r_id FROM @schema@.live r
                        WHERE r.tenant = f_tenants[f_pos] AND r.status = 'running'
                          AND r.poisoned_at IS NULL AND r.claim_token IS NULL
                          AND r.wake_at <= v_now
                          AND (r.wake_at, r.run_id) > (f_at[f_pos], f_id[f_pos])
                        ORDER BY r.wake_at, r.run_id LIMIT 1;
                        IF FOUND THEN
                            r_tenant := f_tenants[f_pos];
                            r_pos := f_pos;
                            r_has := true;
                            EXIT;
                        END IF;
                        f_done[f_pos] := true;
                        f_live := f_live - 1;
                        f_pos := f_pos + 1;
                    END LOOP;
                ELSE
                    SELECT r.wake_at, r.run_id, r.tenant INTO r_at, r_id, r_tenant
                    FROM @schema@.live r
                    WHERE r.status = 'running' AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at <= v_now
                      AND (r.wake_at, r.run_id, r.tenant) > (rc_at, rc_id, rc_tenant)
                    ORDER BY r.wake_at, r.run_id, r.tenant LIMIT 1;
                    r_has := FOUND;
                    r_end := NOT FOUND;
                END IF;
            END IF;
            IF NOT e_has AND NOT e_end THEN
                SELECT r.claimed_at, r.run_id, r.tenant INTO e_at, e_id, e_tenant
                FROM @schema@.live r
                WHERE r.status = 'running' AND r.poisoned_at IS NULL
                  AND r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff
                  AND (r.claimed_at, r.run_id, r.tenant) > (ec_at, ec_id, ec_tenant)
                ORDER BY r.claimed_at, r.run_id, r.tenant LIMIT 1;
                e_has := FOUND;
                e_end := NOT FOUND;
            END IF;
            EXIT WHEN NOT r_has AND NOT e_has;
            IF p_limit = 1 AND p_preference IS NOT NULL THEN
                v_take_ready := CASE WHEN p_preference = 'ready' THEN r_has ELSE NOT e_has END;
            ELSIF p_limit >= 2 AND NOT v_got_ready AND r_has THEN
                v_take_ready := true;   -- each class is reserved one outcome
            ELSIF p_limit >= 2 AND NOT v_got_expired AND e_has THEN
                v_take_ready := false;
            ELSE
                v_take_ready := r_has
                    AND (NOT e_has OR (r_at, r_id, r_tenant) < (e_at, e_id, e_tenant));
            END IF;
            IF v_take_ready THEN
                SELECT r.claim_attempts INTO v_attempts FROM @schema@.live r
                WHERE r.tenant = r_tenant AND r.run_id = r_id AND r.status = 'running'
                  AND r.poisoned_at IS NULL AND r.claim_token IS NULL AND r.wake_at <= v_now
                FOR UPDATE SKIP LOCKED;
                IF FOUND THEN
                    c_tenant := array_append(c_tenant, r_tenant);
                    c_id := array_append(c_id, r_id);
                    c_at := array_append(c_at, r_at);
                    c_attempts := array_append(c_attempts, v_attempts);
                    v_got_ready := true;
                    IF p_fair THEN
                        f_pos := r_pos + 1;  -- this tenant had its turn in this round
                    END IF;
                ELSE
                    s_tenant := array_append(s_tenant, r_tenant);
                    s_id := array_append(s_id, r_id);
                END IF;
                IF p_fair THEN
                    f_at[r_pos] := r_at;
                    f_id[r_pos] := r_id;
                ELSE
                    rc_at := r_at;
                    rc_id := r_id;
                    rc_tenant := r_tenant;
                END IF;
                r_has := false;
            ELSE
                SELECT r.claim_attempts INTO v_attempts FROM @schema@.live r
                WHERE r.tenant = e_tenant AND r.run_id = e_id AND r.status = 'running'
                  AND r.poisoned_at IS NULL AND r.claim_token IS NOT NULL
                  AND r.claimed_at < v_cutoff
                FOR UPDATE SKIP LOCKED;
                IF FOUND THEN
                    c_tenant := array_append(c_tenant, e_tenant);
                    c_id := array_append(c_id, e_id);
                    c_at := array_append(c_at, e_at);
                    c_attempts := array_append(c_attempts, v_attempts);
                    v_got_expired := true;
                ELSE
                    s_tenant := array_append(s_tenant, e_tenant);
                    s_id := array_append(s_id, e_id);
                END IF;
                ec_at := e_at;
                ec_id := e_id;
                ec_tenant := e_tenant;
                e_has := false;
            END IF;
        END LOOP;
        EXIT WHEN cardinality(c_id) > 0;
        -- Every candidate seen was held by someone else: rather than answer nothing,
        -- wait for them in turn (a commit, a release or another claim holds a run for
        -- one short statement) and take the first that is still due, in either class.
        -- Only a claim holding no lock waits, so claims never wait for each other in a
        -- cycle.
        FOR i IN 1 .. cardinality(s_id) LOOP
            SELECT r.claim_attempts,
                   CASE WHEN r.claim_token IS NULL THEN r.wake_at ELSE r.claimed_at END
            INTO v_attempts, v_at FROM @schema@.live r
            WHERE r.tenant = s_tenant[i] AND r.run_id = s_id[i] AND r.status = 'running'
              AND r.poisoned_at IS NULL
              AND ((r.claim_token IS NULL AND r.wake_at <= v_now)
                   OR (r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff))
            FOR UPDATE;
            IF FOUND THEN
                c_tenant := array_append(c_tenant, s_tenant[i]);
                c_id := array_append(c_id, s_id[i]);
                c_at := array_append(c_at, v_at);
                c_attempts := array_append(c_attempts, v_attempts);
                EXIT;
            END IF;
        END LOOP;
        EXIT WHEN cardinality(c_id) > 0;
        -- nothing at all: is anything due in either class, seen in one snapshot?
        SELECT EXISTS (
                   SELECT 1 FROM @schema@.live r
                   WHERE r.status = 'running' AND r.poisoned_at IS NULL
                     AND r.claim_token IS NULL AND r.wake_at <= v_now)
               OR EXISTS (
                   SELECT 1 FROM @schema@.live r
                   WHERE r.status = 'running' AND r.poisoned_at IS NULL
                     AND r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff)
        INTO v_any;
        EXIT WHEN NOT v_any;
    END LOOP;
    RETURN QUERY
    WITH chosen AS (
        SELECT c.tenant, c.run_id, c.at, c.attempts, c.ord
        FROM unnest(c_tenant, c_id, c_at, c_attempts)
            WITH ORDINALITY AS c(tenant, run_id, at, attempts, ord)
    ), done AS (
        UPDATE @schema@.live l SET
            claim_token = CASE WHEN ch.attempts < p_max_attempts
                               THEN gen_random_uuid()::text END,
            claimed_at = CASE WHEN ch.attempts < p_max_attempts THEN v_now END,
            wake_at = NULL,
            claim_attempts = l.claim_attempts
                + CASE WHEN ch.attempts < p_max_attempts THEN 1 ELSE 0 END,
            poisoned_at = CASE WHEN ch.attempts < p_max_attempts THEN NULL ELSE v_now END,
            poison_reason = CASE WHEN ch.attempts < p_max_attempts
                                 THEN NULL ELSE 'max_claim_attempts_exceeded' END
        FROM chosen ch
        WHERE l.tenant = ch.tenant AND l.run_id = ch.run_id
        RETURNING l.tenant, l.run_id, l.claim_token, l.claim_attempts,
                  l.poisoned_at IS NOT NULL AS poisoned, ch.at, ch.ord
    )
    SELECT d.tenant::text, d.run_id::text, r.graph_id::text, r.graph_hash::text,
           r.checkpoint_seq, d.claim_token::text, d.claim_attempts, d.poisoned, v_now
    FROM done d
    JOIN @schema@.runs r ON r.tenant = d.tenant AND r.run_id = d.run_id
    ORDER BY CASE WHEN p_fair THEN d.ord ELSE 0 END, d.at, d.run_id, d.tenant;
END
$fn$""",
    # -- abandon_claim ------------------------------------------------------------------------
    """CREATE FUNCTION @schema@.abandon_claim(
    p_tenant text, p_run_id text, p_token text, p_expected bigint, p_now timestamptz,
    p_retry_at timestamptz, p_max_abandons integer, p_non_poisoning boolean,
    p_delays interval[])
RETURNS TABLE (o_outcome text, o_at timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_old integer;
    v_wake timestamptz;
BEGIN
    -- the run row first (its checkpoint is the fence), then the live row
    PERFORM 1 FROM @schema@.runs r
    WHERE r.tenant = p_tenant AND r.run_id = p_run_id AND r.checkpoint_seq = p_expected
    FOR UPDATE;
    IF FOUND THEN
        SELECT l.claim_abandons INTO v_old FROM @schema@.live l
        WHERE l.tenant = p_tenant AND l.run_id = p_run_id AND l.claim_token = p_token
        FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'stale'::text, NULL::timestamptz;
        RETURN;
    END IF;
    IF NOT p_non_poisoning AND v_old >= p_max_abandons THEN
        UPDATE @schema@.live SET claim_token = NULL, claimed_at = NULL, wake_at = NULL,
            claim_attempts = greatest(claim_attempts - 1, 0),
            poisoned_at = p_now, poison_reason = 'max_claim_abandons_exceeded'
        WHERE tenant = p_tenant AND run_id = p_run_id;
        RETURN QUERY SELECT 'poisoned'::text, p_now;
        RETURN;
    END IF;
    IF p_non_poisoning AND p_delays IS NOT NULL THEN
        v_wake := p_now + p_delays[least(v_old, 30) + 1];
    ELSE
        v_wake := p_retry_at;
    END IF;
    UPDATE @schema@.live SET claim_token = NULL, claimed_at = NULL, wake_at = v_wake,
        claim_attempts = greatest(claim_attempts - 1, 0), claim_abandons = v_old + 1
    WHERE tenant = p_tenant AND run_id = p_run_id;
    PERFORM pg_notify('docket_wake', '@name@');
    RETURN QUERY SELECT 'rescheduled'::text, v_wake;
END
$fn$""",
    # -- prune: one bounded batch of old events and finished runs --------------------------------
    """CREATE FUNCTION @schema@.prune(
    p_event_age interval, p_run_age interval, p_batch integer, p_now timestamptz)
RETURNS TABLE (o_ran boolean, o_events bigint, o_runs bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_events bigint := 0;
    v_runs bigint := 0;
BEGIN
    -- one pruner at a time per schema; a second one returns at once
    IF NOT pg_try_advisory_xact_lock(hashtextextended('docket:prune:@name@', 0)) THEN
        RETURN QUERY SELECT false, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    IF p_event_age IS NOT NULL THEN
        WITH doomed AS (
            SELECT e.tenant, e.run_id, e.seq FROM @schema@.events e
            WHERE e.inserted_at < v_now - p_event_age
            ORDER BY e.inserted_at LIMIT p_batch
            FOR UPDATE SKIP LOCKED)
        DELETE FROM @schema@.events e USING doomed d
        WHERE e.tenant = d.tenant AND e.run_id = d.run_id AND e.seq = d.seq;
        GET DIAGNOSTICS v_events = ROW_COUNT;
    END IF;
    IF p_run_age IS NOT NULL THEN
        -- a run being committed is locked, and skipped until the next pass
        WITH doomed AS (
            SELECT r.tenant, r.run_id FROM @schema@.runs r
            WHERE r.ended_at < v_now - p_run_age
            ORDER BY r.ended_at LIMIT p_batch
            FOR UPDATE SKIP LOCKED)
        DELETE FROM @schema@.runs r USING doomed d
        WHERE r.tenant = d.tenant AND r.run_id = d.run_id;
        GET DIAGNOSTICS v_runs = ROW_COUNT;
    END IF;
    RETURN QUERY SELECT true, v_events, v_runs;
END
$fn$""",
    # -- retry_poisoned_run ---------------------------------------------------------------------
    """CREATE FUNCTION @schema@.retry_poisoned(p_tenant text, p_run_id text, p_now timestamptz)
RETURNS TABLE (o_outcome text, o_run_json bytea)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_status text;
    v_poisoned timestamptz;
BEGIN
    SELECT r.status INTO v_status FROM @schema@.runs r
    WHERE r.tenant = p_tenant AND r.run_id = p_run_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::bytea;
        RETURN;
    END IF;
    IF v_status IN ('done', 'failed', 'cancelled') THEN
        RETURN QUERY SELECT 'inactive'::text, NULL::bytea;
        RETURN;
    END IF;
    SELECT l.poisoned_at INTO v_poisoned FROM @schema@.live l
    WHERE l.tenant = p_tenant AND l.run_id = p_run_id
    FOR UPDATE;
    IF v_poisoned IS NOT NULL THEN
        UPDATE @schema@.live SET poisoned_at = NULL, poison_reason = NULL,
            claim_token = NULL, claimed_at = NULL, claim_attempts = 0, claim_abandons = 0,
            wake_at = coalesce(p_now, clock_timestamp())
        WHERE tenant = p_tenant AND run_id = p_run_id;
        PERFORM pg_notify('docket_wake', '@name@');
        RETURN QUERY SELECT 'retried'::text, r.run_json FROM @schema@.runs r
            WHERE r.tenant = p_tenant AND r.run_id = p_run_id;
        RETURN;
    END IF;
    RETURN QUERY SELECT 'healthy'::text, r.run_json FROM @schema@.runs r
        WHERE r.tenant = p_tenant AND r.run_id = p_run_id;
END
$fn$""",
)
