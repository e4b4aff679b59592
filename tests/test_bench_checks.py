"""The benchmark's numbers are only reported for work that was really done: every run of
every engine is read back and checked, the raw ceiling's clients check their fence and
are read back too, and the PostgreSQL server behind the headline figures is durable."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

from bench import raw
from bench.ceiling import Ceiling
from bench.dbos_peer import NO_REDIS, check_dbos, dbos_trial
from bench.durable import Result, check_invariants, check_langgraph, docket_trial
from bench.raw import ONE_PER_TXN, RawError, RawRate
from bench.report import Report
from bench.shapes import NODES
from bench.stores import Env, Place, servers
from docket import Docket

# -- docket's gate ----------------------------------------------------------------------


def test_docket_gate_checks_every_runs_checkpoints_and_refuses_an_empty_observation(
    tmp_path: Path,
) -> None:
    place = Place("sqlite", Env(tmp_path), "gate")
    result = asyncio.run(docket_trial(place, "single_node", 3, 2, 0, footprint=False))
    assert result.ok, result.gated
    assert result.transitions_per_run == 3

    async def check(shape: str, seen: dict[str, list[int]] | None) -> str | None:
        async with Docket(place.docket_url(), nodes=NODES) as docket:
            problem, _ = await check_invariants(docket, ["r0", "r1", "r2"], 3, shape, seen)
        return problem

    every = {f"r{i}": [1, 2, 3] for i in range(3)}
    assert asyncio.run(check("single_node", every)) is None
    assert asyncio.run(check("single_node", {f"r{i}": [2, 3] for i in range(3)})) is None
    assert asyncio.run(check("single_node", None)) is None  # commits made elsewhere
    # Before: an empty observation passed, and the checkpoint count was never compared.
    assert "no commit observed" in str(asyncio.run(check("single_node", {})))
    assert "no commit observed" in str(asyncio.run(check("single_node", {"r0": [1, 2, 3]})))
    assert "expected 12" in str(asyncio.run(check("chain_10", None)))
    gap = {**every, "r1": [1, 3]}
    assert "observed checkpoints" in str(asyncio.run(check("single_node", gap)))
    twice = {**every, "r2": [1, 2, 3, 3]}
    assert "observed checkpoints" in str(asyncio.run(check("single_node", twice)))


def test_docket_gate_follows_each_parent_to_its_one_child_run(tmp_path: Path) -> None:
    place = Place("sqlite", Env(tmp_path), "child")
    result = asyncio.run(docket_trial(place, "child_run", 3, 2, 0, footprint=False))
    assert result.ok, result.gated
    assert result.transitions_per_run == 4 + 3  # the parent's checkpoints and its child's
    ids = ["r0", "r1", "r2"]

    async def check(shape: str, seen: dict[str, list[int]] | None) -> str | None:
        async with Docket(place.docket_url(), nodes=NODES) as docket:
            problem, _ = await check_invariants(docket, ids, 3, shape, seen)
        return problem

    async def child_of(run_id: str) -> str:
        async with Docket(place.docket_url(), nodes=NODES) as docket:
            events = await docket.history(run_id)
        (child,) = [e.payload["child_run_id"] for e in events if e.type == "child_started"]
        return str(child)

    children = {run: asyncio.run(child_of(run)) for run in ids}
    every = {run: [1, 2, 3, 4] for run in ids} | {child: [1, 2, 3] for child in children.values()}
    assert asyncio.run(check("child_run", every)) is None
    assert asyncio.run(check("child_run", None)) is None
    # The child's commits are checked like the parent's: one never observed fails the gate.
    unseen = {**every, children["r1"]: []}
    assert asyncio.run(check("child_run", unseen)) == (
        f"child of r1: run {children['r1']}: no commit observed"
    )
    assert "expected 3" in str(asyncio.run(check("single_node", None)))


# -- LangGraph's read-back --------------------------------------------------------------


def _tuple(step: int, writes: list[tuple[str, str, Any]], value: int = 1) -> Any:
    return SimpleNamespace(
        metadata={"step": step},
        pending_writes=writes,
        checkpoint={"channel_values": {"value": value}},
    )


def _fanout_thread() -> list[Any]:
    """What LangGraph's saver holds for one finished ``fanout_8`` run."""
    start = [("s", "value", 1)] + [("s", f"branch:to:n{i}", None) for i in range(8)]
    nodes = [(f"n{i}", "__no_writes__", None) for i in range(8)]
    return [_tuple(1, []), _tuple(0, nodes), _tuple(-1, start)]


