"""Durability (``Feature.DURABLE``, ``Feature.DURABLE_FSYNC``): FEATURE-DURABLE-REOPEN,
FEATURE-DURABLE-FSYNC.

``durable``: close the backend, open a new one on the same store (the same URL, or the
factory called with the same ``namespace``), and everything reads back — runs with their
operational state, events, graphs, listings — and a live claim still commits.
``durable.fsync``: a child process holding the store is SIGKILLed right after a commit
is acknowledged; the commit is there when the store is opened again. (The kit cannot
cut a machine's power; a store that acknowledges before its write is durable fails
here the same way.) Without the feature these cases check nothing (the kit's summary
says "not declared").
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

from docket.contract import (
    Backend,
    EventListQuery,
    Feature,
    GraphListQuery,
    RunListQuery,
    Terminal,
)
from docket.records import SYSTEM, TENANTLESS, OwnerScope, RunStatus
from docket_contract_tests.fixtures import (
    claimed,
    commit_claimed_ok,
    commit_unclaimed_ok,
    events_for,
    graph_document,
    graph_ref,
    save_graph,
    seed,
    seed_claimed,
    successor,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant

CHILD_TIMEOUT = 45.0


async def _everything(k: Kit, backend: Backend, runs: list[tuple[OwnerScope, str]]) -> object:
    """What a reader can see of the case's runs and graphs, in one comparable value."""
    seen: list[object] = []
    for owner, run_id in runs:
        seen.append(await backend.runs.inspect_run(owner, run_id))
        seen.append(await backend.events.list_events(owner, run_id, EventListQuery(limit=100)))
    seen.append(await backend.runs.list_runs(SYSTEM, RunListQuery(limit=100)))
    for owner in (TENANTLESS, k.tenant("a")):
        ref = graph_ref(graph_document(k.name("g")))
        seen.append(await backend.graphs.fetch_graph(owner, ref))
        seen.append(
            await backend.graphs.list_graph_versions(owner, ref.graph_id, GraphListQuery(limit=9))
        )
    return seen


@invariant("FEATURE-DURABLE-REOPEN")
async def test_a_closed_store_reads_back_whole(docket_kit: Kit) -> None:
    k = docket_kit
    if not k.declares(Feature.DURABLE):
        return
    a = k.tenant("a")
    live, lease = await seed_claimed(k, TENANTLESS, events=2)
    step = successor(live, k.at(1), new_events=1)
    await commit_claimed_ok(
        k, TENANTLESS, claimed(step, lease.claim_token), events_for(step, k.at(1), [3])
    )
    later = await seed(k, a, k.name("later"), wake_at=k.at(3600), events=1)
    await save_graph(k, TENANTLESS, "g2", variant=2)
    done = await seed(k, TENANTLESS, k.name("done"), wake_at=k.at(7200))
    finish = successor(done, k.at(2), status=RunStatus.DONE)
    await commit_unclaimed_ok(k, TENANTLESS, unclaimed(finish, wake=Terminal()))
    runs: list[tuple[OwnerScope, str]] = [
        (TENANTLESS, live.id),
        (a, later.id),
        (TENANTLESS, done.id),
    ]
    before = await _everything(k, k.b, runs)
    await k.b.close()
    again = await k.reopened()
    k.eq(await _everything(k, again, runs), before, "the store read back after close + open")
    nxt = successor(step, k.at(2))
    got = await again.transitions.commit_claimed(TENANTLESS, claimed(nxt, lease.claim_token), [])
    k.eq(got, nxt, "the claim taken before the close still commits")
    batch = await k.claim(k.at(3601), limit=5, backend=again)
    k.check(later.id in {x.run_id for x in batch.leases}, "the reopened store hands out due work")


@invariant("FEATURE-DURABLE-FSYNC")
async def test_an_acknowledged_commit_survives_sigkill(docket_kit: Kit) -> None:
    k = docket_kit
    if not k.declares(Feature.DURABLE_FSYNC):
        return
    source = k.subject.source
    k.check(source is not None, "the kit does not know how to open the store in a child")
    assert source is not None
    run_id = k.name("fsync")
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "docket_contract_tests.durable_child",
        source[0],
        source[1],
        k.ns,
        run_id,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), CHILD_TIMEOUT)
        if line.startswith(b"committed"):
            os.kill(child.pid, signal.SIGKILL)  # right after the acknowledgement
    finally:
        if child.returncode is None:
            child.kill()
        _, err = await child.communicate()
    k.eq(
        line.decode().split(),
        ["committed", "2", "3"],
        f"the child acknowledged its commit (exit {child.returncode}; stderr tail: "
        f"{err.decode()[-2000:]!r})",
    )
    k.eq(child.returncode, -signal.SIGKILL, "the child was SIGKILLed")
    again = await k.reopened()
    info = await k.info(TENANTLESS, run_id, again)
    k.eq(
        (info.run.checkpoint_seq, info.run.event_seq),
        (2, 3),
        "the acknowledged commit is there after the SIGKILL",
    )
    events = await k.events(TENANTLESS, run_id, again)
    k.eq([e.seq for e in events], [1, 2, 3], "its events are there")
