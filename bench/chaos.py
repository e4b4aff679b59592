"""The chaos campaign: worker processes killed at random, the database restarted, and
everything checked afterwards.

::

    python bench/chaos.py --backend sqlite --runs 500 --min-kills 30
    python bench/chaos.py --backend postgres --runs 500 --min-kills 30 --restart-db 3
    python bench/chaos.py --backend redis --runs 500 --min-kills 30 --restart-db 3
    python bench/chaos.py --url postgresql://... --runs 100      # a server of your own
    python bench/chaos.py --backend postgres --measure-recovery 30

Without ``--url`` it starts its own store: a temporary SQLite file, a throwaway
PostgreSQL server (``synchronous_commit=on``, restarted with ``pg_ctl -m immediate``, a
crash of the server's processes) or a throwaway ``redis-server`` (AOF fsynced before
every reply, restarted with SIGKILL).

The campaign starts ``--workers`` ``docket worker --app bench.chaos_app:create``
processes and submits ``--runs`` runs of the graph in :mod:`bench.chaos_app` (a chain, a
fan-out with a fan-in barrier, a node that fails its first attempt and is retried after a
backoff timer, an interrupt this harness answers, a map over a list whose length depends
on the input, a child run, a map of child runs, one per item, and a node that sleeps or
waits for a message the harness sends, in some runs past a deadline that must fire: see
:mod:`bench.chaos_time`). Every run has a deadline. Submissions are spread
over the kill phase; every ``--kill-interval`` seconds a random worker gets SIGKILL and a
fresh one is started in its place, until at least ``--min-kills`` kills happened and every
run is submitted; ``--restart-db`` restarts of the server are spread over the same phase. Then
the workers drain what is left, are stopped with SIGTERM, and the harness checks:

* from the store (the facade's reads, plus one raw count per backend): every run is done
  with the output computed from its input; its event sequences are 1..event_seq and its
  ``checkpoint_committed`` marks exactly 1..checkpoint_seq (no gap, none twice); it holds
  no claim and is not poisoned; the store recorded one transition per checkpoint;
* the child runs (:mod:`bench.chaos_checks`): each answers exactly one ``child_started``
  event of its parent (no orphan), every child a parent asked for ran, a done parent asked
  for exactly the expected children (one per attempt of each child node) and its fields
  written by child nodes hold each child's result exactly once, in item order; each child's
  own record is checked like a parent's;
* from the workers' commit logs: no ``(run, checkpoint seq)`` committed by two writers;
* from the side log (one line per node execution): every task of every run executed,
  every completed task of the event history among them, and a task attempt executed
  more than once only where a kill or a database restart explains it — each execution
  but the one whose result was kept was by a worker killed afterwards, or ran within
  ``claim_ttl + 2 s`` of a restart window — or, each counted apart, the execution's
  drain (as its worker logged it) ended with its claim taken: by a child's hand-off (it
  commits the parent without a claim, which revokes the claim of a drain executing a
  sibling task) when one of the run was logged during that drain, else by the claim
  expiring under a stalled live worker;
* no worker process died on its own, and each stopped cleanly (exit 0) at the end.
* durable time (:mod:`bench.chaos_time`): each message the harness sent, accepted, was
  consumed by exactly one ``message_consumed`` event, and each re-send with its key came
  back a duplicate; the runs whose deadline must fire failed with ``deadline_exceeded``;
  each tick of the per-second schedule (created when the kill phase starts, deleted when
  it ends) started exactly one run.
* operator transitions (:mod:`bench.chaos_ops`): the runs whose ``approval`` the harness
  edited (``update_state``) while they waited for their message end with a result that
  reflects the edit; the done runs it forked (``fork_run``, at the checkpoint before
  ``total``, with a patch) end done with the output that checkpoint and patch give.
* the live streams (:mod:`bench.chaos_streams`): a thread of the harness follows every run
  with ``Docket.stream`` through the kills and restarts; each stream yielded every event
  the store holds for its run exactly once, in order, and ended.
* the admission limit (:mod:`bench.chaos_admission`): the runs of a queue admitting 2
  are never more than 2 unfinished at once (their nodes' records, and the store's counts),
  and every start, admitted or held, ends as a done run with the queue's ledger empty.

The last line is ``chaos: backend=<name> runs=R completed=C lost=L duplicate_commits=D
gaps=G wrong_outputs=W children=K orphans=O missing_children=M child_outputs_wrong=X
kills=K db_restarts=N deadlines=D ticks=T ticks_missed=0 ticks_doubled=0 messages=M
messages_lost=0 messages_doubled=0 edits=E edits_lost=0 forks=F forks_wrong=0
streamed=R stream_gaps=0 stream_duplicates=0 queued=Q queue_overlaps=0 admitted=A
admission_overlaps=0 admission_unfinished=0``; the exit status is 1 on any violation.

``--measure-recovery M`` measures the recovery bound instead: M times, a victim worker
hangs in its node executions (keeping its claims alive with heartbeats), is killed at a
random moment of its heartbeat cycle, and the time from the SIGKILL to the first commit
by another worker on a run the victim held is recorded; it prints p50/p99/max against
the declared bound ``claim_ttl + poll_interval``.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as ``python bench/chaos.py``
    sys.path.insert(0, str(ROOT))

from bench import chaos_admission, chaos_app, chaos_queues  # noqa: E402
from bench.chaos_admission import AdmissionLoad  # noqa: E402
from bench.chaos_checks import Record, Verdict, check_children, check_record, n_of  # noqa: E402
from bench.chaos_ops import EDIT_DELTA, Operator, is_fork  # noqa: E402
from bench.chaos_queues import QueueLoad  # noqa: E402
from bench.chaos_store import Store, open_store  # noqa: E402
from bench.chaos_streams import StreamFollower  # noqa: E402
from bench.chaos_time import MIN_TICKING, Messenger, Ticks, check_deadline  # noqa: E402
from bench.chaos_workers import Workers, read_lines  # noqa: E402
from docket import SyncDocket  # noqa: E402
from docket.errors import AlreadyResolved, Conflict, InactiveRun, NotRetryable  # noqa: E402
from docket.records import InterruptStatus, RunStatus  # noqa: E402

RESTART_SLACK = 2.0  # seconds, on top of the claim TTL, around a restart window
HANDOFF_SLACK = 0.5  # seconds: a hand-off may be logged just after the drain it revoked ended
DRAIN_SLACK = 0.05  # seconds: a drain's span (monotonic) placed on the wall clock
STREAM_PATIENCE = 60.0  # seconds the streams get to end once every run is terminal


# -- the harness's side of the runs -----------------------------------------------------------


def run_id_of(index: int) -> str:
    return f"chaos-{index:05}"


class Driver:
    """Submits runs, answers their interrupts and retries the runs that fail on purpose
    (after fixing them), tolerating a store that is away."""

    def __init__(
        self,
        docket: SyncDocket,
        graph: object,
        directory: Path,
        messenger: Messenger | None = None,
        operator: Operator | None = None,
        follower: StreamFollower | None = None,
    ) -> None:
        self.docket = docket
        self.operator = operator
        self.follower = follower
        self.unsure: set[str] = set()  # retried while the store was away
        self.graph = graph
        self.directory = directory
        self.messenger = messenger
        self.submitted = 0
        self.resolved = 0
        self.retried = 0
        self.store_errors = 0
        # runs meant to fail only at `total` that failed elsewhere: a retry would hide them
        self.failed_elsewhere: list[str] = []

    def awaits_retry(self, run_id: str, status: RunStatus) -> bool:
        """A run that failed on purpose and is to be fixed and retried (not finished)."""
        return status is RunStatus.FAILED and chaos_app.needs_fix(n_of(run_id))

    def retry_fixable(self, statuses: dict[str, RunStatus]) -> None:
        # a retry whose answer was lost: once it shows, its run's stream (which ended when
        # the run failed) follows it again
        for run_id in sorted(self.unsure):
            if statuses.get(run_id, RunStatus.FAILED) is not RunStatus.FAILED:
                self.unsure.discard(run_id)
                self._follow_again(run_id)
        for run_id, status in statuses.items():
            if not self.awaits_retry(run_id, status):
                continue
            chaos_app.fixed_marker(self.directory, run_id).touch()
            try:
                failure = self.docket.fetch_run(run_id).failure
                if failure is None or failure.node_id != "total":
                    self.failed_elsewhere.append(f"{run_id}: failed before `total`: {failure}")
                self.docket.retry_run(run_id, reason="chaos: total fixed")
                self.retried += 1
                self._follow_again(run_id)
            except (NotRetryable, InactiveRun):
                self._follow_again(run_id)  # an earlier try landed though its answer was lost
            except Exception:  # the store is away (each backend has its own error types)
                self.store_errors += 1
                self.unsure.add(run_id)
                return

    def _follow_again(self, run_id: str) -> None:
        if self.follower is not None:
            self.follower.follow(run_id)

    def submit_until(self, count: int) -> None:
        from docket.records import GraphRef

        assert isinstance(self.graph, GraphRef)
        while self.submitted < count:
            run_id = run_id_of(self.submitted)
            # every run has a deadline: a generous one, or one that must fire while it sleeps
            short = chaos_app.deadline_fires(self.submitted)
            timeout = chaos_app.SHORT_DEADLINE if short else chaos_app.LONG_DEADLINE
            try:
                self.docket.start_run(
                    self.graph, {"n": self.submitted}, run_id=run_id, timeout=timeout
                )
            except Conflict:
                pass  # an earlier try landed though its answer was lost
            except Exception:  # the store is away (each backend has its own error types)
                self.store_errors += 1
                return  # the store is away: try again next tick
            if self.follower is not None:
                self.follower.follow(run_id)
            if self.messenger is not None:
                self.messenger.started(run_id)
            self.submitted += 1

    def statuses(self) -> dict[str, RunStatus] | None:
        out: dict[str, RunStatus] = {}
        before = None
        try:
            while True:
                page = self.docket.list_runs(limit=1000, before=before, graph_id=chaos_app.GRAPH.id)
                out.update({summary.id: summary.status for summary in page.runs})
                if not page.has_more:
                    return out
                before = page.next_before
        except Exception:  # the store is away (each backend has its own error types)
            self.store_errors += 1
            return None

    def resolve_waiting(self, statuses: dict[str, RunStatus]) -> None:
        for run_id, status in statuses.items():
            if status is not RunStatus.WAITING:
                continue
            try:
                run = self.docket.fetch_run(run_id)
                # an edited run's message waits until its edit committed
                edited = self.operator is None or self.operator.before_message(run)
                if self.messenger is not None and edited:
                    self.messenger.waiting(run)
                for interrupt in run.interrupts.values():
                    if interrupt.status is InterruptStatus.OPEN:
                        n = run.input["n"]
                        assert isinstance(n, int)
                        self.docket.resolve_interrupt(
                            run_id, interrupt.id, chaos_app.approval_for(n)
                        )
                        self.resolved += 1
            except (AlreadyResolved, InactiveRun):
                pass
            except Exception:  # the store is away (each backend has its own error types)
                self.store_errors += 1
                return


# -- the campaign ---------------------------------------------------------------------------------


def campaign(args: argparse.Namespace, store: Store, directory: Path) -> int:
    rng = random.Random(args.seed)
    workers = Workers(store.url, directory, args.claim_ttl, args.poll, args.concurrency)
    restarts: list[tuple[float, float]] = []
    started = time.monotonic()
    ticks = Ticks()
    with SyncDocket(store.url, nodes=chaos_app.NODES) as docket:
        messenger = Messenger(store.url)
        operator = Operator(docket)
        follower = StreamFollower(store.url)
        follower.start()
        driver = Driver(
            docket, chaos_app.save_graphs(docket), directory, messenger, operator, follower
        )
        if "orphan_child" in chaos_app.sabotage():
            start_orphan(docket)
        queued = QueueLoad(docket, args.runs, chaos_app.sabotage())
        admitted = AdmissionLoad(docket, args.runs, chaos_app.sabotage())
        left = (0, 0)
        try:
            names = [workers.spawn() for _ in range(args.workers)]
            workers.wait_ready(names)
            ticks.start(docket)
            ticking, restarted = True, 0.0
            # the kill phase: submissions and restarts are spread over it
            phase = max(args.min_kills * args.kill_interval, 1.0)
            phase_start = time.monotonic()
            restart_at = [
                phase_start + phase * (i + 1) / (args.restart_db + 1)
                for i in range(args.restart_db)
            ]
            next_kill = phase_start + args.kill_interval
            deadline = phase_start + args.timeout
            statuses: dict[str, RunStatus] = {}
            while True:
                now = time.monotonic()
                if now > deadline:
                    print(f"chaos: timed out after {args.timeout}s", file=sys.stderr)
                    break
                share = min(1.0, (now - phase_start) / (phase * 0.8))
                driver.submit_until(round(args.runs * share))
                queued.submit_until(share)
                admitted.submit_until(share)
                admitted.sample()  # the store's admitted count, read all along
                killing = len(workers.killed) < args.min_kills or driver.submitted < args.runs
                # the schedule ticks a while after the last restart too: its runs made up
                # after an outage are part of what is checked
                ticked = now - max(phase_start, restarted) >= MIN_TICKING
                if ticking and ticked and not killing and not restart_at:
                    ticking = not ticks.stop(docket)  # the store may be away: next tick
                if killing and now >= next_kill and workers.live:
                    victim = rng.choice(sorted(workers.live))
                    workers.kill(victim)
                    workers.spawn()
                    next_kill = now + args.kill_interval * rng.uniform(0.5, 1.5)
                if restart_at and now >= restart_at[0] and store.restart is not None:
                    restart_at.pop(0)
                    began = time.time()
                    store.restart()
                    restarts.append((began, time.time()))
                    restarted = time.monotonic()
                for name in workers.reap():
                    print(f"chaos: worker {name} died on its own:\n{workers.tail(name)}")
                fresh = driver.statuses()
                if fresh is not None:
                    statuses = fresh
                    driver.resolve_waiting(statuses)
                    driver.retry_fixable(statuses)
                    operator.fork_done(statuses)
                    finished = sum(
                        1
                        for run_id, s in statuses.items()
                        if s.terminal and not driver.awaits_retry(run_id, s) and not is_fork(run_id)
                    )
                    forking = operator.pending(statuses) or len(operator.forks) < operator.wanted(
                        args.runs
                    )
                    if (
                        driver.submitted == args.runs
                        and not killing
                        and not restart_at
                        and not ticking
                        and finished == args.runs
                        and not forking
                        and queued.finished()
                        and admitted.finished()
                    ):
                        break
                time.sleep(0.2)
            left = admitted.ledger_left()  # while the workers run: they reconcile the rest
            elapsed = time.monotonic() - started
            codes = workers.stop_all()
        finally:
            workers.kill_all()
            messenger.close()
            follower.close(STREAM_PATIENCE)
        verdict, timing = verify(
            args, store, docket, directory, workers, restarts, messenger, ticks, operator, follower
        )
        queue_overlaps, queue_peak = queued.check(
            directory, workers.killed, args.claim_ttl, verdict.problems
        )
        admission_overlaps, admission_unfinished, admission_peak = admitted.check(
            directory, left, verdict.problems
        )
    bad_exits = {name: code for name, code in codes.items() if code != 0}
    side = read_lines(directory, "side")
    print(
        f"chaos: {args.workers} workers x {args.concurrency} slots, ttl={args.claim_ttl}s "
        f"poll={args.poll}s; {len(side)} node executions, {driver.resolved} interrupts "
        f"answered, {driver.retried} failed runs retried, {driver.store_errors} harness calls "
        "refused while the store was away, "
        f"{len(workers.failed_at_start)} workers died before opening it; {elapsed:.1f}s"
    )
    print(f"chaos: {timing}")
    print(
        f"chaos: {queued.total} queued runs through a queue limited to {chaos_queues.LIMIT}: "
        f"at most {queue_peak} executing at once"
    )
    print(
        f"chaos: {admitted.total} runs through a queue admitting {chaos_admission.CAP}: at "
        f"most {admission_peak} unfinished at once, the store counted at most "
        f"{admitted.most_admitted} admitted; "
        f"{admitted.killed_amid(directory, workers.killed)} of them saw a worker killed "
        "while unfinished"
    )
    verdict.problems.extend(driver.failed_elsewhere)
    for text in verdict.problems:
        print(f"chaos: VIOLATION {text}")
    for name in workers.died:
        print(f"chaos: VIOLATION worker {name} exited on its own")
    for name, code in bad_exits.items():
        print(f"chaos: VIOLATION worker {name} ended with {code} after SIGTERM")
    print(
        f"chaos: backend={store.name} runs={args.runs} completed={verdict.completed} "
        f"lost={verdict.lost} duplicate_commits={verdict.duplicate_commits} "
        f"gaps={verdict.gaps} wrong_outputs={verdict.wrong_outputs} "
        f"children={verdict.children} orphans={verdict.orphans} "
        f"missing_children={verdict.missing_children} "
        f"child_outputs_wrong={verdict.child_outputs_wrong} "
        f"kills={len(workers.killed)} db_restarts={len(restarts)} "
        f"deadlines={verdict.deadlines} ticks={verdict.ticks} "
        f"ticks_missed={verdict.ticks_missed} ticks_doubled={verdict.ticks_doubled} "
        f"messages={verdict.messages} messages_lost={verdict.messages_lost} "
        f"messages_doubled={verdict.messages_doubled} "
        f"edits={verdict.edits} edits_lost={verdict.edits_lost} "
        f"forks={verdict.forks} forks_wrong={verdict.forks_wrong} "
        f"streamed={verdict.streamed} stream_gaps={verdict.stream_gaps} "
        f"stream_duplicates={verdict.stream_duplicates} "
        f"queued={queued.total} queue_overlaps={queue_overlaps} "
        f"admitted={admitted.total} admission_overlaps={admission_overlaps} "
        f"admission_unfinished={admission_unfinished}"
    )
    failed = (
        verdict.problems
        or verdict.ticks_missed
        or verdict.ticks_doubled
        or verdict.messages_lost
        or verdict.messages_doubled
        or verdict.edits_lost
        or verdict.forks_wrong
        or verdict.stream_gaps
        or verdict.stream_duplicates
        or verdict.streamed != args.runs
        or verdict.ticks == 0
        or workers.died
        or bad_exits
        or verdict.completed != args.runs
        or len(workers.killed) < args.min_kills
        or len(restarts) < args.restart_db
    )
    return 1 if failed else 0


def verify(
    args: argparse.Namespace,
    store: Store,
    docket: SyncDocket,
    directory: Path,
    workers: Workers,
    restarts: list[tuple[float, float]],
    messenger: Messenger,
    ticks: Ticks,
    operator: Operator,
    follower: StreamFollower,
) -> tuple[Verdict, str]:
    verdict = Verdict()
    parents: dict[str, Record] = {}
    for run_id in (run_id_of(index) for index in range(args.runs)):
        record = check_record(docket, run_id, verdict)
        if record is None:
            verdict.lost += 1
            verdict.problem(f"{run_id}: not found")
            continue
        parents[run_id] = record
        run = record.run
        if chaos_app.deadline_fires(n_of(run_id)):
            verdict.completed += check_deadline(record, verdict)
        elif run.status is not RunStatus.DONE:
            verdict.lost += 1
            verdict.problem(f"{run_id}: {run.status}")
        else:
            verdict.completed += 1
            want = dict(chaos_app.expected_output(n_of(run_id)))
            if run_id in operator.edits:  # its result is the edit check's (edits_lost)
                result = want["result"]
                assert isinstance(result, int)
                want["result"] = result + EDIT_DELTA
            edit_missed = run_id in operator.edits and run.output == {
                **want,
                "result": chaos_app.expected_output(n_of(run_id))["result"],
            }
            if run.output != want and not edit_missed:
                verdict.wrong_outputs += 1
                verdict.problem(f"{run_id}: output {run.output}")
    scheduled: dict[str, Record] = {}
    forks: dict[str, Record] = {}
    children = check_children(docket, parents, verdict, scheduled, forks)
    summaries = [
        messenger.check(parents, verdict),
        ticks.check(scheduled, verdict),
        operator.check(parents, forks, verdict),
        follower.check(parents, verdict),
    ]
    timing = "; ".join(
        [
            *summaries,
            f"{verdict.deadlines} deadlines fired as they had to "
            f"({verdict.deadlines_asleep} while t slept)",
        ]
    )
    records = {**parents, **children, **scheduled, **forks}

    # one recorded transition per checkpoint, counted in the store itself
    if store.raw_transitions is not None:
        recorded = store.raw_transitions(sorted(records))
        for run_id, record in records.items():
            seq = record.run.checkpoint_seq
            if recorded.get(run_id, 0) != seq:
                verdict.duplicate_commits += recorded.get(run_id, 0) > seq
                verdict.gaps += recorded.get(run_id, 0) < seq
                verdict.problem(f"{run_id}: {recorded.get(run_id)} transitions, {seq} checkpoints")

    # the workers' own commit logs: no checkpoint committed by two writers
    commits = Counter((line[1], line[2]) for line in read_lines(directory, "commits"))
    twice = sorted(pair for pair, count in commits.items() if count > 1)
    if twice:
        verdict.duplicate_commits += len({run_id for run_id, _ in twice})
        verdict.problem(f"committed twice per the worker logs: {twice[:5]}")

    expected = {
        run_id: chaos_app.expected_tasks(n_of(run_id)) if run_id in parents else chaos_app.KID_TASKS
        for run_id in records
        if run_id not in scheduled and run_id not in forks  # a tick's node logs nothing
    }
    # a deadline that fires may stop a run (and its children) before any of its tasks
    partial = {run_id for run_id in expected if chaos_app.deadline_fires(n_of(run_id))}
    # a child node's task runs no code: its child run's execution is checked instead
    completed = {
        run_id: {
            task
            for task in record.completed_tasks()
            if task.rsplit(":", 1)[1].split("[", 1)[0] not in chaos_app.CHILD_NODES
        }
        for run_id, record in records.items()
    }
    check_side_log(args, directory, expected, partial, completed, workers, restarts, verdict)
    return verdict, timing


def start_orphan(docket: SyncDocket) -> None:
    """The ``orphan_child`` sabotage: a run naming ``chaos-00002`` as its parent, which
    no ``child_started`` event of that parent asked for."""
    from docket.records import PARENT_KEY

    link = {"run_id": run_id_of(2), "task_id": f"{run_id_of(2)}:2:k", "node_id": "k", "attempt": 1}
    docket.start_run(
        docket.save_graph(chaos_app.KID_GRAPH),
        {"x": 2},
        run_id=f"{run_id_of(2)}:2:k:1@99",
        metadata={PARENT_KEY: link},
    )


def check_side_log(
    args: argparse.Namespace,
    directory: Path,
    expected: dict[str, dict[tuple[str, int], int]],
    partial: set[str],
    completed_tasks: dict[str, set[str]],
    workers: Workers,
    restarts: list[tuple[float, float]],
    verdict: Verdict,
) -> None:
    # exec <run> <task id> <attempt> <key> <worker> <pid> <time>
    executions: dict[tuple[str, str, int], list[tuple[float, str]]] = defaultdict(list)
    for _, run, task_id, number, key, name, _pid, when in read_lines(directory, "side"):
        if key != f"{task_id}:{number}":
            verdict.problem(f"{task_id}: idempotency key {key} for attempt {number}")
        executions[(run, task_id, int(number))].append((float(when), name))
    per_run: dict[str, Counter[tuple[str, int]]] = defaultdict(Counter)
    executed: dict[str, set[str]] = defaultdict(set)
    for run, task_id, attempt_no in executions:
        per_run[run][(task_id.rsplit(":", 1)[1], attempt_no)] += 1
        executed[run].add(task_id)
    for run_id, tasks in expected.items():
        if run_id in partial and not per_run[run_id] - Counter(tasks):
            pass  # no task beyond the expected ones
        elif per_run[run_id] != Counter(tasks):
            verdict.problem(f"{run_id}: executed tasks {dict(per_run[run_id])}")
        missing = completed_tasks.get(run_id, set()) - executed[run_id]
        if missing:
            verdict.problem(f"{run_id}: completed without an execution: {sorted(missing)}")

    # signal <run> <checkpoint seq> <worker> <time>: a child's hand-off to its parent
    handoffs: dict[str, list[float]] = defaultdict(list)
    for line in read_lines(directory, "commits"):
        if line[0] == "signal":
            handoffs[line[1]].append(float(line[4]))
    # lost <run> <outcome> <worker> <began> <ended>: a live worker's drain whose claim was
    # taken from it, so the work it executed was dropped
    lost: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for _, run, _outcome, name, began, ended in read_lines(directory, "lost"):
        lost[(run, name)].append((float(began) - DRAIN_SLACK, float(ended) + DRAIN_SLACK))
    # dropped <run> <outcome> <worker> <began> <ended> <reason...>: a drain that dropped
    # its work for a defect (a crash, an invariant): the re-execution stays a violation,
    # but says what ended the drain
    dropped: dict[tuple[str, str], list[tuple[float, float, str]]] = defaultdict(list)
    for _, run, outcome, name, began, ended, *reason in read_lines(directory, "dropped"):
        window = (float(began) - DRAIN_SLACK, float(ended) + DRAIN_SLACK)
        dropped[(run, name)].append((*window, f"{outcome}: {' '.join(reason)}"))
    slack = args.claim_ttl + RESTART_SLACK

    def cause(run: str, at: float, worker: str) -> str | None:
        """Why this execution's results may have been dropped (``None``: no reason)."""
        killed_at = workers.killed.get(worker)
        if killed_at is not None and killed_at >= at:
            return "kill"
        if any(began - slack <= at <= ended + slack for began, ended in restarts):
            return "restart"
        # the execution's drain lost its claim and its results were dropped: a child's
        # hand-off (a commit without a claim) revoked it while the drain ran a sibling
        # task, or it expired under a live worker whose heartbeat stalled past claim_ttl
        # on a loaded machine and another worker took the run over
        drains = [(b, e) for b, e in lost[(run, worker)] if b <= at <= e]
        if any(b <= h <= e + HANDOFF_SLACK for b, e in drains for h in handoffs[run]):
            return "handoff"
        return "expiry" if drains else None

    reexecuted = unexplained = by_handoff = by_expiry = 0
    for (run, task, attempt), runs in executions.items():
        # a retried run runs its fixed task's attempt again: the last executions are legit
        allowed = chaos_app.executions_per_task(n_of(run), task.rsplit(":", 1)[1])
        if len(runs) <= allowed:
            continue
        reexecuted += 1
        causes = [(at, worker, cause(run, at, worker)) for at, worker in sorted(runs)]
        by_handoff += any(why == "handoff" for _, _, why in causes)
        by_expiry += any(why == "expiry" for _, _, why in causes)
        # the executions whose results were kept need no reason, at most ``allowed`` of
        # them, and not always the last: a revoked drain may execute after the new holder
        bare = [(at, worker) for at, worker, why in causes if why is None]
        for at, worker in bare[: max(len(bare) - allowed, 0)]:
            unexplained += 1
            ends = [said for b, e, said in dropped[(run, worker)] if b <= at <= e]
            verdict.problem(
                f"{task} attempt {attempt}: executed by {worker} at {at:.3f} and again, "
                "with no kill or restart to explain it (nor a child's hand-off)"
                + (f"; that drain ended {ends[0]}" if ends else "")
            )
    print(
        f"chaos: task attempts executed more than once: {reexecuted} (of them after a "
        f"child's hand-off revoked the drain: {by_handoff}, after a live worker's claim "
        f"expired: {by_expiry}; unexplained: {unexplained})"
    )


