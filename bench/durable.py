"""Durable trials of docket and LangGraph: N runs of one shape at a fixed number in
flight, on one backend (DBOS's are in ``bench/dbos_peer.py``, a cell of all engines in
``bench/cells.py``).

- docket: ``inflight`` client tasks call ``Docket.start_run``; one in-process
  ``Docket.worker(concurrency=inflight)`` claims and executes the runs. A run is complete
  when its terminal commit is durable (seen by a commit observer; ``await_run`` is the
  fallback). Afterwards every run is read back from the database and checked
  (:func:`check_invariants`): terminal (``done``), unclaimed, not poisoned, events
  numbered 1..``event_seq`` without gaps, exactly the shape's checkpoints, and every one
  of the worker's commits seen by the observer. A trial that fails reports GATED.
- LangGraph: the same shape, ``ainvoke(..., durability="sync")`` from ``inflight`` tasks
  with a new thread per run; afterwards every thread's checkpoints and writes are read
  back through the saver (:func:`check_langgraph`).

Both report the storage the measured runs added (bytes and rows/keys per run), taken as
the difference of two :meth:`Place.footprint` readings around the measured runs. The
read-backs happen after the second reading, outside the measured window.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs

from bench.shapes import (
    CHILD_LAYERS,
    DOCKET_CHECKPOINTS,
    DOCKET_CHILD_CHECKPOINTS,
    LANGGRAPH_SEND_WRITES,
    LAYERS,
    NODES,
    SUPERSTEPS,
    docket_children,
    docket_graph,
    langgraph_app,
)
from bench.stores import Footprint, Place
from docket import Docket
from docket.records import PARENT_KEY, Event, EventType, RunStatus
from docket.runtime.lifecycle import CommitContext

RUN_TIMEOUT = 60.0


@attrs.frozen
class Result:
    backend: str
    engine: str
    shape: str
    inflight: int
    runs: int = 0
    seconds: float = 0.0
    latencies: tuple[float, ...] = ()
    transitions_per_run: float = 0.0  # durable commits per run (docket: checkpoint_seq)
    bytes_per_run: float = 0.0
    rows_per_run: float = 0.0
    gated: str | None = None
    unavailable: str | None = None

    @property
    def ok(self) -> bool:
        return self.runs > 0 and self.gated is None and self.unavailable is None

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.seconds if self.seconds else 0.0

    @property
    def steps_per_s(self) -> float:
        return self.runs_per_s * SUPERSTEPS.get(self.shape, 1)

    @property
    def transitions_per_s(self) -> float:
        return self.runs_per_s * self.transitions_per_run

    def percentile(self, q: int) -> float:
        ordered = sorted(self.latencies)
        if not ordered:
            return 0.0
        index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
        return ordered[index]

    def as_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        del out["latencies"]
        out.update(
            runs_per_s=self.runs_per_s,
            steps_per_s=self.steps_per_s,
            transitions_per_s=self.transitions_per_s,
            p50_ms=self.percentile(50) * 1000,
            p95_ms=self.percentile(95) * 1000,
            p99_ms=self.percentile(99) * 1000,
        )
        return out


async def drive(
    runs: int, inflight: int, one: Callable[[int], Awaitable[float]]
) -> tuple[float, tuple[float, ...]]:
    """Run ``one(i)`` for i < runs with at most ``inflight`` at a time; wall time and
    the per-run latencies ``one`` returned."""
    counter = itertools.count()
    latencies: list[float] = []

    async def client() -> None:
        while (i := next(counter)) < runs:
            latencies.append(await one(i))

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(inflight)))
    return time.perf_counter() - started, tuple(latencies)


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    """The measured window of a trial starts on a collected heap whose survivors are frozen
    (``gc.freeze``), for both engines alike, and ends unfrozen.

    The harness process holds both engines, matplotlib and every earlier trial's leftovers,
    so a full collection can pause it for tens of milliseconds: a large share of a trial
    lasting half a second, landing on one engine's trial or the other's by chance. Young
    collections still run, and are part of what an engine costs."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _per_run(before: Footprint, after: Footprint, runs: int) -> tuple[float, float]:
    return (after.bytes - before.bytes) / runs, (after.rows - before.rows) / runs


