"""The compiler: cycles, the superstep bound, reachability and orphaned fields."""

from __future__ import annotations

from docket.graph.guards import equals, exists, not_
from docket.graph.model import FINISH, START, new_graph
from docket.graph.reducers import R
from docket.graph.schema import S
from tests.graph.compiler_fixtures import C, W, build, cycle, fan_in, found, linear


def test_unbounded_cycle_warns() -> None:
    result = build(cycle())
    assert result.ok
    assert found(result) == [(C.UNBOUNDED_CYCLE, "/policies/max_supersteps", W)]
    assert result.diagnostics[0].details["nodes"] == ["a", "b"]
    assert result.runtime is not None and result.runtime.max_supersteps is None


def test_bounded_cycle_does_not_warn() -> None:
    result = build(cycle().set_policy("max_supersteps", 10))
    assert result.ok and result.diagnostics == ()


def test_guarded_self_loop_with_bound_is_clean() -> None:
    g = (
        new_graph("loop")
        .put_field("n", S.integer(), reducer=R.sum())
        .put_node("tick", "fixtures.noop")
        .put_edge("start", START, "tick")
        .put_edge("again", "tick", "tick", guard=not_(equals("n", 10)))
        .put_edge("done", "tick", FINISH, guard=equals("n", 10))
        .set_policy("max_supersteps", 10)
    )
    assert build(g).diagnostics == ()


def test_host_ceiling_bounds_but_still_warns() -> None:
    # DECISIONS: the host value is a ceiling; a graph without its own bound is still unbounded.
    result = build(cycle(), max_supersteps=25)
    assert result.ok and [d.code for d in result.diagnostics] == [C.UNBOUNDED_CYCLE]
    assert result.runtime is not None and result.runtime.max_supersteps == 25
    explicit_none = build(cycle().set_policy("max_supersteps", None), max_supersteps=25)
    assert [d.code for d in explicit_none.diagnostics] == [C.UNBOUNDED_CYCLE]


def test_graph_policy_is_capped_by_the_host() -> None:
    result = build(cycle().set_policy("max_supersteps", 50), max_supersteps=25)
    assert found(result) == [(C.MAX_SUPERSTEPS_CAPPED, "/policies/max_supersteps", W)]
    assert result.runtime is not None and result.runtime.max_supersteps == 25
    lower = build(cycle().set_policy("max_supersteps", 10), max_supersteps=25)
    assert lower.runtime is not None and lower.runtime.max_supersteps == 10


def test_invalid_policy_suppresses_cycle_warnings() -> None:
    codes = [d.code for d in build(cycle().set_policy("max_supersteps", "banana")).diagnostics]
    assert codes == [C.INVALID_POLICY]
    assert [d.code for d in build(linear().set_policy("max_supersteps", -1)).diagnostics] == [
        C.INVALID_POLICY
    ]


def test_bounded_cycle_without_guard_warns() -> None:
    result = build(cycle(guarded=False).set_policy("max_supersteps", 5))
    assert found(result) == [(C.UNGUARDED_CYCLE, "/nodes/a", W)]


def test_node_reaching_finish_only_through_a_cycle_is_not_a_dead_end() -> None:
    assert C.DEAD_END_NODE not in {d.code for d in build(cycle()).diagnostics}


def test_empty_graph_and_stranded_node_topology() -> None:
    assert build(new_graph("empty")).diagnostics == ()
    stranded = linear().put_node("lonely", "fixtures.noop")
    codes = [d for d in build(stranded).diagnostics if d.pointer == "/nodes/lonely"]
    assert [d.code for d in codes] == [C.UNREACHABLE_NODE], "not also a dead end"


def test_no_terminal_edge_is_reported_once() -> None:
    g = fan_in().delete_edge("edge_combine_finish")
    assert [d.code for d in build(g).diagnostics] == [C.NO_TERMINAL_EDGE]


def test_fields_named_in_outputs_guards_or_config_values_are_not_orphans() -> None:
    g = (
        linear()
        .put_field("by_guard", S.string())
        .put_field("by_config", S.string())
        .put_field("as_key", S.string())
        .update_edge("edge_copy_finish", {"guard": exists("by_guard")})
        .update_node("copy", {"config": {"from": "by_config", "to": "result"}})
    )
    orphans = [d.pointer for d in build(g).diagnostics if d.code is C.ORPHANED_FIELD]
    assert orphans == ["/fields/as_key"]