# -- the recovery bound -------------------------------------------------------------------------


def measure_recovery(args: argparse.Namespace, store: Store, directory: Path) -> int:
    rng = random.Random(args.seed)
    workers = Workers(store.url, directory, args.claim_ttl, args.poll, args.concurrency)
    bound = args.claim_ttl + args.poll
    samples: list[float] = []
    missed = 0
    with SyncDocket(store.url, nodes=chaos_app.NODES) as docket:
        driver = Driver(docket, chaos_app.save_graphs(docket), directory)
        try:
            survivors = [workers.spawn() for _ in range(max(1, args.workers - 1))]
            workers.wait_ready(survivors)
            for _ in range(args.measure_recovery):
                victim = workers.spawn(DOCKET_CHAOS_HOLD_AFTER=str(rng.randint(2, 8)))
                workers.wait_ready([victim])
                held: set[str] = set()
                deadline = time.monotonic() + 60
                while not held:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the victim never held a run")
                    driver.submit_until(driver.submitted + 4)
                    statuses = driver.statuses()
                    if statuses is not None:
                        driver.resolve_waiting(statuses)
                    time.sleep(0.1)
                    held = {line[1] for line in read_lines(directory, "hold") if line[3] == victim}
                # a random point of the victim's heartbeat cycle
                time.sleep(rng.uniform(0, args.claim_ttl / 3))
                held = {line[1] for line in read_lines(directory, "hold") if line[3] == victim}
                killed_at = workers.kill(victim)
                recovered: float | None = None
                until = time.monotonic() + 3 * bound + 10
                while recovered is None and time.monotonic() < until:
                    later = [
                        float(line[4])
                        for line in read_lines(directory, "commits")
                        if line[0] == "commit"
                        and line[1] in held
                        and line[3] != victim
                        and float(line[4]) > killed_at
                    ]
                    if later:
                        recovered = min(later) - killed_at
                    else:
                        time.sleep(0.02)
                if recovered is None:
                    missed += 1
                else:
                    samples.append(recovered)
                statuses = driver.statuses()
                if statuses is not None:
                    driver.resolve_waiting(statuses)
            workers.stop_all()
        finally:
            workers.kill_all()
    if not samples:
        print(f"recovery: backend={store.name} no recovery observed")
        return 1
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    print(
        f"recovery: backend={store.name} kills={len(samples)} missed={missed} "
        f"p50={p50:.2f}s p99={p99:.2f}s min={ordered[0]:.2f}s max={ordered[-1]:.2f}s "
        f"bound={bound:.2f}s (claim_ttl={args.claim_ttl}s + poll_interval={args.poll}s)"
    )
    return 1 if missed else 0


