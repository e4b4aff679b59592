"""The hot-path encoders and decoders agree with the general ones, on good and bad input.

``run_to_json``, ``run_from_dict``, ``event_encodings``, ``checked_event_encodings``,
``format_timestamp`` and ``utc``
each take a shortcut for the common shape (exact types, UTC timestamps) and hand anything
else to the general path. The references below are the general definitions spelled out
(cattrs plus ``canonical_json`` of the whole document); the shortcuts must give the same
bytes, the same records and the same errors.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from functools import partial
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docket import records
from docket import values as values_module
from docket.records import (
    ChannelState,
    Event,
    EventType,
    InterruptState,
    InterruptStatus,
    Run,
    RunFailure,
    RunStatus,
    checked_event_encodings,
    converter,
    event_content,
    event_encodings,
    event_problems,
    event_to_json,
    format_timestamp,
    run_from_dict,
    run_to_dict,
    run_to_json,
)
from docket.values import NonDurableValue, canonical_json, durable_errors, to_micros, utc


class Tag(str):
    """A str subclass: durable, but not the exact type the shortcuts take."""


class Zero(tzinfo):
    """UTC by offset, but not the ``UTC`` singleton the shortcuts recognise."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return "Zero"


class Color(enum.StrEnum):
    RED = "red"


def outcome(fn: Callable[[], object]) -> tuple[str, object]:
    """A call's result, or its error as (type, message), so two paths compare fully."""
    try:
        return ("ok", fn())
    except Exception as exc:  # comparing failures is the point
        reasons = getattr(exc, "reasons", None)
        return (type(exc).__name__, reasons if reasons is not None else str(exc))


text = st.text(st.characters(codec=None), max_size=6)  # lone surrogates included
ids = st.sampled_from(["a", "n1", "edge:e0", "é", "\U0001f600", ""]) | text | st.builds(Tag, text)
leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats()
    | text
    | st.sampled_from([Color.RED, (1, 2), 1 << 64, 1.0, 1e16, "$ref"])
)
keys = text | st.sampled_from(["$guard", "$ref", "a", "b"])
durable = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=8,
)
objects = st.dictionaries(keys, durable, max_size=3)


