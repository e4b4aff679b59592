"""The schema, its version, ordered migrations, and how connections are set up.

Conventions of the schema:

* Owner: ``tenant`` is ``''`` for tenantless rows and the tenant id otherwise. Tenant
  ids are never empty, so ``''`` is unambiguous, and a plain ``NOT NULL`` text column
  can sit in primary keys (SQLite treats ``NULL``\\s as distinct in unique keys).
* Times are ``INTEGER`` microseconds since the Unix epoch (UTC), suffixed ``_us``.
* Run documents and events are stored as the canonical JSON bytes the shared
  validator produced; the columns beside them are copies of the few fields queries
  need (identity, status, counters, times), written in the same statement. A run
  document longer than :data:`RUN_PIECE_BYTES` is cut into pieces of that size
  (version 2): the first in ``docket_runs.run_json``, the rest in
  ``docket_run_parts``; their concatenation is the document, byte for byte.
* Cron schedules (version 3) are ``docket_schedules`` rows: the ``schedule_to_json``
  document beside ``version`` (the fence) and ``due_at_us`` (NULL when paused).
* Retention and the live feed (version 4): each event has the time it was written
  (``written_at_us``, the backend's clock) and each finished run the time it finished
  (``ended_at_us``), both indexed for ``prune``; node emissions bound for other
  processes pass through the small, trimmed ``docket_emissions`` table (see ``_feed.py``).
* Named queues (version 5): each run carries the ``queue`` it waits in and its
  ``priority`` there, set when it starts and never changed; the claim indexes lead with
  them. ``docket_queues`` holds each configured queue's config (``queue_config_to_json``)
  and rate bucket, ``docket_queue_slots`` its held slots (see ``_queues.py``).
* Admission (version 6): ``docket_admissions`` is each queue's admission ledger, one row
  per start held or admitted (``held`` 1/0), the opaque start beside it; the queue row
  counts the ``seq`` it gave last (see ``_admissions.py``).
* CHECK constraints state the operational-tuple invariants, so the file itself refuses
  an impossible row, whoever writes it; triggers make run identity, events and
  recorded transitions immutable.

The version lives in ``docket_meta`` (key ``schema_version``). :func:`migrate` applies
the missing steps of :data:`MIGRATIONS` in order, in one ``BEGIN IMMEDIATE``
transaction, and refuses a file from a newer release without changing it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from docket.values import to_micros
from docket_sqlite.errors import (
    PermanentStoreError,
    SchemaTooNew,
    SchemaTooOld,
    StoreError,
    store_error,
)
from docket_sqlite.url import Target, parse_url

SCHEMA_VERSION: Final = 6
MIN_SQLITE_VERSION: Final = (3, 37, 0)  # STRICT tables (3.37), RETURNING (3.35)
SYNCHRONOUS_MODES: Final = ("FULL", "NORMAL")
DEFAULT_BUSY_TIMEOUT: Final = 5.0
WAL_SIZE_LIMIT: Final = 64 << 20  # bytes kept of the -wal file after a checkpoint

_TERMINAL = "('done', 'failed', 'cancelled')"

_V1: Final[tuple[str, ...]] = (
    """CREATE TABLE docket_meta (
    key   TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
) STRICT, WITHOUT ROWID""",
    """CREATE TABLE docket_graphs (
    tenant          TEXT    NOT NULL,
    graph_id        TEXT    NOT NULL CHECK (graph_id <> ''),
    graph_hash      TEXT    NOT NULL CHECK (graph_hash <> ''),
    document        BLOB    NOT NULL,
    published_at_us INTEGER NOT NULL,
    PRIMARY KEY (tenant, graph_id, graph_hash)
) STRICT""",
    """CREATE INDEX docket_graphs_by_publication
    ON docket_graphs (tenant, graph_id, published_at_us DESC, graph_hash DESC)""",
    """CREATE TRIGGER docket_graphs_are_immutable BEFORE UPDATE ON docket_graphs
BEGIN
    SELECT RAISE(ABORT, 'docket: a published graph version never changes');
