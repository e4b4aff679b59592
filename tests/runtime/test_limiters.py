"""A node's ``limiter`` policy (docket/runtime/limiters.py): its attempts take slots of a
named queue's ledger, so the queue's execution limit and rate hold across every worker,
on every backend that declares ``Feature.QUEUES`` — and a limiter that cannot hold is
refused when the graph is saved or the run starts, never in the middle of a run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import pytest

from docket import Docket, RateLimit, errors
from docket.clock import ManualClock
from docket.contract.memory import MemoryBackend
from docket.contract.registry import from_url
from docket.core.outcomes import Failed
from docket.core.plan import Activation
from docket.graph.builder import GraphBuilder
from docket.graph.compiler import compile_graph, effective_document
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodeContext, NodeRegistry, NodeState, RetryPolicy
from docket.graph.schema import S
from docket.records import GraphRef, QueueConfig, RunStatus, Tenantless
from docket.runtime.execute import execute
from docket.runtime.limiters import MAX_BACKOFF, MIN_BACKOFF, ClaimLimits, backoff
from docket.runtime.queues import QueueView
from docket.telemetry import TelemetryEvent
from docket.values import JSONValue
from tests.fuzz.backends import backend_url
from tests.runtime.queue_app import QUEUE_KINDS, overlap, running, wait_for

NODES = NodeRegistry()

#: (what, "run/attempt", monotonic seconds) appended by the limited node.
Log = list[tuple[str, str, float]]


@NODES.node("limited")
async def _limited(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    log = ctx.application["log"]
    assert isinstance(log, list)
    key = f"{ctx.run_id}/{ctx.attempt}"
    log.append(("start", key, time.monotonic()))
    try:
        seconds = ctx.config.get("seconds", 0.0)
        assert isinstance(seconds, int | float)
        await asyncio.sleep(seconds)
        if ctx.config.get("fail"):
            raise RuntimeError("the model is down")
    finally:
        log.append(("end", key, time.monotonic()))
    return {"out": ctx.run_id}


def limited_graph(
    seconds: float,
    *,
    limiter: str | None = "llm",
    fail: bool = False,
    timeout_ms: int | None = None,
    graph_id: str = "calls",
) -> Graph:
    builder = GraphBuilder(graph_id).field("out", S.string())
    config: dict[str, JSONValue] = {"seconds": seconds, "fail": fail}
    builder.node(
        "call",
        "limited",
        config=config,
        limiter=limiter,
        timeout_ms=timeout_ms,
        retry=RetryPolicy(max_attempts=1),
    )
    return builder.edge("go", START, "call").edge("end", "call", FINISH).output("out").build()


def pairs(log: Log) -> list[tuple[str, str]]:
    return [(what, key) for what, key, _ in log]


def starts(log: Log) -> list[float]:
    return sorted(at for what, _, at in log if what == "start")


def on(url: str, log: Log, **settings: object) -> Docket:
    settings.setdefault("poll_interval", 0.05)
    settings.setdefault("queue_refresh", 0.1)
    return Docket(url, nodes=NODES, context={"log": log}, **settings)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def running_workers(first: Docket, second: Docket) -> AsyncIterator[None]:
    async with first.worker(concurrency=4, name="w1"), second.worker(concurrency=4, name="w2"):
        yield


# -- the limits hold across workers ---------------------------------------------------------


@pytest.mark.parametrize("kind", QUEUE_KINDS)
def test_an_execution_limit_of_two_holds_across_two_workers(kind: str) -> None:
    """Eight claims at once (two workers of four) but never more than two attempts of the
    limited node; the limit is reached, and every slot comes back."""

    async def scenario() -> None:
        log: Log = []
        url = backend_url(kind)
        async with on(url, log) as first, on(url, log) as other:
            second = first if kind == "memory" else other
            await first.configure_queue("llm", execution_limit=2)
            ref = await first.save_graph(limited_graph(0.15))
            ids = [(await first.start_run(ref)).id for _ in range(10)]
            async with running_workers(first, second):
                for run_id in ids:
                    done = await first.await_run(run_id, timeout=60)
                    assert done.status is RunStatus.DONE, done
            assert overlap(pairs(log)) == 2, log
            assert len(starts(log)) == 10
            assert await running(first, "llm") == 0

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_rate_caps_the_attempts_started_in_every_window(kind: str) -> None:
    """RateLimit(4, 1 s): a full bucket of 4, then 4 a second. Between any two starts
    there are never more than ``4 + elapsed * 4``, the elapsed time widened by the
    scheduling delay a loaded machine may put between a grant and the node's first line
    (an unlimited node would start all 12 within a fraction of a second)."""

    async def scenario() -> None:
        log: Log = []
        url = backend_url(kind)
        async with on(url, log) as first, on(url, log) as other:
            second = first if kind == "memory" else other
            await first.configure_queue("llm", rate=RateLimit(count=4, period=timedelta(seconds=1)))
            ref = await first.save_graph(limited_graph(0.0))
            ids = [(await first.start_run(ref)).id for _ in range(12)]
            began = time.monotonic()
            async with running_workers(first, second):
                for run_id in ids:
                    assert (await first.await_run(run_id, timeout=60)).status is RunStatus.DONE
            at = starts(log)
            assert len(at) == 12
            slack = 0.5  # seconds of delay between a grant and the attempt's first line
            for i, low in enumerate(at):
                for j in range(i, len(at)):
                    count = j - i + 1
                    assert count <= 4 + (at[j] - low + slack) * 4, (i, j, at)
            # 8 starts beyond the first bucket need 2 s of refill: the limit did bind
            assert at[-1] - began >= 1.8, at

    asyncio.run(scenario())


# -- slots come back ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_a_failed_or_timed_out_attempt_gives_its_slot_back(kind: str) -> None:
    """With one slot and a claim ttl of a minute, a slot kept by a failed attempt would
    hold every later attempt for that minute. The worker serves only ``default``: a
    worker serving ``llm`` would take its slot for a moment in each claim round, which
    would blur the count read here."""

    async def scenario() -> None:
        log: Log = []
        async with on(backend_url(kind), log, claim_ttl=60.0) as docket:
            await docket.configure_queue("llm", execution_limit=1)
            failing = await docket.save_graph(limited_graph(0.0, fail=True, graph_id="fails"))
            slow = await docket.save_graph(limited_graph(5.0, timeout_ms=100, graph_id="times_out"))
            fine = await docket.save_graph(limited_graph(0.0, graph_id="fine"))
            async with docket.worker(concurrency=2, queues={"default"}):
                for ref in (failing, slow):
                    run = await docket.start_run(ref)
                    done = await docket.await_run(run.id, timeout=30)
                    assert done.status is RunStatus.FAILED, done
                    assert await running(docket, "llm") == 0
                run = await docket.start_run(fine)
                done = await docket.await_run(run.id, timeout=20)
                assert done.status is RunStatus.DONE, done
            assert await running(docket, "llm") == 0

    asyncio.run(scenario())


def test_an_attempt_longer_than_the_claim_ttl_keeps_its_slot() -> None:
    """The heartbeat renews the limiter slot: unrenewed, it would expire after 0.6 s and
    the second run's attempt would start beside the first."""

    async def scenario() -> None:
        log: Log = []
        async with on(backend_url("sqlite"), log, claim_ttl=0.6) as docket:
            await docket.configure_queue("llm", execution_limit=1)
            ref = await docket.save_graph(limited_graph(1.5))
            ids = [(await docket.start_run(ref)).id for _ in range(2)]
            async with docket.worker(concurrency=2):
                for run_id in ids:
                    assert (await docket.await_run(run_id, timeout=30)).status is RunStatus.DONE
            assert overlap(pairs(log)) == 1, log
            assert await running(docket, "llm") == 0

    asyncio.run(scenario())


