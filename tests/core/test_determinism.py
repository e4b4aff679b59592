"""Determinism: re-planning and whole runs reproduce byte for byte (runtime-spec §1.4, §4.12,
§12 case 36)."""

from __future__ import annotations

from datetime import timedelta
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from docket.core import Dispatch, HostLimits, advance
from docket.graph.compiler import RuntimeGraph
from docket.records import Run, RunStatus, event_to_json, run_from_json, run_to_json
from docket.testing import DEFAULT_START, resolve_interrupt_inline, run_inline
from docket.values import JSONDict, content_hash
from tests.core import fixtures as fx

NAMES = sorted(fx.FIXTURES)
LIMITS = HostLimits(max_supersteps=40)


@cache
def _rtg(name: str) -> RuntimeGraph:
    return fx.runtime(fx.FIXTURES[name][0]())


def _input(name: str, text: str, flag: bool) -> JSONDict:
    given = dict(fx.FIXTURES[name][1])
    if name == "minimal_linear":
        given["value"] = text
    elif name == "guarded_edge":
        given["user"] = {"premium_user": flag, "name": text}
    elif "topic" in given:
        given["topic"] = text
    return given


def _identities(rtg: RuntimeGraph, run: Run) -> list[tuple[str, str, int, str, str]] | None:
    now = DEFAULT_START + timedelta(days=1)  # past every backoff of the fixtures
    step = advance(rtg, run, now=now, limits=LIMITS)
    if not isinstance(step, Dispatch):
        return None
    for activation in step.activations:
        assert activation.input_hash == content_hash(activation.snapshot)
        assert activation.idempotency_key == f"{activation.task_id}:{activation.attempt}"
        assert activation.task_id == f"{run.id}:{run.step}:{activation.node_id}"
    return [
        (a.task_id, a.node_id, a.attempt, a.idempotency_key, a.input_hash) for a in step.activations
    ]


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    steps=st.integers(min_value=0, max_value=8),
    text=st.text(max_size=12),
    flag=st.booleans(),
)
def test_replanning_a_committed_run_gives_identical_activations(
    name: str, steps: int, text: str, flag: bool
) -> None:
    rtg = _rtg(name)
    result = run_inline(rtg, _input(name, text, flag), max_steps=steps, max_supersteps=40)
    # every committed run of the history, including retry parks mid-superstep
    for checkpoint in result.checkpoints:
        run = checkpoint.run
        first = _identities(rtg, run)
        assert first == _identities(rtg, run)
        assert first == _identities(rtg, run_from_json(run_to_json(run)))


def _whole_run(name: str, text: str, flag: bool) -> tuple[bytes, list[bytes]]:
    rtg = _rtg(name)
    result = run_inline(rtg, _input(name, text, flag), max_supersteps=40)
    events = [event_to_json(e) for e in result.events]
    answer = fx.FIXTURES[name][2]
    while answer is not None and result.run.status is RunStatus.WAITING:
        (open_id,) = [i for i, s in result.run.interrupts.items() if s.resolved_at is None]
        result = resolve_interrupt_inline(rtg, result.run, open_id, answer, max_supersteps=40)
        events += [event_to_json(e) for e in result.events]
    return run_to_json(result.run), events


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(NAMES), text=st.text(max_size=12), flag=st.booleans())
def test_running_a_graph_twice_is_byte_identical(name: str, text: str, flag: bool) -> None:
    assert _whole_run(name, text, flag) == _whole_run(name, text, flag)


def test_equal_snapshots_share_one_input_hash_per_superstep() -> None:
    rtg = _rtg("fanout")
    result = run_inline(rtg, {}, max_steps=1)
    step = advance(rtg, result.run, now=DEFAULT_START)
    assert isinstance(step, Dispatch)
    assert len(step.activations) == 2
    assert len({a.input_hash for a in step.activations}) == 1
