"""Run reads: RUN-READS-CURSORS, RUN-LIST-FILTERS."""

from __future__ import annotations

from typing import Any

import pytest

from docket.contract import External, RunListQuery, Terminal
from docket.records import SYSTEM, TENANTLESS, Run, RunCursor, RunStatus, RunSummary, Tenant
from docket_contract_tests.fixtures import (
    commit_unclaimed_ok,
    save_graph,
    seed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant


def _summary(run: Run, tenant: Tenant | None) -> RunSummary:
    return RunSummary.of(run, tenant.id if tenant else None)


@invariant("RUN-READS-CURSORS")
async def test_newest_first_paging_with_ties(docket_kit: Kit) -> None:
    k = docket_kit
    a = k.tenant("a")
    oldest = await seed(k, a, k.name("r1"), started_at=k.at(-3 * 3600))
    low = await seed(k, a, k.name("r2"), started_at=k.at(-3600))
    high = await seed(k, a, k.name("r3"), started_at=k.at(-3600))
    order = [_summary(r, a) for r in (high, low, oldest)]
    whole = await k.b.runs.list_runs(a, RunListQuery(limit=10))
    k.eq(list(whole.runs), order, "(started_at DESC, run_id DESC)")
    k.eq(whole.has_more, False, "all on one page")
    cursor: RunCursor | None = None
    for index, want in enumerate(order):
        page = await k.b.runs.list_runs(a, RunListQuery(limit=1, before=cursor))
        k.eq(list(page.runs), [want], f"page {index + 1}")
        k.eq(page.has_more, index < len(order) - 1, f"page {index + 1} has_more")
        k.eq(page.next_before, RunCursor(want.started_at, want.id), f"page {index + 1} cursor")
        cursor = page.next_before
    last = await k.b.runs.list_runs(a, RunListQuery(limit=1, before=cursor))
    k.eq((last.runs, last.has_more, last.next_before), ((), False, cursor), "final empty page")
    # reads in scope
    for run in (oldest, low, high):
        k.eq(await k.b.runs.fetch_run(a, run.id), run, f"fetch_run {run.id}")
        k.eq((await k.info(a, run.id)).run, run, f"inspect_run {run.id}")
    stranger = await k.b.runs.list_runs(k.tenant("zz"), RunListQuery(limit=2, before=cursor))
    k.eq(
        (stranger.runs, stranger.has_more, stranger.next_before),
        ((), False, cursor),
        "an absent tenant: empty page echoing the cursor",
    )
    system = await k.b.runs.list_runs(SYSTEM, RunListQuery(limit=10))
    k.eq(list(system.runs), order, "SYSTEM sees the tenant's runs")


async def _population(k: Kit) -> dict[str, Run]:
    """Four runs over two graphs / two versions / four statuses, in one tenant."""
    a = k.tenant("a")
    g1v1 = await save_graph(k, a, "g1", 1)
    g1v2 = await save_graph(k, a, "g1", 2)
    g2 = await save_graph(k, a, "g2", 1)
    runs: dict[str, Run] = {}
    runs["A"] = await seed(k, a, k.name("A"), ref=g1v1, started_at=k.at(-40))
    b = await seed(k, a, k.name("B"), ref=g1v2, started_at=k.at(-30))
    runs["B"] = await commit_unclaimed_ok(
        k, a, unclaimed(successor(b, k.at(1), status=RunStatus.WAITING), wake=External())
    )
    c = await seed(k, a, k.name("C"), ref=g2, started_at=k.at(-20))
    runs["C"] = await commit_unclaimed_ok(
        k, a, unclaimed(successor(c, k.at(1), status=RunStatus.DONE), wake=Terminal())
    )
    d = await seed(k, a, k.name("D"), ref=g1v1, started_at=k.at(-10))
    runs["D"] = await commit_unclaimed_ok(
        k, a, unclaimed(successor(d, k.at(1), status=RunStatus.CANCELLED), wake=Terminal())
    )
    return runs


FILTERS: dict[str, tuple[dict[str, Any], set[str]]] = {
    "graph-id": ({"graph_id": "g1"}, {"A", "B", "D"}),
    "graph-id-other": ({"graph_id": "g2"}, {"C"}),
    "graph-hash": ({"graph_hash": ("g1", 2)}, {"B"}),
    "graph-id-and-hash": ({"graph_id": "g1", "graph_hash": ("g1", 1)}, {"A", "D"}),
    "status-running": ({"statuses": {RunStatus.RUNNING}}, {"A"}),
    "status-waiting-done": ({"statuses": {RunStatus.WAITING, RunStatus.DONE}}, {"B", "C"}),
    "status-failed": ({"statuses": {RunStatus.FAILED}}, set()),
    "status-and-graph": ({"statuses": {RunStatus.RUNNING}, "graph_id": "g2"}, set()),
    "unknown-graph": ({"graph_id": "nope"}, set()),
}


@invariant("RUN-LIST-FILTERS")
@pytest.mark.parametrize("case", sorted(FILTERS))
async def test_list_filters(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    a = k.tenant("a")
    runs = await _population(k)
    spec, want = FILTERS[case]
    options: dict[str, Any] = {}
    if "graph_id" in spec:
        options["graph_id"] = k.name(spec["graph_id"])
    if "graph_hash" in spec:
        label, variant = spec["graph_hash"]
        options["graph_hash"] = (await save_graph(k, a, label, variant)).graph_hash
    if "statuses" in spec:
        options["statuses"] = frozenset(spec["statuses"])
    expected = sorted(
        (_summary(runs[name], a) for name in want),
        key=lambda s: (s.started_at, s.id),
        reverse=True,
    )
    for scope in (a, SYSTEM):
        page = await k.b.runs.list_runs(scope, RunListQuery(limit=10, **options))
        k.eq(list(page.runs), expected, f"list_runs({scope}, {case})")
        k.eq(page.has_more, False, f"list_runs({scope}, {case}).has_more")
    loose = await k.b.runs.list_runs(TENANTLESS, RunListQuery(limit=10, **options))
    k.eq(loose.runs, (), "the filter never widens the scope")
    # paging respects the filter: has_more counts only matching rows
    if len(expected) >= 2:
        first = await k.b.runs.list_runs(a, RunListQuery(limit=len(expected) - 1, **options))
        k.eq(list(first.runs), expected[:-1], f"first filtered page ({case})")
        k.eq(first.has_more, True, "more matching rows remain")
        rest = await k.b.runs.list_runs(
            a, RunListQuery(limit=len(expected), before=first.next_before, **options)
        )
        k.eq((list(rest.runs), rest.has_more), (expected[-1:], False), "last filtered page")


BAD_QUERIES: dict[str, Any] = {
    "limit-zero": lambda: RunListQuery(limit=0),
    "limit-negative": lambda: RunListQuery(limit=-3),
    "limit-bool": lambda: RunListQuery(limit=True),
    "statuses-empty": lambda: RunListQuery(statuses=frozenset()),
    "statuses-created": lambda: RunListQuery(statuses=frozenset({RunStatus.CREATED})),
    "statuses-strings": lambda: RunListQuery(statuses=frozenset({"bogus"})),  # type: ignore[arg-type]
}


@invariant("RUN-LIST-FILTERS")
@pytest.mark.parametrize("case", sorted(BAD_QUERIES))
async def test_bad_list_query_raises(docket_kit: Kit, case: str) -> None:
    k = docket_kit
    await seed(k, TENANTLESS)
    query = BAD_QUERIES[case]()
    await k.raises_async(
        ValueError, lambda: k.b.runs.list_runs(SYSTEM, query), f"list_runs({case})"
    )
