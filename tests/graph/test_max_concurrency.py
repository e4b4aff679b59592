"""The node policy ``max_concurrency``: validated like the other node policies, resolved
by the compiler, part of the graph's hash — and documents without it hash as before."""

from __future__ import annotations

import asyncio

import pytest

from docket import Docket
from docket.contract.memory import MemoryBackend
from docket.errors import InvalidGraph
from docket.graph.builder import GraphBuilder
from docket.graph.compiler import node_policies
from docket.graph.model import FINISH, START, GraphError
from docket.graph.nodes import NodePolicies, RetryPolicy
from docket.graph.wire import from_json, to_json
from docket.values import JSONValue
from tests.graph.compiler_fixtures import REGISTRY, C, bad, build, linear


@pytest.mark.parametrize("value", [0, -1, "3", True, 2.0, [3]])
def test_bad_values_are_invalid_policy_diagnostics(value: JSONValue) -> None:
    result = build(linear().update_node("copy", {"policies": {"max_concurrency": value}}))
    assert not result.ok and result.runtime is None
    (problem,) = [d for d in result.diagnostics if d.code is C.INVALID_POLICY]
    assert problem.pointer == "/nodes/copy/policies/max_concurrency"
    assert f"max_concurrency must be a positive integer, got {value!r}" in problem.message


def test_the_policy_resolves_and_reaches_the_runtime_node() -> None:
    assert node_policies({"max_concurrency": 3}) == (NodePolicies(None, RetryPolicy(), 3), [])
    assert node_policies({"max_concurrency": None})[0].max_concurrency is None
    assert node_policies({})[0].max_concurrency is None
    result = build(linear().update_node("copy", {"policies": {"max_concurrency": 2}}))
    assert result.ok and result.runtime is not None
    assert result.runtime.nodes["copy"].policies.max_concurrency == 2


# The hashes below were computed by the code before max_concurrency existed: a document
# without the policy keeps its identity, so stored graphs and runs stay addressable.
OLD_MINIMAL = "af3392f601292dee8fef95ff6e20e2b9bf53645cc98b9a5c9bbf75cd9f4e4fcc"
OLD_WITH_POLICIES = "32986835c995a26e3ed7a7e1eda80575f53f148f6a66386e91a4a5d4559b9636"


def test_documents_without_the_policy_hash_as_before() -> None:
    assert build(linear()).graph_hash == OLD_MINIMAL
    policies = {"timeout_ms": 1000, "retry": {"max_attempts": 2}}
    assert build(linear().update_node("copy", {"policies": policies})).graph_hash == (
        OLD_WITH_POLICIES
    )


def test_the_policy_is_part_of_the_hash_and_the_document() -> None:
    hashes = {
        build(linear().update_node("copy", {"policies": {"max_concurrency": k}})).graph_hash
        for k in (1, 2)
    }
    assert len(hashes) == 2 and OLD_MINIMAL not in hashes
    graph = linear().update_node("copy", {"policies": {"max_concurrency": 4}})
    assert '"max_concurrency": 4' in to_json(graph)
    assert from_json(to_json(graph)) == graph


def test_the_builder_stores_it_as_a_node_policy() -> None:
    graph = (
        GraphBuilder("g")
        .node("n", "fixtures.noop", max_concurrency=2, timeout_ms=10)
        .edge("a", START, "n")
        .edge("b", "n", FINISH)
        .build()
    )
    assert graph.nodes["n"].policies == {"timeout_ms": 10, "max_concurrency": 2}
    with pytest.raises(GraphError, match="max_concurrency is given both"):
        GraphBuilder("g").node("n", "x", max_concurrency=2, policies={"max_concurrency": 3})


def test_saving_a_graph_with_a_bad_value_raises_and_stores_nothing() -> None:
    graph = (
        GraphBuilder("g")
        .node("n", "fixtures.noop", max_concurrency=bad(0))
        .edge("a", START, "n")
        .edge("b", "n", FINISH)
        .build()
    )

    async def scenario() -> None:
        async with Docket(MemoryBackend(), nodes=REGISTRY) as docket:
            with pytest.raises(InvalidGraph, match="max_concurrency must be a positive"):
                await docket.save_graph(graph)
            assert (await docket.list_graph_versions("g")).versions == ()

    asyncio.run(scenario())
