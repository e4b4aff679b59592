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
    _fail,
    _Failed,
    _run,
    _with_docket,
    load_app,
)
from docket.cli._output import (
    _emit,
    _stamp,
    _table,
    _when,
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
    "without --app the CLI has no node registry, so by default every implementation named "
    "in the file (or missing from the app's registry) "
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

    listing = sub.add_parser(
        "list", help="published versions of a graph; without GRAPH, the graphs runs use"
    )
    listing.add_argument("graph_id", nargs="?", default=None, metavar="GRAPH")
    listing.add_argument("--limit", type=int, default=100, help="versions (or runs) to read")
    _connection_options(listing)
    listing.set_defaults(run=_graph_list)


def _compile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE.json")
    parser.add_argument("--allow-unknown-nodes", action="store_true", help=_UNKNOWN_NODES_HELP)
    parser.add_argument(
        "--max-supersteps",
        type=int,
        default=None,
        metavar="N",
        help="host ceiling on supersteps, as a worker would apply it (default: the app's)",
    )
    parser.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        default=None,
        help="check against this application's node registry (implementations and configs)",
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
    app = load_app(args.app) if args.app else None  # not opened: only its registry is used
    nodes = app.nodes if app is not None else NodeRegistry()
    registry = _placeholders(graph, nodes) if args.allow_unknown_nodes else nodes
    limit = args.max_supersteps
    if limit is not None and limit < 1:
        print("docket: --max-supersteps must be a positive integer", file=sys.stderr)
        raise _Failed(2)
    if limit is None and app is not None:
        limit = app.settings.max_supersteps
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


def _graph_list(args: argparse.Namespace) -> int:
    """With GRAPH, its published versions (newest first). Without, the store keeps no list
    of graph ids, so the ids the newest ``--limit`` runs use stand in (as in the console)."""
    if args.limit < 1:
        raise _fail("--limit must be at least 1")
    if args.graph_id is not None:
        page = _with_docket(
            args,
            lambda d: d.list_graph_versions(args.graph_id, limit=args.limit, tenant_id=args.tenant),
            must_exist=True,
        )
        versions = [(v.ref.graph_hash, v.published_at) for v in page.versions]
        if args.json:
            _emit(
                {
                    "graph_id": args.graph_id,
                    "versions": [
                        {"graph_hash": h, "published_at": _stamp(at)} for h, at in versions
                    ],
                    "has_more": page.has_more,
                }
            )
        elif not versions:
            print(f"(no published versions of {args.graph_id})")
        else:
            _table(("HASH", "PUBLISHED"), [[h, _when(at)] for h, at in versions])
        return 0
    runs = _with_docket(
        args,
        lambda d: d.list_runs(limit=args.limit, tenant_id=args.tenant),
        must_exist=True,
    ).runs
    latest: dict[str, tuple[str, int]] = {}  # graph id -> (newest run's graph hash, runs)
    for summary in runs:
        graph_hash, count = latest.get(summary.graph_id, (summary.graph_hash, 0))
        latest[summary.graph_id] = (graph_hash, count + 1)
    if args.json:
        _emit(
            {
                "graphs": [
                    {"graph_id": g, "latest_run_graph_hash": h, "runs": n}
                    for g, (h, n) in sorted(latest.items())
                ],
                "runs_read": len(runs),
            }
        )
    elif not latest:
        print("(no runs, so no graphs in use; docket graph list GRAPH lists a graph's versions)")
    else:
        rows = [[g, h[:12], str(n)] for g, (h, n) in sorted(latest.items())]
        _table(("GRAPH", "HASH OF NEWEST RUN", "RUNS"), rows)
    return 0
