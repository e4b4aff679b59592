"""Diagrams of a graph: Mermaid flowcharts and Graphviz DOT.

Both renderings show ``$start`` and ``$finish``, every node (ID, label and implementation),
every edge (labelled with its label and a short text of its guard), barrier edges as a
join point that all sources feed, and the outputs with the field each one projects.
They work on any authored graph, valid or not: an endpoint that names no node is drawn as
a plain node. Output is deterministic (records in ID order).

Public API
----------
- ``to_mermaid(graph) -> str``, ``to_dot(graph) -> str``.
- ``guard_text(guard, limit=48) -> str``: a compact, human-readable guard.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from docket.graph.guards import Guard, GuardOp
from docket.graph.model import FINISH, START, Edge, Graph
from docket.values import JSONDict

__all__ = ["guard_text", "to_dot", "to_mermaid"]


def guard_text(guard: Guard, limit: int = 48) -> str:
    """``approved == true``, ``changed(draft) and not exists(review.status)``...; cut to
    ``limit`` characters with an ellipsis."""
    text = _guard(guard, top=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _literal(value: object) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _ref(arg: object) -> str:
    if isinstance(arg, Guard) and arg.op == GuardOp.PATH and len(arg.args) == 2:
        field, segments = arg.args
        text = str(field)
        for seg in segments if isinstance(segments, list) else [segments]:
            text += f"[{seg}]" if isinstance(seg, int) else f".{seg}"
        return text
    if isinstance(arg, Guard):
        return _guard(arg, top=False)
    return arg if isinstance(arg, str) else _literal(arg)


def _guard(guard: object, *, top: bool) -> str:
    if not isinstance(guard, Guard):
        return _literal(guard)
    op, args = guard.op, guard.args
    if op in (GuardOp.ALL, GuardOp.ANY):
        if not args:
            return "true" if op == GuardOp.ALL else "false"
        joined = f" {'and' if op == GuardOp.ALL else 'or'} ".join(
            _guard(a, top=False) for a in args
        )
        return joined if top or len(args) == 1 else f"({joined})"
    if op == GuardOp.NOT and len(args) == 1:
        inner = _guard(args[0], top=False)
        return f"not ({inner})" if " " in inner and not inner.startswith("(") else f"not {inner}"
    if op == GuardOp.EQUALS and len(args) == 2:
        expected = _ref(args[1]) if isinstance(args[1], Guard) else _literal(args[1])
        return f"{_ref(args[0])} == {expected}"
    if op == GuardOp.VERSION_AT_LEAST and len(args) == 2:
        return f"version({_ref(args[0])}) >= {_literal(args[1])}"
    if op in (GuardOp.CHANGED, GuardOp.EXISTS) and len(args) == 1:
        return f"{op}({_ref(args[0])})"
    if op == GuardOp.PATH:
        return _ref(guard)
    return f"{op}({', '.join(_ref(a) for a in args)})"


def _edge_text(edge: Edge) -> str:
    parts = [edge.label] if edge.label else []
    if edge.guard is not None:
        parts.append(f"[{guard_text(edge.guard)}]")
    return " ".join(parts)


def _endpoints(graph: Graph) -> list[str]:
    """Every node-like endpoint to draw: declared nodes, then undeclared names, sorted."""
    named = {s for e in graph.edges.values() for s in e.sources} | {
        e.target for e in graph.edges.values()
    }
    extra = sorted(named - set(graph.nodes) - {START, FINISH})
    return sorted(graph.nodes) + extra


def _node_text(graph: Graph, node_id: str, newline: str) -> str:
    node = graph.nodes.get(node_id)
    if node is None:
        return f"{node_id}{newline}(undeclared)"
    lines = [node_id if not node.label else f"{node.label} ({node_id})"]
    if node.child:
        lines.append(f"child run: {node.child.get('graph')}")
    else:
        lines.append(node.implementation or "(no implementation)")
    if node.map:
        lines.append(_map_text(node.map))
    return newline.join(lines)


def _map_text(spec: JSONDict) -> str:
    """``map: each <as> in <over>`` and its limits (drawn even when malformed)."""
    text = f"map: each {spec.get('as')} in {spec.get('over')}"
    limits = [
        f"{key} {_literal(spec[key])}" for key in ("max_items", "max_parallel") if key in spec
    ]
    return text + (f" ({', '.join(limits)})" if limits else "")


def _walk(
    graph: Graph,
    node: Callable[[str], None],
    join: Callable[[Edge], str],
    arrow: Callable[[str, str, str, bool], None],
) -> None:
    """Emit nodes and edges through callbacks shared by both renderers."""
    for node_id in _endpoints(graph):
        node(node_id)
    for edge_id in sorted(graph.edges):
        edge = graph.edges[edge_id]
        text = _edge_text(edge)
        if edge.is_barrier:
            point = join(edge)
            for source in edge.sources:
                arrow(source, point, "", False)
            arrow(point, edge.target, text, True)
        else:
            arrow(edge.sources[0], edge.target, text, True)


# -- Mermaid --------------------------------------------------------------------------------------


def _mermaid_text(text: str) -> str:
    return '"' + text.replace('"', "#quot;") + '"'


def to_mermaid(graph: Graph) -> str:
    """A Mermaid ``flowchart TD``; node IDs are generated (``n0``, ``n1``...) so public IDs
    never clash with Mermaid keywords."""
    lines = ["flowchart TD", f'  start(["{START}"])', f'  finish(["{FINISH}"])']
    ids: dict[str, str] = {START: "start", FINISH: "finish"}

    def node(node_id: str) -> None:
        ids[node_id] = f"n{len(ids) - 2}"
        lines.append(f"  {ids[node_id]}[{_mermaid_text(_node_text(graph, node_id, '<br/>'))}]")

    def join(edge: Edge) -> str:
        key = f"join:{edge.id}"
        ids[key] = f"j{sum(k.startswith('join:') for k in ids)}"
        lines.append(f"  {ids[key]}(({_mermaid_text('all of ' + ', '.join(edge.sources))}))")
        return key

    def arrow(source: str, target: str, text: str, directed: bool) -> None:
        link = "-->" if directed else "---"
        label = f"|{_mermaid_text(text)}|" if text else ""
        lines.append(f"  {ids[source]} {link}{label} {ids[target]}")

    _walk(graph, node, join, arrow)
    if graph.outputs:
        lines.append('  subgraph outputs["outputs"]')
        for index, output_id in enumerate(sorted(graph.outputs)):
            source = graph.outputs[output_id].source
            lines.append(f"    o{index}[/{_mermaid_text(f'{output_id} ← {source}')}/]")
        lines.append("  end")
    return "\n".join(lines) + "\n"


# -- Graphviz DOT ---------------------------------------------------------------------------------


def _dot_id(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: Graph) -> str:
    """A Graphviz ``digraph``; barriers are drawn as small filled points."""
    lines = [
        f"digraph {_dot_id(graph.id)} {{",
        "  rankdir=TB;",
        "  node [shape=box, style=rounded];",
        f'  {_dot_id(START)} [shape=circle, label="start"];',
        f'  {_dot_id(FINISH)} [shape=doublecircle, label="finish"];',
    ]

    def node(node_id: str) -> None:
        lines.append(
            f"  {_dot_id(node_id)} [label={_dot_id(_node_text(graph, node_id, chr(10)))}];"
        )

    def join(edge: Edge) -> str:
        point = f"join:{edge.id}"
        lines.append(f'  {_dot_id(point)} [shape=point, width=0.15, xlabel="all"];')
        return point

    def arrow(source: str, target: str, text: str, directed: bool) -> None:
        attrs = [f"label={_dot_id(text)}"] if text else []
        if not directed:
            attrs.append("arrowhead=none")
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"  {_dot_id(source)} -> {_dot_id(target)}{suffix};")

    _walk(graph, node, join, arrow)
    if graph.outputs:
        lines.append("  subgraph cluster_outputs {")
        lines.append('    label="outputs";')
        for output_id in sorted(graph.outputs):
            source = graph.outputs[output_id].source
            lines.append(
                f"    {_dot_id('output:' + output_id)} "
                f"[shape=note, label={_dot_id(f'{output_id} ← {source}')}];"
            )
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"
