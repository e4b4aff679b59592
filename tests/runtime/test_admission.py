"""Admission limits in the runtime (docket/runtime/admission.py): the encoding of a held
start, and a worker's reconcile pass healing what a crashed caller left — a promotion
nobody initialised, a terminal run nobody released, a raised limit — without starting
a start admitted longer ago than ``admission_grace``."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from docket import errors
from docket.contract import errors as contract
from docket.contract.protocols import AdmissionStore
from docket.records import TENANTLESS, Tenant
from docket.runtime.admission import (
    ADMISSION_METADATA,
    Admissions,
    StartDecodeError,
    decode_start,
    encode_start,
)
from docket.runtime.lifecycle import CommitPolicy
from tests.runtime.admission_app import ADMISSION_KINDS, ledger, single
from tests.runtime.queue_app import docket_on, recording


def admission_store(docket: object) -> AdmissionStore:
    store: AdmissionStore = docket.backend.admissions  # type: ignore[attr-defined]
    return store


def test_a_start_round_trips_and_garbage_is_a_typed_error() -> None:
    async def scenario() -> None:
        async with docket_on("memory", []) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("onb", admission_limit=1)
            await docket.start_run(ref, queue="onb")
            held = await docket.start_run(ref, {}, queue="onb", priority=3, metadata={"m": 1})
            entry = (await docket.admissions("onb")).held[0]
            start = decode_start(entry.start)
            assert start.owner == TENANTLESS
            assert (start.proposal.queue, start.proposal.priority) == ("onb", 3)
            assert start.proposal.run.id == held.id
            assert start.proposal.run.metadata == {"m": 1, ADMISSION_METADATA: "onb"}
            again = encode_start(start.owner, start.proposal, start.events)
            assert again == entry.start
            tenant = decode_start(encode_start(Tenant("t"), start.proposal, start.events))
            assert tenant.owner == Tenant("t")
        for garbage in (
            b"",
            b"[]",
            b'{"v": 2}',
            b'{"v": 1}',
            entry.start.replace(b'"v":1', b'"v":"1"'),
        ):
            with pytest.raises(StartDecodeError) as caught:
                decode_start(garbage)
            assert isinstance(caught.value, errors.CorruptData)

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_reconcile_starts_a_promotion_whose_promoter_died(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, [], admission_reconcile=0.2) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("onb", admission_limit=1)
            first = await docket.start_run(ref, queue="onb")
            held = await docket.start_run(ref, queue="onb")
            # a worker ended `first` and died before initialising what that promoted
            promoted = await admission_store(docket).finish_admitted("onb", [first.id])
            assert [s.run_id for s in promoted] == [held.id]
            found = await docket.backend.runs.fetch_run(TENANTLESS, held.id)
            assert isinstance(found, contract.NotFound)
            async with docket.worker():
                for run in (first, held):
                    assert (await docket.await_run(run.id, timeout=60)).status.value == "done"
            assert await ledger(docket, "onb") == ([], [])

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_reconcile_releases_a_terminal_run_whose_finisher_died(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with docket_on(kind, [], admission_reconcile=0.2) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("onb", admission_limit=1)
            first = await docket.start_run(ref, queue="onb")
            held = await docket.start_run(ref, queue="onb")
            lost: list[str] = []

            async def crashed(self: Admissions, before: object, after: object) -> None:
                lost.append(getattr(after, "id", ""))  # the commit's caller died here

            with monkeypatch.context() as patch:
                patch.setattr(Admissions, "finished", crashed)
                while (await docket.drain_due()).drained:
                    pass
            assert lost == [first.id]
            assert (await docket.inspect_run(held.id)).run.status.value == "queued"
            async with docket.worker():
                done = await docket.await_run(held.id, timeout=60)
            assert done.status.value == "done"
            assert await ledger(docket, "onb") == ([], [])

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_reconcile_promotes_after_a_raised_limit(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, [], admission_reconcile=0.2) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("onb", admission_limit=1)
            later = datetime.now(UTC) + timedelta(hours=1)
            parked = await docket.start_run(ref, queue="onb", start_at=later)
            runs = [await docket.start_run(ref, queue="onb") for _ in range(2)]
            assert [r.status.value for r in runs] == ["queued", "queued"]
            await docket.configure_queue("onb", admission_limit=3)
            # no run ends (the admitted one starts in an hour): only the worker's
            # reconcile can admit the held starts
            async with docket.worker(concurrency=1):
                for run in runs:
                    assert (await docket.await_run(run.id, timeout=60)).status.value == "done"
            assert await ledger(docket, "onb") == ([parked.id], [])

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_an_admitted_start_older_than_the_grace_is_released_not_started(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, [], admission_reconcile=0.2, admission_grace=0.05) as docket:
            ref = await docket.save_graph(recording(0.0))
            await docket.configure_queue("onb", admission_limit=1)
            first = await docket.start_run(ref, queue="onb")
            held = await docket.start_run(ref, queue="onb")
            await admission_store(docket).finish_admitted("onb", [first.id])
            # older than the grace when reconcile sees it (reconcile waits 0.2 s at least):
            # its run may have ended and been removed by retention; it must not run twice
            async with docket.worker():
                await wait_for_ledger_empty(docket)
            with pytest.raises(errors.NotFound):
                await docket.inspect_run(held.id)

    asyncio.run(scenario())


async def wait_for_ledger_empty(docket: object) -> None:
    from docket import Docket

    assert isinstance(docket, Docket)
    for _ in range(6000):
        if await ledger(docket, "onb") == ([], []):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the ledger still holds {await ledger(docket, 'onb')}")


def test_release_without_the_feature_does_nothing() -> None:
    async def scenario() -> None:
        from tests.runtime.admission_app import NoAdmission

        backend = NoAdmission()
        admissions = Admissions(backend, CommitPolicy(attempts=1, backoff=0.01))
        assert admissions.store is None
        assert await admissions.release("onb", ["r"]) == 0

    asyncio.run(scenario())


@pytest.mark.parametrize("kind", ADMISSION_KINDS)
def test_a_failed_run_and_a_run_past_its_deadline_free_their_counts(kind: str) -> None:
    async def scenario() -> None:
        async with docket_on(kind, []) as docket:
            boom = await docket.save_graph(single("boom", "admission.boom"))
            nap = await docket.save_graph(single("nap", "admission.nap"))
            ok = await docket.save_graph(recording(0.0))
            await docket.configure_queue("onb", admission_limit=1)
            failing = await docket.start_run(boom, queue="onb")
            napping = await docket.start_run(nap, queue="onb", timeout=timedelta(seconds=1))
            last = await docket.start_run(ok, queue="onb")
            assert [napping.status.value, last.status.value] == ["queued", "queued"]
            async with docket.worker():
                assert (await docket.await_run(failing.id, timeout=60)).status.value == "failed"
                # a waiting run is unfinished: it keeps its count until its deadline fails it
                waiting = await docket.await_run(napping.id, timeout=60)
                if waiting.status.value == "waiting":
                    assert (await docket.inspect_run(last.id)).run.status.value == "queued"
                assert (await docket.await_run(last.id, timeout=60)).status.value == "done"
            ended = await docket.inspect_run(napping.id)
            assert ended.run.status.value == "failed"
            assert ended.run.failure is not None and "deadline" in ended.run.failure.code
            assert await ledger(docket, "onb") == ([], [])

    asyncio.run(scenario())
