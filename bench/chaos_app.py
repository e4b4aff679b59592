"""The application and graph of the chaos campaign (``bench/chaos.py``).

Worker processes load it with ``docket worker --app bench.chaos_app:create``; the harness
imports it for the graph, the node registry and the expected output. Configured through
the environment the harness sets for each process:

* ``DOCKET_BACKEND`` — the backend URL;
* ``DOCKET_CHAOS_DIR`` — the campaign directory; every node execution appends one line
  ``exec <run> <task id> <attempt> <idempotency key> <worker> <pid> <unix time>`` to
  ``side-<worker>.log`` there, and every commit this process makes appends
  ``commit <run> <checkpoint seq> <worker> <unix time>`` to ``commits-<worker>.log``
  (``signal …`` for a commit without a claim: a child's hand-off to its parent), and
  every drain that ends with its claim taken from it (``claim_lost``, ``discarded``,
  ``fence_lost``) appends ``lost <run> <outcome> <worker> <began> <ended>`` (unix times
  of the drain) to ``lost-<worker>.log``, and every drain that dropped its work for
  another reason (``crashed``, ``invariant``, ``abandoned``: each a defect the campaign
  reports) appends ``dropped <run> <outcome> <worker> <began> <ended> <reason>`` to
  ``dropped-<worker>.log``, so the violation it causes can say why;
* ``DOCKET_CHAOS_WORKER`` — this process's name in those logs (``w0``, ``w1``, …);
* ``DOCKET_CHAOS_TTL`` / ``DOCKET_CHAOS_POLL`` — claim TTL and poll interval;
* ``DOCKET_CHAOS_SABOTAGE`` — comma-separated faults for the harness's own negative
  control: ``wrong_output`` (run ``chaos-00003`` ends with a result off by one),
  ``double_exec`` (node ``a`` of run ``chaos-00005`` logs two executions, as if it had been
  re-executed with no kill to explain it), ``map_twice`` (item 0 of run ``chaos-00006``'s
  map writes its result twice, as if it had landed twice), ``child_twice`` (the child of
  item 0 of run ``chaos-00006``'s child map returns its result twice, as if its hand-off
  had landed twice), ``orphan_child`` (the harness itself starts a run that names
  ``chaos-00002`` as its parent although no ``child_started`` event asked for it), and the
  harness's own ``message_lost``, ``message_twice``, ``tick_missed`` and ``tick_doubled``
  (:mod:`bench.chaos_time`), ``queue_unlimited`` (:mod:`bench.chaos_queues`) and
  ``admission_unlimited`` (:mod:`bench.chaos_admission`);
* ``DOCKET_CHAOS_HOLD_AFTER`` — when set to N, node executions after the N-th of this
  process hang (after logging a ``hold`` line), so the process keeps claims on runs in
  mid-flight, heartbeating them, until it is killed (the recovery measurement's victim).

The graph, for an input ``n``::

    $start -> a -> b -> {f1, f2, f3, m, k, mk} ==fan-in==> join -> review -> total -> $finish

``a``, ``b``: a chain; ``b`` also writes ``items``, a list of ``n % 4`` numbers (so some
runs map over an empty list). ``f1..f3``: a fan-out, each appending ``n * k`` to ``parts``.
``m``: a map over ``items``, each item appending ``2 * item`` to ``mapped``; item 1 fails
its first attempt (retryable) and succeeds after a backoff. The output's ``mapped`` must
hold each item's result once, in item order.
``k`` runs the child graph ``chaos_kid`` (one node ``c``: ``y = [3 * x + 1]``) on ``x = n``
and writes its ``y`` to ``kid``; ``mk`` is a map over ``items`` of that child node, one
child run per item, each appending its ``y`` to ``kids`` (item order). The child of item 1
fails its parent's first attempt (it reads the attempt from its own run id,
``<task>:<attempt>@<seq>``), so the parent retries that item after a backoff with a new
child. Children are ordinary runs the same workers drain; :func:`expected_children` is
what each parent must have started.
``join`` fails its first attempt (retryable) and succeeds on the second, after a backoff
timer. In every run with ``needs_fix(n)``, ``total`` fails permanently until the harness
"fixes" it (a file ``fixed-<run id>`` in the campaign directory) and retries the failed run
with ``retry_run``: the reopen is a committing transition like the others, and its run
executes ``total``'s attempt 1 twice, the second explained by the retry. ``review`` asks
for ``approval`` with an interrupt the harness answers with ``approval_for(n)``.
``t`` (:func:`time_kind`, by ``n % 6``) does nothing, sleeps 0.2 to 2 s (``Sleep``, whose
update appends the milliseconds to ``slept``), or waits for a message on topic ``chaos``
(``Receive`` into ``got``; half of them with a 30-minute time-out that must not fire) that
the harness sends before the run waits or once it waits; in one run in 50 it sleeps an
hour past the run's 60-second deadline, which must fail the run with
``deadline_exceeded`` (every other run gets a deadline an hour away). The graph
``chaos_tick`` (one quick node) is what the campaign's per-second schedule runs.
``total`` writes ``sum(parts) + approval + n``. The output is computed from the input alone
(:func:`expected_output`), so a lost or doubled write shows.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from pathlib import Path

from bench import chaos_admission, chaos_queues
from docket import (
    FINISH,
    START,
    CommitContext,
    Docket,
    Failure,
    GraphBuilder,
    Interrupt,
    NodeContext,
    NodeRegistry,
    NodeState,
    R,
    Receive,
    RetryPolicy,
    S,
    Sleep,
    SyncDocket,
    TelemetryEvent,
)
from docket.graph.children import ChildSpec
from docket.graph.maps import MapSpec
from docket.records import Checkpoint, GraphRef
from docket.values import JSONValue

NODES = NodeRegistry()
FAN_OUT = ("f1", "f2", "f3")
TRAIL = ["a", "b", *FAN_OUT, "join", "review", "t", "total"]
JOIN_BACKOFF_MS = 300
#: (node id, attempt) of every task one run executes; ``review`` runs twice (its interrupt,
#: then again once answered), at two different steps, so it is two tasks.
EXPECTED_TASKS: dict[tuple[str, int], int] = {
    ("a", 1): 1,
    ("b", 1): 1,
    **{(node, 1): 1 for node in FAN_OUT},
    ("join", 1): 1,
    ("join", 2): 1,
    ("review", 1): 2,
    ("t", 1): 1,
    ("total", 1): 1,
}
MAP_BACKOFF_MS = 100
KID_BACKOFF_MS = 100
#: the parent's child nodes (their tasks run no code of their own)
CHILD_NODES = ("k", "mk")
#: the child run's one node, as the side log names its tasks
KID_TASKS: dict[tuple[str, int], int] = {("c", 1): 1}


def map_items(n: int) -> list[int]:
    """The list ``m`` maps over in run ``n``: data-dependent, empty one run in four."""
    return [10 * n + k for k in range(n % 4)]


def expected_tasks(n: int) -> dict[tuple[str, int], int]:
    """:data:`EXPECTED_TASKS` plus the map's items (``m[i]``; item 1 twice, it fails once);
    a run whose deadline fires never gets to ``total`` (and may stop earlier)."""
    tasks = dict(EXPECTED_TASKS)
    if deadline_fires(n):
        del tasks[("total", 1)]
    for index in range(len(map_items(n))):
        tasks[(f"m[{index}]", 1)] = 1
        if index == 1:
            tasks[(f"m[{index}]", 2)] = 1
    return tasks


def expected_children(n: int) -> dict[tuple[str, int], int]:
    """(child node task, parent attempt) of every child run parent ``n`` starts: ``k``
    once, one per item of ``mk``, and item 1 twice (its first child fails)."""
    kids = {("k", 1): 1}
    for index in range(len(map_items(n))):
        kids[(f"mk[{index}]", 1)] = 1
        if index == 1:
            kids[(f"mk[{index}]", 2)] = 1
    return kids


#: what node ``t`` does in run ``n`` (by ``n % 6``): nothing, sleep, or wait for the message
#: the harness sends before the run waits (kept in its mailbox: ``early``) or once it waits
#: (delivered in the send: ``late``), with or without a time-out that must never fire
TIME_KINDS = ("none", "sleep", "early", "late", "early_timeout", "late_timeout")
MESSAGE_KINDS = frozenset({"early", "late", "early_timeout", "late_timeout"})
TOPIC = "chaos"
#: one run in 50 gets a deadline that must fire while ``t`` sleeps for an hour
DEADLINE_EVERY, DEADLINE_AT = 50, 21
#: (long enough for the run to reach ``t`` on a loaded machine in the middle of the kill phase)
SHORT_DEADLINE = timedelta(seconds=60)
#: every other run's deadline, and the waits' time-out: generous, never reached
LONG_DEADLINE = timedelta(hours=1)
MESSAGE_TIMEOUT = timedelta(minutes=30)


def deadline_fires(n: int) -> bool:
    return n % DEADLINE_EVERY == DEADLINE_AT


def time_kind(n: int) -> str:
    """What node ``t`` of run ``n`` does: one of :data:`TIME_KINDS`, or ``deadline``."""
    return "deadline" if deadline_fires(n) else TIME_KINDS[n % len(TIME_KINDS)]


def waits_for_message(n: int) -> bool:
    return time_kind(n) in MESSAGE_KINDS


def sleep_ms(n: int) -> int:
    """How long ``t`` sleeps in a ``sleep`` run: 0.2 to 2 s."""
    return 200 + 200 * (n % 10)


def message_for(n: int) -> list[JSONValue]:
    """The payload the harness sends run ``n`` (``t`` appends it to ``got``)."""
    return [1000 + n]


def kid_value(x: int) -> int:
    return 3 * x + 1


def kid_fails(task_suffix: str, attempt: int) -> bool:
    """Whether the child of ``task_suffix``'s ``attempt`` fails on purpose."""
    return task_suffix == "mk[1]" and attempt == 1


