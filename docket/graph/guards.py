"""Guards: durable boolean expressions over the committed state, evaluated on edges.

Public API
----------
- ``GuardOp``: ``changed version_at_least exists equals all any not path`` (``StrEnum``).
- ``Guard``: frozen record ``(op, args)``; generic storage, so a malformed guard is a value
  that ``guard_problems`` reports rather than a constructor error. ``GuardArg`` is the type
  of one argument (a nested ``Guard`` or a durable value).
- Constructors ``changed(f)``, ``version_at_least(f, n)``, ``exists(ref)``,
  ``equals(ref, expected)``, ``path(f, segments)``, ``all_(*gs)``, ``any_(*gs)``, ``not_(g)``;
  sugar ``a & b`` (all), ``a | b`` (any), ``~a`` (not).
- ``guard_problems(guard, known_fields=None) -> list[GuardProblem]``: every reason the
  evaluator would reject the guard (plus unknown fields when ``known_fields`` is given),
  each tagged with a ``GuardProblemCode``. Empty means the guard can never fail to evaluate.
- ``guard_fields(guard) -> list[str]``: field ids the guard reads (sorted, unique).
- ``guard_strings(guard) -> set[str]``: every string in the guard, literals included.
- ``StateView``: ``values`` (public id -> value; absent = missing), ``versions``, ``changed``.
- ``evaluate(guard, view) -> GuardOk | GuardEvalError``: lax evaluation.
- ``guard_to_json(guard)`` / ``guard_from_json(doc, at=())``: JSON form with the ``$guard``
  tag for guards in literal argument positions (strict load, ``GuardFormatError``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from enum import Enum, StrEnum
from typing import Final, TypeAlias

import attrs

from docket.graph.schema import (
    FormatError,
    expect_durable,
    expect_keys,
    expect_object,
    format_path,
    loose_equal,
    show,
)
from docket.values import GUARD_TAG, JSONDict, JSONValue, coerce_durable, durable_errors

__all__ = [
    "Guard",
    "GuardArg",
    "GuardEvalError",
    "GuardFormatError",
    "GuardOk",
    "GuardOp",
    "GuardProblem",
    "GuardProblemCode",
    "GuardResult",
    "StateView",
    "all_",
    "any_",
    "changed",
    "equals",
    "evaluate",
    "exists",
    "guard_fields",
    "guard_from_json",
    "guard_problems",
    "guard_strings",
    "guard_to_json",
    "not_",
    "path",
    "version_at_least",
]


class GuardOp(StrEnum):
    CHANGED = "changed"
    VERSION_AT_LEAST = "version_at_least"
    EXISTS = "exists"
    EQUALS = "equals"
    ALL = "all"
    ANY = "any"
    NOT = "not"
    PATH = "path"


GuardArg: TypeAlias = "Guard | JSONValue"


class GuardFormatError(FormatError):
    """A guard document is malformed."""


def _to_op(value: str) -> GuardOp | str:
    return _op_of(value) or value  # an unknown op is kept for guard_problems


def _to_args(value: Iterable[GuardArg]) -> tuple[GuardArg, ...]:
    if isinstance(value, str | bytes | Mapping):
        raise TypeError(f"guard args must be a list or tuple, got {type(value).__name__}")
    return tuple(value)


@attrs.frozen
class Guard:
    """A guard expression node. Literal list/dict arguments are kept as JSON values."""

    op: GuardOp | str = attrs.field(converter=_to_op)
    args: tuple[GuardArg, ...] = attrs.field(default=(), converter=_to_args)

    def __and__(self, other: Guard) -> Guard:
        """``a & b`` is ``all_(a, b)``; operands that are already ``all`` are flattened."""
        return Guard(GuardOp.ALL, (*_operands(self, GuardOp.ALL), *_operands(other, GuardOp.ALL)))

    def __or__(self, other: Guard) -> Guard:
        """``a | b`` is ``any_(a, b)``; operands that are already ``any`` are flattened."""
        return Guard(GuardOp.ANY, (*_operands(self, GuardOp.ANY), *_operands(other, GuardOp.ANY)))

    def __invert__(self) -> Guard:
        return not_(self)


def _operands(guard: Guard, op: GuardOp) -> tuple[GuardArg, ...]:
    return guard.args if guard.op is op else (guard,)


def changed(field: str) -> Guard:
    return Guard(GuardOp.CHANGED, (field,))


def version_at_least(field: str, n: int) -> Guard:
    return Guard(GuardOp.VERSION_AT_LEAST, (field, n))


def exists(ref: str | Guard) -> Guard:
    return Guard(GuardOp.EXISTS, (ref,))


def equals(ref: str | Guard, expected: GuardArg) -> Guard:
    return Guard(GuardOp.EQUALS, (ref, expected))


def path(field: str, segments: Sequence[str | int] = ()) -> Guard:
    return Guard(GuardOp.PATH, (field, list(segments)))


def all_(*guards: Guard) -> Guard:
    return Guard(GuardOp.ALL, guards)


def any_(*guards: Guard) -> Guard:
    return Guard(GuardOp.ANY, guards)


def not_(guard: Guard) -> Guard:
    return Guard(GuardOp.NOT, (guard,))


# -- static checks -------------------------------------------------------------------------


class GuardProblemCode(StrEnum):
    INVALID_GUARD = "invalid_guard"
    UNKNOWN_GUARD_FIELD = "unknown_guard_field"
    INVALID_GUARD_PATH = "invalid_guard_path"


@attrs.frozen
class GuardProblem:
    code: GuardProblemCode
    message: str


_COMBINATORS: Final = frozenset({GuardOp.ALL, GuardOp.ANY, GuardOp.NOT})


class _Checker:
    """Collects problems while walking a guard the way ``evaluate`` would."""

    def __init__(self, known_fields: Collection[str] | None) -> None:
        self.known = known_fields
        self.out: list[GuardProblem] = []

    def bad(self, message: str, code: GuardProblemCode = GuardProblemCode.INVALID_GUARD) -> None:
        self.out.append(GuardProblem(code, message))

    def field(self, field_id: str) -> None:
        if self.known is not None and field_id not in self.known:
            self.bad(f"unknown field {show(field_id)}", GuardProblemCode.UNKNOWN_GUARD_FIELD)

    def boolean(self, guard: object) -> None:
        if not isinstance(guard, Guard):
            self.bad(f"expected a guard expression, got {show(guard)}")
            return
        op, args = _op_of(guard.op), guard.args
        if op is None:
            self.bad(f"unsupported guard op {show(guard.op)}")
        elif not isinstance(args, tuple):
            self.bad(f"{op} arguments must be a list, got {show(args)}")
        elif op in (GuardOp.ALL, GuardOp.ANY):
            for arg in args:
                self.boolean(arg)
        elif op is GuardOp.NOT and len(args) == 1:
            self.boolean(args[0])
        elif op is GuardOp.CHANGED and len(args) == 1 and isinstance(args[0], str):
            self.field(args[0])
        elif op is GuardOp.VERSION_AT_LEAST and len(args) == 2 and isinstance(args[0], str):
            self.field(args[0])
            n = args[1]
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                self.bad(f"version_at_least needs an integer >= 0, got {show(n)}")
        elif op is GuardOp.EXISTS and len(args) == 1:
            self.reference(args[0])
        elif op is GuardOp.EQUALS and len(args) == 2:
            self.reference(args[0])
            self.expected(args[1])
        elif op is GuardOp.PATH:
            self.bad("path is a reference, not a boolean expression; use exists or equals")
        else:
            self.bad(f"{op} has malformed arguments {_show_args(args)}")

    def reference(self, ref: object) -> None:
        if isinstance(ref, str):
            self.field(ref)
        elif isinstance(ref, Guard) and ref.op is GuardOp.PATH:
            self.path(ref)
        else:
            self.bad(f"a reference must be a field id or a path expression, got {_show_arg(ref)}")

    def expected(self, value: object) -> None:
        if isinstance(value, Guard):
            if value.op is GuardOp.PATH:
                self.path(value)
            else:
                self.bad(f"a comparison value cannot be a {show(str(value.op))} expression")
            return
        for error in durable_errors(value, "comparison value"):
            self.bad(error)

    def path(self, guard: Guard) -> None:
        args = guard.args
        if not isinstance(args, tuple) or len(args) != 2 or not isinstance(args[0], str):
            self.bad(f"path needs [field_id, segments], got {_show_args(args)}")
            return
        self.field(args[0])
        segments = args[1]
        if not isinstance(segments, list):
            self.bad(
                f"path segments must be a list, got {show(segments)}",
                GuardProblemCode.INVALID_GUARD_PATH,
            )
            return
        for seg in segments:
            if not _is_segment(seg):
                self.bad(
                    f"path segment must be a string or an integer, got {show(seg)}",
                    GuardProblemCode.INVALID_GUARD_PATH,
                )


def _op_of(op: object) -> GuardOp | None:
    if isinstance(op, Enum):
        op = op.value
    if not isinstance(op, str):
        return None
    try:
        return GuardOp(str.__str__(op))
    except ValueError:
        return None


def _is_segment(seg: object) -> bool:
    return isinstance(seg, str) or (isinstance(seg, int) and not isinstance(seg, bool))


def _show_arg(arg: object) -> str:
    if isinstance(arg, Guard):
        return f"a {show(str(arg.op))} expression"
    return show(arg)


def _show_args(args: object) -> str:
    if isinstance(args, tuple):
        return "[" + ", ".join(_show_arg(a) for a in args) + "]"
    return show(args)


def guard_problems(
    guard: object, known_fields: Collection[str] | None = None
) -> list[GuardProblem]:
    """Every reason the guard is unusable as an edge guard, in walk order.

    ``INVALID_GUARD`` covers every shape ``evaluate`` rejects (unknown op, wrong arity or
    argument types, a ``path`` in boolean position, a reference that is not a field id or a
    ``path``, a non-``path`` guard as comparison value) plus what it tolerates but is surely
    a mistake (``version_at_least`` below 0, a non-durable literal). ``INVALID_GUARD_PATH``:
    path segments not a list of strings/integers (bools are not integers here).
    ``UNKNOWN_GUARD_FIELD``: only when ``known_fields`` is given, every field id not in it.
    An empty list means ``evaluate`` can never return an error for this guard.
    """
    checker = _Checker(known_fields)
    checker.boolean(guard)
    return checker.out


def _walk_args(guard: Guard) -> Iterable[GuardArg]:
    """Every argument of the guard and of the guards nested in it (literals not entered)."""
    for arg in guard.args if isinstance(guard.args, tuple) else ():
        yield arg
        if isinstance(arg, Guard):
            yield from _walk_args(arg)


_READS_FIRST_ARG: Final = frozenset(
    {GuardOp.CHANGED, GuardOp.VERSION_AT_LEAST, GuardOp.PATH, GuardOp.EXISTS, GuardOp.EQUALS}
)


def guard_fields(guard: Guard) -> list[str]:
    """Field ids the guard reads (changed/version_at_least/path fields and string references),
    sorted and unique. Malformed parts are skipped."""
    found: set[str] = set()

    def visit(g: Guard) -> None:
        args = g.args if isinstance(g.args, tuple) else ()
        op = _op_of(g.op)
        if op in _READS_FIRST_ARG and args and isinstance(args[0], str):
            found.add(args[0])
        for arg in args:
            if isinstance(arg, Guard):
                visit(arg)

    visit(guard)
    return sorted(found)


def guard_strings(guard: Guard) -> set[str]:
    """Every string in the guard's arguments, recursively (literals included, dict keys not)."""
    found: set[str] = set()

    def collect(value: object) -> None:
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, list):
            for element in value:
                collect(element)
        elif isinstance(value, dict):
            for element in value.values():
                collect(element)

    for arg in _walk_args(guard):
        collect(arg)
    return found