def test_a_waiting_attempt_is_reported_and_a_paused_limiter_holds_attempts_back() -> None:
    async def scenario() -> None:
        log: Log = []
        events: list[TelemetryEvent] = []
        async with on("memory://", log) as docket:
            docket.telemetry.attach(events.append, names=["docket.node.limited"])
            await docket.configure_queue("llm", paused=True)
            ref = await docket.save_graph(limited_graph(0.0))
            run = await docket.start_run(ref)
            with logged("docket.worker") as lines:
                async with docket.worker(concurrency=2):
                    await wait_for(
                        lambda: any("waits for a slot of limiter llm" in m for m in lines)
                    )
                    assert log == []  # claimed, but the attempt waits for the limiter
                    await docket.resume_queue("llm")
                    done = await docket.await_run(run.id, timeout=30)
                    assert done.status is RunStatus.DONE
            (event,) = events
            assert event.metadata["limiter"] == "llm"
            assert event.metadata["run_id"] == run.id
            assert event.measurements["duration"] > 0
            assert event.measurements["refusals"] >= 1

    asyncio.run(scenario())


@contextlib.contextmanager
def logged(name: str) -> Iterator[list[str]]:
    """The messages logged on ``name`` (INFO and up) while inside."""
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(name)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# -- refusals before anything runs ----------------------------------------------------------


