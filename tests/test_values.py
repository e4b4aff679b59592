"""Durable values, canonical JSON and hashing (DECISIONS: identity, values, hashing)."""

from __future__ import annotations

import enum
import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from docket.values import (
    NonDurableValue,
    canonical_json,
    coerce_durable,
    content_hash,
    durable_errors,
    ensure_durable,
    from_micros,
    to_micros,
    utc,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text().filter(lambda k: not k.startswith("$")), inner, max_size=4)
    ),
    max_leaves=20,
)


def test_canonical_json_sorts_keys_and_drops_whitespace() -> None:
    assert (
        canonical_json({"b": 1, "a": [True, None, "é"]}) == '{"a":[true,null,"é"],"b":1}'.encode()
    )


def test_one_and_one_point_zero_hash_differently() -> None:
    assert canonical_json(1) != canonical_json(1.0)
    assert content_hash({"x": 1}) != content_hash({"x": 1.0})
    assert content_hash({"x": True}) != content_hash({"x": 1})


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (math.nan, "non-finite"),
        ({"x": math.inf}, "non-finite"),
        ((1, 2), "tuple"),
        ({1: "a"}, "not a string"),
        ({"$ref": 1}, "reserved"),
        ({"a": {1, 2}}, "set is not durable"),
        (b"bytes", "bytes is not durable"),
        ({"when": datetime(2026, 1, 1, tzinfo=UTC)}, "datetime is not durable"),
    ],
)
def test_non_durable_values_are_refused_with_a_path(value: object, fragment: str) -> None:
    errors = durable_errors(value)
    assert errors and any(fragment in e for e in errors), errors
    with pytest.raises(NonDurableValue):
        canonical_json(value)
    with pytest.raises(NonDurableValue):
        ensure_durable(value)


def test_guard_tag_is_the_only_dollar_key_a_document_may_hash() -> None:
    assert canonical_json({"$guard": {"op": "changed"}})
    assert durable_errors({"$guard": 1}) != []  # not durable as a value
    with pytest.raises(NonDurableValue):
        canonical_json({"$other": 1})


def test_errors_name_the_nested_path() -> None:
    assert durable_errors({"a": [1, {"b": math.nan}]}) == [
        "$.a[1].b: non-finite float nan is not durable"
    ]


class Color(enum.Enum):
    RED = "red"


def test_coercion_turns_string_enums_into_values_and_rejects_collisions() -> None:
    assert coerce_durable({Color.RED: [Color.RED]}) == {"red": ["red"]}
    with pytest.raises(NonDurableValue, match="twice"):
        coerce_durable({Color.RED: 1, "red": 2})


@given(json_values)
def test_hash_ignores_insertion_order(value: object) -> None:
    def reversed_dicts(v: object) -> object:
        if isinstance(v, dict):
            return {k: reversed_dicts(v[k]) for k in reversed(list(v))}
        if isinstance(v, list):
            return [reversed_dicts(x) for x in v]
        return v

    assert content_hash(value) == content_hash(reversed_dicts(value))


def test_hash_is_stable_across_processes() -> None:
    doc = {"z": [1, 1.5, "x"], "a": {"k": None}}
    code = (
        "from docket.values import content_hash; "
        "print(content_hash({'a': {'k': None}, 'z': [1, 1.5, 'x']}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == content_hash(doc)


def test_timestamps_are_utc_microseconds_and_naive_is_refused() -> None:
    moment = datetime(2026, 7, 15, 14, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert utc(moment) == datetime(2026, 7, 15, 12, 0, 0, 123456, tzinfo=UTC)
    assert from_micros(to_micros(moment)) == moment
    with pytest.raises(ValueError, match="naive"):
        utc(datetime(2026, 1, 1))
