"""Telemetry from real runs: the worker on a SQLite file emits the lifecycle, claim,
node, store and domain events in order; cancel, resolve and poison report themselves;
a failing handler never disturbs a run; logs carry the run's context."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from pathlib import Path

import pytest

from docket import SyncDocket
from docket.contract.proposals import ClaimPolicy, PoisonedClaim
from docket.records import RunStatus
from docket.telemetry import LogContextFilter, Telemetry, TelemetryEvent
from tests.telemetry.helpers import (
    NODES,
    Recorder,
    asking,
    sqlite,
    subsequence,
    two_steps,
    wait_for,
)


def test_a_run_through_the_worker_emits_its_spans_in_order(tmp_path: Path) -> None:
    recorder = Recorder()

    async def scenario() -> str:
        async with sqlite(tmp_path, poll_interval=0.05) as docket:
            ref = await docket.save_graph(two_steps())
            docket.telemetry.attach(recorder)
            # Started before the worker, so its first claim takes the run.
            run = await docket.start_run(ref, {"prefix": ">"}, run_id="r1")
            async with docket.worker():
                done = await docket.await_run(run.id, timeout=30)
            assert done.status is RunStatus.DONE
            assert done.output == {"text": ">a!b!"}
            return str(done.checkpoint_seq)

    final_seq = int(asyncio.run(scenario()))
    names = recorder.names()
    expected = [
        "docket.run.start.start",
        "docket.store.initialize.start",
        "docket.store.initialize.stop",
        "docket.run.initialized",
        "docket.checkpoint.committed",
        "docket.run.start.stop",
        "docket.worker.claim.start",
        "docket.store.claim_due.start",
        "docket.store.claim_due.stop",
        "docket.worker.claim.stop",
        "docket.run.drain.start",
        "docket.run.step.start",
        "docket.node.execute.start",
        "docket.node.execute.stop",
        "docket.store.commit_claimed.start",
        "docket.store.commit_claimed.stop",
        "docket.node.completed",
        "docket.checkpoint.committed",
        "docket.run.step.stop",
        "docket.run.step.start",
        "docket.node.execute.start",
        "docket.node.execute.stop",
        "docket.store.commit_claimed.stop",
        "docket.run.completed",
        "docket.run.step.stop",
        "docket.run.drain.stop",
    ]
    assert subsequence(expected, names), names

    # Node attempts: one per node, in order, completed, with their context.
    nodes = recorder.named("docket.node.execute.stop")
    assert [(e.metadata["node_id"], e.metadata["outcome"]) for e in nodes] == [
        ("a", "completed"),
        ("b", "completed"),
    ]
    assert all(e.metadata["run_id"] == "r1" and e.metadata["attempt"] == 1 for e in nodes)
    assert all(0 <= e.measurements["duration"] < 60 for e in nodes)

    # One checkpoint event per checkpoint, the start's included; one completion.
    committed = recorder.named("docket.checkpoint.committed")
    assert [e.metadata["checkpoint_seq"] for e in committed] == list(range(1, final_seq + 1))
    assert committed[0].metadata["operation"] == "start"
    assert {e.metadata["operation"] for e in committed[1:]} == {"moment"}
    (completed,) = recorder.named("docket.run.completed")
    assert completed.metadata["run_id"] == "r1" and completed.metadata["status"] == "done"

    # Parent links: drain > step > (node attempt, commit); start > initialize.
    starts = {e.span_id: e for e in recorder.events if e.phase == "start"}
    (drain,) = [e for e in starts.values() if e.span == "docket.run.drain"]
    steps = [e for e in starts.values() if e.span == "docket.run.step"]
    assert steps and all(s.parent_id == drain.span_id for s in steps)
    step_ids = {s.span_id for s in steps}
    assert all(starts[n.span_id].parent_id in step_ids for n in nodes)
    commits = [e for e in starts.values() if e.metadata.get("operation") == "commit_claimed"]
    assert len(commits) == final_seq - 1
    assert all(c.parent_id in step_ids and c.metadata["run_id"] == "r1" for c in commits)
    (start,) = [e for e in starts.values() if e.span == "docket.run.start"]
    (init,) = [e for e in starts.values() if e.metadata.get("operation") == "initialize"]
    assert init.parent_id == start.span_id and init.metadata["run_id"] == "r1"

    (drained,) = recorder.named("docket.run.drain.stop")
    assert drained.metadata["outcome"] == "parked"
    assert drained.measurements["commits"] == final_seq - 1
    (started,) = recorder.named("docket.run.start.stop")
    assert started.metadata["run_id"] == "r1" and started.metadata["checkpoint_seq"] == 1


def test_interrupt_resolve_and_cancel_report_themselves(tmp_path: Path) -> None:
    recorder = Recorder()

    async def scenario() -> None:
        async with sqlite(tmp_path) as docket:
            ref = await docket.save_graph(asking())
            docket.telemetry.attach(recorder)
            for run_id in ("answered", "dropped"):
                await docket.start_run(ref, run_id=run_id)
            await docket.drain_due()
            waiting = await docket.fetch_run("answered")
            assert waiting.status is RunStatus.WAITING
            (interrupt_id,) = waiting.interrupts
            await docket.resolve_interrupt("answered", interrupt_id, "yes")
            cancelled = await docket.cancel_run("dropped")
            assert cancelled.status is RunStatus.CANCELLED
            await docket.drain_due()
            assert (await docket.fetch_run("answered")).status is RunStatus.DONE

    asyncio.run(scenario())
    requested = recorder.named("docket.interrupt.requested")
    assert sorted(e.metadata["run_id"] for e in requested) == ["answered", "dropped"]
    (resolved,) = recorder.named("docket.interrupt.resolved")
    assert resolved.metadata["run_id"] == "answered"
    assert resolved.metadata["operation"] == "signal"

    (cancelled,) = recorder.named("docket.run.cancelled")
    assert cancelled.metadata["run_id"] == "dropped"
    assert cancelled.metadata["status"] == "cancelled"
    assert cancelled.metadata["operation"] == "signal"
    cancel_names = [
        n
        for e, n in zip(recorder.events, recorder.names(skip_reads=False), strict=True)
        if e.metadata.get("run_id") == "dropped" and e.metadata.get("operation") != "moment"
    ]
    assert subsequence(
        [
            "docket.run.cancel.start",
            "docket.store.fetch_run.stop",
            "docket.store.commit_unclaimed.start",
            "docket.store.commit_unclaimed.stop",
            "docket.run.cancelled",
            "docket.checkpoint.committed",
            "docket.run.cancel.stop",
        ],
        cancel_names,
    ), cancel_names
    (stop,) = recorder.named("docket.run.cancel.stop")
    assert stop.metadata["status"] == "cancelled" and stop.metadata["run_id"] == "dropped"
    (resolve_stop,) = recorder.named("docket.run.resolve_interrupt.stop")
    assert resolve_stop.metadata["status"] == "running"
    assert [e.metadata["run_id"] for e in recorder.named("docket.run.completed")] == ["answered"]


def test_a_refused_lifecycle_call_ends_its_span_with_the_typed_error(tmp_path: Path) -> None:
    recorder = Recorder()

    async def scenario() -> None:
        async with sqlite(tmp_path) as docket:
            docket.telemetry.attach(recorder)
            with pytest.raises(Exception) as raised:
                await docket.cancel_run("missing")
            assert type(raised.value).__name__ == "NotFound"

    asyncio.run(scenario())
    (failed,) = recorder.named("docket.run.cancel.exception")
    assert failed.metadata["kind"] == "NotFound" and failed.metadata["run_id"] == "missing"
    (read,) = [e for e in recorder.events if e.metadata.get("operation") == "fetch_run"][-1:]
    assert read.metadata["result"] == "not_found"


def test_a_worker_reports_poisoned_runs_and_retry_is_a_span(tmp_path: Path) -> None:
    recorder = Recorder()
    poisoned: list[PoisonedClaim] = []

    async def scenario() -> None:
        async with sqlite(
            tmp_path,
            claim_ttl=0.2,
            poll_interval=0.05,
            max_claim_attempts=1,
            on_poisoned=poisoned.append,
        ) as docket:
            ref = await docket.save_graph(two_steps())
            await docket.start_run(ref, run_id="doomed")
            policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=0.2), max_claim_attempts=1)
            batch = await docket.backend.runs.claim_due(policy)  # a worker that then dies
            assert len(getattr(batch, "leases", ())) == 1
            docket.telemetry.attach(recorder)
            async with docket.worker():
                await wait_for(lambda: poisoned)
            await docket.retry_poisoned_run("doomed")

    asyncio.run(scenario())
    (event,) = recorder.named("docket.run.poisoned")
    assert event.metadata["run_id"] == "doomed"
    assert event.metadata["reason"] == "max_claim_attempts_exceeded"
    assert event.metadata["operation"] == "claim_due"
    claims = [e for e in recorder.named("docket.worker.claim.stop") if e.measurements["poisoned"]]
    assert len(claims) == 1 and claims[0].measurements["leases"] == 0
    assert claims[0].measurements["demand"] >= 1
    (retried,) = recorder.named("docket.run.retry_poisoned.stop")
    assert retried.metadata["run_id"] == "doomed"


def test_a_broken_handler_never_disturbs_a_run(tmp_path: Path) -> None:
    seen = Recorder()
    bus = Telemetry()

    def broken(event: TelemetryEvent) -> None:
        if event.name == "docket.node.execute.start":
            raise ValueError("handler bug")

    async def scenario() -> None:
        async with sqlite(tmp_path, telemetry=bus) as docket:
            assert docket.telemetry is bus
            bus.attach(broken, handler_id="broken")
            bus.attach(seen, handler_id="seen")
            ref = await docket.save_graph(two_steps())
            run = await docket.start_run(ref, {"prefix": ""})
            await docket.drain_due()
            assert (await docket.fetch_run(run.id)).output == {"text": "a!b!"}

    asyncio.run(scenario())
    assert [hid for hid, _ in bus.failures] == ["broken"]
    assert bus.handler_ids == ("seen",)
    assert len(seen.named("docket.node.execute.stop")) == 2


def test_logs_inside_a_run_carry_its_context(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.handler.addFilter(LogContextFilter())

    async def scenario() -> None:
        async with sqlite(tmp_path) as docket:
            ref = await docket.save_graph(two_steps())
            await docket.start_run(ref, run_id="logged")
            with caplog.at_level(logging.INFO, logger="tests.telemetry.user"):
                await docket.drain_due()

    asyncio.run(scenario())
    shouts = [r for r in caplog.records if r.name == "tests.telemetry.user"]
    assert [r.__dict__["node_id"] for r in shouts] == ["a", "b"]
    assert {r.__dict__["run_id"] for r in shouts} == {"logged"}
    assert all(r.__dict__["attempt"] == 1 and r.__dict__["task_id"] for r in shouts)


def test_the_blocking_twin_exposes_the_same_bus(tmp_path: Path) -> None:
    recorder = Recorder()
    with SyncDocket(f"sqlite:///{tmp_path / 'runs.db'}", nodes=NODES) as docket:
        docket.telemetry.attach(recorder)
        assert docket.telemetry is docket.docket.telemetry
        ref = docket.save_graph(two_steps())
        run = docket.start_run(ref, {"prefix": "-"})
        docket.drain_due()
        assert docket.fetch_run(run.id).output == {"text": "-a!b!"}
    assert [e.metadata["run_id"] for e in recorder.named("docket.run.completed")] == [run.id]