END""",
    f"""CREATE TABLE docket_runs (
    tenant                 TEXT    NOT NULL,
    run_id                 TEXT    NOT NULL CHECK (run_id <> ''),
    graph_id               TEXT    NOT NULL,
    graph_hash             TEXT    NOT NULL,
    status                 TEXT    NOT NULL,
    step                   INTEGER NOT NULL,
    checkpoint_seq         INTEGER NOT NULL,
    event_seq              INTEGER NOT NULL,
    started_at_us          INTEGER NOT NULL,
    updated_at_us          INTEGER NOT NULL,
    finished_at_us         INTEGER,
    run_json               BLOB    NOT NULL,
    latest_checkpoint_type TEXT    NOT NULL,
    wake_at_us             INTEGER,
    claim_token            TEXT,
    claimed_at_us          INTEGER,
    claim_attempts         INTEGER NOT NULL DEFAULT 0,
    claim_abandons         INTEGER NOT NULL DEFAULT 0,
    poisoned_at_us         INTEGER,
    poison_reason          TEXT,
    PRIMARY KEY (tenant, run_id),
    FOREIGN KEY (tenant, graph_id, graph_hash)
        REFERENCES docket_graphs (tenant, graph_id, graph_hash) ON DELETE RESTRICT,
    CONSTRAINT status_check
        CHECK (status IN ('running', 'waiting', 'done', 'failed', 'cancelled')),
    CONSTRAINT checkpoint_type_check CHECK (latest_checkpoint_type IN (
        'run_initialized', 'step_committed', 'retry_scheduled', 'interrupt_requested',
        'interrupt_resolved', 'run_completed', 'run_failed', 'run_cancelled')),
    CONSTRAINT finished_at_check
        CHECK ((finished_at_us IS NOT NULL) = (status IN {_TERMINAL})),
    CONSTRAINT claim_pair_check CHECK ((claim_token IS NULL) = (claimed_at_us IS NULL)),
    CONSTRAINT claim_token_check CHECK (claim_token IS NULL OR claim_token <> ''),
    CONSTRAINT poison_pair_check CHECK ((poisoned_at_us IS NULL) = (poison_reason IS NULL)),
    CONSTRAINT poison_reason_check CHECK (poison_reason IS NULL OR poison_reason <> ''),
    CONSTRAINT idle_unless_running_check CHECK (
        status = 'running'
        OR (claim_token IS NULL AND wake_at_us IS NULL AND poisoned_at_us IS NULL)),
    CONSTRAINT poisoned_shape_check CHECK (
        poisoned_at_us IS NULL
        OR (status = 'running' AND claim_token IS NULL AND wake_at_us IS NULL)),
    CONSTRAINT running_schedule_check CHECK (
        status <> 'running' OR poisoned_at_us IS NOT NULL
        OR ((wake_at_us IS NULL) <> (claim_token IS NULL))),
    CONSTRAINT counters_check CHECK (
        step >= 0 AND checkpoint_seq >= 1 AND event_seq >= 0
        AND claim_attempts >= 0 AND claim_abandons >= 0)
) STRICT""",
    # Due runs, oldest wake first: what a ready claim reads.
    """CREATE INDEX docket_runs_due ON docket_runs (wake_at_us, run_id, tenant)
    WHERE status = 'running' AND poisoned_at_us IS NULL AND claim_token IS NULL""",
    # Claimed runs, oldest claim first: what an expired (recovery) claim reads.
    """CREATE INDEX docket_runs_claimed ON docket_runs (claimed_at_us, run_id, tenant)
    WHERE status = 'running' AND poisoned_at_us IS NULL AND claim_token IS NOT NULL""",
    # Newest-first listing, within one owner and across all of them.
    """CREATE INDEX docket_runs_by_owner
    ON docket_runs (tenant, started_at_us DESC, run_id DESC)""",
    """CREATE INDEX docket_runs_by_start ON docket_runs (started_at_us DESC, run_id DESC)""",
    """CREATE INDEX docket_runs_by_graph
    ON docket_runs (tenant, graph_id, started_at_us DESC, run_id DESC)""",
    """CREATE TRIGGER docket_runs_identity_is_immutable
BEFORE UPDATE OF tenant, run_id, graph_id, graph_hash, started_at_us ON docket_runs
WHEN OLD.tenant IS NOT NEW.tenant OR OLD.run_id IS NOT NEW.run_id
  OR OLD.graph_id IS NOT NEW.graph_id OR OLD.graph_hash IS NOT NEW.graph_hash
  OR OLD.started_at_us IS NOT NEW.started_at_us
BEGIN
    SELECT RAISE(ABORT, 'docket: a run''s owner and identity never change');
