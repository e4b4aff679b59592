"""The state-update checks every commit runs (``coerce_durable``, schema ``validate``) skip
work on the usual values and still answer exactly as before.

``coerce_durable`` keeps exact scalars (str, bool, int, None, finite float) as they are
instead of walking each one, and a schema renders a number into a message only when the
number breaks a bound. ``_reference_coerce`` below is the general definition spelled out
(the code before the shortcut); the shortcut must give the same values and the same errors.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from docket import values as values_module
from docket.graph import schema as schema_module
from docket.graph.schema import S, validate
from docket.values import MAX_DEPTH, NonDurableValue, coerce_durable, ensure_durable


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    LOW = 1


class Tag(str):
    """A str subclass: durable, but not an exact str."""


class Count(int):
    """An int subclass: durable, but not an exact int."""


def _reference_coerce(value: object, path: str = "$", _depth: int = 0) -> object:
    """coerce_durable as it was before its shortcut for exact scalars."""
    if isinstance(value, enum.Enum):
        if isinstance(value.value, str):
            return value.value
        raise NonDurableValue([f"{path}: enum {value!r} has a non-string value"])
    if _depth >= MAX_DEPTH and isinstance(value, list | Mapping):
        raise NonDurableValue([f"{path}: lists and objects nest deeper than {MAX_DEPTH} levels"])
    if isinstance(value, list):
        return [_reference_coerce(item, f"{path}[{i}]", _depth + 1) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, object] = {}
        for key, item in value.items():
            name = key.value if isinstance(key, enum.Enum) and isinstance(key.value, str) else key
            if not isinstance(name, str):
                raise NonDurableValue([f"{path}: key {key!r} is not a string"])
            if name in out:
                raise NonDurableValue([f"{path}: key {name!r} appears twice after coercion"])
            out[name] = _reference_coerce(item, f"{path}.{name}", _depth + 1)
        return ensure_durable(out, path)
    return ensure_durable(value, path)


def _outcome(fn: Any, value: object) -> tuple[str, object]:
    try:
        result = fn(value, "update")
    except NonDurableValue as exc:
        return "error", exc.reasons
    return "ok", result


odd_leaves = st.sampled_from(
    [
        math.nan,
        math.inf,
        -math.inf,
        Color.RED,
        Level.LOW,
        Tag("t"),
        Count(3),
        (1, 2),
        {1, 2},
        b"x",
        object(),
        2**70,
        -(2**70),
    ]
)
leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5) | odd_leaves
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=3) | st.just(Color.RED), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(values)
def test_coerce_durable_answers_as_the_general_definition(value: object) -> None:
    got, want = _outcome(coerce_durable, value), _outcome(_reference_coerce, value)
    assert got[0] == want[0]
    if got[0] == "error":
        assert got[1] == want[1]
    else:
        # NaN is never an accepted leaf, so plain equality compares the whole value
        assert got[1] == want[1]
        assert type(got[1]) is type(want[1])


def test_coerce_durable_copies_containers_and_keeps_exact_scalars() -> None:
    update = {"ids": [1, 2, 3], "name": "a", "score": 0.5, "nested": {"flags": [True, None]}}
    coerced = coerce_durable(update)
    assert coerced == update
    assert isinstance(coerced, dict)
    assert coerced is not update and coerced["ids"] is not update["ids"]
    assert coerced["nested"] is not update["nested"]


def test_exact_scalars_are_not_walked_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = values_module.ensure_durable

    def counting(value: object, path: str = "$") -> object:
        calls.append(value)
        return real(value, path)

    monkeypatch.setattr(values_module, "ensure_durable", counting)
    update = {"ids": list(range(32)), "scores": [i / 3 for i in range(16)], "name": "x"}
    assert coerce_durable(update, "update") == update
    assert coerce_durable(7) == 7
    # only the one object is checked as a whole; its 49 leaves and the bare int are not
    assert len(calls) == 1 and isinstance(calls[0], dict)


def test_unusual_leaves_still_take_the_long_way() -> None:
    assert coerce_durable([Color.RED, Tag("t"), Count(2)]) == ["red", "t", 2]
    with pytest.raises(NonDurableValue) as nan:
        coerce_durable({"a": [1.0, math.nan]}, "update")
    assert nan.value.reasons == ("update.a[1]: non-finite float nan is not durable",)
    with pytest.raises(NonDurableValue, match="non-string value"):
        coerce_durable([Level.LOW])


def test_numbers_in_bounds_are_not_rendered(monkeypatch: pytest.MonkeyPatch) -> None:
    shown: list[object] = []
    real = schema_module.show

    def counting(value: object, limit: int = 120) -> str:
        shown.append(value)
        return real(value, limit)

    monkeypatch.setattr(schema_module, "show", counting)
    assert validate(S.list(S.float()), [i / 3 for i in range(16)]) == []
    assert validate(S.list(S.integer(min=0, max=100)), list(range(32))) == []
    assert validate(S.integer(), 5) == []
    assert shown == []


@pytest.mark.parametrize(
    ("schema", "value", "reasons"),
    [
        (S.integer(min=0), -1, ["value must be at least 0, got -1"]),
        (S.integer(max=3), 4, ["value must be at most 3, got 4"]),
        (S.float(min=0.5, max=1.5), 2.25, ["value must be at most 1.5, got 2.25"]),
        (S.float(min=0), -math.inf, ["value must be at least 0, got -Infinity"]),
        (S.list(S.integer(min=1)), [1, 0], ["value[1] must be at least 1, got 0"]),
        (S.string(max_length=1), "ab", ["value must be at most 1 characters, got 2 characters"]),
        (S.list(int, min_items=2), [1], ["value must be at least 2 items, got 1 items"]),
    ],
)
def test_broken_bounds_read_as_before(schema: Any, value: Any, reasons: list[str]) -> None:
    assert validate(schema, value) == reasons


def test_lists_of_plain_scalars_are_checked_without_a_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[object] = []
    real = schema_module._add_problems

    def counting(schema: object, value: Any, loc: str, out: list[str]) -> None:
        calls.append(value)
        real(schema, value, loc, out)

    monkeypatch.setattr(schema_module, "_add_problems", counting)
    assert validate(S.list(S.integer()), list(range(32))) == []
    assert validate(S.list(S.float()), [0.5, 1, None]) == []
    assert validate(S.list(S.string()), ["a", "b"]) == []
    assert len(calls) == 3  # each list once, none of its elements


item_schemas = st.sampled_from(
    [
        S.integer(),
        S.integer(required=True),
        S.integer(min=0),
        S.float(),
        S.float(required=True),
        S.string(),
        S.string(max_length=1),
        S.boolean(),
        S.boolean(required=True),
        S.list(S.integer()),
    ]
)
elements = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3) | odd_leaves
)


@given(item_schemas, st.lists(elements, max_size=6))
def test_list_items_read_as_each_element_checked_alone(schema: Any, value: list[Any]) -> None:
    want: list[str] = []
    for index, element in enumerate(value):
        want += validate(schema, element, f"value[{index}]")
    assert validate(S.list(schema), value) == want
