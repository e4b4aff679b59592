"""Graph publication: GRAPH-CONTENT-ADDRESS-AND-VERSIONS."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from docket.contract import (
    GraphListQuery,
    InvalidGraph,
    NotFound,
)
from docket.records import TENANTLESS, GraphRef, GraphVersion, GraphVersionCursor, OwnerScope
from docket.values import content_hash
from docket_contract_tests.fixtures import graph_document, graph_ref
from docket_contract_tests.kit import Kit, invariant


async def _tick(k: Kit) -> None:
    """Let the backend's clock move on (a manual clock is advanced by a second)."""
    if k.subject.clock is not None:
        k.subject.clock.advance(timedelta(seconds=1))


async def _save(k: Kit, owner: OwnerScope, variant: int) -> GraphVersion:
    document = graph_document(k.name("g"), variant)
    ref = graph_ref(document)
    before = await k.b.now()
    version = k.isa(
        await k.b.graphs.save_graph(owner, ref, document), GraphVersion, f"save v{variant}"
    )
    after = await k.b.now()
    k.eq(version.ref, ref, "save_graph answers the saved ref")
    k.check(
        before <= version.published_at <= after,
        f"published_at {version.published_at} comes from the backend clock "
        f"(between {before} and {after})",
    )
    return version


def _newest_first(versions: list[GraphVersion]) -> list[GraphVersion]:
    return sorted(versions, key=lambda v: (v.published_at, v.ref.graph_hash), reverse=True)


@invariant("GRAPH-CONTENT-ADDRESS-AND-VERSIONS")
async def test_versions_newest_first_with_paging(docket_kit: Kit) -> None:
    k = docket_kit
    graph_id = k.name("g")
    first = await _save(k, TENANTLESS, 1)
    await _tick(k)
    second = await _save(k, TENANTLESS, 2)
    if k.subject.clock is not None:
        k.check(second.published_at > first.published_at, "a later save is newer")
    order = _newest_first([first, second])
    page = await k.b.graphs.list_graph_versions(TENANTLESS, graph_id, GraphListQuery(limit=5))
    k.eq(list(page.versions), order, "versions newest first by (published_at, hash)")
    k.eq(page.has_more, False, "one page holds both versions")
    latest = await k.b.graphs.fetch_latest_graph_ref(TENANTLESS, graph_id)
    k.eq(latest, order[0].ref, "the latest ref is the head of the list")
    # limit-1 paging with the exclusive cursor
    p1 = await k.b.graphs.list_graph_versions(TENANTLESS, graph_id, GraphListQuery(limit=1))
    k.eq((list(p1.versions), p1.has_more), ([order[0]], True), "page 1")
    k.eq(
        p1.next_before,
        GraphVersionCursor(order[0].published_at, order[0].ref.graph_hash),
        "page 1 cursor",
    )
    p2 = await k.b.graphs.list_graph_versions(
        TENANTLESS, graph_id, GraphListQuery(limit=1, before=p1.next_before)
    )
    k.eq((list(p2.versions), p2.has_more), ([order[1]], False), "page 2")
    p3 = await k.b.graphs.list_graph_versions(
        TENANTLESS, graph_id, GraphListQuery(limit=1, before=p2.next_before)
    )
    k.eq((p3.versions, p3.has_more), ((), False), "page 3 is empty")
    k.eq(p3.next_before, p2.next_before, "an empty page echoes the cursor")
    # an unknown graph id is an empty page, a NotFound latest
    ghost = await k.b.graphs.list_graph_versions(TENANTLESS, k.name("nope"), GraphListQuery())
    k.eq((ghost.versions, ghost.has_more), ((), False), "unknown graph: empty page")
    k.isa(
        await k.b.graphs.fetch_latest_graph_ref(TENANTLESS, k.name("nope")),
        NotFound,
        "unknown graph: latest",
    )


