"""The fast canonical-JSON path gives exactly the reference bytes and the same verdicts.

``canonical_json`` classifies a value in one pass and, for values without floats, encodes
it with orjson; ``durable_errors`` answers the common case without building paths. The
reference below is the straightforward definition (walk every node with its path, then
``json.dumps`` with sorted keys); the fast path must agree with it byte for byte and
reason for reason, on valid and invalid values alike.
"""

from __future__ import annotations

import enum
import json
import math
from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docket import values
from docket.values import NonDurableValue, canonical_json, content_hash, durable_errors


class Color(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def reference_errors(value: object, *, allow_guard_tag: bool = False) -> list[str]:
    errors: list[str] = []
    values._walk(value, "$", errors, allow_guard_tag)
    return errors


def reference_bytes(value: object) -> bytes:
    errors = reference_errors(value, allow_guard_tag=True)
    if errors:
        raise NonDurableValue(errors)
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


# Every character, lone surrogates included (they are durable strings that cannot be
# encoded as UTF-8: both paths must fail the same way).
any_text = st.text(st.characters(codec=None), max_size=8)
leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats()
    | any_text
    | st.sampled_from([Color.RED, Level.HIGH, (1, 2), b"x", 1 << 64, -(1 << 63) - 1])
)
keys = any_text | st.sampled_from(["$guard", "$ref", "a", "b", "é", "\U0001f600", 1])
anything = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=25,
)


def outcome(encode: object, value: object) -> tuple[str, object]:
    assert callable(encode)
    try:
        return "ok", encode(value)
    except NonDurableValue as exc:
        return "non-durable", exc.reasons
    except (ValueError, TypeError) as exc:
        return "error", type(exc).__name__


@settings(max_examples=400, deadline=None)
@given(anything)
def test_canonical_json_matches_the_reference_encoding(value: object) -> None:
    assert outcome(canonical_json, value) == outcome(reference_bytes, value)


@settings(max_examples=400, deadline=None)
@given(anything, st.booleans())
def test_durable_errors_match_the_full_walk(value: object, allow_guard: bool) -> None:
    assert durable_errors(value, allow_guard_tag=allow_guard) == reference_errors(
        value, allow_guard_tag=allow_guard
    )


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [True, None, "é", "\x00\x1f\x7f\u2028"]},
        {"x": 1.0, "y": 1},
        [1e16, 1e-7, -0.0, 5e-324, 1.7976931348623157e308],
        {"big": 1 << 64, "edge": (1 << 64) - 1, "low": -(1 << 63)},
        {"enum": Color.RED, "int": Level.HIGH},
        OrderedDict([("z", 1), ("a", 2)]),
        {"\U0001f600": 1, "\uffff": 2, "a": 3},
        {"$guard": {"op": "eq"}},
    ],
)
def test_known_tricky_values_encode_like_the_reference(value: object) -> None:
    assert canonical_json(value) == reference_bytes(value)


def test_one_and_one_point_zero_still_differ_on_the_fast_path() -> None:
    assert canonical_json({"x": 1}) == b'{"x":1}'
    assert canonical_json({"x": 1.0}) == b'{"x":1.0}'
    assert content_hash([1]) != content_hash([1.0])


def test_invalid_values_are_refused_with_every_reason() -> None:
    with pytest.raises(NonDurableValue) as caught:
        canonical_json({"a": math.nan, "b": [(1,)], "$c": 1})
    assert caught.value.reasons == tuple(reference_errors({"a": math.nan, "b": [(1,)], "$c": 1}))
