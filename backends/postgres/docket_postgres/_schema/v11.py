"""Schema version 11 ("v11 fused claim"): a limited queue's whole claim round as one
function, so it costs one round trip instead of five (issue #25)."""

from __future__ import annotations

from typing import Final

# ``claim_with_slots`` is ``SlotClaims.claim_with_slots`` in one statement. Until version
# 10 the backend did it in one transaction of four statements: the row lock and the slot
# read, the ledger's rules in Python, then the write-back and ``claim_due``. Here the rules
# of ``docket.contract.queues`` (``SlotLedger.release``, ``acquire`` and the refund of the
# holders the claim left unused) are written in SQL, and the contract kit's QUEUE-FUSED
# case and ``test_postgres_queue_claims.py`` hold them to the Python ledger's answers.
#
# Order of work, under the queue row's lock (the lock every ledger operation takes):
#   1. ``p_default`` (the default queue's config, for 'default' only) creates a missing
#      row, as ``acquire_slots`` does; another missing queue answers no rows;
#   2. the released holders and the expired slots (``expires_at < now``) are deleted;
#   3. the bucket refills (a clock that went back refills nothing; never above its size);
#   4. the grant: ``grant(config, live, tokens, len(fresh))``, ``fresh`` being the asked
#      holders not held now, in the order asked;
#   5. nothing granted: the bucket is written back if it changed, and no rows answer;
#   6. else ``claim_due`` for at most the grant, in the queue only; a slot until
#      ``now + p_ttl`` for the i-th fresh holder per healthy lease (a poisoned entry
#      holds none); their tokens taken (the rest of the grant as if refunded). A grant
#      that claimed nothing answers one row of NULLs but ``o_now``, so the caller can
#      tell "granted, nothing due" (an empty batch) from "nothing granted" (no rows).
#
# ``now`` is ``p_now``, or ``clock_timestamp()`` read after the lock; ``claim_due`` gets
# ``p_now`` as given, as the separate calls did.
FUSED_CLAIM: Final[tuple[str, ...]] = (
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
    v_config jsonb;
    v_tokens float8;
    v_refilled timestamptz;
    v_now timestamptz;
    v_count float8;
    v_elapsed float8;
    v_bucket float8;
    v_limit bigint;
    v_live bigint;
    v_fresh bytea[];
    v_grant bigint;
    v_taken bigint;
    v_rows bigint;
BEGIN
    IF p_default IS NOT NULL THEN
        INSERT INTO @schema@.queues (name, config, tokens, refilled_at)
        VALUES (p_queue, p_default, 0, coalesce(p_now, clock_timestamp()))
        ON CONFLICT DO NOTHING;
    END IF;
    SELECT q.config::jsonb, q.tokens, q.refilled_at INTO v_config, v_tokens, v_refilled
    FROM @schema@.queues q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_now := coalesce(p_now, clock_timestamp());
    DELETE FROM @schema@.queue_slots s
    WHERE s.queue = p_queue AND (s.expires_at < v_now OR s.holder = ANY(p_release));
    SELECT count(*) INTO v_live FROM @schema@.queue_slots s WHERE s.queue = p_queue;
    SELECT coalesce(array_agg(h.holder ORDER BY h.i), '{}') INTO v_fresh
    FROM unnest(p_holders) WITH ORDINALITY AS h(holder, i)
    WHERE NOT EXISTS (SELECT 1 FROM @schema@.queue_slots s
                      WHERE s.queue = p_queue AND s.holder = h.holder);
    v_count := (v_config -> 'rate' ->> 'count')::float8;
    v_bucket := v_tokens;
    IF v_count IS NOT NULL THEN
        v_elapsed := extract(epoch FROM (v_now - v_refilled))::float8;
        IF v_elapsed <= 0 THEN
            v_bucket := least(v_count, v_tokens);
        ELSE
            v_bucket := least(v_count, v_tokens + v_elapsed * (
                v_count / ((v_config -> 'rate' ->> 'period_ms')::float8 / 1000.0)));
        END IF;
    END IF;
    v_grant := cardinality(v_fresh);
    IF coalesce((v_config ->> 'paused')::boolean, false) THEN
        v_grant := 0;
    END IF;
    v_limit := (v_config ->> 'execution_limit')::bigint;
    IF v_limit IS NOT NULL THEN
        v_grant := least(v_grant, v_limit - v_live);
    END IF;
    IF v_count IS NOT NULL THEN
        v_grant := least(v_grant, floor(v_bucket + 1e-9)::bigint);
    END IF;
    IF v_grant <= 0 THEN
        IF v_count IS NOT NULL AND (v_bucket, greatest(v_refilled, v_now))
                IS DISTINCT FROM (v_tokens, v_refilled) THEN
            UPDATE @schema@.queues SET tokens = v_bucket,
                refilled_at = greatest(v_refilled, v_now)
            WHERE name = p_queue;
        END IF;
        RETURN;
    END IF;
    v_rows := 0;
    v_taken := 0;
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
        o_now := v_now;
        RETURN NEXT;
    END IF;
    IF v_taken > 0 THEN
        INSERT INTO @schema@.queue_slots (queue, holder, expires_at)
        SELECT p_queue, h.holder, v_now + p_ttl
        FROM unnest(v_fresh) WITH ORDINALITY AS h(holder, i) WHERE h.i <= v_taken
        ON CONFLICT (queue, holder) DO UPDATE SET expires_at = excluded.expires_at;
    END IF;
    IF v_count IS NOT NULL THEN
        UPDATE @schema@.queues SET tokens = v_bucket - v_taken,
            refilled_at = greatest(v_refilled, v_now)
        WHERE name = p_queue;
    END IF;
    RETURN;
END
$fn$""",
)

V11: Final[tuple[str, ...]] = FUSED_CLAIM