async def stored_behind(docket: Docket, graph: Graph) -> GraphRef:
    """Store a graph without the facade's checks (as another tool could)."""
    result = compile_graph(graph, NODES)
    assert result.ok and result.effective is not None and result.graph_hash is not None
    ref = GraphRef(result.effective.id, result.graph_hash)
    await docket.backend.graphs.save_graph(Tenantless(), ref, effective_document(result.effective))
    return ref


def test_an_unknown_limiter_is_not_found_at_save_and_at_start() -> None:
    async def scenario() -> None:
        async with on(backend_url("sqlite"), []) as docket:
            with pytest.raises(errors.NotFound) as caught:
                await docket.save_graph(limited_graph(0.0, limiter="nope"))
            assert caught.value.details["what"] == "queue"
            assert caught.value.details["queue"] == "nope"
            ref = await stored_behind(docket, limited_graph(0.0, limiter="nope"))
            with pytest.raises(errors.NotFound) as caught:
                await docket.start_run(ref)
            assert caught.value.details["queue"] == "nope"
            assert (await docket.list_runs()).runs == ()
            await docket.configure_queue("nope")  # now it exists: both go through
            await docket.save_graph(limited_graph(0.0, limiter="nope"))
            await docket.start_run(ref)

    asyncio.run(scenario())


