"""What a failed attempt leaves behind besides its reason: the exception and the details.

A node that raises keeps its exception as an :class:`ErrorInfo` — the qualified type name,
the message and the formatted traceback (chained causes included) — in its ``node_failed``
event and, when the failure is permanent, in ``run.failure.details["exceptions"]``. A node
that returns ``Failure(details=...)`` keeps those details, made durable by
:func:`durable_details`.

Both end up in stored documents under the contract's size limits (1 MiB per event payload),
so both are bounded, and the bounds are part of the documented data shape
(docs/execution.md, "What a failure keeps"):

- ``message``: the first :data:`MAX_MESSAGE_CHARS` characters;
- ``traceback``: the last :data:`MAX_TRACEBACK_CHARS` characters, whole lines only, opened
  by a line starting with :data:`CUT_MARK` when anything was cut (the end of a traceback —
  the frame that raised and the exception line — is what a reader needs); each line first
  cut to :data:`MAX_LINE_CHARS`;
- ``details``: at most :data:`MAX_DETAILS_BYTES` bytes of canonical JSON, else replaced by
  a description (:func:`bound_details`).

Everything here is a pure function of its input, so replaying the same outcome yields the
same bytes.
"""

from __future__ import annotations

import enum
import math
import traceback
from collections.abc import Mapping
from typing import Final

import attrs

from docket.values import MAX_DEPTH, JSONDict, JSONValue, canonical_json

__all__ = [
    "CUT_MARK",
    "FAILURE_DETAILS_BUDGET",
    "FAILURE_TRACEBACK_BUDGET",
    "MAX_DETAILS_BYTES",
    "MAX_FAILURE_NODES",
    "MAX_LINE_CHARS",
    "MAX_MESSAGE_CHARS",
    "MAX_TRACEBACK_CHARS",
    "ErrorInfo",
    "bound_details",
    "clip_head",
    "clip_tail",
    "durable_details",
    "error_info",
    "exception_message",
    "type_name",
]

#: Characters of an exception's message kept (the start).
MAX_MESSAGE_CHARS: Final = 2048
#: Characters of a formatted traceback kept (the end), cut marker included.
MAX_TRACEBACK_CHARS: Final = 8192
#: Characters of one traceback line kept (the start): a huge message or repr in one line
#: would otherwise push every frame out of the kept end.
MAX_LINE_CHARS: Final = 1024
#: Bytes of canonical JSON a ``Failure``'s details may take.
MAX_DETAILS_BYTES: Final = 16384
#: A run failure keeps exceptions and details of this many failed nodes at most (the first
#: by node id; every node's own ``node_failed`` event keeps its own) ...
MAX_FAILURE_NODES: Final = 32
#: ... and shares these budgets among them, so ``run_failed`` stays far below the contract's
#: 1 MiB per event whatever the fan-out: traceback characters, then bytes of details.
FAILURE_TRACEBACK_BUDGET: Final = 65536
FAILURE_DETAILS_BUDGET: Final = 131072
#: Opens the first line of a traceback whose start was cut, and ends a cut message.
CUT_MARK: Final = "[docket: cut "

_REPR_CHARS: Final = 200  # a non-durable detail value is kept as its repr, this long at most
_DETAIL_DEPTH: Final = min(32, MAX_DEPTH)


@attrs.frozen(kw_only=True)
class ErrorInfo:
    """An exception raised by node code, bounded for storage (see the module docstring)."""

    type: str
    message: str
    traceback: str

    def to_json(self) -> JSONDict:
        return {"type": self.type, "message": self.message, "traceback": self.traceback}

    def clipped(self, traceback_chars: int) -> ErrorInfo:
        """The same error with its traceback cut to its last ``traceback_chars``."""
        return attrs.evolve(self, traceback=clip_tail(self.traceback, traceback_chars))


def type_name(kind: type[BaseException]) -> str:
    """``ValueError`` for builtins, else ``module.QualifiedName``."""
    module = getattr(kind, "__module__", None)
    name = getattr(kind, "__qualname__", kind.__name__)
    return name if module in (None, "builtins") else f"{module}.{name}"


