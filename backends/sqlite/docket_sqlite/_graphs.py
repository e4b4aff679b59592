"""``SQLiteGraphStore``: the contract's GraphStore over ``docket_graphs``.

Graphs are immutable and content-addressed: ``save_graph`` stores the canonical bytes
the shared validator returns (in a write transaction, so two processes saving one
version agree), and a read answers them through the shared ``decode_graph`` checks.
"""

from __future__ import annotations

import sqlite3

from docket.contract import (
    CorruptGraph,
    GraphContentConflict,
    GraphListQuery,
    InvalidGraph,
    NotFound,
    Permanent,
    Retryable,
    TooLarge,
)
from docket.contract.queries import require_graph_query
from docket.contract.stored import decode_graph
from docket.contract.validate import validate_graph_save
from docket.records import GraphRef, GraphVersion, GraphVersionPage, OwnerScope, require_owner
from docket.values import JSONDict, from_micros, to_micros
from docket_sqlite._engine import Engine
from docket_sqlite._rows import tenant_key
from docket_sqlite._threads import Done


class SQLiteGraphStore:
    """Saved graph versions, per owner scope (``SQLiteBackend.graphs``)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    async def save_graph(
        self, owner: OwnerScope, ref: GraphRef, document: JSONDict
    ) -> GraphVersion | InvalidGraph | GraphContentConflict | TooLarge | Retryable | Permanent:
        engine = self._engine
        checked = validate_graph_save(owner, ref, document, engine.limits)
        if not isinstance(checked, bytes):
            return checked
        key = tenant_key(owner)

        def job(conn: sqlite3.Connection) -> Done[GraphVersion | GraphContentConflict]:
            row = conn.execute(
                "SELECT document, published_at_us FROM docket_graphs "
                "WHERE tenant = ? AND graph_id = ? AND graph_hash = ?",
                (key, ref.graph_id, ref.graph_hash),
            ).fetchone()
            if row is None:
                published = engine.now_us(None)
                conn.execute(
                    "INSERT INTO docket_graphs "
                    "(tenant, graph_id, graph_hash, document, published_at_us) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (key, ref.graph_id, ref.graph_hash, checked, published),
                )
            elif bytes(row[0]) != checked:
                return Done(GraphContentConflict(), commit=False)
            else:
                published = int(row[1])
            version = GraphVersion(
                ref=GraphRef(ref.graph_id, ref.graph_hash), published_at=from_micros(published)
            )
            return Done(version, commit=row is None)

        return await engine.outcome(job)

    async def fetch_graph(
        self, owner: OwnerScope, ref: GraphRef
    ) -> JSONDict | NotFound | CorruptGraph:
        key = tenant_key(require_owner(owner))
        if not isinstance(ref.graph_id, str) or not isinstance(ref.graph_hash, str):
            return NotFound("graph")

        def job(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT document FROM docket_graphs "
                "WHERE tenant = ? AND graph_id = ? AND graph_hash = ?",
                (key, ref.graph_id, ref.graph_hash),
            ).fetchone()
            return None if row is None else bytes(row[0])

        data = await self._engine.read(job)
        if data is None:
            return NotFound("graph")
        return decode_graph(ref, data)

    async def fetch_latest_graph_ref(self, owner: OwnerScope, graph_id: str) -> GraphRef | NotFound:
        key = tenant_key(require_owner(owner))
        if not isinstance(graph_id, str):
            return NotFound("graph")

        def job(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT graph_hash FROM docket_graphs WHERE tenant = ? AND graph_id = ? "
                "ORDER BY published_at_us DESC, graph_hash DESC LIMIT 1",
                (key, graph_id),
            ).fetchone()
            return None if row is None else str(row[0])

        graph_hash = await self._engine.read(job)
        return NotFound("graph") if graph_hash is None else GraphRef(graph_id, graph_hash)

    async def list_graph_versions(
        self, owner: OwnerScope, graph_id: str, query: GraphListQuery
    ) -> GraphVersionPage:
        require_graph_query(query)
        key = tenant_key(require_owner(owner))
        if not isinstance(graph_id, str):
            return GraphVersionPage.from_candidates([], query.limit, query.before)
        sql = (
            "SELECT graph_hash, published_at_us FROM docket_graphs "
            "WHERE tenant = ? AND graph_id = ?"
        )
        params: list[object] = [key, graph_id]
        if query.before is not None:
            sql += " AND (published_at_us, graph_hash) < (?, ?)"
            params += [to_micros(query.before.published_at), query.before.graph_hash]
        sql += " ORDER BY published_at_us DESC, graph_hash DESC LIMIT ?"
        params.append(query.limit + 1)

        def job(conn: sqlite3.Connection) -> list[GraphVersion]:
            return [
                GraphVersion(ref=GraphRef(graph_id, str(h)), published_at=from_micros(int(at)))
                for h, at in conn.execute(sql, params).fetchall()
            ]

        versions = await self._engine.read(job)
        return GraphVersionPage.from_candidates(versions, query.limit, query.before)


__all__ = ["SQLiteGraphStore"]
