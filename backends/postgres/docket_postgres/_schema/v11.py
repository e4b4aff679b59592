"""Schema version 11 ("v11 ledger functions"): the slot ledger's operations and the fused
claim as functions, each one round trip (issue #25)."""

from __future__ import annotations

from typing import Final

# Until version 10 every slot-ledger operation was one transaction of several statements
# (the row lock and the slot read, the rules of ``docket.contract.queues`` applied in
# Python, the write-back): about five round trips, with the queue's row lock held across
# all of them, so concurrent operations on one queue queued behind each other's round
# trips. Here the same rules are written in SQL and each operation is one statement; the
# lock is held for the statement only. The contract kit (QUEUE-* cases) and
# ``test_postgres_queue_claims.py`` hold them to ``SlotLedger``'s answers.
#
# Every operation takes the queue row's lock first (``FOR UPDATE``: the lock
# ``set_queue`` and the admission functions take), so the operations on one queue are
# serial across processes. ``now`` is ``p_now``, or ``clock_timestamp()`` read after
# the lock. Each statement in a function takes a fresh snapshot, so the slots are read
# after the lock is granted, never from a snapshot that predates a slot another holder
# just committed.
LEDGER: Final[tuple[str, ...]] = (
    # The bucket's tokens at p_now (``docket.contract.queues.refill``): unchanged without
    # a rate; a clock that went back refills nothing; never above its size.
    """CREATE FUNCTION @schema@.queue_bucket(
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
$fn$""",
    # How many of p_want slots the queue grants (``docket.contract.queues.grant``).
    """CREATE FUNCTION @schema@.queue_grant(
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
$fn$""",
    # The first step of every operation: ``p_default`` (the default queue's config, for
    # 'default' only) creates a missing row; the row's lock; the expired slots deleted,
    # then ``p_release``'s (``o_released``: how many of them were held); the slots still
    # held (``o_live``); which of ``p_holders`` are not held (``o_fresh``, in order). No
    # row: no such queue.
    """CREATE FUNCTION @schema@.queue_open(
    p_queue text, p_release bytea[], p_holders bytea[], p_now timestamptz, p_default text)
RETURNS TABLE (o_config jsonb, o_tokens float8, o_refilled timestamptz, o_now timestamptz,
               o_released bigint, o_live bigint, o_fresh bytea[])
LANGUAGE plpgsql AS $fn$
BEGIN
    IF p_default IS NOT NULL THEN
        INSERT INTO @schema@.queues (name, config, tokens, refilled_at)
        VALUES (p_queue, p_default, 0, coalesce(p_now, clock_timestamp()))
        ON CONFLICT DO NOTHING;
    END IF;
    SELECT q.config::jsonb, q.tokens, q.refilled_at INTO o_config, o_tokens, o_refilled
    FROM @schema@.queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    o_now := coalesce(p_now, clock_timestamp());
    DELETE FROM @schema@.queue_slots s WHERE s.queue = p_queue AND s.expires_at < o_now;
    o_released := 0;
    IF cardinality(p_release) > 0 THEN
        DELETE FROM @schema@.queue_slots s
        WHERE s.queue = p_queue AND s.holder = ANY(p_release);
        GET DIAGNOSTICS o_released = ROW_COUNT;
    END IF;
    SELECT count(*) INTO o_live FROM @schema@.queue_slots s WHERE s.queue = p_queue;
    SELECT coalesce(array_agg(h.holder ORDER BY h.i), '{}') INTO o_fresh
    FROM unnest(p_holders) WITH ORDINALITY AS h(holder, i)
    WHERE NOT EXISTS (SELECT 1 FROM @schema@.queue_slots s
                      WHERE s.queue = p_queue AND s.holder = h.holder);
    RETURN NEXT;
END
$fn$""",
    # acquire_slots: the grant of the fresh holders, each held until now + p_ttl, a token
    # each taken; NULL for no such queue.
    """CREATE FUNCTION @schema@.queue_acquire(
    p_queue text, p_holders bytea[], p_ttl interval, p_now timestamptz, p_default text)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    q record;
    v_bucket float8;
    v_grant bigint;
BEGIN
    SELECT * INTO q FROM @schema@.queue_open(p_queue, '{}', p_holders, p_now, p_default);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_bucket := @schema@.queue_bucket(q.o_config, q.o_tokens, q.o_refilled, q.o_now);
    v_grant := @schema@.queue_grant(q.o_config, q.o_live, v_bucket, cardinality(q.o_fresh));
    IF v_grant > 0 THEN
        INSERT INTO @schema@.queue_slots (queue, holder, expires_at)
        SELECT p_queue, h.holder, q.o_now + p_ttl
        FROM unnest(q.o_fresh) WITH ORDINALITY AS h(holder, i) WHERE h.i <= v_grant;
    END IF;
    IF q.o_config -> 'rate' IS NOT NULL THEN
        UPDATE @schema@.queues SET tokens = v_bucket - v_grant,
            refilled_at = greatest(q.o_refilled, q.o_now)
        WHERE name = p_queue;
    END IF;
    RETURN v_grant;
END
$fn$""",
    # renew_slots: how many of p_holders are still held, each now until now + p_ttl;
    # NULL for no such queue.
    """CREATE FUNCTION @schema@.queue_renew(
    p_queue text, p_holders bytea[], p_ttl interval, p_now timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    q record;
    v_renewed bigint;
BEGIN
    SELECT * INTO q FROM @schema@.queue_open(p_queue, '{}', '{}', p_now, NULL);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE @schema@.queue_slots s SET expires_at = q.o_now + p_ttl
    WHERE s.queue = p_queue AND s.holder = ANY(p_holders);
    GET DIAGNOSTICS v_renewed = ROW_COUNT;
    RETURN v_renewed;
END
$fn$""",
    # release_slots: frees those of p_holders still held; with p_refund, a rated queue
    # gets their tokens back (never above its size). NULL for no such queue.
    """CREATE FUNCTION @schema@.queue_release(
    p_queue text, p_holders bytea[], p_refund boolean, p_now timestamptz)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
    q record;
    v_bucket float8;
BEGIN
    SELECT * INTO q FROM @schema@.queue_open(p_queue, p_holders, '{}', p_now, NULL);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF p_refund AND q.o_released > 0 AND q.o_config -> 'rate' IS NOT NULL THEN
        v_bucket := @schema@.queue_bucket(q.o_config, q.o_tokens, q.o_refilled, q.o_now);
        UPDATE @schema@.queues SET
            tokens = least((q.o_config -> 'rate' ->> 'count')::float8,
                           v_bucket + q.o_released),
            refilled_at = greatest(q.o_refilled, q.o_now)
        WHERE name = p_queue;
    END IF;
    RETURN q.o_released;
END
$fn$""",
    # claim_with_slots (``SlotClaims``): frees p_release (no refund), grants as
    # queue_acquire would, calls claim_due for at most the grant in this queue only,
    # holds a slot until now + p_ttl for the i-th fresh holder per healthy lease (a
    # poisoned entry holds none) and takes their tokens only (the rest of the grant as if
    # refunded). Answers claim_due's rows in its order; no rows when nothing was granted
    # (or no such queue); one row of NULLs but ``o_now`` for a grant that claimed
    # nothing, so the caller can tell an empty batch from no grant. ``claim_due`` gets
    # ``p_now`` as given, as the separate calls did.
    """CREATE FUNCTION @schema@.claim_with_slots(
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
    FROM @schema@.queue_open(p_queue, p_release, p_holders, p_now, p_default);
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_bucket := @schema@.queue_bucket(q.o_config, q.o_tokens, q.o_refilled, q.o_now);
    v_grant := @schema@.queue_grant(q.o_config, q.o_live, v_bucket, cardinality(q.o_fresh));
    IF v_grant > 0 THEN
        FOR o_tenant, o_run_id, o_graph_id, o_graph_hash, o_checkpoint_seq, o_token,
            o_attempts, o_poisoned, o_now IN
            SELECT * FROM @schema@.claim_due(v_grant::integer, p_ttl, p_max_attempts,
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
        INSERT INTO @schema@.queue_slots (queue, holder, expires_at)
        SELECT p_queue, h.holder, q.o_now + p_ttl
        FROM unnest(q.o_fresh) WITH ORDINALITY AS h(holder, i) WHERE h.i <= v_taken;
    END IF;
    IF q.o_config -> 'rate' IS NOT NULL THEN
        UPDATE @schema@.queues SET tokens = v_bucket - v_taken,
            refilled_at = greatest(q.o_refilled, q.o_now)
        WHERE name = p_queue;
    END IF;
    RETURN;
END
$fn$""",
)

V11: Final[tuple[str, ...]] = LEDGER
