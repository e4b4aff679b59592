"""Schema version 9: named queues (``Feature.QUEUES``): a run's queue and priority, claims
that filter by queue and take higher priorities first, and the queue ledger's tables."""

from __future__ import annotations

from typing import Final

from docket_postgres._schema.v5 import V5, rewritten
from docket_postgres._schema.v6 import CLAIM_DUE_ARGS, INDEX_PROBES

# Version 9, named queues. A run names its queue and priority when it starts; both are
# kept in ``runs`` (what ``inspect_run`` reports, finished runs included) and copied to
# ``live`` (what claims read), and no commit changes them. Rows of older versions get
# the defaults ('default', 0) without a table rewrite.
#
# A claim takes priority DESC first, then the order it always had. Priorities are few,
# so the ready indexes lead with ``priority`` and a claim walks the priorities that have
# ready runs from the top, one index probe per step (``_level_below``), reading each
# level exactly as version 7 read the whole index. With every run at priority 0 that is
# one probe more than before, and one more when the level runs out before the limit.
# A claim for named queues (``p_queues``) probes ``live_due_by_queue`` once per queue
# per step; the fair policy filters its tenant walk by queue instead. Expired claims
# are rare, so their stream reads the expired range of ``live_claimed`` and sorts it.
#
# The plain start functions stay as they were (their runs get the defaults), so a start
# in the default queue at priority 0 sends what it always sent; ``initialize_queued_run``
# and ``initialize_queued_runs`` take the queue and the priority after the claim token.
_READY: Final = "poisoned_at IS NULL AND claim_token IS NULL AND wake_at IS NOT NULL"

_V5_INITIALIZE_RUN: Final = next(f for f in V5 if "CREATE FUNCTION @schema@.initialize_run(" in f)
_V5_INITIALIZE_RUNS: Final = next(f for f in V5 if "CREATE FUNCTION @schema@.initialize_runs(" in f)

_INITIALIZE_QUEUED_RUN: Final = rewritten(
    _V5_INITIALIZE_RUN,
    (
        (
            "CREATE FUNCTION @schema@.initialize_run(",
            "CREATE FUNCTION @schema@.initialize_queued_run(",
        ),
        (
            "p_wake_at timestamptz, p_token text,\n",
            "p_wake_at timestamptz, p_token text,\n    p_queue text, p_priority integer,\n",
        ),
        (
            "started_at, updated_at, finished_at, run_json, latest_checkpoint_type)\n",
            "started_at, updated_at, finished_at, run_json, latest_checkpoint_type,\n"
            "        queue, priority)\n",
        ),
        (
            "        p_checkpoint_type)\n",
            "        p_checkpoint_type, p_queue, p_priority)\n",
        ),
        (
            "        tenant, run_id, status, wake_at, claim_token, claimed_at, claim_attempts)\n"
            "    VALUES (p_tenant, p_run_id, p_status,\n",
            "        tenant, run_id, status, wake_at, claim_token, claimed_at, claim_attempts,\n"
            "        queue, priority)\n"
            "    VALUES (p_tenant, p_run_id, p_status,\n",
        ),
        (
            "            CASE WHEN p_token IS NULL THEN 0 ELSE 1 END);",
            "            CASE WHEN p_token IS NULL THEN 0 ELSE 1 END, p_queue, p_priority);",
        ),
    ),
)

_INITIALIZE_QUEUED_RUNS: Final = rewritten(
    _V5_INITIALIZE_RUNS,
    (
        (
            "CREATE FUNCTION @schema@.initialize_runs(",
            "CREATE FUNCTION @schema@.initialize_queued_runs(",
        ),
        (
            "p_wake_ats timestamptz[], p_tokens text[],\n",
            "p_wake_ats timestamptz[], p_tokens text[],\n"
            "    p_queues text[], p_priorities integer[],\n",
        ),
        (
            "                latest_checkpoint_type)\n",
            "                latest_checkpoint_type, queue, priority)\n",
        ),
        (
            "                   p_run_jsons[b.i], p_checkpoint_types[b.i]\n",
            "                   p_run_jsons[b.i], p_checkpoint_types[b.i], p_queues[b.i],\n"
            "                   p_priorities[b.i]\n",
        ),
        (
            "claimed_at, claim_attempts)\n        SELECT",
            "claimed_at, claim_attempts,\n            queue, priority)\n        SELECT",
        ),
        (
            "               CASE WHEN p_tokens[b.i] IS NULL THEN 0 ELSE 1 END\n",
            "               CASE WHEN p_tokens[b.i] IS NULL THEN 0 ELSE 1 END,\n"
            "               p_queues[b.i], p_priorities[b.i]\n",
        ),
        (
            "FROM @schema@.initialize_run(",
            "FROM @schema@.initialize_queued_run(",
        ),
        (
            "            p_checkpoint_types[i], p_wake_ats[i], p_tokens[i], p_now,",
            "            p_checkpoint_types[i], p_wake_ats[i], p_tokens[i],\n"
            "            p_queues[i], p_priorities[i], p_now,",
        ),
    ),
)
INITIALIZE_QUEUED_RUNS_ARGS: Final = (
    "text[], text[], text[], text[], text[], text[], text[], bigint[], bigint[], bigint[], "
    "timestamptz[], timestamptz[], timestamptz[], bytea[], text[], timestamptz[], text[], "
    "text[], integer[], timestamptz, integer[], bigint[], bytea[], bytea[], integer[], "
    "boolean[], integer[]"
)