def test_a_backend_without_queues_refuses_a_limiter_at_save_and_at_start(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with on(f"lmdb:///{tmp_path / 'db'}", []) as docket:
            with pytest.raises(errors.Unsupported) as caught:
                await docket.save_graph(limited_graph(0.0))
            assert caught.value.details["feature"] == "queues"
            ref = await stored_behind(docket, limited_graph(0.0))
            with pytest.raises(errors.Unsupported):
                await docket.start_run(ref)
            assert (await docket.list_runs()).runs == ()
            # a graph without a limiter is untouched
            plain = await docket.save_graph(limited_graph(0.0, limiter=None))
            run = await docket.start_run(plain)
            async with docket.worker():
                assert (await docket.await_run(run.id, timeout=30)).status is RunStatus.DONE

    asyncio.run(scenario())


# -- the policy and the backoff -------------------------------------------------------------


BAD_NAMES: Final = ["", "a b", 3, True, "x" * 65]


@pytest.mark.parametrize("value", BAD_NAMES)
def test_a_bad_limiter_name_is_an_invalid_policy(value: JSONValue) -> None:
    graph = limited_graph(0.0, limiter=None).update_node("call", {"policies": {"limiter": value}})
    result = compile_graph(graph, NODES)
    assert not result.ok
    (problem,) = [d for d in result.diagnostics if d.code.value == "invalid_policy"]
    assert problem.pointer == "/nodes/call/policies/limiter"


def test_the_policy_reaches_the_runtime_graph() -> None:
    result = compile_graph(limited_graph(0.0), NODES)
    assert result.ok and result.runtime is not None
    assert result.runtime.nodes["call"].policies.limiter == "llm"
    assert result.runtime.limiters == frozenset({"llm"})
    plain = compile_graph(limited_graph(0.0, limiter=None), NODES).runtime
    assert plain is not None and plain.limiters == frozenset()


def test_the_backoff_follows_the_rate_and_stays_bounded() -> None:
    fast = QueueConfig(name="q", rate=RateLimit(count=20, period=timedelta(seconds=1)))
    slow = QueueConfig(name="q", rate=RateLimit(count=1, period=timedelta(minutes=1)))
    limited = QueueConfig(name="q", execution_limit=2)
    assert backoff(fast, 1) == pytest.approx(0.05)
    assert backoff(fast, 9) == pytest.approx(0.05)  # a rate says when: no doubling
    assert backoff(slow, 1) == MAX_BACKOFF
    assert backoff(limited, 1) < backoff(limited, 2) < backoff(limited, 3)
    assert backoff(limited, 50) == MAX_BACKOFF
    assert backoff(None, 1) >= MIN_BACKOFF
    huge = QueueConfig(name="q", rate=RateLimit(count=100_000, period=timedelta(seconds=1)))
    assert backoff(huge, 1) == MIN_BACKOFF
    assert backoff(fast, 1, jitter=1.5) == pytest.approx(0.075)


def test_a_child_node_cannot_name_a_limiter() -> None:
    graph = (
        GraphBuilder("parent")
        .field("out", S.string())
        .node("sub", child={"graph": "calls"}, policies={"limiter": "llm"})
        .edge("go", START, "sub")
        .edge("end", "sub", FINISH)
        .build()
    )
    result = compile_graph(graph, NODES)
    problems = [d for d in result.diagnostics if d.pointer == "/nodes/sub/policies/limiter"]
    assert [d.code.value for d in problems] == ["invalid_policy"], result.diagnostics


def one_attempt(config: dict[str, JSONValue]) -> Activation:
    """The first attempt of ``limited_graph``'s node, as a drain would plan it."""
    return Activation(
        run_id="r1",
        task_id="r1:0:call",
        node_id="call",
        step=0,
        attempt=1,
        idempotency_key="k",
        snapshot={},
        source_versions={},
        config=config,
        timeout_ms=1000,
        retry=RetryPolicy(),
    )


def test_a_limiter_met_on_a_backend_without_queues_fails_the_attempt_permanently(
    tmp_path: Path,
) -> None:
    """Refused at save and start, so only a graph stored behind the facade's back gets
    here: the attempt fails permanently (it never runs unlimited)."""

    async def scenario() -> None:
        log: Log = []
        backend = from_url(f"lmdb:///{tmp_path / 'db'}")
        await backend.open()
        try:
            rtg = compile_graph(limited_graph(0.0), NODES).runtime
            assert rtg is not None
            activation = one_attempt({"seconds": 0.0, "fail": False})
            limits = ClaimLimits(QueueView(backend, 1.0), timedelta(seconds=30))
            (outcome,) = await execute(rtg, [activation], application={"log": log}, limits=limits)
            assert isinstance(outcome, Failed) and not outcome.retryable
            assert outcome.reason.startswith("limiter_unavailable"), outcome.reason
            assert log == []
        finally:
            await backend.close()

    asyncio.run(scenario())


def test_renewal_takes_an_expired_slot_again_only_when_the_limiter_has_room() -> None:
    """A stall past the ttl lets the slot expire: renewing takes it again if it is free,
    and answers False (the heartbeat then hands the claim back) if another worker took
    it, so no attempt runs over the limit."""

    async def scenario() -> None:
        clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
        backend = MemoryBackend(clock=clock)
        await backend.open()
        store = backend.queues
        await store.set_queue(QueueConfig(name="llm", execution_limit=1))
        limits = ClaimLimits(QueueView(backend, 0.0), timedelta(seconds=30))
        activation = one_attempt({})
        holder = await limits.acquire("llm", activation)
        assert holder is not None and limits.held == {holder: "llm"}
        assert await limits.renew()
        clock.advance(timedelta(seconds=31))  # expired, and nobody took it: taken again
        assert await limits.renew()
        assert [s.running for s in await store.list_queues() if s.config.name == "llm"] == [1]
        clock.advance(timedelta(seconds=31))  # expired, and another worker takes it
        assert await store.acquire_slots("llm", ["elsewhere"], timedelta(seconds=30)) == 1
        assert not await limits.renew()
        await limits.release(holder)  # a slot no longer held: the other keeps its own
        assert limits.held == {}
        assert [s.running for s in await store.list_queues() if s.config.name == "llm"] == [1]
        await backend.close()

    asyncio.run(scenario())
