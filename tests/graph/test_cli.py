"""The ``docket graph`` command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docket.cli import main
from docket.graph.compiler import compile_graph
from docket.graph.model import FINISH, START, new_graph
from docket.graph.nodes import NodeDefinition, NodeRegistry
from docket.graph.render import to_dot, to_mermaid
from docket.graph.schema import S
from docket.graph.wire import from_json, to_json

ESSAY = Path(__file__).resolve().parents[2] / "examples" / "graphs" / "essay.json"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path: Path, text: str, name: str = "graph.json") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_check_reports_unknown_implementations_without_a_registry(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "graph", "check", str(ESSAY))
    assert code == 1
    assert out.count("unknown_implementation") == 4
    assert "/nodes/writer/implementation" in out
    assert out.splitlines()[-1].endswith("invalid, 4 errors, 0 warnings")


def test_check_accepts_unknown_nodes_on_request(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "graph", "check", str(ESSAY), "--allow-unknown-nodes")
    assert code == 0
    assert out.splitlines() == [f"{ESSAY}: ok, 0 errors, 0 warnings"]


def test_warnings_alone_exit_zero(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    graph = (
        new_graph("loop")
        .put_node("a", "x.a")
        .put_edge("start", START, "a")
        .put_edge("again", "a", "a")
        .put_edge("done", "a", FINISH)
    )
    path = write(tmp_path, to_json(graph))
    code, out, _ = run(capsys, "graph", "check", path, "--allow-unknown-nodes")
    assert code == 0
    assert "warning unbounded_cycle /policies/max_supersteps" in out
    assert out.splitlines()[-1].endswith("ok, 0 errors, 1 warning")
    code, out, _ = run(capsys, "graph", "check", path, "--allow-unknown-nodes", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and len(report["graph_hash"]) == 64
    assert [d["code"] for d in report["diagnostics"]] == ["unbounded_cycle"]
    assert report["diagnostics"][0]["path"] == "/policies/max_supersteps"


def test_check_json_on_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "graph", "check", str(ESSAY), "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and report["graph_hash"] is None
    assert {d["severity"] for d in report["diagnostics"]} == {"error"}


def test_hash(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "graph", "hash", str(ESSAY), "--allow-unknown-nodes")
    graph = from_json(ESSAY.read_text(encoding="utf-8"))
    names = sorted({n.implementation for n in graph.nodes.values() if n.implementation})
    registry = NodeRegistry(NodeDefinition(name, lambda s, c: {}) for name in names)
    assert code == 0
    assert out == f"{compile_graph(graph, registry).graph_hash}\n"


def test_hash_of_an_invalid_graph_fails(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "graph", "hash", str(ESSAY))
    assert code == 1 and out == ""
    assert "unknown_implementation" in err


def test_max_supersteps_option(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    graph = new_graph("g").put_field("x", S.string()).set_policy("max_supersteps", 50)
    path = write(tmp_path, to_json(graph))
    code, out, _ = run(capsys, "graph", "check", path, "--max-supersteps", "10")
    assert code == 0 and "max_supersteps_capped" in out
    code, _, err = run(capsys, "graph", "check", path, "--max-supersteps", "0")
    assert code == 2 and "--max-supersteps" in err


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_render(capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    code, out, _ = run(capsys, "graph", "render", str(ESSAY), "--format", fmt)
    graph = from_json(ESSAY.read_text(encoding="utf-8"))
    assert code == 0
    assert out == (to_mermaid(graph) if fmt == "mermaid" else to_dot(graph))


def test_render_defaults_to_mermaid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "graph", "render", str(ESSAY))
    assert code == 0 and out.startswith("flowchart TD\n")


@pytest.mark.parametrize("command", ["check", "hash", "render"])
def test_unreadable_and_invalid_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    code, _, err = run(capsys, "graph", command, str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read" in err
    code, _, err = run(capsys, "graph", command, write(tmp_path, "{not json"))
    assert code == 1 and "invalid_json" in err
    code, _, err = run(capsys, "graph", command, write(tmp_path, '{"id": "g"}'))
    assert code == 1 and "missing_key /schema_version" in err


@pytest.mark.parametrize(
    "argv",
    [[], ["graph"], ["graph", "render", str(ESSAY), "--format", "svg"], ["graph", "lint", "x"]],
)
def test_usage_errors_exit_two(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "usage:" in capsys.readouterr().err
