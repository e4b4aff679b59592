"""Parents parked on child runs, built with the real core, for the ``child_runs`` cases.

The kit does not hand-write these documents: it compiles a child graph and a parent
whose two child nodes (``left``, ``right``) run it side by side, and drives the parent
with :mod:`docket.core` exactly as a worker does — ``initialize``, a claim, ``advance``,
``settle`` with an :class:`~docket.core.outcomes.AwaitingChild` outcome per child node
(committed claimed, releasing to the first child timer), and
:func:`docket.core.children.deliver` for a child's end (committed unclaimed, fenced on
the parent's checkpoint). So the backend sees the very shapes the runtime sends:
``child_running`` tasks with ``metadata.child_run_id`` and ``started_at``, ``child``
timers, ``retry_scheduled`` re-parks, barriers and failures.

The two children's timers differ (``LEFT_CHECK`` < ``RIGHT_CHECK``), so a re-park after
the left child's hand-off is due exactly at the right child's timer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import datetime, timedelta

import attrs

from docket.contract import ClaimedProposal, InitProposal, UnclaimedProposal
from docket.core.advance import advance
from docket.core.children import awaited_children, child_input, child_outcome, deliver
from docket.core.children import child_run_id as derive_child_id
from docket.core.children import parent_link as link_metadata
from docket.core.init import build_initial_run, initialize
from docket.core.moment import Moment
from docket.core.outcomes import AwaitingChild
from docket.core.plan import Dispatch, HostLimits
from docket.core.proposals import claimed_proposal, init_proposal, unclaimed_proposal
from docket.core.settle import settle
from docket.graph.builder import GraphBuilder
from docket.graph.children import ChildSpec
from docket.graph.compiler import RuntimeGraph, compile_graph, effective_document
from docket.graph.model import FINISH, START
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState, RetryPolicy
from docket.graph.schema import S
from docket.records import Event, GraphRef, GraphVersion, OwnerScope, Run, RunStatus, TaskState
from docket.values import JSONDict
from docket_contract_tests.fixtures import tid
from docket_contract_tests.kit import Kit

NODES = NodeRegistry()
LEFT_CHECK = timedelta(seconds=30)  # the left child's timer, after the park
RIGHT_CHECK = timedelta(seconds=40)  # the right child's: what a re-park waits for
LIMITS = HostLimits()
SIDES = ("left", "right")


@NODES.node("kit_child_twice")
def _twice(state: NodeState, ctx: NodeContext) -> JSONDict:  # compiled, never called
    n = state["n"]
    assert isinstance(n, int)
    return {"twice": n * 2}


@attrs.frozen
class Family:
    """A parent graph with two child nodes and the child graph, saved in ``owner``'s scope."""

    owner: OwnerScope
    parent: RuntimeGraph
    child: RuntimeGraph


@attrs.frozen
class Parked:
    """A parent committed (claimed, released to its first child timer) with both of its
    child nodes waiting; ``kids`` maps each side to its child run id and task."""

    run: Run
    moment: Moment
    at: datetime
    kids: dict[str, tuple[str, TaskState]]
    events: tuple[Event, ...]  # every event committed so far (initialize's, then the park's)

    def child_id(self, side: str) -> str:
        return self.kids[side][0]

    def task(self, side: str) -> TaskState:
        return self.kids[side][1]


def _ids() -> Callable[[str], str]:
    counter = itertools.count(1)
    return lambda kind: f"{kind}-{next(counter)}"


async def _save(k: Kit, owner: OwnerScope, rtg: RuntimeGraph, doc: JSONDict) -> None:
    saved = await k.b.graphs.save_graph(owner, GraphRef(rtg.graph_id, rtg.graph_hash), doc)
    k.isa(saved, GraphVersion, f"save_graph({owner}, {rtg.graph_id})")


async def family(k: Kit, owner: OwnerScope) -> Family:
    """Compile the child graph, pin it in the parent's two child nodes, save both."""
    child = (
        GraphBuilder(k.name("kid"))
        .input("n", S.integer(), required=True)
        .field("twice", S.integer())
        .node("work", "kit_child_twice")
        .edge("a", START, "work")
        .edge("b", "work", FINISH)
        .output("twice")
        .build()
    )
    built = compile_graph(child, NODES)
    assert built.ok and built.runtime and built.effective, built.errors

    def spec(side: str) -> ChildSpec:
        pinned = built.graph_hash
        return ChildSpec(
            graph=child.id, graph_hash=pinned, input={"n": "n"}, output={side: "twice"}
        )

    builder = GraphBuilder(k.name("parent")).input("n", S.integer(), required=True)
    for side in SIDES:  # one attempt each: a failed child fails the parent
        builder = builder.field(side, S.integer()).node(
            side, child=spec(side), retry=RetryPolicy(max_attempts=1)
        )
    parent = (
        builder.edge("a", START, "left")
        .edge("b", START, "right")
        .edge("c", "left", FINISH)
        .edge("d", "right", FINISH)
        .output("left")
        .output("right")
        .build()
    )
    compiled = compile_graph(parent, NODES)
    assert compiled.ok and compiled.runtime and compiled.effective, compiled.errors
    await _save(k, owner, built.runtime, effective_document(built.effective))
    await _save(k, owner, compiled.runtime, effective_document(compiled.effective))
    return Family(owner=owner, parent=compiled.runtime, child=built.runtime)