@invariant("GRAPH-CONTENT-ADDRESS-AND-VERSIONS")
async def test_resave_is_idempotent_and_keeps_order(docket_kit: Kit) -> None:
    k = docket_kit
    graph_id = k.name("g")
    first = await _save(k, TENANTLESS, 1)
    await _tick(k)
    second = await _save(k, TENANTLESS, 2)
    await _tick(k)
    document = graph_document(graph_id, 1)
    again = await k.b.graphs.save_graph(TENANTLESS, first.ref, document)
    k.eq(again, first, "re-saving answers the original version and published_at")
    page = await k.b.graphs.list_graph_versions(TENANTLESS, graph_id, GraphListQuery(limit=5))
    k.eq(list(page.versions), _newest_first([first, second]), "re-save does not reorder")
    k.eq(await k.b.graphs.fetch_graph(TENANTLESS, first.ref), document, "content by address")


@invariant("GRAPH-CONTENT-ADDRESS-AND-VERSIONS")
async def test_tenant_scope_starts_empty_and_is_independent(docket_kit: Kit) -> None:
    k = docket_kit
    a = k.tenant("a")
    graph_id = k.name("g")
    loose = await _save(k, TENANTLESS, 1)
    k.isa(await k.b.graphs.fetch_latest_graph_ref(a, graph_id), NotFound, "A starts empty")
    await _tick(k)
    mine = await _save(k, a, 1)
    k.eq(mine.ref, loose.ref, "the same document has the same address in every scope")
    if k.subject.clock is not None:
        k.check(mine.published_at > loose.published_at, "each scope publishes on its own")
    await _tick(k)
    await _save(k, TENANTLESS, 2)
    page = await k.b.graphs.list_graph_versions(a, graph_id, GraphListQuery(limit=5))
    k.eq(list(page.versions), [mine], "A lists only what A published")
    k.eq(await k.b.graphs.fetch_latest_graph_ref(a, graph_id), mine.ref, "A's latest")


def _renamed(document: Any, graph_id: str) -> Any:
    """The same envelope declaring another graph id."""
    return {**document, "graph": {**document["graph"], "id": graph_id}}


BAD_GRAPHS: dict[str, Any] = {
    "wrong-hash": lambda doc, ref: (doc, GraphRef(ref.graph_id, "0" * 64)),
    "hash-of-other-content": lambda doc, ref: (
        doc,
        GraphRef(ref.graph_id, content_hash({**doc, "variant": 99})),
    ),
    "id-mismatch": lambda doc, ref: (
        _renamed(doc, ref.graph_id + "x"),
        GraphRef(ref.graph_id, content_hash(_renamed(doc, ref.graph_id + "x"))),
    ),
    "not-an-envelope": lambda doc, ref: (
        doc["graph"],
        GraphRef(ref.graph_id, content_hash(doc["graph"])),
    ),
    "not-a-dict": lambda doc, ref: ([doc], ref),
    "non-durable-value": lambda doc, ref: ({**doc, "when": object()}, ref),
    "reserved-key": lambda doc, ref: ({**doc, "$secret": 1}, ref),
    "empty-graph-id": lambda doc, ref: (doc, GraphRef("", ref.graph_hash)),
    "ref-not-a-graphref": lambda doc, ref: (doc, (ref.graph_id, ref.graph_hash)),
}


@invariant("GRAPH-CONTENT-ADDRESS-AND-VERSIONS")
@pytest.mark.parametrize("defect", sorted(BAD_GRAPHS))
async def test_bad_graph_is_rejected_and_not_stored(docket_kit: Kit, defect: str) -> None:
    k = docket_kit
    document = graph_document(k.name("g"))
    good = graph_ref(document)
    bad_document, bad_ref = BAD_GRAPHS[defect](document, good)
    got = await k.b.graphs.save_graph(TENANTLESS, bad_ref, bad_document)
    k.isa(got, InvalidGraph, f"save_graph with {defect}")
    graph_id = good.graph_id
    page = await k.b.graphs.list_graph_versions(TENANTLESS, graph_id, GraphListQuery())
    k.eq(page.versions, (), f"nothing stored after {defect}")
    k.isa(await k.b.graphs.fetch_latest_graph_ref(TENANTLESS, graph_id), NotFound, "no latest ref")
    k.isa(await k.b.graphs.fetch_graph(TENANTLESS, good), NotFound, "no document")
