"""Schema version 10 ("v10 admission"): the admission ledger (``Feature.ADMISSION``) — a
cap on a queue's unfinished runs, and per tenant within it."""

from __future__ import annotations

from typing import Final

# Version 10, admission. One row per start the ledger keeps, held (waiting) or admitted
# (counted until its run finishes), keyed like the slot ledger by queue; ``seq`` comes
# from the queue row's ``admission_seq`` (the last one handed out), so it increases per
# queue. A run id and a tenant are any strings (NUL included), so both are stored as
# their UTF-8 bytes; the tenant of a tenantless start is empty bytes (a tenant id is never
# empty), which keeps ``tenant = $1`` indexable.
#
# Each operation is one function called as one statement: it locks the queue's row
# (``FOR UPDATE``, the lock ``set_queue`` and the slot ledger take), so the operations on
# one queue are serial across processes, then applies the rules of
# :mod:`docket.contract.admission` in SQL. Limits are read from the config JSON the queue
# row keeps (``queue_config_to_json`` writes them only when set). Times are the server's
# (``clock_timestamp()`` read after the lock) unless the caller passes ``p_now``.
ADMISSIONS: Final[tuple[str, ...]] = (
    "ALTER TABLE @schema@.queues ADD COLUMN admission_seq bigint NOT NULL DEFAULT 0",
    """CREATE TABLE @schema@.queue_admissions (
    queue    text COLLATE "C" NOT NULL
             REFERENCES @schema@.queues (name) ON DELETE CASCADE,
    run_id   bytea       NOT NULL,
    tenant   bytea       NOT NULL,
    priority smallint    NOT NULL,
    seq      bigint      NOT NULL,
    start    bytea       NOT NULL,
    at       timestamptz NOT NULL,
    held     boolean     NOT NULL,
    PRIMARY KEY (queue, run_id)
)""",
    # promotion order: priority DESC, then seq (FIFO)
    """CREATE INDEX queue_admissions_held ON @schema@.queue_admissions
    (queue, priority DESC, seq) WHERE held""",
    # the admitted count, and the view's order
    """CREATE INDEX queue_admissions_admitted ON @schema@.queue_admissions (queue, seq)
    WHERE NOT held""",
    # a tenant's admitted count and whether it has a held start
    """CREATE INDEX queue_admissions_tenant ON @schema@.queue_admissions
    (queue, tenant, held)""",
    # held_start: a run id in any queue
    "CREATE INDEX queue_admissions_run ON @schema@.queue_admissions (run_id, tenant)",
    # 'admitted' or 'held' (a known run id answers its state, changing nothing), or NULL
    # for an unknown queue; ``p_default``: the config to create the queue with if missing
    # ('default' only)
    """CREATE FUNCTION @schema@.admission_admit(
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
        INSERT INTO @schema@.queues (name, config, tokens, refilled_at)
        VALUES (p_queue, p_default, 0, coalesce(p_now, clock_timestamp()))
        ON CONFLICT DO NOTHING;
    END IF;
    SELECT q.config::jsonb, q.admission_seq INTO v_config, v_seq
    FROM @schema@.queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    SELECT a.held INTO v_held FROM @schema@.queue_admissions a
    WHERE a.queue = p_queue AND a.run_id = p_run_id;
    IF FOUND THEN
        RETURN CASE WHEN v_held THEN 'held' ELSE 'admitted' END;
    END IF;
    v_limit := (v_config ->> 'admission_limit')::bigint;
    v_tenant_limit := (v_config ->> 'tenant_admission_limit')::bigint;
    -- a new start never overtakes its own tenant's held starts
    v_held := EXISTS (SELECT 1 FROM @schema@.queue_admissions a
                      WHERE a.queue = p_queue AND a.tenant = p_tenant AND a.held);
    IF NOT v_held AND v_limit IS NOT NULL THEN
        v_held := (SELECT count(*) FROM (
                       SELECT 1 FROM @schema@.queue_admissions a
                       WHERE a.queue = p_queue AND NOT a.held LIMIT v_limit) c) >= v_limit;
    END IF;
    IF NOT v_held AND v_tenant_limit IS NOT NULL THEN
        v_held := (SELECT count(*) FROM (
                       SELECT 1 FROM @schema@.queue_admissions a
                       WHERE a.queue = p_queue AND a.tenant = p_tenant AND NOT a.held
                       LIMIT v_tenant_limit) c) >= v_tenant_limit;
    END IF;
    UPDATE @schema@.queues SET admission_seq = v_seq + 1 WHERE name = p_queue;
    INSERT INTO @schema@.queue_admissions
        (queue, run_id, tenant, priority, seq, start, at, held)
    VALUES (p_queue, p_run_id, p_tenant, p_priority, v_seq + 1, p_start, v_now, v_held);
    RETURN CASE WHEN v_held THEN 'held' ELSE 'admitted' END;
END
$fn$""",
    # Forget the admitted ones of ``p_run_ids``, then promote held starts: walk them in
    # promotion order, skip a tenant at its cap (it stays at its cap for the rest of the
    # walk, so it is remembered and not counted again), stop when the queue is at its
    # cap. Answers the promoted starts in promotion order; none for an unknown queue.
    """CREATE FUNCTION @schema@.admission_finish(
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
    FROM @schema@.queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    IF cardinality(p_run_ids) > 0 THEN
        DELETE FROM @schema@.queue_admissions a
        WHERE a.queue = p_queue AND NOT a.held AND a.run_id = ANY(p_run_ids);
    END IF;
    v_limit := (v_config ->> 'admission_limit')::bigint;
    v_tenant_limit := (v_config ->> 'tenant_admission_limit')::bigint;
    SELECT count(*) INTO v_admitted FROM @schema@.queue_admissions a
    WHERE a.queue = p_queue AND NOT a.held;
    FOR r IN SELECT a.run_id, a.tenant FROM @schema@.queue_admissions a
             WHERE a.queue = p_queue AND a.held ORDER BY a.priority DESC, a.seq LOOP
        EXIT WHEN v_limit IS NOT NULL AND v_admitted >= v_limit;
        CONTINUE WHEN r.tenant = ANY(v_full);
        IF v_tenant_limit IS NOT NULL AND (
                SELECT count(*) FROM (
                    SELECT 1 FROM @schema@.queue_admissions a
                    WHERE a.queue = p_queue AND a.tenant = r.tenant AND NOT a.held
                    LIMIT v_tenant_limit) c) >= v_tenant_limit THEN
            v_full := v_full || r.tenant;
            CONTINUE;
        END IF;
        RETURN QUERY
            UPDATE @schema@.queue_admissions a SET held = false, at = v_now
            WHERE a.queue = p_queue AND a.run_id = r.run_id
            RETURNING a.run_id, a.tenant, a.priority, a.seq, a.start, a.at;
        v_admitted := v_admitted + 1;
    END LOOP;
END
$fn$""",
    # Remove a held start, answering it (no row: the queue holds no such start).
    """CREATE FUNCTION @schema@.admission_drop(p_queue text, p_run_id bytea)
RETURNS TABLE (o_run_id bytea, o_tenant bytea, o_priority smallint, o_seq bigint,
               o_start bytea, o_at timestamptz)
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM 1 FROM @schema@.queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
        DELETE FROM @schema@.queue_admissions a
        WHERE a.queue = p_queue AND a.run_id = p_run_id AND a.held
        RETURNING a.run_id, a.tenant, a.priority, a.seq, a.start, a.at;
END
$fn$""",
)

V10: Final[tuple[str, ...]] = ADMISSIONS
