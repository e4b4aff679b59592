"""What a failed attempt keeps (issue 18, item 2): the exception a node raised — type,
message, bounded traceback — and the details of a ``Failure`` it returned, in its
``node_failed`` event and in the run's failure; bounded, durable and deterministic."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from docket.core.captured import (
    CUT_MARK,
    FAILURE_TRACEBACK_BUDGET,
    MAX_DETAILS_BYTES,
    MAX_FAILURE_NODES,
    MAX_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    ErrorInfo,
    durable_details,
    error_info,
)
from docket.core.finish import AttemptFailure, superstep_failure
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import Failure, NodeContext, NodeRegistry, NodeState, RetryPolicy
from docket.graph.schema import S
from docket.records import EventType, Run, RunStatus, run_problems, run_to_json
from docket.testing import DEFAULT_START, InlineResult
from docket.values import JSONDict, canonical_json, is_durable
from tests.core.helpers import inline

NODES = NodeRegistry()


class Boom(Exception):
    """An application's own exception type."""


def _parse(text: str) -> int:
    return int(text)


@NODES.node("raises")
def raises(state: NodeState, ctx: NodeContext) -> dict[str, Any]:
    try:
        _parse("not a number")
    except ValueError as exc:
        raise Boom(f"could not parse on attempt {ctx.attempt}") from exc
    return {}


@NODES.node("raises_async")
async def raises_async(state: NodeState, ctx: NodeContext) -> dict[str, Any]:
    raise KeyError("missing")


@NODES.node("huge_message")
def huge_message(state: NodeState, ctx: NodeContext) -> dict[str, Any]:
    raise ValueError("m" * (2 << 20))  # past the contract's 1 MiB per event on its own


@NODES.node("long")
def long(state: NodeState, ctx: NodeContext) -> dict[str, Any]:
    def ping(n: int) -> None:
        if n == 0:
            raise RuntimeError("x" * (3 * MAX_TRACEBACK_CHARS))
        pong(n - 1)

    def pong(n: int) -> None:
        ping(n - 1)

    ping(200)  # 200 distinct frames (not folded as repeats) and a huge message
    return {}
    return {}


class Colour(enum.StrEnum):
    RED = "red"


@NODES.node("fails_with_details")
def fails_with_details(state: NodeState, ctx: NodeContext) -> Failure:
    return Failure(
        "card declined",
        retryable=ctx.config.get("retryable") is True,
        details={"code": "declined", "amount": 12.5, "attempt": ctx.attempt},
    )


@NODES.node("fails_with_odd_details")
def fails_with_odd_details(state: NodeState, ctx: NodeContext) -> Failure:
    odd: dict[Any, Any] = {
        "when": datetime(2026, 1, 2, tzinfo=UTC),
        "pair": (1, "two"),
        "colour": Colour.RED,
        3: "int key",
        "$reserved": True,
        "nan": float("nan"),
        "nested": {"set": {1}},
    }
    return Failure("odd", retryable=False, details=odd)


@NODES.node("fails_with_huge_details")
def fails_with_huge_details(state: NodeState, ctx: NodeContext) -> Failure:
    return Failure("huge", retryable=False, details={"blob": "y" * (2 * MAX_DETAILS_BYTES)})


def single(implementation: str, *, attempts: int = 1, **config: Any) -> Graph:
    builder = GraphBuilder(f"one_{implementation}").field("out", S.string())
    retry = RetryPolicy(max_attempts=attempts, backoff_ms=0)
    builder.node("n", implementation, config=config or None, retry=retry)
    return builder.edge("s", START, "n").edge("f", "n", FINISH).build()


def run_of(graph: Graph) -> InlineResult:
    result = inline(graph, nodes=NODES)
    assert result.run.status is RunStatus.FAILED, result.run.status
    assert run_problems(result.run) == []
    return result


def node_failed(result: InlineResult) -> list[JSONDict]:
    return [
        e.payload for c in result.checkpoints for e in c.events if e.type is EventType.NODE_FAILED
    ]


