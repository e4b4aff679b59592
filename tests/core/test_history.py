"""History in the events (docket.core.history): deltas, bases, holes, the size budget.

Every fixture's whole history is already rebuilt and compared checkpoint by checkpoint in
``tests.core.helpers.check_history``; these cases pin the edges that check does not reach.
"""

from __future__ import annotations

from docket.core.history import (
    HISTORY_BUDGET,
    SNAPSHOT_EVERY,
    checkpoint_infos,
    rebuild_at,
)
from docket.graph.builder import GraphBuilder
from docket.graph.guards import not_, version_at_least
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState
from docket.graph.reducers import R
from docket.graph.schema import S
from docket.records import Event, EventType
from docket.testing import run_inline
from docket.values import JSONDict

NODES = NodeRegistry()


@NODES.node("history_say")
def _say(state: NodeState, ctx: NodeContext) -> JSONDict:
    count = state.get("count")
    n = count if isinstance(count, int) else 0
    big = state.get("big_at")
    blob = "x" * (HISTORY_BUDGET + 10) if big == n else "small"
    return {"chat": [f"m{n}"], "count": n + 1, "blob": blob}


def _graph(steps: int) -> Graph:
    return (
        GraphBuilder("history_chat")
        .input("big_at", S.integer())
        .field("chat", S.list(S.string()), reducer=R.append())
        .field("count", S.integer())
        .field("blob", S.string())
        .node("say", "history_say")
        .edge("go", START, "say")
        .edge("again", "say", "say", guard=not_(version_at_least("count", steps)))
        .edge("done", "say", FINISH, guard=version_at_least("count", steps))
        .build()
    )


def _events(steps: int, big_at: int = -1) -> tuple[list[Event], list[JSONDict]]:
    done = run_inline(_graph(steps), {"big_at": big_at}, nodes=NODES, commit_to=True)
    events = [e for c in done.checkpoints for e in c.events]
    states = [
        {cid: ch.value for cid, ch in c.run.channels.items() if cid.startswith("state:")}
        for c in done.checkpoints
    ]
    return events, states


def _state_of(events: list[Event], seq: int) -> JSONDict | None:
    rebuilt = rebuild_at(events, seq)
    if rebuilt is None:
        return None
    return {c: ch.value for c, ch in rebuilt.channels.items() if c.startswith("state:")}


def test_an_append_is_stored_as_the_items_added_and_bases_recur() -> None:
    events, states = _events(SNAPSHOT_EVERY + 8)
    marks = [e for e in events if e.type is EventType.CHECKPOINT_COMMITTED]
    bases = [e.metadata["checkpoint_seq"] for e in marks if e.payload.get("base")]
    assert bases == [1, SNAPSHOT_EVERY]
    later = marks[5].payload["channels"]
    assert isinstance(later, dict)
    assert later["state:chat"] == {"v": 5, "append": ["m4"]}  # one item, not the list
    for seq, state in enumerate(states, start=1):
        assert _state_of(events, seq) == state


def test_a_hole_makes_checkpoints_unreadable_until_the_next_base() -> None:
    events, states = _events(SNAPSHOT_EVERY + 4)
    kept = [e for e in events if e.seq > 20]  # retention removed events 1..20
    infos = checkpoint_infos(kept)
    unreadable = [i.checkpoint_seq for i in infos if not i.readable]
    readable = [i.checkpoint_seq for i in infos if i.readable]
    assert unreadable and max(unreadable) == SNAPSHOT_EVERY - 1
    assert readable[0] == SNAPSHOT_EVERY
    assert _state_of(kept, SNAPSHOT_EVERY - 1) is None
    assert _state_of(kept, SNAPSHOT_EVERY + 2) == states[SNAPSHOT_EVERY + 1]


def _seq(event: Event) -> int:
    seq = event.metadata["checkpoint_seq"]
    assert isinstance(seq, int)
    return seq


def _omitted(event: Event) -> bool:
    channels = event.payload["channels"]
    assert isinstance(channels, dict)
    entry = channels.get("state:blob")
    return isinstance(entry, dict) and entry.get("omitted") is True


def test_a_value_past_the_budget_is_omitted_and_the_commit_still_fits() -> None:
    events, states = _events(SNAPSHOT_EVERY + 3, big_at=3)
    marks = {_seq(e): e for e in events if e.type is EventType.CHECKPOINT_COMMITTED}
    big = [s for s, e in marks.items() if _omitted(e)]
    assert big, "the oversized value is not in the history entry"
    assert all(len(str(e.payload)) < 2 * HISTORY_BUDGET for e in marks.values())
    first = min(big)
    assert _state_of(events, first - 1) == states[first - 2]
    infos = {i.checkpoint_seq: i for i in checkpoint_infos(events)}
    assert not infos[first].readable and _state_of(events, first) is None
    # unreadable until the next base, readable again from it
    assert not infos[SNAPSHOT_EVERY - 1].readable
    assert infos[SNAPSHOT_EVERY].readable
    assert _state_of(events, SNAPSHOT_EVERY + 1) == states[SNAPSHOT_EVERY]