def deep(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


moments = st.builds(
    lambda micros, offset: (
        datetime(2026, 1, 1, tzinfo=UTC).astimezone(offset) + timedelta(microseconds=micros)
    ),
    st.integers(min_value=-(10**15), max_value=10**15),
    st.sampled_from([UTC, Zero(), timezone(timedelta(hours=2))]),
) | st.sampled_from([datetime(2026, 1, 1), datetime(1, 1, 1, tzinfo=UTC)])  # naive; year 1


def reference_timestamp(moment: datetime) -> str:
    return utc(moment).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


@settings(max_examples=300, deadline=None)
@given(moments)
def test_format_timestamp_matches_the_general_formula(moment: datetime) -> None:
    assert outcome(lambda: format_timestamp(moment)) == outcome(lambda: reference_timestamp(moment))
    if moment.tzinfo is not None:
        assert utc(moment) == moment and utc(moment).tzinfo is UTC
        assert to_micros(moment) == to_micros(moment.astimezone(timezone(timedelta(hours=3))))


events = st.builds(
    Event,
    run_id=ids,
    seq=st.integers(min_value=1, max_value=10**6) | st.sampled_from([True, 1 << 70, 0, -1]),
    type=st.sampled_from(list(EventType)) | st.just("node_completed"),
    step=st.integers(min_value=0, max_value=10**6) | st.sampled_from([False, -1, 1 << 63]),
    timestamp=moments,
    node_id=st.none() | ids,
    channel_id=st.none() | ids,
    task_id=st.none() | ids,
    payload=objects | st.just({"attempt": 1}),
    metadata=objects | st.just({}),
)


@settings(max_examples=400, deadline=None)
@given(events)
def test_event_encodings_match_the_general_encoders(event: Event) -> None:
    def reference() -> tuple[bytes, bytes, int]:
        content = event_content(event)
        size = len(canonical_json(event.payload)) + len(canonical_json(event.metadata))
        return event_to_json(event), content, size

    assert outcome(lambda: event_encodings(event)) == outcome(reference)


USUAL = Event(
    run_id="r",
    seq=3,
    type=EventType.NODE_COMPLETED,
    step=2,
    timestamp=datetime(2026, 7, 15, 12, tzinfo=UTC),
    node_id="n",
    task_id="r:2:n",
    payload={"attempt": 1},
)
# A usual event with one member swapped for something else: the shortcut's every condition.
one_odd_member = st.one_of(
    *(
        st.builds(lambda v, name=name: attrs.evolve(USUAL, **{name: v}), strategy)
        for name, strategy in [
            ("run_id", st.sampled_from(["", "x", Tag("r")])),
            ("seq", st.sampled_from([0, -1, True, 1 << 63, 1 << 70])),
            ("step", st.sampled_from([-1, False, 1 << 63])),
            ("type", st.just("node_completed")),
            ("timestamp", moments),
            ("node_id", st.sampled_from(["", Tag("n"), 1, None])),
            ("channel_id", st.sampled_from(["", "\ud800", 1])),
            ("task_id", st.sampled_from(["", Tag("t")])),
            ("payload", objects | st.sampled_from([[], {"$guard": 1}])),
            ("metadata", objects | st.sampled_from([None, {"a": deep(130)}])),
        ]
    )
)


@settings(max_examples=400, deadline=None)
@given(
    events | one_odd_member,
    st.sampled_from(["r", "a", "n1", "", "x"]) | st.builds(Tag, st.just("r")),
)
def test_checked_event_encodings_match_problems_then_encodings(event: Event, run_id: str) -> None:
    def shortcut() -> object:
        found = checked_event_encodings(event, run_id)
        return event_encodings(event) if found is None else found

    def reference() -> object:
        return event_problems(event, run_id) or event_encodings(event)

    assert outcome(shortcut) == outcome(reference)


def test_checked_event_encodings_takes_the_shortcut_for_a_usual_event() -> None:
    event = Event(
        run_id="r",
        seq=3,
        type=EventType.NODE_COMPLETED,
        step=2,
        timestamp=datetime(2026, 7, 15, 12, tzinfo=UTC),
        node_id="n",
        task_id="r:2:n",
        payload={"attempt": 1, "x": 0.5},
        metadata={"é": ["\U0001f600"]},
    )
    assert checked_event_encodings(event, "r") == event_encodings(event)
    assert checked_event_encodings(event, "other") == event_problems(event, "other") != []


T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)


def channel(key: str, value: object, version: object, seen: tuple[object, ...]) -> ChannelState:
    # deliberately ill-typed fields: the fast paths must refuse them as the general path does
    return ChannelState(channel_id=key, value=value, version=version, barrier_seen=seen)  # type: ignore[arg-type]


channels = st.dictionaries(
    st.sampled_from(["edge:e0", "input:value", "state:x", "$guard", "$x"]) | text,
    st.tuples(
        durable | st.just(deep(126)),
        st.integers(min_value=0, max_value=5) | st.sampled_from([1 << 63, -1, True]),
        st.just(()) | st.lists(ids, max_size=2).map(tuple),
    ),
    max_size=4,
).map(lambda found: {k: channel(k, *fields) for k, fields in found.items()})
interrupt = InterruptState(
    id="i1",
    node_id="n",
    status=InterruptStatus.OPEN,
    resume_channel="r",
    schema=None,
    created_at=T0,
)
runs = st.builds(
    Run,
    id=ids,
    graph_id=ids,
    graph_hash=st.just("h") | ids,
    status=st.sampled_from(list(RunStatus)),
    started_at=moments,
    updated_at=st.just(T0),
    input=objects | st.just({"value": 1}),
    output=st.none() | objects,
    failure=st.none() | st.just(RunFailure(code="c", message="m")),
    finished_at=st.none() | st.just(T0),
    step=st.integers(min_value=0, max_value=9) | st.just(1 << 64),
    channels=channels,
    changed_channels=st.frozensets(ids, max_size=3),
    pending_nodes=st.frozensets(ids, max_size=2),
    interrupts=st.just({}) | st.just({"i1": interrupt}),
    checkpoint_seq=st.integers(min_value=0, max_value=9),
    event_seq=st.integers(min_value=0, max_value=9),
    metadata=objects,
)


