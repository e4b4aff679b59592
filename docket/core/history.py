"""State history written into, and read back from, a run's own events.

Each checkpoint's ``checkpoint_committed`` event carries, in its payload, what that
checkpoint did to the run's channels: for each channel whose value, version or join
progress changed, its new version and either the whole value (``set``) or, when the new
value is a list that extends the old one, only the items added (``append``). Every
:data:`SNAPSHOT_EVERY`-th checkpoint, and a run's first, carry every channel instead
(``base``), so the state at a checkpoint can be rebuilt from the nearest retained base at
or before it, even after retention removed older events.

Why events and not a snapshot table: the events are already written atomically with the
run by every backend, paged, tenant-scoped and pruned by retention, so history needs no
new contract operation and cannot disagree with what committed. Why deltas: a chat whose
message list grows by one per step costs O(step) bytes per step, where storing the whole
state at every step (LangGraph's checkpointers) costs O(step²) over a run.

Channels change only through :func:`docket.core.moment.propose`'s ``changes`` (or in a
run's first moment), which is what lets :func:`history_payload` see both sides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Final

import attrs

from docket.records import (
    ChannelState,
    CheckpointInfo,
    CheckpointType,
    Event,
    EventType,
    Run,
    RunStatus,
)
from docket.values import JSONDict, JSONValue

__all__ = [
    "SNAPSHOT_EVERY",
    "Rebuilt",
    "checkpoint_infos",
    "history_payload",
    "rebuild_at",
    "wants_base",
]

#: A full copy of the channels every this many checkpoints (and at a run's first).
SNAPSHOT_EVERY: Final = 32

#: At most this many (estimated) bytes of values per checkpoint's history entry; values
#: past it are recorded as ``"omitted"`` (their checkpoints unreadable until the next base
#: that fits). Kept well under the stores' 1 MiB event limit: history must never make a
#: commit too large that would fit without it.
HISTORY_BUDGET: Final = 128 * 1024


def _size(value: JSONValue, limit: int) -> int:
    """An estimate of ``value``'s JSON size in bytes; stops counting past ``limit``."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass")) + 2
    if isinstance(value, list):
        total = 2
        for item in value:
            total += _size(item, limit - total) + 1
            if total > limit:
                break
        return total
    if isinstance(value, dict):
        total = 2
        for key, item in value.items():
            total += len(key) + 4 + _size(item, limit - total)
            if total > limit:
                break
        return total
    return 8


def _within_budget(channels: JSONDict) -> JSONDict:
    """``channels`` with the values past :data:`HISTORY_BUDGET` marked omitted."""
    left = HISTORY_BUDGET
    for entry in channels.values():
        assert isinstance(entry, dict)
        for key in ("set", "append"):
            if key in entry:
                left -= _size(entry[key], left)
                if left < 0:
                    del entry[key]
                    entry["omitted"] = True
    return channels


def _entry(old: ChannelState | None, new: ChannelState) -> JSONDict | None:
    if old is new:
        return None
    if old is not None and old == new:
        return None
    out: JSONDict = {"v": new.version}
    value = new.value
    if old is not None and (old.value is value or old.value == value):
        pass  # only the version or the join progress moved
    elif (
        old is not None
        and isinstance(value, list)
        and isinstance(old.value, list)
        and len(value) >= len(old.value)
        and value[: len(old.value)] == old.value
    ):
        out["append"] = value[len(old.value) :]
    else:
        out["set"] = value
    if new.barrier_seen or (old is not None and old.barrier_seen):
        out["seen"] = list(new.barrier_seen)
    return out


def _full(channel: ChannelState) -> JSONDict:
    out: JSONDict = {"v": channel.version, "set": channel.value}
    if channel.barrier_seen:
        out["seen"] = list(channel.barrier_seen)
    return out


def _next_nodes(run: Run, pending: list[JSONValue]) -> list[JSONValue]:
    if not run.active_tasks:
        return pending
    nodes = set(run.pending_nodes)
    nodes.update(task.node_id for task in run.active_tasks.values())
    return list[JSONValue](sorted(nodes))


def history_payload(before: Run, after: Run, *, base: bool) -> JSONDict:
    """The ``checkpoint_committed`` payload of the checkpoint taking ``before`` to
    ``after``: status, changed and pending channels/nodes, the nodes due next, and the
    channels (all of them when ``base``, else only those that changed)."""
    # once per commit on the hot path: kept to plain loops over the few channels
    if base:
        channels: JSONDict = {cid: _full(ch) for cid, ch in sorted(after.channels.items())}
    else:
        channels = {}
        old = before.channels
        if after.channels is not old:
            kept = 0
            for cid, ch in after.channels.items():
                previous = old.get(cid)
                if previous is ch:
                    kept += 1
                    continue
                if previous is not None:
                    kept += 1
                entry = _entry(previous, ch)
                if entry is not None:
                    channels[cid] = entry
            if kept != len(old):  # some channel of ``before`` is gone
                for cid in old.keys() - after.channels.keys():
                    channels[cid] = {"drop": True}
    pending = list[JSONValue](sorted(after.pending_nodes))
    payload: JSONDict = {
        "status": after.status.value,
        "changed": list[JSONValue](sorted(after.changed_channels)),
        "pending": pending,
        "next": _next_nodes(after, pending),
        "channels": channels,
    }
    if base:
        payload["base"] = True
    _within_budget(channels)
    return payload


