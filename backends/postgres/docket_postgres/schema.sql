CREATE SCHEMA IF NOT EXISTS "docket";

-- docket-postgres schema version 1

CREATE TABLE "docket".meta (
    key   text COLLATE "C" PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE "docket".graphs (
    tenant       text COLLATE "C" NOT NULL,
    graph_id     text COLLATE "C" NOT NULL CHECK (graph_id <> ''),
    graph_hash   text COLLATE "C" NOT NULL CHECK (graph_hash <> ''),
    document     bytea       NOT NULL,
    published_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, graph_id, graph_hash)
);

CREATE INDEX graphs_by_publication
    ON "docket".graphs (tenant, graph_id, published_at DESC, graph_hash DESC);

CREATE TABLE "docket".runs (
    id                     bigint GENERATED ALWAYS AS IDENTITY,
    tenant                 text COLLATE "C" NOT NULL,
    run_id                 text COLLATE "C" NOT NULL,
    graph_id               text COLLATE "C" NOT NULL,
    graph_hash             text COLLATE "C" NOT NULL,
    status                 text        NOT NULL,
    step                   bigint      NOT NULL,
    checkpoint_seq         bigint      NOT NULL,
    event_seq              bigint      NOT NULL,
    started_at             timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL,
    finished_at            timestamptz,
    run_json               bytea       NOT NULL,
    latest_checkpoint_type text        NOT NULL,
    ended_at               timestamptz,
    PRIMARY KEY (tenant, run_id),
    FOREIGN KEY (tenant, graph_id, graph_hash)
        REFERENCES "docket".graphs (tenant, graph_id, graph_hash) ON DELETE RESTRICT,
    CONSTRAINT runs_run_id_check CHECK (run_id <> ''),
    CONSTRAINT runs_status_check
        CHECK (status IN ('running', 'waiting', 'done', 'failed', 'cancelled')),
    CONSTRAINT runs_checkpoint_type_check CHECK (latest_checkpoint_type IN (
        'run_initialized', 'step_committed', 'retry_scheduled', 'interrupt_requested',
        'interrupt_resolved', 'run_completed', 'run_failed', 'run_cancelled')),
    CONSTRAINT runs_finished_at_check
        CHECK ((finished_at IS NOT NULL) = (status IN ('done', 'failed', 'cancelled'))),
    CONSTRAINT runs_ended_at_check CHECK (ended_at IS NULL OR status IN ('done', 'failed', 'cancelled')),
    CONSTRAINT runs_counters_check
        CHECK (step >= 0 AND checkpoint_seq >= 1 AND event_seq >= 0)
) WITH (fillfactor = 80);

CREATE INDEX runs_by_owner ON "docket".runs (tenant, started_at DESC, run_id DESC);

CREATE INDEX runs_by_start ON "docket".runs (started_at DESC, run_id DESC);

CREATE INDEX runs_by_graph
    ON "docket".runs (tenant, graph_id, graph_hash, started_at DESC, run_id DESC);

