"""The wording of every facade error: one sentence, no word doubled (issue 18, item 6).

Store answers get their message from ``from_contract`` and a subject that names the run
or graph ("run 'r1'"); the rest are written where they are raised and are triggered here
through the facade. ``str(exc)`` is what the command line prints after ``docket:``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import timedelta

import pytest

from docket import Docket, Failure, GraphBuilder, NodeRegistry, SyncDocket, errors
from docket.contract import errors as contract
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import ClaimPolicy
from docket.errors import ContractError
from docket.graph.model import FINISH, START
from docket.graph.nodes import NodeContext, NodeResult, NodeState
from tests.cli import cli_app
from tests.core import fixtures as fx
from tests.runtime.helpers import later, memory_docket

STORE_ANSWERS: list[tuple[ContractError, str]] = [
    (contract.NotFound("run"), "not_found: no such run 'r1'"),
    (contract.NotFound("event"), "not_found: no such event for run 'r1'"),
    (
        contract.InvalidTransition(("seq 3 is not next", "bad step")),
        "invalid_transition: the store refused the transition on run 'r1': seq 3 is not next; "
        "bad step",
    ),
    (contract.StaleCheckpoint(), "stale_checkpoint: run 'r1' moved on: fence lost"),
    (contract.Conflict("run 'r1' already exists"), "conflict: run 'r1' already exists"),
    (
        contract.Conflict("transition_id 't' was committed with different content"),
        "conflict: run 'r1': transition_id 't' was committed with different content",
    ),
    (contract.EventConflict(4), "event_conflict: event 4 of run 'r1' is stored with other content"),
    (
        contract.TooLarge("max_run_bytes", 2000, 1000),
        "too_large: run 'r1' exceeds max_run_bytes: 2000 > 1000",
    ),
    (
        contract.Retryable("connection refused"),
        "retryable: the store is unavailable on run 'r1': connection refused",
    ),
    (
        contract.Permanent("disk I/O error"),
        "permanent: the store failed on run 'r1': disk I/O error",
    ),
    (contract.InactiveRun(), "inactive_run: run 'r1' is finished and cannot change"),
    (
        contract.CorruptEventRow(2, "not JSON"),
        "corrupt_data: event 2 of run 'r1' is corrupt: not JSON",
    ),
]

GRAPH_ANSWERS: list[tuple[ContractError, str]] = [
    (contract.NotFound("graph"), "not_found: no such graph 'g'"),
    (contract.InvalidGraph(("too deep",)), "invalid_graph: the store refused graph 'g': too deep"),
    (
        contract.GraphContentConflict(),
        "graph_content_conflict: the stored bytes of graph 'g' differ from its document",
    ),
    (contract.CorruptGraph("not JSON"), "corrupt_data: the stored graph 'g' is corrupt: not JSON"),
]

DOUBLED = re.compile(r"\b(\w+) \1\b")


@pytest.mark.parametrize(("answer", "expected"), STORE_ANSWERS)
def test_store_answers_about_a_run_read_as_sentences(answer: ContractError, expected: str) -> None:
    error = errors.from_contract(answer, subject="run 'r1'")
    assert str(error) == expected
    assert not DOUBLED.search(error.message)


@pytest.mark.parametrize(("answer", "expected"), GRAPH_ANSWERS)
def test_store_answers_about_a_graph_read_as_sentences(
    answer: ContractError, expected: str
) -> None:
    error = errors.from_contract(answer, subject="graph 'g'")
    assert str(error) == expected


def test_store_answers_without_a_subject() -> None:
    assert str(errors.from_contract(contract.NotFound("run"))) == "not_found: no such run"
    assert str(errors.from_contract(contract.InactiveRun())) == (
        "inactive_run: the run is finished and cannot change"
    )
    assert str(errors.from_contract(contract.CorruptGraph("x"))) == (
        "corrupt_data: the stored graph is corrupt: x"
    )


def _raised(action: Callable[[], object]) -> errors.DocketError:
    with pytest.raises(errors.DocketError) as caught:
        action()
    return caught.value


def test_errors_raised_through_the_facade_read_as_sentences() -> None:
    said: dict[str, str] = {}

    def note(action: Callable[[], object]) -> None:
        error = _raised(action)
        said[type(error).__name__ + ":" + error.message] = str(error)

    slow = (
        GraphBuilder("slow")
        .node("ask", "approval.ask", timeout_ms=7_200_000)
        .edge("go", START, "ask")
        .edge("end", "ask", FINISH)
        .build()
    )
    with SyncDocket("memory://", nodes=cli_app.NODES) as docket:
        docket.save_graph(cli_app.GRAPH)
        docket.save_graph(slow)
        docket.start_run("approval", run_id="r1")
        note(lambda: docket.start_run("approval", run_id="r1"))
        note(lambda: docket.start_run("approval", {"nope": 1}))
        note(lambda: docket.start_run("ghost"))
        note(lambda: docket.start_run("slow"))
        note(lambda: docket.fetch_run("ghost"))
        note(lambda: docket.list_events("ghost"))
        docket.drain_due()
        note(lambda: docket.resolve_interrupt("r1", "decision", 42))
        note(lambda: docket.resolve_interrupt("r1", "nope", "approved"))
        docket.resolve_interrupt("r1", "decision", "approved")
        note(lambda: docket.resolve_interrupt("r1", "decision", "approved"))
        docket.drain_due()
        note(lambda: docket.resolve_interrupt("r1", "decision", "approved"))
        note(lambda: docket.cancel_run("r1"))
        note(lambda: docket.retry_poisoned_run("r1"))
        note(lambda: docket.fetch_run("r1", tenant_id="acme"))
        note(lambda: docket.list_runs(limit=0))
        docket.start_run("approval", run_id="r2")
        note(lambda: docket.await_run("r2", timeout=0.01))
        note(lambda: docket.retry_run("r2"))
        note(lambda: docket.retry_run("ghost"))
        note(lambda: docket.save_graph(cli_app.GRAPH.put_edge("x", "ask", "nowhere")))
    note(lambda: Docket("memory://", claim_ttl=-1))
    unknown = _raised(lambda: Docket("nope://x"))  # names the installed backends, too
    assert str(unknown).startswith("invalid_backend: no installed docket backend serves nope://")
    note(lambda: SyncDocket("memory://").fetch_run("x"))
    note(_poisoned)
    assert sorted(said.values()) == sorted(
        [
            "conflict: run 'r1' already exists",
            "invalid_input: the run input is invalid",
            "not_found: no such graph 'ghost'",
            "incompatible_execution_policy: node 'ask' declares a 7200000 ms timeout, above "
            "the host maximum of 3600000 ms",
            "not_found: no such run 'ghost'",
            "invalid_input: the resolution value is invalid",
            "not_found: run 'r1' has no interrupt 'nope'",
            "already_resolved: interrupt 'decision' is already resolved",
            "inactive_run: run 'r1' is done and cannot be resumed",
            "inactive_run: run 'r1' is done and cannot be cancelled",
            "inactive_run: run 'r1' is finished and cannot change",
            "invalid_tenant: this Docket is tenantless (tenant_mode='none'): do not pass tenant_id",
            "invalid_options: limit must be an integer from 1 to 1000, got 0",
            "timeout: run 'r2' is still running after 0.01 s",
            "not_retryable: run 'r2' is running and not poisoned: there is nothing to retry "
            "(was it retried already?)",
            "invalid_graph: graph 'approval' does not compile: error unknown_edge_target "
            "/edges/x/to: edge 'x' leads to unknown node 'nowhere'",
            "invalid_settings: invalid docket settings: claim_ttl must be a positive number of "
            "seconds, got -1",
            "runtime_unavailable: the SyncDocket is not open: use 'with SyncDocket(...)'",
            "poisoned: run 'r' is poisoned (max_claim_attempts_exceeded)",
        ]
    ), "\n".join(sorted(said.values()))
    for text in [*said.values(), str(unknown)]:
        assert not DOUBLED.search(text), text


def _poisoned() -> None:
    async def scenario() -> None:
        docket, backend, clock = memory_docket(max_claim_attempts=1, claim_ttl=5)
        async with docket:
            ref = await docket.save_graph(fx.minimal_linear())
            await docket.start_run(ref, {"value": "v"}, run_id="r")
            policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=5), max_claim_attempts=1)
            await backend.runs.claim_due(policy)  # a worker that dies
            later(clock, 6)
            await docket.drain_due()
            await docket.await_run("r", timeout=5)

    asyncio.run(scenario())


def test_every_error_type_is_worded_here() -> None:
    """The tables above and the facade test cover every exported error type but the few
    that only a corrupt or hand-made runtime graph can raise."""
    # the compiler rejects every guard, policy and run shape these need ahead of time; a
    # stored document whose hash does not match is corruption. DocketError is the base.
    only_from_corrupt_graphs = {"GraphMismatch", "GuardEvaluationFailed", "InvalidPolicy"}
    only_from_corrupt_graphs |= {"InvalidRun", "DocketError"}
    exported = {
        name
        for name in errors.__all__
        if isinstance(getattr(errors, name), type)
        and issubclass(getattr(errors, name), errors.DocketError)
    }
    contract_types = {
        type(errors.from_contract(a, subject="x")).__name__
        for a, _ in STORE_ANSWERS + GRAPH_ANSWERS
    }
    facade_types = {
        "Conflict", "InvalidInput", "NotFound", "IncompatibleExecutionPolicy", "AlreadyResolved",
        "InactiveRun", "InvalidTenant", "InvalidOptions", "AwaitTimeout", "InvalidGraph",
        "InvalidSettings", "InvalidBackend", "RuntimeUnavailable", "RunPoisoned",
        "NotRetryable", "Unsupported",
        "InvalidSchedule",  # worded in tests/schedules/test_schedules_facade.py
    }  # fmt: skip
    missing = exported - contract_types - facade_types - only_from_corrupt_graphs
    assert missing == set()


def test_a_retry_the_backend_cannot_store_reads_as_a_sentence() -> None:
    class OldStore(MemoryBackend):
        def capabilities(self) -> Capabilities:
            caps = super().capabilities()
            features = caps.features - {Feature.REOPEN_FAILED}
            return Capabilities(limits=caps.limits, features=features, name="old-store")

    failing = (
        GraphBuilder("failing")
        .node("boom", "boom")
        .edge("go", START, "boom")
        .edge("end", "boom", FINISH)
        .build()
    )
    nodes = NodeRegistry()

    @nodes.node("boom")
    def boom(state: NodeState, ctx: NodeContext) -> NodeResult:
        return Failure("broken", retryable=False)

    with SyncDocket(OldStore(), nodes=nodes) as docket:
        docket.save_graph(failing)
        docket.start_run("failing", run_id="f")
        docket.drain_due()
        error = _raised(lambda: docket.retry_run("f"))
    assert str(error) == (
        "unsupported: run 'f' failed, and this backend (old-store) does not declare the "
        "reopen_failed feature a retry of a failed run needs"
    )
    assert not DOUBLED.search(str(error))
