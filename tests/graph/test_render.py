"""Mermaid and Graphviz DOT rendering."""

from __future__ import annotations

import attrs
import pytest

from docket.graph.guards import (
    Guard,
    all_,
    any_,
    changed,
    equals,
    exists,
    not_,
    path,
    version_at_least,
)
from docket.graph.model import FINISH, START, Graph, new_graph
from docket.graph.render import guard_text, to_dot, to_mermaid
from tests.graph.test_builder import essay


@pytest.mark.parametrize(
    ("guard", "text"),
    [
        (changed("draft"), "changed(draft)"),
        (version_at_least("draft", 2), "version(draft) >= 2"),
        (exists(path("review", ["items", 0, "id"])), "exists(review.items[0].id)"),
        (equals("tier", "premium"), 'tier == "premium"'),
        (equals("a", path("b", ["c"])), "a == b.c"),
        (equals("flags", {"x": [1, True]}), 'flags == {"x": [1, true]}'),
        (
            all_(changed("a"), any_(changed("b"), changed("c"))),
            "changed(a) and (changed(b) or changed(c))",
        ),
        (not_(equals("ok", True)), "not (ok == true)"),
        (not_(changed("a")), "not changed(a)"),
        (all_(), "true"),
        (any_(), "false"),
        (path("x", ["y"]), "x.y"),
        (Guard("regex", ("a", "b")), "regex(a, b)"),
    ],
)
def test_guard_text(guard: Guard, text: str) -> None:
    assert guard_text(guard) == text


def test_guard_text_is_truncated() -> None:
    long = all_(*(changed(f"field_{i}") for i in range(10)))
    text = guard_text(long, limit=30)
    assert len(text) == 30 and text.endswith("…")


def test_mermaid_essay() -> None:
    text = to_mermaid(essay().build())
    lines = text.splitlines()
    assert lines[0] == "flowchart TD"
    assert '  start(["$start"])' in lines and '  finish(["$finish"])' in lines
    assert '  n3["writer<br/>essay.writer"]' in lines
    assert '  j0(("all of outline, research"))' in lines
    assert "  n0 --- j0" in lines and "  n1 --- j0" in lines and "  j0 --> n3" in lines
    assert '  n2 -->|"[review.approved == true]"| finish' in lines
    assert '  n2 -->|"needs work [not (review.approved == true)]"| n3' in lines
    assert '    o0[/"essay ← draft"/]' in lines
    assert text.endswith("end\n")


def test_dot_essay() -> None:
    text = to_dot(essay().build())
    assert text.startswith('digraph "essay" {\n')
    assert '  "writer" [label="writer\\nessay.writer"];' in text
    assert '  "join:gather" [shape=point, width=0.15, xlabel="all"];' in text
    assert '  "outline" -> "join:gather" [arrowhead=none];' in text
    assert '  "join:gather" -> "writer";' in text
    assert '  "reviewer" -> "$finish" [label="[review.approved == true]"];' in text
    assert '    "output:essay" [shape=note, label="essay ← draft"];' in text
    assert text.endswith("}\n")


def tricky() -> Graph:
    return (
        new_graph("tricky")
        .put_node("end", "impl", label='say "hi" \\ bye')
        .put_edge("e1", START, "end")
        .put_edge("e2", "end", "ghost", label='a "quoted" label')
        .put_edge("e3", "end", FINISH)
    )


def test_escaping_and_undeclared_endpoints() -> None:
    mermaid = to_mermaid(tricky())
    assert '  n0["say #quot;hi#quot; \\ bye (end)<br/>impl"]' in mermaid
    assert '  n1["ghost<br/>(undeclared)"]' in mermaid
    assert '  n0 -->|"a #quot;quoted#quot; label"| n1' in mermaid
    dot = to_dot(tricky())
    assert '  "end" [label="say \\"hi\\" \\\\ bye (end)\\nimpl"];' in dot
    assert '  "end" -> "ghost" [label="a \\"quoted\\" label"];' in dot


def test_rendering_is_deterministic() -> None:
    graph = essay().build()
    reordered = attrs.evolve(
        graph,
        nodes=dict(reversed(list(graph.nodes.items()))),
        edges=dict(reversed(list(graph.edges.items()))),
        outputs=dict(reversed(list(graph.outputs.items()))),
    )
    assert reordered == graph and list(reordered.nodes) != list(graph.nodes)
    assert to_mermaid(reordered) == to_mermaid(graph)
    assert to_dot(reordered) == to_dot(graph)