def failure_details(run: Run) -> JSONDict:
    assert run.failure is not None and run.failure.code == "node_failed"
    return run.failure.details


def test_a_raised_exception_keeps_its_type_message_and_traceback() -> None:
    result = run_of(single("raises", attempts=2))
    events = node_failed(result)
    assert [e["permanent"] for e in events] == [False, True]
    for attempt, payload in enumerate(events, start=1):
        assert payload["attempt"] == attempt
        assert payload["reason"] == f"exception: Boom: could not parse on attempt {attempt}"
        error = payload["error"]
        assert isinstance(error, dict)
        assert error["type"] == "tests.core.test_failure_capture.Boom"
        assert error["message"] == f"could not parse on attempt {attempt}"
        trace = error["traceback"]
        assert isinstance(trace, str)
        # the whole chain: the cause, the frame that raised, the exception line last
        assert "ValueError: invalid literal for int()" in trace
        assert "direct cause of the following exception" in trace
        assert "in _parse" in trace and "in raises" in trace
        assert trace.rstrip().endswith(f"Boom: could not parse on attempt {attempt}")
    details = failure_details(result.run)
    assert details["errors"] == {"n": "exception: Boom: could not parse on attempt 2"}
    assert details["exceptions"] == {"n": events[1]["error"]}
    assert "details" not in details
    run_failed = result.checkpoints[-1].events[-2]
    assert run_failed.type is EventType.RUN_FAILED
    assert run_failed.payload["exceptions"] == details["exceptions"]


def test_an_async_node_keeps_its_builtin_exception_type() -> None:
    details = failure_details(run_of(single("raises_async")).run)
    exceptions = details["exceptions"]
    assert isinstance(exceptions, dict) and isinstance(exceptions["n"], dict)
    assert exceptions["n"]["type"] == "KeyError"
    assert exceptions["n"]["message"] == "'missing'"
    assert "in raises_async" in str(exceptions["n"]["traceback"])


def test_long_messages_and_tracebacks_are_cut_to_their_documented_limits() -> None:
    (payload,) = node_failed(run_of(single("long")))
    error = payload["error"]
    assert isinstance(error, dict)
    message, trace = error["message"], error["traceback"]
    assert isinstance(message, str) and isinstance(trace, str)
    assert len(message) <= MAX_MESSAGE_CHARS and CUT_MARK in message
    assert message.startswith("xxxx")
    assert len(trace) <= MAX_TRACEBACK_CHARS
    assert trace.startswith(CUT_MARK)
    # the end is kept, in whole lines: the innermost frames, then the exception line, itself
    # cut so that it cannot push the frames out
    lines = trace.splitlines()
    assert lines[1].startswith("  ")
    assert lines[-1].startswith("RuntimeError: xxx") and CUT_MARK in lines[-1]
    assert "in ping" in trace and "in pong" in trace


def test_a_huge_message_still_fails_the_run_with_a_bounded_reason() -> None:
    result = run_of(single("huge_message"))  # committed: every record fits the limits
    (payload,) = node_failed(result)
    reason = payload["reason"]
    assert isinstance(reason, str) and reason.startswith("exception: ValueError: mmm")
    assert len(reason) <= len("exception: ") + MAX_MESSAGE_CHARS and CUT_MARK in reason
    assert failure_details(result.run)["errors"] == {"n": reason}


def test_a_failure_keeps_its_details_on_every_attempt_and_on_the_run() -> None:
    result = run_of(single("fails_with_details", attempts=2, retryable=True))
    events = node_failed(result)
    assert [e.get("details") for e in events] == [
        {"code": "declined", "amount": 12.5, "attempt": 1},
        {"code": "declined", "amount": 12.5, "attempt": 2},
    ]
    assert all("error" not in e for e in events)  # nothing was raised
    details = failure_details(result.run)
    assert details["details"] == {"n": {"code": "declined", "amount": 12.5, "attempt": 2}}
    assert "exceptions" not in details


