"""The compiler's validation stage (layer 2): every rule over an ingested graph, as
diagnostics with stable codes and paths (the pass order is in :mod:`docket.graph.compiler`).

``_Contract`` is a registered implementation as one compile sees it; the compiler looks
each one up once (``_contracts``) and hands them to both materialisation and validation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, cast

import attrs

from docket.graph._algorithms import _cycles, _reachable, _reaches_finish, _sorted
from docket.graph._policies import (
    _MAX_SUPERSTEPS,
    LIMITER_POLICY,
    _positive_int,
    node_policies,
    queue_policies,
)
from docket.graph.children import child_problems
from docket.graph.guards import GuardProblemCode, guard_problems, guard_strings
from docket.graph.maps import map_problems
from docket.graph.model import (
    FINISH,
    START,
    Diagnostic,
    DiagnosticCode,
    Edge,
    Field,
    FieldKind,
    Graph,
    Path,
    Severity,
    id_problem,
)
from docket.graph.nodes import NodeDefinition, NodeRegistry
from docket.graph.reducers import is_ambiguous_list_write, reducer_problems, reducer_schema_mismatch
from docket.graph.schema import Schema, SchemaType, schema_problems, strict_key, validate
from docket.graph.wire import SUPPORTED_SCHEMA_VERSION
from docket.values import JSONDict, JSONValue

E = Severity.ERROR
W = Severity.WARNING
C = DiagnosticCode


@attrs.frozen
class _Contract:
    """A registered implementation as one compile sees it (looked up once per compile)."""

    definition: NodeDefinition
    schema: Schema | None  # the usable config schema; None when unchecked or unusable
    problems: tuple[str, ...]  # why the declared config schema is unusable


def _contracts(graph: Graph, registry: NodeRegistry) -> dict[str, _Contract]:
    out: dict[str, _Contract] = {}
    for name in sorted({n.implementation for n in graph.nodes.values() if n.implementation}):
        definition = registry.get(name)
        if definition is None:
            continue
        declared = definition.config_schema
        problems = [] if declared is None else schema_problems(declared, "config_schema")
        if declared is not None and not problems and declared.type not in _CONFIG_TYPES:
            problems = ["a config schema must be an object or a map schema"]
        out[name] = _Contract(definition, None if problems else declared, tuple(problems))
    return out


_CONFIG_TYPES: Final = (SchemaType.OBJECT, SchemaType.MAP)


class _Validator:
    """Runs every rule over a canonical (ingested) graph; collects diagnostics in order."""

    def __init__(
        self, graph: Graph, contracts: Mapping[str, _Contract], host_limit: int | None
    ) -> None:
        self.g = graph
        self.contracts = contracts
        self.host_limit = host_limit
        self.out: list[Diagnostic] = []
        self.known_fields = frozenset(graph.inputs) | frozenset(graph.fields)
        self.reachable: set[str] = set()

    def add(
        self,
        code: DiagnosticCode,
        path: Path,
        message: str,
        severity: Severity = E,
        **details: JSONValue,
    ) -> None:
        self.out.append(Diagnostic(code, severity, path, message, details))

    def run(self) -> list[Diagnostic]:
        for check in (
            self.document,
            self.fields,
            self.outputs,
            self.nodes,
            self.edges,
            self.branches,
            self.guards,
            self.topology,
            self.cycles,
            self.exits,
            self.references,
        ):
            check()
        return self.out

    # D -----------------------------------------------------------------------------------------

    def document(self) -> None:
        g = self.g
        if g.schema_version != SUPPORTED_SCHEMA_VERSION:
            self.add(
                C.UNSUPPORTED_SCHEMA_VERSION,
                ("schema_version",),
                f"schema_version {g.schema_version} is not supported "
                f"(expected {SUPPORTED_SCHEMA_VERSION})",
            )
        self.add_id_problems(g.id, ("id",), "graph")
        for coll in ("inputs", "fields", "outputs", "nodes", "edges"):
            for record_id in _sorted(getattr(g, coll)):
                self.add_id_problems(record_id, (coll, record_id), coll[:-1])
        for field_id in sorted(set(g.inputs) & set(g.fields)):
            self.add(
                C.DUPLICATE_STATE_ID,
                ("fields", field_id),
                f"{field_id!r} is declared both as an input and as a state field",
            )
        for key, message in queue_policies(g.policies)[2]:
            self.add(C.INVALID_POLICY, ("policies", key), message)
        limit = g.policies.get(_MAX_SUPERSTEPS)
        path = ("policies", _MAX_SUPERSTEPS)
        if limit is not None and not _positive_int(limit):
            self.add(
                C.INVALID_POLICY, path, f"max_supersteps must be a positive integer, got {limit!r}"
            )
        elif (
            limit is not None and self.host_limit is not None and cast(int, limit) > self.host_limit
        ):
            self.add(
                C.MAX_SUPERSTEPS_CAPPED,
                path,
                f"max_supersteps {limit} exceeds the host ceiling; runs stop at {self.host_limit}",
                W,
                limit=self.host_limit,
            )

    def add_id_problems(self, value: str, path: Path, label: str) -> None:
        problem = id_problem(value)
        if problem is C.RESERVED_ID:
            self.add(problem, path, f"{label} ID {value!r} is reserved")
        elif problem is not None:
            self.add(problem, path, f"{label} ID {value!r} is not a valid ID")

    # F -----------------------------------------------------------------------------------------

    def fields(self) -> None:
        for coll, kind in (("inputs", FieldKind.INPUT), ("fields", FieldKind.STATE)):
            records: Mapping[str, Field] = getattr(self.g, coll)
            for field_id in _sorted(records):
                self.field(records[field_id], (coll, field_id), kind)

    def field(self, field: Field, path: Path, kind: FieldKind) -> None:
        if field.kind is not kind:
            self.add(
                C.INVALID_FIELD,
                path,
                f"a {field.kind.value} field cannot be declared under {path[0]}",
            )
        schema_ok = self.schema(field.schema, (*path, "schema"), required=True)
        reducer = field.reducer
        if kind is FieldKind.STATE and reducer is not None:
            at = (*path, "reducer")
            problems = reducer_problems(reducer)
            if problems:
                self.add(C.INVALID_REDUCER, at, "; ".join(problems), reasons=list(problems))
            elif schema_ok and field.schema is not None:
                mismatch = reducer_schema_mismatch(reducer, field.schema)
                if mismatch:
                    self.add(C.REDUCER_SCHEMA_MISMATCH, at, mismatch)
                elif is_ambiguous_list_write(reducer, field.schema):
                    self.add(
                        C.AMBIGUOUS_LIST_WRITE,
                        at,
                        f"{reducer.type} on a list of lists: a list write is taken as "
                        "several items, never as one item",
                        W,
                    )
        if schema_ok and field.schema is not None and field.default is not None:
            reasons = validate(field.schema, field.default, "default")
            if reasons:
                self.add(
                    C.INVALID_FIELD_DEFAULT,
                    (*path, "default"),
                    "; ".join(reasons),
                    reasons=list(reasons),
                )

    def schema(self, schema: Schema | None, path: Path, *, required: bool) -> bool:
        """Report a missing (when ``required``) or malformed schema; True when usable."""
        if schema is None:
            if required:
                self.add(C.MISSING_FIELD_SCHEMA, path, "a field needs a schema")
            return False
        problems = schema_problems(schema)
        if problems:
            self.add(C.INVALID_SCHEMA, path, "; ".join(problems), reasons=list(problems))
            return False
        return True

    # O -----------------------------------------------------------------------------------------

    def outputs(self) -> None:
        for output_id in _sorted(self.g.outputs):
            output = self.g.outputs[output_id]
            path = ("outputs", output_id)
            source = self.g.field(output.source)
            if source is None:
                self.add(
                    C.UNKNOWN_OUTPUT_SOURCE,
                    (*path, "source"),
                    f"output {output_id!r} projects {output.source!r}, which is neither an "
                    "input nor a state field",
                )
            if not self.schema(output.schema, (*path, "schema"), required=False):
                continue
            own = cast(Schema, output.schema)
            theirs = None if source is None else source.schema
            if theirs is not None and not schema_problems(theirs) and not _compatible(theirs, own):
                self.add(
                    C.INCOMPATIBLE_OUTPUT_SCHEMA,
                    (*path, "schema"),
                    f"output {output_id!r} schema ({own.type}) cannot hold every value "
                    f"of {output.source!r} ({theirs.type})",
                )

    # N -----------------------------------------------------------------------------------------

    def nodes(self) -> None:
        for node_id in _sorted(self.g.nodes):
            node = self.g.nodes[node_id]
            path = ("nodes", node_id)
            at = (*path, "implementation")
            contract = None
            if node.child:
                self.child(node_id, node.child, node.map, node.implementation, node.config)
            elif node.implementation is None:
                self.add(
                    C.MISSING_NODE_IMPLEMENTATION, at, f"node {node_id!r} has no implementation"
                )
            else:
                contract = self.contracts.get(node.implementation)
                if contract is None:
                    self.add(
                        C.UNKNOWN_IMPLEMENTATION,
                        at,
                        f"node {node_id!r} names implementation {node.implementation!r}, "
                        "which the node registry does not have",
                        implementation=node.implementation,
                    )
            if contract is not None and contract.problems:
                self.add(
                    C.INVALID_NODE_CONFIG_SCHEMA,
                    at,
                    f"implementation {contract.definition.name!r} has an unusable config "
                    "schema: " + "; ".join(contract.problems),
                    reasons=list(contract.problems),
                )
            elif contract is not None and contract.schema is not None:
                reasons = validate(contract.schema, node.config, "config")
                if reasons:
                    self.add(
                        C.INVALID_NODE_CONFIG,
                        (*path, "config"),
                        "; ".join(reasons),
                        reasons=list(reasons),
                    )
            for key, message in node_policies(node.policies)[1]:
                self.add(C.INVALID_POLICY, (*path, "policies", key), f"node {node_id!r}: {message}")
            if node.child and node.policies.get(LIMITER_POLICY) is not None:
                self.add(
                    C.INVALID_POLICY,
                    (*path, "policies", LIMITER_POLICY),
                    f"node {node_id!r}: a child node runs no attempt a limiter could hold; "
                    "name the limiter on the child graph's nodes",
                )
            if node.map:
                for key, message in map_problems(node.map, self.list_typed()):
                    self.add(C.INVALID_MAP, (*path, "map", key), f"node {node_id!r}: {message}")

    def child(
        self,
        node_id: str,
        raw: JSONDict,
        mapping: JSONDict,
        implementation: str | None,
        config: JSONDict,
    ) -> None:
        """A child node runs a graph, not an implementation (docket.graph.children)."""
        path = ("nodes", node_id)
        if implementation is not None:
            self.add(
                C.INVALID_CHILD,
                (*path, "implementation"),
                f"node {node_id!r} runs a child graph, so it takes no implementation",
            )
        if config:
            self.add(
                C.INVALID_CHILD,
                (*path, "config"),
                f"node {node_id!r} runs a child graph, so it takes no config",
            )
        readable = dict.fromkeys((*self.g.inputs, *self.g.fields), True)
        item = mapping.get("as")
        if isinstance(item, str):
            readable[item] = True
        state = frozenset(self.g.fields)
        for key, message in child_problems(raw, readable, state):
            self.add(C.INVALID_CHILD, (*path, "child", key), f"node {node_id!r}: {message}")

    def list_typed(self) -> dict[str, bool]:
        """Each input and field ID -> whether its schema is a list (a map's ``over``)."""
        out: dict[str, bool] = {}
        for record in (*self.g.inputs.values(), *self.g.fields.values()):
            schema = record.schema
            out[record.id] = isinstance(schema, Schema) and schema.type is SchemaType.LIST
        return out

    # E -----------------------------------------------------------------------------------------

    def edges(self) -> None:
        for edge_id in _sorted(self.g.edges):
            edge = self.g.edges[edge_id]
            self.edge_source(edge, ("edges", edge_id, "from"))
            at = ("edges", edge_id, "to")
            if edge.target == START:
                self.add(C.INVALID_START_ENDPOINT, at, f"edge {edge_id!r} cannot lead to {START}")
            elif edge.target != FINISH and edge.target not in self.g.nodes:
                self.add(
                    C.UNKNOWN_EDGE_TARGET,
                    at,
                    f"edge {edge_id!r} leads to unknown node {edge.target!r}",
                )

    def edge_source(self, edge: Edge, at: Path) -> None:
        if isinstance(edge.source, str):
            if edge.source == FINISH:
                self.add(
                    C.INVALID_FINISH_ENDPOINT, at, f"edge {edge.id!r} cannot start at {FINISH}"
                )
            elif edge.source != START and edge.source not in self.g.nodes:
                self.add(
                    C.UNKNOWN_EDGE_SOURCE,
                    at,
                    f"edge {edge.id!r} starts at unknown node {edge.source!r}",
                )
            return
        if not edge.source:
            self.add(C.EMPTY_EDGE_SOURCES, at, f"barrier edge {edge.id!r} lists no sources")
            return
        if FINISH in edge.source:
            self.add(C.INVALID_FINISH_ENDPOINT, at, f"barrier edge {edge.id!r} lists {FINISH}")
        if START in edge.source:
            self.add(
                C.INVALID_START_ENDPOINT,
                at,
                f"barrier edge {edge.id!r} lists {START}; a barrier joins nodes only",
            )
        repeated = sorted({s for s in edge.source if edge.source.count(s) > 1})
        if repeated:
            self.add(
                C.DUPLICATE_EDGE_SOURCE,
                at,
                f"barrier edge {edge.id!r} lists {repeated} more than once",
                sources=cast(JSONValue, repeated),
            )
        unknown = sorted(
            {s for s in edge.source if s not in (START, FINISH) and s not in self.g.nodes}
        )
        if unknown:
            self.add(
                C.UNKNOWN_EDGE_SOURCE,
                at,
                f"barrier edge {edge.id!r} lists unknown nodes {unknown}",
                sources=cast(JSONValue, unknown),
            )

    # B -----------------------------------------------------------------------------------------

    def branches(self) -> None:
        for node_id in _sorted(self.g.nodes):
            groups = self.g.nodes[node_id].branches
            seen: dict[str, int] = {}
            for group in sorted(groups):
                at = ("nodes", node_id, "branches", group)
                for edge_id in groups[group]:
                    seen[edge_id] = seen.get(edge_id, 0) + 1
                    edge = self.g.edges.get(edge_id)
                    if edge is None:
                        self.add(
                            C.UNKNOWN_BRANCH_EDGE,
                            at,
                            f"branch group {group!r} of {node_id!r} names unknown edge {edge_id!r}",
                            edge_id=edge_id,
                        )
                    elif edge.source != node_id:
                        self.add(
                            C.BRANCH_EDGE_SOURCE_MISMATCH,
                            at,
                            f"edge {edge_id!r} in branch group {group!r} does not leave "
                            f"{node_id!r} alone",
                            edge_id=edge_id,
                        )
                    elif edge.guard is None:
                        self.add(
                            C.UNGUARDED_BRANCH_EDGE,
                            at,
                            f"edge {edge_id!r} in branch group {group!r} has no guard, so it "
                            "always fires",
                            W,
                            edge_id=edge_id,
                        )
            for edge_id in sorted(e for e, n in seen.items() if n > 1):
                self.add(
                    C.DUPLICATE_BRANCH_EDGE,
                    ("nodes", node_id, "branches"),
                    f"edge {edge_id!r} appears more than once in the branch groups of {node_id!r}",
                    edge_id=edge_id,
                )

    # G -----------------------------------------------------------------------------------------

    def guards(self) -> None:
        for edge_id in _sorted(self.g.edges):
            guard = self.g.edges[edge_id].guard
            if guard is None:
                continue
            for problem in guard_problems(guard, self.known_fields):
                code = {
                    GuardProblemCode.INVALID_GUARD: C.INVALID_GUARD,
                    GuardProblemCode.UNKNOWN_GUARD_FIELD: C.UNKNOWN_GUARD_FIELD,
                    GuardProblemCode.INVALID_GUARD_PATH: C.INVALID_GUARD_PATH,
                }[problem.code]
                self.add(code, ("edges", edge_id, "guard"), f"edge {edge_id!r}: {problem.message}")

    # T -----------------------------------------------------------------------------------------

    def topology(self) -> None:
        g = self.g
        if (g.nodes or g.edges) and not any(e.source == START for e in g.edges.values()):
            self.add(C.NO_ENTRYPOINT, ("edges",), f"no edge leaves {START}, so nothing ever runs")
        self.reachable = _reachable(g)
        for node_id in _sorted(g.nodes):
            if node_id not in self.reachable:
                self.add(
                    C.UNREACHABLE_NODE,
                    ("nodes", node_id),
                    f"node {node_id!r} can never be activated from {START}",
                )

    # C -----------------------------------------------------------------------------------------

    def cycles(self) -> None:
        policy = self.g.policies.get(_MAX_SUPERSTEPS)
        if policy is not None and not _positive_int(policy):
            return  # the invalid policy is already reported
        for component in _cycles(self.g):
            members = cast(JSONValue, component)
            if policy is None:
                self.add(
                    C.UNBOUNDED_CYCLE,
                    ("policies", _MAX_SUPERSTEPS),
                    f"nodes {component} form a cycle and the graph sets no max_supersteps "
                    "(runs are bounded only by the host ceiling)",
                    W,
                    nodes=members,
                )
            elif not any(
                e.guard is not None
                and e.target in component
                and any(s in component for s in e.sources)
                for e in self.g.edges.values()
            ):
                self.add(
                    C.UNGUARDED_CYCLE,
                    ("nodes", component[0]),
                    f"nodes {component} form a cycle with no guarded edge; it only stops at "
                    f"max_supersteps ({policy})",
                    W,
                    nodes=members,
                )

    # X -----------------------------------------------------------------------------------------

    def exits(self) -> None:
        g = self.g
        if not g.nodes:
            return
        if not any(e.target == FINISH for e in g.edges.values()):
            self.add(C.NO_TERMINAL_EDGE, ("edges",), f"no edge leads to {FINISH}", W)
            return
        finishing = _reaches_finish(g)
        for node_id in _sorted(g.nodes):
            if node_id in self.reachable and node_id not in finishing:
                self.add(
                    C.DEAD_END_NODE,
                    ("nodes", node_id),
                    f"node {node_id!r} cannot reach {FINISH}",
                    W,
                )

    # R -----------------------------------------------------------------------------------------

    def references(self) -> None:
        g = self.g
        named: set[str] = {o.source for o in g.outputs.values()}
        for edge in g.edges.values():
            if edge.guard is not None:
                named |= guard_strings(edge.guard)
        for node in g.nodes.values():
            named |= _strings(node.config) | _strings(node.map.get("over"))
            named |= _strings(node.child.get("input"))
            written = node.child.get("output")
            named |= set(written) if isinstance(written, dict) else set()
        for field_id in _sorted(g.fields):
            if field_id not in named:
                self.add(
                    C.ORPHANED_FIELD,
                    ("fields", field_id),
                    f"state field {field_id!r} is not named by any output, guard or node config",
                    W,
                )


def _strings(value: JSONValue) -> set[str]:
    """Every string among the values of a JSON value (keys are not collected)."""
    if isinstance(value, str):
        return {value}
    items: Iterable[JSONValue] = (
        value if isinstance(value, list) else value.values() if isinstance(value, dict) else ()
    )
    out: set[str] = set()
    for item in items:
        out |= _strings(item)
    return out


def _compatible(source: Schema, output: Schema) -> bool:
    """Can ``output`` hold every value ``source`` admits? (object fields are not compared)"""
    if source.type is SchemaType.ENUM and output.type is SchemaType.ENUM:
        allowed = {strict_key(v) for v in output.values}
        return all(strict_key(v) in allowed for v in source.values)
    if source.type is SchemaType.LIST and output.type is SchemaType.LIST:
        if output.item is None:
            return True
        return source.item is not None and _compatible(source.item, output.item)
    if source.type is SchemaType.INTEGER and output.type is SchemaType.FLOAT:
        return True  # a float schema accepts integers
    return source.type == output.type
