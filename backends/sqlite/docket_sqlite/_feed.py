"""The live feed on SQLite (``Feature.STREAMS``): in-process fan-out, cross-process polling.

* **In this process.** One :class:`FileFeedHub` per database file per process (it hangs
  off the file's wake-up ``Hub``, see ``_threads.py``), shared by every
  ``SQLiteBackend`` on that file. The writer thread hands it the notices of the
  transitions a batch wrote *after* the batch's ``COMMIT`` returned, before any caller
  is answered; with nobody subscribed that is one integer comparison per batch.
* **Other processes.** While the hub has subscribers, one poller thread on its own
  read connection checks ``PRAGMA data_version`` every ``feed_poll`` seconds (a cheap
  check: it changes only when another connection committed). When it changed, the
  poller reads the events inserted since its last look — ``docket_events``' rowid
  grows with every insert, so no extra write is needed on the commit path — groups
  them by run into notices, and skips those this process's own writer already
  delivered. A rowid that went backwards (retention deleted the newest rows) or a
  failed read yields a scope-wide notice (``run_id=None``): subscribers re-read.
* **Emissions** go straight to the hub and, for a file, into ``docket_emissions``
  (tagged with this process's token, trimmed by count and age), which other
  processes' pollers read after their last id, skipping their own process's rows.

Notices are hints (a stream re-reads the store from its cursor), so a lost or repeated
one costs latency, never correctness; what the feed never does is announce a commit
before it is readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import uuid
from collections.abc import Sequence
from typing import Final

import attrs

from docket.contract.feed import FeedHub, LocalSubscription
from docket.records import (
    CommitNotice,
    Emission,
    OwnerScope,
    RecordDecodeError,
    Scope,
    bounded_emission,
    feed_item_from_json,
    feed_item_to_json,
    require_owner,
    require_scope,
    tenant_id_of,
)

#: A transition's notice as the writer thread hands it over:
#: ``(tenant key, run_id, graph_id, first_seq, last_seq)``.
Notice = tuple[str, str, str, int, int]

DEFAULT_FEED_POLL: Final = 0.05  # seconds between two data_version checks
EMISSIONS_KEEP: Final = 10_000  # emission rows kept (newest) when a writer trims
EMISSIONS_TTL_US: Final = 60_000_000  # emission rows older than this are trimmed
TRIM_EVERY: Final = 256  # a writer trims after every this many emission ids
_MAX_RUNS_PER_LOOK: Final = 1_000  # more changed runs than this: one scope-wide notice
_MAX_EMISSIONS_PER_LOOK: Final = 10_000  # more than this: the oldest are skipped
_SEEN_LIMIT: Final = 10_000  # runs remembered as noticed in-process (dedupe for the poller)

_token: tuple[int, str] | None = None


def process_token() -> str:
    """This process's writer tag in ``docket_emissions`` (a fork gets its own)."""
    global _token
    pid = os.getpid()
    if _token is None or _token[0] != pid:
        _token = (pid, f"{pid}-{uuid.uuid4().hex}")
    return _token[1]


def _wide() -> CommitNotice:
    return CommitNotice(tenant_id=None, run_id=None)


