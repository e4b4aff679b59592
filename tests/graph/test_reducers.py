"""Reducers: folding, zeros and defaults, write validation, the same-step commit, JSON."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docket.graph.reducers import (
    UNSET,
    AcceptedUpdate,
    Current,
    FieldRule,
    R,
    Reducer,
    ReducerFormatError,
    ReducerType,
    RejectedUpdate,
    StepCommit,
    StepRejected,
    commit_step,
    effective_default,
    fold_base,
    is_ambiguous_list_write,
    normalize_reducer,
    reduce,
    reducer_from_json,
    reducer_problems,
    reducer_schema_mismatch,
    reducer_to_json,
    validate_update,
    validate_write,
    write_schema,
    zero,
)
from docket.graph.schema import NO_DEFAULT, S, Schema, SchemaType, validate, validate_appended
from docket.values import JSONValue, NonDurableValue
from tests.graph.test_schema import json_maps, json_values, junk

# -- §8 cases 15-18: folding ---------------------------------------------------------------------

FOLDS: list[tuple[Reducer | None, Current, list[JSONValue], JSONValue]] = [
    (R.last_value(), "old", ["a", "b"], "b"),
    (None, "old", ["a", "b"], "b"),
    (R.last_value(), UNSET, [None], None),
    (R.first_value(), "old", ["a", "b"], "old"),
    (R.first_value(), UNSET, ["a", "b"], "a"),
    (R.first_value(), None, ["a"], None),  # a committed None is a value
    (R.append(), [1], [2, [3, 4]], [1, 2, 3, 4]),
    (R.append(), [1], [None], [1, None]),
    (R.append(), UNSET, [[1], [[2]]], [1, [2]]),
    (R.append(), "not a list", [1], [1]),
    (R.append(unique=True), [1, 2], [[2, 3, 1]], [1, 2, 3]),
    (R.append(unique=True), [1], [[True, 1.0, 1]], [1, True, 1.0]),
    (R.append(max_length=3), [1, 2, 3], [[4, 5]], [3, 4, 5]),
    (R.append(unique=True, max_length=2), [1, 1, 2], [[3, 3]], [2, 3]),
    (R.union(), [1, 2], [[2, 3]], [1, 2, 3]),
    (R.union(), [], [[1], 1, True, 1.0], [1, True, 1.0]),
    (R.union(), [{"a": 1}], [{"a": 1}, {"a": 2}], [{"a": 1}, {"a": 2}]),
    (
        R.union(by="id"),
        [{"id": "a", "v": 1}],
        [[{"id": "a", "v": 2}, {"id": "b", "v": 3}]],
        [{"id": "a", "v": 1}, {"id": "b", "v": 3}],
    ),
    (R.union(by="id"), [], [["x", "x", {"v": 1}, {"v": 1}]], ["x", {"v": 1}]),
    # a keyed element and a whole-value element never collide
    (R.union(by="id"), [{"id": "x"}], ["x", {"id": "x", "n": 2}], [{"id": "x"}, "x"]),
    (
        R.union(by=["meta", "key"]),
        [{"meta": {"key": 1}, "n": 1}],
        [[{"meta": {"key": 1}, "n": 2}, {"meta": {"key": 2}}]],
        [{"meta": {"key": 1}, "n": 1}, {"meta": {"key": 2}}],
    ),
    (R.merge(), {"z": 0}, [{"a": 1}, {"a": 2, "b": 3}], {"z": 0, "a": 2, "b": 3}),
    (R.merge(), {"n": {"a": 1}}, [{"n": {"b": 2}}], {"n": {"b": 2}}),
    (R.merge(deep=True), {"n": {"a": 1}}, [{"n": {"b": 2}}], {"n": {"a": 1, "b": 2}}),
    (R.merge(deep=True), {"n": {"a": 1}}, [{"n": 5}], {"n": 5}),
    (R.merge(), {"a": 1}, ["ignored", None, {"b": 2}], {"a": 1, "b": 2}),
    (R.merge(), UNSET, [{"a": 1}], {"a": 1}),
    (R.sum(), 10, [1, 2], 13),
    (R.sum(), UNSET, [1.5, 2], 3.5),
    (R.sum(), UNSET, [2, 3], 5),
    (R.sum(), 1, [True, "5", None, 2], 3),  # non-numbers never count (bools included)
]


@pytest.mark.parametrize(("reducer", "current", "writes", "expected"), FOLDS)
def test_reduce(
    reducer: Reducer | None, current: Current, writes: list[JSONValue], expected: JSONValue
) -> None:
    result = reduce(reducer, current, writes)
    assert result == expected
    assert repr(result) == repr(expected)  # 1 vs 1.0 vs True preserved exactly


def test_reduce_does_not_mutate_inputs() -> None:
    current: JSONValue = {"n": {"a": 1}}
    writes: list[JSONValue] = [{"n": {"b": 2}}]
    reduce(R.merge(deep=True), current, writes)
    assert current == {"n": {"a": 1}} and writes == [{"n": {"b": 2}}]
    base: JSONValue = [1]
    reduce(R.append(), base, [2])
    assert base == [1]


def test_reduce_needs_a_write() -> None:
    with pytest.raises(ValueError):
        reduce(R.sum(), 1, [])


def test_reduce_unknown_type_raises_value_error() -> None:
    with pytest.raises(ValueError):
        reduce(Reducer("median"), 1, [2])


def test_bad_options_are_ignored_when_folding() -> None:
    assert reduce(Reducer("append", {"unique": "yes", "max_length": -1}), [1], [1]) == [1, 1]
    assert reduce(Reducer("union", {"by": 42}), [{"a": 1}], [{"a": 1}]) == [{"a": 1}]


# -- case 19 and DECISIONS: zeros and defaults ---------------------------------------------------


@pytest.mark.parametrize(
    ("reducer", "expected"),
    [
        (R.append(), []),
        (R.union(), []),
        (R.merge(), {}),
        (R.sum(), 0),
        (R.last_value(), None),
        (R.first_value(), None),
        (None, None),
    ],
)
def test_zero(reducer: Reducer | None, expected: JSONValue) -> None:
    assert zero(reducer) == expected


@pytest.mark.parametrize("default", [False, 0, "", 0.0, [], {}])
def test_falsy_default_is_kept(default: JSONValue) -> None:
    for reducer in (None, R.first_value(), R.sum(), R.append(), R.merge()):
        assert repr(effective_default(default, reducer)) == repr(default)


def test_missing_default_falls_back_to_zero() -> None:
    assert effective_default(None, R.sum()) == 0
    assert effective_default(None, R.last_value()) is None


def test_fold_base() -> None:
    assert fold_base("committed", "default") == "committed"
    assert fold_base(None, "default") is None  # a committed None is a value
    assert fold_base(UNSET, "default") == "default"
    assert fold_base(UNSET, False) is False
    assert fold_base(UNSET, None) is UNSET


def test_first_value_treats_a_false_default_as_set() -> None:
    rules = {"flag": FieldRule(S.boolean(), R.first_value(), default=False)}
    result = commit_step(rules, (), {}, {"n": {"flag": True}})
    assert result == StepCommit({"flag": False}, {"flag": ("n",)})


# -- case 20: write schemas ----------------------------------------------------------------------


ITEM = S.string(min_length=1)
LIST_FIELD = S.list(ITEM, max_items=1)
OBJ_FIELD = S.object({"a": S.integer(required=True), "b": S.string()}, default={"a": 1})


@pytest.mark.parametrize(
    ("reducer", "field", "write", "expected"),
    [
        (R.append(), LIST_FIELD, "x", ITEM),
        (R.append(), LIST_FIELD, ["x", "y"], Schema(SchemaType.LIST, item=ITEM)),
        (R.union(), LIST_FIELD, "x", ITEM),
        (R.union(), LIST_FIELD, ["x"], Schema(SchemaType.LIST, item=ITEM)),
        (R.append(), Schema("list"), "x", None),
        (
            R.merge(),
            OBJ_FIELD,
            {},
            S.object({"a": S.integer(), "b": S.string()}, required=True),
        ),
        (R.merge(), S.map(min_keys=1), {}, S.map(required=True)),
        (R.sum(), S.integer(min=0), 1, S.integer(required=True)),
        (R.sum(), S.float(max=1), 1, S.float(required=True)),
        (R.last_value(), LIST_FIELD, "x", LIST_FIELD),
        (R.first_value(), LIST_FIELD, "x", LIST_FIELD),
        (None, LIST_FIELD, "x", LIST_FIELD),
        (R.sum(), None, "x", None),
    ],
)
def test_write_schema(
    reducer: Reducer | None, field: Schema | None, write: JSONValue, expected: Schema | None
) -> None:
    assert write_schema(reducer, field, write) == expected


@pytest.mark.parametrize(
    ("reducer", "field", "write", "ok"),
    [
        (R.append(), LIST_FIELD, ["x", "y"], True),  # field max_items not applied to a write
        (R.append(), LIST_FIELD, [""], False),
        (R.append(), LIST_FIELD, "", False),
        (R.append(), LIST_FIELD, None, True),
        (R.append(), S.list(S.string(required=True)), None, False),
        (R.merge(), OBJ_FIELD, {"b": "x"}, True),  # required subfield relaxed
        (R.merge(), OBJ_FIELD, {"c": 1}, False),  # unknown key still rejected
        (R.merge(), OBJ_FIELD, None, False),
        (R.merge(), S.object({}, open=True), {"c": 1}, True),
        (R.merge(), S.map(), None, False),
        (R.merge(), S.map(), {"any": [1]}, True),
        (R.sum(), S.integer(min=0), -5, True),
        (R.sum(), S.integer(min=0), None, False),
        (R.sum(), S.integer(min=0), "5", False),
        (R.sum(), S.integer(), 1.5, False),
        (R.sum(), S.float(), 1, True),
        (R.last_value(), S.integer(min=0), -5, False),
        (R.last_value(), None, object(), True),
    ],
)
def test_validate_write(
    reducer: Reducer | None, field: Schema | None, write: JSONValue, ok: bool
) -> None:
    assert (validate_write(reducer, field, write) == []) is ok


# -- §3.5 / case 48: the commit of one superstep -------------------------------------------------

RULES = {
    "x": FieldRule(S.string(), R.last_value(), default="old"),
    "log": FieldRule(S.list(S.string()), R.append(), default=["seed"]),
    "total": FieldRule(S.integer(min=0), R.sum()),
    "info": FieldRule(S.map(), R.merge()),
    "first": FieldRule(S.string(), R.first_value()),
    "untyped": FieldRule(None, None),
}
INPUTS = frozenset({"topic"})


def test_same_step_writers_fold_in_node_id_order() -> None:
    updates = {
        "b_writer": {"x": "b", "log": "from_b", "total": 3, "info": {"b": 2}, "first": "B"},
        "a_writer": {"x": "a", "log": ["from_a"], "total": 2, "info": {"a": 1}, "first": "A"},
    }
    result = commit_step(RULES, INPUTS, {}, updates)
    assert result == StepCommit(
        {
            "x": "b",
            "log": ["seed", "from_a", "from_b"],
            "total": 5,
            "info": {"a": 1, "b": 2},
            "first": "A",
        },
        dict.fromkeys(["first", "info", "log", "total", "x"], ("a_writer", "b_writer")),
    )
    assert result.changed == {"x", "log", "total", "info", "first"}


def test_commit_folds_into_the_committed_value() -> None:
    committed: dict[str, JSONValue] = {"log": ["one"], "total": 7, "first": "kept"}
    updates = {"n": {"log": "two", "total": 1, "first": "new"}}
    result = commit_step(RULES, INPUTS, committed, updates)
    assert isinstance(result, StepCommit)
    assert result.values == {"log": ["one", "two"], "total": 8, "first": "kept"}


def test_rewriting_an_equal_value_counts_as_changed() -> None:
    result = commit_step(RULES, INPUTS, {"x": "same"}, {"n": {"x": "same"}})
    assert isinstance(result, StepCommit) and result.changed == {"x"}


def test_empty_step_commits_nothing() -> None:
    assert commit_step(RULES, INPUTS, {}, {"n": {}}) == StepCommit({}, {})


def test_update_values_are_coerced() -> None:
    from enum import StrEnum

    class Status(StrEnum):
        OK = "ok"

    result = commit_step(RULES, INPUTS, {}, {"n": {"untyped": {"status": Status.OK}}})
    assert isinstance(result, StepCommit)
    assert result.values == {"untyped": {"status": "ok"}}
    status = result.values["untyped"]["status"]  # type: ignore[index,call-overload]
    assert type(status) is str


def test_sum_cannot_push_a_bounded_field_out_of_range() -> None:
    result = commit_step(RULES, INPUTS, {"total": 1}, {"a": {"total": -5}, "b": {"total": 2}})
    message = 'field "total" would commit an invalid value: value must be at least 0, got -2'
    assert result == StepRejected({"a": (message,), "b": (message,)})


def test_append_past_the_field_bound_is_rejected_after_folding() -> None:
    rules = {"l": FieldRule(S.list(S.integer(), max_items=2), R.append())}
    assert isinstance(commit_step(rules, (), {}, {"n": {"l": [1, 2]}}), StepCommit)
    rejected = commit_step(rules, (), {"l": [1]}, {"n": {"l": [2, 3]}})
    reason = "value must be at most 2 items, got 3 items"
    assert rejected == StepRejected({"n": (f'field "l" would commit an invalid value: {reason}',)})


def test_invalid_write_rejects_the_whole_step() -> None:
    updates: dict[str, object] = {
        "good": {"x": "fine"},
        "bad": {"log": 5, "topic": "t", "nope": 1},
        "worse": ["not", "a", "map"],
        "odd": {"x": {1, 2}},
    }
    result = commit_step(RULES, INPUTS, {}, updates)
    assert isinstance(result, StepRejected)
    assert sorted(result.errors) == ["bad", "odd", "worse"]
    assert result.errors["bad"] == (
        'node "bad" wrote invalid value to "log": value must be a string, got 5',
        'node "bad" wrote unknown field "nope"',
        'node "bad" wrote "topic", which is an input and read-only',
    )
    assert result.errors["worse"] == (
        'node "worse" must return a state update map, got ["not", "a", "map"]',
    )
    assert result.errors["odd"][0].startswith('node "odd" returned a non-durable update: ')


def test_interrupt_resolution_goes_through_the_reducer() -> None:
    rules = {"answers": FieldRule(S.list(S.string()), R.append())}
    assert commit_step(rules, (), {}, {"ask": {"answers": "yes"}}) == StepCommit(
        {"answers": ["yes"]}, {"answers": ("ask",)}
    )


def test_validate_update() -> None:
    assert validate_update("n", {"x": "v"}, RULES, INPUTS) == AcceptedUpdate({"x": "v"})
    assert validate_update("n", {"$x": 1}, RULES, INPUTS) == RejectedUpdate(
        (
            "node \"n\" returned a non-durable update: update: key '$x' starts with '$', which "
            "is reserved",
        )
    )


@given(
    st.permutations(["n1", "n2", "n3", "n4"]), st.lists(st.text(max_size=2), min_size=4, max_size=4)
)
def test_commit_ignores_completion_order(order: list[str], values: list[str]) -> None:
    updates = {node: {"x": value, "log": value} for node, value in zip(order, values)}
    expected = commit_step(RULES, INPUTS, {}, dict(sorted(updates.items())))
    assert commit_step(RULES, INPUTS, {}, updates) == expected
    assert isinstance(expected, StepCommit)
    assert expected.values["x"] == updates["n4"]["x"]


# -- compile-time checks (cases 23-24) -----------------------------------------------------------


@pytest.mark.parametrize(
    "reducer",
    [
        R.append(unique=True, max_length=3),
        R.union(by="id"),
        R.union(by=["a", "b"]),
        R.merge(deep=True),
        R.sum(),
        Reducer("append", {"custom": "ignored"}),
    ],
)
def test_reducer_problems_accepts(reducer: Reducer) -> None:
    assert reducer_problems(reducer) == []


@pytest.mark.parametrize(
    ("reducer", "fragment"),
    [
        ("append", "expected a Reducer"),
        (Reducer("median"), 'unknown reducer type "median"'),
        (Reducer("append", {"max_length": -1}), "'max_length' must be a positive integer"),
        (Reducer("append", {"max_length": 0}), "'max_length' must be a positive integer"),
        (Reducer("append", {"max_length": True}), "'max_length' must be a positive integer"),
        (Reducer("append", {"unique": 1}), "'unique' must be a boolean"),
        (Reducer("union", {"by": 42}), "'by' must be a string or non-empty list"),
        (Reducer("union", {"by": []}), "'by' must be a string or non-empty list"),
        (Reducer("union", {"by": ["a", 1]}), "'by' must be a string or non-empty list"),
        (Reducer("merge", {"deep": "yes"}), "'deep' must be a boolean"),
        (Reducer("sum", {"x": math.nan}), "non-finite float"),
    ],
)
def test_reducer_problems_rejects(reducer: object, fragment: str) -> None:
    problems = reducer_problems(reducer)
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize(
    ("reducer", "schema", "mismatch"),
    [
        (R.append(), S.string(), True),
        (R.union(), S.map(), True),
        (R.sum(), S.string(), True),
        (R.merge(), S.list(int), True),
        (R.append(), S.list(int), False),
        (R.sum(), S.integer(), False),
        (R.sum(), S.float(), False),
        (R.merge(), S.map(), False),
        (R.merge(), S.object({}), False),
        (R.last_value(), S.string(), False),
        (Reducer("median"), S.string(), False),  # reported by reducer_problems instead
    ],
)
def test_reducer_schema_mismatch(reducer: Reducer, schema: Schema, mismatch: bool) -> None:
    message = reducer_schema_mismatch(reducer, schema)
    assert (message is not None) is mismatch
    if message is not None:
        assert str(reducer.type) in message and str(schema.type) in message


def test_ambiguous_list_write() -> None:
    assert is_ambiguous_list_write(R.append(), S.list(S.list(S.float())))
    assert is_ambiguous_list_write(R.union(), S.list(list[int]))
    assert not is_ambiguous_list_write(R.append(), S.list(S.float()))
    assert not is_ambiguous_list_write(R.last_value(), S.list(S.list(S.float())))


# -- shorthand -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("append", R.append()),
        (ReducerType.SUM, R.sum()),
        (("append", {"unique": True}), R.append(unique=True)),
        ((ReducerType.UNION, {"by": "id"}), R.union(by="id")),
    ],
)
def test_normalize_reducer(spec: object, expected: Reducer) -> None:
    assert normalize_reducer(spec) == expected


@pytest.mark.parametrize(
    "spec", [None, "median", 42, ("append", [1]), ("append", {1: 2}), ("nope", {}), R.sum()]
)
def test_normalize_reducer_passes_other_values_through(spec: object) -> None:
    assert normalize_reducer(spec) is spec


def test_unknown_type_is_kept_for_diagnostics() -> None:
    assert Reducer("median").type == "median"
    assert Reducer("sum").type is ReducerType.SUM


# -- JSON form -----------------------------------------------------------------------------------


def test_reducer_json() -> None:
    assert reducer_to_json(R.last_value()) == {"type": "last_value"}
    assert reducer_to_json(R.append(unique=True)) == {"type": "append", "opts": {"unique": True}}
    assert reducer_from_json({"type": "merge", "opts": {}}) == R.merge()
    assert reducer_from_json({"type": "union", "opts": {"by": "id", "x": 1}}) == Reducer(
        "union", {"by": "id", "x": 1}
    )


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ("append", "$"),
        ({}, "$"),
        ({"type": "median"}, "$.type"),
        ({"type": ["append"]}, "$.type"),
        ({"type": "append", "unique": True}, "$.unique"),
        ({"type": "append", "opts": []}, "$.opts"),
        ({"type": "append", "opts": {"$x": 1}}, "$.opts"),
        ({"type": "append", "opts": {"x": math.inf}}, "$.opts"),
    ],
)
def test_reducer_strict_load(doc: object, path: str) -> None:
    with pytest.raises(ReducerFormatError) as caught:
        reducer_from_json(doc)
    assert str(caught.value).startswith(path + ":")


def test_reducer_dump_errors() -> None:
    with pytest.raises(ReducerFormatError):
        reducer_to_json(Reducer("median"))
    with pytest.raises(NonDurableValue):
        reducer_to_json(Reducer("sum", {"x": (1,)}))  # type: ignore[dict-item]


reducers = st.builds(Reducer, type=st.sampled_from(list(ReducerType)), opts=json_maps)


@given(reducers)
def test_reducer_json_round_trip(reducer: Reducer) -> None:
    assert reducer_from_json(reducer_to_json(reducer)) == reducer


reducer_junk = st.recursive(
    junk | st.sampled_from([t.value for t in ReducerType]),
    lambda inner: st.dictionaries(st.sampled_from(["type", "opts", "other"]), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300)
@given(reducer_junk)
def test_reducer_loader_raises_only_format_errors(doc: object) -> None:
    try:
        reducer = reducer_from_json(doc)
    except ReducerFormatError:
        return
    assert reducer_from_json(reducer_to_json(reducer)) == reducer


@given(reducers, json_values, st.lists(json_values, min_size=1, max_size=4))
def test_reduce_never_raises_on_known_types(
    reducer: Reducer, current: JSONValue, writes: list[JSONValue]
) -> None:
    reduce(reducer, current, writes)
    reduce(reducer, UNSET, writes)


def test_no_default_sentinel_is_not_a_field_default() -> None:
    # FieldRule.default uses None for "no default"; the schema sentinel never reaches it.
    assert FieldRule().default is None
    assert write_schema(R.merge(), OBJ_FIELD, {}) is not None
    assert write_schema(R.merge(), OBJ_FIELD, {}).default is NO_DEFAULT  # type: ignore[union-attr]


# -- appends are validated by what they add -----------------------------------------------------

_ITEM_SCHEMAS = st.sampled_from(
    [
        S.integer(min=0, max=50),
        S.string(max_length=3),
        S.list(S.integer(), max_items=2),
        S.object({"k": S.integer(required=True)}),
    ]
)


@settings(max_examples=150, deadline=None)
@given(item=_ITEM_SCHEMAS, data=st.data())
def test_validate_appended_says_what_validate_says_when_the_prefix_conforms(
    item: Schema, data: st.DataObject
) -> None:
    schema = S.list(
        item, min_items=data.draw(st.integers(0, 3)), max_items=data.draw(st.integers(2, 8))
    )
    prefix = [
        element
        for element in data.draw(st.lists(json_values, max_size=6))
        if not validate(item, element)
    ]
    added = data.draw(st.lists(json_values, max_size=4))
    value = prefix + added
    assert validate_appended(schema, value, len(prefix)) == validate(schema, value)


def test_an_append_checks_its_new_elements_and_the_bounds() -> None:
    rules = {"log": FieldRule(S.list(S.integer(min=0), max_items=4), R.append())}
    committed: dict[str, JSONValue] = {"log": [1, 2, 3]}
    assert isinstance(commit_step(rules, (), committed, {"n": {"log": [4]}}), StepCommit)
    bad = commit_step(rules, (), committed, {"n": {"log": [-1]}})
    reason = 'node "n" wrote invalid value to "log": value[0] must be at least 0, got -1'
    assert bad == StepRejected({"n": (reason,)})
    over = commit_step(rules, (), committed, {"n": {"log": [4, 5]}})
    reason = "value must be at most 4 items, got 5 items"
    assert over == StepRejected({"n": (f'field "log" would commit an invalid value: {reason}',)})


def test_a_trimming_append_revalidates_the_whole_list() -> None:
    # max_length drops the oldest elements: the kept ones are no longer the committed
    # prefix, so the whole value is checked (here the committed -5 was never valid)
    rules = {"log": FieldRule(S.list(S.integer(min=0)), R.append(max_length=2))}
    result = commit_step(rules, (), {"log": [-5, 1]}, {"n": {"log": [2]}})
    assert isinstance(result, StepCommit) and result.values == {"log": [1, 2]}
    kept = commit_step(rules, (), {"log": [1, -5]}, {"n": {"log": [2]}})
    assert isinstance(kept, StepRejected)
