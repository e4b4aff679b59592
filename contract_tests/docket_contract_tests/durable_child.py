"""The child process of FEATURE-DURABLE-FSYNC: commit, say so, then wait to be killed.

``python -m docket_contract_tests.durable_child SOURCE TARGET NAMESPACE RUN_ID`` builds
the backend (``SOURCE`` ``url``: ``TARGET`` is its URL; ``factory``: ``TARGET`` is
``module:callable``, called with ``namespace=`` when it takes it), opens it, saves a graph,
initializes ``RUN_ID`` with two events, commits one more step with a third, prints
``committed <checkpoint_seq> <event_seq>`` once that commit is acknowledged, and then
blocks on stdin: the kit SIGKILLs it there, with nothing closed or flushed.
"""

from __future__ import annotations

import asyncio
import inspect
import sys

from docket.contract import Backend, Immediate
from docket.contract.registry import from_url
from docket.records import TENANTLESS, Run
from docket_contract_tests.fixtures import (
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)
from docket_contract_tests.plugin import _load_factory


def _build(source: str, target: str, namespace: str) -> Backend:
    if source == "url":
        return from_url(target)
    factory = _load_factory(target)
    takes = inspect.signature(factory).parameters
    return factory(namespace=namespace) if "namespace" in takes else factory()


async def _main(source: str, target: str, namespace: str, run_id: str) -> None:
    backend = _build(source, target, namespace)
    await backend.open()
    now = await backend.now()
    document = graph_document(f"{namespace}-durable")
    ref = graph_ref(document)
    await backend.graphs.save_graph(TENANTLESS, ref, document)
    run = new_run(run_id, ref, now, event_seq=2)
    started = await backend.transitions.initialize(
        TENANTLESS, init_proposal(run, now), events_for(run, now, [1, 2])
    )
    assert isinstance(started, Run), started
    step = successor(run, now, new_events=1)
    done = await backend.transitions.commit_unclaimed(
        TENANTLESS, 1, unclaimed(step, wake=Immediate()), events_for(step, now, [3])
    )
    assert isinstance(done, Run), done
    print(f"committed {done.checkpoint_seq} {done.event_seq}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(_main(*sys.argv[1:5]))