class _Saver:
    def __init__(self, threads: dict[str, list[Any]]) -> None:
        self.threads = threads

    async def alist(self, config: dict[str, Any]) -> Any:
        for found in self.threads.get(config["configurable"]["thread_id"], []):
            yield found


def test_langgraph_check_reads_every_thread_not_only_the_first() -> None:
    good = {f"t{i}": _fanout_thread() for i in range(3)}
    assert asyncio.run(check_langgraph(_Saver(good), "fanout_8", 3)) is None
    # Before: only thread t0's history was read, and only its length used.
    assert "t2" in str(asyncio.run(check_langgraph(_Saver({**good, "t2": []}), "fanout_8", 3)))
    short = _fanout_thread()
    short[1] = _tuple(0, short[1].pending_writes[:7])
    problem = asyncio.run(check_langgraph(_Saver({**good, "t1": short}), "fanout_8", 3))
    assert "7 tasks" in str(problem)
    unfinished = _fanout_thread()
    unfinished[0] = _tuple(1, [("x", "value", 2)])
    problem = asyncio.run(check_langgraph(_Saver({**good, "t0": unfinished}), "fanout_8", 3))
    assert "not finished" in str(problem)
    assert asyncio.run(check_langgraph(_Saver(good), "chain_10", 3)) is not None


def _child_run_thread(task: str = "p1") -> list[Any]:
    """What LangGraph's saver holds for one finished ``child_run`` run (as a real
    ``AsyncSqliteSaver`` stored it): the parent's checkpoints in namespace "", the
    subgraph's in ``call:<the parent task that ran it>``."""

    def at(space: str, step: int, writes: list[tuple[str, str, Any]]) -> Any:
        found = _tuple(step, writes)
        found.config = {"configurable": {"checkpoint_ns": space}}
        return found

    child = f"call:{task}"
    return [
        at("", 1, []),
        at("", 0, [(task, "value", 1)]),
        at("", -1, [("p0", "value", 1), ("p0", "branch:to:call", None)]),
        at(child, 1, []),
        at(child, 0, [("c1", "__no_writes__", None)]),
        at(child, -1, [("c0", "value", 1), ("c0", "branch:to:n0", None)]),
    ]


def test_langgraph_check_reads_the_subgraphs_record_in_its_own_namespace() -> None:
    good = {f"t{i}": _child_run_thread() for i in range(2)}
    assert asyncio.run(check_langgraph(_Saver(good), "child_run", 2)) is None
    # The parent's record alone (the subgraph never checkpointed) is not a child run.
    parent_only = _child_run_thread()[:3]
    problem = asyncio.run(check_langgraph(_Saver({**good, "t1": parent_only}), "child_run", 2))
    assert "child namespaces []" in str(problem)
    # A subgraph's record under another task's namespace is not this run's child.
    stray = _child_run_thread()
    for found in stray[3:]:
        found.config = {"configurable": {"checkpoint_ns": "call:other"}}
    problem = asyncio.run(check_langgraph(_Saver({**good, "t0": stray}), "child_run", 2))
    assert "call:other" in str(problem)
    unfinished = _child_run_thread()
    unfinished[4].pending_writes = []
    problem = asyncio.run(check_langgraph(_Saver({**good, "t1": unfinished}), "child_run", 2))
    assert "t1 child call:p1: step 0 has writes of 0 tasks" in str(problem)
    # The same record is not a single_node run: the child's checkpoints break its steps.
    assert asyncio.run(check_langgraph(_Saver(good), "single_node", 2)) is not None


