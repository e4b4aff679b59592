"""Decoding what a backend stored: the one set of read-side checks all backends share.

A backend reads bytes back from its store; these turn them into records, or into the
corruption value the contract names when the bytes are not what was written. Keeping
them here means a fix to what counts as corrupt lands in every backend at once.
"""

from __future__ import annotations

import json

from docket.contract.errors import CorruptEventRow, CorruptGraph
from docket.contract.validate import graph_document_id
from docket.records import Event, GraphRef, event_from_json
from docket.values import JSONDict, sha256_hex

__all__ = ["decode_event", "decode_graph"]


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
