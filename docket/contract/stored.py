"""Decoding what a backend stored: the one set of read-side checks all backends share.

A backend reads bytes back from its store; these turn them into records, or into the
corruption value the contract names when the bytes are not what was written. Keeping
them here means a fix to what counts as corrupt lands in every backend at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from docket.contract.errors import CorruptEventRow, CorruptGraph
from docket.contract.validate import graph_document_id
from docket.proposals import EventListQuery
from docket.records import Event, EventPage, GraphRef, event_from_json
from docket.values import JSONDict, sha256_hex

__all__ = ["decode_event", "decode_event_page", "decode_graph"]


def decode_event(run_id: str, seq: int, data: bytes) -> Event | CorruptEventRow:
    """The event stored at ``(run_id, seq)``, or ``CorruptEventRow`` when the bytes do
    not decode or name another run or sequence (a row moved or overwritten by hand)."""
    try:
        event = event_from_json(data)
    except (ValueError, TypeError, KeyError) as exc:
        return CorruptEventRow(seq, str(exc))
    if event.run_id != run_id or event.seq != seq:
        return CorruptEventRow(seq, "the stored event belongs to another run or sequence")
    return event


def decode_graph(ref: GraphRef, data: bytes) -> JSONDict | CorruptGraph:
    """The graph document stored under ``ref``, or ``CorruptGraph`` when the bytes do
    not hash to ``ref.graph_hash``, are not JSON, or declare another graph id."""
    if sha256_hex(data) != ref.graph_hash:
        return CorruptGraph("stored bytes do not hash to the graph's content hash")
    try:
        document = json.loads(data)
    except ValueError as exc:
        return CorruptGraph(f"stored bytes are not JSON: {exc}")
    if not isinstance(document, dict) or graph_document_id(document) != ref.graph_id:
        return CorruptGraph("the stored document does not declare this graph id")
    return document


def decode_event_page(
    run_id: str,
    rows: Iterable[tuple[int, bytes]],
    query: EventListQuery,
    *,
    oldest: int | None,
    newest: int | None,
    latest: int,
) -> EventPage | CorruptEventRow:
    """The ``list_events`` page made of the stored ``(seq, bytes)`` rows a backend read
    after ``query.after_seq`` (at most ``query.limit``, in order), with the run's
    ``event_seq`` (``latest``) and the oldest and newest seqs still stored; the first
    corrupt row answers instead of the page."""
    events: list[Event] = []
    for seq, data in rows:
        decoded = decode_event(run_id, seq, data)
        if isinstance(decoded, CorruptEventRow):
            return decoded
        events.append(decoded)
    return EventPage.from_candidates(
        events,
        limit=query.limit,
        after_seq=query.after_seq,
        oldest_available_seq=oldest,
        latest_available_seq=newest,
        latest_seq=latest,
    )