class FileFeedHub(FeedHub):
    """The feed hub of one database (one per file per process; private for ``:memory:``)."""

    def __init__(self, path: str | None) -> None:
        super().__init__()
        self.path = path
        self._poller_lock = threading.Lock()
        self._poller: _Poller | None = None
        # (tenant key, run_id) -> last seq this process's writer noticed
        self._seen: dict[tuple[str, str], int] = {}

    # -- the writer side ------------------------------------------------------------------

    def committing(self, notices: Sequence[Notice]) -> bool:
        """Note, just before the COMMIT, what this process is about to notice itself, so
        the poller (which may read the rows the moment they commit) does not repeat it.
        Returns whether anything was noted (undo it with :meth:`uncommitted`)."""
        if not notices or not self.subscribers:
            return False
        seen = self._seen
        if len(seen) > _SEEN_LIMIT:
            seen.clear()  # only a dedupe aid: forgetting costs a duplicate notice
        for key, run_id, _, _, last in notices:
            seen[(key, run_id)] = max(last, seen.get((key, run_id), 0))
        return True

    def uncommitted(self, notices: Sequence[Notice]) -> None:
        """The COMMIT after :meth:`committing` failed: forget what it noted."""
        for key, run_id, _, first, _ in notices:
            if self._seen.get((key, run_id), 0) >= first:
                self._seen[(key, run_id)] = first - 1

    def committed(self, notices: Sequence[Notice]) -> None:
        """Deliver the notices of a batch that committed (writer thread, after COMMIT)."""
        if not notices or not self.subscribers:
            return
        for key, run_id, graph_id, first, last in notices:
            self.deliver(
                CommitNotice(
                    tenant_id=key or None,
                    run_id=run_id,
                    graph_id=graph_id,
                    first_seq=first,
                    last_seq=last,
                )
            )

    def already_noticed(self, key: str, run_id: str, last: int) -> bool:
        return self._seen.get((key, run_id), 0) >= last

    # -- subscriptions and the poller --------------------------------------------------------

    def open_polled(self, scope: Scope, interval: float, busy_timeout: float) -> LocalSubscription:
        """A subscription, with the poller running (and past its first look) for a file.

        Blocks until the poller has read its starting cursors, so whatever another
        process commits after this returns is seen (call it off the event loop).
        """
        subscription = self.open(scope)
        if self.path is None:
            return subscription
        with self._poller_lock:
            poller = self._poller
            if poller is None or not poller.is_alive() or poller.stopping:
                poller = _Poller(self, self.path, interval, busy_timeout)
                self._poller = poller
                poller.start()
        poller.ready.wait()
        return subscription

    def forget(self, subscription: LocalSubscription) -> None:
        super().forget(subscription)
        with self._poller_lock:
            if self.subscribers == 0 and self._poller is not None:
                self._poller.stop()
                self._poller = None


class _Poller(threading.Thread):
    """Watches the file for other connections' commits while the hub has subscribers."""

    def __init__(self, hub: FileFeedHub, path: str, interval: float, busy_timeout: float) -> None:
        super().__init__(name="docket-sqlite-feed", daemon=True)
        self._hub = hub
        self._path = path
        self._interval = interval
        self._busy_timeout = busy_timeout
        self._halt = threading.Event()
        self.ready = threading.Event()
        self.stopping = False
        self._conn: sqlite3.Connection | None = None
        self._version: int | None = None
        self._last_event = 0
        self._last_emission = 0
        self._broken = False

    def stop(self) -> None:
        self.stopping = True
        self._halt.set()

    def run(self) -> None:
        try:
            with contextlib.suppress(sqlite3.Error):
                self._start()
        finally:
            self.ready.set()
        try:
            while not self._halt.wait(self._interval):
                self._tick()
        finally:
            self._close()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, timeout=self._busy_timeout, isolation_level=None)
        try:
            conn.execute("PRAGMA query_only = ON")
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _start(self) -> None:
        """Open the connection and take the cursors: everything already committed is old."""
        conn = self._connect()
        try:
            self._version = int(conn.execute("PRAGMA data_version").fetchone()[0])
            conn.execute("BEGIN")
            try:
                self._last_event = _top(conn, "SELECT max(rowid) FROM docket_events")
                self._last_emission = _top(conn, "SELECT max(id) FROM docket_emissions")
            finally:
                conn.execute("ROLLBACK")
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _tick(self) -> None:
        try:
            if self._conn is None:  # the first open failed, or a read broke: start over
                self._start()
                self._hub.deliver(_wide())  # what happened meanwhile is unknown
                self._broken = False
                return
            version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            if version == self._version:
                return
            self._version = version
            self._look(self._conn)
        except sqlite3.Error:
            self._close()
            if not self._broken:  # once per outage, not once per tick
                self._broken = True
                self._hub.deliver(_wide())

    def _look(self, conn: sqlite3.Connection) -> None:
        hub = self._hub
        conn.execute("BEGIN")  # one snapshot: the tops and the rows below them agree
        try:
            top = _top(conn, "SELECT max(rowid) FROM docket_events")
            changed: list[tuple[str, str, str, int, int]] = []
            wide = top < self._last_event  # the newest rows were deleted: rowids reused
            if top > self._last_event:
                changed = [
                    (str(t), str(r), str(g), int(a), int(b))
                    for t, r, g, a, b in conn.execute(
                        "SELECT e.tenant, e.run_id, r.graph_id, min(e.seq), max(e.seq) "
                        "FROM docket_events e JOIN docket_runs r "
                        "ON r.tenant = e.tenant AND r.run_id = e.run_id "
                        "WHERE e.rowid > ? AND e.rowid <= ? "
                        "GROUP BY e.tenant, e.run_id LIMIT ?",
                        (self._last_event, top, _MAX_RUNS_PER_LOOK + 1),
                    )
                ]
                wide = len(changed) > _MAX_RUNS_PER_LOOK
            self._last_event = top
            emissions = self._emissions(conn)
        finally:
            conn.execute("ROLLBACK")
        if wide:
            hub.deliver(_wide())
        else:
            for key, run_id, graph_id, first, last in changed:
                if not hub.already_noticed(key, run_id, last):
                    hub.deliver(
                        CommitNotice(
                            tenant_id=key or None,
                            run_id=run_id,
                            graph_id=graph_id,
                            first_seq=first,
                            last_seq=last,
                        )
                    )
        for emission in emissions:
            hub.deliver(emission)

    def _emissions(self, conn: sqlite3.Connection) -> list[Emission]:
        top = _top(conn, "SELECT max(id) FROM docket_emissions")
        if top <= self._last_emission:
            self._last_emission = top  # trimmed to nothing and restarted: follow it
            return []
        since = max(self._last_emission, top - _MAX_EMISSIONS_PER_LOOK)
        self._last_emission = top
        mine = process_token()
        found: list[Emission] = []
        for writer, payload in conn.execute(
            "SELECT writer, payload FROM docket_emissions WHERE id > ? AND id <= ? ORDER BY id",
            (since, top),
        ):
            if writer == mine:
                continue  # delivered in-process when it was published
            try:
                item = feed_item_from_json(bytes(payload))
            except RecordDecodeError:
                continue  # not ours to judge; an emission is best effort
            if isinstance(item, Emission):
                found.append(item)
        return found


