"""``docket.graph.compiler`` is the one import path of the compiler (docs/graphs.md, "Where
it lives"): it re-exports every public name of the stage modules beside it, and nothing
outside ``docket.graph`` imports those private modules."""

from __future__ import annotations

import ast
from pathlib import Path

from docket.graph import _lower, _policies, _runtime, compiler

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("_algorithms", "_lower", "_policies", "_runtime", "_validate")


def test_the_compiler_re_exports_every_public_stage_name() -> None:
    for stage in (_runtime, _policies, _lower):
        for name in stage.__all__:
            assert name in compiler.__all__, f"{stage.__name__}.{name}"
            assert getattr(compiler, name) is getattr(stage, name)


def stage_imports(path: Path) -> list[str]:
    """``file:line`` of every import of a stage module in ``path``."""
    found = []
    stages = {f"docket.graph.{s}" for s in STAGES}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        if stages.intersection(names):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_only_the_graph_package_imports_the_stage_modules() -> None:
    outside = [
        path
        for top in ("docket", "tests", "bench", "examples", "backends", "contract_tests")
        for path in sorted((ROOT / top).rglob("*.py"))
        if ".venv" not in path.parts
        and (ROOT / "docket" / "graph") not in path.parents
        and path != Path(__file__).resolve()
    ]
    assert [hit for path in outside for hit in stage_imports(path)] == []


def test_the_walk_would_name_an_outside_import() -> None:
    probe = ROOT / "tests" / "graph" / "test_compiler_layout.py"
    assert stage_imports(probe) == ["tests/graph/test_compiler_layout.py:10"]
