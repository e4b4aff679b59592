"""One transaction as the adapter sees it: prefixed keys, heads and their index entries."""

from __future__ import annotations

from collections.abc import Generator

from docket.contract.errors import PermanentStoreError
from docket.contract.kv._keys import CLAIMED, DOC, DUE, HEAD, Head, text, time8
from docket.contract.kv._protocol import KVTransaction


class Tx:
    """A :class:`KVTransaction` under the backend's key prefix. ``announce`` is set by a
    write that makes work due, so waiters are woken once it has committed."""

    def __init__(self, txn: KVTransaction, prefix: bytes) -> None:
        self._txn = txn
        self._prefix = prefix
        self.announce = False

    def get(self, key: bytes) -> bytes | None:
        return self._txn.get(self._prefix + key)

    def put(self, key: bytes, value: bytes = b"") -> None:
        self._txn.put(self._prefix + key, value)

    def delete(self, key: bytes) -> None:
        self._txn.delete(self._prefix + key)

    def scan(
        self, start: bytes, end: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> Generator[tuple[bytes, bytes], None, None]:
        cut = len(self._prefix)
        inner = self._txn.scan(
            self._prefix + start, self._prefix + end, reverse=reverse, limit=limit
        )
        try:
            for key, value in inner:
                yield key[cut:], value
        finally:
            close = getattr(inner, "close", None)
            if close is not None:
                close()

    # -- heads ------------------------------------------------------------------------

    def head(self, handle: bytes) -> Head | None:
        data = self.get(HEAD + handle)
        if data is None:
            return None
        try:
            return Head.decode(data)
        except (ValueError, TypeError, KeyError) as exc:
            raise PermanentStoreError(f"corrupt run head: {exc}") from exc

    def doc(self, handle: bytes) -> bytes:
        data = self.get(DOC + handle)
        if data is None:
            raise PermanentStoreError("a run head without its document")
        return data

    def save(self, handle: bytes, head: Head, before: frozenset[bytes] = frozenset()) -> None:
        """Write ``head`` and move its due/claim index entries from ``before`` (the
        :func:`index_keys` read before the head changed) to where they are now."""
        after = index_keys(handle, head)
        for key in before - after:
            self.delete(key)
        for key in after - before:
            self.put(key)
        self.put(HEAD + handle, head.encode())


def index_keys(handle: bytes, head: Head) -> frozenset[bytes]:
    """The due/claim index entries a head implies: a run is in the due index exactly while
    it has a wake, and in the claim index exactly while it is claimed."""
    keys = set()
    if head.wake_at is not None:
        keys.add(DUE + time8(head.wake_at) + text(head.run_id) + handle)
    if head.claimed_at is not None:
        keys.add(CLAIMED + time8(head.claimed_at) + text(head.run_id) + handle)
    return frozenset(keys)
