"""The ordered, transactional key-value operations :class:`~docket.contract.kv.KVBackend`
needs from a store: the whole interface a key-value backend implements.

Keys and values are ``bytes``; keys compare as unsigned bytes, shortest first on a
common prefix (``memcmp`` order: LMDB, RocksDB, FoundationDB, TiKV and etcd all use it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Protocol

__all__ = ["KVConflict", "KVStore", "KVTransaction"]


class KVConflict(Exception):
    """Raised by an optimistic store (any operation, or the commit) when a concurrent
    transaction invalidated this one. Nothing of it was applied; the adapter runs the
    whole transaction again (a few times, then it answers ``Retryable``)."""


class KVTransaction(Protocol):
    """One transaction. Every read sees one consistent snapshot, including the
    transaction's own writes; nothing is visible to others until the commit."""

    def get(self, key: bytes) -> bytes | None:
        """The value at ``key``, or ``None``."""

    def put(self, key: bytes, value: bytes) -> None:
        """Set ``key`` (write transactions only)."""

    def delete(self, key: bytes) -> None:
        """Remove ``key`` if present (write transactions only)."""

    def scan(
        self, start: bytes, end: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """``(key, value)`` for ``start <= key < end``, ascending (descending with
        ``reverse``), at most ``limit`` of them. The adapter consumes or closes the
        iterator before it writes again in the same transaction."""


class KVStore(Protocol):
    """An open store. ``transaction`` may be called from several threads at once (the
    adapter runs read transactions on a small pool, write transactions on one thread);
    each transaction is used by one thread from start to end."""

    #: The longest key the store takes; the adapter's keys are at most
    #: ``max_id_bytes + 26`` bytes plus the key prefix (281 with the default limits).
    max_key_bytes: int

    def transaction(self, *, write: bool) -> AbstractContextManager[KVTransaction]:
        """A transaction, committed atomically when the ``with`` block ends normally and
        discarded when it raises. Write transactions must be serializable: what one
        read stays unchanged by others until its commit (a single writer, or a
        :class:`KVConflict` at commit). Infrastructure failures raise
        :class:`~docket.contract.errors.RetryableStoreError` (nothing changed) or
        :class:`~docket.contract.errors.PermanentStoreError`."""

    def close(self) -> None:
        """Release the store; called once, when no transaction is open."""
