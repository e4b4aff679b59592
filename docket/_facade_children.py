"""The facade's part of child runs: pinning a parent's children when it is saved, and
refusing graphs with children on a backend that does not declare them.

Saving a parent pins every child node to an exact child graph version in the same owner
scope (its latest saved version when the document names none), and checks the child's
interface against the node's mappings: every mapped input is a child input, every
required child input is mapped, every mapped output is a child output. The pinned hash
is written into the document before it is hashed, so the parent's own hash covers the
exact child it will run.
"""

from __future__ import annotations

import attrs

from docket.contract import errors as contract
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.protocols import Backend
from docket.errors import InvalidGraph, Unsupported
from docket.graph.children import parse_child
from docket.graph.compiler import RuntimeGraph, graph_from_effective_document
from docket.graph.model import Graph
from docket.graph.wire import GraphLoadError
from docket.records import GraphRef, OwnerScope
from docket.values import JSONValue

__all__ = ["pin_children", "require_child_runs", "require_runnable_children"]


def has_children(graph: Graph) -> bool:
    return any(node.child for node in graph.nodes.values())


def require_child_runs(graph: Graph, capabilities: Capabilities, action: str) -> None:
    """Raise ``Unsupported`` (nothing written) for a graph with child nodes on a backend
    that does not declare :data:`Feature.CHILD_RUNS`."""
    if not has_children(graph) or Feature.CHILD_RUNS in capabilities.features:
        return
    raise Unsupported(
        f"graph {graph.id!r} runs child graphs, and this backend "
        f"({capabilities.name or 'unnamed'}) does not declare the "
        f"{Feature.CHILD_RUNS!s} feature child runs need; it cannot be {action} here",
        phase="save" if action == "saved" else "init",
        details={"feature": str(Feature.CHILD_RUNS)},
    )


def require_runnable_children(rtg: RuntimeGraph, capabilities: Capabilities) -> None:
    """Refuse to start a run whose graph has child nodes this backend cannot run, or
    whose child nodes were never pinned (a document stored without the facade)."""
    if Feature.CHILD_RUNS not in capabilities.features:
        raise Unsupported(
            f"graph {rtg.graph_id!r} runs child graphs, and this backend "
            f"({capabilities.name or 'unnamed'}) does not declare the "
            f"{Feature.CHILD_RUNS!s} feature child runs need",
            phase="init",
            details={"feature": str(Feature.CHILD_RUNS)},
        )
    unpinned = sorted(n.public_id for n in rtg.nodes.values() if n.child and not n.child.graph_hash)
    if unpinned:
        raise InvalidGraph(
            f"graph {rtg.graph_id!r} has child nodes with no pinned child graph: "
            f"{', '.join(unpinned)} (save the graph through Docket.save_graph to pin them)",
            details={"diagnostics": [_problem(n, "no pinned hash") for n in unpinned]},
        )


def _problem(node_id: str, message: str) -> dict[str, JSONValue]:
    return {
        "code": "invalid_child",
        "path": f"/nodes/{node_id}/child",
        "message": f"node {node_id!r}: {message}",
    }


async def pin_children(store: Backend, owner: OwnerScope, graph: Graph) -> Graph:
    """``graph`` with every child node pinned (raises ``InvalidGraph`` naming every
    child that is not saved in this scope or does not fit its node's mappings)."""
    problems: list[dict[str, JSONValue]] = []
    nodes = dict(graph.nodes)
    for node_id in sorted(nodes):
        node = nodes[node_id]
        spec = parse_child(node.child) if node.child else None
        if spec is None:
            continue
        if spec.graph_hash is None:
            found = await store.graphs.fetch_latest_graph_ref(owner, spec.graph)
            if isinstance(found, contract.NotFound):
                problems.append(
                    _problem(node_id, f"child graph {spec.graph!r} is not saved (save it first)")
                )
                continue
            ref = found
        else:
            ref = GraphRef(spec.graph, spec.graph_hash)
        document = await store.graphs.fetch_graph(owner, ref)
        if isinstance(document, contract.NotFound | contract.CorruptGraph):
            problems.append(
                _problem(
                    node_id, f"child graph {ref.graph_id} ({ref.graph_hash[:12]}) is not saved"
                )
            )
            continue
        try:
            child = graph_from_effective_document(document)
        except GraphLoadError as exc:
            problems.append(_problem(node_id, f"child graph {ref.graph_id} is corrupt: {exc}"))
            continue
        for name in sorted(spec.input):
            if name not in child.inputs:
                problems.append(_problem(node_id, f"child graph has no input {name!r}"))
        for name in sorted(child.inputs):
            if child.inputs[name].required and name not in spec.input:
                problems.append(_problem(node_id, f"required child input {name!r} is not mapped"))
        for field, name in sorted(spec.output.items()):
            if name not in child.outputs:
                problems.append(
                    _problem(node_id, f"child graph has no output {name!r} (for {field!r})")
                )
        pinned = attrs.evolve(spec, graph_hash=ref.graph_hash).to_json()
        nodes[node_id] = attrs.evolve(node, child=pinned)
    if problems:
        raise InvalidGraph(
            f"graph {graph.id!r} has child nodes that cannot run: "
            + "; ".join(str(p["message"]) for p in problems[:5]),
            details={"diagnostics": list[JSONValue](problems)},
        )
    return attrs.evolve(graph, nodes=nodes)