END""",
    """CREATE TABLE docket_events (
    tenant         TEXT    NOT NULL,
    run_id         TEXT    NOT NULL,
    seq            INTEGER NOT NULL CHECK (seq > 0),
    event_json     BLOB    NOT NULL,
    content_sha256 BLOB    NOT NULL CHECK (length(content_sha256) = 32),
    PRIMARY KEY (tenant, run_id, seq),
    FOREIGN KEY (tenant, run_id) REFERENCES docket_runs (tenant, run_id) ON DELETE CASCADE
) STRICT""",
    """CREATE TRIGGER docket_events_are_immutable BEFORE UPDATE ON docket_events
BEGIN
    SELECT RAISE(ABORT, 'docket: a published event never changes');
END""",
    """CREATE TABLE docket_transitions (
    tenant        TEXT NOT NULL,
    run_id        TEXT NOT NULL,
    transition_id TEXT NOT NULL CHECK (transition_id <> ''),
    digest        TEXT NOT NULL CHECK (digest <> ''),
    PRIMARY KEY (tenant, run_id, transition_id),
    FOREIGN KEY (tenant, run_id) REFERENCES docket_runs (tenant, run_id) ON DELETE CASCADE
) STRICT, WITHOUT ROWID""",
    """CREATE TRIGGER docket_transitions_are_immutable BEFORE UPDATE ON docket_transitions
BEGIN
    SELECT RAISE(ABORT, 'docket: a recorded transition never changes');