def child_fields(n: int) -> dict[str, JSONValue]:
    """The parent fields child runs write, as they must end up (each result once)."""
    kids: list[JSONValue] = [kid_value(item) for item in map_items(n)]
    return {"kid": [kid_value(n)], "kids": kids}


NODE_SECONDS = 0.02
#: seconds: a parent's first look at a child it waits for, and the longest gap between looks
CHILD_RECHECK, CHILD_RECHECK_CAP = 1.0, 2.0
#: one run in ten fails permanently in ``total`` until the harness fixes and retries it
RETRIED_EVERY, RETRIED_AT = 10, 7


def needs_fix(n: int) -> bool:
    return n % RETRIED_EVERY == RETRIED_AT


def fixed_marker(directory: Path, run_id: str) -> Path:
    return directory / f"fixed-{run_id}"


def executions_per_task(n: int, node_id: str) -> int:
    """How many executions one task of ``node_id`` may have with no kill to explain them."""
    return 2 if node_id == "total" and needs_fix(n) else 1


_executions = 0


def approval_for(n: int) -> int:
    return 7 * n + 1


def expected_output(n: int) -> dict[str, JSONValue]:
    parts = sum(n * k for k in range(1, len(FAN_OUT) + 1))
    mapped: list[JSONValue] = [2 * item for item in map_items(n)]
    return {
        "result": parts + approval_for(n) + n,
        "trail": list(TRAIL),
        "mapped": mapped,
        **child_fields(n),
        "slept": [sleep_ms(n)] if time_kind(n) == "sleep" else [],
        "got": message_for(n) if waits_for_message(n) else [],
    }


