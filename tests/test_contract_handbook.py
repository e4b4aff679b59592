"""The backend author's handbook (docs/contract.md) holds up against the code.

Its links land on real sections, every core store operation's docstring points at one,
its factory example is the shape ``from_url`` calls, and its hand-back table is what the
reference backend does.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from docket.clock import ManualClock
from docket.contract import (
    AbandonPolicy,
    Backoff,
    ClaimBatch,
    ClaimPolicy,
    InitProposal,
    Poisoned,
    Rescheduled,
)
from docket.contract.errors import POISON_MAX_ABANDONS
from docket.contract.memory import MemoryBackend
from docket.contract.protocols import STORE_PROTOCOLS
from docket.contract.registry import BackendFactory
from docket.records import TENANTLESS, GraphRef, Run, RunInfo, RunStatus
from docket.values import JSONDict, content_hash

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
T0 = datetime.fromisoformat("2026-07-15T12:00:00+00:00")


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors of ``page``, plus its explicit ``<a id>`` anchors."""
    text = page.read_text(encoding="utf-8")
    found = set(re.findall(r'<a id="([^"]+)"></a>', text))
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def _links(text: str, page: str) -> set[tuple[str, str]]:
    """``(page, anchor)`` of every Markdown link to a section: ``](page.md#a)``, ``](#a)``."""
    found = re.findall(r"\]\((\w+\.md)?#([\w\-]+)\)", text)
    return {(name or page, anchor) for name, anchor in found}


@pytest.mark.parametrize("page", ["contract.md", "invariants.md", "operations.md"])
def test_the_handbooks_links_land_on_sections(page: str) -> None:
    links = _links((DOCS / page).read_text(encoding="utf-8"), page)
    broken = sorted(
        f"{name}#{anchor}" for name, anchor in links if anchor not in _anchors(DOCS / name)
    )
    assert not broken, f"{page} links to sections that do not exist: {broken}"


def test_every_core_store_operation_points_at_its_docs_row() -> None:
    anchors = _anchors(DOCS / "contract.md")
    for store, protocol in STORE_PROTOCOLS.items():
        for name, member in vars(protocol).items():
            if name.startswith("_") or not inspect.iscoroutinefunction(member):
                continue
            doc = inspect.getdoc(member) or ""
            pointer = re.search(r"Docs: contract\.md#([\w\-]+)", doc)
            assert pointer is not None, f"{store}.{name} has no 'Docs: contract.md#…' line"
            assert pointer.group(1) in anchors, f"{store}.{name} points at a missing section"
            lines = [line for line in doc.splitlines() if line.strip()]
            assert 3 <= len(lines) <= 5, f"{store}.{name}: answers, fence, raises, in short"


def _factory_example() -> str:
    text = (DOCS / "contract.md").read_text(encoding="utf-8")
    section = text.split("**Your factory.**", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert match is not None, "the testing hooks show the factory"
    return match.group(1)


class _MyStore:
    def __init__(self, url: str, *, clock: object = None, limits: object = None) -> None:
        self.url, self.clock, self.limits = url, clock, limits


def test_the_documented_factory_is_what_from_url_calls() -> None:
    namespace: dict[str, Any] = {"Mapping": Mapping, "MyStore": _MyStore}
    exec(_factory_example(), namespace)
    create = namespace["_create"]
    factory = BackendFactory(name="mystore", schemes=("mystore",), create=create)
    clock = ManualClock(T0)
    built = factory.create("mystore://x", {"clock": clock})  # as registry.from_url calls it
    assert isinstance(built, _MyStore) and built.clock is clock
    with pytest.raises(TypeError, match="does not take bogus"):
        factory.create("mystore://x", {"bogus": 1})


async def _claimed(backend: MemoryBackend, now: datetime) -> str:
    batch = await backend.runs.claim_due(
        ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=60), max_claim_attempts=9, now=now)
    )
    assert isinstance(batch, ClaimBatch), batch
    return batch.leases[0].claim_token


@pytest.mark.parametrize("n", [1, 3])
def test_the_hand_back_table_is_what_the_reference_does(n: int) -> None:
    """Hand-backs 1..N reschedule, N + 1 poisons with abandons left at N; a non-poisoning
    backoff ignores retry_at and doubles from the abandons before the hand-back."""

    async def scenario() -> None:
        backend = MemoryBackend(clock=ManualClock(T0))
        document: JSONDict = {"docket": 1, "kind": "graph", "graph": {"id": "g"}}
        ref = GraphRef("g", content_hash(document))
        await backend.graphs.save_graph(TENANTLESS, ref, document)
        run = Run(
            id="r",
            graph_id="g",
            graph_hash=ref.graph_hash,
            status=RunStatus.RUNNING,
            started_at=T0,
            updated_at=T0,
            input={},
            checkpoint_seq=1,
            event_seq=0,
            metadata={},
        )
        proposal = InitProposal(transition_id="t", run=run, wake_at=T0)
        assert await backend.transitions.initialize(TENANTLESS, proposal, []) == run
        now = T0
        for _ in range(n):
            token = await _claimed(backend, now)
            policy = AbandonPolicy(
                expected_checkpoint_seq=1, retry_at=now, max_claim_abandons=n, now=now
            )
            got = await backend.runs.abandon_claim(TENANTLESS, "r", token, policy)
            assert got == Rescheduled(now)
        token = await _claimed(backend, now)
        policy = AbandonPolicy(
            expected_checkpoint_seq=1, retry_at=now, max_claim_abandons=n, now=now
        )
        got = await backend.runs.abandon_claim(TENANTLESS, "r", token, policy)
        assert got == Poisoned(now, POISON_MAX_ABANDONS)
        info = await backend.runs.inspect_run(TENANTLESS, "r")
        assert isinstance(info, RunInfo), info
        assert (info.claim_abandons, info.claim_attempts) == (n, 0)
        await backend.runs.retry_poisoned_run(TENANTLESS, "r", now)
        backoff = Backoff(base=timedelta(seconds=1), cap=timedelta(seconds=5))
        delays = []
        for _ in range(5):
            token = await _claimed(backend, now)
            policy = AbandonPolicy(
                expected_checkpoint_seq=1,
                retry_at=now + timedelta(hours=1),
                max_claim_abandons=1,
                non_poisoning=True,
                backoff=backoff,
                now=now,
            )
            got = await backend.runs.abandon_claim(TENANTLESS, "r", token, policy)
            assert isinstance(got, Rescheduled)
            delays.append((got.wake_at - now).total_seconds())
            now = got.wake_at
        assert delays == [1, 2, 4, 5, 5]

    asyncio.run(scenario())
    text = (DOCS / "contract.md").read_text(encoding="utf-8")
    assert "hand-back N + 1 poisons it" in text and "`claim_abandons == N`" in text
    assert "2^min(old, 30), backoff.cap)`" in text  # the backoff row
