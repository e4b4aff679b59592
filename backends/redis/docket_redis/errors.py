"""Typed failures of the Redis store, and the one place driver errors are classified.

Operations whose contract has a slot for infrastructure failures (the transitions,
``claim_due``, ``save_graph``) *return* :class:`~docket.contract.Retryable` or
:class:`~docket.contract.Permanent`. The others (reads, refresh/release/abandon,
``retry_poisoned_run``, ``open``) have no such slot, so they *raise* a
:class:`StoreError` carrying the same classified outcome. A raw ``redis`` exception
never leaves the package.

The classes:

* **not sent** — the connection could not be made (refused, DNS, TLS handshake) or the
  server refused the command before running it (``BUSY`` with a script running,
  ``LOADING``, ``MASTERDOWN``, ``READONLY`` after a failover, ``OOM``, ``TRYAGAIN``,
  ``CLUSTERDOWN``, an ``ASK``/``MOVED`` redirect): :class:`Retryable`, nothing changed.
* **ambiguous** — the command was sent and the connection broke or timed out before the
  answer came: the script may or may not have run. Still :class:`Retryable`, with a
  reason starting ``"ambiguous: "``. Replaying the *same* proposal resolves it: its
  ``transition_id`` answers the stored run if the first attempt landed.
* **permanent** — authentication, a script error (a bug), corrupt stored data.
"""

from __future__ import annotations

from redis import exceptions as rx

from docket.contract import errors as contract
from docket.contract.errors import PermanentStoreError, RetryableStoreError, StoreError

AMBIGUOUS = "ambiguous: "

# Error replies with which the server refuses a command without running it.
_REFUSED = (
    "BUSY",
    "LOADING",
    "MASTERDOWN",
    "READONLY",
    "OOM",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
    "NOREPLICAS",
)


class SchemaTooNew(contract.SchemaTooNew):
    """The namespace was written by a newer docket-redis; nothing was changed."""

    def advice(self) -> str:
        return (
            f"{self.where} holds docket-redis key layout version {self.found}, but this "
            f"docket-redis only knows versions up to {self.supported}. Nothing was changed. "
            f"Upgrade docket-redis (then run `docket migrate` if the newer release asks for it)."
        )


class SchemaTooOld(contract.SchemaTooOld):
    """The namespace has an older key layout; upgrades are explicit (``docket migrate``)."""

    def advice(self) -> str:
        return (
            f"{self.where} holds docket-redis key layout version {self.found}; this "
            f"docket-redis needs version {self.supported}. Stop the workers that use it, run "
            f"`docket migrate <url>` (or RedisBackend.migrate()), then start them again. "
            f"Nothing was changed."
        )


def refused(message: str) -> bool:
    """Whether an error reply means the server did not run the command."""
    head = message.split(" ", 1)[0].upper()
    return head in _REFUSED


def not_sent(exc: BaseException) -> RetryableStoreError:
    return RetryableStoreError(f"redis: not sent ({type(exc).__name__}: {exc})")


def ambiguous(exc: BaseException) -> RetryableStoreError:
    return RetryableStoreError(
        f"{AMBIGUOUS}the connection failed after the command was sent "
        f"({type(exc).__name__}: {exc}); it may or may not have been applied"
    )


# Error replies the driver turns into these classes (it strips the code from the text).
_REFUSED_TYPES: tuple[type[BaseException], ...] = (
    rx.BusyLoadingError,
    rx.OutOfMemoryError,
    rx.ReadOnlyError,
    rx.TryAgainError,
    rx.ClusterDownError,
    rx.AskError,
)


def reply_error(exc: rx.RedisError) -> StoreError:
    """Classify an error reply from the server (the command did not run, or failed)."""
    code = getattr(exc, "status_code", None)
    message = f"{code} {exc}" if code else str(exc)
    if isinstance(exc, _REFUSED_TYPES) or refused(message):
        return RetryableStoreError(f"redis refused the command: {message}")
    return PermanentStoreError(f"redis error: {message}")


def corrupt(what: str) -> PermanentStoreError:
    return PermanentStoreError(f"corrupt data in redis: {what}")


__all__ = [
    "AMBIGUOUS",
    "PermanentStoreError",
    "RetryableStoreError",
    "SchemaTooNew",
    "SchemaTooOld",
    "StoreError",
    "ambiguous",
    "corrupt",
    "not_sent",
    "refused",
    "reply_error",
]
