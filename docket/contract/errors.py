"""The closed error algebra and the other typed outcomes of store operations (layer 4).

Store operations *return* these values; they do not raise them. A transition returns
the stored :class:`~docket.records.Run` or exactly one :data:`TransitionError`; callers
handle them with an exhaustive ``match`` (``assert_never`` in the fallthrough).
Programmer misuse (a ``System`` scope where an owner is required, a malformed query)
raises ``TypeError``/``ValueError`` instead: that is a bug to fix, not a state to handle.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypeAlias

import attrs

from docket.records import Run


@attrs.frozen
class NotFound:
    """Absent, or present in another scope: the two are deliberately indistinguishable."""

    what: str = "run"


@attrs.frozen
class InvalidTransition:
    """The proposal is malformed, breaks the run's immutable identity, or its events are."""

    reasons: tuple[str, ...]


@attrs.frozen
class StaleCheckpoint:
    """A fence was lost: the checkpoint moved on, or the claim token no longer holds."""

    reason: str = "fence lost"


@attrs.frozen
class Conflict:
    """The id is taken (``initialize``), or a ``transition_id`` was reused for other content."""

    reason: str


@attrs.frozen
class EventConflict:
    """Different content at an event sequence that is stored or repeated in the batch."""

    seq: int


@attrs.frozen
class TooLarge:
    """A declared limit (see ``Limits``) was exceeded; measured on canonical bytes."""

    limit: str
    size: int
    maximum: int


@attrs.frozen
class Retryable:
    """An infrastructure failure known to have changed nothing: safe to try again."""

    reason: str


@attrs.frozen
class Permanent:
    """An infrastructure failure that retrying will not fix (schema, corruption, auth)."""

    reason: str


class StoreError(Exception):
    """Raised, where a store cannot return an answer (opening it, a driver failure outside
    a transition): the same classified outcome as a returned :class:`Retryable` or
    :class:`Permanent`, in ``outcome``. Every backend raises these (or subclasses), so a
    caller can decide whether to try again without knowing the backend."""

    def __init__(self, outcome: Retryable | Permanent) -> None:
        self.outcome = outcome
        super().__init__(outcome.reason)

    @property
    def retryable(self) -> bool:
        return isinstance(self.outcome, Retryable)


class RetryableStoreError(StoreError):
    """Safe to try again: nothing changed, or an ambiguous write that a replay settles."""

    def __init__(self, reason: str) -> None:
        super().__init__(Retryable(reason))


class PermanentStoreError(StoreError):
    """Retrying will not help: a schema mismatch, corruption, authentication, bad data."""

    def __init__(self, reason: str) -> None:
        super().__init__(Permanent(reason))


def raised(outcome: Retryable | Permanent) -> StoreError:
    """The exception that carries ``outcome``, for a store operation with no slot to
    return it in: :class:`RetryableStoreError` or :class:`PermanentStoreError`."""
    if isinstance(outcome, Retryable):
        return RetryableStoreError(outcome.reason)
    return PermanentStoreError(outcome.reason)


class SchemaMismatch(PermanentStoreError):
    """Opening a store whose schema version this backend release cannot use; nothing
    was changed. ``where`` names the store (a file, a schema, a key prefix), ``found``
    its version, ``supported`` this release's. A backend subclasses :class:`SchemaTooNew`
    and :class:`SchemaTooOld` to word ``advice`` for its operators; callers catch these
    without knowing the backend."""

    def __init__(self, where: str, found: int, supported: int) -> None:
        self.where = where
        self.found = found
        self.supported = supported
        super().__init__(self.advice())

    def advice(self) -> str:
        return (
            f"{self.where} has schema version {self.found}; this release supports {self.supported}"
        )


class SchemaTooNew(SchemaMismatch):
    """Written by a newer release; never migrated backwards."""


class SchemaTooOld(SchemaMismatch):
    """An older version; upgrades are explicit (``docket migrate``)."""


TransitionError: TypeAlias = (
    NotFound
    | InvalidTransition
    | StaleCheckpoint
    | Conflict
    | EventConflict
    | TooLarge
    | Retryable
    | Permanent
)
TransitionResult: TypeAlias = Run | TransitionError

TRANSITION_ERRORS: tuple[type, ...] = (
    NotFound,
    InvalidTransition,
    StaleCheckpoint,
    Conflict,
    EventConflict,
    TooLarge,
    Retryable,
    Permanent,
)

# -- outcomes of the other operations -------------------------------------------------------


@attrs.frozen
class ClaimRefreshed:
    claimed_at: datetime


@attrs.frozen
class ClaimLost:
    """The token no longer holds the run (stolen, revoked by a signal, released, gone)."""


@attrs.frozen
class InactiveRun:
    """The run is terminal; nothing can be retried or changed."""


@attrs.frozen
class Rescheduled:
    wake_at: datetime


@attrs.frozen
class Poisoned:
    poisoned_at: datetime
    reason: str


@attrs.frozen
class StaleAbandon:
    """The abandon did not match (token or checkpoint moved): nothing changed."""


AbandonOutcome: TypeAlias = Rescheduled | Poisoned | StaleAbandon


@attrs.frozen
class InvalidGraph:
    """A graph document that cannot be stored under the given reference."""

    reasons: tuple[str, ...]


@attrs.frozen
class GraphContentConflict:
    """Stored bytes differ from the document although the hash matched (corruption)."""


@attrs.frozen
class CorruptGraph:
    reason: str


@attrs.frozen
class CorruptEventRow:
    seq: int
    reason: str


POISON_MAX_ATTEMPTS = "max_claim_attempts_exceeded"
POISON_MAX_ABANDONS = "max_claim_abandons_exceeded"

__all__ = [
    "POISON_MAX_ABANDONS",
    "POISON_MAX_ATTEMPTS",
    "TRANSITION_ERRORS",
    "AbandonOutcome",
    "ClaimLost",
    "ClaimRefreshed",
    "Conflict",
    "CorruptEventRow",
    "CorruptGraph",
    "EventConflict",
    "GraphContentConflict",
    "InactiveRun",
    "InvalidGraph",
    "InvalidTransition",
    "NotFound",
    "Permanent",
    "Poisoned",
    "Rescheduled",
    "Retryable",
    "SchemaMismatch",
    "SchemaTooNew",
    "SchemaTooOld",
    "StaleAbandon",
    "StaleCheckpoint",
    "TooLarge",
    "TransitionError",
    "TransitionResult",
    "raised",
]
