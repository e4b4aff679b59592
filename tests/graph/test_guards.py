"""Guards: constructors, static checks, lax evaluation, and the ``$guard`` JSON encoding."""

from __future__ import annotations

import math
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docket.graph.guards import (
    Guard,
    GuardEvalError,
    GuardFormatError,
    GuardOk,
    GuardOp,
    GuardProblemCode,
    StateView,
    all_,
    any_,
    changed,
    equals,
    evaluate,
    exists,
    guard_fields,
    guard_from_json,
    guard_problems,
    guard_strings,
    guard_to_json,
    not_,
    path,
    version_at_least,
)
from docket.values import JSONValue, NonDurableValue
from tests.graph.test_schema import json_values, junk

INVALID = GuardProblemCode.INVALID_GUARD
UNKNOWN = GuardProblemCode.UNKNOWN_GUARD_FIELD
BAD_PATH = GuardProblemCode.INVALID_GUARD_PATH

FIELDS = {"user", "x", "n", "items", "flag"}
VIEW = StateView(
    values={
        "user": {"premium_user": True, "tier": "gold", "tags": ["a", "b", "c"], "none": None},
        "x": "hello",
        "n": 1,
        "items": [10, 20, {"k": "v"}],
        "flag": None,
    },
    versions={"user": 1, "x": 3},
    changed={"x"},
)


def raw(value: object) -> JSONValue:
    """Hand a deliberately ill-typed value past the type checker."""
    return cast("JSONValue", value)


def ok(value: bool) -> GuardOk:
    return GuardOk(value)


# -- constructors and sugar ----------------------------------------------------------------------


def test_constructors_build_plain_records() -> None:
    assert changed("x") == Guard(GuardOp.CHANGED, ["x"])
    assert version_at_least("x", 2) == Guard("version_at_least", ("x", 2))
    assert path("user", ("tier",)) == Guard("path", ("user", ["tier"]))
    assert path("user") == Guard("path", ("user", []))
    assert equals("x", 1) == Guard("equals", ("x", 1))
    assert not_(exists("x")) == Guard("not", (Guard("exists", ("x",)),))
    assert all_() == Guard("all") and any_() == Guard("any")


def test_operator_sugar_flattens() -> None:
    a, b, c = changed("a"), changed("b"), changed("c")
    assert a & b & c == all_(a, b, c)
    assert a | (b | c) == any_(a, b, c)
    assert ~a == not_(a)
    assert (a & b) | c == any_(all_(a, b), c)


def test_unknown_op_is_kept_and_args_must_be_a_sequence() -> None:
    assert Guard("regex", ["x"]).op == "regex"
    with pytest.raises(TypeError):
        Guard("changed", "x")


# -- evaluation (§4.3, case 50) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("guard", "expected"),
    [
        (equals(path("user", ["premium_user"]), True), True),
        (equals(path("user", ["premium_user"]), False), False),
        (equals(path("user", ["missing"]), True), False),
        (equals(path("ghost", ["premium_user"]), True), False),
        (equals(path("user", ["tier"]), "gold"), True),
        (changed("x"), True),
        (changed("user"), False),
        (changed("nobody"), False),
        (version_at_least("x", 3), True),
        (version_at_least("x", 4), False),
        (version_at_least("nobody", 0), True),
        (version_at_least("nobody", 1), False),
        (exists("x"), True),
        (exists("flag"), True),  # present None counts
        (exists("ghost"), False),
        (exists(path("user", ["none"])), True),
        (exists(path("user", [])), True),
        (exists(path("user", ["tier", "deeper"])), False),
        (equals(path("user", ["tags", 0]), "a"), True),
        (equals(path("user", ["tags", -1]), "c"), True),
        (equals(path("user", ["tags", -3]), "a"), True),
        (exists(path("user", ["tags", -4])), False),
        (exists(path("user", ["tags", 3])), False),
        (exists(path("user", ["tags", "0"])), False),
        (equals(path("items", [2, "k"]), "v"), True),
        (equals("n", 1.0), True),
        (equals("n", True), False),
        (equals("flag", None), True),
        (equals("ghost", None), False),
        (equals("x", path("user", ["tier"])), False),
        (equals(path("user", ["tier"]), path("user", ["tier"])), True),
        (equals(path("user", ["ghost"]), path("user", ["ghost"])), False),  # missing != missing
        (equals("items", [10, 20.0, {"k": "v"}]), True),
        (equals("user", {"premium_user": 1}), False),
        (all_(), True),
        (any_(), False),
        (all_(changed("x"), exists("x")), True),
        (all_(changed("x"), changed("n")), False),
        (any_(changed("n"), changed("x")), True),
        (not_(changed("x")), False),
        (~changed("n") & exists("x"), True),
    ],
)
def test_evaluate(guard: Guard, expected: bool) -> None:
    assert evaluate(guard, VIEW) == ok(expected)
    assert guard_problems(guard, FIELDS | {"ghost", "nobody"}) == []


