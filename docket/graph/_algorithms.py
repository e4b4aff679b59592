"""Graph walks the validator needs (layer 2), iterative because graphs may have thousands
of nodes: what ``$start`` can activate, what can reach ``$finish``, and the cycles.
``_sorted`` is the ID order every pass and the lowering visit records in."""

from __future__ import annotations

from collections.abc import Mapping

from docket.graph.model import FINISH, START, Edge, Graph


def _sorted(mapping: Mapping[str, object]) -> list[str]:
    return sorted(mapping)


def _reachable(g: Graph) -> set[str]:
    """Nodes activatable from ``$start``: a barrier needs all of its sources."""
    waiting: dict[str, int] = {}
    by_source: dict[str, list[Edge]] = {}
    for edge in g.edges.values():
        sources = set(edge.sources)
        if not sources:
            continue
        waiting[edge.id] = len(sources)
        for source in sources:
            by_source.setdefault(source, []).append(edge)
    reached: set[str] = set()
    queue = [START]
    while queue:
        current = queue.pop()
        for edge in by_source.get(current, ()):
            waiting[edge.id] -= 1
            target = edge.target
            if waiting[edge.id] == 0 and target in g.nodes and target not in reached:
                reached.add(target)
                queue.append(target)
    return reached


def _reaches_finish(g: Graph) -> set[str]:
    """Nodes from which some path leads to a ``$finish`` edge (barrier legs count)."""
    predecessors: dict[str, set[str]] = {}
    found: set[str] = set()
    for edge in g.edges.values():
        for source in edge.sources:
            if source in g.nodes:
                if edge.target == FINISH:
                    found.add(source)
                else:
                    predecessors.setdefault(edge.target, set()).add(source)
    queue = list(found)
    while queue:
        for source in predecessors.get(queue.pop(), ()):
            if source not in found:
                found.add(source)
                queue.append(source)
    return found


def _cycles(g: Graph) -> list[list[str]]:
    """Cyclic strongly connected components (several nodes, or one with a self-loop), each
    sorted, in order of their first member (Tarjan's algorithm, without recursion)."""
    successors: dict[str, set[str]] = {n: set() for n in g.nodes}
    for edge in g.edges.values():
        if edge.target in g.nodes:
            for source in edge.sources:
                if source in g.nodes:
                    successors[source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(successors):
        if root in index:
            continue
        work = [(root, iter(sorted(successors[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(successors[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1 or node in successors[node]:
                    components.append(sorted(members))
    return sorted(components)
