"""Schema version 8: the live feed (``Feature.STREAMS``): commit notices and who listens."""

from __future__ import annotations

from typing import Final

#: The NOTIFY channel of the feed; payloads start with the schema name and a space.
FEED_CHANNEL: Final = "docket_feed"
#: Past this many bytes a notice names no run (ids are bounded well below it; the
#: server refuses a payload of 8000 bytes, which would abort the commit).
NOTICE_BYTES_MAX: Final = 7000

# Version 8, the live feed. A commit notice is a NOTIFY sent by a trigger on ``runs``
# inside the transition's own transaction: PostgreSQL delivers it only when that
# transaction commits, so a notice never precedes a readable commit, a refused write
# (which changes no ``runs`` row) sends none, and the functions' bodies stay as they are.
# Inserting a run is an initialize; an update that moves ``event_seq`` or
# ``checkpoint_seq`` is a commit, whichever function (alone, grouped, chained) made it.
#
# A transaction that NOTIFYs takes a database-wide lock at commit, so notices are sent
# only while someone listens: ``feed_listeners`` has one row per listening session,
# whose ``key`` that session holds as a session advisory lock. A row whose lock nobody
# holds is stale (its session is gone) and the next listener to register deletes it.
# The trigger's ``EXISTS`` holds an ACCESS SHARE lock on the table until its commit; a
# new listener takes ACCESS EXCLUSIVE once after registering, so every commit that
# looked before the row existed has finished when its subscription is handed out.
FEED: Final[tuple[str, ...]] = (
    """CREATE TABLE @schema@.feed_listeners (
    key   bigint      PRIMARY KEY,
    since timestamptz NOT NULL DEFAULT clock_timestamp()
)""",
    f"""CREATE FUNCTION @schema@.feed_notice() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_payload text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM @schema@.feed_listeners) THEN
        RETURN NULL;
    END IF;
    v_payload := json_build_object(
        'k', 'notice',
        'tenant_id', nullif(NEW.tenant, ''),
        'run_id', NEW.run_id,
        'graph_id', NEW.graph_id,
        'first_seq', CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE OLD.event_seq + 1 END,
        'last_seq', NEW.event_seq)::text;
    IF octet_length(v_payload) > {NOTICE_BYTES_MAX} THEN
        v_payload := '{{"k":"notice","tenant_id":null,"run_id":null}}';
    END IF;
    PERFORM pg_notify('{FEED_CHANNEL}', '@name@ ' || v_payload);
    RETURN NULL;
END
$$""",
    """CREATE TRIGGER runs_feed_initialized AFTER INSERT ON @schema@.runs
FOR EACH ROW EXECUTE FUNCTION @schema@.feed_notice()""",
    """CREATE TRIGGER runs_feed_committed
AFTER UPDATE OF event_seq, checkpoint_seq ON @schema@.runs FOR EACH ROW
WHEN (OLD.event_seq IS DISTINCT FROM NEW.event_seq
      OR OLD.checkpoint_seq IS DISTINCT FROM NEW.checkpoint_seq)
EXECUTE FUNCTION @schema@.feed_notice()""",
)

V8: Final[tuple[str, ...]] = FEED
