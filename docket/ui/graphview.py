"""A graph drawn as self-contained SVG, with a run's position marked on it.

The layout is a small layered (Sugiyama-style) drawing computed here, so the console needs
no JavaScript or external renderer: back edges are found by a depth-first walk from
``$start``, every vertex gets the longest-path rank over the remaining edges, a few
barycenter sweeps order each layer, and edges become cubic curves (back edges loop round
the right-hand side). Barrier edges get a small join point that all their sources feed.

``node_states`` maps node IDs to one of :data:`NODE_STATES`; the SVG carries them as CSS
classes (``gv-done``, ``gv-active``...) that the console's stylesheet colours.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final
from xml.sax.saxutils import escape, quoteattr

import attrs

from docket.graph.model import FINISH, START, Graph
from docket.graph.render import guard_text
from docket.records import EventType, Run, RunStatus

__all__ = ["NODE_STATES", "node_states", "render_svg"]

NODE_STATES: Final = ("done", "active", "next", "waiting", "failed", "idle")

_ROW: Final = 96  # vertical distance between layers
_BOX_H: Final = 46
_GAP: Final = 36  # horizontal gap between boxes in a layer
_CHAR_W: Final = 7.4  # rough advance of the 13 px UI font, for box widths
_PAD: Final = 24
_JOIN_R: Final = 6


@attrs.frozen
class _Vertex:
    key: str
    title: str
    subtitle: str
    kind: str  # "terminal", "node", "join"


@attrs.frozen
class _Arc:
    source: str
    target: str
    label: str
    edge_id: str | None  # None for the feed of a join point


def node_states(run: Run, completed: set[str], triggered: set[str]) -> dict[str, str]:
    """Each vertex's state for ``run``: nodes that completed, nodes running or queued now,
    nodes holding an open interrupt, the failed node; ``$start``/``$finish`` too."""
    states: dict[str, str] = {START: "done"}
    for node_id in completed:
        states[node_id] = "done"
    for node_id in run.pending_nodes:
        states[node_id] = "next"
    for task in run.active_tasks.values():
        states[task.node_id] = "active"
    for interrupt in run.interrupts.values():
        if interrupt.status == "open":
            states[interrupt.node_id] = "waiting"
    if run.failure is not None and run.failure.node_id:
        states[run.failure.node_id] = "failed"
    if run.status is RunStatus.DONE:
        states[FINISH] = "done"
    for edge_id in triggered:
        states[f"edge:{edge_id}"] = "done"
    return states


def states_from_events(run: Run, events: object) -> dict[str, str]:
    """:func:`node_states` with completions and triggered edges read from ``events``."""
    completed: set[str] = set()
    triggered: set[str] = set()
    for event in events if isinstance(events, list | tuple) else ():
        if event.type is EventType.NODE_COMPLETED and event.node_id:
            completed.add(event.node_id)
        elif event.type is EventType.EDGE_TRIGGERED:
            edge_id = event.payload.get("edge_id")
            if isinstance(edge_id, str):
                triggered.add(edge_id)
    return node_states(run, completed, triggered)


def _structure(graph: Graph) -> tuple[dict[str, _Vertex], list[_Arc]]:
    vertices: dict[str, _Vertex] = {START: _Vertex(START, "start", "", "terminal")}
    for node_id in sorted(graph.nodes):
        node = graph.nodes[node_id]
        vertices[node_id] = _Vertex(
            node_id, node.label or node_id, node.implementation or "", "node"
        )
    arcs: list[_Arc] = []
    for edge_id in sorted(graph.edges):
        edge = graph.edges[edge_id]
        for endpoint in (*edge.sources, edge.target):
            if endpoint not in vertices and endpoint != FINISH:
                vertices[endpoint] = _Vertex(endpoint, endpoint, "(undeclared)", "node")
        # a label names the branch; only an unlabelled guarded edge shows its guard
        label = edge.label or (guard_text(edge.guard, limit=32) if edge.guard else "")
        if edge.is_barrier:
            join = f"join:{edge_id}"
            vertices[join] = _Vertex(join, "all of " + ", ".join(edge.sources), "", "join")
            arcs.extend(_Arc(source, join, "", None) for source in edge.sources)
            arcs.append(_Arc(join, edge.target, label, edge_id))
        else:
            arcs.append(_Arc(edge.sources[0], edge.target, label, edge_id))
    vertices[FINISH] = _Vertex(FINISH, "finish", "", "terminal")
    return vertices, arcs


def _back_arcs(vertices: Mapping[str, _Vertex], arcs: list[_Arc]) -> set[int]:
    """Indexes of arcs that close a cycle in a depth-first walk from ``$start``."""
    out: dict[str, list[int]] = {key: [] for key in vertices}
    for index, arc in enumerate(arcs):
        out[arc.source].append(index)
    back: set[int] = set()
    colour: dict[str, int] = {}  # 1 on the stack, 2 finished
    roots = [START] + [key for key in vertices if key != START]
    for root in roots:
        if root in colour:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        colour[root] = 1
        while stack:
            key, position = stack[-1]
            if position < len(out[key]):
                stack[-1] = (key, position + 1)
                index = out[key][position]
                target = arcs[index].target
                state = colour.get(target)
                if state == 1:
                    back.add(index)
                elif state is None:
                    colour[target] = 1
                    stack.append((target, 0))
            else:
                colour[key] = 2
                stack.pop()
    return back


def _ranks(vertices: Mapping[str, _Vertex], arcs: list[_Arc], back: set[int]) -> dict[str, int]:
    rank = {key: 0 for key in vertices}
    forward = [arc for index, arc in enumerate(arcs) if index not in back]
    for _ in range(len(vertices)):  # longest path by relaxation; the graph is acyclic now
        changed = False
        for arc in forward:
            if rank[arc.target] < rank[arc.source] + 1:
                rank[arc.target] = rank[arc.source] + 1
                changed = True
        if not changed:
            break
    deepest = max((r for key, r in rank.items() if key != FINISH), default=0)
    rank[FINISH] = max(rank[FINISH], deepest + 1)
    return rank


def _order(
    vertices: Mapping[str, _Vertex], arcs: list[_Arc], rank: Mapping[str, int]
) -> list[list[str]]:
    layers: list[list[str]] = [[] for _ in range(max(rank.values()) + 1)]
    for key in vertices:
        layers[rank[key]].append(key)
    position = {key: float(i) for layer in layers for i, key in enumerate(layer)}
    for sweep in range(6):
        down = sweep % 2 == 0
        for layer in layers if down else reversed(layers):
            scores: dict[str, float] = {}
            for key in layer:
                near = [
                    position[arc.source if down else arc.target]
                    for arc in arcs
                    if (arc.target if down else arc.source) == key
                    and rank[arc.source if down else arc.target] != rank[key]
                ]
                scores[key] = sum(near) / len(near) if near else position[key]
            layer.sort(key=lambda k: (scores[k], position[k]))
            for i, key in enumerate(layer):
                position[key] = float(i)
    return layers


def _width(vertex: _Vertex) -> float:
    if vertex.kind == "join":
        return 2 * _JOIN_R
    if vertex.kind == "terminal":
        return 84.0
    longest = max(len(vertex.title), int(len(vertex.subtitle) * 0.85))
    return max(96.0, longest * _CHAR_W + 28)


def render_svg(graph: Graph, states: Mapping[str, str] | None = None) -> str:
    """The graph as an ``<svg>`` element (a string; every text escaped)."""
    states = dict(states or {})
    vertices, arcs = _structure(graph)
    back = _back_arcs(vertices, arcs)
    rank = _ranks(vertices, arcs, back)
    layers = _order(vertices, arcs, rank)

    widths = {key: _width(vertex) for key, vertex in vertices.items()}
    layer_widths = [sum(widths[k] for k in layer) + _GAP * (len(layer) - 1) for layer in layers]
    loops = 40.0 + 10 * len(back) if back else 0.0  # room for back edges on the right
    canvas = max(layer_widths, default=0.0) + 2 * _PAD + loops
    centre: dict[str, tuple[float, float]] = {}
    for index, layer in enumerate(layers):
        x = _PAD + (canvas - 2 * _PAD - loops - layer_widths[index]) / 2
        y = _PAD + index * _ROW + _BOX_H / 2
        for key in layer:
            centre[key] = (x + widths[key] / 2, y)
            x += widths[key] + _GAP
    height = _PAD * 2 + (len(layers) - 1) * _ROW + _BOX_H

    def half_height(key: str) -> float:
        return _JOIN_R if vertices[key].kind == "join" else _BOX_H / 2

    parts: list[str] = [
        f'<svg class="graph-view" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {canvas:.0f} {height:.0f}" width="{canvas:.0f}" height="{height:.0f}" '
        f'role="img" aria-label={quoteattr("graph " + graph.id)}>',
        "<defs>",
        '<marker id="gv-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'class="gv-arrowhead"/></marker>',
        '<marker id="gv-arrow-done" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'class="gv-arrowhead gv-arrowhead-done"/></marker>',
        "</defs>",
    ]
    loop = 0
    labels: list[str] = []
    for index, arc in enumerate(arcs):
        sx, sy = centre[arc.source]
        tx, ty = centre[arc.target]
        taken = arc.edge_id is not None and states.get(f"edge:{arc.edge_id}") == "done"
        if arc.edge_id is None:  # a join feed counts as taken once its source is done
            taken = states.get(arc.source) == "done"
        if index in back or rank[arc.target] <= rank[arc.source]:
            loop += 1
            right = max(centre[k][0] + widths[k] / 2 for k in vertices) + 18 + 10 * loop
            x1, y1 = sx + widths[arc.source] / 2, sy
            x2, y2 = tx + widths[arc.target] / 2, ty
            path = (
                f"M{x1:.1f},{y1:.1f} C{right:.1f},{y1:.1f} {right:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
            )
            lx, ly = right - 4, (y1 + y2) / 2
        else:
            x1, y1 = sx, sy + half_height(arc.source)
            x2, y2 = tx, ty - half_height(arc.target)
            bend = max(24.0, (y2 - y1) / 2)
            path = (
                f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + bend:.1f} "
                f"{x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}"
            )
            # labels sit nearer the target, where sibling edges have spread apart
            lx, ly = x1 + (x2 - x1) * 0.7, y1 + (y2 - y1) * 0.62
        css = "gv-edge gv-edge-done" if taken else "gv-edge"
        marker = "gv-arrow-done" if taken else "gv-arrow"
        end = f' marker-end="url(#{marker})"' if vertices[arc.target].kind != "join" else ""
        parts.append(f'<path class="{css}" d="{path}"{end}/>')
        if arc.label:
            labels.append(
                f'<text class="gv-edge-label" x="{lx:.1f}" y="{ly + 4:.1f}" '
                f'text-anchor="middle">{escape(arc.label)}</text>'
            )
    parts.extend(labels)
    for key, vertex in vertices.items():
        cx, cy = centre[key]
        state = states.get(key, "idle")
        if vertex.kind == "join":
            state = states.get("edge:" + key.removeprefix("join:"), "idle")
            parts.append(
                f'<g class="gv-join gv-{state}"><title>{escape(vertex.title)}</title>'
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{_JOIN_R}"/></g>'
            )
            continue
        w = widths[key]
        radius = _BOX_H / 2 if vertex.kind == "terminal" else 8
        parts.append(
            f'<g class="gv-vertex gv-{vertex.kind} gv-{state}" data-node={quoteattr(key)}>'
            f"<title>{escape(key)} ({state})</title>"
            f'<rect x="{cx - w / 2:.1f}" y="{cy - _BOX_H / 2:.1f}" width="{w:.1f}" '
            f'height="{_BOX_H}" rx="{radius}" ry="{radius}"/>'
        )
        if vertex.subtitle:
            parts.append(
                f'<text class="gv-title" x="{cx:.1f}" y="{cy - 3:.1f}" text-anchor="middle">'
                f"{escape(vertex.title)}</text>"
                f'<text class="gv-subtitle" x="{cx:.1f}" y="{cy + 13:.1f}" '
                f'text-anchor="middle">{escape(vertex.subtitle)}</text>'
            )
        else:
            parts.append(
                f'<text class="gv-title" x="{cx:.1f}" y="{cy + 4.5:.1f}" text-anchor="middle">'
                f"{escape(vertex.title)}</text>"
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)