def _level_below(below: str) -> str:
    """The highest priority below ``below`` at which a run is ready (a wake, unclaimed,
    healthy) in the queues served (``v_queues``, NULL: every queue), or NULL: one probe
    of ``live_due`` (of ``live_due_by_queue`` per queue named). Inlined where it is used:
    a call of a helper function costs more than the probe."""
    return f"""CASE WHEN v_queues IS NULL THEN (
                SELECT r.priority FROM @schema@.live r
                WHERE r.poisoned_at IS NULL AND r.claim_token IS NULL
                  AND r.wake_at IS NOT NULL AND r.priority < {below}
                ORDER BY r.priority DESC LIMIT 1)
            ELSE (
                SELECT max(x.priority) FROM unnest(v_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT r.priority FROM @schema@.live r
                    WHERE r.queue = q.name AND r.poisoned_at IS NULL
                      AND r.claim_token IS NULL AND r.wake_at IS NOT NULL
                      AND r.priority < {below}
                    ORDER BY r.priority DESC LIMIT 1) x) END"""


def _levels(below: str) -> str:
    """``lv(p)``: the levels with ready runs below ``below``, highest first, then one NULL;
    walked lazily, so a statement that stops early probes only the levels it read."""
    return f"""WITH RECURSIVE lv(p) AS (
                    SELECT {_level_below(below)}
                    UNION ALL
                    SELECT {_level_below("lv.p")}
                    FROM lv WHERE lv.p IS NOT NULL)"""


_CLAIM_DUE_V9_ARGS: Final = f"{CLAIM_DUE_ARGS}, text[]"

# Version 7's claim, level by level (see above). Within one level every statement is the
# one version 7 ran, with ``priority = level`` (and the queue) added to its conditions.
CLAIM_DUE = """CREATE FUNCTION @schema@.claim_due(
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
            SELECT 1 FROM @schema@.live r
            WHERE r.poisoned_at IS NULL
              AND r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff
              AND (v_queues IS NULL OR r.queue = ANY(v_queues))) THEN
        -- no expired claim: the first ready runs no one holds, highest level first, in
        -- the general order within a level (the levels walked lazily, as rows are taken)
        IF v_one IS NULL THEN
            FOR f IN
                @levels(32767)@
                SELECT x.tenant, x.run_id, x.wake_at, x.claim_attempts, x.priority
                FROM lv CROSS JOIN LATERAL (
                    SELECT r.tenant, r.run_id, r.wake_at, r.claim_attempts, r.priority
                    FROM @schema@.live r
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
                @levels(32767)@
                SELECT x.tenant, x.run_id, x.wake_at, x.claim_attempts, x.priority
                FROM lv CROSS JOIN LATERAL (
                    SELECT r.tenant, r.run_id, r.wake_at, r.claim_attempts, r.priority
                    FROM @schema@.live r
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
                @levels(r_level + 1)@
                SELECT x.priority, x.wake_at, x.run_id, x.tenant
                INTO v_prio, r_at, r_id, r_tenant
                FROM lv CROSS JOIN LATERAL (
                    SELECT r.priority, r.wake_at, r.run_id, r.tenant FROM @schema@.live r
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
                    r_level := @level(32767)@;
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
                                (SELECT r.tenant FROM @schema@.live r
                                 WHERE r.priority = r_level AND r.wake_at IS NOT NULL
                                   AND r.poisoned_at IS NULL AND r.claim_token IS NULL
                                   AND (v_queues IS NULL OR r.queue = ANY(v_queues))
                                 ORDER BY r.tenant LIMIT 1)
                                UNION ALL
                                SELECT (SELECT r.tenant FROM @schema@.live r
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
                                SELECT 1 FROM @schema@.live r
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
                            SELECT r.wake_at, r.run_id INTO r_at, r_id FROM @schema@.live r
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
                            SELECT r.wake_at, r.run_id, r.tenant FROM @schema@.live r
                            WHERE r.queue = q.name AND r.priority = r_level
                              AND r.poisoned_at IS NULL
                              AND r.claim_token IS NULL AND r.wake_at <= v_now
                              AND (r.wake_at, r.run_id, r.tenant) > (rc_at, rc_id, rc_tenant)
                            ORDER BY r.wake_at, r.run_id, r.tenant LIMIT 1) x
                        ORDER BY x.wake_at, x.run_id, x.tenant LIMIT 1;
                        r_has := FOUND;
                    END IF;
                    EXIT WHEN r_has;
                    r_level := @level(r_level)@;
                    rc_at := '-infinity'; rc_id := ''; rc_tenant := '';
                    f_n := NULL;
                END LOOP;
            END IF;
            IF NOT e_has AND NOT e_end THEN
                SELECT r.priority, r.claimed_at, r.run_id, r.tenant
                INTO e_prio, e_at, e_id, e_tenant
                FROM @schema@.live r
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
                SELECT r.claim_attempts INTO v_attempts FROM @schema@.live r
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
                SELECT r.claim_attempts INTO v_attempts FROM @schema@.live r
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
            INTO v_attempts, v_prio, v_at FROM @schema@.live r
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
                   SELECT 1 FROM @schema@.live r
                   WHERE r.poisoned_at IS NULL
                     AND r.claim_token IS NOT NULL AND r.claimed_at < v_cutoff
                     AND (v_queues IS NULL OR r.queue = ANY(v_queues)))
               OR EXISTS (
                   @levels(32767)@
                   SELECT 1 FROM lv WHERE CASE WHEN v_queues IS NULL THEN EXISTS (
                           SELECT 1 FROM @schema@.live r
                           WHERE r.priority = lv.p AND r.poisoned_at IS NULL
                             AND r.claim_token IS NULL AND r.wake_at <= v_now)
                       ELSE EXISTS (
                           SELECT 1 FROM @schema@.live r
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
                  l.poisoned_at IS NOT NULL AS poisoned, ch.at, ch.prio, ch.ord
    )
    SELECT d.tenant::text, d.run_id::text, r.graph_id::text, r.graph_hash::text,
           r.checkpoint_seq, d.claim_token::text, d.claim_attempts, d.poisoned, v_now
    FROM done d
    JOIN @schema@.runs r ON r.tenant = d.tenant AND r.run_id = d.run_id
    ORDER BY CASE WHEN p_fair THEN d.ord ELSE 0 END, -d.prio, d.at, d.run_id, d.tenant;
END
$fn$"""
for _below in ("32767", "r_level"):
    CLAIM_DUE = CLAIM_DUE.replace(f"@level({_below})@", _level_below(_below))