# -- docket ---------------------------------------------------------------------------------


async def docket_trial(
    place: Place,
    shape: str,
    runs: int,
    inflight: int,
    warmup: int,
    *,
    instrument: Callable[[Docket], None] | None = None,
    footprint: bool = True,
    tag: str = "",
) -> Result:
    cell = Result(place.backend, "docket", shape, inflight)
    waiters: dict[str, asyncio.Future[float]] = {}
    seen: dict[str, list[int]] = {}

    async def observe(checkpoint: Any, context: CommitContext) -> None:
        run = checkpoint.run
        seen.setdefault(run.id, []).append(checkpoint.seq)
        if run.status.terminal:
            fut = waiters.get(run.id)
            if fut is not None and not fut.done():
                fut.set_result(time.perf_counter())

    url = place.docket_url()
    async with Docket(url, nodes=NODES, observers=[observe], poll_interval=0.2) as docket:
        if instrument is not None:
            instrument(docket)
        for child in docket_children(shape):  # first: saving the parent pins them
            await docket.save_graph(child)
        ref = await docket.save_graph(docket_graph(shape))
        loop = asyncio.get_running_loop()
        ids: list[str] = []

        async def one(i: int, prefix: str = "r") -> float:
            run_id = f"{tag}{prefix}{i}"
            fut: asyncio.Future[float] = loop.create_future()
            waiters[run_id] = fut
            started = time.perf_counter()
            await docket.start_run(ref, {"value": 1}, run_id=run_id)
            try:
                done = await asyncio.wait_for(asyncio.shield(fut), RUN_TIMEOUT)
            except TimeoutError:  # observers are hints: fall back to reading the store
                await docket.await_run(run_id, timeout=RUN_TIMEOUT, poll_interval=0.01)
                done = time.perf_counter()
            ids.append(run_id)
            return done - started

        async with docket.worker(concurrency=inflight, name="bench"):
            await drive(warmup, inflight, lambda i: one(i, "w"))
            before = await place.footprint() if footprint else Footprint(0, 0)
            ids.clear()
            with settled_heap():
                seconds, latencies = await drive(runs, inflight, one)
        after = await place.footprint() if footprint else Footprint(0, 0)
        problem, transitions = await check_invariants(docket, ids, runs, shape, seen)
    if problem is not None:
        return attrs.evolve(cell, gated=problem)
    size, rows = _per_run(before, after, runs)
    return attrs.evolve(
        cell,
        runs=runs,
        seconds=seconds,
        latencies=latencies,
        transitions_per_run=transitions,
        bytes_per_run=size,
        rows_per_run=rows,
    )


async def check_invariants(
    docket: Docket, ids: list[str], runs: int, shape: str, seen: dict[str, list[int]] | None
) -> tuple[str | None, float]:
    """The first broken invariant (or None) and the mean checkpoints per run (a shape with
    a child graph: the parent's and its child's together).

    Every run must be ``done``, unclaimed, not poisoned, with events numbered 1..event_seq
    and exactly the shape's checkpoints (:data:`DOCKET_CHECKPOINTS`). ``seen`` holds the
    checkpoint numbers this process's commit observer saw per run: each run's worker
    commits (2..final; the start's checkpoint 1 may or may not pass an observer) must all
    have been seen, once each. ``None`` when the commits happened in other processes.

    ``child_run``: the parent's history must name exactly one child (``child_started``);
    that run must pass the same checks with the child graph's checkpoints, carry the
    parent's link, and have given the parent its output (``{"value": 1}`` in,
    ``{"result": 1}`` out)."""
    if len(set(ids)) != runs or runs == 0:
        return f"{len(set(ids))} of {runs} runs completed", 0.0
    checkpoints = 0
    for run_id in ids:
        problem, events = await _run_problem(docket, run_id, DOCKET_CHECKPOINTS[shape], seen)
        if problem is None and shape in CHILD_LAYERS:
            problem = await _child_problem(docket, run_id, events, shape, seen)
        if problem is not None:
            return problem, 0.0
        checkpoints += DOCKET_CHECKPOINTS[shape] + DOCKET_CHILD_CHECKPOINTS.get(shape, 0)
    return None, checkpoints / runs


