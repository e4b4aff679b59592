"""A research assistant: plan -> research each question (a map) -> draft. No network.

What it shows, on a SQLite file with an in-process worker:

* **dynamic fan-out** — the planner (a fake LLM) writes a list of sub-questions whose
  length depends on the topic; the ``research`` node is a *map* over that list
  (``map=MapSpec(over="questions", item="question")``), so it runs once per question,
  each item its own task (``<run>:<step>:research[i]``) with its own attempts;
* **item order** — the fake LLM answers the later questions faster, so the items finish
  in reverse; their answers still land in the ``append`` field in question order, so the
  draft (and the whole run document) is the same on every run;
* **max_parallel** — at most two questions are researched at once;
* **an empty list** — a topic the planner has no questions for runs no research at all,
  and the draft still follows.

    python examples/map_reduce.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from docket import (
    FINISH,
    START,
    GraphBuilder,
    NodeContext,
    NodeRegistry,
    NodeState,
    R,
    S,
    SyncDocket,
)
from docket.graph.maps import MapSpec
from docket.records import EventType
from docket.values import JSONValue


class FakeLLM:
    """Deterministic stand-ins for three prompts; ``latency`` makes early questions slow."""

    def plan(self, topic: str) -> list[str]:
        if topic == "nothing":
            return []
        return [f"What is {topic}?", f"Who uses {topic}?", f"Why does {topic} matter?"]

    async def answer(self, question: str, index: int, of: int) -> str:
        await asyncio.sleep(0.05 * (of - index) ** 2)  # the first question takes longest
        return f"A{index + 1} ({question}) a short answer"

    def draft(self, topic: str, answers: list[str]) -> str:
        return f"Report on {topic}: " + "; ".join(answers) if answers else f"{topic}: no research"


nodes = NodeRegistry()


def _llm(ctx: NodeContext) -> FakeLLM:
    llm = ctx.application["llm"]
    assert isinstance(llm, FakeLLM)
    return llm


@nodes.node("research.plan")
def plan(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
    questions: list[JSONValue] = list(_llm(ctx).plan(str(state["topic"])))
    return {"questions": questions}


@nodes.node("research.answer")
async def research(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
    questions = state["questions"]
    assert isinstance(questions, list) and ctx.item_index is not None
    finished = ctx.application["finished"]
    assert isinstance(finished, list)
    reply = await _llm(ctx).answer(str(state["question"]), ctx.item_index, len(questions))
    finished.append(ctx.item_index)
    return {"answers": reply}


@nodes.node("research.draft")
def draft(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
    answers = state["answers"]
    assert isinstance(answers, list)
    return {"report": _llm(ctx).draft(str(state["topic"]), [str(a) for a in answers])}


graph = (
    GraphBuilder("research-assistant")
    .input("topic", S.string(min_length=1), required=True)
    .field("questions", S.list(S.string()))
    .field("answers", S.list(S.string()), reducer=R.append())
    .field("report", S.string())
    .node("plan", "research.plan")
    .node(
        "research",
        "research.answer",
        map=MapSpec(over="questions", item="question", max_items=20, max_parallel=2),
    )
    .node("draft", "research.draft")
    .edge("begin", START, "plan")
    .edge("fan_out", "plan", "research")
    .edge("reduce", "research", "draft")
    .edge("done", "draft", FINISH)
    .output("report")
    .build()
)


def main() -> None:
    finished: list[int] = []
    context = {"llm": FakeLLM(), "finished": finished}
    with tempfile.TemporaryDirectory(prefix="docket-map-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'research.db'}"
        with SyncDocket(url, nodes=nodes, context=context, poll_interval=0.1) as docket:
            ref = docket.save_graph(graph)
            docket.start_worker()
            for run_id, topic in (("otters-1", "otters"), ("empty-1", "nothing")):
                finished.clear()
                run = docket.start_run(ref, {"topic": topic}, run_id=run_id)
                run = docket.await_run(run.id, timeout=60)
                print(f"run {run.id} is {run.status}")
                print(f"  items finished in the order {finished}")
                print(f"  report: {run.output and run.output['report']}")
                tasks = [
                    e.task_id
                    for e in docket.history(run.id)
                    if e.type is EventType.NODE_COMPLETED and e.node_id == "research"
                ]
                print(f"  research tasks: {tasks}")
            docket.stop_worker()


if __name__ == "__main__":
    main()