@pytest.mark.parametrize(
    ("guard", "reason"),
    [
        (path("x", []), 'guard "path" is not a boolean expression or has invalid arguments'),
        (Guard("regex", ["x"]), 'guard "regex" is not a boolean expression'),
        (Guard("changed", [1]), 'guard "changed" is not a boolean expression'),
        (Guard("changed", []), 'guard "changed" is not a boolean expression'),
        (Guard("version_at_least", ["x", "2"]), 'guard "version_at_least" is not a boolean'),
        (Guard("version_at_least", ["x", True]), 'guard "version_at_least" is not a boolean'),
        (Guard("not", []), 'guard "not" is not a boolean expression'),
        (Guard("equals", ["x"]), 'guard "equals" is not a boolean expression'),
        (exists(changed("x")), "guard reference must be a channel ID or path expression"),
        (exists(Guard("equals", ["x", []])), "guard reference must be a channel ID or path"),
        (Guard("exists", [1]), "guard reference must be a channel ID or path expression, got 1"),
        (exists(Guard("path", ["x"])), "guard reference must be a channel ID or path"),
        (exists(Guard("path", ["x", "tier"])), "guard path segments must be a list"),
        (equals("x", changed("x")), 'guard comparison value cannot be "changed" expression'),
        (all_("x"), 'guard must be a guard expression, got "x"'),  # type: ignore[arg-type]
        ({"op": "changed"}, "guard must be a guard expression"),
    ],
)
def test_evaluation_errors(guard: object, reason: str) -> None:
    result = evaluate(guard, VIEW)
    assert isinstance(result, GuardEvalError)
    assert len(result.reasons) == 1 and reason in result.reasons[0]
    assert guard_problems(guard, FIELDS) != []


@pytest.mark.parametrize("segment", [True, False, 1.5, None, ["a"]])
def test_odd_segments_are_missing_at_runtime_but_rejected_statically(segment: JSONValue) -> None:
    guard = exists(Guard("path", ["items", [segment]]))
    assert evaluate(guard, VIEW) == ok(False)
    assert codes(guard) == [BAD_PATH]


def test_all_does_not_short_circuit_and_first_error_wins() -> None:
    result = evaluate(all_(changed("n"), path("x"), Guard("regex")), VIEW)
    assert result == GuardEvalError(
        ('guard "path" is not a boolean expression or has invalid arguments',)
    )
    assert isinstance(evaluate(any_(changed("x"), path("x")), VIEW), GuardEvalError)


def test_equals_checks_its_comparison_value_even_when_the_ref_is_missing() -> None:
    assert isinstance(evaluate(equals("ghost", changed("x")), VIEW), GuardEvalError)


# -- static checks (case 33, §4.5 tightened) -----------------------------------------------------


def codes(guard: object, fields: set[str] | None = FIELDS) -> list[GuardProblemCode]:
    return [p.code for p in guard_problems(guard, fields)]


@pytest.mark.parametrize(
    ("guard", "expected"),
    [
        (Guard("regex", ["x"]), [INVALID]),
        (path("x", ["a"]), [INVALID]),  # a bare path is not a boolean
        (exists(changed("x")), [INVALID]),
        (exists(Guard("equals", ["x", ["a"]])), [INVALID]),
        (equals(Guard("changed", ["x", []]), 1), [INVALID]),
        (equals("x", Guard("exists", ["x", []])), [INVALID]),
        (equals(changed("x"), 1), [INVALID]),
        (equals("x", exists("x")), [INVALID]),
        (equals("x", [1, math.nan]), [INVALID]),
        (equals("x", raw((1, 2))), [INVALID]),
        (version_at_least("x", -1), [INVALID]),
        (version_at_least("x", 1.0), [INVALID]),  # type: ignore[arg-type]
        (Guard("changed", ["x", "y"]), [INVALID]),
        (Guard("all", [changed("x"), "n"]), [INVALID]),
        (not_("x"), [INVALID]),  # type: ignore[arg-type]
        ("x", [INVALID]),
        (None, [INVALID]),
        (changed("missing_field"), [UNKNOWN]),
        (version_at_least("missing_field", 1), [UNKNOWN]),
        (all_(changed("x"), not_(exists("missing_field"))), [UNKNOWN]),
        (any_(exists(path("missing_field", ["a"]))), [UNKNOWN]),
        (equals("x", path("missing_field", [])), [UNKNOWN]),
        (exists(Guard("path", ["x", [1.5]])), [BAD_PATH]),
        (exists(Guard("path", ["x", [True]])), [BAD_PATH]),
        (exists(Guard("path", ["x", [None, "a", 0, -1, {"k": 1}]])), [BAD_PATH, BAD_PATH]),
        (exists(Guard("path", ["x", "a"])), [BAD_PATH]),
        (exists(Guard("path", ["x"])), [INVALID]),
        (exists(Guard("path", [1, []])), [INVALID]),
        (
            all_(Guard("regex"), changed("missing_field"), exists(Guard("path", ["x", [1.5]]))),
            [INVALID, UNKNOWN, BAD_PATH],
        ),
    ],
)
def test_guard_problems(guard: object, expected: list[GuardProblemCode]) -> None:
    assert codes(guard) == expected


