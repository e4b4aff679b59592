"""The run page shows whole values (issue 18, item 11): every state field opens to its
full, pretty-printed value (the summary line is only a preview), input and output are
printed whole, and an interrupt's question — any JSON value — heads its form.

Through the real console app (Starlette's TestClient) over a real SQLite file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from markupsafe import escape
from starlette.testclient import TestClient

from docket import FINISH, START, Docket, GraphBuilder, Interrupt, NodeRegistry, S, SyncDocket
from docket.graph.nodes import NodeContext, NodeReturn, NodeState
from docket.ui import create_app
from docket.values import JSONValue

LONG = "begin " + "x" * 400 + " THE-END"
NESTED: JSONValue = {"list": [1, 2, {"deep": LONG}], "name": "ü"}
QUESTION = "Do you approve " + "this, " * 60 + "and the last clause?"
STRUCTURED: JSONValue = {"title": "Pick one", "options": ["a", "b"]}

nodes = NodeRegistry()


@nodes.node("fill")
def fill(state: NodeState, ctx: NodeContext) -> NodeReturn:
    return {"notes": LONG, "nested": NESTED}


@nodes.node("ask")
def ask(state: NodeState, ctx: NodeContext) -> NodeReturn:
    if "answer" not in state:
        question = STRUCTURED if state["structured"] else QUESTION
        return Interrupt(
            "answer", schema=S.string(), id="q", metadata={"question": question, "asked_by": "bot"}
        )
    return {}


GRAPH = (
    GraphBuilder("values")
    .input("structured", S.boolean(), required=True)
    .input("blob", S.map(), required=True)
    .field("notes", S.string())
    .field("nested", S.map())
    .field("answer", S.string())
    .node("fill", "fill")
    .node("ask", "ask")
    .edge("begin", START, "fill")
    .edge("then", "fill", "ask")
    .edge("end", "ask", FINISH)
    .output("notes")
    .output("nested")
    .build()
)


def pretty(value: object) -> str:
    """What the page must hold: the whole value, indented, HTML-escaped."""
    return str(escape(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)))


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'values.db'}"
    with SyncDocket(url, nodes=nodes) as docket:
        docket.save_graph(GRAPH)
        for run_id, structured in (("plain", False), ("structured", True)):
            docket.start_run(
                "values", {"structured": structured, "blob": {"k": LONG}}, run_id=run_id
            )
        docket.drain_due()
        docket.resolve_interrupt("structured", "q", "ok")
        docket.drain_due()
    with TestClient(create_app(Docket(url, nodes=nodes), open_docket=True)) as client:
        yield client


def test_state_input_and_output_are_shown_whole(client: TestClient) -> None:
    page = client.get("/runs/structured").text
    for key, value in (("notes", LONG), ("nested", NESTED)):
        found = re.search(rf'<details class="value" id="state-{key}">(.*?)</details>', page, re.S)
        assert found is not None, f"state field {key} cannot be expanded"
        assert f'<pre class="json small">{pretty(value)}</pre>' in found.group(1)
    given = {"blob": {"k": LONG}, "structured": True}
    assert f'<pre class="json" id="run-input">{pretty(given)}</pre>' in page
    output = {"nested": NESTED, "notes": LONG}
    assert f'<pre class="json" id="run-output">{pretty(output)}</pre>' in page


def test_the_question_heads_its_form_in_full(client: TestClient) -> None:
    page = client.get("/runs/plain").text
    card = page[page.index('id="interrupt-q"') :]
    question = card.index(f'<p class="question" id="question-q">{escape(QUESTION)}</p>')
    form = card.index("<form ")
    assert question < form
    assert 'aria-labelledby="question-q"' in card[form : card.index(">", form)]
    # the rest of the metadata comes before the question, never between it and its form
    assert card.index("asked_by") < question


def test_a_structured_question_is_shown_too(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'values.db'}"
    with SyncDocket(url, nodes=nodes) as docket:
        docket.save_graph(GRAPH)
        docket.start_run("values", {"structured": True, "blob": {}}, run_id="s")
        docket.drain_due()
    with TestClient(create_app(Docket(url, nodes=nodes), open_docket=True)) as client:
        page = client.get("/runs/s").text
    card = page[page.index('id="interrupt-q"') :]
    shown = f'<pre class="question json" id="question-q">{pretty(STRUCTURED)}</pre>'
    assert shown in card and card.index(shown) < card.index("<form ")
