"""HTML form fields generated from an interrupt's resolution schema, and the way back.

:func:`fields_for` turns the stored schema (its JSON form) into a list of :class:`FormField`
the templates draw: an enum becomes radio choices, a boolean yes/no, strings, integers and
floats their inputs, an object of such fields one input per field; anything else (maps,
lists, nested objects, no schema at all) a JSON text area. :func:`parse_resolution` reads
the submitted form back into a value and checks it against the same schema, so a bad
answer is reported field by field before anything is sent to the backend.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Final, Literal

import attrs

from docket.graph.schema import (
    FormatError,
    Schema,
    SchemaType,
    schema_from_json,
    validate,
)
from docket.values import JSONValue

__all__ = ["FormField", "Resolution", "fields_for", "parse_resolution"]

FieldKind = Literal["choice", "text", "integer", "float", "json"]
_SCALAR: Final = frozenset(
    {SchemaType.STRING, SchemaType.INTEGER, SchemaType.FLOAT, SchemaType.BOOLEAN, SchemaType.ENUM}
)
VALUE: Final = "value"  # the form name of a whole-value field
_PREFIX: Final = "field."  # the form name prefix of one field of an object value


@attrs.frozen(kw_only=True)
class FormField:
    name: str
    label: str
    kind: FieldKind
    required: bool
    choices: tuple[tuple[str, str], ...] = ()  # (submitted text, shown text)
    hint: str = ""
    current: str = ""
    error: str | None = None


@attrs.frozen(kw_only=True)
class Resolution:
    """A parsed form: the value when every field is valid, else the errors by field name
    (``""`` for problems with the value as a whole)."""

    value: JSONValue = None
    errors: dict[str, str] = attrs.field(factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


def _schema(schema_json: Mapping[str, JSONValue] | None) -> Schema | None:
    if schema_json is None:
        return None
    try:
        return schema_from_json(dict(schema_json))
    except FormatError:
        return None  # drawn as free JSON; the facade still validates on resolve


_HINTS: Final = {
    "min": "at least {}",
    "max": "at most {}",
    "min_length": "at least {} characters",
    "max_length": "at most {} characters",
    "min_items": "at least {} items",
    "max_items": "at most {} items",
    "pattern": "matching {}",
}


def _hint(schema: Schema) -> str:
    bits = [
        _HINTS.get(key, key + " {}").format(json.dumps(value) if key == "pattern" else value)
        for key, value in sorted(schema.constraints.items())
    ]
    return ", ".join(bits)


def _field(name: str, label: str, schema: Schema, required: bool) -> FormField:
    kind: FieldKind
    choices: tuple[tuple[str, str], ...] = ()
    if schema.type == SchemaType.ENUM:
        kind = "choice"
        choices = tuple(
            (json.dumps(v), v if isinstance(v, str) else json.dumps(v)) for v in schema.values
        )
    elif schema.type == SchemaType.BOOLEAN:
        kind = "choice"
        choices = (("true", "yes"), ("false", "no"))
    elif schema.type == SchemaType.STRING:
        kind = "text"
    elif schema.type == SchemaType.INTEGER:
        kind = "integer"
    elif schema.type == SchemaType.FLOAT:
        kind = "float"
    else:
        kind = "json"
    hint = _hint(schema)
    if kind == "json":
        hint = f"JSON ({schema.type})" + (f"; {hint}" if hint else "")
    return FormField(
        name=name, label=label, kind=kind, required=required, choices=choices, hint=hint
    )


def _object_fields(schema: Schema) -> bool:
    return (
        schema.type == SchemaType.OBJECT
        and bool(schema.fields)
        and all(child.type in _SCALAR for child in schema.fields.values())
    )


def fields_for(schema_json: Mapping[str, JSONValue] | None) -> list[FormField]:
    """The inputs that answer an interrupt with this (JSON-form) schema."""
    schema = _schema(schema_json)
    if schema is None:
        return [FormField(name=VALUE, label="value", kind="json", required=True, hint="JSON")]
    if _object_fields(schema):
        return [
            _field(_PREFIX + key, key, child, child.required)
            for key, child in schema.fields.items()
        ]
    return [_field(VALUE, "value", schema, True)]


def _read(text: str, field: FormField) -> tuple[JSONValue, str | None]:
    """The value of one submitted input (``None`` with no error means left empty)."""
    if field.kind == "text":
        return text, None
    stripped = text.strip()
    if not stripped:
        return None, None
    if field.kind == "integer":
        try:
            return int(stripped), None
        except ValueError:
            return None, "enter a whole number"
    if field.kind == "float":
        try:
            number = float(stripped)
        except ValueError:
            return None, "enter a number"
        return (number, None) if math.isfinite(number) else (None, "enter a finite number")
    if field.kind == "choice":
        allowed = {submitted for submitted, _ in field.choices}
        if stripped not in allowed:
            return None, "choose one of the options"
        parsed: JSONValue = json.loads(stripped)
        return parsed, None
    try:
        parsed = json.loads(stripped)
    except ValueError as exc:
        return None, f"not valid JSON: {exc.args[0] if exc.args else exc}"
    return parsed, None


def parse_resolution(
    schema_json: Mapping[str, JSONValue] | None, form: Mapping[str, str]
) -> tuple[Resolution, list[FormField]]:
    """Read the answer out of ``form``; returns it (or the errors) and the fields filled
    with what was submitted, for drawing the form again."""
    fields = fields_for(schema_json)
    errors: dict[str, str] = {}
    filled: list[FormField] = []
    values: dict[str, JSONValue] = {}
    for field in fields:
        text = form.get(field.name, "")
        value, error = _read(text, field)
        empty = value is None and error is None
        if field.kind == "text" and field.name != VALUE and text == "" and not field.required:
            empty = True
        if empty and field.required and field.kind != "text":
            error = "required"
        if error is None and not empty:
            values[field.name] = value
        if error is not None:
            errors[field.name] = error
        filled.append(attrs.evolve(field, current=text, error=error))
    if errors:
        return Resolution(errors=errors), filled
    answer: JSONValue
    if fields and fields[0].name == VALUE:
        answer = values.get(VALUE)
    else:
        answer = {name[len(_PREFIX) :]: value for name, value in values.items()}
    schema = _schema(schema_json)
    reasons = validate(schema, answer) if schema is not None else []
    if not reasons:
        return Resolution(value=answer), filled
    # a reason about one field of an object value ("value.note must ...") goes by that field
    by_name = {field.name: field for field in filled}
    general: list[str] = []
    for reason in reasons:
        head = reason.split(" ", 1)[0]
        name = _PREFIX + head[len(VALUE) + 1 :] if head.startswith(VALUE + ".") else ""
        if name in by_name and name not in errors:
            errors[name] = reason[len(head) + 1 :]
        else:
            general.append(reason)
    if general:
        errors[""] = "; ".join(general)
    filled = [attrs.evolve(f, error=errors.get(f.name)) for f in filled]
    return Resolution(errors=errors), filled
