"""Every module of ``docket/`` imports only its own layer or lower ones.

The layer map is written once, as the table in docs/contract.md ("Layers"); this reads it,
walks each module's imports with ``ast`` (lazy imports inside functions included) and
names every import of a higher layer. A module docstring that says ``(layer N)`` must
agree with the table.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "docket"
_ROW = re.compile(r"^\| (\d) [^|]*\| (.+) \|$", re.M)


def layer_map() -> dict[str, int]:
    text = (ROOT / "docs" / "contract.md").read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    layers = {
        name: int(number)
        for number, names in _ROW.findall(section)
        for name in re.findall(r"`([\w.]+)`", names)
    }
    assert layers, "docs/contract.md has no layer table"
    return layers


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        found = layers.get(".".join(parts[:end]))
        if found is not None:
            return found
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) for every import of a docket module; ``from docket import x`` counts
    as an import of ``docket.x`` when ``x`` is a submodule, else of ``docket``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("docket")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module != "docket" and not node.module.startswith("docket."):
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                is_module = (ROOT / Path(*sub.split("."))).with_suffix(".py").exists() or (
                    ROOT / Path(*sub.split(".")) / "__init__.py"
                ).exists()
                found.append((node.lineno, sub if is_module else node.module))
    return found


def upward_imports(layers: dict[str, int]) -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        own = layer_of(name, layers)
        if own is None:
            problems.append(f"{name} is in no layer")
            continue
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        for line, target in imported(tree):
            theirs = layer_of(target, layers)
            if theirs is None or theirs > own:
                where = f"{path.relative_to(ROOT)}:{line}"
                problems.append(f"{where}: {name} (layer {own}) imports {target} ({theirs})")
        said = re.search(r"\(layer (\d)\)", ast.get_docstring(tree) or "")
        if said and int(said.group(1)) != own:
            problems.append(f"{name} says layer {said.group(1)}, the table says {own}")
    return problems


def test_no_module_imports_a_higher_layer() -> None:
    assert upward_imports(layer_map()) == []


def test_the_walk_would_name_an_upward_import() -> None:
    """The guard is live: with the proposal types back in the contract's layer, every
    core module that builds a wake is named."""
    layers = {**layer_map(), "docket.proposals": 4}
    named = {p.split(":")[0] for p in upward_imports(layers)}
    assert "docket/core/moment.py" in named and "docket/core/proposals.py" in named