# -- the command line ---------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--backend", choices=("sqlite", "postgres", "redis"), default="sqlite")
    where.add_argument("--url", help="a store of your own (no --restart-db then)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=8, help="slots per worker")
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--kill-interval", type=float, default=1.5, help="seconds, on average")
    parser.add_argument("--min-kills", type=int, default=30)
    parser.add_argument("--restart-db", type=int, default=0, help="server restarts")
    parser.add_argument(
        "--db-down", type=float, default=1.0, help="seconds a restart keeps it down"
    )
    parser.add_argument("--claim-ttl", type=float, default=2.0)
    parser.add_argument("--poll", type=float, default=0.25, help="worker poll interval")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after (seconds)")
    parser.add_argument("--keep", action="store_true", help="keep the campaign directory")
    parser.add_argument(
        "--measure-recovery", type=int, default=0, metavar="M", help="measure M recoveries"
    )
    args = parser.parse_args(argv)
    if args.restart_db and (args.url or args.backend == "sqlite"):
        parser.error("--restart-db needs a PostgreSQL or Redis server started by this script")
    if args.runs < 1 or args.workers < 1 or args.concurrency < 1 or args.kill_interval <= 0:
        parser.error("--runs, --workers, --concurrency and --kill-interval must be positive")
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # the harness's own connections complain about every restart; the campaign counts them
    for name in ("docket_postgres", "docket_redis", "psycopg", "docket.runtime"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    directory = Path(tempfile.mkdtemp(prefix="docket-chaos-"))
    try:
        with open_store(args, directory) as store:
            print(f"chaos: seed={args.seed} directory={directory}", flush=True)
            if args.measure_recovery:
                return measure_recovery(args, store, directory)
            return campaign(args, store, directory)
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
