"""Run documents a backend's ``claim_due`` read with its leases, kept for the drain.

A backend whose claim reads the run document in the same round trip (a statement or a
script) can hand it to the lease's drain through the optional ``claimed_run`` store
method, saving the drain a read. This is the one shared bookkeeping for that: keyed by
claim token, handed out once, bounded in count and bytes.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["ClaimedRunDocuments"]


class ClaimedRunDocuments:
    """Run documents read by ``claim_due``, by claim token, until the lease's drain takes
    them. Bounded in count and bytes (oldest dropped first): a lease whose drain never
    asks (a worker stopping, a caller that is not a worker) must not pin memory."""

    def __init__(self, max_count: int = 256, max_bytes: int = 64 << 20) -> None:
        self._kept: OrderedDict[str, tuple[str, str, bytes]] = OrderedDict()
        self._bytes = 0
        self._max_count = max_count
        self._max_bytes = max_bytes

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def size(self) -> int:
        """Bytes of the documents kept."""
        return self._bytes

    def keep(self, token: str, scope: str, run_id: str, document: bytes) -> None:
        old = self._kept.pop(token, None)
        if old is not None:
            self._bytes -= len(old[2])
        self._kept[token] = (scope, run_id, document)
        self._bytes += len(document)
        while self._kept and (len(self._kept) > self._max_count or self._bytes > self._max_bytes):
            _, (_, _, dropped) = self._kept.popitem(last=False)
            self._bytes -= len(dropped)

    def take(self, token: object, scope: str, run_id: str) -> bytes | None:
        """The document kept for ``token`` (once), if it belongs to ``scope``/``run_id``."""
        kept = self._kept.pop(token, None) if isinstance(token, str) else None
        if kept is None:
            return None
        self._bytes -= len(kept[2])
        return kept[2] if kept[0] == scope and kept[1] == run_id else None