CREATE INDEX runs_ended ON "docket".runs (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE "docket".live (
    tenant         text COLLATE "C" NOT NULL,
    run_id         text COLLATE "C" NOT NULL,
    status         text        NOT NULL,
    wake_at        timestamptz,
    claim_token    text COLLATE "C",
    claimed_at     timestamptz,
    claim_attempts integer     NOT NULL DEFAULT 0,
    claim_abandons integer     NOT NULL DEFAULT 0,
    poisoned_at    timestamptz,
    poison_reason  text,
    PRIMARY KEY (tenant, run_id),
    FOREIGN KEY (tenant, run_id) REFERENCES "docket".runs (tenant, run_id) ON DELETE CASCADE,
    CONSTRAINT live_status_check CHECK (status IN ('running', 'waiting')),
    CONSTRAINT live_claim_pair_check CHECK ((claim_token IS NULL) = (claimed_at IS NULL)),
    CONSTRAINT live_claim_token_check CHECK (claim_token IS NULL OR claim_token <> ''),
    CONSTRAINT live_poison_pair_check CHECK ((poisoned_at IS NULL) = (poison_reason IS NULL)),
    CONSTRAINT live_poison_reason_check CHECK (poison_reason IS NULL OR poison_reason <> ''),
    CONSTRAINT live_idle_unless_running_check CHECK (
        status = 'running'
        OR (claim_token IS NULL AND wake_at IS NULL AND poisoned_at IS NULL)),
    CONSTRAINT live_poisoned_shape_check CHECK (
        poisoned_at IS NULL OR (claim_token IS NULL AND wake_at IS NULL)),
    CONSTRAINT live_running_schedule_check CHECK (
        status <> 'running' OR poisoned_at IS NOT NULL
        OR ((wake_at IS NULL) <> (claim_token IS NULL))),
    CONSTRAINT live_counters_check CHECK (claim_attempts >= 0 AND claim_abandons >= 0)
) WITH (fillfactor = 80);

CREATE INDEX live_due ON "docket".live (wake_at, run_id, tenant) WHERE status = 'running' AND poisoned_at IS NULL AND claim_token IS NULL;

CREATE INDEX live_due_by_tenant ON "docket".live (tenant, wake_at, run_id)
    WHERE status = 'running' AND poisoned_at IS NULL AND claim_token IS NULL;

CREATE INDEX live_claimed ON "docket".live (claimed_at, run_id, tenant)
    WHERE status = 'running' AND poisoned_at IS NULL AND claim_token IS NOT NULL;

CREATE INDEX live_poisoned ON "docket".live (poisoned_at)
    WHERE poisoned_at IS NOT NULL;

CREATE TABLE "docket".events (
    tenant         text COLLATE "C" NOT NULL,
    run_id         text COLLATE "C" NOT NULL,
    seq            bigint      NOT NULL CHECK (seq > 0),
    event_json     bytea       NOT NULL,
    content_sha256 bytea       NOT NULL CHECK (length(content_sha256) = 32),
    inserted_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES "docket".runs (tenant, run_id) ON DELETE CASCADE
);

CREATE INDEX events_by_age ON "docket".events (inserted_at);

CREATE TABLE "docket".transitions (
    tenant        text COLLATE "C" NOT NULL,
    run_id        text COLLATE "C" NOT NULL,
    transition_id text COLLATE "C" NOT NULL CHECK (transition_id <> ''),
    digest        text NOT NULL CHECK (digest <> ''),
    PRIMARY KEY (tenant, run_id, transition_id),
    FOREIGN KEY (tenant, run_id) REFERENCES "docket".runs (tenant, run_id) ON DELETE CASCADE
);

CREATE FUNCTION "docket".refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'docket: %', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation';
END
$fn$;

CREATE TRIGGER runs_identity_is_immutable
BEFORE UPDATE OF tenant, run_id, graph_id, graph_hash, started_at ON "docket".runs
FOR EACH ROW WHEN (
    OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.run_id IS DISTINCT FROM NEW.run_id
    OR OLD.graph_id IS DISTINCT FROM NEW.graph_id
    OR OLD.graph_hash IS DISTINCT FROM NEW.graph_hash
    OR OLD.started_at IS DISTINCT FROM NEW.started_at)
EXECUTE FUNCTION "docket".refuse_change('a run''s owner and identity never change');

CREATE TRIGGER graphs_are_immutable BEFORE UPDATE ON "docket".graphs
FOR EACH ROW EXECUTE FUNCTION "docket".refuse_change('a published graph version never changes');

CREATE TRIGGER events_are_immutable BEFORE UPDATE ON "docket".events
FOR EACH ROW EXECUTE FUNCTION "docket".refuse_change('a published event never changes');

CREATE TRIGGER transitions_are_immutable BEFORE UPDATE ON "docket".transitions
FOR EACH ROW EXECUTE FUNCTION "docket".refuse_change('a recorded transition never changes');

CREATE FUNCTION "docket".check_live_pair() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    v_tenant text;
    v_run_id text;
    v_status text;
    v_live text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        v_tenant := OLD.tenant;
        v_run_id := OLD.run_id;
    ELSE
        v_tenant := NEW.tenant;
        v_run_id := NEW.run_id;
    END IF;
    SELECT r.status INTO v_status FROM "docket".runs r
    WHERE r.tenant = v_tenant AND r.run_id = v_run_id;
    IF NOT FOUND THEN
        RETURN NULL;  -- the run is gone (pruned), and its live row with it
    END IF;
    SELECT l.status INTO v_live FROM "docket".live l
    WHERE l.tenant = v_tenant AND l.run_id = v_run_id;
    IF v_status IN ('done', 'failed', 'cancelled') THEN
        IF v_live IS NOT NULL THEN
            RAISE EXCEPTION 'docket: finished run % still has operational state', v_run_id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    ELSIF v_live IS DISTINCT FROM v_status THEN
        RAISE EXCEPTION 'docket: run % is % but its operational state says %',
            v_run_id, v_status, coalesce(v_live, 'nothing')
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END
$fn$;

CREATE CONSTRAINT TRIGGER runs_born_with_state AFTER INSERT ON "docket".runs
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "docket".check_live_pair();

CREATE CONSTRAINT TRIGGER runs_status_moves_state
AFTER UPDATE OF status ON "docket".runs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION "docket".check_live_pair();

CREATE CONSTRAINT TRIGGER live_state_changes
AFTER INSERT OR DELETE ON "docket".live
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "docket".check_live_pair();

CREATE CONSTRAINT TRIGGER live_status_changes
AFTER UPDATE OF status ON "docket".live DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION "docket".check_live_pair();

CREATE FUNCTION "docket".save_graph(
    p_tenant text, p_graph_id text, p_graph_hash text, p_document bytea, p_now timestamptz)
RETURNS TABLE (o_published_at timestamptz, o_same boolean)
LANGUAGE plpgsql AS $fn$
BEGIN
    RETURN QUERY
    WITH ins AS (
        INSERT INTO "docket".graphs AS g (tenant, graph_id, graph_hash, document, published_at)
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
    SELECT g.published_at, g.document = p_document FROM "docket".graphs g
    WHERE g.tenant = p_tenant AND g.graph_id = p_graph_id AND g.graph_hash = p_graph_hash;
END
$fn$;

CREATE FUNCTION "docket".initialize_run(
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
    PERFORM 1 FROM "docket".graphs g
    WHERE g.tenant = p_tenant AND g.graph_id = p_graph_id AND g.graph_hash = p_graph_hash;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_graph'::text, NULL::text, NULL::bytea, false;
        RETURN;
    END IF;
    INSERT INTO "docket".runs (
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
            (SELECT t.digest FROM "docket".transitions t WHERE t.tenant = p_tenant
                AND t.run_id = p_run_id AND t.transition_id = p_transition_id),
            (SELECT r.run_json FROM "docket".runs r
                WHERE r.tenant = p_tenant AND r.run_id = p_run_id),
            false;
        RETURN;
    END IF;
    INSERT INTO "docket".live (tenant, run_id, status, wake_at)
    VALUES (p_tenant, p_run_id, p_status, p_wake_at);
    INSERT INTO "docket".transitions (tenant, run_id, transition_id, digest)
    VALUES (p_tenant, p_run_id, p_transition_id, p_digest);
    INSERT INTO "docket".events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
    SELECT p_tenant, p_run_id, e.seq, e.body, e.hash, v_now
    FROM unnest(p_seqs, p_events, p_hashes) AS e(seq, body, hash);
    IF p_wake_at <= v_now THEN
        PERFORM pg_notify('docket_wake', 'docket');
        v_announce := true;
    END IF;
    RETURN QUERY SELECT 'written'::text, NULL::text, NULL::bytea, v_announce;
END
$fn$;

CREATE FUNCTION "docket".commit_run(
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
    INTO cur FROM "docket".runs r
    WHERE r.tenant = p_tenant AND r.run_id = p_run_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::text, NULL::text, NULL::text,
            NULL::timestamptz, NULL::bigint, NULL::boolean, NULL::bigint, NULL::bytea[],
            NULL::bytea, false;
        RETURN;
    END IF;
    SELECT t.digest INTO v_digest FROM "docket".transitions t
    WHERE t.tenant = p_tenant AND t.run_id = p_run_id AND t.transition_id = p_transition_id;
    -- what is stored at each re-sent sequence (NULL: new, or pruned)
    SELECT array_agg(e.content_sha256 ORDER BY s.i) INTO v_stored
    FROM unnest(p_seqs) WITH ORDINALITY AS s(seq, i)
    LEFT JOIN "docket".events e
        ON e.tenant = p_tenant AND e.run_id = p_run_id AND e.seq = s.seq
        AND s.seq <= cur.event_seq;
    SELECT count(*) INTO v_new FROM unnest(p_seqs) AS s(seq) WHERE s.seq > cur.event_seq;
    SELECT l.claim_token, l.claimed_at INTO v_token, v_claimed_at FROM "docket".live l
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
            CASE WHEN v_digest IS NOT NULL THEN (SELECT r.run_json FROM "docket".runs r
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
    UPDATE "docket".runs SET
        status = p_status, step = p_step, checkpoint_seq = p_checkpoint_seq,
        event_seq = p_event_seq, updated_at = p_updated_at, finished_at = p_finished_at,
        run_json = p_run_json, latest_checkpoint_type = p_checkpoint_type,
        ended_at = CASE WHEN p_status IN ('done', 'failed', 'cancelled') THEN v_now END
    WHERE tenant = p_tenant AND run_id = p_run_id;
    IF p_status IN ('done', 'failed', 'cancelled') THEN
        DELETE FROM "docket".live WHERE tenant = p_tenant AND run_id = p_run_id;
    ELSE
        -- every commit resets the claim health (attempts, abandons, poison)
        INSERT INTO "docket".live AS l (tenant, run_id, status, wake_at, claim_token, claimed_at)
        VALUES (p_tenant, p_run_id, p_status, v_wake, v_token, v_claimed_at)
        ON CONFLICT (tenant, run_id) DO UPDATE SET
            status = excluded.status, wake_at = excluded.wake_at,
            claim_token = excluded.claim_token, claimed_at = excluded.claimed_at,
            claim_attempts = 0, claim_abandons = 0, poisoned_at = NULL, poison_reason = NULL;
    END IF;
    INSERT INTO "docket".transitions (tenant, run_id, transition_id, digest)
    VALUES (p_tenant, p_run_id, p_transition_id, p_digest);
    INSERT INTO "docket".events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
    SELECT p_tenant, p_run_id, e.seq, e.body, e.hash, v_now
    FROM unnest(p_seqs, p_events, p_hashes) AS e(seq, body, hash)
    WHERE e.seq > cur.event_seq;
    IF v_wake IS NOT NULL AND v_wake <= v_now THEN
        PERFORM pg_notify('docket_wake', 'docket');
        v_announce := true;
    END IF;
    RETURN QUERY SELECT 'written'::text, NULL::text, NULL::text, NULL::text,
        NULL::timestamptz, NULL::bigint, NULL::boolean, NULL::bigint, NULL::bytea[],
        NULL::bytea, v_announce;
END
$fn$;

CREATE FUNCTION "docket".claim_due(
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
                (SELECT r.tenant FROM "docket".live r
                 WHERE r.status = 'running' AND r.poisoned_at IS NULL AND r.claim_token IS NULL
                 ORDER BY r.tenant LIMIT 1)
                UNION ALL
                SELECT (SELECT r.tenant FROM "docket".live r
                        WHERE r.status = 'running' AND r.poisoned_at IS NULL
                          AND r.claim_token IS NULL AND r.tenant > w.tenant
                        ORDER BY r.tenant LIMIT 1)
                FROM walk w WHERE w.tenant IS NOT NULL
            )
            SELECT array_agg(w.tenant ORDER BY random()) INTO f_tenants
            FROM walk w
            WHERE w.tenant IS NOT NULL AND EXISTS (
                SELECT 1 FROM "docket".live r
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
                        SELECT r.wake_at, r.run_id INTO r_at, r_id FROM "docket".live r
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
                    FROM "docket".live r
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
                FROM "docket".live r
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
                SELECT r.claim_attempts INTO v_attempts FROM "docket".live r
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
                SELECT r.claim_attempts INTO v_attempts FROM "docket".live r
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
            INTO v_attempts, v_at FROM "docket".live r
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
                   SELECT 1 FROM "docket".live r
                   WHERE r.status = 'running' AND r.poisoned_at IS NULL
                     AND r.claim_token IS NULL AND r.wake_at <= v_now)
               OR EXISTS (
                   SELECT 1 FROM "docket".live r
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
        UPDATE "docket".live l SET
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
    JOIN "docket".runs r ON r.tenant = d.tenant AND r.run_id = d.run_id
    ORDER BY CASE WHEN p_fair THEN d.ord ELSE 0 END, d.at, d.run_id, d.tenant;
END
$fn$;

CREATE FUNCTION "docket".abandon_claim(
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
    PERFORM 1 FROM "docket".runs r
    WHERE r.tenant = p_tenant AND r.run_id = p_run_id AND r.checkpoint_seq = p_expected
    FOR UPDATE;
    IF FOUND THEN
        SELECT l.claim_abandons INTO v_old FROM "docket".live l
        WHERE l.tenant = p_tenant AND l.run_id = p_run_id AND l.claim_token = p_token
        FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'stale'::text, NULL::timestamptz;
        RETURN;
    END IF;
    IF NOT p_non_poisoning AND v_old >= p_max_abandons THEN
        UPDATE "docket".live SET claim_token = NULL, claimed_at = NULL, wake_at = NULL,
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
    UPDATE "docket".live SET claim_token = NULL, claimed_at = NULL, wake_at = v_wake,
        claim_attempts = greatest(claim_attempts - 1, 0), claim_abandons = v_old + 1
    WHERE tenant = p_tenant AND run_id = p_run_id;
    PERFORM pg_notify('docket_wake', 'docket');
    RETURN QUERY SELECT 'rescheduled'::text, v_wake;
END
$fn$;

CREATE FUNCTION "docket".prune(
    p_event_age interval, p_run_age interval, p_batch integer, p_now timestamptz)
RETURNS TABLE (o_ran boolean, o_events bigint, o_runs bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_events bigint := 0;
    v_runs bigint := 0;
BEGIN
    -- one pruner at a time per schema; a second one returns at once
    IF NOT pg_try_advisory_xact_lock(hashtextextended('docket:prune:docket', 0)) THEN
        RETURN QUERY SELECT false, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    IF p_event_age IS NOT NULL THEN
        WITH doomed AS (
            SELECT e.tenant, e.run_id, e.seq FROM "docket".events e
            WHERE e.inserted_at < v_now - p_event_age
            ORDER BY e.inserted_at LIMIT p_batch
            FOR UPDATE SKIP LOCKED)
        DELETE FROM "docket".events e USING doomed d
        WHERE e.tenant = d.tenant AND e.run_id = d.run_id AND e.seq = d.seq;
        GET DIAGNOSTICS v_events = ROW_COUNT;
    END IF;
    IF p_run_age IS NOT NULL THEN
        -- a run being committed is locked, and skipped until the next pass
        WITH doomed AS (
            SELECT r.tenant, r.run_id FROM "docket".runs r
            WHERE r.ended_at < v_now - p_run_age
            ORDER BY r.ended_at LIMIT p_batch
            FOR UPDATE SKIP LOCKED)
        DELETE FROM "docket".runs r USING doomed d
        WHERE r.tenant = d.tenant AND r.run_id = d.run_id;
        GET DIAGNOSTICS v_runs = ROW_COUNT;
    END IF;
    RETURN QUERY SELECT true, v_events, v_runs;
END
$fn$;

CREATE FUNCTION "docket".retry_poisoned(p_tenant text, p_run_id text, p_now timestamptz)
RETURNS TABLE (o_outcome text, o_run_json bytea)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_status text;
    v_poisoned timestamptz;
BEGIN
    SELECT r.status INTO v_status FROM "docket".runs r
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
    SELECT l.poisoned_at INTO v_poisoned FROM "docket".live l
    WHERE l.tenant = p_tenant AND l.run_id = p_run_id
    FOR UPDATE;
    IF v_poisoned IS NOT NULL THEN
        UPDATE "docket".live SET poisoned_at = NULL, poison_reason = NULL,
            claim_token = NULL, claimed_at = NULL, claim_attempts = 0, claim_abandons = 0,
            wake_at = coalesce(p_now, clock_timestamp())
        WHERE tenant = p_tenant AND run_id = p_run_id;
        PERFORM pg_notify('docket_wake', 'docket');
        RETURN QUERY SELECT 'retried'::text, r.run_json FROM "docket".runs r
            WHERE r.tenant = p_tenant AND r.run_id = p_run_id;
        RETURN;
    END IF;
    RETURN QUERY SELECT 'healthy'::text, r.run_json FROM "docket".runs r
        WHERE r.tenant = p_tenant AND r.run_id = p_run_id;
END
$fn$;

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '1') ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- docket-postgres schema version 2

CREATE OR REPLACE FUNCTION "docket".commit_run(
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
    INTO cur FROM "docket".runs r
    WHERE r.tenant = p_tenant AND r.run_id = p_run_id
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, NULL::text, NULL::text, NULL::text,
            NULL::timestamptz, NULL::bigint, NULL::boolean, NULL::bigint, NULL::bytea[],
            NULL::bytea, false;
        RETURN;
    END IF;
    SELECT t.digest INTO v_digest FROM "docket".transitions t
    WHERE t.tenant = p_tenant AND t.run_id = p_run_id AND t.transition_id = p_transition_id;
    IF coalesce(array_length(p_seqs, 1), 0) = 0 OR p_seqs[1] > cur.event_seq THEN
        -- every sent event is new (sequences ascend: the shared validator checked)
        v_stored := NULL;
        v_new := coalesce(array_length(p_seqs, 1), 0);
    ELSE
        -- what is stored at each re-sent sequence (NULL: new, or pruned)
        SELECT array_agg(e.content_sha256 ORDER BY s.i) INTO v_stored
        FROM unnest(p_seqs) WITH ORDINALITY AS s(seq, i)
        LEFT JOIN "docket".events e
            ON e.tenant = p_tenant AND e.run_id = p_run_id AND e.seq = s.seq
            AND s.seq <= cur.event_seq;
        SELECT count(*) INTO v_new FROM unnest(p_seqs) AS s(seq) WHERE s.seq > cur.event_seq;
    END IF;
    SELECT l.claim_token, l.claimed_at INTO v_token, v_claimed_at FROM "docket".live l
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
            CASE WHEN v_digest IS NOT NULL THEN (SELECT r.run_json FROM "docket".runs r
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
    UPDATE "docket".runs SET
        status = p_status, step = p_step, checkpoint_seq = p_checkpoint_seq,
        event_seq = p_event_seq, updated_at = p_updated_at, finished_at = p_finished_at,
        run_json = p_run_json, latest_checkpoint_type = p_checkpoint_type,
        ended_at = CASE WHEN p_status IN ('done', 'failed', 'cancelled') THEN v_now END
    WHERE tenant = p_tenant AND run_id = p_run_id;
    IF p_status IN ('done', 'failed', 'cancelled') THEN
        DELETE FROM "docket".live WHERE tenant = p_tenant AND run_id = p_run_id;
    ELSE
        -- every commit resets the claim health (attempts, abandons, poison)
        INSERT INTO "docket".live AS l (tenant, run_id, status, wake_at, claim_token, claimed_at)
        VALUES (p_tenant, p_run_id, p_status, v_wake, v_token, v_claimed_at)
        ON CONFLICT (tenant, run_id) DO UPDATE SET
            status = excluded.status, wake_at = excluded.wake_at,
            claim_token = excluded.claim_token, claimed_at = excluded.claimed_at,
            claim_attempts = 0, claim_abandons = 0, poisoned_at = NULL, poison_reason = NULL;
    END IF;
    INSERT INTO "docket".transitions (tenant, run_id, transition_id, digest)
    VALUES (p_tenant, p_run_id, p_transition_id, p_digest);
    INSERT INTO "docket".events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
    SELECT p_tenant, p_run_id, e.seq, e.body, e.hash, v_now
    FROM unnest(p_seqs, p_events, p_hashes) AS e(seq, body, hash)
    WHERE e.seq > cur.event_seq;
    IF v_wake IS NOT NULL AND v_wake <= v_now THEN
        PERFORM pg_notify('docket_wake', 'docket');
        v_announce := true;
    END IF;
    RETURN QUERY SELECT 'written'::text, NULL::text, NULL::text, NULL::text,
        NULL::timestamptz, NULL::bigint, NULL::boolean, NULL::bigint, NULL::bytea[],
        NULL::bytea, v_announce;
END
$fn$;

DO $do$
BEGIN
    IF 'lz4' = ANY ((SELECT enumvals FROM pg_catalog.pg_settings
                     WHERE name = 'default_toast_compression')::text[]) THEN
        EXECUTE 'ALTER TABLE "docket".runs ALTER COLUMN run_json SET COMPRESSION lz4';
    END IF;
END
$do$;

CREATE FUNCTION "docket".commit_runs(
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
        RETURN QUERY SELECT i, c.* FROM "docket".commit_run(
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
$fn$;

CREATE FUNCTION "docket".initialize_runs(
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
        RETURN QUERY SELECT i, c.* FROM "docket".initialize_run(
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
$fn$;

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '2') ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- docket-postgres schema version 3

DROP FUNCTION "docket".commit_runs(text[], text[], text[], text[], text[], text[], timestamptz[], bigint[], boolean[], text[], text[], bigint[], bigint[], bigint[], timestamptz[], timestamptz[], bytea[], text[], text[], timestamptz[], timestamptz, integer[], bigint[], bytea[], bytea[]);

DROP FUNCTION "docket".initialize_runs(text[], text[], text[], text[], text[], text[], text[], bigint[], bigint[], bigint[], timestamptz[], timestamptz[], timestamptz[], bytea[], text[], timestamptz[], timestamptz, integer[], bigint[], bytea[], bytea[]);

CREATE OR REPLACE FUNCTION "docket".claim_due(
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
    f record;
BEGIN
    IF p_ttl > v_now - '0001-01-01 00:00:00+00'::timestamptz THEN
        v_cutoff := '-infinity';  -- no representable claim is that old
    ELSE
        v_cutoff := v_now - p_ttl;
    END IF;
    -- A pass reads the two classes lazily. Only a pass that took nothing can be followed
    -- by another: its peeks ran in several snapshots, so a run that changed class
    -- between them (a release, an abandon) may have been seen by neither.
    IF NOT p_fair AND NOT EXISTS (
            SELECT 1 FROM "docket".live r
            WHERE r.status = 'running' AND r.poisoned_at IS NULL
              AND r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff) THEN
        -- no expired claim: the first ready runs no one holds, in the general order
        FOR f IN
            SELECT r.tenant, r.run_id, r.wake_at, r.claim_attempts FROM "docket".live r
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
        r_has := false; r_end := false;
        rc_at := '-infinity'; rc_id := ''; rc_tenant := '';
        e_has := false; e_end := false;
        ec_at := '-infinity'; ec_id := ''; ec_tenant := '';
        s_tenant := '{}'; s_id := '{}';
        IF p_fair THEN
            -- tenants with due work, one index probe per tenant, shuffled
            WITH RECURSIVE walk(tenant) AS (
                (SELECT r.tenant FROM "docket".live r
                 WHERE r.status = 'running' AND r.poisoned_at IS NULL AND r.claim_token IS NULL
                 ORDER BY r.tenant LIMIT 1)
                UNION ALL
                SELECT (SELECT r.tenant FROM "docket".live r
                        WHERE r.status = 'running' AND r.poisoned_at IS NULL
                          AND r.claim_token IS NULL AND r.tenant > w.tenant
                        ORDER BY r.tenant LIMIT 1)
                FROM walk w WHERE w.tenant IS NOT NULL
            )
            SELECT array_agg(w.tenant ORDER BY random()) INTO f_tenants
            FROM walk w
            WHERE w.tenant IS NOT NULL AND EXISTS (
                SELECT 1 FROM "docket".live r
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
                        SELECT r.wake_at, r.run_id INTO r_at, r_id FROM "docket".live r
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
                    FROM "docket".live r
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
                FROM "docket".live r
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
                SELECT r.claim_attempts INTO v_attempts FROM "docket".live r
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
                SELECT r.claim_attempts INTO v_attempts FROM "docket".live r
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
            INTO v_attempts, v_at FROM "docket".live r
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
                   SELECT 1 FROM "docket".live r
                   WHERE r.status = 'running' AND r.poisoned_at IS NULL
                     AND r.claim_token IS NULL AND r.wake_at <= v_now)
               OR EXISTS (
                   SELECT 1 FROM "docket".live r
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
        UPDATE "docket".live l SET
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
    JOIN "docket".runs r ON r.tenant = d.tenant AND r.run_id = d.run_id
    ORDER BY CASE WHEN p_fair THEN d.ord ELSE 0 END, d.at, d.run_id, d.tenant;
END
$fn$;

CREATE FUNCTION "docket".commit_runs(
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
        JOIN "docket".runs r ON r.tenant = p_tenants[b.i] AND r.run_id = b.id
        JOIN "docket".live l ON l.tenant = r.tenant AND l.run_id = r.run_id
        LEFT JOIN "docket".transitions t ON t.tenant = r.tenant AND t.run_id = r.run_id
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
        UPDATE "docket".runs r SET
            status = p_statuses[b.i], step = p_steps[b.i],
            checkpoint_seq = p_checkpoint_seqs[b.i], event_seq = p_event_seqs[b.i],
            updated_at = p_updated_ats[b.i], finished_at = p_finished_ats[b.i],
            run_json = p_run_jsons[b.i], latest_checkpoint_type = p_checkpoint_types[b.i],
            ended_at = CASE WHEN p_statuses[b.i] IN ('done', 'failed', 'cancelled')
                            THEN v_now END
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i] AND r.tenant = p_tenants[b.i] AND r.run_id = b.id;
        IF v_ends THEN
            DELETE FROM "docket".live l
            USING unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE v_ok[b.i] AND p_statuses[b.i] IN ('done', 'failed', 'cancelled')
              AND l.tenant = p_tenants[b.i] AND l.run_id = b.id;
        END IF;
        IF v_stays THEN
            -- every commit resets the claim health (attempts, abandons, poison)
            UPDATE "docket".live l SET
                status = p_statuses[b.i], wake_at = v_wake[b.i],
                claim_token = v_token[b.i], claimed_at = v_claimed_at[b.i],
                claim_attempts = 0, claim_abandons = 0, poisoned_at = NULL,
                poison_reason = NULL
            FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE v_ok[b.i] AND p_statuses[b.i] NOT IN ('done', 'failed', 'cancelled')
              AND l.tenant = p_tenants[b.i] AND l.run_id = b.id;
        END IF;
        INSERT INTO "docket".transitions (tenant, run_id, transition_id, digest)
        SELECT p_tenants[b.i], b.id, p_transition_ids[b.i], p_digests[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i];
        INSERT INTO "docket".events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
        SELECT p_tenants[p_owners[e.j]], p_run_ids[p_owners[e.j]], e.seq, e.body, e.hash, v_now
        FROM unnest(p_seqs, p_events, p_hashes) WITH ORDINALITY AS e(seq, body, hash, j)
        WHERE v_ok[p_owners[e.j]];
        IF v_announce THEN
            PERFORM pg_notify('docket_wake', 'docket');
        END IF;
    END IF;
    -- everything else, one write at a time, in the group's order
    FOR i IN 1 .. v_n LOOP
        CONTINUE WHEN v_ok[i];
        RETURN QUERY SELECT i, c.* FROM "docket".commit_run(
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
$fn$;

CREATE FUNCTION "docket".initialize_runs(
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
            INSERT INTO "docket".runs AS r (
                tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq,
                event_seq, started_at, updated_at, finished_at, run_json,
                latest_checkpoint_type)
            SELECT p_tenants[b.i], b.id, p_graph_ids[b.i], p_graph_hashes[b.i],
                   p_statuses[b.i], p_steps[b.i], p_checkpoint_seqs[b.i], p_event_seqs[b.i],
                   p_started_ats[b.i], p_updated_ats[b.i], p_finished_ats[b.i],
                   p_run_jsons[b.i], p_checkpoint_types[b.i]
            FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE p_solo[b.i] AND EXISTS (
                SELECT 1 FROM "docket".graphs g WHERE g.tenant = p_tenants[b.i]
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
        INSERT INTO "docket".live (tenant, run_id, status, wake_at)
        SELECT p_tenants[b.i], b.id, p_statuses[b.i], p_wake_ats[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i];
        INSERT INTO "docket".transitions (tenant, run_id, transition_id, digest)
        SELECT p_tenants[b.i], b.id, p_transition_ids[b.i], p_digests[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i];
        INSERT INTO "docket".events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
        SELECT p_tenants[p_owners[e.j]], p_run_ids[p_owners[e.j]], e.seq, e.body, e.hash, v_now
        FROM unnest(p_seqs, p_events, p_hashes) WITH ORDINALITY AS e(seq, body, hash, j)
        WHERE v_ok[p_owners[e.j]];
        IF v_announce THEN
            PERFORM pg_notify('docket_wake', 'docket');
        END IF;
    END IF;
    FOR i IN 1 .. v_n LOOP
        CONTINUE WHEN v_ok[i];
        RETURN QUERY SELECT i, c.* FROM "docket".initialize_run(
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
$fn$;

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '3') ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- docket-postgres schema version 4

CREATE OR REPLACE FUNCTION "docket".commit_runs(
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
            JOIN "docket".runs r ON r.tenant = p_tenants[b.i] AND r.run_id = b.id
            JOIN "docket".live l ON l.tenant = r.tenant AND l.run_id = r.run_id
            LEFT JOIN "docket".transitions t ON t.tenant = r.tenant AND t.run_id = r.run_id
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
        UPDATE "docket".runs r SET
            status = p_statuses[b.i], step = p_steps[b.i],
            checkpoint_seq = p_checkpoint_seqs[b.i], event_seq = p_event_seqs[b.i],
            updated_at = p_updated_ats[b.i], finished_at = p_finished_ats[b.i],
            run_json = p_run_jsons[b.i], latest_checkpoint_type = p_checkpoint_types[b.i],
            ended_at = CASE WHEN p_statuses[b.i] IN ('done', 'failed', 'cancelled')
                            THEN v_now END
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_pass[b.i] AND r.tenant = p_tenants[b.i] AND r.run_id = b.id;
        IF v_ends THEN
            DELETE FROM "docket".live l
            USING unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE v_pass[b.i] AND p_statuses[b.i] IN ('done', 'failed', 'cancelled')
              AND l.tenant = p_tenants[b.i] AND l.run_id = b.id;
        END IF;
        IF v_stays THEN
            -- every commit resets the claim health (attempts, abandons, poison)
            UPDATE "docket".live l SET
                status = p_statuses[b.i], wake_at = v_wake[b.i],
                claim_token = v_token[b.i], claimed_at = v_claimed_at[b.i],
                claim_attempts = 0, claim_abandons = 0, poisoned_at = NULL,
                poison_reason = NULL
            FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE v_pass[b.i] AND p_statuses[b.i] NOT IN ('done', 'failed', 'cancelled')
              AND l.tenant = p_tenants[b.i] AND l.run_id = b.id;
        END IF;
        INSERT INTO "docket".transitions (tenant, run_id, transition_id, digest)
        SELECT p_tenants[b.i], b.id, p_transition_ids[b.i], p_digests[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_pass[b.i];
        INSERT INTO "docket".events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
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
        PERFORM pg_notify('docket_wake', 'docket');
    END IF;
    -- everything else, one write at a time, in the group's order
    FOR i IN 1 .. v_n LOOP
        CONTINUE WHEN v_ok[i];
        RETURN QUERY SELECT i, c.* FROM "docket".commit_run(
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
$fn$;

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '4') ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- docket-postgres schema version 5

DROP FUNCTION "docket".initialize_runs(text[], text[], text[], text[], text[], text[], text[], bigint[], bigint[], bigint[], timestamptz[], timestamptz[], timestamptz[], bytea[], text[], timestamptz[], timestamptz, integer[], bigint[], bytea[], bytea[], integer[], boolean[], integer[]);

DROP FUNCTION "docket".initialize_run(text, text, text, text, text, text, text, bigint, bigint, bigint, timestamptz, timestamptz, timestamptz, bytea, text, timestamptz, timestamptz, bigint[], bytea[], bytea[]);

CREATE FUNCTION "docket".initialize_run(
    p_tenant text, p_run_id text, p_transition_id text, p_digest text,
    p_graph_id text, p_graph_hash text, p_status text, p_step bigint,
    p_checkpoint_seq bigint, p_event_seq bigint, p_started_at timestamptz,
    p_updated_at timestamptz, p_finished_at timestamptz, p_run_json bytea,
    p_checkpoint_type text, p_wake_at timestamptz, p_token text,
    p_now timestamptz,
    p_seqs bigint[], p_events bytea[], p_hashes bytea[])
RETURNS TABLE (o_outcome text, o_digest text, o_run_json bytea, o_announced boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_announce boolean := false;
BEGIN
    PERFORM 1 FROM "docket".graphs g
    WHERE g.tenant = p_tenant AND g.graph_id = p_graph_id AND g.graph_hash = p_graph_hash;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_graph'::text, NULL::text, NULL::bytea, false;
        RETURN;
    END IF;
    INSERT INTO "docket".runs (
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
            (SELECT t.digest FROM "docket".transitions t WHERE t.tenant = p_tenant
                AND t.run_id = p_run_id AND t.transition_id = p_transition_id),
            (SELECT r.run_json FROM "docket".runs r
                WHERE r.tenant = p_tenant AND r.run_id = p_run_id),
            false;
        RETURN;
    END IF;
    INSERT INTO "docket".live (
        tenant, run_id, status, wake_at, claim_token, claimed_at, claim_attempts)
    VALUES (p_tenant, p_run_id, p_status,
            CASE WHEN p_token IS NULL THEN p_wake_at END, p_token,
            CASE WHEN p_token IS NOT NULL THEN p_wake_at END,
            CASE WHEN p_token IS NULL THEN 0 ELSE 1 END);
    INSERT INTO "docket".transitions (tenant, run_id, transition_id, digest)
    VALUES (p_tenant, p_run_id, p_transition_id, p_digest);
    INSERT INTO "docket".events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
    SELECT p_tenant, p_run_id, e.seq, e.body, e.hash, v_now
    FROM unnest(p_seqs, p_events, p_hashes) AS e(seq, body, hash);
    IF p_token IS NULL AND p_wake_at <= v_now THEN
        PERFORM pg_notify('docket_wake', 'docket');
        v_announce := true;
    END IF;
    RETURN QUERY SELECT 'written'::text, NULL::text, NULL::bytea, v_announce;
END
$fn$;

CREATE FUNCTION "docket".initialize_runs(
    p_tenants text[], p_run_ids text[], p_transition_ids text[], p_digests text[],
    p_graph_ids text[], p_graph_hashes text[], p_statuses text[], p_steps bigint[],
    p_checkpoint_seqs bigint[], p_event_seqs bigint[], p_started_ats timestamptz[],
    p_updated_ats timestamptz[], p_finished_ats timestamptz[], p_run_jsons bytea[],
    p_checkpoint_types text[], p_wake_ats timestamptz[], p_tokens text[],
    p_now timestamptz,
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
            INSERT INTO "docket".runs AS r (
                tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq,
                event_seq, started_at, updated_at, finished_at, run_json,
                latest_checkpoint_type)
            SELECT p_tenants[b.i], b.id, p_graph_ids[b.i], p_graph_hashes[b.i],
                   p_statuses[b.i], p_steps[b.i], p_checkpoint_seqs[b.i], p_event_seqs[b.i],
                   p_started_ats[b.i], p_updated_ats[b.i], p_finished_ats[b.i],
                   p_run_jsons[b.i], p_checkpoint_types[b.i]
            FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE p_solo[b.i] AND EXISTS (
                SELECT 1 FROM "docket".graphs g WHERE g.tenant = p_tenants[b.i]
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
        v_due := p_tokens[f.i] IS NULL
            AND coalesce(p_wake_ats[f.i] <= v_now, false);
        v_announce := v_announce OR v_due;
        o_index := f.i;
        o_outcome := 'written';
        o_announced := v_due;
        RETURN NEXT;
    END LOOP;
    IF v_any THEN
        INSERT INTO "docket".live (
            tenant, run_id, status, wake_at, claim_token, claimed_at, claim_attempts)
        SELECT p_tenants[b.i], b.id, p_statuses[b.i],
               CASE WHEN p_tokens[b.i] IS NULL THEN p_wake_ats[b.i] END, p_tokens[b.i],
               CASE WHEN p_tokens[b.i] IS NOT NULL THEN p_wake_ats[b.i] END,
               CASE WHEN p_tokens[b.i] IS NULL THEN 0 ELSE 1 END
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i];
        INSERT INTO "docket".transitions (tenant, run_id, transition_id, digest)
        SELECT p_tenants[b.i], b.id, p_transition_ids[b.i], p_digests[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i];
        INSERT INTO "docket".events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
        SELECT p_tenants[p_owners[e.j]], p_run_ids[p_owners[e.j]], e.seq, e.body, e.hash, v_now
        FROM unnest(p_seqs, p_events, p_hashes) WITH ORDINALITY AS e(seq, body, hash, j)
        WHERE v_ok[p_owners[e.j]];
        IF v_announce THEN
            PERFORM pg_notify('docket_wake', 'docket');
        END IF;
    END IF;
    FOR i IN 1 .. v_n LOOP
        CONTINUE WHEN v_ok[i];
        RETURN QUERY SELECT i, c.* FROM "docket".initialize_run(
            p_tenants[i], p_run_ids[i], p_transition_ids[i], p_digests[i],
            p_graph_ids[i], p_graph_hashes[i], p_statuses[i], p_steps[i],
            p_checkpoint_seqs[i], p_event_seqs[i], p_started_ats[i],
            p_updated_ats[i], p_finished_ats[i], p_run_jsons[i],
            p_checkpoint_types[i], p_wake_ats[i], p_tokens[i], p_now,
            coalesce(p_seqs[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}'),
            coalesce(p_events[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}'),
            coalesce(p_hashes[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}')) c;
    END LOOP;
END
$fn$;

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '5') ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- docket-postgres schema version 6

ALTER FUNCTION "docket".commit_runs(text[], text[], text[], text[], text[], text[], timestamptz[], bigint[], boolean[], text[], text[], bigint[], bigint[], bigint[], timestamptz[], timestamptz[], bytea[], text[], text[], timestamptz[], timestamptz, integer[], bigint[], bytea[], bytea[], integer[], boolean[], integer[]) SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;

ALTER FUNCTION "docket".initialize_runs(text[], text[], text[], text[], text[], text[], text[], bigint[], bigint[], bigint[], timestamptz[], timestamptz[], timestamptz[], bytea[], text[], timestamptz[], text[], timestamptz, integer[], bigint[], bytea[], bytea[], integer[], boolean[], integer[]) SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;

ALTER FUNCTION "docket".claim_due(integer, interval, integer, text, timestamptz, boolean) SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off ROWS 16;

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '6') ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- docket-postgres schema version 7

ALTER TABLE "docket".live DROP CONSTRAINT live_idle_unless_running_check;

ALTER TABLE "docket".live ADD CONSTRAINT live_wake_or_claim_check
    CHECK (wake_at IS NULL OR claim_token IS NULL);

DROP INDEX "docket".live_due;

DROP INDEX "docket".live_due_by_tenant;

DROP INDEX "docket".live_claimed;

CREATE INDEX live_due ON "docket".live (wake_at, run_id, tenant) WHERE poisoned_at IS NULL AND claim_token IS NULL AND wake_at IS NOT NULL;

CREATE INDEX live_due_by_tenant ON "docket".live (tenant, wake_at, run_id)
    WHERE poisoned_at IS NULL AND claim_token IS NULL AND wake_at IS NOT NULL;

CREATE INDEX live_claimed ON "docket".live (claimed_at, run_id, tenant)
    WHERE poisoned_at IS NULL AND claim_token IS NOT NULL;

CREATE OR REPLACE FUNCTION "docket".claim_due(
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
    f record;
BEGIN
    IF p_ttl > v_now - '0001-01-01 00:00:00+00'::timestamptz THEN
        v_cutoff := '-infinity';  -- no representable claim is that old
    ELSE
        v_cutoff := v_now - p_ttl;
    END IF;
    -- A pass reads the two classes lazily. Only a pass that took nothing can be followed
    -- by another: its peeks ran in several snapshots, so a run that changed class
    -- between them (a release, an abandon) may have been seen by neither.
    IF NOT p_fair AND NOT EXISTS (
            SELECT 1 FROM "docket".live r
            WHERE r.poisoned_at IS NULL
              AND r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff) THEN
        -- no expired claim: the first ready runs no one holds, in the general order
        FOR f IN
            SELECT r.tenant, r.run_id, r.wake_at, r.claim_attempts FROM "docket".live r
            WHERE r.poisoned_at IS NULL
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
        r_has := false; r_end := false;
        rc_at := '-infinity'; rc_id := ''; rc_tenant := '';
        e_has := false; e_end := false;
        ec_at := '-infinity'; ec_id := ''; ec_tenant := '';
        s_tenant := '{}'; s_id := '{}';
        IF p_fair THEN
            -- tenants with due work, one index probe per tenant, shuffled
            WITH RECURSIVE walk(tenant) AS (
                (SELECT r.tenant FROM "docket".live r
                 WHERE r.wake_at IS NOT NULL AND r.poisoned_at IS NULL AND r.claim_token IS NULL
                 ORDER BY r.tenant LIMIT 1)
                UNION ALL
                SELECT (SELECT r.tenant FROM "docket".live r
                        WHERE r.wake_at IS NOT NULL AND r.poisoned_at IS NULL
                          AND r.claim_token IS NULL AND r.tenant > w.tenant
                        ORDER BY r.tenant LIMIT 1)
                FROM walk w WHERE w.tenant IS NOT NULL
            )
            SELECT array_agg(w.tenant ORDER BY random()) INTO f_tenants
            FROM walk w
            WHERE w.tenant IS NOT NULL AND EXISTS (
                SELECT 1 FROM "docket".live r
                WHERE r.tenant = w.tenant AND r.poisoned_at IS NULL
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
                        SELECT r.wake_at, r.run_id INTO r_at, r_id FROM "docket".live r
                        WHERE r.tenant = f_tenants[f_pos]
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
                    FROM "docket".live r
                    WHERE r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at <= v_now
                      AND (r.wake_at, r.run_id, r.tenant) > (rc_at, rc_id, rc_tenant)
                    ORDER BY r.wake_at, r.run_id, r.tenant LIMIT 1;
                    r_has := FOUND;
                    r_end := NOT FOUND;
                END IF;
            END IF;
            IF NOT e_has AND NOT e_end THEN
                SELECT r.claimed_at, r.run_id, r.tenant INTO e_at, e_id, e_tenant
                FROM "docket".live r
                WHERE r.poisoned_at IS NULL
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
                SELECT r.claim_attempts INTO v_attempts FROM "docket".live r
                WHERE r.tenant = r_tenant AND r.run_id = r_id
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
                SELECT r.claim_attempts INTO v_attempts FROM "docket".live r
                WHERE r.tenant = e_tenant AND r.run_id = e_id
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
            INTO v_attempts, v_at FROM "docket".live r
            WHERE r.tenant = s_tenant[i] AND r.run_id = s_id[i]
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
                   SELECT 1 FROM "docket".live r
                   WHERE r.poisoned_at IS NULL
                     AND r.claim_token IS NULL AND r.wake_at <= v_now)
               OR EXISTS (
                   SELECT 1 FROM "docket".live r
                   WHERE r.poisoned_at IS NULL
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
        UPDATE "docket".live l SET
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
    JOIN "docket".runs r ON r.tenant = d.tenant AND r.run_id = d.run_id
    ORDER BY CASE WHEN p_fair THEN d.ord ELSE 0 END, d.at, d.run_id, d.tenant;
END
$fn$;

ALTER FUNCTION "docket".claim_due(integer, interval, integer, text, timestamptz, boolean) SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off ROWS 16;

CREATE TABLE "docket".schedules (
    tenant      text COLLATE "C" NOT NULL,
    schedule_id text COLLATE "C" NOT NULL CHECK (schedule_id <> ''),
    version     bigint      NOT NULL CHECK (version >= 1),
    due_at      timestamptz,
    document    bytea       NOT NULL,
    PRIMARY KEY (tenant, schedule_id)
);

CREATE INDEX schedules_due ON "docket".schedules (due_at, schedule_id, tenant)
    WHERE due_at IS NOT NULL;

CREATE INDEX schedules_by_id ON "docket".schedules (schedule_id, tenant);

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '7') ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- docket-postgres schema version 8

CREATE TABLE "docket".feed_listeners (
    key   bigint      PRIMARY KEY,
    since timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION "docket".feed_notice() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_payload text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM "docket".feed_listeners) THEN
        RETURN NULL;
    END IF;
    v_payload := json_build_object(
        'k', 'notice',
        'tenant_id', nullif(NEW.tenant, ''),
        'run_id', NEW.run_id,
        'graph_id', NEW.graph_id,
        'first_seq', CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE OLD.event_seq + 1 END,
        'last_seq', NEW.event_seq)::text;
    IF octet_length(v_payload) > 7000 THEN
        v_payload := '{"k":"notice","tenant_id":null,"run_id":null}';
    END IF;
    PERFORM pg_notify('docket_feed', 'docket ' || v_payload);
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_feed_initialized AFTER INSERT ON "docket".runs
FOR EACH ROW EXECUTE FUNCTION "docket".feed_notice();

CREATE TRIGGER runs_feed_committed
AFTER UPDATE OF event_seq, checkpoint_seq ON "docket".runs FOR EACH ROW
WHEN (OLD.event_seq IS DISTINCT FROM NEW.event_seq
      OR OLD.checkpoint_seq IS DISTINCT FROM NEW.checkpoint_seq)
EXECUTE FUNCTION "docket".feed_notice();

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '8') ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- docket-postgres schema version 9

ALTER TABLE "docket".runs
    ADD COLUMN queue text COLLATE "C" NOT NULL DEFAULT 'default',
    ADD COLUMN priority smallint NOT NULL DEFAULT 0;

ALTER TABLE "docket".live
    ADD COLUMN queue text COLLATE "C" NOT NULL DEFAULT 'default',
    ADD COLUMN priority smallint NOT NULL DEFAULT 0;

DROP INDEX "docket".live_due;

DROP INDEX "docket".live_due_by_tenant;

CREATE INDEX live_due ON "docket".live (priority, wake_at, run_id, tenant)
    WHERE poisoned_at IS NULL AND claim_token IS NULL AND wake_at IS NOT NULL;

CREATE INDEX live_due_by_tenant ON "docket".live (priority, tenant, wake_at, run_id)
    WHERE poisoned_at IS NULL AND claim_token IS NULL AND wake_at IS NOT NULL;

CREATE INDEX live_due_by_queue ON "docket".live (queue, priority, wake_at, run_id, tenant)
    WHERE poisoned_at IS NULL AND claim_token IS NULL AND wake_at IS NOT NULL;

CREATE FUNCTION "docket".initialize_queued_run(
    p_tenant text, p_run_id text, p_transition_id text, p_digest text,
    p_graph_id text, p_graph_hash text, p_status text, p_step bigint,
    p_checkpoint_seq bigint, p_event_seq bigint, p_started_at timestamptz,
    p_updated_at timestamptz, p_finished_at timestamptz, p_run_json bytea,
    p_checkpoint_type text, p_wake_at timestamptz, p_token text,
    p_queue text, p_priority integer,
    p_now timestamptz,
    p_seqs bigint[], p_events bytea[], p_hashes bytea[])
RETURNS TABLE (o_outcome text, o_digest text, o_run_json bytea, o_announced boolean)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_announce boolean := false;
BEGIN
    PERFORM 1 FROM "docket".graphs g
    WHERE g.tenant = p_tenant AND g.graph_id = p_graph_id AND g.graph_hash = p_graph_hash;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'no_graph'::text, NULL::text, NULL::bytea, false;
        RETURN;
    END IF;
    INSERT INTO "docket".runs (
        tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq, event_seq,
        started_at, updated_at, finished_at, run_json, latest_checkpoint_type,
        queue, priority)
    VALUES (
        p_tenant, p_run_id, p_graph_id, p_graph_hash, p_status, p_step, p_checkpoint_seq,
        p_event_seq, p_started_at, p_updated_at, p_finished_at, p_run_json,
        p_checkpoint_type, p_queue, p_priority)
    ON CONFLICT (tenant, run_id) DO NOTHING;
    IF NOT FOUND THEN
        -- taken (perhaps by a racing initialize that has just committed: new snapshot)
        RETURN QUERY SELECT 'exists'::text,
            (SELECT t.digest FROM "docket".transitions t WHERE t.tenant = p_tenant
                AND t.run_id = p_run_id AND t.transition_id = p_transition_id),
            (SELECT r.run_json FROM "docket".runs r
                WHERE r.tenant = p_tenant AND r.run_id = p_run_id),
            false;
        RETURN;
    END IF;
    INSERT INTO "docket".live (
        tenant, run_id, status, wake_at, claim_token, claimed_at, claim_attempts,
        queue, priority)
    VALUES (p_tenant, p_run_id, p_status,
            CASE WHEN p_token IS NULL THEN p_wake_at END, p_token,
            CASE WHEN p_token IS NOT NULL THEN p_wake_at END,
            CASE WHEN p_token IS NULL THEN 0 ELSE 1 END, p_queue, p_priority);
    INSERT INTO "docket".transitions (tenant, run_id, transition_id, digest)
    VALUES (p_tenant, p_run_id, p_transition_id, p_digest);
    INSERT INTO "docket".events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
    SELECT p_tenant, p_run_id, e.seq, e.body, e.hash, v_now
    FROM unnest(p_seqs, p_events, p_hashes) AS e(seq, body, hash);
    IF p_token IS NULL AND p_wake_at <= v_now THEN
        PERFORM pg_notify('docket_wake', 'docket');
        v_announce := true;
    END IF;
    RETURN QUERY SELECT 'written'::text, NULL::text, NULL::bytea, v_announce;
END
$fn$;

CREATE FUNCTION "docket".initialize_queued_runs(
    p_tenants text[], p_run_ids text[], p_transition_ids text[], p_digests text[],
    p_graph_ids text[], p_graph_hashes text[], p_statuses text[], p_steps bigint[],
    p_checkpoint_seqs bigint[], p_event_seqs bigint[], p_started_ats timestamptz[],
    p_updated_ats timestamptz[], p_finished_ats timestamptz[], p_run_jsons bytea[],
    p_checkpoint_types text[], p_wake_ats timestamptz[], p_tokens text[],
    p_queues text[], p_priorities integer[],
    p_now timestamptz,
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
            INSERT INTO "docket".runs AS r (
                tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq,
                event_seq, started_at, updated_at, finished_at, run_json,
                latest_checkpoint_type, queue, priority)
            SELECT p_tenants[b.i], b.id, p_graph_ids[b.i], p_graph_hashes[b.i],
                   p_statuses[b.i], p_steps[b.i], p_checkpoint_seqs[b.i], p_event_seqs[b.i],
                   p_started_ats[b.i], p_updated_ats[b.i], p_finished_ats[b.i],
                   p_run_jsons[b.i], p_checkpoint_types[b.i], p_queues[b.i],
                   p_priorities[b.i]
            FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
            WHERE p_solo[b.i] AND EXISTS (
                SELECT 1 FROM "docket".graphs g WHERE g.tenant = p_tenants[b.i]
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
        v_due := p_tokens[f.i] IS NULL
            AND coalesce(p_wake_ats[f.i] <= v_now, false);
        v_announce := v_announce OR v_due;
        o_index := f.i;
        o_outcome := 'written';
        o_announced := v_due;
        RETURN NEXT;
    END LOOP;
    IF v_any THEN
        INSERT INTO "docket".live (
            tenant, run_id, status, wake_at, claim_token, claimed_at, claim_attempts,
            queue, priority)
        SELECT p_tenants[b.i], b.id, p_statuses[b.i],
               CASE WHEN p_tokens[b.i] IS NULL THEN p_wake_ats[b.i] END, p_tokens[b.i],
               CASE WHEN p_tokens[b.i] IS NOT NULL THEN p_wake_ats[b.i] END,
               CASE WHEN p_tokens[b.i] IS NULL THEN 0 ELSE 1 END,
               p_queues[b.i], p_priorities[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i];
        INSERT INTO "docket".transitions (tenant, run_id, transition_id, digest)
        SELECT p_tenants[b.i], b.id, p_transition_ids[b.i], p_digests[b.i]
        FROM unnest(p_run_ids) WITH ORDINALITY AS b(id, i)
        WHERE v_ok[b.i];
        INSERT INTO "docket".events (tenant, run_id, seq, event_json, content_sha256, inserted_at)
        SELECT p_tenants[p_owners[e.j]], p_run_ids[p_owners[e.j]], e.seq, e.body, e.hash, v_now
        FROM unnest(p_seqs, p_events, p_hashes) WITH ORDINALITY AS e(seq, body, hash, j)
        WHERE v_ok[p_owners[e.j]];
        IF v_announce THEN
            PERFORM pg_notify('docket_wake', 'docket');
        END IF;
    END IF;
    FOR i IN 1 .. v_n LOOP
        CONTINUE WHEN v_ok[i];
        RETURN QUERY SELECT i, c.* FROM "docket".initialize_queued_run(
            p_tenants[i], p_run_ids[i], p_transition_ids[i], p_digests[i],
            p_graph_ids[i], p_graph_hashes[i], p_statuses[i], p_steps[i],
            p_checkpoint_seqs[i], p_event_seqs[i], p_started_ats[i],
            p_updated_ats[i], p_finished_ats[i], p_run_jsons[i],
            p_checkpoint_types[i], p_wake_ats[i], p_tokens[i],
            p_queues[i], p_priorities[i], p_now,
            coalesce(p_seqs[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}'),
            coalesce(p_events[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}'),
            coalesce(p_hashes[p_firsts[i]:p_firsts[i] + p_counts[i] - 1], '{}')) c;
    END LOOP;
END
$fn$;

ALTER FUNCTION "docket".initialize_queued_runs(text[], text[], text[], text[], text[], text[], text[], bigint[], bigint[], bigint[], timestamptz[], timestamptz[], timestamptz[], bytea[], text[], timestamptz[], text[], text[], integer[], timestamptz, integer[], bigint[], bytea[], bytea[], integer[], boolean[], integer[]) SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;

DROP FUNCTION "docket".claim_due(integer, interval, integer, text, timestamptz, boolean);

CREATE FUNCTION "docket".claim_due(
    p_limit integer, p_ttl interval, p_max_attempts integer, p_preference text,
    p_now timestamptz, p_fair boolean, p_queues text[] DEFAULT NULL)
RETURNS TABLE (
    o_tenant text, o_run_id text, o_graph_id text, o_graph_hash text,
    o_checkpoint_seq bigint, o_token text, o_attempts integer, o_poisoned boolean,
    o_now timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_now timestamptz := coalesce(p_now, clock_timestamp());
    v_cutoff timestamptz;
    v_queues text[] COLLATE "C" := p_queues;
    -- a claim for one queue (a limited queue's) reads one range of live_due_by_queue
    v_one text COLLATE "C" := CASE WHEN cardinality(p_queues) = 1 THEN p_queues[1] END;
    -- the ready stream: its level (priority), its peeked head and its cursor
    r_level integer;
    r_has boolean;
    r_end boolean;
    r_at timestamptz;
    r_id text COLLATE "C";
    r_tenant text COLLATE "C";
    r_pos integer;
    rc_at timestamptz;
    rc_id text COLLATE "C";
    rc_tenant text COLLATE "C";
    -- the fair variant: the level's tenants in a random order, a cursor per tenant
    f_tenants text[] COLLATE "C";
    f_at timestamptz[];
    f_id text[] COLLATE "C";
    f_done boolean[];
    f_n integer;
    f_live integer;
    f_pos integer;
    -- the expired stream (ordered by priority DESC first: its cursor keeps -priority)
    e_has boolean;
    e_end boolean;
    e_prio integer;
    e_at timestamptz;
    e_id text COLLATE "C";
    e_tenant text COLLATE "C";
    ec_key integer;
    ec_at timestamptz;
    ec_id text COLLATE "C";
    ec_tenant text COLLATE "C";
    -- what was chosen (and locked), and what could not be locked
    c_tenant text[] COLLATE "C" := '{}';
    c_id text[] COLLATE "C" := '{}';
    c_at timestamptz[] := '{}';
    c_attempts integer[] := '{}';
    c_prio integer[] := '{}';
    s_tenant text[] COLLATE "C";
    s_id text[] COLLATE "C";
    v_got_ready boolean := false;
    v_got_expired boolean := false;
    v_take_ready boolean;
    v_attempts integer;
    v_prio integer;
    v_at timestamptz;
    v_any boolean;
    f record;
BEGIN
    IF p_ttl > v_now - '0001-01-01 00:00:00+00'::timestamptz THEN
        v_cutoff := '-infinity';  -- no representable claim is that old
    ELSE
        v_cutoff := v_now - p_ttl;
    END IF;
    -- A pass reads the two classes lazily. Only a pass that took nothing can be followed
    -- by another: its peeks ran in several snapshots, so a run that changed class
    -- between them (a release, an abandon) may have been seen by neither.
    IF NOT p_fair AND (v_queues IS NULL OR v_one IS NOT NULL) AND NOT EXISTS (
            SELECT 1 FROM "docket".live r
            WHERE r.poisoned_at IS NULL
              AND r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff
              AND (v_queues IS NULL OR r.queue = ANY(v_queues))) THEN
        -- no expired claim: the first ready runs no one holds, highest level first, in
        -- the general order within a level (the levels walked lazily, as rows are taken)
        IF v_one IS NULL THEN
            FOR f IN
                WITH RECURSIVE lv(p) AS (
                    SELECT CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM "docket".live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < 32767
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM "docket".live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < 32767
                    ORDER BY r.priority DESC LIMIT 1) x) END
                    UNION ALL
                    SELECT CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM "docket".live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < lv.p
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM "docket".live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < lv.p
                    ORDER BY r.priority DESC LIMIT 1) x) END
                    FROM lv WHERE lv.p IS NOT NULL)
                SELECT x.tenant, x.run_id, x.wake_at, x.claim_attempts, x.priority
                FROM lv CROSS JOIN LATERAL (
                    SELECT r.tenant, r.run_id, r.wake_at, r.claim_attempts, r.priority
                    FROM "docket".live r
                    WHERE r.priority = lv.p AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at <= v_now
                    ORDER BY r.wake_at, r.run_id, r.tenant
                    FOR UPDATE SKIP LOCKED) x
                LIMIT p_limit
            LOOP
                c_tenant := array_append(c_tenant, f.tenant);
                c_id := array_append(c_id, f.run_id);
                c_at := array_append(c_at, f.wake_at);
                c_attempts := array_append(c_attempts, f.claim_attempts);
                c_prio := array_append(c_prio, f.priority::integer);
            END LOOP;
        ELSE
            FOR f IN
                WITH RECURSIVE lv(p) AS (
                    SELECT CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM "docket".live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < 32767
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM "docket".live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < 32767
                    ORDER BY r.priority DESC LIMIT 1) x) END
                    UNION ALL
                    SELECT CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM "docket".live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < lv.p
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM "docket".live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < lv.p
                    ORDER BY r.priority DESC LIMIT 1) x) END
                    FROM lv WHERE lv.p IS NOT NULL)
                SELECT x.tenant, x.run_id, x.wake_at, x.claim_attempts, x.priority
                FROM lv CROSS JOIN LATERAL (
                    SELECT r.tenant, r.run_id, r.wake_at, r.claim_attempts, r.priority
                    FROM "docket".live r
                    WHERE r.queue = v_one AND r.priority = lv.p AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at <= v_now
                    ORDER BY r.wake_at, r.run_id, r.tenant
                    FOR UPDATE SKIP LOCKED) x
                LIMIT p_limit
            LOOP
                c_tenant := array_append(c_tenant, f.tenant);
                c_id := array_append(c_id, f.run_id);
                c_at := array_append(c_at, f.wake_at);
                c_attempts := array_append(c_attempts, f.claim_attempts);
                c_prio := array_append(c_prio, f.priority::integer);
            END LOOP;
        END IF;
    END IF;
    FOR v_pass IN 1 .. 3 LOOP
        EXIT WHEN cardinality(c_id) > 0;  -- the fast path above found work
        r_has := false;
        r_end := false;
        r_level := 32767;  -- above every level: not started
        rc_at := '-infinity'; rc_id := ''; rc_tenant := '';
        f_n := NULL;
        e_has := false; e_end := false;
        ec_key := -32768; ec_at := '-infinity'; ec_id := ''; ec_tenant := '';
        s_tenant := '{}'; s_id := '{}';
        LOOP
            EXIT WHEN cardinality(c_id) >= p_limit;
            IF NOT r_has AND NOT r_end AND NOT p_fair AND v_queues IS NULL THEN
                -- the next head after the cursor, at its level or any level below
                WITH RECURSIVE lv(p) AS (
                    SELECT CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM "docket".live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < r_level + 1
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM "docket".live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < r_level + 1
                    ORDER BY r.priority DESC LIMIT 1) x) END
                    UNION ALL
                    SELECT CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM "docket".live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < lv.p
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM "docket".live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < lv.p
                    ORDER BY r.priority DESC LIMIT 1) x) END
                    FROM lv WHERE lv.p IS NOT NULL)
                SELECT x.priority, x.wake_at, x.run_id, x.tenant
                INTO v_prio, r_at, r_id, r_tenant
                FROM lv CROSS JOIN LATERAL (
                    SELECT r.priority, r.wake_at, r.run_id, r.tenant FROM "docket".live r
                    WHERE r.priority = lv.p AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at <= v_now
                      AND (r.wake_at, r.run_id, r.tenant) > (
                          CASE WHEN lv.p = r_level THEN rc_at ELSE '-infinity' END,
                          CASE WHEN lv.p = r_level THEN rc_id ELSE '' END,
                          CASE WHEN lv.p = r_level THEN rc_tenant ELSE '' END)
                    ORDER BY r.wake_at, r.run_id, r.tenant LIMIT 1) x
                LIMIT 1;
                r_has := FOUND;
                r_end := NOT FOUND;
                IF FOUND THEN
                    r_level := v_prio;
                END IF;
            ELSIF NOT r_has AND NOT r_end THEN
                IF r_level = 32767 THEN
                    r_level := CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM "docket".live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < 32767
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM "docket".live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < 32767
                    ORDER BY r.priority DESC LIMIT 1) x) END;
                END IF;
                LOOP  -- the level's next head, else the next level down
                    IF r_level IS NULL THEN
                        r_end := true;
                        EXIT;
                    END IF;
                    IF p_fair THEN
                        IF f_n IS NULL THEN
                            -- the level's tenants with due work, one probe per tenant
                            WITH RECURSIVE walk(tenant) AS (
                                (SELECT r.tenant FROM "docket".live r
                                 WHERE r.priority = r_level AND r.wake_at IS NOT NULL
                                   AND r.poisoned_at IS NULL AND r.claim_token IS NULL
                                   AND (v_queues IS NULL OR r.queue = ANY(v_queues))
                                 ORDER BY r.tenant LIMIT 1)
                                UNION ALL
                                SELECT (SELECT r.tenant FROM "docket".live r
                                        WHERE r.priority = r_level AND r.wake_at IS NOT NULL
                                          AND r.poisoned_at IS NULL
                                          AND r.claim_token IS NULL AND r.tenant > w.tenant
                                          AND (v_queues IS NULL OR r.queue = ANY(v_queues))
                                        ORDER BY r.tenant LIMIT 1)
                                FROM walk w WHERE w.tenant IS NOT NULL
                            )
                            SELECT array_agg(w.tenant ORDER BY random()) INTO f_tenants
                            FROM walk w
                            WHERE w.tenant IS NOT NULL AND EXISTS (
                                SELECT 1 FROM "docket".live r
                                WHERE r.priority = r_level AND r.tenant = w.tenant
                                  AND r.poisoned_at IS NULL
                                  AND r.claim_token IS NULL AND r.wake_at <= v_now
                                  AND (v_queues IS NULL OR r.queue = ANY(v_queues)));
                            f_n := coalesce(cardinality(f_tenants), 0);
                            f_live := f_n;
                            f_pos := 1;
                            f_at := array_fill('-infinity'::timestamptz, ARRAY[f_n]);
                            f_id := array_fill(''::text, ARRAY[f_n]);
                            f_done := array_fill(false, ARRAY[f_n]);
                        END IF;
                        LOOP
                            EXIT WHEN f_live = 0;
                            IF f_pos > f_n THEN
                                f_pos := 1;
                            END IF;
                            IF f_done[f_pos] THEN
                                f_pos := f_pos + 1;
                                CONTINUE;
                            END IF;
                            SELECT r.wake_at, r.run_id INTO r_at, r_id FROM "docket".live r
                            WHERE r.priority = r_level AND r.tenant = f_tenants[f_pos]
                              AND r.poisoned_at IS NULL AND r.claim_token IS NULL
                              AND r.wake_at <= v_now
                              AND (v_queues IS NULL OR r.queue = ANY(v_queues))
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
                        -- each queue's head at this level, the first of them
                        SELECT x.wake_at, x.run_id, x.tenant INTO r_at, r_id, r_tenant
                        FROM unnest(v_queues) AS q(name) CROSS JOIN LATERAL (
                            SELECT r.wake_at, r.run_id, r.tenant FROM "docket".live r
                            WHERE r.queue = q.name AND r.priority = r_level
                              AND r.poisoned_at IS NULL
                              AND r.claim_token IS NULL AND r.wake_at <= v_now
                              AND (r.wake_at, r.run_id, r.tenant) > (rc_at, rc_id, rc_tenant)
                            ORDER BY r.wake_at, r.run_id, r.tenant LIMIT 1) x
                        ORDER BY x.wake_at, x.run_id, x.tenant LIMIT 1;
                        r_has := FOUND;
                    END IF;
                    EXIT WHEN r_has;
                    r_level := CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM "docket".live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < r_level
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM "docket".live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < r_level
                    ORDER BY r.priority DESC LIMIT 1) x) END;
                    rc_at := '-infinity'; rc_id := ''; rc_tenant := '';
                    f_n := NULL;
                END LOOP;
            END IF;
            IF NOT e_has AND NOT e_end THEN
                SELECT r.priority, r.claimed_at, r.run_id, r.tenant
                INTO e_prio, e_at, e_id, e_tenant
                FROM "docket".live r
                WHERE r.poisoned_at IS NULL
                  AND r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff
                  AND (v_queues IS NULL OR r.queue = ANY(v_queues))
                  AND (-r.priority, r.claimed_at, r.run_id, r.tenant)
                      > (ec_key, ec_at, ec_id, ec_tenant)
                ORDER BY -r.priority, r.claimed_at, r.run_id, r.tenant LIMIT 1;
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
                v_take_ready := r_has AND (NOT e_has
                    OR (-r_level, r_at, r_id, r_tenant) < (-e_prio, e_at, e_id, e_tenant));
            END IF;
            IF v_take_ready THEN
                SELECT r.claim_attempts INTO v_attempts FROM "docket".live r
                WHERE r.tenant = r_tenant AND r.run_id = r_id
                  AND r.poisoned_at IS NULL AND r.claim_token IS NULL AND r.wake_at <= v_now
                FOR UPDATE SKIP LOCKED;
                IF FOUND THEN
                    c_tenant := array_append(c_tenant, r_tenant);
                    c_id := array_append(c_id, r_id);
                    c_at := array_append(c_at, r_at);
                    c_attempts := array_append(c_attempts, v_attempts);
                    c_prio := array_append(c_prio, r_level);
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
                SELECT r.claim_attempts INTO v_attempts FROM "docket".live r
                WHERE r.tenant = e_tenant AND r.run_id = e_id
                  AND r.poisoned_at IS NULL AND r.claim_token IS NOT NULL
                  AND r.claimed_at < v_cutoff
                FOR UPDATE SKIP LOCKED;
                IF FOUND THEN
                    c_tenant := array_append(c_tenant, e_tenant);
                    c_id := array_append(c_id, e_id);
                    c_at := array_append(c_at, e_at);
                    c_attempts := array_append(c_attempts, v_attempts);
                    c_prio := array_append(c_prio, e_prio);
                    v_got_expired := true;
                ELSE
                    s_tenant := array_append(s_tenant, e_tenant);
                    s_id := array_append(s_id, e_id);
                END IF;
                ec_key := -e_prio;
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
            SELECT r.claim_attempts, r.priority,
                   CASE WHEN r.claim_token IS NULL THEN r.wake_at ELSE r.claimed_at END
            INTO v_attempts, v_prio, v_at FROM "docket".live r
            WHERE r.tenant = s_tenant[i] AND r.run_id = s_id[i]
              AND r.poisoned_at IS NULL
              AND ((r.claim_token IS NULL AND r.wake_at <= v_now)
                   OR (r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff))
            FOR UPDATE;
            IF FOUND THEN
                c_tenant := array_append(c_tenant, s_tenant[i]);
                c_id := array_append(c_id, s_id[i]);
                c_at := array_append(c_at, v_at);
                c_attempts := array_append(c_attempts, v_attempts);
                c_prio := array_append(c_prio, v_prio);
                EXIT;
            END IF;
        END LOOP;
        EXIT WHEN cardinality(c_id) > 0;
        -- nothing at all: is anything due in either class, seen in one snapshot?
        SELECT EXISTS (
                   SELECT 1 FROM "docket".live r
                   WHERE r.poisoned_at IS NULL
                     AND r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff
                     AND (v_queues IS NULL OR r.queue = ANY(v_queues)))
               OR EXISTS (
                   WITH RECURSIVE lv(p) AS (
                    SELECT CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM "docket".live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < 32767
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM "docket".live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < 32767
                    ORDER BY r.priority DESC LIMIT 1) x) END
                    UNION ALL
                    SELECT CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM "docket".live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < lv.p
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM "docket".live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < lv.p
                    ORDER BY r.priority DESC LIMIT 1) x) END
                    FROM lv WHERE lv.p IS NOT NULL)
                   SELECT 1 FROM lv WHERE CASE WHEN v_queues IS NULL THEN EXISTS (
                           SELECT 1 FROM "docket".live r
                           WHERE r.priority = lv.p AND r.poisoned_at IS NULL
                             AND r.claim_token IS NULL AND r.wake_at <= v_now)
                       ELSE EXISTS (
                           SELECT 1 FROM "docket".live r
                           WHERE r.queue = ANY(v_queues) AND r.priority = lv.p
                             AND r.poisoned_at IS NULL
                             AND r.claim_token IS NULL AND r.wake_at <= v_now) END)
        INTO v_any;
        EXIT WHEN NOT v_any;
    END LOOP;
    RETURN QUERY
    WITH chosen AS (
        SELECT c.tenant, c.run_id, c.at, c.attempts, c.prio, c.ord
        FROM unnest(c_tenant, c_id, c_at, c_attempts, c_prio)
            WITH ORDINALITY AS c(tenant, run_id, at, attempts, prio, ord)
    ), done AS (
        UPDATE "docket".live l SET
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
                  l.poisoned_at IS NOT NULL AS poisoned, ch.at, ch.prio, ch.ord
    )
    SELECT d.tenant::text, d.run_id::text, r.graph_id::text, r.graph_hash::text,
           r.checkpoint_seq, d.claim_token::text, d.claim_attempts, d.poisoned, v_now
    FROM done d
    JOIN "docket".runs r ON r.tenant = d.tenant AND r.run_id = d.run_id
    ORDER BY CASE WHEN p_fair THEN d.ord ELSE 0 END, -d.prio, d.at, d.run_id, d.tenant;
END
$fn$;

ALTER FUNCTION "docket".claim_due(integer, interval, integer, text, timestamptz, boolean, text[]) SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off SET plan_cache_mode = force_generic_plan ROWS 16;

CREATE TABLE "docket".queues (
    name        text COLLATE "C" PRIMARY KEY,
    config      text             NOT NULL,
    tokens      double precision NOT NULL,
    refilled_at timestamptz      NOT NULL
);

CREATE TABLE "docket".queue_slots (
    queue      text COLLATE "C" NOT NULL
               REFERENCES "docket".queues (name) ON DELETE CASCADE,
    holder     bytea       NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, holder)
);

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '9') ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- docket-postgres schema version 10

ALTER TABLE "docket".queues ADD COLUMN admission_seq bigint NOT NULL DEFAULT 0;

CREATE TABLE "docket".queue_admissions (
    queue    text COLLATE "C" NOT NULL
             REFERENCES "docket".queues (name) ON DELETE CASCADE,
    run_id   bytea       NOT NULL,
    tenant   bytea       NOT NULL,
    priority smallint    NOT NULL,
    seq      bigint      NOT NULL,
    start    bytea       NOT NULL,
    at       timestamptz NOT NULL,
    held     boolean     NOT NULL,
    PRIMARY KEY (queue, run_id)
);

CREATE INDEX queue_admissions_held ON "docket".queue_admissions
    (queue, priority DESC, seq) WHERE held;

CREATE INDEX queue_admissions_admitted ON "docket".queue_admissions (queue, seq)
    WHERE NOT held;

CREATE INDEX queue_admissions_tenant ON "docket".queue_admissions
    (queue, tenant, held);

CREATE INDEX queue_admissions_run ON "docket".queue_admissions (run_id, tenant);

CREATE FUNCTION "docket".admission_admit(
    p_queue text, p_run_id bytea, p_tenant bytea, p_priority smallint, p_start bytea,
    p_now timestamptz, p_default text)
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v_config jsonb;
    v_seq bigint;
    v_now timestamptz;
    v_limit bigint;
    v_tenant_limit bigint;
    v_held boolean;
BEGIN
    IF p_default IS NOT NULL THEN
        INSERT INTO "docket".queues (name, config, tokens, refilled_at)
        VALUES (p_queue, p_default, 0, coalesce(p_now, clock_timestamp()))
        ON CONFLICT DO NOTHING;
    END IF;
    SELECT q.config::jsonb, q.admission_seq INTO v_config, v_seq
    FROM "docket".queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    SELECT a.held INTO v_held FROM "docket".queue_admissions a
    WHERE a.queue = p_queue AND a.run_id = p_run_id;
    IF FOUND THEN
        RETURN CASE WHEN v_held THEN 'held' ELSE 'admitted' END;
    END IF;
    v_limit := (v_config ->> 'admission_limit')::bigint;
    v_tenant_limit := (v_config ->> 'tenant_admission_limit')::bigint;
    -- a new start never overtakes its own tenant's held starts
    v_held := EXISTS (SELECT 1 FROM "docket".queue_admissions a
                      WHERE a.queue = p_queue AND a.tenant = p_tenant AND a.held);
    IF NOT v_held AND v_limit IS NOT NULL THEN
        v_held := (SELECT count(*) FROM (
                       SELECT 1 FROM "docket".queue_admissions a
                       WHERE a.queue = p_queue AND NOT a.held LIMIT v_limit) c) >= v_limit;
    END IF;
    IF NOT v_held AND v_tenant_limit IS NOT NULL THEN
        v_held := (SELECT count(*) FROM (
                       SELECT 1 FROM "docket".queue_admissions a
                       WHERE a.queue = p_queue AND a.tenant = p_tenant AND NOT a.held
                       LIMIT v_tenant_limit) c) >= v_tenant_limit;
    END IF;
    UPDATE "docket".queues SET admission_seq = v_seq + 1 WHERE name = p_queue;
    INSERT INTO "docket".queue_admissions
        (queue, run_id, tenant, priority, seq, start, at, held)
    VALUES (p_queue, p_run_id, p_tenant, p_priority, v_seq + 1, p_start, v_now, v_held);
    RETURN CASE WHEN v_held THEN 'held' ELSE 'admitted' END;
END
$fn$;

CREATE FUNCTION "docket".admission_finish(
    p_queue text, p_run_ids bytea[], p_now timestamptz)
RETURNS TABLE (o_run_id bytea, o_tenant bytea, o_priority smallint, o_seq bigint,
               o_start bytea, o_at timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
    v_config jsonb;
    v_now timestamptz;
    v_limit bigint;
    v_tenant_limit bigint;
    v_admitted bigint;
    v_full bytea[] := '{}';
    r record;
BEGIN
    SELECT q.config::jsonb INTO v_config
    FROM "docket".queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    IF cardinality(p_run_ids) > 0 THEN
        DELETE FROM "docket".queue_admissions a
        WHERE a.queue = p_queue AND NOT a.held AND a.run_id = ANY(p_run_ids);
    END IF;
    v_limit := (v_config ->> 'admission_limit')::bigint;
    v_tenant_limit := (v_config ->> 'tenant_admission_limit')::bigint;
    SELECT count(*) INTO v_admitted FROM "docket".queue_admissions a
    WHERE a.queue = p_queue AND NOT a.held;
    FOR r IN SELECT a.run_id, a.tenant FROM "docket".queue_admissions a
             WHERE a.queue = p_queue AND a.held ORDER BY a.priority DESC, a.seq LOOP
        EXIT WHEN v_limit IS NOT NULL AND v_admitted >= v_limit;
        CONTINUE WHEN r.tenant = ANY(v_full);
        IF v_tenant_limit IS NOT NULL AND (
                SELECT count(*) FROM (
                    SELECT 1 FROM "docket".queue_admissions a
                    WHERE a.queue = p_queue AND a.tenant = r.tenant AND NOT a.held
                    LIMIT v_tenant_limit) c) >= v_tenant_limit THEN
            v_full := v_full || r.tenant;
            CONTINUE;
        END IF;
        RETURN QUERY
            UPDATE "docket".queue_admissions a SET held = false, at = v_now
            WHERE a.queue = p_queue AND a.run_id = r.run_id
            RETURNING a.run_id, a.tenant, a.priority, a.seq, a.start, a.at;
        v_admitted := v_admitted + 1;
    END LOOP;
END
$fn$;

CREATE FUNCTION "docket".admission_drop(p_queue text, p_run_id bytea)
RETURNS TABLE (o_run_id bytea, o_tenant bytea, o_priority smallint, o_seq bigint,
               o_start bytea, o_at timestamptz)
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM 1 FROM "docket".queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
        DELETE FROM "docket".queue_admissions a
        WHERE a.queue = p_queue AND a.run_id = p_run_id AND a.held
        RETURNING a.run_id, a.tenant, a.priority, a.seq, a.start, a.at;
END
$fn$;

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '10') ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- docket-postgres schema version 11

CREATE FUNCTION "docket".queue_bucket(
    p_config jsonb, p_tokens float8, p_refilled timestamptz, p_now timestamptz)
RETURNS float8 LANGUAGE sql IMMUTABLE AS $fn$
SELECT CASE
    WHEN p_config -> 'rate' IS NULL THEN p_tokens
    WHEN p_now <= p_refilled THEN least((p_config -> 'rate' ->> 'count')::float8, p_tokens)
    ELSE least((p_config -> 'rate' ->> 'count')::float8,
               p_tokens + extract(epoch FROM (p_now - p_refilled))::float8
                   * (p_config -> 'rate' ->> 'count')::float8
                   / ((p_config -> 'rate' ->> 'period_ms')::float8 / 1000.0))
END
$fn$;

CREATE FUNCTION "docket".queue_grant(
    p_config jsonb, p_live bigint, p_bucket float8, p_want bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE AS $fn$
SELECT CASE
    WHEN coalesce((p_config ->> 'paused')::boolean, false) OR p_want <= 0 THEN 0
    ELSE greatest(0, least(
        p_want,
        coalesce((p_config ->> 'execution_limit')::bigint - p_live, p_want),
        CASE WHEN p_config -> 'rate' IS NULL THEN p_want
             ELSE floor(p_bucket + 1e-9)::bigint END))
END
$fn$;

CREATE FUNCTION "docket".queue_open(
    p_queue text, p_release bytea[], p_holders bytea[], p_now timestamptz, p_default text)
RETURNS TABLE (o_config jsonb, o_tokens float8, o_refilled timestamptz, o_now timestamptz,
               o_released bigint, o_live bigint, o_fresh bytea[])
LANGUAGE plpgsql AS $fn$
BEGIN
    IF p_default IS NOT NULL THEN
        INSERT INTO "docket".queues (name, config, tokens, refilled_at)
        VALUES (p_queue, p_default, 0, coalesce(p_now, clock_timestamp()))
        ON CONFLICT DO NOTHING;
    END IF;
    SELECT q.config::jsonb, q.tokens, q.refilled_at INTO o_config, o_tokens, o_refilled
    FROM "docket".queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    o_now := coalesce(p_now, clock_timestamp());
    DELETE FROM "docket".queue_slots s WHERE s.queue = p_queue AND s.expires_at < o_now;
    o_released := 0;
    IF cardinality(p_release) > 0 THEN
        DELETE FROM "docket".queue_slots s
        WHERE s.queue = p_queue AND s.holder = ANY(p_release);
        GET DIAGNOSTICS o_released = ROW_COUNT;
    END IF;
    SELECT count(*) INTO o_live FROM "docket".queue_slots s WHERE s.queue = p_queue;
    SELECT coalesce(array_agg(h.holder ORDER BY h.i), '{}') INTO o_fresh
    FROM unnest(p_holders) WITH ORDINALITY AS h(holder, i)
    WHERE NOT EXISTS (SELECT 1 FROM "docket".queue_slots s
                      WHERE s.queue = p_queue AND s.holder = h.holder);
    RETURN NEXT;
END
$fn$;

CREATE FUNCTION "docket".queue_acquire(
    p_queue text, p_holders bytea[], p_ttl interval, p_now timestamptz, p_default text)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    q record;
    v_bucket float8;
    v_grant bigint;
BEGIN
    SELECT * INTO q FROM "docket".queue_open(p_queue, '{}', p_holders, p_now, p_default);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_bucket := "docket".queue_bucket(q.o_config, q.o_tokens, q.o_refilled, q.o_now);
    v_grant := "docket".queue_grant(q.o_config, q.o_live, v_bucket, cardinality(q.o_fresh));
    IF v_grant > 0 THEN
        INSERT INTO "docket".queue_slots (queue, holder, expires_at)
        SELECT p_queue, h.holder, q.o_now + p_ttl
        FROM unnest(q.o_fresh) WITH ORDINALITY AS h(holder, i) WHERE h.i <= v_grant;
    END IF;
    IF q.o_config -> 'rate' IS NOT NULL THEN
        UPDATE "docket".queues SET tokens = v_bucket - v_grant,
            refilled_at = greatest(q.o_refilled, q.o_now)
        WHERE name = p_queue;
    END IF;
    RETURN v_grant;
END
$fn$;

CREATE FUNCTION "docket".queue_renew(
    p_queue text, p_holders bytea[], p_ttl interval, p_now timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    q record;
    v_renewed bigint;
BEGIN
    SELECT * INTO q FROM "docket".queue_open(p_queue, '{}', '{}', p_now, NULL);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE "docket".queue_slots s SET expires_at = q.o_now + p_ttl
    WHERE s.queue = p_queue AND s.holder = ANY(p_holders);
    GET DIAGNOSTICS v_renewed = ROW_COUNT;
    RETURN v_renewed;
END
$fn$;

CREATE FUNCTION "docket".queue_release(
    p_queue text, p_holders bytea[], p_refund boolean, p_now timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    q record;
    v_bucket float8;
BEGIN
    SELECT * INTO q FROM "docket".queue_open(p_queue, p_holders, '{}', p_now, NULL);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF p_refund AND q.o_released > 0 AND q.o_config -> 'rate' IS NOT NULL THEN
        v_bucket := "docket".queue_bucket(q.o_config, q.o_tokens, q.o_refilled, q.o_now);
        UPDATE "docket".queues SET
            tokens = least((q.o_config -> 'rate' ->> 'count')::float8,
                           v_bucket + q.o_released),
            refilled_at = greatest(q.o_refilled, q.o_now)
        WHERE name = p_queue;
    END IF;
    RETURN q.o_released;
END
$fn$;

CREATE FUNCTION "docket".claim_with_slots(
    p_queue text, p_holders bytea[], p_release bytea[], p_ttl interval,
    p_max_attempts integer, p_preference text, p_now timestamptz, p_fair boolean,
    p_default text)
RETURNS TABLE (
    o_tenant text, o_run_id text, o_graph_id text, o_graph_hash text,
    o_checkpoint_seq bigint, o_token text, o_attempts integer, o_poisoned boolean,
    o_now timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
    q record;
    v_bucket float8;
    v_grant bigint;
    v_taken bigint := 0;
    v_rows bigint := 0;
BEGIN
    SELECT * INTO q
    FROM "docket".queue_open(p_queue, p_release, p_holders, p_now, p_default);
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_bucket := "docket".queue_bucket(q.o_config, q.o_tokens, q.o_refilled, q.o_now);
    v_grant := "docket".queue_grant(q.o_config, q.o_live, v_bucket, cardinality(q.o_fresh));
    IF v_grant > 0 THEN
        FOR o_tenant, o_run_id, o_graph_id, o_graph_hash, o_checkpoint_seq, o_token,
            o_attempts, o_poisoned, o_now IN
            SELECT * FROM "docket".claim_due(v_grant::integer, p_ttl, p_max_attempts,
                                             p_preference, p_now, p_fair, ARRAY[p_queue])
        LOOP
            v_rows := v_rows + 1;
            IF NOT o_poisoned THEN
                v_taken := v_taken + 1;
            END IF;
            RETURN NEXT;
        END LOOP;
        IF v_rows = 0 THEN
            o_now := q.o_now;
            RETURN NEXT;
        END IF;
    END IF;
    IF v_taken > 0 THEN
        INSERT INTO "docket".queue_slots (queue, holder, expires_at)
        SELECT p_queue, h.holder, q.o_now + p_ttl
        FROM unnest(q.o_fresh) WITH ORDINALITY AS h(holder, i) WHERE h.i <= v_taken;
    END IF;
    IF q.o_config -> 'rate' IS NOT NULL THEN
        UPDATE "docket".queues SET tokens = v_bucket - v_taken,
            refilled_at = greatest(q.o_refilled, q.o_now)
        WHERE name = p_queue;
    END IF;
    RETURN;
END
$fn$;

INSERT INTO "docket".meta (key, value) VALUES ('schema_version', '11') ON CONFLICT (key) DO UPDATE SET value = excluded.value;
