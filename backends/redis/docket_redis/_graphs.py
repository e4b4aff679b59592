"""``RedisGraphs``: the graph store (``GraphStore``) of a ``RedisBackend``.

A scope's graph ``<id>`` is one hash (``d:<hash>`` → canonical document bytes,
``p:<hash>`` → publication time) beside a sorted set of its versions ordered by
publication time (:func:`~docket_redis.keys.time_key` members), so the latest version
and version pages are ``ZRANGE BYLEX`` reads.
``save_graph`` validates in Python and stores with ``lua/save_graph.lua``, which refuses
different content under an existing hash.
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
from docket.values import JSONDict, from_micros, to_micros
from docket_redis._codec import code, text
from docket_redis._engine import RedisEngine
from docket_redis.errors import StoreError
from docket_redis.keys import index_member, member_ident, member_micros, time_key


class RedisGraphs:
    """Immutable, content-addressed graph documents, per owner scope."""

    def __init__(self, engine: RedisEngine) -> None:
        self._engine = engine

    async def save_graph(
        self, owner: OwnerScope, ref: GraphRef, document: JSONDict
    ) -> GraphVersion | InvalidGraph | GraphContentConflict | TooLarge | Retryable | Permanent:
        engine = self._engine
        checked = validate_graph_save(owner, ref, document, engine.limits)
        if not isinstance(checked, bytes):
            return checked
        scope = engine.ns.scope(owner)
        now = engine.now_arg(None)
        try:
            await engine.register(scope, order=False)
            reply = await engine.eval(
                "save_graph",
                [scope.graph(ref.graph_id), scope.versions(ref.graph_id)],
                [ref.graph_hash, checked, now, time_key(int(now)) if now else ""],
            )
        except StoreError as exc:
            return exc.outcome
        if code(reply) == "CONFLICT":
            return GraphContentConflict()
        return GraphVersion(
            ref=GraphRef(ref.graph_id, ref.graph_hash),
            published_at=from_micros(int(text(reply[1]))),
        )

    async def fetch_graph(
        self, owner: OwnerScope, ref: GraphRef
    ) -> JSONDict | NotFound | CorruptGraph:
        scope = self._engine.ns.scope(require_owner(owner))
        if not isinstance(ref.graph_id, str) or not isinstance(ref.graph_hash, str):
            return NotFound("graph")
        data = await self._engine.transport.command(
            scope.graph(ref.graph_id), "HGET", scope.graph(ref.graph_id), f"d:{ref.graph_hash}"
        )
        if data is None:
            return NotFound("graph")
        return decode_graph(ref, data)

    async def fetch_latest_graph_ref(self, owner: OwnerScope, graph_id: str) -> GraphRef | NotFound:
        scope = self._engine.ns.scope(require_owner(owner))
        if not isinstance(graph_id, str):
            return NotFound("graph")
        key = scope.versions(graph_id)
        found = await self._engine.transport.command(
            key, "ZRANGE", key, "+", "-", "BYLEX", "REV", "LIMIT", "0", "1"
        )
        if not found:
            return NotFound("graph")
        return GraphRef(graph_id, member_ident(found[0]))

    async def list_graph_versions(
        self, owner: OwnerScope, graph_id: str, query: GraphListQuery
    ) -> GraphVersionPage:
        require_graph_query(query)
        scope = self._engine.ns.scope(require_owner(owner))
        if not isinstance(graph_id, str):
            return GraphVersionPage.from_candidates([], query.limit, query.before)
        bound = "+"
        if query.before is not None:
            cursor = query.before
            bound = "(" + index_member(to_micros(cursor.published_at), cursor.graph_hash)
        key = scope.versions(graph_id)
        found = await self._engine.transport.command(
            key, "ZRANGE", key, bound, "-", "BYLEX", "REV", "LIMIT", "0", str(query.limit + 1)
        )
        versions = [
            GraphVersion(
                ref=GraphRef(graph_id, member_ident(member)),
                published_at=from_micros(member_micros(member)),
            )
            for member in found
        ]
        return GraphVersionPage.from_candidates(versions, query.limit, query.before)
