"""What keeping a run's state history costs in storage: docket vs LangGraph, per step.

The long-chat shape (:func:`bench.shapes.long_chat_graph`): one node looping on itself,
each superstep appending a 1 KB message to a list field, ``turns`` supersteps. Both
engines store on SQLite (docket's backend; LangGraph's ``AsyncSqliteSaver`` with
``durability="sync"``, as in the durable section), one file each, one run each.

- docket: the run's events as stored (``event_json``, one row per event). History lives
  in the events: each ``checkpoint_committed`` payload carries what the checkpoint
  changed (only the appended message), plus a full copy every 32nd checkpoint
  (``docket.core.history``). The run document itself (the current state, overwritten at
  each commit) is not history and is not counted.
- LangGraph: the checkpointer's ``checkpoints`` (checkpoint and metadata blobs) and
  ``writes`` (value blobs) rows; every checkpoint holds the whole state.

Bytes are the stored payload columns' lengths (the database's own page and index overhead
is left out on both sides; ``file_bytes`` gives the files' sizes for that). Per step =
total / turns: docket's stays flat as the chat grows (one message per step, a base every
32 steps), LangGraph's grows with the chat (the whole list per step).
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import attrs

from bench.shapes import MESSAGE, NODES, long_chat_graph
from bench.stores import Place
from docket import Docket
from docket.records import RunStatus, event_to_json

__all__ = [
    "HistoryBytes",
    "docket_history_bytes",
    "history_lines",
    "history_table",
    "langgraph_history_bytes",
]


@attrs.define
class HistoryBytes:
    engine: str  # "docket" or "langgraph"
    turns: int
    stored_bytes: int = 0  # payload columns: docket's events, LangGraph's checkpoints+writes
    rows: int = 0
    file_bytes: int = 0  # the SQLite file(s), pages and indexes included
    unavailable: str | None = None

    @property
    def per_step(self) -> float:
        return self.stored_bytes / self.turns if self.turns else 0.0

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self) | {"bytes_per_step": round(self.per_step, 1)}


async def docket_history_bytes(place: Place, turns: int) -> HistoryBytes:
    """One long-chat run of ``turns`` steps through a worker; its events' stored bytes."""
    try:
        async with Docket(place.docket_url(), nodes=NODES, poll_interval=0.05) as docket:
            ref = await docket.save_graph(long_chat_graph(turns))
            run_id = f"history-{turns}"
            async with docket.worker(concurrency=1, name="history"):
                await docket.start_run(ref, {"turns": turns}, run_id=run_id)
                run = await docket.await_run(run_id, timeout=600, poll_interval=0.05)
            if run.status is not RunStatus.DONE or run.step != turns:
                raise RuntimeError(f"{run_id} ended {run.status} at step {run.step}")
            events = await docket.history(run_id)
    except Exception as exc:
        return HistoryBytes("docket", turns, unavailable=f"{type(exc).__name__}: {exc}"[:160])
    stored = sum(len(event_to_json(event)) for event in events)
    footprint = await place.footprint()
    return HistoryBytes("docket", turns, stored, len(events), footprint.bytes)


class _ChatState(TypedDict, total=False):
    turns: int
    turn: int
    messages: Annotated[list[str], operator.add]


async def _lg_chat(state: _ChatState) -> dict[str, Any]:
    return {"messages": [MESSAGE], "turn": state.get("turn", 0) + 1}


def _lg_next(state: _ChatState) -> str:
    from langgraph.graph import END

    return str(END) if state.get("turn", 0) >= state.get("turns", 0) else "chat"


async def langgraph_history_bytes(place: Place, turns: int) -> HistoryBytes:
    """The same chat through LangGraph on ``AsyncSqliteSaver``; its rows' stored bytes."""
    try:
        from langgraph.graph import START, StateGraph

        graph: Any = StateGraph(_ChatState)
        graph.add_node("chat", _lg_chat)
        graph.add_edge(START, "chat")
        graph.add_conditional_edges("chat", _lg_next)
        async with place.langgraph_saver(1)() as saver:
            app = graph.compile(checkpointer=saver)
            config = {"configurable": {"thread_id": f"chat{turns}"}, "recursion_limit": turns + 10}
            out = await app.ainvoke({"turns": turns}, config, durability="sync")
        if out.get("turn") != turns or len(out.get("messages", [])) != turns:
            raise RuntimeError(f"LangGraph chat ended at turn {out.get('turn')}")
        stored, rows = await asyncio.to_thread(_langgraph_rows, place.sqlite_path)
    except Exception as exc:
        return HistoryBytes("langgraph", turns, unavailable=f"{type(exc).__name__}: {exc}"[:160])
    footprint = await place.footprint()
    return HistoryBytes("langgraph", turns, stored, rows, footprint.bytes)


def _langgraph_rows(path: Path) -> tuple[int, int]:
    with sqlite3.connect(path) as conn:
        checkpoints = conn.execute(
            "SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0), count(*) "
            "FROM checkpoints"
        ).fetchone()
        writes = conn.execute(
            "SELECT coalesce(sum(length(value)), 0), count(*) FROM writes"
        ).fetchone()
    return int(checkpoints[0]) + int(writes[0]), int(checkpoints[1]) + int(writes[1])


def history_table(found: list[HistoryBytes]) -> str:
    rows = [
        "| engine | turns | stored bytes | bytes/step | rows | file bytes |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for h in found:
        if h.unavailable is not None:
            rows.append(f"| {h.engine} | {h.turns} | unavailable: {h.unavailable} ||||")
            continue
        rows.append(
            f"| {h.engine} | {h.turns} | {h.stored_bytes} | {h.per_step:.0f} | {h.rows} "
            f"| {h.file_bytes} |"
        )
    return "\n".join(rows)


def history_lines(found: list[HistoryBytes]) -> list[str]:
    """``history <engine> bytes_per_step@<N>=<b>``, the growth from the smallest to the
    largest N, and docket/langgraph at each N."""
    ok = {(h.engine, h.turns): h for h in found if h.unavailable is None}
    out: list[str] = []
    turns = sorted({t for _, t in ok})
    for engine in ("docket", "langgraph"):
        for n in turns:
            if (engine, n) in ok:
                out.append(f"history {engine} bytes_per_step@{n}={ok[(engine, n)].per_step:.0f}")
        low, high = ok.get((engine, turns[0])) if turns else None, None
        if turns:
            high = ok.get((engine, turns[-1]))
        if low is not None and high is not None and low.per_step and len(turns) > 1:
            out.append(
                f"history {engine} growth@{turns[-1]}/{turns[0]}={high.per_step / low.per_step:.2f}"
            )
    for n in turns:
        mine, theirs = ok.get(("docket", n)), ok.get(("langgraph", n))
        if mine is not None and theirs is not None and theirs.stored_bytes:
            out.append(
                f"history {n} docket/langgraph={mine.stored_bytes / theirs.stored_bytes:.3f}"
            )
    return out
