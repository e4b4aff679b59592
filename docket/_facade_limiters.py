"""The facade's checks of node limiters (docs/queues.md#limiting-node-executions).

A node's ``limiter`` policy names a queue whose ledger its attempts take slots in
(:mod:`docket.runtime.limiters`). The queue must exist and the backend must hold queues:
both are refused when the graph is saved and when a run starts (``NotFound``,
``Unsupported``; nothing is written), never in the middle of a run. Queues are never
deleted, so a name found once is remembered by the ``Docket`` and not read again.
"""

from __future__ import annotations

from collections.abc import Iterable

from docket._facade_queues import queue_store
from docket.contract import errors as contract
from docket.contract.capabilities import Capabilities
from docket.contract.protocols import Backend
from docket.errors import NotFound
from docket.graph.compiler import node_policies
from docket.graph.model import Graph

__all__ = ["graph_limiters", "require_limiters"]


def graph_limiters(graph: Graph) -> frozenset[str]:
    """The limiters a graph document's nodes name (valid names only: a bad one is the
    compiler's to report)."""
    named = (node_policies(node.policies)[0].limiter for node in graph.nodes.values())
    return frozenset(name for name in named if name is not None)


async def require_limiters(
    backend: Backend, caps: Capabilities, limiters: Iterable[str], known: set[str], phase: str
) -> None:
    """Every limiter is a queue the backend knows: ``NotFound`` (details ``what=queue``,
    ``limiter``) names the first that is not; ``Unsupported`` on a backend without
    queues. ``known``: the names already found (added to)."""
    missing = sorted(set(limiters) - known)
    if not missing:
        return
    store = queue_store(backend, caps, "run nodes under a limiter")
    for name in missing:
        found = await store.fetch_queue(name)
        if isinstance(found, contract.NotFound):
            raise NotFound(
                f"no queue {name!r} for a node's limiter: configure it first "
                "(Docket.configure_queue)",
                phase=phase,
                details={"what": "queue", "queue": name, "limiter": True},
            )
        known.add(name)