END""",
)

#: Bytes of a run document per stored piece (version 2): piece 0 is ``run_json`` itself,
#: pieces 1.. are rows of ``docket_run_parts``. Part of the file format: changing it
#: needs a migration.
RUN_PIECE_BYTES: Final = 8192

# Version 2: a long run document is stored in fixed-size pieces, so a commit that
# changes only some of its bytes (an append near the end, a counter near the start)
# rewrites only the pieces that differ instead of the whole document. ``run_parts``
# counts the pieces after the first; 0 (every version 1 row) means ``run_json`` holds
# the whole document, so existing files need no rewrite.
_V2: Final[tuple[str, ...]] = (
    f"""ALTER TABLE docket_runs ADD COLUMN run_parts INTEGER NOT NULL DEFAULT 0
    CONSTRAINT run_parts_check
    CHECK (run_parts >= 0 AND (run_parts = 0 OR length(run_json) = {RUN_PIECE_BYTES}))""",
    f"""CREATE TABLE docket_run_parts (
    tenant TEXT    NOT NULL,
    run_id TEXT    NOT NULL,
    part   INTEGER NOT NULL CHECK (part >= 1),
    data   BLOB    NOT NULL CHECK (length(data) BETWEEN 1 AND {RUN_PIECE_BYTES}),
    PRIMARY KEY (tenant, run_id, part),
    FOREIGN KEY (tenant, run_id) REFERENCES docket_runs (tenant, run_id) ON DELETE CASCADE
) STRICT""",
)

_RUN_COLUMNS: Final = (
    "tenant, run_id, graph_id, graph_hash, status, step, checkpoint_seq, event_seq, "
    "started_at_us, updated_at_us, finished_at_us, run_json, latest_checkpoint_type, "
    "wake_at_us, claim_token, claimed_at_us, claim_attempts, claim_abandons, "
    "poisoned_at_us, poison_reason, run_parts"
)
_ACTIVE = "('running', 'waiting')"

# Version 3 (durable time and schedules): a *waiting* run may be due at a time (a
# deadline, a message wait's timeout), so it may carry a wake, be claimed when that is
# due and be poisoned like a running one; a waiting run without a wake (External) is
# never claimed. SQLite cannot change a CHECK constraint in place, so ``docket_runs`` is
# rebuilt (SQLite's documented table-rebuild procedure: copy, drop, rename, recreate its
# indexes and trigger). Dropping a parent table with foreign keys enforced would delete
# its events, so :func:`apply_migrations` turns enforcement off around the migration
# transaction and checks the keys before committing; as a standalone script (schema_sql)
# the PRAGMAs below do the same. Cron schedules get their own table: the document
# (``schedule_to_json``) beside the columns queries need, ``due_at_us`` NULL when paused.
_V3: Final[tuple[str, ...]] = (
    "PRAGMA foreign_keys = OFF",  # a no-op inside apply_migrations' transaction (see above)
    f"""CREATE TABLE docket_runs_v3 (
    tenant                 TEXT    NOT NULL,
    run_id                 TEXT    NOT NULL CHECK (run_id <> ''),
    graph_id               TEXT    NOT NULL,
    graph_hash             TEXT    NOT NULL,
    status                 TEXT    NOT NULL,
    step                   INTEGER NOT NULL,
    checkpoint_seq         INTEGER NOT NULL,
    event_seq              INTEGER NOT NULL,
    started_at_us          INTEGER NOT NULL,
    updated_at_us          INTEGER NOT NULL,
    finished_at_us         INTEGER,
    run_json               BLOB    NOT NULL,
    latest_checkpoint_type TEXT    NOT NULL,
    wake_at_us             INTEGER,
    claim_token            TEXT,
    claimed_at_us          INTEGER,
    claim_attempts         INTEGER NOT NULL DEFAULT 0,
    claim_abandons         INTEGER NOT NULL DEFAULT 0,
    poisoned_at_us         INTEGER,
    poison_reason          TEXT,
    run_parts              INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, run_id),
    FOREIGN KEY (tenant, graph_id, graph_hash)
        REFERENCES docket_graphs (tenant, graph_id, graph_hash) ON DELETE RESTRICT,
    CONSTRAINT status_check
        CHECK (status IN ('running', 'waiting', 'done', 'failed', 'cancelled')),
    CONSTRAINT checkpoint_type_check CHECK (latest_checkpoint_type IN (
        'run_initialized', 'step_committed', 'retry_scheduled', 'interrupt_requested',
        'interrupt_resolved', 'run_completed', 'run_failed', 'run_cancelled')),
    CONSTRAINT finished_at_check
        CHECK ((finished_at_us IS NOT NULL) = (status IN {_TERMINAL})),
    CONSTRAINT claim_pair_check CHECK ((claim_token IS NULL) = (claimed_at_us IS NULL)),
    CONSTRAINT claim_token_check CHECK (claim_token IS NULL OR claim_token <> ''),
    CONSTRAINT poison_pair_check CHECK ((poisoned_at_us IS NULL) = (poison_reason IS NULL)),
    CONSTRAINT poison_reason_check CHECK (poison_reason IS NULL OR poison_reason <> ''),
    CONSTRAINT idle_unless_active_check CHECK (
        status IN {_ACTIVE}
        OR (claim_token IS NULL AND wake_at_us IS NULL AND poisoned_at_us IS NULL)),
    CONSTRAINT poisoned_shape_check CHECK (
        poisoned_at_us IS NULL
        OR (status IN {_ACTIVE} AND claim_token IS NULL AND wake_at_us IS NULL)),
    CONSTRAINT running_schedule_check CHECK (
        status <> 'running' OR poisoned_at_us IS NOT NULL
        OR ((wake_at_us IS NULL) <> (claim_token IS NULL))),
    CONSTRAINT waiting_schedule_check CHECK (
        status <> 'waiting' OR wake_at_us IS NULL OR claim_token IS NULL),
    CONSTRAINT counters_check CHECK (
        step >= 0 AND checkpoint_seq >= 1 AND event_seq >= 0
        AND claim_attempts >= 0 AND claim_abandons >= 0),
    CONSTRAINT run_parts_check
        CHECK (run_parts >= 0 AND (run_parts = 0 OR length(run_json) = {RUN_PIECE_BYTES}))
) STRICT""",
    f"INSERT INTO docket_runs_v3 ({_RUN_COLUMNS}) SELECT {_RUN_COLUMNS} FROM docket_runs",
    "DROP TABLE docket_runs",  # its indexes and trigger go with it; recreated below
    "ALTER TABLE docket_runs_v3 RENAME TO docket_runs",
    # Due runs (running, or waiting with a wake), oldest wake first: a ready claim.
    f"""CREATE INDEX docket_runs_due ON docket_runs (wake_at_us, run_id, tenant)
    WHERE status IN {_ACTIVE} AND poisoned_at_us IS NULL AND claim_token IS NULL""",
    # Claimed runs, oldest claim first: what an expired (recovery) claim reads.
    f"""CREATE INDEX docket_runs_claimed ON docket_runs (claimed_at_us, run_id, tenant)
    WHERE status IN {_ACTIVE} AND poisoned_at_us IS NULL AND claim_token IS NOT NULL""",
    *(
        statement
        for statement in _V1
        if statement.startswith(
            (
                "CREATE INDEX docket_runs_by_",
                "CREATE TRIGGER docket_runs_identity_is_immutable",
            )
        )
    ),
    """CREATE TABLE docket_schedules (
    tenant      TEXT    NOT NULL,
    schedule_id TEXT    NOT NULL CHECK (schedule_id <> ''),
    version     INTEGER NOT NULL CHECK (version >= 1),
    due_at_us   INTEGER,
    document    BLOB    NOT NULL,
    PRIMARY KEY (tenant, schedule_id)
) STRICT""",
    # Due schedules, oldest first (paused or finished ones have no due_at and no entry).
    """CREATE INDEX docket_schedules_due ON docket_schedules (due_at_us, schedule_id, tenant)
    WHERE due_at_us IS NOT NULL""",
    # Listing across every owner, by (schedule_id, tenant); one owner's uses the key.
    """CREATE INDEX docket_schedules_by_id ON docket_schedules (schedule_id, tenant)""",
    "PRAGMA foreign_keys = ON",
)

# Version 4 (retention and the live feed). ``prune`` deletes events by the time they
# were written and finished runs by the time they finished, on the backend's clock, so
# both get a column and an index. Existing events take their run's ``updated_at_us`` (no
# event of a run is younger than its last commit, so nothing is pruned early) and
# finished runs their ``finished_at_us``; the events' immutability trigger is dropped
# around that one backfill. ``docket_emissions`` carries node emissions to subscribers
# in other processes: an append-only queue (rowid order), trimmed by its writers and by
# ``prune``; ``writer`` names the publishing process so its own poller skips its rows.
_V4: Final[tuple[str, ...]] = (
    "ALTER TABLE docket_events ADD COLUMN written_at_us INTEGER NOT NULL DEFAULT 0",
    "DROP TRIGGER docket_events_are_immutable",
    """UPDATE docket_events SET written_at_us = coalesce((
    SELECT r.updated_at_us FROM docket_runs r
    WHERE r.tenant = docket_events.tenant AND r.run_id = docket_events.run_id), 0)""",
    *(s for s in _V1 if s.startswith("CREATE TRIGGER docket_events_are_immutable")),
    # Events oldest first: what an event prune reads.
    "CREATE INDEX docket_events_by_age ON docket_events (written_at_us)",
    "ALTER TABLE docket_runs ADD COLUMN ended_at_us INTEGER",
    "UPDATE docket_runs SET ended_at_us = finished_at_us",
    # Finished runs by the time they finished: what a run prune reads.
    """CREATE INDEX docket_runs_ended ON docket_runs (ended_at_us)
    WHERE ended_at_us IS NOT NULL""",
    """CREATE TABLE docket_emissions (
    id            INTEGER PRIMARY KEY,
    written_at_us INTEGER NOT NULL,
    writer        TEXT    NOT NULL,
    tenant        TEXT    NOT NULL,
    run_id        TEXT    NOT NULL,
    payload       BLOB    NOT NULL
) STRICT""",
    "CREATE INDEX docket_emissions_by_age ON docket_emissions (written_at_us)",
)

# Version 5 (named queues, Feature.QUEUES). Runs gain their queue and priority (existing
# rows: "default", 0), immutable like their identity. The two claim indexes are rebuilt
# to lead with (queue, priority): a claim walks the (queue, priority) pairs that have
# candidates, highest priority first, and reads each pair's oldest due rows, so neither a
# queue filter nor priority order scans rows it does not take (see ``_claims.py``).
# ``docket_queues`` is one row per configured queue ("default" is inserted on first
# use): the config JSON and the rate bucket (``tokens`` at ``refilled_at_us``);
# ``docket_queue_slots`` the slots held, each until ``expires_at_us`` (inclusive).
_V5: Final[tuple[str, ...]] = (
    """ALTER TABLE docket_runs ADD COLUMN queue TEXT NOT NULL DEFAULT 'default'
    CONSTRAINT queue_check CHECK (queue <> '')""",
    """ALTER TABLE docket_runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0
    CONSTRAINT priority_check CHECK (priority BETWEEN -100 AND 100)""",
    """CREATE TRIGGER docket_runs_queue_is_immutable
