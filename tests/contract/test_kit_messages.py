"""The contract kit's failure messages name the fields that differ, not two whole reprs."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import attrs
import pytest
from docket_contract_tests.fixtures import seed
from docket_contract_tests.kit import CLOCK_START, Kit, KitFailure, Subject, field_diff

from docket.clock import ManualClock
from docket.contract.memory import MemoryBackend
from docket.records import TENANTLESS, RunStatus, RunSummary


def test_a_changed_run_info_is_reported_field_by_field() -> None:
    async def scenario() -> str:
        clock = ManualClock(CLOCK_START)
        subject = Subject(backend=MemoryBackend(clock=clock), namespace="m", clock=clock)
        subject.t0 = CLOCK_START
        kit = Kit(subject, "EXAMPLE-ID")
        run = await seed(kit, TENANTLESS)
        before = await kit.snapshot(TENANTLESS, run.id)
        await kit.claim_one(kit.t0, run.id)
        with pytest.raises(KitFailure) as failed:
            await kit.unchanged(TENANTLESS, run.id, before, "after a rejection")
        return str(failed.value)

    message = asyncio.run(scenario())
    assert message.startswith("[EXAMPLE-ID] after a rejection: RunInfo changed")
    lines = message.splitlines()[1:]
    assert lines == [
        f"  wake_at: None != {CLOCK_START!r}",
        f"  claimed_at: {CLOCK_START!r} != None",
        "  claim_attempts: 1 != 0",
    ]
    assert "RunInfo(" not in message  # not two whole reprs


def test_nested_records_and_sequences_name_their_path() -> None:
    base = RunSummary(
        id="r",
        tenant_id=None,
        graph_id="g",
        graph_hash="h",
        status=RunStatus.RUNNING,
        step=0,
        checkpoint_seq=1,
        started_at=CLOCK_START,
        updated_at=CLOCK_START,
        finished_at=None,
    )
    moved = attrs.evolve(base, step=2, updated_at=CLOCK_START + timedelta(seconds=1))
    assert field_diff((base, base), (base, moved)) == [
        "[1].step: 0 != 2",
        f"[1].updated_at: {CLOCK_START!r} != {CLOCK_START + timedelta(seconds=1)!r}",
    ]
    assert field_diff((base,), ()) == ["items length: 1 != 0"]
    assert field_diff(base, "not a record") == []