def _append(name: str, line: str) -> None:
    directory = os.environ.get("DOCKET_CHAOS_DIR")
    if not directory:
        return
    worker = os.environ.get("DOCKET_CHAOS_WORKER", "local")
    # one write(2) on an O_APPEND descriptor: a SIGKILL cannot leave half a line
    fd = os.open(
        Path(directory) / f"{name}-{worker}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
    )
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def _executed(ctx: NodeContext) -> None:
    """Log this execution to the side log, then hang if this process is a victim."""
    global _executions
    worker = os.environ.get("DOCKET_CHAOS_WORKER", "local")
    _append(
        "side",
        f"exec {ctx.run_id} {ctx.task_id} {ctx.attempt} {ctx.idempotency_key} {worker} "
        f"{os.getpid()} {time.time():.6f}",
    )
    _executions += 1
    if "double_exec" in sabotage() and ctx.node_id == "a" and ctx.run_id == "chaos-00005":
        _append(
            "side",
            f"exec {ctx.run_id} {ctx.task_id} {ctx.attempt} {ctx.idempotency_key} "
            f"{worker} {os.getpid()} {time.time():.6f}",
        )
    hold_after = os.environ.get("DOCKET_CHAOS_HOLD_AFTER")
    if hold_after is not None and _executions > int(hold_after):
        _append("hold", f"hold {ctx.run_id} {ctx.task_id} {worker} {time.time():.6f}")
        await asyncio.sleep(3600)
    # a little work, so that a kill often lands between an execution and its commit
    await asyncio.sleep(NODE_SECONDS)