def test_non_durable_details_are_coerced_or_described_not_fatal() -> None:
    result = run_of(single("fails_with_odd_details"))
    (payload,) = node_failed(result)
    kept = payload["details"]
    assert isinstance(kept, dict) and is_durable(kept)
    assert kept["pair"] == [1, "two"]
    assert kept["colour"] == "red"
    assert kept["when"] == repr(datetime(2026, 1, 2, tzinfo=UTC))
    assert kept["3"] == "int key"
    assert kept["'$reserved'"] is True
    assert kept["nan"] == "nan"
    assert kept["nested"] == {"set": "{1}"}
    assert failure_details(result.run)["details"] == {"n": kept}


def test_oversized_details_are_replaced_by_a_description() -> None:
    (payload,) = node_failed(run_of(single("fails_with_huge_details")))
    kept = payload["details"]
    assert isinstance(kept, dict) and set(kept) == {"cut", "preview"}
    assert f"exceed the {MAX_DETAILS_BYTES}-byte limit" in str(kept["cut"])
    assert len(canonical_json(kept)) <= MAX_DETAILS_BYTES


def test_failures_without_exception_or_details_keep_their_documents() -> None:
    # A plain Failure: the run failure keeps exactly the keys it always had.
    result = run_of(single("fails_with_details"))
    assert set(failure_details(result.run)) == {"nodes", "errors", "details"}
    plain = superstep_failure(
        result.checkpoints[0].run,
        (),
        [AttemptFailure(node_id="n", task_id="t", attempt=1, reason="error: no")],
        DEFAULT_START,
    )
    assert plain.run.failure is not None
    assert plain.run.failure.details == {"nodes": ["n"], "errors": {"n": "error: no"}}
    assert plain.events[0].payload == {"attempt": 1, "reason": "error: no", "permanent": True}


def test_the_run_failure_shares_a_bounded_budget_among_many_failed_nodes() -> None:
    trace = "line\n" * 4000
    error = ErrorInfo(type="ValueError", message="m", traceback=trace)
    failures = [
        AttemptFailure(
            node_id=f"n{i:03d}",
            task_id=f"t{i}",
            attempt=1,
            reason="exception: ValueError: m",
            error=error,
            details={"blob": "z" * 10_000},
        )
        for i in range(3 * MAX_FAILURE_NODES)
    ]
    run = run_of(single("raises")).checkpoints[0].run
    moment = superstep_failure(run, (), failures, DEFAULT_START)
    assert moment.run.failure is not None
    details = moment.run.failure.details
    exceptions, told = details["exceptions"], details["details"]
    assert isinstance(exceptions, dict) and isinstance(told, dict)
    assert sorted(exceptions) == [f"n{i:03d}" for i in range(MAX_FAILURE_NODES)]
    assert sorted(told) == sorted(exceptions)
    share = FAILURE_TRACEBACK_BUDGET // MAX_FAILURE_NODES
    for record in exceptions.values():
        assert isinstance(record, dict) and len(str(record["traceback"])) <= share
    assert len(canonical_json(moment.events[-2].payload)) < 512 * 1024  # run_failed
    # every node's own event keeps its full record
    assert all(e.payload["error"] == error.to_json() for e in moment.events[:-2])


def test_the_same_outcome_always_records_the_same_bytes() -> None:
    first = run_of(single("raises", attempts=2)).run
    second = run_of(single("raises", attempts=2)).run
    assert run_to_json(first) == run_to_json(second)


def test_capture_never_fails_on_hostile_exceptions_and_details() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    try:
        raise Unprintable
    except Unprintable as exc:
        info = error_info(exc)
    assert info.type.endswith("Unprintable") and "str() failed" in info.message
    assert durable_details({"bad": "\udcff"}) == {"bad": "\\udcff"}
    big = durable_details({"big": 1 << 4000})["big"]  # kept as its (cut) repr
    assert isinstance(big, str) and len(big) <= 200
