"""Typed failures of the SQLite store, and the one place driver errors are classified.

Operations whose contract has a slot for infrastructure failures (the transitions,
``claim_due``, ``save_graph``) *return* :class:`~docket.contract.Retryable` or
:class:`~docket.contract.Permanent`. The others (reads, refresh/release/abandon,
``retry_poisoned_run``, ``open``) have no such slot, so they *raise* a
:class:`StoreError` carrying the same classified outcome. A raw ``sqlite3`` exception
never leaves the package.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from docket.contract import Permanent, Retryable
from docket.contract import errors as contract
from docket.contract.errors import PermanentStoreError, RetryableStoreError, StoreError

# Primary result codes (the low byte of an extended code) that mean "nothing changed,
# try again": another connection holds the lock, memory or disk ran out, the call was
# interrupted, or the WAL-index lock protocol hiccupped.
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_NOMEM = 7
SQLITE_INTERRUPT = 9
SQLITE_FULL = 13
SQLITE_PROTOCOL = 15
_RETRYABLE = frozenset(
    {SQLITE_BUSY, SQLITE_LOCKED, SQLITE_NOMEM, SQLITE_INTERRUPT, SQLITE_FULL, SQLITE_PROTOCOL}
)


class SchemaTooNew(contract.SchemaTooNew):
    """The file was written by a newer docket-sqlite; it was not touched."""

    @property
    def path(self) -> str:
        return self.where

    def advice(self) -> str:
        return (
            f"{self.where} has docket schema version {self.found}, but this docket-sqlite "
            f"only knows versions up to {self.supported}. The file was left unchanged. "
            f"Upgrade docket-sqlite (and then run `docket migrate` if the newer release asks "
            f"for it); a file is never migrated backwards."
        )


class SchemaTooOld(contract.SchemaTooOld):
    """The file has an older schema version; upgrades are explicit (``docket migrate``)."""

    @property
    def path(self) -> str:
        return self.where

    def advice(self) -> str:
        return (
            f"{self.where} has docket schema version {self.found}; this docket-sqlite needs "
            f"version {self.supported}. Stop every worker using the file, back it up, run "
            f"`docket migrate sqlite:///{Path(self.where).as_posix()}` (or "
            f"docket_sqlite.migrate(path)), then restart them."
        )


def classify(exc: sqlite3.Error) -> Retryable | Permanent:
    """Map a driver error onto the contract's two infrastructure outcomes."""
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    reason = f"sqlite {name}: {exc}"
    if isinstance(code, int):
        return Retryable(reason) if code & 0xFF in _RETRYABLE else Permanent(reason)
    text = str(exc).lower()
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return Retryable(reason)
    return Permanent(reason)


def store_error(exc: sqlite3.Error) -> StoreError:
    """The exception to raise for a driver error (classified as :func:`classify` does)."""
    outcome = classify(exc)
    return contract.raised(outcome)


__all__ = [
    "PermanentStoreError",
    "RetryableStoreError",
    "SchemaTooNew",
    "SchemaTooOld",
    "StoreError",
    "classify",
    "store_error",
]