def _storable(text: str) -> str:
    # Lone surrogates (undecodable file names, bytes decoded with surrogateescape) cannot
    # be encoded as UTF-8: escape them instead of failing the commit.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def clip_head(text: str, limit: int) -> str:
    """The first ``limit`` characters of ``text``, the cut noted at the end."""
    if len(text) <= limit:
        return text
    note = f" {CUT_MARK}{len(text) - limit} more characters]"
    return text[: max(0, limit - len(note))] + note


def clip_tail(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text`` (whole lines when it has several), opened
    by a ``CUT_MARK`` line when anything was cut."""
    if len(text) <= limit:
        return text
    note = f"{CUT_MARK}{len(text)} characters, the last ones follow]\n"
    kept = text[len(text) - max(0, limit - len(note)) :]
    newline = kept.find("\n")
    if 0 <= newline < len(kept) - 1:
        kept = kept[newline + 1 :]  # drop the partial first line
    return note + kept


def exception_message(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder when its ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not lose the failure
        return f"<{type(exc).__name__} object: str() failed>"


def error_info(exc: BaseException) -> ErrorInfo:
    """The bounded record of ``exc`` and its traceback."""
    try:
        lines = traceback.format_exception(exc)
    except Exception:  # formatting runs user code (__str__); keep what can be kept
        lines = [f"{type_name(type(exc))}: {exception_message(exc)}\n"]
    # one entry may hold several lines (a frame and its source): cut line by line
    text = "\n".join(clip_head(line, MAX_LINE_CHARS) for line in "".join(lines).split("\n"))
    return ErrorInfo(
        type=_storable(type_name(type(exc))),
        message=clip_head(_storable(exception_message(exc)), MAX_MESSAGE_CHARS),
        traceback=clip_tail(_storable(text), MAX_TRACEBACK_CHARS),
    )


def _describe(value: object) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} object>"
    return clip_head(_storable(text), _REPR_CHARS)


def _durable(value: object, depth: int) -> JSONValue:
    """``value`` made durable: durable parts kept, the rest replaced by their repr."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value.value, str) else _describe(value)
    if isinstance(value, str):
        return _storable(str(value))
    if isinstance(value, int):
        # past a few hundred bits an int cannot always be printed (sys.set_int_max_str_digits)
        return int(value) if value.bit_length() <= 256 else _describe(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else _describe(value)
    if depth >= _DETAIL_DEPTH:
        return _describe(value)
    if isinstance(value, list | tuple):
        return [_durable(item, depth + 1) for item in value]
    if isinstance(value, Mapping):
        out: JSONDict = {}
        for key, item in value.items():
            name = _storable(str(key)) if isinstance(key, str) else _describe(key)
            if name.startswith("$"):  # reserved in durable maps
                name = _describe(name)
            out[name] = _durable(item, depth + 1)
        return out
    return _describe(value)


def durable_details(details: object) -> JSONDict:
    """A node's ``Failure.details`` as a durable map: durable values unchanged, tuples as
    lists, ``str`` enums as their value, anything else (and keys that are not strings or
    start with ``$``) as its bounded ``repr``; then bounded by :func:`bound_details`.
    Never raises: whatever the node put there, the failure is recorded."""
    try:
        made = _durable(details, 0)
    except Exception as exc:  # e.g. a mapping whose items() raises
        made = {"cut": clip_head(f"details cannot be stored: {_describe(exc)}", 512)}
    if not isinstance(made, dict):
        made = {"value": made}
    return bound_details(made, MAX_DETAILS_BYTES)


def bound_details(details: JSONDict, limit: int) -> JSONDict:
    """``details`` if its canonical JSON fits in ``limit`` bytes, else a description:
    ``{"cut": "<why>", "preview": "<the start of its JSON>"}``."""
    try:
        encoded = canonical_json(details)
    except ValueError as exc:  # not expected of durable_details' output; never fail on it
        return {"cut": clip_head(f"details cannot be stored: {exc}", 512)}
    if len(encoded) <= limit:
        return details
    preview = encoded[: max(0, min(1024, limit // 2))].decode("utf-8", "ignore")
    return {
        "cut": f"details of {len(encoded)} bytes exceed the {limit}-byte limit",
        "preview": preview,
    }
