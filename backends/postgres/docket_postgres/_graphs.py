"""The graph store (``GraphStore``) of ``PostgresBackend``: the ``graphs`` table.

A save is one call of the ``save_graph`` function (after the shared validator): it
inserts the version, or finds the one stored under the same ref and says whether its
content is the same. Reads are plain statements; stored bytes are checked on the way
out by :func:`docket.contract.stored.decode_graph`.
"""

from __future__ import annotations

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
from docket.values import JSONDict, utc
from docket_postgres._engine import Engine, storable, tenant_key

_SAVE_GRAPH = "SELECT * FROM @schema@.save_graph(%s, %s, %s, %s, %s::timestamptz)"
_FETCH_GRAPH = (
    "SELECT document FROM @schema@.graphs WHERE tenant = %s AND graph_id = %s AND graph_hash = %s"
)
_LATEST_GRAPH = (
    "SELECT graph_hash FROM @schema@.graphs WHERE tenant = %s AND graph_id = %s "
    "ORDER BY published_at DESC, graph_hash DESC LIMIT 1"
)
_GRAPH_VERSIONS = (
    "SELECT graph_hash, published_at FROM @schema@.graphs WHERE tenant = %s AND graph_id = %s "
    "AND (%s::timestamptz IS NULL OR (published_at, graph_hash) < (%s::timestamptz, %s::text)) "
    "ORDER BY published_at DESC, graph_hash DESC LIMIT %s"
)


class PostgresGraphs:
    """``GraphStore`` over one backend's :class:`~docket_postgres._engine.Engine`."""

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
        if not storable(key, ref.graph_id, ref.graph_hash):
            return InvalidGraph(("ids: PostgreSQL text cannot hold NUL characters",))
        rows = await engine.outcome(
            engine.q(_SAVE_GRAPH), (key, ref.graph_id, ref.graph_hash, checked, engine.given(None))
        )
        if not isinstance(rows, list):
            return rows
        published_at, same = rows[0]
        if not same:
            return GraphContentConflict()
        return GraphVersion(
            ref=GraphRef(ref.graph_id, ref.graph_hash), published_at=utc(published_at)
        )

    async def fetch_graph(
        self, owner: OwnerScope, ref: GraphRef
    ) -> JSONDict | NotFound | CorruptGraph:
        key = tenant_key(require_owner(owner))
        graph_id, graph_hash = getattr(ref, "graph_id", None), getattr(ref, "graph_hash", None)
        if not isinstance(graph_id, str) or not isinstance(graph_hash, str):
            return NotFound("graph")
        if not storable(key, graph_id, graph_hash):
            return NotFound("graph")
        engine = self._engine
        rows = await engine.fetch(engine.q(_FETCH_GRAPH), (key, graph_id, graph_hash), write=False)
        if not rows:
            return NotFound("graph")
        data = bytes(rows[0][0])
        return decode_graph(GraphRef(graph_id, graph_hash), data)

    async def fetch_latest_graph_ref(self, owner: OwnerScope, graph_id: str) -> GraphRef | NotFound:
        key = tenant_key(require_owner(owner))
        if not isinstance(graph_id, str) or not storable(key, graph_id):
            return NotFound("graph")
        engine = self._engine
        rows = await engine.fetch(engine.q(_LATEST_GRAPH), (key, graph_id), write=False)
        return GraphRef(graph_id, str(rows[0][0])) if rows else NotFound("graph")

    async def list_graph_versions(
        self, owner: OwnerScope, graph_id: str, query: GraphListQuery
    ) -> GraphVersionPage:
        require_graph_query(query)
        key = tenant_key(require_owner(owner))
        if not isinstance(graph_id, str) or not storable(key, graph_id):
            return GraphVersionPage.from_candidates([], query.limit, query.before)
        before = query.before
        at = utc(before.published_at) if before is not None else None
        engine = self._engine
        rows = await engine.fetch(
            engine.q(_GRAPH_VERSIONS),
            (key, graph_id, at, at, before.graph_hash if before else None, query.limit + 1),
            write=False,
        )
        versions = [
            GraphVersion(ref=GraphRef(graph_id, str(h)), published_at=utc(at)) for h, at in rows
        ]
        return GraphVersionPage.from_candidates(versions, query.limit, query.before)
