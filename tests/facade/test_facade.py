"""The Docket facade (runtime-spec §12, cases 47-54) on real SQLite files (and the
reference backend where a manual clock is needed)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from datetime import timedelta
from pathlib import Path

import pytest

from docket import Docket, GraphBuilder, NodeRegistry, Settings, SyncDocket, errors
from docket.contract.memory import MemoryBackend
from docket.contract.proposals import ClaimPolicy
from docket.graph.model import FINISH, START
from docket.graph.nodes import NodeContext, NodeState
from docket.graph.schema import S
from docket.records import TENANTLESS, Checkpoint, EventType, GraphRef, RunStatus
from docket.runtime.lifecycle import CommitContext
from tests.core import fixtures as fx
from tests.runtime.helpers import later, memory_docket


def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'app.db'}"


def rows(tmp_path: Path) -> dict[str, int]:
    """How many rows each docket table holds (read straight from the file)."""
    with sqlite3.connect(f"file:{tmp_path / 'app.db'}?mode=ro", uri=True) as conn:
        return {
            table: int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
            for table in ("docket_graphs", "docket_runs", "docket_events", "docket_transitions")
        }


def test_start_fetch_inspect_cancel_await_and_observers(tmp_path: Path) -> None:
    seen: list[tuple[str, str]] = []
    release = asyncio.Event()

    def failing(checkpoint: Checkpoint, context: CommitContext) -> None:
        raise RuntimeError("an observer that fails does not matter")

    async def blocking(checkpoint: Checkpoint, context: CommitContext) -> None:
        await release.wait()

    def recording(checkpoint: Checkpoint, context: CommitContext) -> None:
        seen.append((str(checkpoint.type), context.operation))

    async def scenario() -> None:
        docket = Docket(url(tmp_path), nodes=fx.NODES, observers=[failing, blocking, recording])
        async with docket:
            ref = await docket.save_graph(fx.interrupt_review())
            started_at = time.monotonic()
            run = await docket.start_run(ref, run_id="r")
            assert time.monotonic() - started_at < 1  # the blocking observer is not awaited
            assert run.status is RunStatus.RUNNING and run.checkpoint_seq == 1
            assert await docket.fetch_run("r") == run
            info = await docket.inspect_run("r")
            assert info.wake_at is not None and info.claimed_at is None
            cancelled = await docket.cancel_run("r")
            assert cancelled.status is RunStatus.CANCELLED
            assert await docket.await_run("r", timeout=0) == cancelled
            await asyncio.sleep(0.2)
            release.set()
        # deliveries run concurrently (sync observers in threads): no order is promised
        assert sorted(seen) == [("run_cancelled", "signal"), ("run_initialized", "start")]

    asyncio.run(scenario())


DEFAULTS = NodeRegistry()


@DEFAULTS.node("tone", config=S.object({"tone": S.string(default="warm")}))
def tone(state: NodeState, ctx: NodeContext) -> dict[str, str]:
    return {"out": str(ctx.config["tone"])}


def toned(config: dict[str, object] | None = None) -> GraphBuilder:
    return (
        GraphBuilder("toned")
        .field("out", S.string())
        .node("t", "tone", config=config or {})  # type: ignore[arg-type]
        .edge("go", START, "t")
        .edge("end", "t", FINISH)
        .output("out")
    )


def test_publication_materialises_config_defaults_before_hashing(tmp_path: Path) -> None:
    cooler = NodeRegistry()
    cooler.add("tone", tone.fn, config=S.object({"tone": S.string(default="cool")}))

    async def scenario() -> None:
        async with (
            Docket(url(tmp_path), nodes=DEFAULTS) as docket,
            Docket(url(tmp_path), nodes=cooler) as newer,
        ):
            implicit = await docket.save_graph(toned().build())
            explicit = await docket.save_graph(toned({"tone": "warm"}).build())
            assert implicit == explicit  # the default was written into the document
            stored = await docket.fetch_graph(implicit)
            assert stored.nodes["t"].config == {"tone": "warm"}
            changed = await newer.save_graph(toned().build())
            assert changed != implicit  # a changed default is a new graph version
            # a run of the old version keeps the old default, whoever executes it
            await newer.start_run(implicit, run_id="old")
            await newer.drain_due()
            assert (await newer.fetch_run("old")).output == {"out": "warm"}
            before = rows(tmp_path)
            with pytest.raises(errors.InvalidGraph) as bad:
                await docket.save_graph(toned({"tone": 5}).build())
            assert bad.value.details["diagnostics"]
            assert rows(tmp_path) == before

    asyncio.run(scenario())


def test_a_durable_resolve_commits_three_events(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Docket(url(tmp_path), nodes=fx.NODES) as docket:
            ref = await docket.save_graph(fx.interrupt_review("ask"))
            await docket.start_run(ref, run_id="r")
            await docket.drain_due()
            waiting = await docket.fetch_run("r")
            assert waiting.status is RunStatus.WAITING
            resolved = await docket.resolve_interrupt("r", "ask", "approved")
            assert resolved.status is RunStatus.RUNNING
            assert str(resolved.interrupts["ask"].status) == "resolved"
            page = await docket.list_events("r", after_seq=waiting.event_seq)
            assert [e.type for e in page.events] == [
                EventType.INTERRUPT_RESOLVED,
                EventType.CHANNEL_UPDATED,
                EventType.CHECKPOINT_COMMITTED,
            ]
            with pytest.raises(errors.AlreadyResolved):
                await docket.resolve_interrupt("r", "ask", "again")
            await docket.drain_due()
            done = await docket.fetch_run("r")
            assert done.output == {"applied": "approved"}
            with pytest.raises(errors.InactiveRun):
                await docket.resolve_interrupt("r", "ask", "too late")
            with pytest.raises(errors.InactiveRun):
                await docket.cancel_run("r")

    asyncio.run(scenario())


def test_tenant_mode_required(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Docket(url(tmp_path), nodes=fx.NODES, tenant_mode="required") as docket:
            graph = fx.interrupt_review("ask")
            for call in (
                lambda: docket.save_graph(graph),
                lambda: docket.list_runs(),
                lambda: docket.fetch_run("x", tenant_id=""),
            ):
                with pytest.raises(errors.InvalidTenant):
                    await call()
            ref_a = await docket.save_graph(graph, tenant_id="a")
            ref_b = await docket.save_graph(graph, tenant_id="b")
            assert ref_a == ref_b  # the same graph, published by two tenants
            with pytest.raises(errors.InvalidTenant):
                await docket.start_run(ref_a)
            await docket.start_run(ref_a, run_id="r", tenant_id="a")
            await docket.start_run(ref_b, run_id="r", tenant_id="b")  # a separate run
            await docket.drain_due()
            before = rows(tmp_path)
            for foreign in (
                lambda: docket.fetch_run("r", tenant_id="c"),
                lambda: docket.inspect_run("r", tenant_id="c"),
                lambda: docket.cancel_run("r", tenant_id="c"),
                lambda: docket.resolve_interrupt("r", "ask", "yes", tenant_id="c"),
                lambda: docket.retry_poisoned_run("r", tenant_id="c"),
                lambda: docket.await_run("r", timeout=0, tenant_id="c"),
                lambda: docket.list_events("r", tenant_id="c"),
                lambda: docket.fetch_graph(ref_a, tenant_id="c"),
                lambda: docket.latest_graph_ref(ref_a.graph_id, tenant_id="c"),
                lambda: docket.start_run(ref_a, tenant_id="c"),
            ):
                with pytest.raises(errors.NotFound):
                    await foreign()
            assert rows(tmp_path) == before
            await docket.resolve_interrupt("r", "ask", "yes", tenant_id="a")
            assert (await docket.fetch_run("r", tenant_id="b")).status is RunStatus.WAITING
            page = await docket.list_runs(tenant_id="a")
            assert [(s.id, s.tenant_id) for s in page.runs] == [("r", "a")]
            everyone = await docket.list_runs(all_tenants=True)
            assert sorted(s.tenant_id or "" for s in everyone.runs) == ["a", "b"]
        async with Docket(url(tmp_path), nodes=fx.NODES) as tenantless:
            with pytest.raises(errors.InvalidTenant):
                await tenantless.fetch_run("r", tenant_id="a")
            with pytest.raises(errors.NotFound):
                await tenantless.fetch_run("r")  # tenant rows are invisible without a tenant

    asyncio.run(scenario())


def test_save_is_idempotent_and_a_forged_hash_is_not_found(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Docket(url(tmp_path), nodes=fx.NODES) as docket:
            first = await docket.save_graph(fx.minimal_linear())
            versions = await docket.list_graph_versions(first.graph_id)
            assert await docket.save_graph(fx.minimal_linear()) == first
            assert await docket.list_graph_versions(first.graph_id) == versions
            assert len(versions.versions) == 1
            assert await docket.latest_graph_ref(first.graph_id) == first
            forged = GraphRef(first.graph_id, "0" * 64)
            with pytest.raises(errors.NotFound):
                await docket.start_run(forged, {"value": "v"})
            run = await docket.start_run(first.graph_id, {"value": "v"})  # by id: the latest
            assert run.graph_hash == first.graph_hash

    asyncio.run(scenario())


def test_refused_requests_write_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with Docket(url(tmp_path), nodes=fx.NODES) as docket:
            broken = fx.minimal_linear().put_edge("dangling", "copy", "nowhere")
            with pytest.raises(errors.InvalidGraph) as bad_graph:
                await docket.save_graph(broken)
            assert bad_graph.value.details["diagnostics"]
            assert rows(tmp_path)["docket_graphs"] == 0

            ref = await docket.save_graph(fx.minimal_linear())
            baseline = rows(tmp_path)
            for input, reason in (
                ({"value": 5}, 'input "value"'),
                ({}, 'required input "value" is missing'),
                ({"value": "v", "extra": 1}, 'unknown input "extra"'),
                ({"value": None}, 'required input "value" is null'),
            ):
                with pytest.raises(errors.InvalidInput) as bad_input:
                    await docket.start_run(ref, input)
                assert any(reason in r for r in bad_input.value.reasons), bad_input.value.reasons
            with pytest.raises(errors.InvalidInput):
                await docket.start_run(ref, {"value": "v"}, metadata={"at": object()})
            for call in (
                lambda: docket.fetch_run("ghost"),
                lambda: docket.inspect_run("ghost"),
                lambda: docket.cancel_run("ghost"),
                lambda: docket.resolve_interrupt("ghost", "i", "v"),
                lambda: docket.retry_poisoned_run("ghost"),
                lambda: docket.await_run("ghost", timeout=0),
                lambda: docket.list_events("ghost"),
            ):
                with pytest.raises(errors.NotFound):
                    await call()
            assert rows(tmp_path) == baseline

            review = await docket.save_graph(fx.interrupt_review("ask"))
            await docket.start_run(review, run_id="r")
            await docket.drain_due()
            waiting = await docket.fetch_run("r")
            frozen = rows(tmp_path)
            with pytest.raises(errors.InvalidInput) as bad_value:
                await docket.resolve_interrupt("r", "ask", 42)  # the schema wants a string
            assert bad_value.value.reasons
            with pytest.raises(errors.NotFound) as no_interrupt:
                await docket.resolve_interrupt("r", "nope", "v")
            assert no_interrupt.value.details["what"] == "interrupt"
            with pytest.raises(errors.Conflict):
                await docket.start_run(review, run_id="r")
            assert await docket.fetch_run("r") == waiting
            assert rows(tmp_path) == frozen

    asyncio.run(scenario())


def test_a_poisoned_run_fails_await_at_once_and_can_be_retried() -> None:
    async def scenario() -> None:
        docket, backend, clock = memory_docket(max_claim_attempts=1, claim_ttl=5)
        async with docket:
            ref = await docket.save_graph(fx.minimal_linear())
            await docket.start_run(ref, {"value": "v"}, run_id="r")
            policy = ClaimPolicy(limit=1, orphan_ttl=timedelta(seconds=5), max_claim_attempts=1)
            await backend.runs.claim_due(policy)  # a worker that dies
            later(clock, 6)
            summary = await docket.drain_due()
            assert [p.run_id for p in summary.poisoned] == ["r"]
            started = time.monotonic()
            with pytest.raises(errors.RunPoisoned) as poisoned:
                await docket.await_run("r", timeout=1000)
            assert time.monotonic() - started < 1
            assert poisoned.value.info.poison_reason == "max_claim_attempts_exceeded"
            again = await docket.retry_poisoned_run("r")
            assert again == await docket.fetch_run("r")
            info = await docket.inspect_run("r")
            assert not info.poisoned and info.claim_attempts == 0 and info.wake_at is not None
            await docket.drain_due()
            assert (await docket.await_run("r", timeout=0)).status is RunStatus.DONE
            with pytest.raises(errors.InactiveRun):
                await docket.retry_poisoned_run("r")

    asyncio.run(scenario())


def test_listing_runs_and_events_pages_and_validates() -> None:
    async def scenario() -> None:
        docket, _, clock = memory_docket()
        async with docket:
            linear = await docket.save_graph(fx.minimal_linear())
            review = await docket.save_graph(fx.interrupt_review())
            for index in range(5):
                later(clock, 1)
                ref = linear if index % 2 == 0 else review
                value = {"value": "v"} if ref == linear else {}
                await docket.start_run(ref, value, run_id=f"r{index}")
            await docket.drain_due()
            first = await docket.list_runs(limit=2)
            assert [s.id for s in first.runs] == ["r4", "r3"] and first.has_more
            second = await docket.list_runs(limit=2, before=first.next_before)
            assert [s.id for s in second.runs] == ["r2", "r1"] and second.has_more
            third = await docket.list_runs(limit=2, before=second.next_before)
            assert [s.id for s in third.runs] == ["r0"] and not third.has_more
            done = await docket.list_runs(status="done")
            assert [s.id for s in done.runs] == ["r4", "r2", "r0"]
            waiting = await docket.list_runs(status=["waiting"], graph_id="interrupt_review")
            assert [s.id for s in waiting.runs] == ["r3", "r1"]
            for bad in (
                lambda: docket.list_runs(limit=0),
                lambda: docket.list_runs(limit=1001),
                lambda: docket.list_runs(status="created"),
                lambda: docket.list_runs(status="sleeping"),
                lambda: docket.list_runs(status="queued"),  # not stored: see admissions()
                lambda: docket.list_runs(status=[]),
                lambda: docket.list_runs(graph_id=""),
                lambda: docket.list_events("r0", after_seq=-1),
                lambda: docket.list_events("r0", limit=0),
                lambda: docket.await_run("r0", timeout=-1),
                lambda: docket.drain_due(max_runs=0),
            ):
                with pytest.raises(errors.InvalidOptions):
                    await bad()
            events = await docket.list_events("r0", after_seq=1, limit=2)
            assert [e.seq for e in events.events] == [2, 3]
            assert events.next_after_seq == 3 and events.has_more
            assert events.oldest_available_seq == 1
            run = await docket.fetch_run("r0")
            assert events.latest_seq == events.latest_available_seq == run.event_seq
            assert len(await docket.history("r0")) == run.event_seq

    asyncio.run(scenario())


def test_settings_backends_and_lifecycle_are_checked_up_front(tmp_path: Path) -> None:
    for bad in (
        {"claim_ttl": 0},
        {"poll_interval": -1},
        {"concurrency": 0},
        {"node_timeout": 120, "max_attempt_time": 60},
        {"drain_max_moments": 1.5},
        {"no_such_setting": 1},
    ):
        with pytest.raises(errors.InvalidSettings):
            Docket("memory://", **bad)
    assert Settings().recovery_bound == 31.0
    with pytest.raises(errors.InvalidBackend):
        Docket("nosuch://x")
    with pytest.raises(errors.InvalidBackend):
        Docket("sqlite://host/app.db")
    with pytest.raises(errors.InvalidTenant):
        Docket("memory://", tenant_mode="sometimes")  # type: ignore[arg-type]

    class NotABackend:
        pass

    async def scenario() -> None:
        with pytest.raises(errors.InvalidBackend):
            await Docket(NotABackend()).open()  # type: ignore[arg-type]
        docket = Docket(url(tmp_path), nodes=fx.NODES)
        with pytest.raises(errors.RuntimeUnavailable):
            await docket.fetch_run("r")
        async with docket:
            assert "durable" in docket.capabilities.features
        with pytest.raises(errors.RuntimeUnavailable):
            await docket.fetch_run("r")
        with pytest.raises(errors.RuntimeUnavailable):
            await docket.open()
        # a backend object you pass in stays yours: closing the Docket leaves it open
        backend = MemoryBackend()
        async with Docket(backend, nodes=fx.NODES) as borrowed:
            await borrowed.save_graph(fx.minimal_linear())
        found = await backend.graphs.fetch_latest_graph_ref(TENANTLESS, "minimal_linear")
        assert isinstance(found, GraphRef)

    asyncio.run(scenario())


def test_the_sync_docket_runs_a_background_worker_and_raises_typed_errors(
    tmp_path: Path,
) -> None:
    with SyncDocket(url(tmp_path), nodes=fx.NODES, poll_interval=0.2) as docket:
        ref = docket.save_graph(fx.interrupt_review("ask"))
        docket.start_worker()
        run = docket.start_run(ref, run_id="r")
        assert docket.await_run(run.id, timeout=10).status is RunStatus.WAITING
        with pytest.raises(errors.InvalidInput):
            docket.resolve_interrupt("r", "ask", 42)
        docket.resolve_interrupt("r", "ask", "approved")
        done = docket.await_run("r", timeout=10)
        assert done.output == {"applied": "approved"}
        stats = docket.stop_worker()
        assert stats is not None and stats.leases == 2
        assert [s.id for s in docket.list_runs().runs] == ["r"]
    with pytest.raises(errors.RuntimeUnavailable):
        docket.fetch_run("r")
