"""DBOS Transact (3.x) as a second peer in the durable section: the same shapes, async
no-op steps, the same servers, the same driver as docket and LangGraph.

How each shape maps (``async def`` workflows called directly, ``await workflow()``, under
``SetWorkflowID``: the workflow runs in the caller's task, as LangGraph's ``ainvoke``
does; DBOS records its start, every step's output and its outcome before returning):

- ``single_node``: a workflow awaiting one ``@DBOS.step`` no-op;
- ``chain_10``: a workflow awaiting ten steps one after another;
- ``fanout_8``: a workflow starting eight steps at once (``asyncio.gather``) and
  returning when all have finished (the join);
- ``map_32``: a workflow awaiting one step, then 32 at once, then one;
- ``child_run``: a workflow starting a child workflow (``DBOS.start_workflow_async`` from
  inside the workflow: DBOS records the start as the parent's step 1 and derives the
  child's id from the parent's) and awaiting its handle's result (recorded as step 2,
  ``DBOS.getResult``); the child awaits one step.

Stores: SQLite — a file of its own per trial through ``system_database_url``, once in
DBOS's default journal mode (``delete``, the rollback journal: DBOS sets only
``busy_timeout`` and ``foreign_keys``) and once after switching the fresh file to WAL
(engine ``dbos-wal``); ``synchronous`` is SQLite's default ``FULL`` in both. PostgreSQL
— a database of its own per trial on the benchmark's server (DBOS creates it and its
``dbos`` schema on launch). DBOS has no Redis backend: those cells say so.

DBOS is a process-wide singleton: each trial constructs it, launches it, runs, and
destroys it (outside the measured window). ``dbos`` is imported through importlib, so
this module and mypy work without it.
"""

from __future__ import annotations

import asyncio
import importlib
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs

from bench.durable import Result, _per_run, drive, settled_heap
from bench.shapes import CHILD_LAYERS, LAYERS, MAP_ITEMS
from bench.stores import Place

NO_REDIS = "DBOS has no Redis backend: it runs on SQLite and PostgreSQL only"
STEP = "bench_noop"
CHILD_FLOW = "bench_child_run_child"
GET_RESULT = "DBOS.getResult"  # the step DBOS records when a workflow awaits a handle

_FLOWS: dict[str, Any] = {}


def engines(kind: str) -> tuple[str, ...]:
    """The DBOS engines measured on a database kind."""
    return ("dbos", "dbos-wal") if kind == "sqlite" else ("dbos",)


def available() -> str | None:
    """Why DBOS cannot be measured (not installed), or None."""
    try:
        importlib.import_module("dbos")
    except ImportError as exc:
        return f"dbos not installed ({exc}); pip install -r bench/requirements.txt"
    return None


def _workflows() -> dict[str, Any]:
    """The shapes' workflows, registered once per process (before any launch)."""
    if _FLOWS:
        return _FLOWS
    dbos: Any = importlib.import_module("dbos").DBOS

    # Decorators applied by call: ``dbos`` is imported at run time (typed Any).
    async def _noop(i: int) -> None:
        return None

    noop: Any = dbos.step(name=STEP)(_noop)

    async def _single_node() -> int:
        await noop(0)
        return 1

    async def _chain_10() -> int:
        for i in range(10):
            await noop(i)
        return 1

    async def _fanout_8() -> int:
        await asyncio.gather(*(noop(i) for i in range(8)))
        return 1

    async def _map_32() -> int:
        await noop(0)  # the step that makes the list
        await asyncio.gather(*(noop(i) for i in range(1, MAP_ITEMS + 1)))
        await noop(MAP_ITEMS + 1)  # the join
        return 1

    single_node = dbos.workflow(name="bench_single_node")(_single_node)
    chain_10 = dbos.workflow(name="bench_chain_10")(_chain_10)
    fanout_8 = dbos.workflow(name="bench_fanout_8")(_fanout_8)
    map_32 = dbos.workflow(name="bench_map_32")(_map_32)
    child: Any = dbos.workflow(name=CHILD_FLOW)(_single_node)

    async def _child_run() -> int:
        handle = await dbos.start_workflow_async(child)
        result: int = await handle.get_result()
        return result

    child_run = dbos.workflow(name="bench_child_run")(_child_run)
    _FLOWS.update(
        single_node=single_node,
        chain_10=chain_10,
        fanout_8=fanout_8,
        map_32=map_32,
        child_run=child_run,
    )
    return _FLOWS


def writes_per_run(shape: str) -> int:
    """DBOS's durable writes for one run: each workflow's start and outcome, one per step
    (``child_run``: the parent's two recorded calls, and the child's start, step, outcome)."""
    if shape == "child_run":
        return 2 + 2 + 2 + sum(CHILD_LAYERS[shape])
    return sum(LAYERS[shape]) + 2


def _journal_mode(path: str, wal: bool) -> str:
    conn = sqlite3.connect(path)
    try:
        if wal:
            conn.execute("PRAGMA journal_mode=WAL")  # persistent: stays with the file
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