BEFORE UPDATE OF queue, priority ON docket_runs
WHEN OLD.queue IS NOT NEW.queue OR OLD.priority IS NOT NEW.priority
BEGIN
    SELECT RAISE(ABORT, 'docket: a run''s queue and priority never change');
END""",
    "DROP INDEX docket_runs_due",
    "DROP INDEX docket_runs_claimed",
    # Due runs by queue, priority, then oldest wake first: a ready claim.
    f"""CREATE INDEX docket_runs_due
    ON docket_runs (queue, priority, wake_at_us, run_id, tenant)
    WHERE status IN {_ACTIVE} AND poisoned_at_us IS NULL AND claim_token IS NULL""",
    # Claimed runs by queue, priority, then oldest claim first: an expired claim.
    f"""CREATE INDEX docket_runs_claimed
    ON docket_runs (queue, priority, claimed_at_us, run_id, tenant)
    WHERE status IN {_ACTIVE} AND poisoned_at_us IS NULL AND claim_token IS NOT NULL""",
    """CREATE TABLE docket_queues (
    name           TEXT    NOT NULL PRIMARY KEY CHECK (name <> ''),
    config         BLOB    NOT NULL,
    tokens         REAL    NOT NULL,
    refilled_at_us INTEGER NOT NULL
) STRICT, WITHOUT ROWID""",
    """CREATE TABLE docket_queue_slots (
    queue         TEXT    NOT NULL REFERENCES docket_queues (name),
    holder        TEXT    NOT NULL CHECK (holder <> ''),
    expires_at_us INTEGER NOT NULL,
    PRIMARY KEY (queue, holder)
) STRICT, WITHOUT ROWID""",
)

# Version 6 (admission limits, Feature.ADMISSION). ``docket_admissions`` holds each
# queue's admission ledger: one row per start the queue holds (``held = 1``) or has
# admitted and not yet seen finish (``held = 0``), with the caller's opaque ``start``, its
# tenant (``''``: tenantless, as everywhere), priority, ``seq`` and the time it was held
# or admitted. A rowid table, not WITHOUT ROWID: a start may be megabytes, and the
# indexes below keep the ledger's walks off those rows. The queue row keeps the last
# ``seq`` it gave (``admission_seq``; 0: none yet), so a seq is never reused.
_V6: Final[tuple[str, ...]] = (
    "ALTER TABLE docket_queues ADD COLUMN admission_seq INTEGER NOT NULL DEFAULT 0",
    """CREATE TABLE docket_admissions (
    queue    TEXT    NOT NULL REFERENCES docket_queues (name),
    run_id   TEXT    NOT NULL CHECK (run_id <> ''),
    tenant   TEXT    NOT NULL,
    priority INTEGER NOT NULL CHECK (priority BETWEEN -100 AND 100),
    seq      INTEGER NOT NULL CHECK (seq >= 1),
    start    BLOB    NOT NULL,
    at_us    INTEGER NOT NULL,
    held     INTEGER NOT NULL CHECK (held IN (0, 1)),
    PRIMARY KEY (queue, run_id),
    UNIQUE (queue, seq)
) STRICT""",
    # A queue's held starts in promotion order (priority highest first, then seq), and
    # its admitted ones by seq: the promotion walk, the admitted count, the view. It
    # carries tenant and run_id so the walk never reads a row it does not promote.
    """CREATE INDEX docket_admissions_order
    ON docket_admissions (queue, held, priority DESC, seq, tenant, run_id)""",
    # One tenant's starts in a queue: its admitted count, whether it has held ones, the
    # next tenant with held starts, and its held starts in promotion order (covering).
    """CREATE INDEX docket_admissions_by_tenant
    ON docket_admissions (queue, held, tenant, priority DESC, seq, run_id)""",
    # A start by run id, whatever its queue: held_start.
    "CREATE INDEX docket_admissions_by_run ON docket_admissions (run_id, tenant, queue)",
)

#: Ordered migrations: ``(version, statements)``; applying version N's statements to a
#: file at version N-1 yields version N. Version 0 is "no docket tables yet".
MIGRATIONS: Final[tuple[tuple[int, tuple[str, ...]], ...]] = (
    (1, _V1),
    (2, _V2),
    (3, _V3),
    (4, _V4),
    (5, _V5),
    (6, _V6),
)

#: Tables a file at :data:`SCHEMA_VERSION` must have (the shape check on open).
REQUIRED_TABLES: Final = frozenset(
    {
        "docket_meta",
        "docket_graphs",
        "docket_runs",
        "docket_run_parts",
        "docket_events",
        "docket_transitions",
        "docket_schedules",
        "docket_emissions",
        "docket_queues",
        "docket_queue_slots",
        "docket_admissions",
    }
)

assert [v for v, _ in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))


def schema_sql(from_version: int = 0, to_version: int = SCHEMA_VERSION) -> str:
    """The SQL that takes a file from ``from_version`` to ``to_version``, as a script."""
    if not 0 <= from_version <= to_version <= SCHEMA_VERSION:
        raise ValueError(
            f"versions must satisfy 0 <= from ({from_version}) <= to ({to_version}) <= "
            f"{SCHEMA_VERSION}"
        )
    parts: list[str] = []
    for version, statements in MIGRATIONS:
        if from_version < version <= to_version:
            parts.append(f"-- docket-sqlite schema version {version}")
            parts.extend(statement + ";" for statement in statements)
            parts.append(_set_version_sql(version) + ";")
    return "\n\n".join(parts) + ("\n" if parts else "")


def _set_version_sql(version: int) -> str:
    return (
        "INSERT INTO docket_meta (key, value) VALUES ('schema_version', "
        f"'{int(version)}') ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    )


def check_sqlite_library() -> None:
    if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
        wanted = ".".join(map(str, MIN_SQLITE_VERSION))
        raise PermanentStoreError(
            f"docket-sqlite needs SQLite {wanted} or newer; this Python is linked against "
            f"{sqlite3.sqlite_version}"
        )


def connect(target: Target, *, busy_timeout: float, synchronous: str) -> sqlite3.Connection:
    """A configured connection (autocommit: every transaction is explicit).

    Nothing here writes to the file: ``journal_mode`` (which is persistent) is set by
    :func:`enable_wal` only after the schema version has been checked.
    """
    check_sqlite_library()
    if synchronous not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, got {synchronous!r}")
    try:
        conn = sqlite3.connect(
            target.path if target.path is not None else ":memory:",
            timeout=busy_timeout,
            isolation_level=None,
            cached_statements=256,
        )
    except sqlite3.Error as exc:
        raise PermanentStoreError(f"cannot open {target.describe()}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        if synchronous == "FULL":
            # macOS only: make fsync reach the platter (F_FULLFSYNC). A no-op elsewhere.
            conn.execute("PRAGMA fullfsync = ON")
            conn.execute("PRAGMA checkpoint_fullfsync = ON")
    except sqlite3.Error as exc:
        conn.close()
        raise store_error(exc) from exc
    return conn


WAL_SWITCH_WAIT: Final = 5.0  # seconds to keep trying to switch a new file to WAL


def enable_wal(conn: sqlite3.Connection, target: Target) -> None:
    """Put a file database in WAL mode (persistent); refuse one that cannot be."""
    if target.memory:
        return
    # Switching the journal mode needs the file to itself, and SQLite may answer BUSY at
    # once instead of calling the busy handler (several processes opening a new file
    # together): try again for a while before giving up.
    deadline = time.monotonic() + WAL_SWITCH_WAIT
    while True:
        try:
            mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
            conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            break
        except sqlite3.Error as exc:
            code = getattr(exc, "sqlite_errorcode", None)
            busy = code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if busy and time.monotonic() < deadline:
                time.sleep(0.01)
                continue
            raise store_error(exc) from exc
    if mode != "wal":
        raise PermanentStoreError(
            f"{target.describe()} could not be switched to WAL mode (it is in {mode!r}); "
            "docket needs WAL: use a local disk, not a network filesystem"
        )


def read_version(conn: sqlite3.Connection, where: str) -> int:
    """The file's schema version; ``0`` when it has no docket tables yet."""
    try:
        names = {
            str(row[0])
            for row in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table' AND name LIKE 'docket%'"
            ).fetchall()
        }
        if "docket_meta" not in names:
            if any(name.startswith("docket_") for name in names):
                raise PermanentStoreError(
                    f"{where} has docket tables but no docket_meta table, so its schema "
                    "version is unknown; it was not written by docket-sqlite"
                )
            return 0
        row = conn.execute("SELECT value FROM docket_meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.Error as exc:
        raise store_error(exc) from exc
    if row is None or not isinstance(row[0], str) or not row[0].isdigit() or int(row[0]) < 1:
        raise PermanentStoreError(f"{where} has no readable schema_version in docket_meta")
    return int(row[0])


def check_shape(conn: sqlite3.Connection, where: str) -> None:
    try:
        names = {
            str(row[0])
            for row in conn.execute(
                "SELECT name FROM sqlite_schema WHERE type = 'table'"
            ).fetchall()
        }
    except sqlite3.Error as exc:
        raise store_error(exc) from exc
    missing = sorted(REQUIRED_TABLES - names)
    if missing:
        raise PermanentStoreError(
            f"{where} claims schema version {SCHEMA_VERSION} but lacks {', '.join(missing)}"
        )


def _refuse(found: int, where: str, *, older_ok: bool) -> None:
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(where, found, SCHEMA_VERSION)
    if not older_ok and 0 < found < SCHEMA_VERSION:
        raise SchemaTooOld(where, found, SCHEMA_VERSION)


def apply_migrations(
    conn: sqlite3.Connection, where: str, *, now_us: int, upgrade: bool
) -> tuple[int, int]:
    """Bring the file to :data:`SCHEMA_VERSION` in one ``BEGIN IMMEDIATE`` transaction.

    With ``upgrade=False`` only a fresh file (version 0) is initialised; an older
    version raises :class:`SchemaTooOld`. The version is re-read inside the
    transaction, so two processes racing to initialise a fresh file are harmless.
    Foreign keys are not enforced during the transaction (a table rebuild drops a parent
    table, which would delete its children, and the PRAGMA is a no-op inside a
    transaction); they are checked before the commit instead.
    """
    try:
        enforced = bool(conn.execute("PRAGMA foreign_keys").fetchone()[0])
        conn.execute("PRAGMA foreign_keys = OFF")
    except sqlite3.Error as exc:
        raise store_error(exc) from exc
    try:
        return _migrate_in_transaction(conn, where, now_us=now_us, upgrade=upgrade)
    finally:
        if enforced:
            with contextlib.suppress(sqlite3.Error):  # a broken connection: closed anyway
                conn.execute("PRAGMA foreign_keys = ON")


def _migrate_in_transaction(
    conn: sqlite3.Connection, where: str, *, now_us: int, upgrade: bool
) -> tuple[int, int]:
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise store_error(exc) from exc
    try:
        found = read_version(conn, where)
        _refuse(found, where, older_ok=upgrade)
        for version, statements in MIGRATIONS:
            if version <= found:
                continue
            for statement in statements:
                conn.execute(statement)
            conn.execute(_set_version_sql(version))
        if found == 0:
            conn.execute(
                "INSERT INTO docket_meta (key, value) VALUES ('created_at_us', ?)",
                (str(now_us),),
            )
        broken = conn.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            raise PermanentStoreError(
                f"{where}: migrating would leave {len(broken)} rows without their parent "
                f"(first: {tuple(broken[0])!r}); nothing was changed"
            )
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise store_error(exc) from exc
        raise
    return found, SCHEMA_VERSION


def prepare(conn: sqlite3.Connection, target: Target, *, now_us: int) -> int:
    """Check (and, for a fresh file, create) the schema of a backend's writer connection.

    A newer or older version is refused before anything is written.
    """
    where = target.describe()
    found = read_version(conn, where)
    _refuse(found, where, older_ok=False)
    enable_wal(conn, target)
    if found == 0:
        apply_migrations(conn, where, now_us=now_us, upgrade=False)
    check_shape(conn, where)
    return SCHEMA_VERSION


def migrate(
    target: str | os.PathLike[str],
    *,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
) -> tuple[int, int]:
    """Upgrade a database file to the current schema; returns ``(from, to)`` versions.

    ``target`` is a path or a ``sqlite:///`` URL. Creates the file at the current
    version if it does not exist; a no-op ``(N, N)`` when it is current; raises
    :class:`SchemaTooNew` (changing nothing) for a file from a newer release. Stop the
    workers first: a migration takes the write lock for its whole transaction.
    """
    if isinstance(target, str) and target.lower().startswith("sqlite:"):
        where, options = parse_url(target)
        if "busy_timeout" in options:
            busy_timeout = float(options["busy_timeout"])
    else:
        where = Target.of(target)
    if where.memory:
        raise ValueError("an in-memory database has nothing to migrate; give a file path")
    conn = connect(where, busy_timeout=busy_timeout, synchronous="FULL")
    try:
        found = read_version(conn, where.describe())
        _refuse(found, where.describe(), older_ok=True)
        enable_wal(conn, where)
        return apply_migrations(
            conn, where.describe(), now_us=to_micros(datetime.now(UTC)), upgrade=True
        )
    finally:
        conn.close()


def table_sql(conn: sqlite3.Connection) -> Sequence[tuple[str, str]]:
    """``(name, sql)`` of every docket schema object (for tests and diagnostics)."""
    try:
        rows = conn.execute(
            "SELECT name, sql FROM sqlite_schema WHERE name LIKE 'docket%' ORDER BY name"
        ).fetchall()
    except sqlite3.Error as exc:
        raise store_error(exc) from exc
    return [(str(name), str(sql)) for name, sql in rows]


__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "MIGRATIONS",
    "MIN_SQLITE_VERSION",
    "REQUIRED_TABLES",
    "RUN_PIECE_BYTES",
    "SCHEMA_VERSION",
    "SYNCHRONOUS_MODES",
    "StoreError",
    "apply_migrations",
    "check_shape",
    "connect",
    "enable_wal",
    "migrate",
    "prepare",
    "read_version",
    "schema_sql",
    "table_sql",
]