def _top(conn: sqlite3.Connection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


def write_emission(conn: sqlite3.Connection, emission: Emission, now_us: int) -> None:
    """Queue ``emission`` for other processes (inside the caller's write transaction),
    trimming the table every :data:`TRIM_EVERY` ids."""
    cursor = conn.execute(
        "INSERT INTO docket_emissions (written_at_us, writer, tenant, run_id, payload) "
        "VALUES (?, ?, ?, ?, ?)",
        (
            now_us,
            process_token(),
            emission.tenant_id or "",
            emission.run_id,
            feed_item_to_json(emission),
        ),
    )
    new_id = cursor.lastrowid or 0
    if new_id % TRIM_EVERY == 0:
        conn.execute("DELETE FROM docket_emissions WHERE id <= ?", (new_id - EMISSIONS_KEEP,))
        trim_emissions(conn, now_us - EMISSIONS_TTL_US, EMISSIONS_KEEP)


def trim_emissions(conn: sqlite3.Connection, before_us: int, limit: int) -> int:
    """Delete up to ``limit`` emission rows written before ``before_us``."""
    cursor = conn.execute(
        "DELETE FROM docket_emissions WHERE id IN (SELECT id FROM docket_emissions "
        "WHERE written_at_us < ? ORDER BY written_at_us LIMIT ?)",
        (before_us, limit),
    )
    return cursor.rowcount


def owned(owner: OwnerScope, emission: object) -> Emission:
    """``emission`` checked, with its tenant taken from ``owner`` and its data bounded."""
    require_owner(owner)
    if not isinstance(emission, Emission):
        raise TypeError(f"expected an Emission, got {type(emission).__name__}")
    tenant = tenant_id_of(owner)
    if emission.tenant_id != tenant:
        emission = attrs.evolve(emission, tenant_id=tenant)
    return bounded_emission(emission)


async def open_subscription(
    hub: FileFeedHub, scope: Scope, interval: float, busy_timeout: float
) -> LocalSubscription:
    require_scope(scope)
    if hub.path is None:
        return hub.open(scope)
    return await asyncio.to_thread(hub.open_polled, scope, interval, busy_timeout)


__all__ = [
    "DEFAULT_FEED_POLL",
    "EMISSIONS_KEEP",
    "EMISSIONS_TTL_US",
    "FileFeedHub",
    "Notice",
    "open_subscription",
    "owned",
    "process_token",
    "trim_emissions",
    "write_emission",
]
