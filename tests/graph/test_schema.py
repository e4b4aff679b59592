"""Schema language: validation, well-formedness, shorthand, JSON form, equality helpers."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from docket.graph.schema import (
    NO_DEFAULT,
    S,
    Schema,
    SchemaFormatError,
    SchemaType,
    loose_equal,
    normalize_schema,
    schema_from_json,
    schema_of,
    schema_problems,
    schema_to_json,
    strict_key,
    validate,
)
from docket.values import JSONValue, NonDurableValue

# -- strategies shared by the graph tests --------------------------------------------------------

names = st.text(st.sampled_from("abcxyz_-"), min_size=1, max_size=4)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=8,
)
json_maps = st.dictionaries(names, json_values, max_size=3)
#: Anything a careless caller or a hostile document could hand to a loader.
junk = st.recursive(
    json_values
    | st.just(math.nan)
    | st.just(math.inf)
    | st.binary(max_size=3)
    | st.builds(object)
    | st.sampled_from(["$guard", "op", "args", "type", "path", "all", "string", "list"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.frozensets(st.integers(), max_size=2)
        | st.dictionaries(st.text(max_size=6) | st.integers(), inner, max_size=3)
    ),
    max_leaves=10,
)

schemas = st.recursive(
    st.builds(
        Schema,
        type=st.sampled_from(list(SchemaType)),
        values=st.lists(json_values, max_size=2),
        required=st.booleans(),
        default=st.just(NO_DEFAULT) | json_values,
        constraints=json_maps,
        metadata=json_maps,
    ),
    lambda inner: st.builds(
        Schema,
        type=st.sampled_from(list(SchemaType)),
        fields=st.dictionaries(names, inner, max_size=3),
        item=st.none() | inner,
        required=st.booleans(),
        default=st.just(NO_DEFAULT) | json_values,
    ),
    max_leaves=6,
)


def schema_docs(children: st.SearchStrategy[object]) -> st.SearchStrategy[dict[object, object]]:
    keys = st.sampled_from(
        ["type", "fields", "item", "values", "required", "default", "constraints", "metadata"]
    )
    return st.dictionaries(keys | st.sampled_from(["bogus", "$x"]), children, max_size=5)


schema_junk = st.recursive(
    junk | st.sampled_from([t.value for t in SchemaType]), schema_docs, max_leaves=12
)


# -- §8 case 8: types ----------------------------------------------------------------------------

TYPE_CASES = [
    (S.float(), 0.5, True),
    (S.float(), 3, True),
    (S.float(), "3.0", False),
    (S.float(), True, False),
    (S.integer(), 3, True),
    (S.integer(), 3.0, False),
    (S.integer(), "3", False),
    (S.integer(), True, False),
    (S.boolean(), True, True),
    (S.boolean(), "true", False),
    (S.boolean(), 1, False),
    (S.string(), "x", True),
    (S.string(), 1, False),
    (S.map(), {"a": [1]}, True),
    (S.map(), [1], False),
    (S.list(str), [], True),
    (S.list(str), {}, False),
    (S.object({}), {}, True),
    (S.object({}), [], False),
    (S.enum(["low", "high"]), "low", True),
    (S.enum(["low", "high"]), "mid", False),
]


@pytest.mark.parametrize(("schema", "value", "ok"), TYPE_CASES)
def test_type_check(schema: Schema, value: JSONValue, ok: bool) -> None:
    assert (validate(schema, value) == []) is ok


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        (S.string(), 1, "value must be a string, got 1"),
        (S.float(), "x", 'value must be a number, got "x"'),
        (S.integer(), 1.5, "value must be an integer, got 1.5"),
        (S.boolean(), 0, "value must be a boolean, got 0"),
        (S.map(), [], "value must be a map, got []"),
        (S.list(int), "x", 'value must be a list, got "x"'),
        (S.enum(["a", 1]), "b", 'value must be one of ["a", 1], got "b"'),
    ],
)
def test_type_reason_messages(schema: Schema, value: JSONValue, message: str) -> None:
    assert validate(schema, value) == [message]


# -- case 9: locations ---------------------------------------------------------------------------


def test_list_item_location() -> None:
    reasons = validate(S.list(S.string()), ["a", 2])
    assert len(reasons) == 1 and "value[1]" in reasons[0]


def test_list_of_objects_location() -> None:
    schema = S.list(S.object({"id": S.string(required=True)}))
    assert validate(schema, [{}]) == ["value[0].id is required but missing"]


def test_custom_location() -> None:
    assert validate(S.integer(), "x", loc='input "n"') == ['input "n" must be an integer, got "x"']


# -- case 10: bounds -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fragment"),
    [(-1, "at least 0"), (11, "at most 10"), (0, None), (10, None), (5.5, None)],
)
def test_numeric_bounds_inclusive(value: int | float, fragment: str | None) -> None:
    reasons = validate(S.integer(min=0, max=10), value) if isinstance(value, int) else []
    reasons += validate(S.float(min=0, max=10), value)
    if fragment is None:
        assert reasons == []
    else:
        assert reasons and all(fragment in r for r in reasons)


def test_constraints_apply_only_to_their_type() -> None:
    assert validate(S.enum([1, 50], min=10, max=20), 50) == []
    assert validate(S.enum(["a"], max_length=0), "a") == []
    assert validate(S.enum([[1, 2]], max_items=1), [1, 2]) == []
    assert validate(S.map(min_items=3, max_length=0), {}) == []


def test_bool_or_string_bounds_are_ignored() -> None:
    assert validate(S.integer(min=True, max="3"), 50) == []


@pytest.mark.parametrize(
    ("value", "reasons"),
    [
        ("a", ["value must be at least 2 characters, got 1 characters"]),
        ("abcd", ["value must be at most 3 characters, got 4 characters"]),
        ("abc", []),
    ],
)
def test_string_length(value: str, reasons: list[str]) -> None:
    assert validate(S.string(min_length=2, max_length=3), value) == reasons


@pytest.mark.parametrize(
    ("text", "code_points"),
    [
        ("e\u0301", 2),  # one grapheme, two code points
        ("\U0001f468\u200d\U0001f469\u200d\U0001f467", 5),  # family emoji: one grapheme
        ("\u00e9", 1),
    ],
)
def test_string_length_counts_code_points(text: str, code_points: int) -> None:
    assert validate(S.string(max_length=code_points), text) == []
    assert validate(S.string(max_length=code_points - 1), text) == [
        f"value must be at most {code_points - 1} characters, got {code_points} characters"
    ]


def test_list_item_bounds_after_item_reasons() -> None:
    schema = S.list(S.integer(), min_items=2, max_items=3)
    assert validate(schema, [1]) == ["value must be at least 2 items, got 1 items"]
    assert validate(schema, ["x", 2, 3, 4]) == [
        'value[0] must be an integer, got "x"',
        "value must be at most 3 items, got 4 items",
    ]


# -- case 11: pattern ----------------------------------------------------------------------------


def test_pattern_rejects() -> None:
    reasons = validate(S.string(pattern="^[a-z]+$"), "Abc")
    assert len(reasons) == 1 and "pattern" in reasons[0]


def test_pattern_is_unanchored_search() -> None:
    assert validate(S.string(pattern="b+"), "abba") == []


@pytest.mark.parametrize("pattern", ["[", 42])
def test_invalid_pattern_is_a_reason_not_an_exception(pattern: JSONValue) -> None:
    reasons = validate(S.string(pattern=pattern), "x")
    assert len(reasons) == 1 and "invalid pattern" in reasons[0]


# -- case 12: objects ----------------------------------------------------------------------------


def test_object_missing_and_unknown_keys_sorted() -> None:
    schema = S.object({"name": S.string(required=True), "age": S.integer()})
    assert validate(schema, {"zeta": 1, "age": "x"}) == [
        "value has unknown field zeta",
        'value.age must be an integer, got "x"',
        "value.name is required but missing",
    ]


def test_open_object_accepts_extras_but_enforces_required() -> None:
    schema = S.object({"name": S.string(required=True)}, open=True)
    assert validate(schema, {"name": "a", "extra": 1}) == []
    assert validate(schema, {"extra": 1}) == ["value.name is required but missing"]


def test_nested_object_location() -> None:
    schema = S.object({"user": S.object({"tier": S.enum(["gold"])})})
    assert validate(schema, {"user": {"tier": "tin"}}) == [
        'value.user.tier must be one of ["gold"], got "tin"'
    ]


# -- case 13: None, unknown constraints, constraint keys -----------------------------------------


@pytest.mark.parametrize("schema", [S.string(), S.integer(min=5), S.enum(["a"]), S.list(int)])
def test_none_is_valid_unless_required(schema: Schema) -> None:
    assert validate(schema, None) == []
    required = Schema(schema.type, item=schema.item, values=schema.values, required=True)
    assert validate(required, None) == ["value is required but was null"]


def test_none_inside_list_and_object() -> None:
    assert validate(S.list(S.integer()), [1, None]) == []
    assert validate(S.list(S.integer(required=True)), [None]) == [
        "value[0] is required but was null"
    ]
    assert validate(S.object({"a": S.integer()}), {"a": None}) == []
    assert validate(S.object({"a": S.integer(required=True)}), {"a": None}) == [
        "value.a is required but was null"
    ]


def test_unknown_constraints_are_stored_and_ignored() -> None:
    schema = S.string(format="email")
    assert schema.constraints == {"format": "email"}
    assert validate(schema, "not an email") == []
    assert schema_problems(schema) == []


def test_constructor_and_hand_built_constraints_agree() -> None:
    hand_built = Schema("integer", constraints={"min": 0})
    assert hand_built == S.integer(min=0)
    assert validate(hand_built, -1) == validate(S.integer(min=0), -1) != []


# -- case 14: shorthand --------------------------------------------------------------------------


class Tier(StrEnum):
    LOW = "low"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("string", S.string()),
        (SchemaType.INTEGER, S.integer()),
        ("map", S.map()),
        (("integer", {"min": 0, "required": True}), S.integer(min=0, required=True)),
        (("list", ("list", "integer"), {"max_items": 3}), S.list(S.list(int), max_items=3)),
        (("list", "string"), S.list(str)),
        (("enum", ["a", "b"]), S.enum(["a", "b"])),
        (("enum", ["a"], {"default": "a"}), S.enum(["a"], default="a")),
        (("object", {"n": "integer"}), S.object({"n": S.integer()})),
        (("object", {"n": "integer"}, {"open": True}), S.object({"n": int}, open=True)),
        (("string", {"metadata": {"ui": "x"}}), S.string(metadata={"ui": "x"})),
        (("boolean", {}), S.boolean()),
        (str, S.string()),
        (int, S.integer()),
        (float, S.float()),
        (bool, S.boolean()),
        (dict, S.map()),
        (dict[str, int], S.map()),
        (list[str], S.list(S.string())),
        (list[list[int]], S.list(S.list(S.integer()))),
        (Literal["a", "b"], S.enum(["a", "b"])),
    ],
)
def test_shorthand(spec: object, expected: Schema) -> None:
    assert schema_of(spec) == expected
    assert normalize_schema(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "list",
        "object",
        "enum",
        "regex",
        list,
        None,
        42,
        ("enum", "ab"),
        ("integer", {"required": "yes"}),
        ("integer", {1: 2}),
        ("list", "nope"),
        ("object", {"a": "nope"}),
        ("integer", {}, {}),
        list[int | str],
    ],
)
def test_non_shorthand_passes_through(spec: object) -> None:
    assert normalize_schema(spec) is spec
    with pytest.raises(TypeError):
        schema_of(spec)


def test_real_schema_passes_through_unchanged() -> None:
    schema = S.string(min_length=1)
    assert normalize_schema(schema) is schema


def test_constructor_children_may_be_shorthand_but_not_junk() -> None:
    assert S.object({"tags": list[str]}).fields["tags"] == S.list(S.string())
    with pytest.raises(TypeError):
        S.list("nope")
    with pytest.raises(TypeError):
        S.object({"a": 42})
    with pytest.raises(TypeError):
        S.enum("ab")


# -- DECISIONS: equality -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "value", "member"),
    [
        ([1], True, False),
        ([True], 1, False),
        ([1], 1.0, False),
        ([1.0], 1, False),
        ([0], False, False),
        ([1], 1, True),
        ([True], True, True),
        ([[1, 2]], [1, 2], True),
        ([[1, 2]], [1, 2.0], False),
        ([{"a": 1}], {"a": 1}, True),
        ([{"a": 1}], {"a": True}, False),
    ],
)
def test_enum_membership_is_strict(values: list[JSONValue], value: JSONValue, member: bool) -> None:
    schema = S.enum(values)
    assert (validate(schema, value) == []) is member


def test_strict_key() -> None:
    samples: list[JSONValue] = [1, 1.0, True, "1", None, [1], {"1": 1}]
    assert len({strict_key(v) for v in samples}) == 7
    assert strict_key({"a": [1, {"b": 2}]}) == strict_key({"a": [1, {"b": 2}]})
    assert strict_key(Tier.LOW) == strict_key("low")


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (1, 1.0, True),
        (True, 1, False),
        (1, True, False),
        (False, 0, False),
        (False, 0.0, False),
        (True, True, True),
        ([1, {"x": 2}], [1.0, {"x": 2.0}], True),
        ([True], [1], False),
        ({"a": 1}, {"a": 1, "b": None}, False),
        (None, None, True),
        (None, 0, False),
        ("1", 1, False),
        ([1, 2], [1], False),
    ],
)
def test_loose_equal(a: JSONValue, b: JSONValue, equal: bool) -> None:
    assert loose_equal(a, b) is equal
    assert loose_equal(b, a) is equal


@given(json_values, json_values)
def test_strict_equality_implies_loose(a: JSONValue, b: JSONValue) -> None:
    assert loose_equal(a, a)
    if strict_key(a) == strict_key(b):
        assert loose_equal(a, b)


# -- well-formedness (§2.6, compiler F3/F5) ------------------------------------------------------


@pytest.mark.parametrize(
    "schema",
    [
        S.string(),
        S.list(S.object({"id": S.string(required=True)}), max_items=3),
        S.enum(["low", "high"], default="low"),
        S.string(default=None),
        S.integer(min=0, default=0),
        S.boolean(default=False),
        S.string(default=""),
        S.object({"a": int}, open=True, metadata={"ui": {"x": 1}}),
    ],
)
def test_well_formed(schema: Schema) -> None:
    assert schema_problems(schema) == []


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ("string", "expected a Schema"),
        (Schema("regex"), 'unknown schema type "regex"'),
        (Schema("list"), "schema.item: a list schema needs an item schema"),
        (Schema("string", item=S.string()), "only list schemas have an item"),
        (Schema("string", values=["a"]), "only enum schemas have values"),
        (Schema("map", fields={"a": S.string()}), "only object schemas have fields"),
        (S.object({"$a": S.string()}), "invalid field name"),
        (S.object({"a": Schema("nope")}), 'schema.fields.a: unknown schema type "nope"'),
        (S.list(Schema("list")), "schema.item.item: a list schema needs"),
        (Schema("string", required="yes"), "required: must be a boolean"),  # type: ignore[arg-type]
        (S.float(default="ten"), 'schema.default: default must be a number, got "ten"'),
        (S.integer(min=0, default=-1), "schema.default: default must be at least 0, got -1"),
        (S.string(required=True, default=None), "default is required but was null"),
        (S.string(default=(1, 2)), "tuple is not durable"),  # type: ignore[arg-type]
        (S.string(meta=math.nan), "non-finite float"),
        (S.map(metadata={"$k": 1}), "reserved"),
        (S.enum([{1, 2}]), "set is not durable"),  # type: ignore[list-item]
        (S.string(pattern="["), "constraints.pattern: not a valid regular expression"),
        (S.string(min_length=-1), "constraints.min_length: must be a non-negative integer"),
        (S.list(int, max_items=1.5), "constraints.max_items: must be a non-negative integer"),
        (S.integer(min="0"), 'constraints.min: must be a number, got "0"'),
        (S.float(max=True), "constraints.max: must be a number, got true"),
        (S.object({}, open="yes"), "constraints.open: must be a boolean"),
    ],
)
def test_ill_formed(schema: object, fragment: str) -> None:
    problems = schema_problems(schema)
    assert any(fragment in p for p in problems), problems


def test_constraints_of_other_types_are_not_checked() -> None:
    assert schema_problems(S.string(min="x", max_items="y")) == []


# -- JSON form -----------------------------------------------------------------------------------


def test_json_omission_rules() -> None:
    assert schema_to_json(S.string()) == {"type": "string"}
    assert schema_to_json(S.string(default=None)) == {"type": "string", "default": None}
    assert schema_to_json(S.boolean(default=False, required=True)) == {
        "type": "boolean",
        "required": True,
        "default": False,
    }
    assert schema_to_json(
        S.list(S.object({"id": S.string(required=True)}), max_items=2, metadata={"m": 1})
    ) == {
        "type": "list",
        "item": {"type": "object", "fields": {"id": {"type": "string", "required": True}}},
        "constraints": {"max_items": 2},
        "metadata": {"m": 1},
    }
    assert schema_to_json(S.enum(["a"])) == {"type": "enum", "values": ["a"]}


def test_absent_default_and_null_default_differ() -> None:
    absent = schema_from_json({"type": "string"})
    null = schema_from_json({"type": "string", "default": None})
    assert absent.default is NO_DEFAULT
    assert null.default is None
    assert absent != null


def test_enum_members_are_written_as_strings() -> None:
    doc = schema_to_json(S.enum([Tier.LOW], default=Tier.LOW))
    assert doc == {"type": "enum", "values": ["low"], "default": "low"}
    assert type(doc["values"][0]) is str  # type: ignore[index]


def test_explicit_empty_attributes_load() -> None:
    doc = {
        "type": "list",
        "fields": {},
        "item": {"type": "integer"},
        "values": [],
        "required": False,
        "constraints": {},
        "metadata": {},
    }
    assert schema_from_json(doc) == S.list(int)


@pytest.mark.parametrize(
    ("doc", "path", "fragment"),
    [
        ([], "$", "must be a JSON object"),
        ({}, "$", "missing key 'type'"),
        ({"type": "regex"}, "$.type", "unknown schema type"),
        ({"type": 1}, "$.type", "unknown schema type"),
        ({"type": "string", "format": "x"}, "$.format", "unknown key"),
        ({"type": "string", 1: 2}, "$", "non-string key"),
        ({"type": "string", "required": "yes"}, "$.required", "must be a boolean"),
        ({"type": "string", "required": None}, "$.required", "must be a boolean"),
        ({"type": "enum", "values": "ab"}, "$.values", "must be a list"),
        ({"type": "object", "fields": []}, "$.fields", "must be a JSON object"),
        ({"type": "object", "fields": {"$x": {"type": "string"}}}, "$.fields.$x", "'$'"),
        ({"type": "object", "fields": {"a": {"type": "nope"}}}, "$.fields.a.type", "unknown"),
        ({"type": "list", "item": "string"}, "$.item", "must be a JSON object"),
        ({"type": "list", "item": {"type": "list", "item": 3}}, "$.item.item", "JSON object"),
        ({"type": "string", "default": (1,)}, "$.default", "not a durable value"),
        ({"type": "string", "default": math.nan}, "$.default", "not a durable value"),
        ({"type": "string", "constraints": {"$k": 1}}, "$.constraints", "not a durable"),
        ({"type": "string", "metadata": {"a": {"$k": 1}}}, "$.metadata", "not a durable"),
        ({"type": "string", "metadata": None}, "$.metadata", "must be a JSON object"),
    ],
)
def test_strict_load(doc: object, path: str, fragment: str) -> None:
    with pytest.raises(SchemaFormatError) as caught:
        schema_from_json(doc)
    assert str(caught.value).startswith(path + ":")
    assert fragment in caught.value.reason


def test_load_error_path_is_prefixed() -> None:
    with pytest.raises(SchemaFormatError) as caught:
        schema_from_json({"type": "x"}, at=("fields", "topic", "schema"))
    assert caught.value.path == ("fields", "topic", "schema", "type")
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("schema", "error"),
    [
        (Schema("regex"), SchemaFormatError),
        (S.object({"$a": S.string()}), SchemaFormatError),
        (Schema("list", item="string"), SchemaFormatError),  # type: ignore[arg-type]
        (S.string(default=(1,)), NonDurableValue),  # type: ignore[arg-type]
        (S.string(metadata={"x": math.inf}), NonDurableValue),
    ],
)
def test_dump_errors(schema: Schema, error: type[Exception]) -> None:
    with pytest.raises(error):
        schema_to_json(schema)


@given(schemas)
def test_json_round_trip(schema: Schema) -> None:
    doc = schema_to_json(schema)
    assert schema_from_json(doc) == schema
    assert schema_to_json(schema_from_json(doc)) == doc


@settings(max_examples=300)
@given(schema_junk)
def test_loader_raises_only_format_errors(doc: object) -> None:
    try:
        schema = schema_from_json(doc)
    except SchemaFormatError:
        return
    assert schema_from_json(schema_to_json(schema)) == schema
    schema_problems(schema)  # never raises either


@given(schemas, json_values)
def test_validate_and_problems_never_raise(schema: Schema, value: JSONValue) -> None:
    assert isinstance(validate(schema, value), list)
    assert isinstance(schema_problems(schema), list)
