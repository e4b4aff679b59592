"""The adapter's reads, each one (read-only) transaction body: one snapshot per call."""

from __future__ import annotations

from docket.contract.errors import CorruptEventRow, CorruptGraph, NotFound
from docket.contract.kv._keys import (
    DIGEST_BYTES,
    EVENT,
    GRAPH,
    OWNER_RUNS,
    RUNS,
    VERSION,
    after,
    graph_handle,
    owner_handle,
    read_time8,
    run_handle,
    seq8,
    text,
    time8,
    untext,
)
from docket.contract.kv._tx import Tx
from docket.contract.proposals import EventListQuery, GraphListQuery, RunListQuery
from docket.contract.stored import decode_event, decode_graph
from docket.records import (
    MAX_COUNTER,
    Event,
    EventPage,
    GraphRef,
    GraphVersion,
    GraphVersionPage,
    OwnerScope,
    RunInfo,
    RunPage,
    RunSummary,
    Scope,
    System,
    run_from_json,
)
from docket.values import JSONDict

# -- runs -----------------------------------------------------------------------------------


def fetch_run(tx: Tx, owner: OwnerScope, run_id: str) -> bytes | None:
    handle = run_handle(owner, run_id)
    return None if tx.head(handle) is None else tx.doc(handle)


def inspect_run(tx: Tx, owner: OwnerScope, run_id: str) -> RunInfo | NotFound:
    handle = run_handle(owner, run_id)
    head = tx.head(handle)
    if head is None:
        return NotFound()
    return RunInfo(
        run=run_from_json(tx.doc(handle)),
        tenant_id=head.tenant,
        wake_at=head.wake_at,
        claimed_at=head.claimed_at,
        claim_attempts=head.claim_attempts,
        claim_abandons=head.claim_abandons,
        poisoned_at=head.poisoned_at,
        poison_reason=head.poison_reason,
        latest_checkpoint_type=head.checkpoint_type,
    )


def list_runs(tx: Tx, scope: Scope, query: RunListQuery) -> RunPage:
    """Newest first by ``(started_at, id)``: a reverse scan of the scope's run index,
    filtered through each run's head until the page (and one more) is full."""
    prefix = RUNS if isinstance(scope, System) else OWNER_RUNS + owner_handle(scope)
    end = after(prefix)
    if query.before is not None:
        end = prefix + time8(query.before.started_at) + text(query.before.run_id)
    found: list[RunSummary] = []
    entries = tx.scan(prefix, end, reverse=True)
    try:
        for key, value in entries:
            handle = key[-DIGEST_BYTES:] if value == b"" else value
            head = tx.head(handle)
            if head is None:
                continue
            if (
                (query.graph_id is None or head.graph_id == query.graph_id)
                and (query.graph_hash is None or head.graph_hash == query.graph_hash)
                and (query.statuses is None or head.status in query.statuses)
            ):
                found.append(head.summary())
                if len(found) > query.limit:
                    break
    finally:
        entries.close()
    return RunPage.from_candidates(found, query.limit, query.before)


# -- events ---------------------------------------------------------------------------------


def _event(run_id: str, key: bytes, value: bytes) -> Event | CorruptEventRow:
    return decode_event(run_id, int.from_bytes(key[-8:], "big"), value[32:])


def fetch_event(
    tx: Tx, owner: OwnerScope, run_id: str, seq: int
) -> Event | NotFound | CorruptEventRow:
    handle = run_handle(owner, run_id)
    if tx.head(handle) is None:
        return NotFound()
    key = EVENT + handle + seq8(min(seq, MAX_COUNTER))  # no stored seq is past MAX_COUNTER
    value = tx.get(key)
    return NotFound("event") if value is None else _event(run_id, key, value)


def fetch_latest_event(
    tx: Tx, owner: OwnerScope, run_id: str
) -> Event | NotFound | CorruptEventRow | None:
    handle = run_handle(owner, run_id)
    if tx.head(handle) is None:
        return NotFound()
    prefix = EVENT + handle
    for key, value in tx.scan(prefix, after(prefix), reverse=True, limit=1):
        return _event(run_id, key, value)
    return None


def list_events(
    tx: Tx, owner: OwnerScope, run_id: str, query: EventListQuery
) -> EventPage | NotFound | CorruptEventRow:
    handle = run_handle(owner, run_id)
    head = tx.head(handle)
    if head is None:
        return NotFound()
    prefix = EVENT + handle
    bounds = [
        int.from_bytes(key[-8:], "big")
        for reverse in (False, True)
        for key, _ in tx.scan(prefix, after(prefix), reverse=reverse, limit=1)
    ]
    events: list[Event] = []
    start = prefix + seq8(min(query.after_seq, MAX_COUNTER) + 1)
    for key, value in tx.scan(start, after(prefix), limit=query.limit):
        decoded = _event(run_id, key, value)
        if isinstance(decoded, CorruptEventRow):
            return decoded
        events.append(decoded)
    return EventPage.from_candidates(
        events,
        limit=query.limit,
        after_seq=query.after_seq,
        oldest_available_seq=bounds[0] if bounds else None,
        latest_available_seq=bounds[-1] if bounds else None,
        latest_seq=head.event_seq,
    )


# -- graphs ---------------------------------------------------------------------------------


def fetch_graph(tx: Tx, owner: OwnerScope, ref: GraphRef) -> JSONDict | NotFound | CorruptGraph:
    stored = tx.get(GRAPH + graph_handle(owner, ref.graph_id) + text(ref.graph_hash))
    return NotFound("graph") if stored is None else decode_graph(ref, stored[8:])


def list_graph_versions(
    tx: Tx, owner: OwnerScope, graph_id: str, query: GraphListQuery
) -> GraphVersionPage:
    """Newest first by ``(published_at, graph_hash)``: a reverse scan of the version index."""
    prefix = VERSION + graph_handle(owner, graph_id)
    end = after(prefix)
    if query.before is not None:
        end = prefix + time8(query.before.published_at) + text(query.before.graph_hash)
    versions = []
    for key, _ in tx.scan(prefix, end, reverse=True, limit=query.limit + 1):
        graph_hash = untext(key[len(prefix) + 8 :])
        published = read_time8(key[len(prefix) : len(prefix) + 8])
        versions.append(GraphVersion(ref=GraphRef(graph_id, graph_hash), published_at=published))
    return GraphVersionPage.from_candidates(versions, query.limit, query.before)
