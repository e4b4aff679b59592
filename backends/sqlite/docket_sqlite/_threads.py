"""The thread machinery under the SQLite stores: worker threads, wake-ups, group commit.

* **Threads.** The ``sqlite3`` module blocks, so every statement runs on a worker
  thread (:class:`Worker`): one thread owning one connection, opened lazily on that
  thread. A coroutine hands its job to the thread and awaits the answer; the event loop
  never blocks on the file.
* **Group commit.** Writes that queue up while the writer thread is busy (typically
  waiting for the previous commit's fsync) share one ``BEGIN IMMEDIATE … COMMIT`` (one
  fsync), each inside its own SAVEPOINT (:func:`apply_batch`). A job's writes are kept
  or undone as a unit (:attr:`Done.commit`, or an exception), exactly as if it had its
  own transaction, and later jobs in the batch see the earlier ones' writes, as they
  would in sequence. No job is answered before the batch's COMMIT returns; if the batch
  as a whole fails, every job in it gets the error and none of its writes is kept.
* **Wake-ups.** After a commit that makes work due, the writer thread wakes every
  ``wait_for_work`` waiter of every backend instance on the same file *in this process*
  (:class:`Hub`). Other processes learn about new work by polling.
* **Feed notices.** Likewise after the COMMIT, and before any caller is answered, the
  notices of the transitions the batch wrote go to the file's feed hub (``_feed.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

import attrs

from docket_sqlite._feed import FileFeedHub, Notice
from docket_sqlite.errors import store_error
from docket_sqlite.url import Target

T = TypeVar("T")
Job = Callable[[sqlite3.Connection], T]

# Most write jobs one group commit applies in one transaction (see ``apply_batch``).
MAX_GROUP_COMMIT = 64


@attrs.frozen
class Done(Generic[T]):
    """What a write job decided: its answer, whether to commit, whether to wake waiters,
    and the feed notice of the transition it wrote (delivered after the COMMIT)."""

    value: T
    commit: bool = True
    announce: bool = False
    notice: Notice | None = None


def rollback_quietly(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):  # a broken connection: the next BEGIN says so
            conn.execute("ROLLBACK")


# -- wake-ups -----------------------------------------------------------------------------------


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Hub:
    """The ``wait_for_work`` waiters, and the feed, of every backend instance on one
    database file in this process."""

    def __init__(self, path: str | None = None) -> None:
        self.feed = FileFeedHub(path)
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    async def wait(self, timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):  # 3.11's wait_for can lose a cancel
                await future
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if entry in self._waiters:
                    self._waiters.remove(entry)

    def notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # a closed loop: its waiter went with it
                loop.call_soon_threadsafe(_resolve, future)


_HUBS: weakref.WeakValueDictionary[str, Hub] = weakref.WeakValueDictionary()
_HUBS_LOCK = threading.Lock()


def hub_for(target: Target) -> Hub:
    if target.path is None:
        return Hub()  # an in-memory database is private to its backend
    with _HUBS_LOCK:
        hub = _HUBS.get(target.path)
        if hub is None:
            hub = Hub(target.path)
            _HUBS[target.path] = hub
        return hub


# -- pending writes and their answers -----------------------------------------------------------


@attrs.define(eq=False)  # compared by identity: withdraw() removes this very entry
class PendingWrite:
    """A write job waiting for the writer thread, and where its answer goes."""

    job: Callable[[sqlite3.Connection], Done[Any]]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


Batch = list[PendingWrite]


def _answer(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled; the outcome stands in the store
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _deliver(entry: PendingWrite, value: Any, error: BaseException | None = None) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        entry.loop.call_soon_threadsafe(_answer, entry.future, value, error)


Answer = tuple[asyncio.Future[Any], Any, BaseException | None]


def _answer_all(answers: list[Answer]) -> None:
    for future, value, error in answers:
        _answer(future, value, error)


def _deliver_all(answers: Sequence[tuple[PendingWrite, Any, BaseException | None]]) -> None:
    """Answer a batch: one wake-up of each event loop for all of its writes, not one per
    write (each ``call_soon_threadsafe`` writes to the loop's self-pipe)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Answer]] = {}
    for entry, value, error in answers:
        by_loop.setdefault(entry.loop, []).append((entry.future, value, error))
    for loop, answered in by_loop.items():
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            loop.call_soon_threadsafe(_answer_all, answered)


# -- threads and connections ----------------------------------------------------------------------


class Worker:
    """One thread and the one connection it owns (opened lazily, on that thread).

    The writer also keeps the queue of write jobs that group commit drains (see
    ``Engine.write`` in ``_engine.py``).
    """

    def __init__(self, name: str, opener: Callable[[], sqlite3.Connection]) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._opener = opener
        self._conn: sqlite3.Connection | None = None
        self.pending: list[PendingWrite] = []
        self.pending_lock = threading.Lock()
        self._pass_queued = False  # a drain pass is queued or running (under pending_lock)

    def withdraw(self, entry: PendingWrite) -> bool:
        """Take ``entry`` back if no batch has picked it up yet."""
        with self.pending_lock:
            if entry in self.pending:
                self.pending.remove(entry)
                return True
        return False

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = self._opener()
        return self._conn

    def _call(self, job: Job[T]) -> T:
        return job(self._connection())

    async def run(self, job: Job[T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, job)

    def enqueue(
        self, entry: PendingWrite, apply: Callable[[sqlite3.Connection, Batch], None]
    ) -> None:
        """Queue a write for group commit; its answer comes through ``entry.future``.

        At most one drain pass is queued at a time: a write that finds one queued or
        running only joins the list, so a busy writer costs no executor round trip per
        write, and the event loop is woken once per write (by the answer). Each pass
        applies one batch (``apply``) and, if more writes arrived meanwhile, queues the
        next pass behind whatever else the thread has to do.
        """
        with self.pending_lock:
            self.pending.append(entry)
            if self._pass_queued:
                return
            self._pass_queued = True
        try:
            self._executor.submit(self._pass, apply)
        except BaseException:  # shut down by a concurrent close
            with self.pending_lock:
                self._pass_queued = False
            raise

    def _take(self, limit: int | None) -> Batch:
        with self.pending_lock:
            if limit is None:
                batch, self.pending = self.pending, []
            else:
                batch, self.pending = self.pending[:limit], self.pending[limit:]
        return batch

    def _pass(self, apply: Callable[[sqlite3.Connection, Batch], None]) -> None:
        try:
            try:
                conn = self._connection()
            except BaseException as exc:  # every queued write would fail the same way
                for entry in self._take(None):
                    _deliver(entry, None, exc)
                return
            batch = self._take(MAX_GROUP_COMMIT)
            if batch:
                apply(conn, batch)
        finally:
            self._next_pass(apply)

    def _next_pass(self, apply: Callable[[sqlite3.Connection, Batch], None]) -> None:
        with self.pending_lock:
            if not self.pending:
                self._pass_queued = False
                return
        try:
            self._executor.submit(self._pass, apply)
        except RuntimeError as exc:  # the executor was shut down: nobody will drain these
            with self.pending_lock:
                self._pass_queued = False
            for entry in self._take(None):
                _deliver(entry, None, exc)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            rollback_quietly(conn)
            conn.close()

    async def shutdown(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._close)
        finally:
            self._executor.shutdown(wait=False)


# -- group-commit passes (on the writer thread) ---------------------------------------------------


def apply_batch(conn: sqlite3.Connection, batch: Batch, hub: Hub) -> None:
    """Apply queued writes (on the writer thread); every one of them is answered."""
    if len(batch) == 1:
        (entry,) = batch
        try:
            value = _transact(conn, entry.job, hub)
        except BaseException as exc:
            _deliver(entry, None, exc)
            if not isinstance(exc, Exception):
                raise
        else:
            _deliver(entry, value)
    elif batch:
        _transact_batch(conn, batch, hub)


def _transact_batch(conn: sqlite3.Connection, batch: Batch, hub: Hub) -> None:
    answers: list[tuple[PendingWrite, Any, BaseException | None]] = []
    notices: list[Notice] = []
    changed = announce = False
    try:
        conn.execute("BEGIN IMMEDIATE")
        for entry in batch:
            conn.execute("SAVEPOINT docket_job")
            try:
                done = entry.job(conn)
            except Exception as exc:
                if not conn.in_transaction:  # SQLite gave up the whole transaction
                    raise
                conn.execute("ROLLBACK TO docket_job")
                conn.execute("RELEASE docket_job")
                refused = store_error(exc) if isinstance(exc, sqlite3.Error) else exc
                answers.append((entry, None, refused))
                continue
            if not done.commit:
                conn.execute("ROLLBACK TO docket_job")
            conn.execute("RELEASE docket_job")
            changed = changed or done.commit
            announce = announce or (done.commit and done.announce)
            if done.commit and done.notice is not None:
                notices.append(done.notice)
            answers.append((entry, done.value, None))
        listened = hub.feed.committing(notices)
        try:
            conn.execute("COMMIT" if changed else "ROLLBACK")
        except BaseException:
            if listened:
                hub.feed.uncommitted(notices)
            raise
    except BaseException as exc:
        rollback_quietly(conn)
        failure = store_error(exc) if isinstance(exc, sqlite3.Error) else exc
        for entry in batch:
            _deliver(entry, None, failure)
        if not isinstance(exc, Exception):
            raise
        return
    if announce:
        hub.notify()
    hub.feed.committed(notices)  # after the COMMIT returned: readable by every connection
    _deliver_all(answers)


def _transact(
    conn: sqlite3.Connection, job: Callable[[sqlite3.Connection], Done[T]], hub: Hub
) -> T:
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise store_error(exc) from exc
    notices: tuple[Notice, ...] = ()
    try:
        done = job(conn)
        if done.commit and done.notice is not None:
            notices = (done.notice,)
        listened = hub.feed.committing(notices)
        try:
            conn.execute("COMMIT" if done.commit else "ROLLBACK")
        except BaseException:
            if listened:
                hub.feed.uncommitted(notices)
            raise
    except BaseException as exc:
        rollback_quietly(conn)
        if isinstance(exc, sqlite3.Error):
            raise store_error(exc) from exc
        raise
    if done.commit and done.announce:
        hub.notify()
    hub.feed.committed(notices)  # after the COMMIT returned
    return done.value


def snapshot(conn: sqlite3.Connection, job: Job[T]) -> T:
    """Run ``job`` inside one read transaction (one consistent snapshot)."""
    try:
        conn.execute("BEGIN")
        try:
            return job(conn)
        finally:
            rollback_quietly(conn)
    except sqlite3.Error as exc:
        raise store_error(exc) from exc


__all__ = [
    "MAX_GROUP_COMMIT",
    "Batch",
    "Done",
    "Hub",
    "Job",
    "PendingWrite",
    "Worker",
    "apply_batch",
    "hub_for",
    "rollback_quietly",
    "snapshot",
]