def _moment(value: object) -> Moment:
    assert isinstance(value, Moment), value
    return value


async def park(k: Kit, fam: Family, at: datetime, run_id: str | None = None) -> Parked:
    """Initialize a parent, claim it at ``at`` and commit its first superstep parked on
    its two children (what a worker commits before it starts them)."""
    rtg = fam.parent
    created = build_initial_run(rtg, {"n": 21}, run_id=run_id or k.fresh("parent"), now=at)
    first = _moment(initialize(rtg, created, now=at))
    started = await k.b.transitions.initialize(
        fam.owner, init_proposal(first, transition_id=tid()), first.events
    )
    k.eq(k.isa(started, Run, "initialize of the parent"), first.run, "the initialized parent")
    lease = await k.claim_one(at, first.run.id)
    dispatch = advance(rtg, first.run, now=at, limits=LIMITS)
    assert isinstance(dispatch, Dispatch), dispatch
    seq = first.run.checkpoint_seq
    checks = {"left": at + LEFT_CHECK, "right": at + RIGHT_CHECK}
    waiting = [
        AwaitingChild(
            task_id=a.task_id,
            node_id=a.node_id,
            attempt=a.attempt,
            child_run_id=derive_child_id(a.task_id, a.attempt, seq),
            check_at=checks[a.node_id],
        )
        for a in dispatch.activations
    ]
    moment = settle(rtg, dispatch, waiting, now=at, ids=_ids())
    proposal = claimed_proposal(moment, seq, lease.claim_token, transition_id=tid())
    committed = await k.b.transitions.commit_claimed(fam.owner, proposal, moment.events)
    k.eq(k.isa(committed, Run, "the parent's parking commit"), moment.run, "the parked parent")
    kids = {task.node_id: (ident, task) for ident, task in awaited_children(moment.run).items()}
    k.eq(sorted(kids), list(SIDES), "both child nodes wait for a child")
    history = (*first.events, *moment.events)
    return Parked(run=moment.run, moment=moment, at=at, kids=kids, events=history)


def ended_child(fam: Family, parked: Parked, side: str, status: RunStatus) -> Run:
    """The side's child run as it ends (``done`` with its output, or ``cancelled``)."""
    ident, task = parked.kids[side]
    spec = fam.parent.nodes[task.node_id].child
    assert spec is not None
    start = parked.at
    created = build_initial_run(
        fam.child, child_input(spec, task.snapshot), run_id=ident, now=start
    )
    run = _moment(initialize(fam.child, created, now=start)).run
    n = task.snapshot["n"]
    assert isinstance(n, int)
    output: JSONDict | None = {"twice": n * 2} if status is RunStatus.DONE else None
    return attrs.evolve(run, status=status, output=output, finished_at=start, updated_at=start)


def hand_off(
    fam: Family, parent: Run, parked: Parked, side: str, status: RunStatus, now: datetime
) -> Moment:
    """The parent's moment once the side's child ended with ``status`` (``deliver``)."""
    task = parent.active_tasks[parked.task(side).task_id]
    spec = fam.parent.nodes[task.node_id].child
    assert spec is not None
    outcome = child_outcome(spec, task, ended_child(fam, parked, side, status))
    assert outcome is not None
    return _moment(deliver(fam.parent, parent, outcome, now=now, ids=_ids(), limits=LIMITS))


def signal(moment: Moment) -> UnclaimedProposal:
    """The hand-off's ``commit_unclaimed`` proposal (expected: the parent's checkpoint)."""
    return unclaimed_proposal(moment, transition_id=tid())


def completion(fam: Family, run: Run, now: datetime, token: str) -> tuple[ClaimedProposal, Moment]:
    """The claimed commit that finishes a parent whose barrier committed both results."""
    moment = _moment(advance(fam.parent, run, now=now, limits=LIMITS))  # nothing left to run
    return claimed_proposal(moment, run.checkpoint_seq, token, transition_id=tid()), moment


def child_start(
    fam: Family, parked: Parked, side: str, at: datetime
) -> tuple[InitProposal, Moment]:
    """The ``initialize`` a worker sends to start the side's child (fresh transition id)."""
    ident, task = parked.kids[side]
    spec = fam.parent.nodes[task.node_id].child
    assert spec is not None
    metadata = link_metadata(parked.run, task.task_id, task.node_id, task.attempt)
    created = build_initial_run(
        fam.child, child_input(spec, task.snapshot), run_id=ident, now=at, metadata=metadata
    )
    moment = _moment(initialize(fam.child, created, now=at))
    return init_proposal(moment, transition_id=tid()), moment


__all__ = [
    "LEFT_CHECK",
    "RIGHT_CHECK",
    "Family",
    "Parked",
    "child_start",
    "completion",
    "ended_child",
    "family",
    "hand_off",
    "park",
    "signal",
]
