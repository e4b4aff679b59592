"""Maps: a node that runs once per item of a list read from state (dynamic fan-out).

A node's ``map`` option is data in the graph document::

    "map": {"over": "questions", "as": "question", "max_items": 50, "max_parallel": 4}

- ``over`` (required): a state field or input whose schema is a list; its committed value
  when the node is activated is the list of items;
- ``as`` (required): the name each item is given in the node's state (a public ID that
  is not an input or field, so it never shadows one);
- ``max_items`` (optional): a list longer than this fails the run (``map_too_large``),
  never truncated; the host has its own ceiling and the smaller one applies;
- ``max_parallel`` (optional): at most this many items of the node run at once inside a
  worker.

The model keeps the option as a plain durable mapping (so it round-trips and is hashed
like every other node attribute); :func:`map_problems` is the compiler's check and
:func:`parse_map` the lowering to :class:`MapSpec`. Execution rules live in
:mod:`docket.core.plan` and :mod:`docket.core.barrier`; docs/graphs.md states them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from docket.graph.model import id_problem
from docket.values import JSONDict, JSONValue

__all__ = ["MAP_KEYS", "MapSpec", "map_problems", "parse_map"]

MAP_KEYS: Final = frozenset({"over", "as", "max_items", "max_parallel"})


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@attrs.frozen(kw_only=True)
class MapSpec:
    """A checked map option. ``item`` is the document's ``as`` (a keyword in Python)."""

    over: str
    item: str
    max_items: int | None = None
    max_parallel: int | None = None

    def to_json(self) -> JSONDict:
        """The document form (``None`` limits omitted)."""
        doc: JSONDict = {"over": self.over, "as": self.item}
        if self.max_items is not None:
            doc["max_items"] = self.max_items
        if self.max_parallel is not None:
            doc["max_parallel"] = self.max_parallel
        return doc


def map_problems(raw: Mapping[str, JSONValue], lists: Mapping[str, bool]) -> list[tuple[str, str]]:
    """Every problem of a node's ``map`` option as ``(key, message)`` pairs.

    ``lists`` maps each input and field ID to whether its schema is a list."""
    out: list[tuple[str, str]] = []
    for key in sorted(set(raw) - MAP_KEYS):
        out.append((key, f"unknown map key {key!r} (known: {', '.join(sorted(MAP_KEYS))})"))
    over = raw.get("over")
    if not isinstance(over, str) or not over:
        out.append(("over", "map.over must name a list-typed input or field"))
    elif over not in lists:
        out.append(("over", f"map.over names {over!r}, which is no input or field"))
    elif not lists[over]:
        out.append(("over", f"map.over names {over!r}, whose schema is not a list"))
    item = raw.get("as")
    if not isinstance(item, str) or id_problem(item) is not None:
        out.append(("as", f"map.as must be a valid ID, got {item!r}"))
    elif item in lists:
        out.append(("as", f"map.as {item!r} clashes with an input or field of that name"))
    for key in ("max_items", "max_parallel"):
        value = raw.get(key)
        if value is not None and not _positive(value):
            out.append((key, f"map.{key} must be a positive integer, got {value!r}"))
    return out


def parse_map(raw: Mapping[str, JSONValue]) -> MapSpec | None:
    """The checked option (``None`` for a node without one); call after
    :func:`map_problems` found nothing."""
    if not raw:
        return None
    max_items, max_parallel = raw.get("max_items"), raw.get("max_parallel")
    return MapSpec(
        over=str(raw["over"]),
        item=str(raw["as"]),
        max_items=max_items if isinstance(max_items, int) else None,
        max_parallel=max_parallel if isinstance(max_parallel, int) else None,
    )
