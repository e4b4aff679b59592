"""``docket graph``: check, hash, render and publish graph documents."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from docket.cli._common import (
    _connection_options,
    _docket,
    _Failed,
    _run,
)
from docket.cli._output import (
    _emit,
)
from docket.facade import Docket
from docket.graph.compiler import CompileResult, compile_graph
from docket.graph.model import Diagnostic, Graph
from docket.graph.nodes import NodeContext, NodeDefinition, NodeRegistry, NodeReturn, NodeState
from docket.graph.render import to_dot, to_mermaid
from docket.graph.wire import GraphLoadError, from_json
from docket.records import (
    GraphRef,
)

_UNKNOWN_NODES_HELP = (
    "the CLI has no node registry, so by default every implementation named in the file "
    "is reported as unknown_implementation; with this flag each name is accepted as a "
    "placeholder whose config is not checked (its config defaults are then not filled in, "
    "so the hash matches the published one only if each node's config lists them)"
)


def _add_graph_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    graph = commands.add_parser("graph", help="check, hash, render and publish graph documents")
    sub = graph.add_subparsers(dest="graph_command", required=True, metavar="COMMAND")

    check = sub.add_parser("check", help="compile a graph document and print its diagnostics")
    _compile_options(check)
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.set_defaults(run=_check)

    hash_ = sub.add_parser("hash", help="print the content hash of a valid graph document")
    _compile_options(hash_)
    hash_.set_defaults(run=_hash)

    render = sub.add_parser("render", help="draw a graph document as Mermaid or Graphviz DOT")
    render.add_argument("file", type=Path, metavar="FILE.json")
    render.add_argument("--format", choices=("mermaid", "dot"), default="mermaid")
    render.set_defaults(run=_render)

    publish = sub.add_parser("publish", help="compile a graph document and store it")
    publish.add_argument("file", type=Path, metavar="FILE.json")
    publish.add_argument("--allow-unknown-nodes", action="store_true", help=_UNKNOWN_NODES_HELP)
    _connection_options(publish)
    publish.set_defaults(run=_publish)


def _compile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE.json")
    parser.add_argument("--allow-unknown-nodes", action="store_true", help=_UNKNOWN_NODES_HELP)
    parser.add_argument(
        "--max-supersteps",
        type=int,
        default=None,
        metavar="N",
        help="host ceiling on supersteps, as a worker would apply it",
    )


def _load(path: Path) -> Graph:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"docket: cannot read {path}: {exc}", file=sys.stderr)
        raise _Failed(2) from None
    try:
        return from_json(text)
    except GraphLoadError as exc:
        _print_to_stderr(path, exc.diagnostics)
        raise _Failed(1) from None


def _placeholder(state: NodeState, ctx: NodeContext) -> NodeReturn:
    raise RuntimeError(f"node {ctx.node_id!r} is a CLI placeholder and cannot run")


def _placeholders(graph: Graph, base: NodeRegistry | None = None) -> NodeRegistry:
    registry = NodeRegistry()
    if base is not None:
        for name in base:
            definition = base.get(name)
            assert definition is not None
            registry.register(definition)
    for name in sorted({n.implementation for n in graph.nodes.values() if n.implementation}):
        if name not in registry:
            registry.register(NodeDefinition(name, _placeholder))
    return registry


def _compile(args: argparse.Namespace) -> tuple[Graph, CompileResult]:
    graph = _load(args.file)
    registry = _placeholders(graph) if args.allow_unknown_nodes else NodeRegistry()
    limit = args.max_supersteps
    if limit is not None and limit < 1:
        print("docket: --max-supersteps must be a positive integer", file=sys.stderr)
        raise _Failed(2)
    return graph, compile_graph(graph, registry, max_supersteps=limit)


def _check(args: argparse.Namespace) -> int:
    _, result = _compile(args)
    if args.json:
        report = {
            "ok": result.ok,
            "graph_hash": result.graph_hash,
            "diagnostics": [d.to_dict() for d in result.diagnostics],
        }
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        for diagnostic in result.diagnostics:
            print(f"{args.file}: {diagnostic}")
        errors, warnings = len(result.errors), len(result.warnings)
        verdict = "ok" if result.ok else "invalid"
        print(f"{args.file}: {verdict}, {_count(errors, 'error')}, {_count(warnings, 'warning')}")
    return 0 if result.ok else 1


def _hash(args: argparse.Namespace) -> int:
    _, result = _compile(args)
    if not result.ok:
        _print_to_stderr(args.file, result.errors)
        return 1
    print(result.graph_hash)
    return 0


def _render(args: argparse.Namespace) -> int:
    graph = _load(args.file)
    sys.stdout.write(to_mermaid(graph) if args.format == "mermaid" else to_dot(graph))
    return 0


def _publish(args: argparse.Namespace) -> int:
    graph = _load(args.file)
    base = _docket(args)
    docket = base
    if args.allow_unknown_nodes:
        docket = Docket(
            base.backend,
            nodes=_placeholders(graph, base.nodes),
            tenant_mode=base.tenant_mode,
            settings=base.settings,
        )

    async def go() -> GraphRef:
        try:
            async with docket:
                return await docket.save_graph(graph, tenant_id=args.tenant)
        finally:
            if docket is not base:  # the borrowed backend is still the first Docket's
                await base.backend.close()

    ref = _run(go())
    if args.json:
        _emit({"graph_id": ref.graph_id, "graph_hash": ref.graph_hash})
    else:
        print(f"published {ref.graph_id} {ref.graph_hash}")
    return 0


def _print_to_stderr(path: Path, diagnostics: Sequence[Diagnostic]) -> None:
    for diagnostic in diagnostics:
        print(f"{path}: {diagnostic}", file=sys.stderr)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
