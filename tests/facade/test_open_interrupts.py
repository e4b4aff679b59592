"""``Run.open_interrupts``: the interrupts a run waits for, as opposed to ``Run.interrupts``,
which keeps the resolved ones too (issue 18, item 9)."""

from __future__ import annotations

import re
from pathlib import Path

from docket import FINISH, START, GraphBuilder, Interrupt, NodeRegistry, S, SyncDocket
from docket.graph.nodes import NodeContext, NodeReturn, NodeState
from docket.records import InterruptStatus, RunStatus

ROOT = Path(__file__).resolve().parents[2]

nodes = NodeRegistry()


@nodes.node("twice")
def twice(state: NodeState, ctx: NodeContext) -> NodeReturn:
    if "first" not in state:
        return Interrupt("first", schema=S.string(), id="ask-first")
    if "second" not in state:
        return Interrupt("second", schema=S.string(), id="ask-second")
    return {"both": f"{state['first']}+{state['second']}"}


GRAPH = (
    GraphBuilder("asks_twice")
    .field("first", S.string())
    .field("second", S.string())
    .field("both", S.string())
    .node("twice", "twice")
    .edge("begin", START, "twice")
    .edge("end", "twice", FINISH)
    .output("both")
    .build()
)


def test_the_documented_idiom_survives_a_second_interrupt(tmp_path: Path) -> None:
    with SyncDocket(f"sqlite:///{tmp_path / 'app.db'}", nodes=nodes, poll_interval=0.05) as docket:
        ref = docket.save_graph(GRAPH)
        docket.start_worker()
        run = docket.start_run(ref, run_id="r")
        answers = iter(["a", "b"])
        for asked in ("ask-first", "ask-second"):
            run = docket.await_run(run.id, timeout=30)
            assert run.status is RunStatus.WAITING
            (interrupt_id,) = run.open_interrupts  # the README's idiom
            assert interrupt_id == asked
            docket.resolve_interrupt(run.id, interrupt_id, next(answers))
        run = docket.await_run(run.id, timeout=30)
        docket.stop_worker()
    assert run.status is RunStatus.DONE and run.output == {"both": "a+b"}
    # the resolved interrupts stay on the run; nothing is open any more
    assert set(run.interrupts) == {"ask-first", "ask-second"}
    assert all(i.status is InterruptStatus.RESOLVED for i in run.interrupts.values())
    assert run.open_interrupts == {}


# `(x,) = run.interrupts` or `(x,) = run.interrupts.values()`: right only for a run that
# never paused before, so no document or example may teach it.
_UNPACKS_ALL = re.compile(r"^\s*\(\s*\w+\s*,\s*\)\s*=\s*[\w.]*\.interrupts\b", re.MULTILINE)


def test_no_doc_or_example_unpacks_every_interrupt() -> None:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "examples").glob("*.py")]
    offenders = [
        f"{path.relative_to(ROOT)}: {match.group(0).strip()}"
        for path in files
        for match in _UNPACKS_ALL.finditer(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