async def dbos_trial(
    place: Place, shape: str, runs: int, inflight: int, warmup: int, *, wal: bool = False
) -> Result:
    engine = "dbos-wal" if wal else "dbos"
    cell = Result(place.backend, engine, shape, inflight)
    if place.kind == "redis":
        return attrs.evolve(cell, unavailable=NO_REDIS)
    missing = available()
    if missing is not None:
        return attrs.evolve(cell, unavailable=missing)
    module: Any = importlib.import_module("dbos")
    workflow = _workflows()[shape]
    if place.kind == "sqlite":
        mode = await asyncio.to_thread(_journal_mode, str(place.sqlite_path), wal)
        if mode != ("wal" if wal else "delete"):
            return attrs.evolve(cell, unavailable=f"SQLite journal mode is {mode}")
    config = {"name": "docket-bench", "system_database_url": place.dbos_url()}
    module.DBOS(config={**config, "log_level": "WARNING"})
    try:
        module.DBOS.launch()

        async def one(i: int, prefix: str = "t") -> float:
            with module.SetWorkflowID(f"{prefix}{i}"):
                started = time.perf_counter()
                await workflow()
            return time.perf_counter() - started

        await drive(warmup, inflight, lambda i: one(i, "w"))
        before = await place.dbos_footprint()
        with settled_heap():
            seconds, latencies = await drive(runs, inflight, one)
        after = await place.dbos_footprint()
        problem = await check_dbos(module.DBOS, shape, runs)
    except Exception as exc:
        return attrs.evolve(cell, unavailable=f"{type(exc).__name__}: {exc}"[:160])
    finally:
        module.DBOS.destroy()
        # DBOS made its executor the loop's default (for ``asyncio.to_thread``) and has
        # just shut it down: give the loop a working one for the trials that follow.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())
    if problem is not None:
        return attrs.evolve(cell, gated=problem)
    size, rows = _per_run(before, after, runs)
    return attrs.evolve(
        cell,
        runs=runs,
        seconds=seconds,
        latencies=latencies,
        transitions_per_run=float(writes_per_run(shape)),
        bytes_per_run=size,
        rows_per_run=rows,
    )


async def check_dbos(dbos: Any, shape: str, runs: int) -> str | None:
    """The first measured workflow whose stored record is not a finished run of ``shape``:
    status ``SUCCESS`` with output 1, and exactly one recorded step per node, numbered
    1..nodes, each the no-op, without error. For ``child_run`` the parent's steps are the
    child's start and ``DBOS.getResult`` (both naming one child workflow id, the second
    with output 1), and that child must be the parent's, finished, with its own steps."""
    for i in range(runs):
        wid = f"t{i}"
        problem = await _workflow_problem(dbos, wid, 1)
        if problem is None and shape == "child_run":
            problem = await _child_run_problem(dbos, wid)
        elif problem is None:
            problem = await _steps_problem(dbos, wid, sum(LAYERS[shape]))
        if problem is not None:
            return f"dbos workflow {problem}"
    return None


async def _workflow_problem(dbos: Any, wid: str, result: int) -> str | None:
    status = await dbos.get_workflow_status_async(wid)
    if status is None or status.status != "SUCCESS":
        return f"{wid}: {None if status is None else status.status}"
    if await dbos.get_result_async(wid) != result:
        return f"{wid}: wrong result"
    return None


async def _steps_problem(dbos: Any, wid: str, nodes: int) -> str | None:
    steps = await dbos.list_workflow_steps_async(wid)
    ids = sorted(step["function_id"] for step in steps)
    if ids != list(range(1, nodes + 1)):
        return f"{wid}: steps {ids}, expected 1..{nodes}"
    for step in steps:
        if not str(step["function_name"]).endswith(STEP) or step["error"] is not None:
            return f"{wid}: step {step['function_id']} {step['function_name']}"
    return None


async def _child_run_problem(dbos: Any, wid: str) -> str | None:
    steps = sorted(await dbos.list_workflow_steps_async(wid), key=lambda s: s["function_id"])
    names = [(s["function_id"], str(s["function_name"])) for s in steps]
    if names != [(1, CHILD_FLOW), (2, GET_RESULT)] or any(s["error"] for s in steps):
        return f"{wid}: steps {names}, expected the child's start and its result"
    children = {s["child_workflow_id"] for s in steps}
    if len(children) != 1 or None in children or steps[1]["output"] != 1:
        return f"{wid}: child ids {sorted(map(str, children))}, result {steps[1]['output']}"
    child = str(children.pop())
    status = await dbos.get_workflow_status_async(child)
    if status is None or status.parent_workflow_id != wid:
        return f"{child}: not a child of {wid}"
    problem = await _workflow_problem(dbos, child, 1)
    return problem or await _steps_problem(dbos, child, sum(CHILD_LAYERS["child_run"]))
