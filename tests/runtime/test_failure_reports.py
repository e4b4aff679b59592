"""What a worker reports about failures (issue 18, item 3), with real workers on SQLite
files: every failed node attempt is logged (WARNING retried, ERROR permanent) with its
run, tenant, node, task and attempt; a run poisoned by repeated hand-backs (a deploy
renamed a node implementation) is logged, handed to ``on_poisoned`` and counted. And the
exception and details a failure keeps round-trip through every backend."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from docket import Docket
from docket.contract.proposals import PoisonedClaim
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import Failure, NodeContext, NodeRegistry, NodeState, RetryPolicy
from docket.graph.schema import S
from docket.records import EventType, RunStatus
from tests.fuzz.backends import KINDS, backend_url
from tests.runtime.test_worker import wait_for

OLD = NodeRegistry()


@OLD.node("charge_card")
def charge_card(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    raise ConnectionError(f"gateway down (attempt {ctx.attempt})")


# The next deploy renamed the implementation: its workers lack "charge_card".
NEW = NodeRegistry()


@NEW.node("charge_card_v2")
def charge_card_v2(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    return {"out": "charged"}


def charging(attempts: int) -> Graph:
    return (
        GraphBuilder("charge")
        .field("out", S.string())
        .node("charge", "charge_card", retry=RetryPolicy(max_attempts=attempts, backoff_ms=0))
        .edge("s", START, "charge")
        .edge("f", "charge", FINISH)
        .output("out")
        .build()
    )


def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def test_every_failed_attempt_is_logged_with_its_run_tenant_node_task_and_attempt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="docket.worker")

    async def scenario() -> str:
        async with Docket(
            url(tmp_path), nodes=OLD, poll_interval=0.05, tenant_mode="required"
        ) as docket:
            ref = await docket.save_graph(charging(2), tenant_id="acme")
            async with docket.worker():
                run = await docket.start_run(ref, tenant_id="acme", run_id="r1")
                done = await docket.await_run(run.id, tenant_id="acme", timeout=20)
            assert done.status is RunStatus.FAILED
            return run.id

    run_id = asyncio.run(scenario())
    task = f"{run_id}:0:charge"
    failed = [r for r in caplog.records if r.name == "docket.worker" and "failed" in r.getMessage()]
    assert [(r.levelno, getattr(r, "attempt", None)) for r in failed] == [
        (logging.WARNING, 1),
        (logging.ERROR, 2),
    ], [r.getMessage() for r in failed]
    for record in failed:
        # the fields come in through logging's ``extra``: attributes LogRecord does not declare
        fields = record.__dict__
        assert (fields["run_id"], fields["tenant_id"], fields["node_id"], fields["task_id"]) == (
            run_id,
            "acme",
            "charge",
            task,
        )
        message = record.getMessage()
        for needle in (run_id, "tenant acme", "node charge", f"task {task}"):
            assert needle in message, (needle, message)
    retried, permanent = (r.getMessage() for r in failed)
    assert "attempt 1)" in retried and "will be retried" in retried
    assert "gateway down (attempt 1)" in retried
    assert "attempt 2)" in permanent and "failed permanently" in permanent
    # the permanent one carries the traceback kept in the run
    assert "in charge_card" in permanent and "ConnectionError: gateway down" in permanent


def test_a_run_handed_back_until_poisoned_is_logged_reported_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="docket.worker")
    poisoned: list[PoisonedClaim] = []

    async def scenario() -> None:
        async with Docket(url(tmp_path), nodes=OLD, tenant_mode="required") as before:
            ref = await before.save_graph(charging(1), tenant_id="acme")
            await before.start_run(ref, tenant_id="acme", run_id="stuck")
        after = Docket(
            url(tmp_path),
            nodes=NEW,
            tenant_mode="required",
            poll_interval=0.05,
            abandon_backoff=0.01,
            max_claim_abandons=3,
            on_poisoned=poisoned.append,
        )
        async with after, after.worker() as worker:
            await wait_for(lambda: poisoned)
            # the fourth hand-back (past max_claim_abandons) poisoned it
            await wait_for(lambda: worker.stats.outcomes["abandoned"] == 4)
            info = await after.inspect_run("stuck", tenant_id="acme")
        assert info.poisoned and info.poison_reason == "max_claim_abandons_exceeded"
        assert [(p.run_id, p.poison_reason) for p in poisoned] == [
            ("stuck", "max_claim_abandons_exceeded")
        ]
        assert worker.stats.poisoned == 1
        assert worker.stats.poisoned_runs == poisoned

    asyncio.run(scenario())
    errors = [r for r in caplog.records if r.name == "docket.worker" and r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    message = errors[0].getMessage()
    assert "run stuck (tenant acme)" in message and "max_claim_abandons_exceeded" in message
    assert (errors[0].__dict__["run_id"], errors[0].__dict__["tenant_id"]) == ("stuck", "acme")


STORED = NodeRegistry()


@STORED.node("explode")
def explode(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    raise UnicodeError('naïve "quotes" \\ back\tslash — ünïcödé ✓\nsecond line')


@STORED.node("decline")
def decline(state: NodeState, ctx: NodeContext) -> Failure:
    return Failure("declined", retryable=False, details={"why": "ß ✓", "n": [1, 2.5, None]})


@pytest.mark.parametrize("kind", KINDS)
def test_what_went_wrong_is_stored_and_read_back_by_every_backend(kind: str) -> None:
    graph = (
        GraphBuilder("store_failures")
        .field("out", S.string())
        .node("explode", "explode")
        .node("decline", "decline")
        .edge("a", START, "explode")
        .edge("b", START, "decline")
        .edge("c", "explode", FINISH)
        .edge("d", "decline", FINISH)
        .build()
    )

    async def scenario() -> None:
        async with Docket(backend_url(kind), nodes=STORED) as docket:
            ref = await docket.save_graph(graph)
            await docket.start_run(ref, run_id="f1")
            await docket.drain_due()
            run = await docket.fetch_run("f1")
            history = await docket.history("f1")
        assert run.status is RunStatus.FAILED and run.failure is not None
        details = run.failure.details
        exceptions = details["exceptions"]
        assert isinstance(exceptions, dict) and set(exceptions) == {"explode"}
        error = exceptions["explode"]
        assert isinstance(error, dict)
        assert error["type"] == "UnicodeError"
        assert error["message"] == 'naïve "quotes" \\ back\tslash — ünïcödé ✓\nsecond line'
        assert str(error["traceback"]).rstrip().endswith("second line")
        assert details["details"] == {"decline": {"why": "ß ✓", "n": [1, 2.5, None]}}
        failed = {e.node_id: e.payload for e in history if e.type is EventType.NODE_FAILED}
        assert failed["explode"]["error"] == error
        assert failed["decline"]["details"] == {"why": "ß ✓", "n": [1, 2.5, None]}

    asyncio.run(scenario())