def test_unknown_fields_are_only_checked_when_fields_are_given() -> None:
    assert codes(changed("missing_field"), None) == []
    problems = guard_problems(changed("missing_field"), {"x"})
    assert problems[0].message == 'unknown field "missing_field"'


@pytest.mark.parametrize(
    "guard",
    [
        equals(path("user", ["tier"]), "gold"),
        all_(not_(equals(path("user", ["tags", -1]), {"a": [1]})), changed("x")),
        any_(),
        all_(),
        version_at_least("x", 0),
        equals("x", path("user", [])),
    ],
)
def test_well_formed_guards_have_no_problems(guard: Guard) -> None:
    assert guard_problems(guard, FIELDS) == []


def test_guard_fields_and_strings() -> None:
    guard = all_(
        changed("a"),
        version_at_least("b", 1),
        not_(exists(path("c", ["seg"]))),
        equals("d", path("e", [0])),
        equals(path("f", []), {"k": "literal"}),
    )
    assert guard_fields(guard) == ["a", "b", "c", "d", "e", "f"]
    assert guard_strings(guard) == {"a", "b", "c", "seg", "d", "e", "f", "literal"}


# -- JSON (§6.2) ---------------------------------------------------------------------------------


def test_path_in_a_plain_position_is_tagged() -> None:
    guard = equals(path("review", ["status"]), "approved")
    doc = {
        "op": "equals",
        "args": [{"$guard": {"op": "path", "args": ["review", ["status"]]}}, "approved"],
    }
    assert guard_to_json(guard) == doc
    assert guard_from_json(doc) == guard


def test_plain_dict_argument_stays_a_literal() -> None:
    doc = {"op": "equals", "args": ["x", {"status": "x"}]}
    assert guard_from_json(doc) == equals("x", {"status": "x"})
    lookalike = {"op": "equals", "args": ["x", {"op": "path", "args": ["y", []]}]}
    assert guard_from_json(lookalike).args[1] == {"op": "path", "args": ["y", []]}


def test_combinator_arguments_are_guard_objects() -> None:
    guard = all_(not_(equals(path("a", ["b"]), 1)), changed("c"))
    assert guard_to_json(guard) == {
        "op": "all",
        "args": [
            {
                "op": "not",
                "args": [
                    {"op": "equals", "args": [{"$guard": {"op": "path", "args": ["a", ["b"]]}}, 1]}
                ],
            },
            {"op": "changed", "args": ["c"]},
        ],
    }


def test_top_level_path_and_malformed_shapes_round_trip() -> None:
    for guard in (path("x", ["a"]), Guard("changed", [1, 2]), Guard("not", [])):
        assert guard_from_json(guard_to_json(guard)) == guard
    assert guard_from_json({"op": "any"}) == any_()


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ("changed", "$"),
        ({"args": []}, "$"),
        ({"op": "regex", "args": []}, "$.op"),
        ({"op": None}, "$.op"),
        ({"op": "changed", "args": "x"}, "$.args"),
        ({"op": "changed", "args": ["x"], "extra": 1}, "$.extra"),
        ({"op": "all", "args": ["x"]}, "$.args[0]"),
        ({"op": "all", "args": [{"$guard": {"op": "changed"}}]}, "$.args[0].$guard"),
        ({"op": "equals", "args": [{"$guard": {"op": "path"}, "extra": 1}, 1]}, "$.args[0]"),
        ({"op": "equals", "args": [{"$guard": "path"}, 1]}, "$.args[0].$guard"),
        ({"op": "equals", "args": ["x", {"$other": 1}]}, "$.args[1]"),
        ({"op": "equals", "args": ["x", [{"$guard": {"op": "path"}}]]}, "$.args[1]"),
        ({"op": "equals", "args": ["x", math.nan]}, "$.args[1]"),
        ({"op": "not", "args": [{"op": "bogus"}]}, "$.args[0].op"),
    ],
)
def test_strict_load(doc: object, where: str) -> None:
    with pytest.raises(GuardFormatError) as caught:
        guard_from_json(doc)
    assert str(caught.value).startswith(where + ":")


