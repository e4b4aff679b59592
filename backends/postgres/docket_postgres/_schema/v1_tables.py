"""Schema version 1: the tables, their indexes, constraints and triggers.

See :mod:`docket_postgres.schema` for the conventions they follow.
"""

from __future__ import annotations

from typing import Final

_READY = "status = 'running' AND poisoned_at IS NULL AND claim_token IS NULL"
_CLAIMED = "status = 'running' AND poisoned_at IS NULL AND claim_token IS NOT NULL"
_TERMINAL = "('done', 'failed', 'cancelled')"

# `@schema@` is replaced by the double-quoted schema name, `@name@` by the bare name
# (as a string literal's content: the name is restricted to [a-z0-9_]).
TABLES: Final[tuple[str, ...]] = (
    """CREATE TABLE @schema@.meta (
    key   text COLLATE "C" PRIMARY KEY,
    value text NOT NULL
)""",
    """CREATE TABLE @schema@.graphs (
    tenant       text COLLATE "C" NOT NULL,
    graph_id     text COLLATE "C" NOT NULL CHECK (graph_id <> ''),
    graph_hash   text COLLATE "C" NOT NULL CHECK (graph_hash <> ''),
    document     bytea       NOT NULL,
    published_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, graph_id, graph_hash)
)""",
    """CREATE INDEX graphs_by_publication
    ON @schema@.graphs (tenant, graph_id, published_at DESC, graph_hash DESC)""",
    # The history-bearing part of a run: identity, document, listing columns. Commits
    # update it without touching an indexed column (HOT updates, with the fill factor's
    # spare room), so its size does not slow the hot path.
    f"""CREATE TABLE @schema@.runs (
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
        REFERENCES @schema@.graphs (tenant, graph_id, graph_hash) ON DELETE RESTRICT,
    CONSTRAINT runs_run_id_check CHECK (run_id <> ''),
    CONSTRAINT runs_status_check
        CHECK (status IN ('running', 'waiting', 'done', 'failed', 'cancelled')),
    CONSTRAINT runs_checkpoint_type_check CHECK (latest_checkpoint_type IN (
        'run_initialized', 'step_committed', 'retry_scheduled', 'interrupt_requested',
        'interrupt_resolved', 'run_completed', 'run_failed', 'run_cancelled')),
    CONSTRAINT runs_finished_at_check
        CHECK ((finished_at IS NOT NULL) = (status IN {_TERMINAL})),
    CONSTRAINT runs_ended_at_check CHECK (ended_at IS NULL OR status IN {_TERMINAL}),
    CONSTRAINT runs_counters_check
        CHECK (step >= 0 AND checkpoint_seq >= 1 AND event_seq >= 0)
) WITH (fillfactor = 80)""",
    # Newest-first listing within one owner (the primary key covers owner lookups).
    """CREATE INDEX runs_by_owner ON @schema@.runs (tenant, started_at DESC, run_id DESC)""",
    # Newest-first listing across owners (System).
    """CREATE INDEX runs_by_start ON @schema@.runs (started_at DESC, run_id DESC)""",
    """CREATE INDEX runs_by_graph
    ON @schema@.runs (tenant, graph_id, graph_hash, started_at DESC, run_id DESC)""",
    # Finished runs by the time they finished: what the pruner reads.
    """CREATE INDEX runs_ended ON @schema@.runs (ended_at) WHERE ended_at IS NOT NULL""",
    # The operational state of the runs that are not finished — one row per running or
    # waiting run, none for a finished one — so claims read and write a table whose size
    # follows the live work, never the history.
    """CREATE TABLE @schema@.live (
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
    FOREIGN KEY (tenant, run_id) REFERENCES @schema@.runs (tenant, run_id) ON DELETE CASCADE,
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
) WITH (fillfactor = 80)""",
    # Due runs, oldest wake first: what a ready claim reads (tenant-blind).
    f"""CREATE INDEX live_due ON @schema@.live (wake_at, run_id, tenant) WHERE {_READY}""",
    # Due runs per tenant: what the fair policy walks.
    f"""CREATE INDEX live_due_by_tenant ON @schema@.live (tenant, wake_at, run_id)
    WHERE {_READY}""",
    # Claimed runs, oldest claim first: what an expired (recovery) claim reads.
    f"""CREATE INDEX live_claimed ON @schema@.live (claimed_at, run_id, tenant)
    WHERE {_CLAIMED}""",
    """CREATE INDEX live_poisoned ON @schema@.live (poisoned_at)
    WHERE poisoned_at IS NOT NULL""",
    """CREATE TABLE @schema@.events (
    tenant         text COLLATE "C" NOT NULL,
    run_id         text COLLATE "C" NOT NULL,
    seq            bigint      NOT NULL CHECK (seq > 0),
    event_json     bytea       NOT NULL,
    content_sha256 bytea       NOT NULL CHECK (length(content_sha256) = 32),
    inserted_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES @schema@.runs (tenant, run_id) ON DELETE CASCADE
)""",
    """CREATE INDEX events_by_age ON @schema@.events (inserted_at)""",
    """CREATE TABLE @schema@.transitions (
    tenant        text COLLATE "C" NOT NULL,
    run_id        text COLLATE "C" NOT NULL,
    transition_id text COLLATE "C" NOT NULL CHECK (transition_id <> ''),
    digest        text NOT NULL CHECK (digest <> ''),
    PRIMARY KEY (tenant, run_id, transition_id),
    FOREIGN KEY (tenant, run_id) REFERENCES @schema@.runs (tenant, run_id) ON DELETE CASCADE
)""",
    """CREATE FUNCTION @schema@.refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'docket: %', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation';
END
$fn$""",
    """CREATE TRIGGER runs_identity_is_immutable
BEFORE UPDATE OF tenant, run_id, graph_id, graph_hash, started_at ON @schema@.runs
FOR EACH ROW WHEN (
    OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.run_id IS DISTINCT FROM NEW.run_id
    OR OLD.graph_id IS DISTINCT FROM NEW.graph_id
    OR OLD.graph_hash IS DISTINCT FROM NEW.graph_hash
    OR OLD.started_at IS DISTINCT FROM NEW.started_at)
EXECUTE FUNCTION @schema@.refuse_change('a run''s owner and identity never change')""",
    """CREATE TRIGGER graphs_are_immutable BEFORE UPDATE ON @schema@.graphs
FOR EACH ROW EXECUTE FUNCTION @schema@.refuse_change('a published graph version never changes')""",
    """CREATE TRIGGER events_are_immutable BEFORE UPDATE ON @schema@.events
FOR EACH ROW EXECUTE FUNCTION @schema@.refuse_change('a published event never changes')""",
    """CREATE TRIGGER transitions_are_immutable BEFORE UPDATE ON @schema@.transitions
FOR EACH ROW EXECUTE FUNCTION @schema@.refuse_change('a recorded transition never changes')""",
    # A run has a live row exactly while it is not finished, with the same status. The
    # functions keep them so; these triggers make the database refuse any other writer
    # that does not (checked when its transaction commits).
    """CREATE FUNCTION @schema@.check_live_pair() RETURNS trigger
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
    SELECT r.status INTO v_status FROM @schema@.runs r
    WHERE r.tenant = v_tenant AND r.run_id = v_run_id;
    IF NOT FOUND THEN
        RETURN NULL;  -- the run is gone (pruned), and its live row with it
    END IF;
    SELECT l.status INTO v_live FROM @schema@.live l
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
$fn$""",
    """CREATE CONSTRAINT TRIGGER runs_born_with_state AFTER INSERT ON @schema@.runs
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION @schema@.check_live_pair()""",
    """CREATE CONSTRAINT TRIGGER runs_status_moves_state
AFTER UPDATE OF status ON @schema@.runs DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION @schema@.check_live_pair()""",
    """CREATE CONSTRAINT TRIGGER live_state_changes
AFTER INSERT OR DELETE ON @schema@.live
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION @schema@.check_live_pair()""",
    """CREATE CONSTRAINT TRIGGER live_status_changes
AFTER UPDATE OF status ON @schema@.live DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION @schema@.check_live_pair()""",
)