for _below in ("32767", "r_level + 1"):
    CLAIM_DUE = CLAIM_DUE.replace(f"@levels({_below})@", _levels(_below))
assert "@level" not in CLAIM_DUE

# The queue ledger (``backend.queues``): one row per configured queue ('default' is
# created on demand) with its config (``queue_config_to_json``) and rate bucket, and one
# row per held slot. Every operation locks the queue's row first (``FOR UPDATE``), so
# the operations on one queue are serial, and applies
# :class:`docket.contract.queues.SlotLedger` in Python. A holder id is any string, NUL
# included, so it is stored as its UTF-8 bytes.
QUEUES: Final[tuple[str, ...]] = (
    """CREATE TABLE @schema@.queues (
    name        text COLLATE "C" PRIMARY KEY,
    config      text             NOT NULL,
    tokens      double precision NOT NULL,
    refilled_at timestamptz      NOT NULL
)""",
    """CREATE TABLE @schema@.queue_slots (
    queue      text COLLATE "C" NOT NULL
               REFERENCES @schema@.queues (name) ON DELETE CASCADE,
    holder     bytea       NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, holder)
)""",
)

V9: Final[tuple[str, ...]] = (
    """ALTER TABLE @schema@.runs
    ADD COLUMN queue text COLLATE "C" NOT NULL DEFAULT 'default',
    ADD COLUMN priority smallint NOT NULL DEFAULT 0""",
    """ALTER TABLE @schema@.live
    ADD COLUMN queue text COLLATE "C" NOT NULL DEFAULT 'default',
    ADD COLUMN priority smallint NOT NULL DEFAULT 0""",
    "DROP INDEX @schema@.live_due",
    "DROP INDEX @schema@.live_due_by_tenant",
    f"""CREATE INDEX live_due ON @schema@.live (priority, wake_at, run_id, tenant)
    WHERE {_READY}""",
    f"""CREATE INDEX live_due_by_tenant ON @schema@.live (priority, tenant, wake_at, run_id)
    WHERE {_READY}""",
    f"""CREATE INDEX live_due_by_queue ON @schema@.live (queue, priority, wake_at, run_id, tenant)
    WHERE {_READY}""",
    _INITIALIZE_QUEUED_RUN,
    _INITIALIZE_QUEUED_RUNS,
    f"ALTER FUNCTION @schema@.initialize_queued_runs({INITIALIZE_QUEUED_RUNS_ARGS}) {INDEX_PROBES}",
    f"DROP FUNCTION @schema@.claim_due({CLAIM_DUE_ARGS})",
    CLAIM_DUE,
    f"ALTER FUNCTION @schema@.claim_due({_CLAIM_DUE_V9_ARGS}) {INDEX_PROBES} "
    "SET plan_cache_mode = force_generic_plan ROWS 16",
    *QUEUES,
)