def wants_base(before: Run, after: Run) -> bool:
    """Whether the checkpoint sealing ``after`` carries every channel."""
    return before.checkpoint_seq == 0 or after.checkpoint_seq % SNAPSHOT_EVERY == 0


# -- reading back -------------------------------------------------------------------------


def _is_history(event: Event) -> bool:
    """Whether ``event`` records its checkpoint's channels in full (nothing omitted)."""
    if event.type is not EventType.CHECKPOINT_COMMITTED:
        return False
    channels = event.payload.get("channels")
    if not isinstance(channels, dict):
        return False
    return not any(isinstance(e, dict) and e.get("omitted") for e in channels.values())


def _state_ids(channels: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(c[len("state:") :] for c in channels if c.startswith("state:")))


def checkpoint_infos(events: Sequence[Event]) -> list[CheckpointInfo]:
    """The checkpoints recorded in ``events`` (ascending, contiguous or not), each marked
    readable when a base at or before it is in ``events`` with no gap since."""
    out: list[CheckpointInfo] = []
    first_seq = events[0].seq if events else 0
    have_base = False
    expected: int | None = None
    for event in events:
        if event.type is not EventType.CHECKPOINT_COMMITTED:
            continue
        meta = event.metadata
        seq = meta.get("checkpoint_seq")
        kind = meta.get("checkpoint_type")
        if not isinstance(seq, int) or not isinstance(kind, str):
            first_seq = event.seq + 1
            continue
        payload = event.payload
        if expected is not None and seq != expected:
            have_base = False  # a hole (pruned): only a later base makes it readable again
        if payload.get("base") is True:
            have_base = True
        readable = have_base and _is_history(event)
        if not _is_history(event):
            have_base = False  # written before history existed
        status = payload.get("status")
        channels = payload.get("channels")
        out.append(
            CheckpointInfo(
                checkpoint_seq=seq,
                checkpoint_type=CheckpointType(kind),
                status=RunStatus(status) if isinstance(status, str) else _status_of(kind),
                step=event.step,
                created_at=event.timestamp,
                first_event_seq=first_seq,
                event_seq=event.seq,
                changed=_state_ids(channels) if isinstance(channels, dict) else (),
                next=tuple(str(n) for n in _list(payload.get("next"))),
                readable=readable,
            )
        )
        expected = seq + 1
        first_seq = event.seq + 1
    return out


def _list(value: object) -> list[JSONValue]:
    return list(value) if isinstance(value, list) else []


def _status_of(checkpoint_type: str) -> RunStatus:
    return {
        "run_completed": RunStatus.DONE,
        "run_failed": RunStatus.FAILED,
        "run_cancelled": RunStatus.CANCELLED,
        "interrupt_requested": RunStatus.WAITING,
    }.get(checkpoint_type, RunStatus.RUNNING)


@attrs.frozen(kw_only=True)
class Rebuilt:
    """The channels and scheduling state of one checkpoint, rebuilt from its events."""

    checkpoint: CheckpointInfo
    channels: dict[str, ChannelState]
    changed_channels: frozenset[str]
    pending_nodes: frozenset[str]


def rebuild_at(events: Sequence[Event], checkpoint_seq: int) -> Rebuilt | None:
    """The run as committed at ``checkpoint_seq``, folded from ``events`` (ascending), or
    ``None`` when that checkpoint is not readable from them (pruned, or never recorded)."""
    channels: dict[str, ChannelState] | None = None
    expected: int | None = None
    first_seq = events[0].seq if events else 0
    for event in events:
        if event.type is not EventType.CHECKPOINT_COMMITTED:
            continue
        begun, first_seq = first_seq, event.seq + 1
        seq = event.metadata.get("checkpoint_seq")
        if not isinstance(seq, int):
            channels = None
            continue
        if seq > checkpoint_seq:
            break
        payload = event.payload
        if expected is not None and seq != expected:
            channels = None
        expected = seq + 1
        delta = payload.get("channels")
        if not isinstance(delta, dict) or not _is_history(event):
            channels = None
            continue
        if payload.get("base") is True:
            channels = {}
        if channels is None:
            continue
        _apply(channels, delta)
        if seq == checkpoint_seq:
            info = checkpoint_infos([event])[0]
            return Rebuilt(
                checkpoint=attrs.evolve(info, first_event_seq=begun),
                channels=channels,
                changed_channels=frozenset(str(c) for c in _list(payload.get("changed"))),
                pending_nodes=frozenset(str(n) for n in _list(payload.get("pending"))),
            )
    return None


def _apply(channels: dict[str, ChannelState], delta: Mapping[str, JSONValue]) -> None:
    for cid, entry in delta.items():
        if not isinstance(entry, dict):
            continue
        if entry.get("drop") is True:
            channels.pop(cid, None)
            continue
        old = channels.get(cid)
        version = entry.get("v")
        if "set" in entry:
            value: JSONValue = entry["set"]
        elif "append" in entry:
            base = old.value if old is not None and isinstance(old.value, list) else []
            value = [*base, *_list(entry["append"])]
        else:
            value = None if old is None else old.value
        if "seen" in entry:
            seen = tuple(str(s) for s in _list(entry["seen"]))
        else:
            seen = () if old is None else old.barrier_seen
        channels[cid] = ChannelState(
            channel_id=cid,
            value=value,
            version=version if isinstance(version, int) else (0 if old is None else old.version),
            barrier_seen=seen,
        )


def created_at_of(events: Sequence[Event]) -> datetime | None:
    """When the first of ``events`` was committed (``None`` for none)."""
    return events[0].timestamp if events else None