def test_load_path_prefix() -> None:
    with pytest.raises(GuardFormatError) as caught:
        guard_from_json({"op": "nope"}, at=("edges", "e1", "guard"))
    assert caught.value.path == ("edges", "e1", "guard", "op")


@pytest.mark.parametrize(
    ("guard", "error"),
    [
        (Guard("regex", []), GuardFormatError),
        (all_("x"), GuardFormatError),  # type: ignore[arg-type]
        (equals("x", raw((1, 2))), NonDurableValue),
        (equals("x", raw([path("y")])), NonDurableValue),
    ],
)
def test_dump_errors(guard: Guard, error: type[Exception]) -> None:
    with pytest.raises(error):
        guard_to_json(guard)


# -- properties ----------------------------------------------------------------------------------

field_ids = st.sampled_from(["a", "b", "c"])
segments = st.lists(st.text("ab", max_size=1) | st.integers(-3, 3), max_size=3)
paths = st.builds(path, field_ids, segments)
literals = json_values


def plain_args() -> st.SearchStrategy[JSONValue | Guard]:
    return literals | field_ids | paths


def well_formed(children: st.SearchStrategy[Guard]) -> st.SearchStrategy[Guard]:
    return st.one_of(
        st.builds(all_, children, children),
        st.builds(any_, children),
        st.builds(not_, children),
        st.builds(lambda xs: Guard("all", xs), st.lists(children, max_size=3)),
    )


leaves = st.one_of(
    st.builds(changed, field_ids),
    st.builds(version_at_least, field_ids, st.integers(0, 3)),
    st.builds(exists, field_ids | paths),
    st.builds(equals, field_ids | paths, literals | paths),
)
guards = st.recursive(leaves, well_formed, max_leaves=8)

# Arbitrary, mostly malformed, guard-shaped values.
anything_arg = (
    junk | field_ids | segments | st.sampled_from([1.5, True, -1, [], ["a", 1.5], ["a", True]])
)
raw_guards = st.recursive(
    st.builds(
        Guard,
        st.sampled_from([*GuardOp, "regex"]),
        st.lists(anything_arg | paths, max_size=3),
    ),
    lambda inner: st.builds(
        Guard,
        st.sampled_from([*GuardOp, "regex"]),
        st.lists(inner | anything_arg | field_ids, max_size=3),
    ),
    max_leaves=8,
)
views = st.builds(
    StateView,
    st.dictionaries(field_ids, json_values | st.just({"a": [1, {"b": 2}]}), max_size=3),
    st.dictionaries(field_ids, st.integers(0, 4), max_size=3),
    st.frozensets(field_ids, max_size=3),
)


@given(guards, views)
def test_generated_well_formed_guards_evaluate(guard: Guard, view: StateView) -> None:
    assert guard_problems(guard, {"a", "b", "c"}) == []
    assert isinstance(evaluate(guard, view), GuardOk)


@settings(max_examples=500)
@given(raw_guards | guards, views)
def test_no_problems_means_no_evaluation_error(guard: Guard, view: StateView) -> None:
    """DECISIONS: the compiler rejects every guard the runtime would reject."""
    result = evaluate(guard, view)  # never raises
    if not guard_problems(guard):
        assert isinstance(result, GuardOk), (guard, result)


@given(guards | raw_guards.filter(lambda g: _dumpable(g)))
def test_json_round_trip(guard: Guard) -> None:
    doc = guard_to_json(guard)
    assert guard_from_json(doc) == guard
    assert guard_to_json(guard_from_json(doc)) == doc


def _dumpable(guard: Guard) -> bool:
    try:
        guard_to_json(guard)
    except (GuardFormatError, NonDurableValue):
        return False
    return True


def guard_docs(children: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    keys = st.sampled_from(["op", "args", "$guard", "extra"])
    return st.dictionaries(keys, children, max_size=3) | st.lists(children, max_size=3)


guard_junk = st.recursive(
    junk | st.sampled_from([*(op.value for op in GuardOp), "regex"]), guard_docs, max_leaves=12
)


@settings(max_examples=300)
@given(guard_junk)
def test_loader_raises_only_format_errors(doc: object) -> None:
    try:
        guard = guard_from_json(doc)
    except GuardFormatError:
        return
    assert guard_from_json(guard_to_json(guard)) == guard
    guard_problems(guard)
    evaluate(guard, VIEW)
