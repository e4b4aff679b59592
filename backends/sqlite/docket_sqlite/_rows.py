"""Column encodings and the run-document statements several SQLite stores share.

**Long documents in pieces.** A run document is stored in fixed-size pieces (see
``schema.RUN_PIECE_BYTES``): the first in ``docket_runs.run_json``, the rest in
``docket_run_parts``. A commit rewrites only the pieces whose bytes changed
(:func:`store_pieces`), so appending to a long list field costs about one piece, not
the document; every read puts the pieces back together (:func:`whole_run_json`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from docket.contract.queries import require_run_id
from docket.records import OwnerScope, RecordDecodeError, require_owner, tenant_id_of
from docket.values import from_micros
from docket_sqlite.schema import RUN_PIECE_BYTES


def tenant_key(owner: OwnerScope) -> str:
    """The ``tenant`` column value of an owner: ``''`` for tenantless rows."""
    return tenant_id_of(owner) or ""


def tenant_of(key: str) -> str | None:
    """The tenant id a ``tenant`` column value stands for (``None``: tenantless)."""
    return key or None


def optional_time(value: Any) -> datetime | None:
    return None if value is None else from_micros(int(value))


def run_address(owner: OwnerScope, run_id: object) -> str:
    """The ``tenant`` column value of a run's owner, after checking owner and run id."""
    key = tenant_key(require_owner(owner))
    require_run_id(run_id)
    return key


def run_exists(conn: sqlite3.Connection, key: str, run_id: str) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM docket_runs WHERE tenant = ? AND run_id = ?", (key, run_id)
        ).fetchone()
        is not None
    )


def stored_run_json(conn: sqlite3.Connection, key: str, run_id: str) -> bytes:
    """The stored document of a run known to exist (read under the write lock)."""
    row = conn.execute(
        "SELECT run_json, run_parts FROM docket_runs WHERE tenant = ? AND run_id = ?",
        (key, run_id),
    ).fetchone()
    return whole_run_json(conn, key, run_id, row[0], row[1])


def cut(document: bytes) -> tuple[bytes, list[bytes]]:
    """A run document as its first piece (``run_json``) and the pieces after it."""
    size = RUN_PIECE_BYTES
    if len(document) <= size:
        return document, []
    return document[:size], [document[i : i + size] for i in range(size, len(document), size)]


def store_pieces(
    conn: sqlite3.Connection, key: str, run_id: str, pieces: Sequence[bytes], stored: int
) -> None:
    """Make ``docket_run_parts`` hold ``pieces`` as parts 1.., writing only what changed.

    A piece equal to the stored one is left as it is (the upsert's WHERE), so an append
    to a long document rewrites its last pieces, not all of it; ``stored`` is how many
    parts the row had, so surplus ones are dropped.
    """
    if pieces:
        conn.executemany(
            "INSERT INTO docket_run_parts (tenant, run_id, part, data) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tenant, run_id, part) DO UPDATE SET data = excluded.data "
            "WHERE data <> excluded.data",
            [(key, run_id, index, piece) for index, piece in enumerate(pieces, 1)],
        )
    if stored > len(pieces):
        conn.execute(
            "DELETE FROM docket_run_parts WHERE tenant = ? AND run_id = ? AND part > ?",
            (key, run_id, len(pieces)),
        )


def whole_run_json(conn: sqlite3.Connection, key: str, run_id: str, head: Any, parts: Any) -> bytes:
    """The stored document: ``run_json`` followed by its ``parts`` further pieces."""
    first: bytes = bytes(head)
    count = int(parts)
    if count == 0:
        return first
    rows = conn.execute(
        "SELECT part, data FROM docket_run_parts WHERE tenant = ? AND run_id = ? ORDER BY part",
        (key, run_id),
    ).fetchall()
    pieces = [bytes(data) for _, data in rows]
    complete = [int(part) for part, _ in rows] == list(range(1, count + 1)) and all(
        len(piece) == RUN_PIECE_BYTES for piece in pieces[:-1]
    )
    if not complete:
        raise RecordDecodeError(
            "run", [f"the stored document of run {run_id!r} lacks some of its {count} parts"]
        )
    return b"".join([first, *pieces])


__all__ = [
    "cut",
    "optional_time",
    "run_address",
    "run_exists",
    "store_pieces",
    "stored_run_json",
    "tenant_key",
    "tenant_of",
    "whole_run_json",
]
