"""Long run documents in pieces, and the cache that lets a commit send only changed ones.

Layout 2 stores a run document longer than :data:`PIECE_BYTES` in pieces
(``lua/doc_pieces.lua``). The transition store patches the pieces of the document it
last stored or read (:class:`KnownDocuments`); the run store remembers the document
``claim_take`` read with a lease, so the lease holder's first commit is patched too.
"""

from __future__ import annotations

from typing import Final

#: Bytes per stored piece of a run document; ``DOC_PIECE`` in lua/doc_pieces.lua.
PIECE_BYTES: Final = 8192


def long_document(doc: bytes) -> list[bytes] | None:
    """``doc`` cut into stored pieces, or ``None`` when it fits in one (sent whole)."""
    if len(doc) <= PIECE_BYTES:
        return None
    return [doc[i : i + PIECE_BYTES] for i in range(0, len(doc), PIECE_BYTES)]


class KnownDocuments:
    """The long run documents this backend last stored or read, each with its checkpoint,
    so that the next commit of that run sends only the pieces that changed (an append to
    a long list: the last piece or two instead of the whole document).

    Only a transition writes a document and each checkpoint has exactly one, so the
    document at the commit's fenced checkpoint is the one stored whenever the fence
    holds; ``commit.lua`` also checks the stored number of pieces, and answers
    ``REPATCH`` (the document is then sent whole) when it differs. Bounded by entries
    and bytes: the oldest go first. Documents come cut by :func:`long_document`, once
    per commit for both the patch and what is remembered."""

    def __init__(self, limit: int = 256, budget: int = 64 << 20) -> None:
        self._limit = limit
        self._budget = budget
        self._bytes = 0
        self._known: dict[tuple[str, str], tuple[int, list[bytes], int]] = {}

    def remember(
        self, part: str, run_id: str, checkpoint_seq: int, pieces: list[bytes] | None
    ) -> None:
        self.forget(part, run_id)
        if pieces is None:
            return  # one piece: sent whole anyway
        size = sum(map(len, pieces))
        self._known[(part, run_id)] = (checkpoint_seq, pieces, size)
        self._bytes += size
        while self._known and (len(self._known) > self._limit or self._bytes > self._budget):
            self._bytes -= self._known.pop(next(iter(self._known)))[2]

    def forget(self, part: str, run_id: str) -> None:
        known = self._known.pop((part, run_id), None)
        if known is not None:
            self._bytes -= known[2]

    def patch(
        self, part: str, run_id: str, expected: int, pieces: list[bytes] | None
    ) -> list[str | bytes]:
        """``commit.lua``'s patch arguments for a document, or ``[]`` to send it whole."""
        known = self._known.get((part, run_id))
        if known is None or known[0] != expected or pieces is None:
            return []
        base = known[1]
        changed = [
            (i, piece) for i, piece in enumerate(pieces, 1) if i > len(base) or base[i - 1] != piece
        ]
        args: list[str | bytes] = [str(len(base)), str(len(pieces)), str(len(changed))]
        for i, piece in changed:
            args += [str(i), piece]
        return args