# -- evaluation ------------------------------------------------------------------------------


def _frozen_strs(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _values(value: Mapping[str, JSONValue]) -> dict[str, JSONValue]:
    return dict(value)


def _versions(value: Mapping[str, int]) -> dict[str, int]:
    return dict(value)


@attrs.frozen
class StateView:
    """The committed state a guard reads. A key absent from ``values`` is *missing*."""

    values: dict[str, JSONValue] = attrs.field(factory=dict, converter=_values)
    versions: dict[str, int] = attrs.field(factory=dict, converter=_versions)
    changed: frozenset[str] = attrs.field(factory=frozenset, converter=_frozen_strs)


@attrs.frozen
class GuardOk:
    value: bool


@attrs.frozen
class GuardEvalError:
    reasons: tuple[str, ...]


GuardResult: TypeAlias = GuardOk | GuardEvalError


class _Missing(Enum):
    TOKEN = "MISSING"


_MISSING: Final = _Missing.TOKEN
_Resolved: TypeAlias = "JSONValue | _Missing"


class _EvalFailed(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _eval(guard: object, view: StateView) -> bool:
    if not isinstance(guard, Guard):
        raise _EvalFailed(f"guard must be a guard expression, got {show(guard)}")
    op, args = _op_of(guard.op), guard.args
    if isinstance(args, tuple):
        if op is GuardOp.ALL:
            return all([_eval(arg, view) for arg in args])  # every arg runs; first error aborts
        if op is GuardOp.ANY:
            return any([_eval(arg, view) for arg in args])
        if op is GuardOp.NOT and len(args) == 1:
            return not _eval(args[0], view)
        if op is GuardOp.CHANGED and len(args) == 1 and isinstance(args[0], str):
            return args[0] in view.changed
        if op is GuardOp.VERSION_AT_LEAST and len(args) == 2 and isinstance(args[0], str):
            n = args[1]
            if isinstance(n, int) and not isinstance(n, bool):
                return view.versions.get(args[0], 0) >= n
        if op is GuardOp.EXISTS and len(args) == 1:
            return _resolve(args[0], view) is not _MISSING
        if op is GuardOp.EQUALS and len(args) == 2:
            actual, expected = _resolve(args[0], view), _expected(args[1], view)
            if actual is _MISSING or expected is _MISSING:
                return False
            return loose_equal(actual, expected)
    name = show(str(guard.op))
    raise _EvalFailed(f"guard {name} is not a boolean expression or has invalid arguments")


def _resolve(ref: object, view: StateView) -> _Resolved:
    if isinstance(ref, str):
        return view.values.get(ref, _MISSING)
    args = ref.args if isinstance(ref, Guard) and ref.op is GuardOp.PATH else None
    if not (isinstance(args, tuple) and len(args) == 2 and isinstance(args[0], str)):
        raise _EvalFailed(
            f"guard reference must be a channel ID or path expression, got {_show_arg(ref)}"
        )
    segments = args[1]
    if not isinstance(segments, list):
        raise _EvalFailed(f"guard path segments must be a list, got {show(segments)}")
    node: _Resolved = view.values.get(args[0], _MISSING)
    for seg in segments:
        if isinstance(node, dict) and isinstance(seg, str):
            node = node.get(seg, _MISSING)
        elif isinstance(node, list) and isinstance(seg, int) and not isinstance(seg, bool):
            node = node[seg] if -len(node) <= seg < len(node) else _MISSING
        else:
            return _MISSING
    return node


def _expected(value: GuardArg, view: StateView) -> _Resolved:
    if not isinstance(value, Guard):
        return value
    if value.op is GuardOp.PATH:
        return _resolve(value, view)
    raise _EvalFailed(f"guard comparison value cannot be {show(str(value.op))} expression")


def evaluate(guard: object, view: StateView) -> GuardResult:
    """Evaluate a guard in boolean position against ``view`` (lax: never raises).

    ``changed`` is membership in ``view.changed``; ``version_at_least`` compares
    ``view.versions`` (0 when absent). A reference is a field id (missing when absent from
    ``view.values``) or a ``path``: string segments look up dict keys, integer segments index
    lists (negative from the end), anything else is missing. ``exists`` is true iff the
    reference resolves (a present ``None`` counts); ``equals`` is false when either side is
    missing and otherwise uses ``loose_equal``. ``all``/``any`` evaluate every argument in
    order (empty: true/false) and the first error aborts. Shapes that cannot be evaluated
    give ``GuardEvalError``; ``guard_problems`` rejects all of them ahead of time.
    """
    try:
        return GuardOk(_eval(guard, view))
    except _EvalFailed as failure:
        return GuardEvalError((failure.reason,))


# -- JSON form ---------------------------------------------------------------------------------


_GUARD_KEYS: Final = frozenset({"op", "args"})


def _dump(guard: object, path: tuple[str | int, ...]) -> JSONDict:
    if not isinstance(guard, Guard):
        raise GuardFormatError(path, f"expected a guard expression, got {show(guard)}")
    op = _op_of(guard.op)
    if op is None:
        raise GuardFormatError((*path, "op"), f"unknown guard op {show(guard.op)}")
    args: list[JSONValue] = []
    for index, arg in enumerate(guard.args):
        at = (*path, "args", index)
        if op in _COMBINATORS:
            args.append(_dump(arg, at))
        elif isinstance(arg, Guard):
            args.append({GUARD_TAG: _dump(arg, (*at, GUARD_TAG))})
        else:
            args.append(coerce_durable(arg, format_path(at)))
    return {"op": op.value, "args": args}


def guard_to_json(guard: Guard) -> JSONDict:
    """``{"op": ..., "args": [...]}`` (``args`` always written).

    Arguments of ``all``/``any``/``not`` are guard objects. Elsewhere an argument is a
    literal, and a guard there (a ``path`` reference...) is wrapped as ``{"$guard": {...}}``;
    a literal can never look like the wrapper because ``$`` keys are not durable.
    Raises ``GuardFormatError`` for an unknown op or a non-guard combinator argument, and
    ``NonDurableValue`` for a non-durable literal.
    """
    return _dump(guard, ())


def _load(doc: object, path: tuple[str | int, ...]) -> Guard:
    obj = expect_object(doc, path, GuardFormatError, "a guard")
    expect_keys(obj, _GUARD_KEYS, path, GuardFormatError)
    if "op" not in obj:
        raise GuardFormatError(path, "missing key 'op'")
    raw_op = obj["op"]
    op = _op_of(raw_op) if isinstance(raw_op, str) else None
    if op is None:
        raise GuardFormatError((*path, "op"), f"unknown guard op {show(raw_op)}")
    raw_args = obj.get("args", [])
    if not isinstance(raw_args, list):
        raise GuardFormatError((*path, "args"), "must be a list")
    args: list[GuardArg] = []
    for index, arg in enumerate(raw_args):
        at = (*path, "args", index)
        if op in _COMBINATORS:
            args.append(_load(arg, at))
        elif isinstance(arg, dict) and GUARD_TAG in arg:
            if len(arg) != 1:
                raise GuardFormatError(at, f"a {GUARD_TAG} wrapper must be its only key")
            args.append(_load(arg[GUARD_TAG], (*at, GUARD_TAG)))
        else:
            args.append(expect_durable(arg, at, GuardFormatError))
    return Guard(op, args)


def guard_from_json(doc: object, at: Sequence[str | int] = ()) -> Guard:
    """Parse strictly; raise ``GuardFormatError`` with the path of the problem.

    Rejected: a non-object, unknown keys, a missing or unknown ``op``, non-list ``args``, a
    combinator argument that is not a guard object, a ``$guard`` wrapper with other keys,
    non-durable literals. Arity and argument shapes are *not* checked here: they load and
    ``guard_problems`` reports them (so a top-level ``path`` round-trips). ``at`` prefixes
    error paths.
    """
    return _load(doc, tuple(at))