@settings(max_examples=400, deadline=None)
@given(runs)
def test_run_to_json_matches_canonical_json_of_the_whole_document(run: Run) -> None:
    assert outcome(lambda: run_to_json(run)) == outcome(
        lambda: canonical_json(converter.unstructure(run))
    )


def test_run_to_json_shortcut_is_taken_and_exact_for_a_plain_run() -> None:
    run = Run(
        id="r",
        graph_id="g",
        graph_hash="h",
        status=RunStatus.RUNNING,
        started_at=T0,
        updated_at=T0,
        input={"value": 1.5, "text": "é"},
        channels={"edge:e0": channel("edge:e0", [1, {"b": None}], 2, ("a", "b"))},
        changed_channels=frozenset({"edge:e0"}),
    )
    found = records._plain_run_document(run)
    assert found is not None
    data, orjson_ok = found
    assert data == run_to_dict(run) and orjson_ok is False  # a float: the json module
    assert run_to_json(run) == canonical_json(run_to_dict(run))


def mutated(document: dict[str, Any], where: str, value: object) -> dict[str, Any]:
    """``document`` with one member replaced (``channels.<key>.<field>`` reaches a channel)."""
    copy: dict[str, Any] = json.loads(json.dumps(document))
    path = where.split(".")
    target = copy
    for part in path[:-1]:
        target = target[part] if part in target else next(iter(target.values()), {})
    if value is DROP:
        target.pop(path[-1], None)
    else:
        target[path[-1]] = value
    return copy


DROP = object()
odd_values = st.sampled_from(
    [DROP, None, 1, True, "5", "x", 1.5, [], ["a", 1], {}, {"$x": 1}, "2026-07-15T12:00:00Z"]
) | st.builds(Tag, text)
places = st.sampled_from(
    [
        "id",
        "status",
        "started_at",
        "finished_at",
        "input",
        "output",
        "failure",
        "step",
        "channels",
        "changed_channels",
        "pending_nodes",
        "active_tasks",
        "pending_writes",
        "interrupts",
        "timers",
        "event_seq",
        "metadata",
        "extra",
        "channels.x.channel_id",
        "channels.x.value",
        "channels.x.version",
        "channels.x.barrier_seen",
        "channels.x.extra",
    ]
)


@settings(max_examples=300, deadline=None)
@given(runs, places, odd_values)
def test_run_from_dict_matches_cattrs_on_stored_and_damaged_documents(
    run: Run, where: str, value: object
) -> None:
    stored = outcome(lambda: json.loads(run_to_json(run)))
    if stored[0] != "ok":
        return  # not encodable: nothing stored to decode
    document = stored[1]
    assert isinstance(document, dict)
    for candidate in (document, mutated(document, where, value)):
        assert outcome(partial(run_from_dict, candidate)) == outcome(
            partial(records._structure, candidate, Run)
        )


def nested(levels: int, innermost: object) -> object:
    value = innermost
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value


def test_the_depth_limit_is_the_same_for_empty_and_full_innermost_containers() -> None:
    """The classifier settles empty containers without a call; the depth limit must hold
    for them exactly as for any other container (the reference is the path walk)."""
    for levels in range(124, 131):
        for innermost in ({}, [], {"a": 1}, [1], 1):
            value = nested(levels, innermost)
            reasons: list[str] = []
            values_module._walk(value, "$", reasons, False)
            assert durable_errors(value) == reasons
            if reasons:
                with pytest.raises(NonDurableValue) as refused:
                    canonical_json(value)
                assert list(refused.value.reasons) == reasons
            else:
                expected = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
                assert canonical_json(value) == expected
