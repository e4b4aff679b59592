"""The one storage encoding (layer 1): records to canonical JSON bytes and back, with
the fast paths for run documents and events that every backend stores."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final, cast

import attrs
import cattrs
import orjson

from docket.records._types import (
    _R,
    MAX_COUNTER,
    ChannelState,
    Event,
    EventType,
    InterruptState,
    PendingWrite,
    Run,
    RunFailure,
    RunStatus,
    TaskState,
    TimerState,
)
from docket.values import (
    JSONDict,
    JSONValue,
    canonical_json,
    canonical_json_of_checked,
    durable_errors,
    encoder_for,
    to_micros,
    utc,
)

# -- the one storage encoding --------------------------------------------------------------


def format_timestamp(moment: datetime) -> str:
    """UTC, always six fractional digits, ``Z`` suffix: sorts and compares as text.

    ``isoformat`` rather than ``strftime``: ``%Y`` does not pad years before 1000, and
    such text neither sorts nor parses back.
    """
    global _recent_stamps
    if moment.__class__ is datetime and moment.tzinfo is UTC:
        # A commit formats the same few datetime objects again and again (its events all
        # carry one ``now``, which is also the run's updated_at): the last two are kept.
        # An exact UTC datetime is immutable, so the same object always reads the same.
        recent = _recent_stamps  # one read: another thread may swap the tuple meanwhile
        if recent[0] is moment:
            return recent[1]
        if recent[2] is moment:
            return recent[3]
        # Already UTC (every timestamp docket makes): the same text in one call.
        text = moment.isoformat(timespec="microseconds")[:-6] + "Z"
        _recent_stamps = (moment, text, recent[0], recent[1])
        return text
    return utc(moment).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


#: (datetime, text, datetime, text): the two exact UTC datetimes format_timestamp last
#: formatted, newest first.
_recent_stamps: tuple[object, str, object, str] = (None, "", None, "")


def parse_timestamp(text: str) -> datetime:
    if not isinstance(text, str) or not text.endswith("Z"):
        raise ValueError(f"timestamp must be an ISO-8601 UTC string ending in Z, got {text!r}")
    return utc(datetime.fromisoformat(text[:-1] + "+00:00"))


def _is_durable_alias(tp: object) -> bool:
    return tp is JSONValue or tp is JSONDict


def _structure_durable(value: object, tp: object) -> JSONValue:
    errors = durable_errors(value)
    if errors:
        raise ValueError("; ".join(errors))
    if tp is JSONDict and not isinstance(value, dict):
        raise ValueError(f"expected an object, got {type(value).__name__}")
    return cast(JSONValue, value)  # validated as durable just above


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook_func(_is_durable_alias, _structure_durable)
    conv.register_unstructure_hook_func(_is_durable_alias, lambda value: value)
    conv.register_unstructure_hook_func(
        lambda tp: isinstance(tp, type) and issubclass(tp, StrEnum), lambda value: value.value
    )
    conv.register_unstructure_hook(datetime, format_timestamp)
    conv.register_structure_hook(datetime, lambda value, _: parse_timestamp(value))
    conv.register_unstructure_hook_func(
        lambda tp: getattr(tp, "__origin__", None) is frozenset or tp is frozenset,
        lambda value: sorted(value),
    )
    return conv


#: cattrs converter for every record in this module (durable dict form, strict on load).
converter: Final = _make_converter()


class RecordDecodeError(ValueError):
    """Stored data that does not decode to the record it claims to be (every reason)."""

    def __init__(self, record: str, reasons: list[str]) -> None:
        self.reasons = tuple(reasons)
        super().__init__(f"not a valid {record}: " + "; ".join(reasons))


def _structure(data: object, cls: type[_R]) -> _R:
    if not isinstance(data, Mapping):
        raise RecordDecodeError(cls.__name__, [f"expected an object, got {type(data).__name__}"])
    try:
        return converter.structure(dict(data), cls)
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        reasons = (
            cattrs.transform_error(exc)
            if isinstance(exc, cattrs.BaseValidationError)
            else [str(exc)]
        )
        raise RecordDecodeError(cls.__name__, reasons) from exc


def run_to_dict(run: Run) -> JSONDict:
    data: JSONDict = converter.unstructure(run)
    return data


def run_from_dict(data: Mapping[str, object]) -> Run:
    if isinstance(data, Mapping):
        try:
            fast = _plain_run(data)
        except Exception:  # whatever the shortcut trips on, the general decoder words it
            fast = None
        if fast is not None:
            return fast
    return _structure(data, Run)


_RUN_KEYS: Final = frozenset(attrs.fields_dict(Run))
_CHANNEL_KEYS: Final = frozenset(attrs.fields_dict(ChannelState))


# ``Any`` below, not ``cast``: typing.cast is a call, and these run per stored value.
def _plain_str(value: Any) -> str:
    if value.__class__ is not str:
        raise TypeError("not an exact str")
    return value


def _plain_int(value: Any) -> int:
    if value.__class__ is not int:
        raise TypeError("not an exact int")
    return value


def _plain_durable(value: Any) -> Any:
    if durable_errors(value):
        raise ValueError("not a durable value")
    return value


def _plain_object(value: Any) -> JSONDict:
    if value.__class__ is not dict or durable_errors(value):
        raise ValueError("not a durable object")
    return value


def _plain_strs(value: Any) -> list[str]:
    if value.__class__ is not list:
        raise TypeError("not a list")
    for item in value:
        if item.__class__ is not str:
            raise TypeError("not a list of exact str")
    return value


#: Exact types that are durable on their own (floats are checked: NaN is not durable).
_SCALARS: Final = frozenset({str, int, bool, type(None)})


def _plain_empty_list(value: Any) -> tuple[str, ...]:
    if value.__class__ is not list:
        raise TypeError("not a list")
    return ()


def _plain_channels(channels: Any) -> dict[str, ChannelState]:
    if channels.__class__ is not dict:
        raise TypeError("not an object")
    out: dict[str, ChannelState] = {}
    for key, fields in channels.items():
        if fields.__class__ is not dict or fields.keys() != _CHANNEL_KEYS:
            raise TypeError("not a plain channel object")
        value = fields["value"]
        seen = fields["barrier_seen"]
        out[_plain_str(key)] = ChannelState(
            channel_id=_plain_str(fields["channel_id"]),
            value=value if value.__class__ in _SCALARS else _plain_durable(value),
            version=_plain_int(fields["version"]),
            barrier_seen=tuple(_plain_strs(seen)) if seen else _plain_empty_list(seen),
        )
    return out


def _plain_run(data: Mapping[str, Any]) -> Run | None:
    """The run document the common way, or ``None`` to leave it to cattrs.

    A stored run is nearly always the exact shape :func:`run_to_dict` writes: every key,
    exact ``str``/``int``/``list``/``dict`` values. For that shape this builds the same
    :class:`Run` cattrs would (exact values pass cattrs' ``str()``/``int()`` unchanged)
    at a fraction of the cost; anything else (a missing or extra key, a subclass, a bad
    value) raises or answers ``None``, and the caller takes the general decoder, which
    alone words the errors. The rarer collections go through cattrs' own hooks.
    """
    if data.keys() != _RUN_KEYS:
        return None
    output, failure, finished = data["output"], data["failure"], data["finished_at"]
    return Run(
        id=_plain_str(data["id"]),
        graph_id=_plain_str(data["graph_id"]),
        graph_hash=_plain_str(data["graph_hash"]),
        status=RunStatus(_plain_str(data["status"])),
        started_at=parse_timestamp(_plain_str(data["started_at"])),
        updated_at=parse_timestamp(_plain_str(data["updated_at"])),
        input=_plain_object(data["input"]),
        output=None if output is None else _plain_object(output),
        failure=None if failure is None else converter.structure(failure, RunFailure),
        finished_at=None if finished is None else parse_timestamp(_plain_str(finished)),
        step=_plain_int(data["step"]),
        channels=_plain_channels(data["channels"]),
        changed_channels=frozenset(_plain_strs(data["changed_channels"])),
        pending_nodes=frozenset(_plain_strs(data["pending_nodes"])),
        active_tasks=converter.structure(data["active_tasks"], dict[str, TaskState]),
        pending_writes=converter.structure(data["pending_writes"], tuple[PendingWrite, ...]),
        interrupts=converter.structure(data["interrupts"], dict[str, InterruptState]),
        timers=converter.structure(data["timers"], dict[str, TimerState]),
        checkpoint_seq=_plain_int(data["checkpoint_seq"]),
        event_seq=_plain_int(data["event_seq"]),
        metadata=_plain_object(data["metadata"]),
    )


def run_to_json(run: Run) -> bytes:
    document = _plain_run_document(run)
    if document is None:
        return canonical_json(run_to_dict(run))
    data, orjson_ok = document
    if orjson_ok:
        try:
            return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # e.g. a lone surrogate: the json module decides, as canonical_json
            pass
    return canonical_json_of_checked(data)


def _plain_run_document(run: Run) -> tuple[dict[str, Any], bool] | None:
    """``run_to_dict(run)`` for the common shape, with the encoder canonical_json would
    pick for it, or ``None`` to leave the run to the general path.

    canonical_json walks the whole document; here the members this function builds are
    checked by exact type as they are built, and only the durable values (input, output,
    metadata, channel values) are walked, each at the depth it sits at in the document.
    Runs with a superstep in flight, interrupts, a failure or any value of unusual make
    take the general path.
    """
    if (
        run.__class__ is not Run
        or run.active_tasks.__class__ is not dict
        or run.active_tasks
        or run.pending_writes.__class__ is not tuple
        or run.pending_writes
        or run.interrupts.__class__ is not dict
        or run.interrupts
        or run.timers.__class__ is not dict
        or run.timers
        or run.failure is not None
        or run.status.__class__ is not RunStatus
        or run.channels.__class__ is not dict
    ):
        return None
    try:
        verdicts = [
            encoder_for(run.input, 1) if run.input.__class__ is dict else None,
            encoder_for(run.metadata, 1) if run.metadata.__class__ is dict else None,
            True if run.output is None else encoder_for(run.output, 1),
        ]
        if run.output.__class__ not in (dict, type(None)):
            return None
        channels: dict[str, Any] = {}
        for key, channel in run.channels.items():
            if (
                key.__class__ is not str
                or key[:1] == "$"
                or channel.__class__ is not ChannelState
                or channel.channel_id.__class__ is not str
                or channel.barrier_seen.__class__ is not tuple
            ):
                return None
            value = channel.value
            version = channel.version
            if value.__class__ not in _TEXT_LEAVES:  # None, bool and str need no walk
                verdicts.append(encoder_for(value, 3))
            if version.__class__ is not int or not 0 <= version <= MAX_COUNTER:
                return None
            seen = channel.barrier_seen
            channels[key] = {
                "channel_id": channel.channel_id,
                "value": value,
                "version": version,
                "barrier_seen": _plain_list(seen) if seen else [],
            }
        if not (
            run.id.__class__ is str
            and run.graph_id.__class__ is str
            and run.graph_hash.__class__ is str
            and run.changed_channels.__class__ is frozenset
            and run.pending_nodes.__class__ is frozenset
        ):
            return None
        finished = run.finished_at
        data: dict[str, Any] = {
            "id": run.id,
            "graph_id": run.graph_id,
            "graph_hash": run.graph_hash,
            "status": run.status,
            "started_at": format_timestamp(run.started_at),
            "updated_at": format_timestamp(run.updated_at),
            "input": run.input,
            "output": run.output,
            "failure": None,
            "finished_at": None if finished is None else format_timestamp(finished),
            "step": run.step,
            "channels": channels,
            "changed_channels": _plain_list(sorted(run.changed_channels)),
            "pending_nodes": _plain_list(sorted(run.pending_nodes)),
            "active_tasks": {},
            "pending_writes": [],
            "interrupts": {},
            "timers": {},
            "checkpoint_seq": run.checkpoint_seq,
            "event_seq": run.event_seq,
            "metadata": run.metadata,
        }
        verdicts += [_plain_counter(run.step), _plain_counter(run.checkpoint_seq)]
        verdicts.append(_plain_counter(run.event_seq))
    except Exception:  # e.g. a naive timestamp, or junk where a record belongs
        return None
    if None in verdicts:
        return None
    return data, all(verdicts)


_TEXT_LEAVES: Final = frozenset({str, bool, type(None)})


def _plain_counter(value: object) -> bool | None:
    """A counter the document can carry as is: exact int (orjson takes 64-bit ones)."""
    return encoder_for(value) if value.__class__ is int else None


def _plain_list(texts: Sequence[object]) -> list[str]:
    """``list(texts)``, refusing anything but exact ``str`` items (raises TypeError)."""
    out = list(texts)
    for text in out:
        if text.__class__ is not str:
            raise TypeError("not an exact str")
    return cast(list[str], out)


def run_from_json(data: bytes | str) -> Run:
    return run_from_dict(json.loads(data))


def event_to_dict(event: Event) -> JSONDict:
    data: JSONDict = converter.unstructure(event)
    return data


def event_from_dict(data: Mapping[str, object]) -> Event:
    return _structure(data, Event)


def event_to_json(event: Event) -> bytes:
    return canonical_json(event_to_dict(event))


def event_from_json(data: bytes | str) -> Event:
    return event_from_dict(json.loads(data))


def event_content(event: Event) -> bytes:
    """Canonical bytes that define event equality (``run_id``/``seq`` are the key)."""
    return canonical_json(
        {
            "type": str(event.type),
            "step": event.step,
            "node_id": event.node_id,
            "channel_id": event.channel_id,
            "task_id": event.task_id,
            "payload": event.payload,
            "metadata": event.metadata,
            "timestamp_us": to_micros(event.timestamp),
        }
    )


def _text_json(value: Any) -> bytes:
    """Canonical JSON of an exact ``str`` or ``None``; anything else raises TypeError."""
    if value is None:
        return b"null"
    if value.__class__ is not str:
        raise TypeError("not an exact str")
    return orjson.dumps(value)  # TypeError on a lone surrogate, like any odd text


_EVENT_TYPE_JSON: Final = {t: orjson.dumps(t.value) for t in EventType}


def event_encodings(event: Event) -> tuple[bytes, bytes, int]:
    """``(event_to_json(event), event_content(event), size)`` in one pass, where ``size``
    is ``len(canonical_json(payload)) + len(canonical_json(metadata))``.

    Canonical JSON of an object is its sorted members' canonical pieces joined, so the
    payload and metadata are encoded once and spliced into both documents. Events of
    unusual make (subclassed values, text no encoder takes) take the general functions,
    which also raise exactly as they always have.
    """
    try:
        return _spliced(event, canonical_json(event.payload), canonical_json(event.metadata))
    except Exception:  # the general encoders raise (or not) exactly as they always have
        content = event_content(event)
        size = len(canonical_json(event.payload)) + len(canonical_json(event.metadata))
        return event_to_json(event), content, size


def _spliced(event: Event, payload: bytes, metadata: bytes) -> tuple[bytes, bytes, int]:
    """The stored JSON and the content of ``event`` around its encoded payload and
    metadata; raises (TypeError, ValueError, ...) for anything but the usual make."""
    moment = event.timestamp
    kind = _EVENT_TYPE_JSON[event.type]
    if event.type.__class__ is not EventType or moment.__class__ is not datetime:
        raise TypeError("not an exact event type or datetime")
    head = b"".join(
        (
            b'{"channel_id":',
            _text_json(event.channel_id),
            b',"metadata":',
            metadata,
            b',"node_id":',
            _text_json(event.node_id),
            b',"payload":',
            payload,
        )
    )
    step = b',"step":%d,"task_id":' % _plain_int(event.step) + _text_json(event.task_id)
    document = b"".join(
        (
            head,
            b',"run_id":',
            _text_json(event.run_id),
            b',"seq":%d' % _plain_int(event.seq),
            step,
            b',"timestamp":"',
            format_timestamp(moment).encode(),
            b'","type":',
            kind,
            b"}",
        )
    )
    content = b"".join((head, step, b',"timestamp_us":%d,"type":' % to_micros(moment), kind, b"}"))
    return document, content, len(payload) + len(metadata)
