"""Typed failures of the PostgreSQL store, and the one place driver errors are classified.

Operations whose contract has a slot for infrastructure failures (the three transitions,
``claim_due`` and ``save_graph``) *return* :class:`~docket.contract.Retryable` or
:class:`~docket.contract.Permanent`. The others (reads, refresh/release/abandon,
``retry_poisoned_run``, ``open``, ``migrate``) have no such slot, so they *raise* a
:class:`StoreError` that carries the same classified outcome. A raw ``psycopg``
exception never leaves the package.

The rules (see ``docs/backends/postgres.md``):

* the database refused or cancelled the work and rolled it back — serialization
  failure, deadlock, lock or statement timeout, too many connections, out of memory or
  disk, the server shutting down — :class:`Retryable`;
* nothing reached the server (the pool had no connection, the server refused it) —
  :class:`Retryable` with a reason starting ``not sent:``;
* the connection broke *after* a write was sent: the server may or may not have
  committed it. That is :class:`Retryable` with a reason starting ``ambiguous:``; the
  caller resends the *same* proposal (same ``transition_id``), which the store answers
  with the stored run if the first attempt landed and applies otherwise;
* everything retrying cannot fix — a missing or foreign schema, a corrupt record, a
  failed login, a value PostgreSQL cannot store — :class:`Permanent`.
"""

from __future__ import annotations

import psycopg
import psycopg_pool

from docket.contract import Permanent, Retryable
from docket.contract import errors as contract
from docket.contract.errors import PermanentStoreError, RetryableStoreError, StoreError

#: SQLSTATE values that mean "rolled back, nothing changed, try again".
RETRYABLE_STATES = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "40003",  # statement_completion_unknown
        "55P03",  # lock_not_available (lock_timeout)
        "55006",  # object_in_use
        "57014",  # query_canceled (statement_timeout)
        "57P01",  # admin_shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now (starting up, shutting down, in recovery)
        "53000",  # insufficient_resources
        "53100",  # disk_full
        "53200",  # out_of_memory
        "53300",  # too_many_connections
        "53400",  # configuration_limit_exceeded
    }
)
#: SQLSTATE classes that are always retryable (08: connection exceptions).
RETRYABLE_CLASSES = frozenset({"08"})
#: States after which a sent write may nonetheless have committed.
_MAYBE_COMMITTED = frozenset({"57P01", "57P02", "40003"})
#: Connection-time refusals (reported as text) that retrying cannot fix.
_AUTH_MARKS = (
    "authentication failed",
    "password",
    "no pg_hba.conf entry",
    "role ",  # role "x" does not exist / is not permitted to log in
)
_REFUSED_MARKS = ("does not exist", "permission denied", "not permitted", "ssl")


class SchemaTooNew(contract.SchemaTooNew):
    """The schema was written by a newer docket-postgres; it was not touched."""

    def advice(self) -> str:
        return (
            f"{self.where} has docket schema version {self.found}, but this docket-postgres "
            f"only knows versions up to {self.supported}. Nothing was changed. Upgrade "
            f"docket-postgres on every worker; a schema is never migrated backwards."
        )


class SchemaTooOld(contract.SchemaTooOld):
    """The schema has an older version; upgrades are explicit (``docket migrate``)."""

    def advice(self) -> str:
        return (
            f"{self.where} has docket schema version {self.found}; this docket-postgres needs "
            f"version {self.supported}. Stop the workers that use it, back the database up, "
            f"run `docket migrate <url>` (or PostgresBackend.migrate()), then start them again."
        )


def _state_of(exc: BaseException) -> str | None:
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) and state else None


def classify(exc: BaseException, *, sent: bool, write: bool) -> Retryable | Permanent:
    """Map a driver error onto the contract's two infrastructure outcomes.

    ``sent`` says whether the statement may have reached the server; ``write`` whether
    it could have changed anything. A broken connection after a write was sent is
    ambiguous: reported as retryable, because every docket write is safe to resend.
    """
    state = _state_of(exc)
    text = " ".join(str(exc).split()) or type(exc).__name__
    label = f"postgres {state}: {text}" if state else f"postgres: {text}"
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return Retryable(f"not sent: no database connection became available ({text})")
    if state is not None and state[:2] == "28":  # invalid authorization / password
        return Permanent(f"authentication failed: {label}")
    if state in RETRYABLE_STATES or (state is not None and state[:2] in RETRYABLE_CLASSES):
        if sent and write and state in _MAYBE_COMMITTED:
            return Retryable(f"ambiguous: {label}; resend the same transition_id")
        return Retryable(label)
    if isinstance(exc, psycopg.OperationalError) and state is None:
        lowered = text.lower()
        # libpq reports a server's refusal at connection time as text, without a SQLSTATE
        if any(mark in lowered for mark in _AUTH_MARKS):
            return Permanent(f"authentication failed: {label}")
        if "fatal:" in lowered and any(mark in lowered for mark in _REFUSED_MARKS):
            return Permanent(label)
        if not sent:
            return Retryable(f"not sent: {label}")
        if write:
            return Retryable(
                f"ambiguous: connection lost after sending ({label}); resend the same transition_id"
            )
        return Retryable(label)
    if isinstance(exc, psycopg.InterfaceError) and not sent:
        return Retryable(f"not sent: {label}")
    return Permanent(label)


def store_error(exc: BaseException, *, sent: bool, write: bool) -> StoreError:
    """The exception to raise for a driver error (classified as :func:`classify` does)."""
    outcome = classify(exc, sent=sent, write=write)
    return contract.raised(outcome)


__all__ = [
    "RETRYABLE_CLASSES",
    "RETRYABLE_STATES",
    "PermanentStoreError",
    "RetryableStoreError",
    "SchemaTooNew",
    "SchemaTooOld",
    "StoreError",
    "classify",
    "store_error",
]
