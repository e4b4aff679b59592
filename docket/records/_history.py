"""State history and the live feed as records (layer 1).

History is not a second store: every checkpoint's ``checkpoint_committed`` event carries
what the checkpoint changed (``docket.core.history`` writes and folds it), so the state
at any retained checkpoint is read back from the run's own events. These are the values
that reading hands out.

The feed is what a backend pushes to subscribers while runs commit: a
:class:`CommitNotice` is only a hint that a run has new events (the events themselves
are always read from the store), an :class:`Emission` is an ephemeral message a node
sent while it ran (never stored, best effort).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Final, TypeAlias

import attrs

from docket.records._codec import RecordDecodeError, _structure, converter
from docket.records._types import CheckpointType, RunStatus
from docket.values import JSONDict, JSONValue, canonical_json

#: Where a forked run names the run and checkpoint it was forked from (``Run.metadata``).
FORKED_FROM_KEY: Final = "docket.forked_from"


@attrs.frozen(kw_only=True)
class CheckpointInfo:
    """One committed checkpoint of a run, as history lists it.

    ``changed`` are the state fields (public ids) this checkpoint wrote; ``next`` the
    nodes due after it (the pending superstep's nodes, including attempts still parked).
    ``first_event_seq``..``event_seq`` are the checkpoint's events.
    """

    checkpoint_seq: int
    checkpoint_type: CheckpointType
    status: RunStatus
    step: int
    created_at: datetime
    first_event_seq: int
    event_seq: int
    changed: tuple[str, ...] = ()
    next: tuple[str, ...] = ()
    #: True when the state at this checkpoint can be read back (its base snapshot and
    #: every event since are retained).
    readable: bool = True


@attrs.frozen(kw_only=True)
class HistoryPage:
    """A run's checkpoints, oldest first, after a cursor.

    ``oldest_available`` is the first checkpoint whose record retention kept (``None``
    when none is); checkpoints below it were pruned. ``latest`` is the run's
    ``checkpoint_seq``.
    """

    checkpoints: tuple[CheckpointInfo, ...]
    next_after: int
    has_more: bool
    oldest_available: int | None
    latest: int


@attrs.frozen(kw_only=True)
class RunSnapshot:
    """The state of a run as committed at one checkpoint.

    ``state`` maps public state-field ids to their values; ``channels`` is the full
    channel map (values, versions, join progress) a fork resumes from.
    """

    run_id: str
    graph_id: str
    graph_hash: str
    checkpoint_seq: int
    checkpoint_type: CheckpointType
    status: RunStatus
    step: int
    created_at: datetime
    event_seq: int
    state: JSONDict
    next: tuple[str, ...]
    channels: JSONDict
    changed_channels: tuple[str, ...]
    pending_nodes: tuple[str, ...]


@attrs.frozen(kw_only=True)
class CommitNotice:
    """A backend's hint that a run committed events ``first_seq..last_seq``.

    Subscribers re-read the store from their own cursor: a lost or duplicated notice
    costs latency, never correctness. ``run_id`` ``None`` means "something in the scope
    changed, re-read what you follow" (a backend that cannot tell which run).
    """

    tenant_id: str | None
    run_id: str | None
    graph_id: str | None = None
    first_seq: int = 0
    last_seq: int = 0


#: The largest emission ``data`` a backend must carry (canonical JSON bytes); larger
#: data is replaced by an overflow marker before it is published.
MAX_EMISSION_BYTES: Final = 64 * 1024


@attrs.frozen(kw_only=True)
class Emission:
    """Something a node sent while it ran (``ctx.emit``): ephemeral, best effort.

    ``seq`` orders one attempt's emissions (1, 2, ...); ``kind`` is free text such as
    ``"token"``, ``"progress"`` or ``"custom"``.
    """

    tenant_id: str | None
    run_id: str
    node_id: str
    task_id: str
    attempt: int
    seq: int
    kind: str
    data: JSONValue
    at: datetime


FeedItem: TypeAlias = CommitNotice | Emission


@attrs.frozen(kw_only=True)
class EventsPruned:
    """What a stream yields in place of events retention removed before it read them:
    seqs ``first_seq..last_seq`` of ``run_id`` are gone (the stream goes on after them)."""

    run_id: str
    first_seq: int
    last_seq: int


def bounded_emission(emission: Emission) -> Emission:
    """``emission`` with ``data`` replaced by ``{"overflow": true, "bytes": n}`` when its
    canonical JSON is over :data:`MAX_EMISSION_BYTES` (the overflow rule every feed
    shares, so a subscriber learns something was sent and how big it was)."""
    size = len(canonical_json(emission.data))
    if size <= MAX_EMISSION_BYTES:
        return emission
    return attrs.evolve(emission, data={"overflow": True, "bytes": size})


def feed_item_to_json(item: FeedItem) -> bytes:
    """The one wire encoding of a feed item (canonical JSON with a ``"k"`` tag)."""
    doc: JSONDict = converter.unstructure(item)
    doc["k"] = "notice" if isinstance(item, CommitNotice) else "emission"
    return canonical_json(doc)


def feed_item_from_json(data: bytes | str) -> FeedItem:
    """Decode :func:`feed_item_to_json`'s bytes; ``RecordDecodeError`` when malformed."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise RecordDecodeError("feed item", [f"not JSON: {exc}"]) from exc
    if not isinstance(doc, dict):
        raise RecordDecodeError("feed item", ["not a JSON object"])
    kind = doc.pop("k", None)
    if kind == "notice":
        return _structure(doc, CommitNotice)
    if kind == "emission":
        return _structure(doc, Emission)
    raise RecordDecodeError("feed item", [f"unknown kind {kind!r}"])