def sabotage() -> set[str]:
    return set(os.environ.get("DOCKET_CHAOS_SABOTAGE", "").split(","))


def _n(state: NodeState) -> int:
    value = state["n"]
    assert isinstance(value, int)
    return value


@NODES.node("chaos_chain")
async def chain(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
    await _executed(ctx)
    return {"trail": [ctx.node_id]}


@NODES.node("chaos_split")
async def split(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
    await _executed(ctx)
    items: list[JSONValue] = list(map_items(_n(state)))
    return {"trail": [ctx.node_id], "items": items}


@NODES.node("chaos_item")
async def item(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue] | Failure:
    await _executed(ctx)
    if ctx.item_index == 1 and ctx.attempt == 1:
        return Failure("map item 1 fails its first attempt on purpose")
    value = state["item"]
    assert isinstance(value, int) and value == ctx.item
    if "map_twice" in sabotage() and ctx.run_id == "chaos-00006" and ctx.item_index == 0:
        return {"mapped": [2 * value, 2 * value]}
    return {"mapped": [2 * value]}


def parent_task_of(child_run_id: str) -> tuple[str, int]:
    """``(parent task id, parent attempt)`` from a child run id ``<task>:<attempt>@<seq>``."""
    task, rest = child_run_id.rsplit(":", 1)
    return task, int(rest.split("@", 1)[0])


@NODES.node("chaos_kid_work")
async def kid_work(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue] | Failure:
    await _executed(ctx)
    task, attempt = parent_task_of(ctx.run_id)
    if kid_fails(task.rsplit(":", 1)[1], attempt):
        return Failure("the child of map item 1 fails its parent's first attempt on purpose")
    x = state["x"]
    assert isinstance(x, int)
    if "child_twice" in sabotage() and task.startswith("chaos-00006:") and task.endswith(":mk[0]"):
        return {"y": [kid_value(x), kid_value(x)]}
    return {"y": [kid_value(x)]}


@NODES.node("chaos_part")
async def part(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
    await _executed(ctx)
    k = FAN_OUT.index(ctx.node_id) + 1
    return {"trail": [ctx.node_id], "parts": [_n(state) * k]}


@NODES.node("chaos_flaky")
async def flaky(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue] | Failure:
    await _executed(ctx)
    if ctx.attempt == 1:
        return Failure("the first attempt fails on purpose")
    return {"trail": [ctx.node_id]}


@NODES.node("chaos_review")
async def review(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue] | Interrupt:
    await _executed(ctx)
    if "approval" not in state:
        return Interrupt("approval", schema=S.integer(), id="approval")
    return {"trail": [ctx.node_id]}


@NODES.node("chaos_time")
async def wait(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue] | Sleep | Receive:
    """Sleep, or wait for the harness's message, as :func:`time_kind` says; the result is
    written later, without running this code again."""
    await _executed(ctx)
    n = _n(state)
    kind = time_kind(n)
    trail: dict[str, JSONValue] = {"trail": [ctx.node_id]}
    if kind == "deadline":
        return Sleep(for_=timedelta(hours=1), update=trail)
    if kind == "sleep":
        return Sleep(
            for_=timedelta(milliseconds=sleep_ms(n)), update={**trail, "slept": [sleep_ms(n)]}
        )
    if kind in MESSAGE_KINDS:
        timeout = MESSAGE_TIMEOUT if kind.endswith("_timeout") else None
        return Receive(TOPIC, into="got", update=trail, timeout=timeout)
    return trail


@NODES.node("chaos_total")
async def total(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue] | Failure:
    await _executed(ctx)
    directory = os.environ.get("DOCKET_CHAOS_DIR")
    fixed = not directory or fixed_marker(Path(directory), ctx.run_id).exists()
    if needs_fix(_n(state)) and not fixed:
        return Failure("total is broken for this run until the harness fixes it")
    parts = state["parts"]
    approval = state["approval"]
    assert isinstance(parts, list) and isinstance(approval, int)
    result = sum(int(str(p)) for p in parts) + approval + _n(state)
    if "wrong_output" in sabotage() and ctx.run_id == "chaos-00003":
        result += 1
    return {"trail": [ctx.node_id], "result": result}


def kid_graph() -> GraphBuilder:
    """The child graph ``k`` and ``mk`` run (no retry of its own: a failed child fails
    its parent's attempt, and the parent's retry policy starts a new child)."""
    return (
        GraphBuilder("chaos_kid")
        .input("x", S.integer(), required=True)
        .field("y", S.list(S.integer()))
        .node("c", "chaos_kid_work")
        .edge("to_c", START, "c")
        .edge("end", "c", FINISH)
        .output("y")
    )


def chaos_graph() -> GraphBuilder:
    builder = (
        GraphBuilder("chaos")
        .input("n", S.integer(), required=True)
        .field("trail", S.list(S.string()), reducer=R.append())
        .field("parts", S.list(S.integer()), reducer=R.append())
        .field("approval", S.integer())
        .field("result", S.integer())
        .field("items", S.list(S.integer()))
        .field("mapped", S.list(S.integer()), reducer=R.append())
        .field("kid", S.list(S.integer()))
        .field("kids", S.list(S.integer()), reducer=R.append())
        .field("slept", S.list(S.integer()), reducer=R.append())
        .field("got", S.list(S.integer()), reducer=R.append())
        .node("a", "chaos_chain")
        .node("b", "chaos_split")
        .node(
            "m",
            "chaos_item",
            map=MapSpec(over="items", item="item"),
            retry=RetryPolicy(max_attempts=2, backoff_ms=MAP_BACKOFF_MS),
        )
        .node("k", child=ChildSpec(graph="chaos_kid", input={"x": "n"}, output={"kid": "y"}))
        .node(
            "mk",
            child=ChildSpec(graph="chaos_kid", input={"x": "item"}, output={"kids": "y"}),
            map=MapSpec(over="items", item="item"),
            retry=RetryPolicy(max_attempts=2, backoff_ms=KID_BACKOFF_MS),
        )
        .node("join", "chaos_flaky", retry=RetryPolicy(max_attempts=3, backoff_ms=JOIN_BACKOFF_MS))
        .node("review", "chaos_review")
        .node("t", "chaos_time")
        .node("total", "chaos_total")
        .edge("to_a", START, "a")
        .edge("a_b", "a", "b")
    )
    for node in FAN_OUT:
        builder.node(node, "chaos_part").edge(f"b_{node}", "b", node)
    return (
        builder.edge("b_m", "b", "m")
        .edge("b_k", "b", "k")
        .edge("b_mk", "b", "mk")
        .fan_in("join_parts", [*FAN_OUT, "m", "k", "mk"], "join")
        .edge("join_review", "join", "review")
        .edge("review_t", "review", "t")
        .edge("t_total", "t", "total")
        .edge("end", "total", FINISH)
        .output("result")
        .output("trail")
        .output("mapped")
        .output("kid")
        .output("kids")
        .output("slept")
        .output("got")
    )


@NODES.node("chaos_tick")
async def tick(state: NodeState, ctx: NodeContext) -> dict[str, JSONValue]:
    # not in the side log: a schedule's runs are checked by their ticks (bench/chaos_time.py)
    return {"ticked": True}


def tick_graph() -> GraphBuilder:
    """The graph the campaign's per-second schedule runs: one quick node."""
    return (
        GraphBuilder("chaos_tick")
        .field("ticked", S.boolean())
        .node("tick", "chaos_tick")
        .edge("to_tick", START, "tick")
        .edge("end", "tick", FINISH)
        .output("ticked")
    )


chaos_queues.register(NODES, _append)  # the queued runs' node (bench/chaos_queues.py)
chaos_admission.register(NODES, _append)  # the admitted runs' nodes (bench/chaos_admission.py)
KID_GRAPH = kid_graph().build()
GRAPH = chaos_graph().build()
TICK_GRAPH = tick_graph().build()


def save_graphs(docket: SyncDocket) -> GraphRef:
    """Save the child graph, then the parent (whose save pins the child's version), and
    the schedule's graph."""
    docket.save_graph(KID_GRAPH)
    docket.save_graph(TICK_GRAPH)
    return docket.save_graph(GRAPH)


def record_commit(checkpoint: Checkpoint, context: CommitContext) -> None:
    if context.operation == "moment":
        worker = os.environ.get("DOCKET_CHAOS_WORKER", "local")
        _append(
            "commits", f"commit {checkpoint.run.id} {checkpoint.seq} {worker} {time.time():.6f}"
        )


def record_signal(event: TelemetryEvent) -> None:
    """A commit with no claim, which in a worker is a child's hand-off to its parent (it
    revokes any claim on the parent). Logged from telemetry, which runs inline after the
    commit: an observer runs in a task of its own, which a kill right after the commit
    may never run, and the re-execution the hand-off caused would look unexplained."""
    if event.metadata.get("operation") == "signal":
        worker = os.environ.get("DOCKET_CHAOS_WORKER", "local")
        run_id, seq = event.metadata.get("run_id"), event.metadata.get("checkpoint_seq")
        _append("commits", f"signal {run_id} {seq} {worker} {time.time():.6f}")


#: how a drain ends when its claim was taken from it (its work is dropped and done again)
LOST_CLAIM = frozenset({"claim_lost", "discarded", "fence_lost"})


#: how a drain ends when it dropped its work for a reason that is a defect (a store error
#: the runtime did not ride out, a bug): logged so the re-execution it causes says why
DROPPED_WORK = frozenset({"crashed", "invariant", "abandoned"})


def record_drain(event: TelemetryEvent) -> None:
    outcome = event.metadata.get("outcome")
    if event.phase != "stop" or (outcome not in LOST_CLAIM and outcome not in DROPPED_WORK):
        return
    worker = os.environ.get("DOCKET_CHAOS_WORKER", "local")
    run_id = event.metadata.get("run_id")
    ended = time.time()
    began = ended - float(event.measurements.get("duration", 0.0))
    if outcome in LOST_CLAIM:
        _append("lost", f"lost {run_id} {outcome} {worker} {began:.6f} {ended:.6f}")
    else:
        reason = " ".join(str(event.metadata.get("reason", "")).split())[:300] or "-"
        _append("dropped", f"dropped {run_id} {outcome} {worker} {began:.6f} {ended:.6f} {reason}")


def create() -> Docket:
    docket = Docket(
        os.environ["DOCKET_BACKEND"],
        nodes=NODES,
        observers=[record_commit],
        claim_ttl=float(os.environ.get("DOCKET_CHAOS_TTL", "2")),
        poll_interval=float(os.environ.get("DOCKET_CHAOS_POLL", "0.25")),
        shutdown_timeout=5.0,
        # a run whose workers keep being killed before they commit is not broken: the
        # campaign must not poison it (poisoning is tested elsewhere)
        max_claim_attempts=1000,
        # a hand-off lost to a kill (between a child's end and its parent's commit) is
        # recovered by the parent's recheck: keep that within the campaign
        child_recheck=CHILD_RECHECK,
        child_recheck_cap=CHILD_RECHECK_CAP,
    )
    docket.telemetry.attach(record_drain, names=["docket.run.drain.stop"])
    docket.telemetry.attach(record_signal, names=["docket.checkpoint.committed"])
    return docket
