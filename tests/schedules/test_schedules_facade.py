"""The facade's schedule methods: bad input is a typed error and stores nothing, pinning,
pause/resume without catch-up, manual triggers, the feature check, and the sync twins."""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta

import attrs
import pytest

from docket import SyncDocket, errors
from docket._facade_schedules import ScheduleMethods
from docket._sync_schedules import SyncScheduleMethods
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.memory import MemoryBackend
from docket.facade import Docket
from docket.records import SCHEDULE_KEY, Overlap
from tests.facade.test_sync_twin import twin_differences
from tests.schedules.helpers import T0, manual_docket, nodes, report_graph


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"cron": "not a cron"}, "not a valid cron expression"),
        ({"cron": "* * * * *", "timezone": "Nowhere/City"}, "not an IANA time zone"),
        ({"cron": "* * * * *", "overlap": "sometimes"}, "overlap must be one of"),
        ({"cron": "* * * * *", "catchup": timedelta(seconds=-1)}, "catchup must be"),
    ],
)
def test_a_bad_schedule_is_invalid_schedule_and_nothing_is_stored(
    kwargs: dict[str, object], fragment: str
) -> None:
    async def scenario() -> None:
        docket, _, _ = manual_docket()
        async with docket:
            await docket.save_graph(report_graph())
            with pytest.raises(errors.InvalidSchedule) as raised:
                await docket.create_schedule("s", "report", input={"team": "a"}, **kwargs)  # type: ignore[arg-type]
            assert fragment in str(raised.value)
            assert raised.value.code == "invalid_schedule"
            assert (await docket.list_schedules()).schedules == ()

    run(scenario())


def test_input_that_does_not_fit_the_graph_or_an_unknown_graph_stores_nothing() -> None:
    async def scenario() -> None:
        docket, _, _ = manual_docket()
        async with docket:
            await docket.save_graph(report_graph())
            with pytest.raises(errors.InvalidInput):
                await docket.create_schedule("s", "report", cron="* * * * *", input={})
            with pytest.raises(errors.NotFound):
                await docket.create_schedule("s", "nope", cron="* * * * *")
            with pytest.raises(errors.InvalidSchedule):
                await docket.create_schedule("a@b", "report", cron="* * * * *", input={"team": "a"})
            assert (await docket.list_schedules()).schedules == ()
            await docket.create_schedule("s", "report", cron="* * * * *", input={"team": "a"})
            with pytest.raises(errors.Conflict):
                await docket.create_schedule("s", "report", cron="0 * * * *", input={"team": "b"})
            assert (await docket.get_schedule("s")).cron == "* * * * *"

    run(scenario())


class NoSchedules(MemoryBackend):
    """A real memory backend that does not declare schedules (as SQLite did before)."""

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return attrs.evolve(caps, features=caps.features - {Feature.SCHEDULES})


def test_a_backend_without_schedules_is_unsupported_and_its_workers_do_not_tick() -> None:
    async def scenario() -> None:
        docket = Docket(NoSchedules(), nodes=nodes)
        async with docket:
            await docket.save_graph(report_graph())
            with pytest.raises(errors.Unsupported) as raised:
                await docket.create_schedule("s", "report", cron="* * * * *", input={"team": "a"})
            assert raised.value.details["feature"] == "schedules"
            assert docket._schedule_ticker() is None

    run(scenario())


def test_create_pins_a_ref_and_computes_the_first_tick_in_the_time_zone() -> None:
    async def scenario() -> None:
        docket, _, _ = manual_docket()
        async with docket:
            ref = await docket.save_graph(report_graph())
            pinned = await docket.create_schedule(
                "pinned", ref, cron="0 9 * * *", timezone="Europe/Paris", input={"team": "a"}
            )
            newest = await docket.create_schedule(
                "newest", "report", cron="0 9 * * *", input={"team": "a"}, overlap=Overlap.ALLOW
            )
            assert pinned.graph_hash == ref.graph_hash and newest.graph_hash is None
            # 09:00 in Paris (CEST, +2) on 2026-06-02 is 07:00 UTC; T0 is 12:00 UTC on 06-01
            assert pinned.next_tick_at == T0.replace(day=2, hour=7)
            assert newest.next_tick_at == T0.replace(day=2, hour=9)

    run(scenario())


def test_resume_starts_from_now_without_catching_up_the_pause() -> None:
    async def scenario() -> None:
        docket, _, clock = manual_docket()
        async with docket:
            await docket.save_graph(report_graph())
            await docket.create_schedule(
                "s", "report", cron="* * * * *", input={"team": "a"}, catchup=timedelta(hours=2)
            )
            paused = await docket.pause_schedule("s")
            assert paused.paused and paused.due_at is None
            assert (await docket.pause_schedule("s")).version == paused.version  # unchanged
            clock.advance(timedelta(hours=1, seconds=10))
            resumed = await docket.resume_schedule("s")
            assert not resumed.paused
            assert resumed.next_tick_at == T0 + timedelta(hours=1, minutes=1)

    run(scenario())


def test_trigger_starts_a_manual_run_and_leaves_the_cursor() -> None:
    async def scenario() -> None:
        docket, _, _ = manual_docket()
        async with docket:
            await docket.save_graph(report_graph())
            before = await docket.create_schedule(
                "s", "report", cron="* * * * *", input={"team": "a"}
            )
            run_ = await docket.trigger_schedule("s")
            assert run_.id.startswith("s@manual-")
            assert run_.metadata[SCHEDULE_KEY] == {
                "id": "s",
                "tick": T0.isoformat(),
                "manual": True,
            }
            after = await docket.get_schedule("s")
            assert after == before
            assert await docket.delete_schedule("s") is True
            assert await docket.delete_schedule("s") is False
            with pytest.raises(errors.NotFound):
                await docket.trigger_schedule("s")
            assert (await docket.fetch_run(run_.id)).id == run_.id  # the run stays

    run(scenario())


def test_the_sync_twins_mirror_the_schedule_methods() -> None:
    assert twin_differences(ScheduleMethods, SyncScheduleMethods) == []
    assert issubclass(Docket, ScheduleMethods) and issubclass(SyncDocket, SyncScheduleMethods)
    with SyncDocket(MemoryBackend(), nodes=nodes) as docket:
        docket.save_graph(report_graph())
        made = docket.create_schedule("s", "report", cron="* * * * *", input={"team": "a"})
        assert docket.list_schedules().schedules == (made,)
    assert inspect.getdoc(SyncScheduleMethods.create_schedule)


def test_schedule_errors_read_as_sentences() -> None:
    from tests.facade.test_error_wording import DOUBLED

    with SyncDocket(MemoryBackend(), nodes=nodes) as docket:
        docket.save_graph(report_graph())
        with pytest.raises(errors.InvalidSchedule) as bad:
            docket.create_schedule("s", "report", cron="61 * * * *", timezone="Nowhere/City")
        with pytest.raises(errors.NotFound) as missing:
            docket.get_schedule("ghost")
    assert str(bad.value) == (
        "invalid_schedule: schedule 's' cannot be created: timezone 'Nowhere/City' is not an "
        "IANA time zone name; cron '61 * * * *' is not a valid cron expression: Bad minute"
    )
    assert str(missing.value) == "not_found: no such schedule 'ghost'"
    for text in (str(bad.value), str(missing.value)):
        assert not DOUBLED.search(text), text
