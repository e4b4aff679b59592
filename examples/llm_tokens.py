"""Streaming a model's answer token by token while the run commits, on a SQLite file.

A fake LLM node writes its answer a word at a time (with small waits, as a model
would) and sends each word with ``ctx.emit(word, kind="token")``; it returns the full
text, which is committed like any node output. The script starts a worker, follows the
run with ``docket.stream(run_id)`` and prints the tokens as they come and the committed
events as they commit, then the answer read back from the database.

    python examples/llm_tokens.py [--db PATH] [--delay SECONDS]

Emissions are ephemeral: a reader sees the ones sent while it follows the run (this
script opens its stream before the worker starts, so it sees them all); the committed
events are in the database for anyone, any time. To watch a run from another terminal
or in the web console, keep the database (``--db answers.db --delay 0.5``) and run
``docket runs watch llm-1 --backend sqlite:///answers.db`` or ``docket ui --backend
sqlite:///answers.db`` (the run's page follows it live).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path

from docket import (
    FINISH,
    START,
    Graph,
    GraphBuilder,
    NodeContext,
    NodeRegistry,
    NodeState,
    S,
    SyncDocket,
)
from docket.contract.capabilities import Feature
from docket.records import Emission, Event, EventsPruned, EventType

nodes = NodeRegistry()

ANSWER = (
    "Otters hold hands while they sleep so that the current does not carry them apart; "
    "a group of resting otters is called a raft."
)


@nodes.node("llm.answer")
async def answer(state: NodeState, ctx: NodeContext) -> dict[str, object]:
    """A stand-in for a model call: the answer arrives a word at a time."""
    delay = ctx.config["delay"]
    assert isinstance(delay, int | float)
    words: list[str] = []
    for word in ANSWER.split(" "):
        await asyncio.sleep(delay)
        words.append(word)
        ctx.emit(word + " ", kind="token")  # to whoever follows the run right now
    ctx.emit({"words": len(words)}, kind="usage")
    return {"answer": " ".join(words)}


def graph(delay: float) -> Graph:
    return (
        GraphBuilder("llm-answer")
        .input("question", S.string(), required=True)
        .field("answer", S.string())
        .node("answer", "llm.answer", config={"delay": delay})
        .edge("ask", START, "answer")
        .edge("done", "answer", FINISH)
        .output("answer")
        .build()
    )


def describe(event: Event) -> str:
    where = f" {event.node_id}" if event.node_id else ""
    if event.type is EventType.CHECKPOINT_COMMITTED:
        where = f" {event.metadata['checkpoint_type']}"
    return f"[{event.seq}] {event.type}{where}"


def follow(docket: SyncDocket, run_id: str) -> None:
    """Print the run as it happens: tokens inline, events one per line."""
    inline = False
    with docket.stream(run_id) as stream:
        for item in stream:
            if isinstance(item, Emission) and item.kind == "token":
                if not inline:
                    print(f"{item.node_id} > ", end="")
                    inline = True
                print(item.data, end="", flush=True)
                continue
            if inline:
                print()
                inline = False
            if isinstance(item, Emission):
                print(f"{item.node_id} ~ {item.kind}: {item.data}")
            elif isinstance(item, EventsPruned):
                print(f"(events {item.first_seq}..{item.last_seq} were pruned)")
            else:
                print(describe(item))
                if item.seq == 1:
                    docket.start_worker()  # the stream follows: now let the work begin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--db", type=Path, default=None, help="keep the database here")
    parser.add_argument("--delay", type=float, default=0.02, help="seconds between tokens")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="docket-llm-") as tmp:
        database = args.db or Path(tmp) / "llm.db"
        with SyncDocket(f"sqlite:///{database}", nodes=nodes) as docket:
            pushes = Feature.STREAMS in docket.docket.capabilities.features
            print(f"backend: sqlite ({'live feed' if pushes else 'no live feed: polling'})")
            ref = docket.save_graph(graph(args.delay))
            run = docket.start_run(ref, {"question": "why do otters hold hands?"}, run_id="llm-1")
            follow(docket, run.id)
            done = docket.fetch_run(run.id)
            docket.stop_worker()
            print(f"run {run.id} is {done.status}")
            print(f"answer (committed): {(done.output or {}).get('answer')}")


if __name__ == "__main__":
    main()
