"""Helpers of the admission-limit tests (runtime and facade).

``ADMISSION_KINDS``: the backends of ``tests.fuzz.backends`` that declare
``Feature.ADMISSION`` (read from their capabilities without opening them, as
``QUEUE_KINDS``), so these tests run on every backend as soon as it declares admission.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

import attrs

from docket import Docket, Sleep
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.memory import MemoryBackend
from docket.contract.registry import from_url
from docket.graph.builder import GraphBuilder
from docket.graph.model import FINISH, START, Graph
from docket.graph.nodes import NodeContext, NodeState, RetryPolicy
from docket.graph.schema import S
from docket.records import RunStatus
from tests.fuzz.backends import KINDS
from tests.runtime.queue_app import _PROBES, NODES


def declares_admission(kind: str) -> bool:
    return Feature.ADMISSION in from_url(_PROBES[kind]).capabilities().features


ADMISSION_KINDS: Final = tuple(kind for kind in KINDS if declares_admission(kind))


class NoAdmission(MemoryBackend):
    """A real memory backend that declares queues but not admission."""

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return attrs.evolve(caps, features=caps.features - {Feature.ADMISSION})


async def statuses(docket: Docket, run_ids: list[str]) -> list[RunStatus]:
    return [(await docket.inspect_run(run_id)).run.status for run_id in run_ids]


async def ledger(docket: Docket, queue: str) -> tuple[list[str], list[str]]:
    """The admitted and held run ids of ``queue`` (admitted by seq, held in promotion
    order)."""
    view = await docket.admissions(queue)
    return [s.run_id for s in view.admitted], [s.run_id for s in view.held]


@NODES.node("admission.boom")
def _boom(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    raise RuntimeError("boom")


@NODES.node("admission.nap")
def _nap(state: NodeState, ctx: NodeContext) -> Sleep:
    return Sleep(for_=timedelta(days=7))


def single(graph_id: str, implementation: str) -> Graph:
    """One node of ``implementation`` (tried once) between START and FINISH."""
    builder = GraphBuilder(graph_id).field("out", S.string())
    builder.node("work", implementation, retry=RetryPolicy(max_attempts=1, backoff_ms=0))
    return builder.edge("go", START, "work").edge("end", "work", FINISH).build()
