"""Typed node state (issue 18, item 12): a node may declare its state as a ``TypedDict``.

``examples/typed_state.py`` must run and be clean under ``mypy --strict``; wrong node
signatures must be refused by mypy — which needs ``@node`` to be typed, since a decorator
taking ``object`` accepts anything. mypy runs as a subprocess with the project's config.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "typed_state.py"

# Each line marked "# E" must draw exactly one mypy error; no other line may draw one.
WRONG = """\
from __future__ import annotations

from typing import TypedDict

from docket import NodeContext, NodeRegistry, NodeState, Update, node


class Expense(TypedDict):
    who: str
    amount: float


nodes = NodeRegistry()


@nodes.node("not_a_mapping")  # E
def not_a_mapping(state: int, ctx: NodeContext) -> Update:
    return Update({})


@nodes.node("wrong_ctx")  # E
def wrong_ctx(state: NodeState, ctx: str) -> Update:
    return Update({})


@nodes.node("wrong_return")  # E
def wrong_return(state: Expense, ctx: NodeContext) -> int:
    return 1


@nodes.node("misspelt_field")
def misspelt_field(state: Expense, ctx: NodeContext) -> Update:
    return Update({"x": state["amout"]})  # E


@nodes.node("wrong_use")
def wrong_use(state: Expense, ctx: NodeContext) -> Update:
    return Update({"x": state["who"] + 1})  # E


@node("module_level")  # E
def module_level(state: list[str], ctx: NodeContext) -> Update:
    return Update({})


@nodes.node("fine")
async def fine(state: Expense, ctx: NodeContext) -> dict[str, float]:
    return {"gross": state["amount"] * 1.2}
"""


def mypy(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "mypy.ini"),
            "--strict",
            "--no-error-summary",
            "--hide-error-context",
            *map(str, paths),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_example_runs() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "waiting: Pay 120.00 to ada?" in done.stdout
    assert "done: {'log': ['ada told at step 3'], 'receipt': 'yes: ada'}" in done.stdout


def test_mypy_strict_accepts_typed_state_and_refuses_wrong_signatures(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_nodes.py"
    wrong.write_text(WRONG, encoding="utf-8")
    done = mypy(EXAMPLE, wrong)
    errors = re.findall(r"^(.+?):(\d+): error: ", done.stdout, re.MULTILINE)
    report = (
        f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-2000:]}"
    )
    assert [e for e in errors if Path(e[0]).name != wrong.name] == [], report
    expected = [n for n, line in enumerate(WRONG.splitlines(), 1) if line.endswith("# E")]
    assert sorted(int(line) for _, line in errors) == expected, report
    assert done.returncode == 1, report