# -- DBOS -------------------------------------------------------------------------------


class _Dbos:
    def __init__(self, steps: int, status: str = "SUCCESS") -> None:
        self.steps, self.status = steps, status

    async def get_workflow_status_async(self, wid: str) -> Any:
        return SimpleNamespace(status=self.status)

    async def list_workflow_steps_async(self, wid: str) -> list[dict[str, Any]]:
        return [
            {"function_id": i, "function_name": "bench_noop", "error": None}
            for i in range(1, self.steps + 1)
        ]

    async def get_result_async(self, wid: str) -> int:
        return 1


def test_dbos_check_wants_one_step_per_node_and_success(tmp_path: Path) -> None:
    assert asyncio.run(check_dbos(_Dbos(10), "chain_10", 2)) is None
    assert "steps" in str(asyncio.run(check_dbos(_Dbos(9), "chain_10", 2)))
    assert "ERROR" in str(asyncio.run(check_dbos(_Dbos(8, "ERROR"), "fanout_8", 2)))
    place = Place("redis", Env(tmp_path), "x")
    result = asyncio.run(dbos_trial(place, "single_node", 2, 1, 0))
    assert result.unavailable == NO_REDIS


class _DbosChildRun:
    """DBOS's record of ``child_run`` workflows (as DBOS 3.4 stored them on SQLite): the
    parent's steps are the child's start and ``DBOS.getResult``; the child's one no-op."""

    def __init__(self, child_status: str = "SUCCESS", parent: str | None = None) -> None:
        self.child_status, self.parent = child_status, parent

    async def get_workflow_status_async(self, wid: str) -> Any:
        if wid.endswith("-1"):
            parent = self.parent or wid.removesuffix("-1")
            return SimpleNamespace(status=self.child_status, parent_workflow_id=parent)
        return SimpleNamespace(status="SUCCESS", parent_workflow_id=None)

    async def list_workflow_steps_async(self, wid: str) -> list[dict[str, Any]]:
        if wid.endswith("-1"):
            return [{"function_id": 1, "function_name": "bench_noop", "error": None}]
        child = f"{wid}-1"
        return [
            {"function_id": 2, "function_name": "DBOS.getResult", "error": None, "output": 1,
             "child_workflow_id": child},
            {"function_id": 1, "function_name": "bench_child_run_child", "error": None,
             "output": None, "child_workflow_id": child},
        ]  # fmt: skip

    async def get_result_async(self, wid: str) -> int:
        return 1


def test_dbos_check_follows_the_child_workflow_of_a_child_run() -> None:
    assert asyncio.run(check_dbos(_DbosChildRun(), "child_run", 2)) is None
    failed = asyncio.run(check_dbos(_DbosChildRun(child_status="ERROR"), "child_run", 2))
    assert "t0-1: ERROR" in str(failed)
    foreign = asyncio.run(check_dbos(_DbosChildRun(parent="elsewhere"), "child_run", 2))
    assert "not a child of t0" in str(foreign)
    # A plain workflow's steps are not a child run's, and the other way round.
    assert "expected the child's start" in str(asyncio.run(check_dbos(_Dbos(1), "child_run", 1)))
    assert "steps" in str(asyncio.run(check_dbos(_DbosChildRun(), "single_node", 1)))


# -- raw ceilings -----------------------------------------------------------------------


def test_raw_variants_batch_at_most_what_is_in_flight() -> None:
    for backend in ("sqlite", "postgres", "redis"):
        for n in (1, 8, 32):
            found = raw.variants(backend, n)
            assert found[0] == (ONE_PER_TXN, n, 1)
            assert all(c * k == n or (backend == "sqlite" and c == 1) for _, c, k in found)
            assert max(k for _, _, k in found) == n, (backend, n)


