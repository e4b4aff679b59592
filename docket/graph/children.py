"""Child runs: a node that runs another published graph as a run of its own.

A node's ``child`` option is data in the graph document, and such a node has no
implementation::

    "summarise": {"child": {"graph": "summary", "hash": "<pinned version>",
                            "input": {"text": "draft"}, "output": {"summary": "summary"}}}

- ``graph`` (required): the id of the child graph, in the parent's owner scope;
- ``hash`` (required to run): the child graph's content hash. A document may leave it
  out; saving the graph through the facade pins it to the child graph's latest saved
  version, so the parent's own hash covers the exact child it will run;
- ``input``: child input id -> the parent input, field or map item name (``as``) whose
  value the child gets (read from the node's snapshot, like any node's state);
- ``output``: parent state field -> child output id: what the node writes when the child
  is done (through the field's reducer, like any node's update).

The model keeps the option as a plain durable mapping (it round-trips and is hashed like
every node attribute); :func:`child_problems` is the compiler's check and
:func:`parse_child` the lowering to :class:`ChildSpec`. Execution rules are in
docs/execution.md (child runs); the runtime part in :mod:`docket.runtime.children`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs

from docket.graph.model import id_problem
from docket.graph.nodes import NodeContext, NodeDefinition, NodeState
from docket.values import JSONDict, JSONValue

__all__ = [
    "CHILD_IMPLEMENTATION",
    "CHILD_KEYS",
    "ChildSpec",
    "child_definition",
    "child_problems",
    "parse_child",
]

CHILD_KEYS: Final = frozenset({"graph", "hash", "input", "output"})
#: The implementation name a child node has once compiled (never registered, never called).
CHILD_IMPLEMENTATION: Final = "docket.child"


def _mapping(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _to_str_map(value: Mapping[str, str] | None) -> dict[str, str]:
    return dict(sorted((value or {}).items()))


@attrs.frozen(kw_only=True)
class ChildSpec:
    """A checked child option. ``input``: child input -> parent name; ``output``: parent
    field -> child output. ``graph_hash`` is ``None`` until the graph is saved (pinned)."""

    graph: str
    graph_hash: str | None = None
    input: Mapping[str, str] = attrs.field(factory=dict, converter=_to_str_map)
    output: Mapping[str, str] = attrs.field(factory=dict, converter=_to_str_map)

    def to_json(self) -> JSONDict:
        """The document form (empty mappings and a missing hash omitted)."""
        doc: JSONDict = {"graph": self.graph}
        if self.graph_hash is not None:
            doc["hash"] = self.graph_hash
        if self.input:
            doc["input"] = dict(self.input)
        if self.output:
            doc["output"] = dict(self.output)
        return doc


def _string_map_problems(
    raw: object, key: str, names_ok: Mapping[str, bool], what: str
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        return [(key, f"child.{key} must be an object")]
    for inner, value in sorted(raw.items()):
        if id_problem(str(inner)) is not None:
            out.append((key, f"child.{key} key {inner!r} is not a valid ID"))
        if not isinstance(value, str) or not value:
            out.append((key, f"child.{key}.{inner} must name {what}, got {value!r}"))
    return out


def child_problems(
    raw: Mapping[str, JSONValue],
    readable: Mapping[str, bool],
    state_fields: frozenset[str],
) -> list[tuple[str, str]]:
    """Every problem of a node's ``child`` option as ``(key, message)`` pairs.

    ``readable``: the names a node can read (inputs, fields, and the node's map item);
    ``state_fields``: the parent's state fields (the only things an output may write)."""
    out: list[tuple[str, str]] = []
    for key in sorted(set(raw) - CHILD_KEYS):
        out.append((key, f"unknown child key {key!r} (known: {', '.join(sorted(CHILD_KEYS))})"))
    graph = raw.get("graph")
    if not isinstance(graph, str) or id_problem(graph) is not None:
        out.append(("graph", f"child.graph must be a graph ID, got {graph!r}"))
    digest = raw.get("hash")
    if digest is not None and (not isinstance(digest, str) or not digest):
        out.append(
            ("hash", f"child.hash must be a graph hash (a non-empty string), got {digest!r}")
        )
    out.extend(_string_map_problems(raw.get("input"), "input", readable, "a parent name"))
    for inner, source in sorted(_mapping(raw.get("input")).items()):
        if source and source not in readable:
            out.append(
                ("input", f"child.input.{inner} reads {source!r}, which is no input or field")
            )
    out.extend(_string_map_problems(raw.get("output"), "output", readable, "a child output"))
    for target in sorted(_mapping(raw.get("output"))):
        if target not in state_fields:
            out.append(("output", f"child.output writes {target!r}, which is no state field"))
    return out


def parse_child(raw: Mapping[str, JSONValue]) -> ChildSpec | None:
    """The checked option (``None`` for a node without one); call after
    :func:`child_problems` found nothing."""
    if not raw:
        return None
    digest = raw.get("hash")
    return ChildSpec(
        graph=str(raw["graph"]),
        graph_hash=digest if isinstance(digest, str) else None,
        input=_mapping(raw.get("input")),
        output=_mapping(raw.get("output")),
    )


def _never_called(state: NodeState, ctx: NodeContext) -> JSONDict:
    # The runtime starts and watches the child run instead of calling a function.
    raise RuntimeError(f"child node {ctx.node_id!r} has no function to call")


def child_definition() -> NodeDefinition:
    """The stand-in definition a compiled child node carries."""
    return NodeDefinition(name=CHILD_IMPLEMENTATION, fn=_never_called)
