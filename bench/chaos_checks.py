"""The chaos campaign's checks of what the store holds (``bench/chaos.py``): each run's
own record and history, and the child runs the campaign's parents started.

Child runs are found the way an operator would: every run of the store that is not one
of the campaign's parents must carry a parent link (``Run.metadata["docket.parent"]``),
and each one must answer exactly one ``child_started`` event of that parent, naming the
same (task, attempt). The checks, each counted on the campaign's last line:

* ``children``: child runs in the store;
* ``orphans``: child runs no ``child_started`` event asked for (a second child of one
  attempt is one of them, as is a run with no parent link at all);
* ``missing_children``: children a parent asked for that never ran, or fewer children
  than :func:`bench.chaos_app.expected_children` (every child node of a done parent ran
  exactly once per attempt);
* ``child_outputs_wrong``: done parents whose fields written by child nodes
  (``kid``, ``kids``) are not exactly each child's result once, in item order.

The runs of the campaign's schedule (graph ``chaos_tick``) are handed back apart
(:mod:`bench.chaos_time` checks them); a child that its parent's deadline cancelled is
accepted. Each child's own record is checked like a parent's (event sequences, checkpoint marks,
no claim, not poisoned) and its end must be the expected one: ``failed`` for the child
that fails on purpose, else ``done`` with ``y = [3 x + 1]`` for its input.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import attrs

from bench import chaos_admission, chaos_app, chaos_queues
from docket import SyncDocket
from docket.core.children import ParentLink
from docket.errors import NotFound
from docket.records import (
    FORKED_FROM_KEY,
    TASK_CHILD_RUNNING,
    Event,
    EventType,
    Run,
    RunStatus,
)

__all__ = ["Record", "Verdict", "check_children", "check_record", "n_of"]


def n_of(run_id: str) -> int:
    """The input ``n`` of campaign run ``chaos-<n>``, or of the parent of a child run
    (``chaos-<n>:<step>:<node>:<attempt>@<seq>``)."""
    return int(run_id.split(":", 1)[0].rsplit("-", 1)[1])


@attrs.define
class Verdict:
    completed: int = 0
    lost: int = 0
    duplicate_commits: int = 0
    gaps: int = 0
    wrong_outputs: int = 0
    children: int = 0
    orphans: int = 0
    missing_children: int = 0
    child_outputs_wrong: int = 0
    deadlines: int = 0  # runs failed by the deadline that had to fire
    deadlines_asleep: int = 0  # of them, while their ``t`` slept
    messages: int = 0
    messages_lost: int = 0
    messages_doubled: int = 0
    ticks: int = 0
    ticks_missed: int = 0
    ticks_doubled: int = 0
    edits: int = 0  # runs edited while they waited (bench/chaos_ops.py)
    edits_lost: int = 0
    forks: int = 0  # done runs forked at an earlier checkpoint
    forks_wrong: int = 0
    streamed: int = 0  # runs whose live stream matched the store (bench/chaos_streams.py)
    stream_gaps: int = 0
    stream_duplicates: int = 0
    problems: list[str] = attrs.field(factory=list)

    def problem(self, text: str) -> None:
        if len(self.problems) < 30:
            self.problems.append(text)


@attrs.frozen
class Record:
    """A run as the store holds it after the campaign, with its history."""

    run: Run
    events: list[Event]

    def completed_tasks(self) -> set[str]:
        # a map over an empty list completes with no task run (payload items: 0)
        return {
            event.task_id
            for event in self.events
            if event.type is EventType.NODE_COMPLETED
            and event.task_id is not None
            and event.payload.get("items") != 0
        }


def check_record(docket: SyncDocket, run_id: str, verdict: Verdict) -> Record | None:
    """The run's own record: no claim left, not poisoned, event sequences 1..event_seq,
    checkpoint marks 1..checkpoint_seq once each (``None``: not in the store)."""
    try:
        info = docket.inspect_run(run_id)
    except NotFound:
        return None
    run = info.run
    if info.claimed_at is not None:
        verdict.problem(f"{run_id}: still claimed at {info.claimed_at}")
    if info.poisoned:
        verdict.problem(f"{run_id}: poisoned ({info.poison_reason})")
    events = list(docket.history(run_id))
    seqs = [event.seq for event in events]
    marks = [
        int(str(event.metadata["checkpoint_seq"]))
        for event in events
        if event.type is EventType.CHECKPOINT_COMMITTED
    ]
    if seqs != list(range(1, run.event_seq + 1)):
        verdict.gaps += 1
        verdict.problem(f"{run_id}: event sequences {seqs[:5]}… of {run.event_seq}")
    elif sorted(set(marks)) != list(range(1, run.checkpoint_seq + 1)):
        verdict.gaps += 1
        verdict.problem(f"{run_id}: checkpoint marks {marks} of {run.checkpoint_seq}")
    if len(marks) != len(set(marks)):
        verdict.duplicate_commits += 1
        verdict.problem(f"{run_id}: checkpoint marks {marks}")
    return Record(run, events)


def _all_run_ids(docket: SyncDocket) -> list[str]:
    out: list[str] = []
    before = None
    while True:
        page = docket.list_runs(limit=1000, before=before)
        out += [summary.id for summary in page.runs]
        if not page.has_more:
            return out
        before = page.next_before


Key = tuple[str, str, int]  # (parent run, parent task, parent attempt)


def _asked(parents: dict[str, Record], verdict: Verdict) -> dict[Key, list[str]]:
    """The children each parent's ``child_started`` events asked for, checking each done
    parent asked for exactly the expected ones and took their outputs once."""
    asked: dict[Key, list[str]] = defaultdict(list)
    for run_id, record in parents.items():
        n = n_of(run_id)
        started: Counter[tuple[str, int]] = Counter()
        for event in record.events:
            if event.type is not EventType.CHILD_STARTED or event.task_id is None:
                continue
            attempt, ident = event.payload.get("attempt"), event.payload.get("child_run_id")
            if not (isinstance(attempt, int) and isinstance(ident, str)):
                verdict.problem(f"{run_id}: child_started payload {event.payload}")
                continue
            asked[(run_id, event.task_id, attempt)].append(ident)
            started[(event.task_id.rsplit(":", 1)[1], attempt)] += 1
        run = record.run
        waiting = sorted(
            t.task_id for t in run.active_tasks.values() if t.status == TASK_CHILD_RUNNING
        )
        if waiting:
            verdict.problem(f"{run_id}: {run.status} still waits for children of {waiting}")
        if run.status is not RunStatus.DONE:
            continue  # counted as lost
        expected = Counter(chaos_app.expected_children(n))
        if started != expected:
            verdict.missing_children += sum((expected - started).values())
            verdict.problem(f"{run_id}: started children {dict(started)}")
        want = chaos_app.child_fields(n)
        got = {name: (run.output or {}).get(name) for name in want}
        if got != want:
            verdict.child_outputs_wrong += 1
            verdict.problem(f"{run_id}: fields written by children {got}, expected {want}")
    return asked


def _expected_end(link: ParentLink) -> tuple[RunStatus, dict[str, object] | None]:
    n = n_of(link.run_id)
    suffix = link.task_id.rsplit(":", 1)[1]
    if chaos_app.kid_fails(suffix, link.attempt):
        return RunStatus.FAILED, None
    x = n if suffix == "k" else chaos_app.map_items(n)[int(suffix.split("[", 1)[1].rstrip("]"))]
    return RunStatus.DONE, {"y": [chaos_app.kid_value(x)]}


def check_children(
    docket: SyncDocket,
    parents: dict[str, Record],
    verdict: Verdict,
    scheduled: dict[str, Record] | None = None,
    forks: dict[str, Record] | None = None,
) -> dict[str, Record]:
    """Every child run in the store against its parents' ``child_started`` events (see
    the module docstring); returns the children's records. The runs of the campaign's
    schedule (graph ``chaos_tick``) are no children: their records go to ``scheduled``;
    nor are the forks the harness made (``docket.forked_from`` set): they go to ``forks``
    (:mod:`bench.chaos_ops` checks them); nor are the queued runs (graph ``chaos_q``,
    :mod:`bench.chaos_queues`) and the admitted runs (graph ``chaos_a``,
    :mod:`bench.chaos_admission`)."""
    asked = _asked(parents, verdict)
    children: dict[str, Record] = {}
    linked: dict[Key, list[str]] = defaultdict(list)
    for ident in _all_run_ids(docket):
        if ident in parents:
            continue
        record = check_record(docket, ident, verdict)
        if record is None:
            verdict.problem(f"{ident}: listed, then not found")
            continue
        if record.run.graph_id == chaos_app.TICK_GRAPH.id and scheduled is not None:
            scheduled[ident] = record
            continue
        if FORKED_FROM_KEY in record.run.metadata and forks is not None:
            forks[ident] = record
            continue
        if record.run.graph_id == chaos_queues.GRAPH_ID:
            continue  # a queued run: bench/chaos_queues.py checks it (its record is checked)
        if record.run.graph_id == chaos_admission.GRAPH_ID:
            continue  # an admitted run: bench/chaos_admission.py checks it (and its record)
        children[ident] = record
        link = ParentLink.of(record.run)
        if link is None:
            verdict.orphans += 1
            verdict.problem(f"{ident}: a run of no parent the campaign did not start")
            continue
        key = (link.run_id, link.task_id, link.attempt)
        linked[key].append(ident)
        if ident not in asked.get(key, []):
            verdict.orphans += 1
            verdict.problem(f"{ident}: an orphan (no child_started event of {key} names it)")
            continue
        status, output = _expected_end(link)
        run = record.run
        if run.status is RunStatus.CANCELLED and chaos_app.deadline_fires(n_of(link.run_id)):
            continue  # its parent's deadline fired while it ran
        if run.status is not status or (output is not None and run.output != output):
            verdict.wrong_outputs += 1
            verdict.problem(f"{ident}: child ended {run.status} with {run.output}")
    verdict.children = len(children)
    for key, idents in sorted(asked.items()):
        if len(idents) != 1:
            verdict.problem(f"{key}: asked for children {idents} (one per attempt)")
        for ident in idents:
            if ident not in children:
                verdict.missing_children += 1
                verdict.problem(f"{ident}: its parent asked for it, and it never ran")
        if len(linked.get(key, [])) > 1:
            verdict.problem(f"{key}: {len(linked[key])} child runs for one attempt")
    return children
