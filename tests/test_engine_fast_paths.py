"""The engine's per-transition shortcuts give what the general computations give.

``RuntimeGraph`` derives ``input_ids``, the field rules, the snapshot channels and the
node order once per graph; ``format_timestamp`` remembers the last datetimes it
formatted; ``propose`` copies the run without ``attrs.evolve``. Each is held here to the
general definition spelled out.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
import pytest

from docket.core import moment as moment_module
from docket.core.plan import candidates_of
from docket.core.state import committed_fields, snapshot, source_versions
from docket.graph.compiler import ChannelKind, RuntimeGraph
from docket.graph.reducers import FieldRule
from docket.records import ChannelState, Run, RunStatus, format_timestamp
from tests.core import fixtures as fx

GRAPHS = [
    fx.minimal_linear,
    fx.simple_edge,
    fx.fanout,
    fx.multi_source_edge,
    fx.sticky_barrier,
    fx.guarded_edge,
    fx.interrupt_review,
]


def _general_field_rules(rtg: RuntimeGraph) -> dict[str, FieldRule]:
    return {
        c.public_id: FieldRule(schema=c.schema, reducer=c.reducer, default=c.default)
        for c in rtg.channels.values()
        if c.kind is ChannelKind.STATE
    }


def _general_snapshot(rtg: RuntimeGraph, channels: Mapping[str, ChannelState]) -> dict[str, object]:
    out: dict[str, object] = {}
    for channel_id, channel in rtg.channels.items():
        if channel.kind is ChannelKind.EDGE:
            continue
        state = channels.get(channel_id)
        if state is not None and state.version > 0:
            out[channel.public_id] = state.value
        elif channel.default is not None:
            out[channel.public_id] = channel.default
    return out


def _written(rtg: RuntimeGraph) -> dict[str, ChannelState]:
    """Every other channel written once, so both branches of each reader are taken."""
    out: dict[str, ChannelState] = {}
    for index, channel_id in enumerate(rtg.channels):
        if index % 2 == 0:
            out[channel_id] = ChannelState(channel_id=channel_id, value=f"v{index}", version=index)
    return out


@pytest.mark.parametrize("make", GRAPHS, ids=lambda f: f.__name__)
def test_graph_derivations_match_the_general_ones(make: object) -> None:
    assert callable(make)
    rtg = fx.runtime(make())
    assert rtg.input_ids == tuple(
        c.public_id for c in rtg.channels.values() if c.kind is ChannelKind.INPUT
    )
    assert rtg.field_rules() == _general_field_rules(rtg)
    assert dict(rtg.field_rule_map) == _general_field_rules(rtg)
    assert rtg.node_order == tuple(sorted(rtg.nodes))
    assert [k for k, _ in rtg.visible_channels] == [
        k for k, c in rtg.channels.items() if c.kind is not ChannelKind.EDGE
    ]
    channels = _written(rtg)
    assert snapshot(rtg, channels) == _general_snapshot(rtg, channels)
    assert source_versions(rtg, channels) == {
        c.public_id: (channels[k].version if k in channels else 0)
        for k, c in rtg.channels.items()
        if c.kind is not ChannelKind.EDGE
    }
    assert committed_fields(rtg, channels) == {
        c.public_id: channels[k].value
        for k, c in rtg.channels.items()
        if c.kind is ChannelKind.STATE and k in channels and channels[k].version > 0
    }


def test_field_rules_stay_a_fresh_copy_and_the_cache_is_read_only() -> None:
    rtg = fx.runtime(fx.minimal_linear())
    rules = rtg.field_rules()
    rules.clear()
    assert rtg.field_rules() == _general_field_rules(rtg) != {}
    with pytest.raises(TypeError):
        rtg.field_rule_map["result"] = FieldRule()  # type: ignore[index]  # read-only on purpose


def test_derivations_follow_an_evolved_graph_and_stay_out_of_equality() -> None:
    rtg = fx.runtime(fx.simple_edge())
    assert rtg == fx.runtime(fx.simple_edge())
    fewer = attrs.evolve(rtg, nodes={k: v for k, v in rtg.nodes.items() if k != "writer"})
    assert fewer.node_order == ("reviewer",)
    changed = frozenset(rtg.nodes["writer"].subscribe)
    assert candidates_of(fewer, {}, changed, frozenset()) == ()
    assert candidates_of(rtg, {}, changed, frozenset()) == ("writer",)
    no_fields = attrs.evolve(
        rtg, channels={k: c for k, c in rtg.channels.items() if c.kind is not ChannelKind.STATE}
    )
    assert no_fields.field_rules() == {} and dict(no_fields.field_rule_map) == {}
    assert [k for k, _ in no_fields.visible_channels] == ["input:topic"]


def _general_format(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def test_format_timestamp_remembers_only_what_reads_the_same() -> None:
    base = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
    moments = [base + timedelta(microseconds=i) for i in range(4)]
    # Repeats, alternations and equal-but-distinct objects, in an order that exercises
    # both remembered slots and their eviction.
    order = [0, 0, 1, 0, 1, 2, 0, 2, 2, 3, 1, 3, 0]
    for index in order:
        moment = moments[index]
        assert format_timestamp(moment) == _general_format(moment)
        twin = moment.replace()  # equal value, another object
        assert format_timestamp(twin) == _general_format(moment)
    offset = datetime(2026, 3, 4, 7, 6, 7, 1, tzinfo=timezone(timedelta(hours=2)))
    assert format_timestamp(offset) == "2026-03-04T05:06:07.000001Z"
    assert format_timestamp(moments[0]) == "2026-03-04T05:06:07.890123Z"
    early = datetime(999, 1, 2, tzinfo=UTC)
    assert format_timestamp(early) == "0999-01-02T00:00:00.000000Z"
    assert format_timestamp(early) == "0999-01-02T00:00:00.000000Z"


def _run() -> Run:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    return Run(
        id="r1",
        graph_id="g",
        graph_hash="h",
        status=RunStatus.RUNNING,
        started_at=at,
        updated_at=at,
        input={"value": 1},
        channels={"input:value": ChannelState(channel_id="input:value", value=1, version=1)},
        changed_channels=frozenset({"edge:start"}),
        checkpoint_seq=3,
        event_seq=7,
        metadata={"k": "v"},
    )


def test_evolve_run_matches_attrs_evolve() -> None:
    run = _run()
    later = run.updated_at + timedelta(seconds=1)
    changes: dict[str, Any] = {"step": 2, "updated_at": later, "checkpoint_seq": 4, "event_seq": 9}
    fast = moment_module._evolve_run(run, dict(changes))
    assert fast == attrs.evolve(run, **changes)
    assert fast.__class__ is Run
    assert moment_module._evolve_run(run, {}) == run
    with pytest.raises(TypeError):
        moment_module._evolve_run(run, {"no_such_field": 1})


def test_evolve_run_keeps_a_subclass() -> None:
    @attrs.frozen(kw_only=True)
    class Tagged(Run):
        tag: str = "t"

    run = Tagged(**attrs.asdict(_run(), recurse=False), tag="x")
    evolved = moment_module._evolve_run(run, {"step": 5})
    assert isinstance(evolved, Tagged) and evolved.tag == "x" and evolved.step == 5