async def _run_problem(
    docket: Docket, run_id: str, expected: int, seen: dict[str, list[int]] | None
) -> tuple[str | None, list[Event]]:
    """What is wrong with one finished run (or None), and its events."""
    info = await docket.inspect_run(run_id)
    run = info.run
    if run.status is not RunStatus.DONE:
        return f"run {run_id} is {run.status}", []
    if info.claimed_at is not None:
        return f"run {run_id} still claimed", []
    if info.poisoned_at is not None:
        return f"run {run_id} poisoned", []
    events = list(await docket.history(run_id))
    if not events or [event.seq for event in events] != list(range(1, run.event_seq + 1)):
        return f"run {run_id}: events not contiguous 1..{run.event_seq}", events
    if run.checkpoint_seq != expected:
        return f"run {run_id}: checkpoint_seq {run.checkpoint_seq}, expected {expected}", events
    if seen is not None:
        observed = sorted(seen.get(run_id, []))
        if not observed:
            return f"run {run_id}: no commit observed", events
        first = 1 if observed[0] == 1 else 2
        if observed != list(range(first, expected + 1)):
            return f"run {run_id}: observed checkpoints {observed}, expected ..{expected}", events
    return None, events


async def _child_problem(
    docket: Docket, run_id: str, events: list[Event], shape: str, seen: dict[str, list[int]] | None
) -> str | None:
    started = [e.payload.get("child_run_id") for e in events if e.type is EventType.CHILD_STARTED]
    if len(started) != 1 or not isinstance(started[0], str):
        return f"run {run_id}: children started {started}, expected one"
    child = started[0]
    problem, _ = await _run_problem(docket, child, DOCKET_CHILD_CHECKPOINTS[shape], seen)
    if problem is not None:
        return f"child of {run_id}: {problem}"
    parent, child_run = (
        (await docket.inspect_run(run_id)).run,
        (await docket.inspect_run(child)).run,
    )
    link = child_run.metadata.get(PARENT_KEY)
    if not isinstance(link, dict) or link.get("run_id") != run_id:
        return f"run {child}: parent link {link!r}, expected {run_id!r}"
    if child_run.output != {"value": 1} or parent.output != {"result": 1}:
        return f"run {run_id}: output {parent.output}, its child's {child_run.output}"
    return None


# -- LangGraph ------------------------------------------------------------------------------


async def langgraph_trial(
    place: Place, shape: str, runs: int, inflight: int, warmup: int
) -> Result:
    cell = Result(place.backend, "langgraph", shape, inflight)
    try:
        async with place.langgraph_saver(inflight)() as checkpointer:
            app = langgraph_app(shape, checkpointer)

            async def one(i: int, prefix: str = "t") -> float:
                config = {"configurable": {"thread_id": f"{prefix}{i}"}}
                started = time.perf_counter()
                await app.ainvoke({"value": 1}, config, durability="sync")
                return time.perf_counter() - started

            await drive(warmup, inflight, lambda i: one(i, "w"))
            before = await place.footprint()
            with settled_heap():
                seconds, latencies = await drive(runs, inflight, one)
            after = await place.footprint()
            problem = await check_langgraph(checkpointer, shape, runs)
    except Exception as exc:
        return attrs.evolve(cell, unavailable=f"{type(exc).__name__}: {exc}"[:160])
    if problem is not None:
        return attrs.evolve(cell, gated=problem)
    size, rows = _per_run(before, after, runs)
    return attrs.evolve(
        cell,
        runs=runs,
        seconds=seconds,
        latencies=latencies,
        transitions_per_run=float(langgraph_checkpoints(shape)),
        bytes_per_run=size,
        rows_per_run=rows,
    )