def test_sqlite_batched_raw_rate_counts_only_units_the_file_holds(tmp_path: Path) -> None:
    path = str(tmp_path / "raw.db")
    rate = raw.sqlite_single(path, 8, 8, 0.2)
    assert rate.units > 0 and rate.units % 8 == 0 and rate.batch == 8
    raw._sqlite_verify(path, rate.units)
    with pytest.raises(RawError, match="reported"):
        raw._sqlite_verify(path, rate.units + 1)
    threads = raw.sqlite_threads(path, 4, 0.2)
    assert threads.variant == ONE_PER_TXN and threads.units > 0


def test_pgbench_ceiling_runs_on_a_durable_server_and_enforces_the_fence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with servers(("postgres",)) as env:
        conninfo = env.postgres_conninfo()
        with psycopg.connect(conninfo) as conn:
            for name in ("fsync", "synchronous_commit", "full_page_writes"):
                row = conn.execute(f"SHOW {name}".encode()).fetchone()
                assert row is not None and row[0] == "on", name
        server = env.pg_server()
        rate = asyncio.run(raw.postgres_pgbench(server, conninfo, 2, 4, 1.0))
        assert rate.units > 0 and rate.units % 4 == 0
        assert rate.variant == "pgbench 2 conn x 4/stmt"

        setup = raw._pg_setup

        async def stale(conninfo: str, rows: int) -> None:
            await setup(conninfo, rows)
            async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as c:
                await c.execute(b"UPDATE ceiling.runs SET seq = 7 WHERE id = 1")

        monkeypatch.setattr(raw, "_pg_setup", stale)
        with pytest.raises(RawError, match="pgbench exited"):
            asyncio.run(raw.postgres_pgbench(server, conninfo, 2, 4, 1.0))


def test_pipelined_redis_ceiling_is_read_back() -> None:
    with servers(("redis",)) as env:
        rate = asyncio.run(raw.redis_pipelined(env.redis_url(), 2, 4, 0.3))
        assert rate.units > 0 and rate.units % 4 == 0 and rate.connections == 2
        with pytest.raises(RawError, match="reported"):
            asyncio.run(raw._redis_verify(env.redis_url(), 8, rate.units + 4))


# -- what is printed --------------------------------------------------------------------


def test_lines_name_every_peer_and_the_variant_that_set_each_ceiling(tmp_path: Path) -> None:
    def cell(engine: str, seconds: float) -> Result:
        return Result("sqlite", engine, "chain_10", 8, runs=100, seconds=seconds)

    no_dbos = Result("redis", "dbos", "chain_10", 8, unavailable=NO_REDIS)
    on_redis = Result("redis", "docket", "chain_10", 8, runs=100, seconds=1.0)
    report = Report(
        durable=[
            cell("docket", 1.0),
            cell("langgraph", 4.0),
            cell("dbos", 5.0),
            on_redis,
            no_dbos,
        ],
        ceilings=[
            Ceiling(
                "sqlite",
                8,
                (
                    RawRate(ONE_PER_TXN, 400, 1.0, 8, 1),
                    RawRate("sqlite 1 thread, 8/txn (savepoint each)", 2000, 1.0, 1, 8),
                ),
                docket_per_s=500.0,
            )
        ],
    )
    lines = list(report.lines())
    assert "ratio chain_10 sqlite 8 docket/langgraph=4.000" in lines
    assert "ratio chain_10 sqlite 8 docket/dbos=5.000" in lines
    assert f"ratio chain_10 redis 8 docket/dbos=n/a ({NO_REDIS})" in lines
    assert (
        "ceiling sqlite 8 docket/best_raw=0.250 "
        "(best raw 2000/s: sqlite 1 thread, 8/txn (savepoint each))"
    ) in lines
    assert "ceiling sqlite 8 docket/one_per_txn=1.250" in lines


def test_the_in_memory_section_knows_every_shape() -> None:
    # `compare.py --sections inmemory` runs every shape; one missing here crashed it
    from bench.inline import EXPECTED_CHECKPOINTS
    from bench.shapes import SHAPES

    assert set(EXPECTED_CHECKPOINTS) == set(SHAPES)