def langgraph_checkpoints(shape: str) -> int:
    """The checkpoints LangGraph's saver holds for one run: the input one and one per
    superstep, for the parent and (``child_run``) the subgraph alike."""
    child = CHILD_LAYERS.get(shape)
    return len(LAYERS[shape]) + 2 + (len(child) + 2 if child else 0)


async def check_langgraph(checkpointer: Any, shape: str, runs: int) -> str | None:
    """The first thread of the measured runs whose stored record is not a finished run of
    ``shape`` (or None), read back through the saver after the measured window.

    A thread must hold exactly one checkpoint per step, numbered -1 (the input) .. the
    number of layers, the last one holding the final value and no pending writes; every
    earlier checkpoint the writes of every task it scheduled (the input's one task, then
    each layer's nodes: a task that returns nothing still records ``__no_writes__``), and
    the input checkpoint its ``value`` and one branch per first-layer node.

    A shape with a child graph (``child_run``) holds, in the same thread, the parent's
    checkpoints in the namespace ``""`` and the subgraph's in exactly one namespace
    ``call:<task id>``, named by the parent task that ran it; each is checked as above."""
    child_layers = CHILD_LAYERS.get(shape)
    for i in range(runs):
        thread = f"t{i}"
        found = [t async for t in checkpointer.alist({"configurable": {"thread_id": thread}})]
        spaces: dict[str, list[Any]] = {}
        if child_layers is None:
            spaces[""] = found  # a stray namespace's checkpoints break the step numbers
        else:
            for tup in found:
                space = tup.config["configurable"].get("checkpoint_ns", "")
                spaces.setdefault(space, []).append(tup)
        parent = spaces.pop("", [])
        problem = _lg_record_problem(parent, LAYERS[shape], LANGGRAPH_SEND_WRITES.get(shape, 0))
        if problem is not None:
            return f"langgraph thread {thread}: {problem}"
        if child_layers is None:
            continue
        # The parent's one layer is the calling node: its task id names the child's space.
        caller = {w[0] for w in parent[1].pending_writes or []}
        expected = {f"call:{task}" for task in caller}
        if set(spaces) != expected:
            return f"langgraph thread {thread}: child namespaces {sorted(spaces)}, not {expected}"
        for space, record in spaces.items():
            problem = _lg_record_problem(record, child_layers, 0)
            if problem is not None:
                return f"langgraph thread {thread} child {space}: {problem}"
    return None


def _lg_record_problem(found: list[Any], layers: tuple[int, ...], sends: int) -> str | None:
    """What is wrong with one namespace's checkpoints of a run of ``layers`` (or None)."""
    tasks = (1, *layers)
    found.sort(key=lambda t: t.metadata.get("step", -2))
    steps = [t.metadata.get("step") for t in found]
    if steps != list(range(-1, len(layers) + 1)):
        return f"checkpoint steps {steps}"
    last = found[-1]
    if last.pending_writes or last.checkpoint["channel_values"].get("value") != 1:
        return "final checkpoint not finished"
    for tup, want in zip(found, tasks, strict=False):
        got = len({w[0] for w in tup.pending_writes or []})
        if got != want:
            return f"step {tup.metadata.get('step')} has writes of {got} tasks, not {want}"
    first = found[0].pending_writes or []
    if len(first) != 1 + layers[0] or sum(len(t.pending_writes or []) for t in found) != (
        1 + layers[0] + sum(layers) + sends
    ):
        return "unexpected writes"
    return None
