"""Group commit on PostgreSQL: commits that queue while the lanes are busy go as one
``commit_runs`` statement, and each still gets exactly the answer it would get alone.

Every test here uses ``commit_lanes=1``: a burst submitted at once goes as one batch (the
lane takes what was submitted in its turn of the event loop), and what queues behind a
busy lane goes together, so grouping is certain rather than left to timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import attrs
import pytest
from docket_contract_tests.fixtures import (
    claimed,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
)
from docket_postgres import PostgresBackend, SchemaTooOld
from docket_postgres.schema import MIGRATIONS, SCHEMA_VERSION, apply_migrations
from docket_postgres.testing import connect as admin
from docket_postgres.testing import open_backend as opened

from docket.contract import (
    At,
    ClaimBatch,
    ClaimPolicy,
    Conflict,
    EventListQuery,
    Immediate,
    Lease,
    NotFound,
    Permanent,
    ReleaseClaim,
    RetainClaim,
    Schedule,
    StaleCheckpoint,
    Terminal,
    TransitionResult,
)
from docket.contract.grouping import GroupCommit
from docket.records import (
    TENANTLESS,
    CheckpointType,
    EventPage,
    GraphRef,
    GraphVersion,
    OwnerScope,
    Run,
    RunInfo,
    RunStatus,
    Tenant,
)

Names = Callable[[str], str]
T = TypeVar("T")


async def _claimed_runs(
    backend: PostgresBackend, owners: list[OwnerScope], ids: list[str]
) -> dict[str, tuple[OwnerScope, Run, Lease]]:
    document = graph_document("g")
    ref = graph_ref(document)
    for owner in set(owners):
        assert isinstance(await backend.graphs.save_graph(owner, ref, document), GraphVersion)
    now = await backend.now()
    runs: dict[str, tuple[OwnerScope, Run]] = {}
    for owner, run_id in zip(owners, ids, strict=True):
        fresh = new_run(run_id, ref, now, event_seq=1)
        proposal = init_proposal(fresh, now)
        assert (
            await backend.transitions.initialize(owner, proposal, events_for(fresh, now, [1]))
            == fresh
        )
        runs[run_id] = (owner, fresh)
    batch = await backend.runs.claim_due(
        ClaimPolicy(limit=len(ids), orphan_ttl=timedelta(hours=1), max_claim_attempts=3)
    )
    assert isinstance(batch, ClaimBatch) and len(batch.leases) == len(ids)
    return {lease.run_id: (*runs[lease.run_id], lease) for lease in batch.leases}


def _grouped(backend: PostgresBackend, which: str = "_group") -> dict[int, int]:
    """The backend's batches sent by size, asserting some write went with another."""
    group: GroupCommit[Any, Any] | None = getattr(backend.transitions, which)
    assert group is not None
    assert max(group.batches) > 1, f"nothing was grouped: {dict(group.batches)}"
    return dict(group.batches)


async def _behind(
    backend: PostgresBackend, which: str, alone: Awaitable[T], rest: list[Awaitable[T]]
) -> list[T]:
    """``alone`` sent by itself (the lane was free), then ``rest`` submitted while it is in
    flight (with ``commit_lanes=1`` they queue, and go as one batch)."""
    group: GroupCommit[Any, Any] = getattr(backend.transitions, which)
    first = asyncio.ensure_future(alone)
    while not group.batches:  # until its lane has taken it
        await asyncio.sleep(0)
    return [await first, *await asyncio.gather(*rest)]


async def _signature(conn: Any, schema: str, function: str) -> tuple[str, str]:
    cur = await conn.execute(
        "SELECT pg_get_function_arguments(p.oid), pg_get_function_result(p.oid) "
        "FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = %s AND p.proname = %s",
        (schema, function),
    )
    [(arguments, result)] = await cur.fetchall()
    return str(arguments), str(result)


async def _definition(conn: Any, schema: str, function: str) -> str:
    """``function``'s ``CREATE OR REPLACE FUNCTION`` text, to put it back later."""
    cur = await conn.execute(
        "SELECT pg_get_functiondef(p.oid) "
        "FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = %s AND p.proname = %s",
        (schema, function),
    )
    [(text,)] = await cur.fetchall()
    return str(text)


async def _make_fail(conn: Any, schema: str, function: str) -> None:
    """Replace ``function`` (same arguments, same result) with one that raises
    "<function> was called": a test can then tell which path a write took."""
    arguments, result = await _signature(conn, schema, function)
    await conn.execute(
        f"""CREATE OR REPLACE FUNCTION "{schema}".{function}({arguments}) RETURNS {result}
        LANGUAGE plpgsql AS $fn$
        BEGIN
            RAISE EXCEPTION '{function} was called' USING ERRCODE = 'P0001';
        END
        $fn$""".encode()
    )


def _check_answers(answers: Sequence[object], expected: Sequence[object]) -> None:
    """Each answer is the expected value, or an instance of the expected error type."""
    for answer, want in zip(answers, expected, strict=True):
        if isinstance(want, type):
            assert isinstance(answer, want), (answer, want)
        else:
            assert answer == want


def test_a_burst_of_commits_is_grouped_and_each_gets_its_own_answer(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        backend = await opened(pg_url, schema_name("group"), commit_lanes=1)
        try:
            ids = [f"r{i:02d}" for i in range(10)]
            owners: list[OwnerScope] = [TENANTLESS if i % 2 else Tenant("acme") for i in range(10)]
            held = await _claimed_runs(backend, owners, ids)
            now = await backend.now()
            calls = []
            expected: list[object] = []
            for run_id in ids:
                owner, run, lease = held[run_id]
                nxt = successor(run, now, new_events=2)
                evs = events_for(nxt, now, [2, 3])
                if run_id == "r06":  # a stale fence
                    ahead = attrs.evolve(nxt, checkpoint_seq=run.checkpoint_seq + 5)
                    proposal = claimed(ahead, lease.claim_token)  # expects checkpoint 5
                    expected.append(StaleCheckpoint)
                elif run_id == "r07":  # someone else's claim token
                    proposal = claimed(nxt, "not-the-token")
                    expected.append(StaleCheckpoint)
                else:
                    proposal = claimed(nxt, lease.claim_token)
                    expected.append(nxt)
                calls.append(backend.transitions.commit_claimed(owner, proposal, evs))
                if run_id == "r08":  # the same proposal twice in one burst: then a replay
                    calls.append(backend.transitions.commit_claimed(owner, proposal, evs))
                    expected.append(nxt)
            ghost = claimed(successor(held["r09"][1], now), held["r09"][2].claim_token)
            ghost = attrs.evolve(ghost, run=attrs.evolve(ghost.run, id="ghost"))  # no such run
            calls.append(backend.transitions.commit_claimed(held["r09"][0], ghost, []))
            expected.append(NotFound)
            answers = await asyncio.gather(*calls)
            _grouped(backend)
            _check_answers(answers, expected)
            for run_id in ids:  # read back: written exactly where the answer said so
                owner, run, _ = held[run_id]
                stored = await backend.runs.fetch_run(owner, run_id)
                assert isinstance(stored, Run)
                want_seq = run.checkpoint_seq + (0 if run_id in ("r06", "r07") else 1)
                assert stored.checkpoint_seq == want_seq, run_id
                assert stored.event_seq == (1 if run_id in ("r06", "r07") else 3), run_id
        finally:
            await backend.close()

    asyncio.run(body())


def test_usual_commits_of_a_group_are_applied_set_wise(pg_url: str, schema_name: Names) -> None:
    """Schema version 3 applies a group's usual commits (first of their run, events all
    new, fences holding) in a few statements for the whole group; only the others go
    through ``commit_run``. With ``commit_run`` made to fail, usual commits still land,
    with their events, claims and wakes, and a refused one in a group fails."""

    async def body() -> None:
        schema = schema_name("setwise")
        backend = await opened(pg_url, schema, commit_lanes=1)
        conn = await admin(pg_url)
        try:
            ids = [f"u{i}" for i in range(9)]
            owners: list[OwnerScope] = [Tenant("acme") if i % 3 else TENANTLESS for i in range(9)]
            held = await _claimed_runs(backend, [*owners, TENANTLESS], [*ids, "pilot"])
            await _make_fail(conn, schema, "commit_run")
            now = await backend.now()
            schedules: list[Schedule] = [
                RetainClaim(),
                ReleaseClaim(Immediate()),
                ReleaseClaim(At(now + timedelta(hours=1))),
            ]
            proposals = {}
            for i, run_id in enumerate(ids):
                _, run, lease = held[run_id]
                if i == 8:  # finishing: its live row goes
                    nxt = successor(run, now, new_events=2, status=RunStatus.DONE)
                    proposal = claimed(
                        nxt,
                        lease.claim_token,
                        schedule=ReleaseClaim(Terminal()),
                        checkpoint_type=CheckpointType.RUN_COMPLETED,
                    )
                else:
                    nxt = successor(run, now, new_events=i % 3)
                    proposal = claimed(nxt, lease.claim_token, schedule=schedules[i % 3])
                proposals[run_id] = (
                    proposal,
                    events_for(nxt, now, list(range(2, nxt.event_seq + 1))),
                )
            _, pilot_run, pilot_lease = held["pilot"]
            pilot = claimed(successor(pilot_run, now), pilot_lease.claim_token)
            # a commit that finds the lane free goes alone, through commit_run; the ones
            # that queue behind it go together
            first, *answers = await _behind(
                backend,
                "_group",
                backend.transitions.commit_claimed(TENANTLESS, pilot, []),
                [backend.transitions.commit_claimed(held[i][0], *proposals[i]) for i in ids],
            )
            assert isinstance(first, Permanent) and "commit_run was called" in first.reason
            assert _grouped(backend) == {1: 1, len(ids): 1}
            assert answers == [proposals[i][0].run for i in ids]
            for i, run_id in enumerate(ids):
                owner, _, lease = held[run_id]
                info = await backend.runs.inspect_run(owner, run_id)
                assert isinstance(info, RunInfo)
                assert info.run == proposals[run_id][0].run
                history = await backend.events.list_events(owner, run_id, EventListQuery(limit=50))
                assert isinstance(history, EventPage)
                assert [e.seq for e in history.events] == list(range(1, info.run.event_seq + 1))
                if i == 8:  # finished: no operational state left
                    assert (info.claimed_at, info.wake_at) == (None, None), run_id
                elif i % 3 == 0:  # the claim kept, its lease renewed
                    assert info.claimed_at is not None and info.wake_at is None, run_id
                    assert info.claimed_at >= now, run_id
                else:  # released: due now, or in an hour
                    wake = now if i % 3 == 1 else now + timedelta(hours=1)
                    assert info.claimed_at is None and info.wake_at is not None, run_id
                    assert info.wake_at >= wake, run_id
            # a stale commit cannot go set-wise: commit_run is called, and here it fails
            _, run, lease = held["u0"]
            stale = claimed(successor(run, now), lease.claim_token)  # expects the old seq
            current = proposals["u0"][0].run
            fresh = claimed(successor(current, now), lease.claim_token)
            got = await asyncio.gather(
                backend.transitions.commit_claimed(held["u0"][0], fresh, []),
                backend.transitions.commit_claimed(held["u0"][0], stale, []),
            )
            assert all(isinstance(g, Permanent) for g in got), got
            assert await backend.runs.fetch_run(held["u0"][0], "u0") == current
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_a_runs_chained_writes_are_applied_set_wise_in_passes(
    pg_url: str, schema_name: Names
) -> None:
    """Schema version 4: a run's later writes of a group (a completion chained behind its
    last step, or longer chains) go set-wise too, one pass per position in the chain, each
    fenced on what the pass before wrote. With ``commit_run`` made to fail, every chained
    write still lands; a refused first write takes its followers the one-at-a-time way."""

    async def body() -> None:
        schema = schema_name("chained")
        backend = await opened(pg_url, schema, commit_lanes=1)
        conn = await admin(pg_url)
        try:
            ids = [f"c{i}" for i in range(6)]
            owners: list[OwnerScope] = [Tenant("acme") if i % 2 else TENANTLESS for i in range(6)]
            held = await _claimed_runs(backend, owners, ids)
            now = await backend.now()
            chains: dict[str, list[tuple[Any, list[Any]]]] = {}
            for i, run_id in enumerate(ids):
                _, run, lease = held[run_id]
                links = []
                for _ in range(i % 3):  # 0, 1 or 2 steps before the completion
                    nxt = successor(run, now, new_events=1)
                    links.append(
                        (
                            claimed(nxt, lease.claim_token),
                            events_for(nxt, now, [nxt.event_seq]),
                        )
                    )
                    run = nxt
                done = successor(run, now, new_events=2, status=RunStatus.DONE)
                links.append(
                    (
                        claimed(
                            done,
                            lease.claim_token,
                            schedule=ReleaseClaim(Terminal()),
                            checkpoint_type=CheckpointType.RUN_COMPLETED,
                        ),
                        events_for(done, now, [done.event_seq - 1, done.event_seq]),
                    )
                )
                chains[run_id] = links
            original = await _definition(conn, schema, "commit_run")
            await _make_fail(conn, schema, "commit_run")
            group = backend.transitions._group
            assert group is not None
            answers = await asyncio.gather(
                *(backend.transitions.commit_claimed_chain(held[i][0], chains[i]) for i in ids)
            )
            assert dict(group.batches) == {sum(len(c) for c in chains.values()): 1}
            for run_id, got in zip(ids, answers, strict=True):
                owner = held[run_id][0]
                assert got == [p.run for p, _ in chains[run_id]], run_id
                final = chains[run_id][-1][0].run
                info = await backend.runs.inspect_run(owner, run_id)
                assert isinstance(info, RunInfo)
                assert info.run == final and info.run.status is RunStatus.DONE
                assert (info.claimed_at, info.wake_at) == (None, None), run_id
                history = await backend.events.list_events(owner, run_id, EventListQuery(limit=50))
                assert isinstance(history, EventPage)
                assert [e.seq for e in history.events] == list(range(1, final.event_seq + 1))
            await conn.execute(original.encode())  # commit_run back, for the replays
            for run_id in ids:  # every link was recorded: sent again, each is a replay
                final = chains[run_id][-1][0].run
                for proposal, events in chains[run_id]:
                    assert (
                        await backend.transitions.commit_claimed(held[run_id][0], proposal, events)
                        == final
                    )
            # a refused first write: its follower goes one at a time, and is refused too
            await backend.close()
            backend = await opened(pg_url, schema_name("chained2"), commit_lanes=1)
            more = await _claimed_runs(backend, [TENANTLESS] * 2, ["k0", "k1"])
            now = await backend.now()
            sent: dict[str, list[tuple[Any, list[Any]]]] = {}
            for run_id, (_, run, lease) in more.items():
                step = successor(run, now)
                done = successor(step, now, status=RunStatus.DONE)
                first = claimed(step, lease.claim_token if run_id == "k0" else "not-the-token")
                last = claimed(
                    done,
                    lease.claim_token,
                    schedule=ReleaseClaim(Terminal()),
                    checkpoint_type=CheckpointType.RUN_COMPLETED,
                )
                sent[run_id] = [(first, []), (last, [])]
            k0, k1 = await asyncio.gather(
                *(
                    backend.transitions.commit_claimed_chain(TENANTLESS, sent[i])
                    for i in ("k0", "k1")
                )
            )
            assert k0 == [p.run for p, _ in sent["k0"]]
            assert all(isinstance(a, StaleCheckpoint) for a in k1), k1
            assert await backend.runs.fetch_run(TENANTLESS, "k1") == more["k1"][1]
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_a_failing_group_statement_falls_back_to_one_commit_at_a_time(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        schema = schema_name("fallback")
        backend = await opened(pg_url, schema, commit_lanes=1)
        conn = await admin(pg_url)
        try:
            ids = ["a", "b", "boom", "c", "d"]
            held = await _claimed_runs(backend, [TENANTLESS] * len(ids), ids)
            # A database-side failure for one run aborts the whole group statement.
            await conn.execute(
                f"""CREATE TRIGGER no_boom BEFORE UPDATE ON "{schema}".runs FOR EACH ROW
                WHEN (NEW.run_id = 'boom')
                EXECUTE FUNCTION "{schema}".refuse_change('boom refused')""".encode()
            )
            now = await backend.now()
            proposals = {
                run_id: claimed(successor(run, now), lease.claim_token)
                for run_id, (_, run, lease) in held.items()
            }
            answers = dict(
                zip(
                    ids,
                    await asyncio.gather(
                        *(
                            backend.transitions.commit_claimed(TENANTLESS, proposals[i], [])
                            for i in ids
                        )
                    ),
                    strict=True,
                )
            )
            _grouped(backend)
            assert isinstance(answers["boom"], Permanent), answers["boom"]
            assert "boom refused" in answers["boom"].reason
            for run_id in ("a", "b", "c", "d"):
                assert answers[run_id] == proposals[run_id].run
                assert await backend.runs.fetch_run(TENANTLESS, run_id) == proposals[run_id].run
            assert await backend.runs.fetch_run(TENANTLESS, "boom") == held["boom"][1]
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_commit_lanes_zero_sends_every_commit_alone_and_bad_values_are_refused(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        backend = await opened(pg_url, schema_name("alone"), commit_lanes=0)
        try:
            assert backend.transitions._group is None
            held = await _claimed_runs(backend, [TENANTLESS] * 3, ["x", "y", "z"])
            now = await backend.now()
            proposals = [
                claimed(successor(r, now), lease.claim_token) for _, r, lease in held.values()
            ]
            got = await asyncio.gather(
                *(backend.transitions.commit_claimed(TENANTLESS, p, []) for p in proposals)
            )
            assert got == [p.run for p in proposals]
        finally:
            await backend.close()

    asyncio.run(body())
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError):
            PostgresBackend(pg_url, commit_lanes=bad)  # type: ignore[arg-type]  # bad on purpose


def test_a_version_1_store_needs_migrate_and_then_groups(pg_url: str, schema_name: Names) -> None:
    async def body() -> None:
        schema = schema_name("v1")
        conn = await admin(pg_url)
        try:
            assert await apply_migrations(
                conn, schema, schema, upgrade=False, migrations=MIGRATIONS[:1]
            ) == (None, 1)
        finally:
            await conn.close()
        with pytest.raises(SchemaTooOld):
            await opened(pg_url, schema)
        backend = PostgresBackend(pg_url, schema=schema, commit_lanes=1)
        try:
            assert await backend.migrate() == (1, SCHEMA_VERSION)
            held = await _claimed_runs(backend, [TENANTLESS] * 4, ["p", "q", "r", "s"])
            now = await backend.now()
            proposals = [
                claimed(successor(r, now), lease.claim_token) for _, r, lease in held.values()
            ]
            got = await asyncio.gather(
                *(backend.transitions.commit_claimed(TENANTLESS, p, []) for p in proposals)
            )
            assert got == [p.run for p in proposals]
            _grouped(backend)
        finally:
            await backend.close()

    asyncio.run(body())


def test_a_burst_of_run_starts_is_grouped_and_each_gets_its_own_answer(
    pg_url: str, schema_name: Names
) -> None:
    async def body() -> None:
        backend = await opened(pg_url, schema_name("starts"), commit_lanes=1)
        try:
            document = graph_document("g")
            ref = graph_ref(document)
            owners: list[OwnerScope] = [TENANTLESS, Tenant("acme")]
            for owner in owners:
                assert isinstance(
                    await backend.graphs.save_graph(owner, ref, document), GraphVersion
                )
            now = await backend.now()
            calls = []
            expected: list[object] = []
            proposals = {}
            for i in range(8):
                owner = owners[i % 2]
                fresh = new_run(f"s{i}", ref, now, event_seq=1)
                proposals[i] = (owner, init_proposal(fresh, now), events_for(fresh, now, [1]))
                calls.append(backend.transitions.initialize(*proposals[i]))
                expected.append(fresh)
            owner, proposal, evs = proposals[3]  # the same proposal again: a replay
            calls.append(backend.transitions.initialize(owner, proposal, evs))
            expected.append(proposal.run)
            taken = init_proposal(attrs.evolve(proposal.run, input={"other": 1}), now)
            calls.append(
                backend.transitions.initialize(owner, taken, evs)
            )  # same id, other content
            expected.append(Conflict)
            lost = new_run("nograph", GraphRef("nope", "0" * 64), now)
            calls.append(backend.transitions.initialize(TENANTLESS, init_proposal(lost, now), []))
            expected.append(NotFound)
            answers = await asyncio.gather(*calls)
            _grouped(backend, "_init_group")
            _check_answers(answers, expected)
            for owner, proposal, _ in proposals.values():
                assert await backend.runs.fetch_run(owner, proposal.run.id) == proposal.run
            assert isinstance(await backend.runs.fetch_run(TENANTLESS, "nograph"), NotFound)
        finally:
            await backend.close()

    asyncio.run(body())


def test_claimed_starts_of_a_group_are_applied_set_wise(pg_url: str, schema_name: Names) -> None:
    """Schema version 5: a start written claimed (``initialize_claimed``) goes set-wise
    like a plain one, stored held by its token at its wake time, one attempt counted and
    not due; plain starts of the same group keep their wakes."""

    async def body() -> None:
        schema = schema_name("claimedstart")
        backend = await opened(pg_url, schema, commit_lanes=1)
        conn = await admin(pg_url)
        try:
            document = graph_document("g")
            ref = graph_ref(document)
            assert isinstance(
                await backend.graphs.save_graph(TENANTLESS, ref, document), GraphVersion
            )
            await _make_fail(conn, schema, "initialize_run")
            now = await backend.now()
            calls: list[Awaitable[TransitionResult]] = []
            for i in range(6):
                fresh = new_run(f"k{i}", ref, now, event_seq=1)
                start = (TENANTLESS, init_proposal(fresh, now), events_for(fresh, now, [1]))
                if i % 2:
                    calls.append(backend.transitions.initialize_claimed(*start, f"tok-{i}"))
                else:
                    calls.append(backend.transitions.initialize(*start))
            pilot = init_proposal(new_run("pilot", ref, now), now)
            first, *answers = await _behind(
                backend, "_init_group", backend.transitions.initialize(TENANTLESS, pilot, []), calls
            )
            assert isinstance(first, Permanent)  # went alone, through initialize_run
            assert _grouped(backend, "_init_group") == {1: 1, len(calls): 1}
            assert [a.id for a in answers if isinstance(a, Run)] == [f"k{i}" for i in range(6)]
            for i in range(6):
                info = await backend.runs.inspect_run(TENANTLESS, f"k{i}")
                assert isinstance(info, RunInfo)
                if i % 2:
                    assert (info.claimed_at, info.wake_at, info.claim_attempts) == (now, None, 1)
                else:
                    assert (info.claimed_at, info.wake_at, info.claim_attempts) == (None, now, 0)
            batch = await backend.runs.claim_due(
                ClaimPolicy(limit=10, orphan_ttl=timedelta(hours=1), max_claim_attempts=3)
            )
            assert isinstance(batch, ClaimBatch)
            assert sorted(lease.run_id for lease in batch.leases) == ["k0", "k2", "k4"]
            # each claimed start is held by its own token
            for i in (1, 3, 5):
                run = await backend.runs.fetch_run(TENANTLESS, f"k{i}")
                assert isinstance(run, Run)
                held = await backend.transitions.commit_claimed(
                    TENANTLESS, claimed(successor(run, now), f"tok-{i}"), []
                )
                assert isinstance(held, Run) and held.checkpoint_seq == 2
                stale = await backend.transitions.commit_claimed(
                    TENANTLESS, claimed(successor(held, now), f"tok-{i + 1}"), []
                )
                assert isinstance(stale, StaleCheckpoint)
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_usual_run_starts_of_a_group_are_applied_set_wise(pg_url: str, schema_name: Names) -> None:
    """The first start of each free run id of a published graph is written set-wise;
    with ``initialize_run`` made to fail, those still land (run, operational state,
    events, wake-up), and a group holding a taken id fails."""

    async def body() -> None:
        schema = schema_name("setstart")
        backend = await opened(pg_url, schema, commit_lanes=1)
        conn = await admin(pg_url)
        try:
            document = graph_document("g")
            ref = graph_ref(document)
            owners: list[OwnerScope] = [TENANTLESS, Tenant("acme")]
            for owner in owners:
                assert isinstance(
                    await backend.graphs.save_graph(owner, ref, document), GraphVersion
                )
            await _make_fail(conn, schema, "initialize_run")
            now = await backend.now()
            starts = []
            for i in range(7):
                fresh = new_run(f"s{i}", ref, now, event_seq=i % 3)
                wake = now if i % 2 else now + timedelta(hours=1)
                evs = events_for(fresh, now, list(range(1, fresh.event_seq + 1)))
                starts.append((owners[i % 2], init_proposal(fresh, wake), evs))
            pilot = init_proposal(new_run("pilot", ref, now), now)
            # a start that finds the lane free goes alone, through initialize_run; the ones
            # that queue behind it go together
            first, *answers = await _behind(
                backend,
                "_init_group",
                backend.transitions.initialize(TENANTLESS, pilot, []),
                [backend.transitions.initialize(*start) for start in starts],
            )
            assert isinstance(first, Permanent) and "initialize_run was called" in first.reason
            assert _grouped(backend, "_init_group") == {1: 1, len(starts): 1}
            assert answers == [proposal.run for _, proposal, _ in starts]
            for owner, proposal, evs in starts:
                info = await backend.runs.inspect_run(owner, proposal.run.id)
                assert isinstance(info, RunInfo) and info.run == proposal.run
                assert info.wake_at == proposal.wake_at and info.claimed_at is None
                history = await backend.events.list_events(
                    owner, proposal.run.id, EventListQuery(limit=50)
                )
                assert isinstance(history, EventPage) and list(history.events) == evs
            batch = await backend.runs.claim_due(
                ClaimPolicy(limit=10, orphan_ttl=timedelta(hours=1), max_claim_attempts=3)
            )
            assert isinstance(batch, ClaimBatch)
            assert sorted(lease.run_id for lease in batch.leases) == ["s1", "s3", "s5"]
            # a taken id cannot go set-wise: initialize_run is called, and here it fails
            fresh_start = init_proposal(new_run("fresh", ref, now), now)
            again = await asyncio.gather(
                backend.transitions.initialize(TENANTLESS, fresh_start, []),
                backend.transitions.initialize(*starts[0]),
            )
            assert all(isinstance(a, Permanent) for a in again), again
        finally:
            await conn.close()
            await backend.close()

    asyncio.run(body())


def test_group_statements_probe_keys_on_a_store_without_statistics(
    pg_url: str, schema_name: Names
) -> None:
    """Schema version 6: on a new store (its tables never analyzed), the set-wise
    statements inside ``commit_runs``, ``initialize_runs`` and ``claim_due`` still join
    their batch to the tables by index probes. The plans PostgreSQL actually ran are read
    back with ``auto_explain``, loaded into each pooled session; before version 6 they
    were hash joins over a scan of the whole ``runs`` (or ``live``) table, cached for the
    session."""
    plans: list[str] = []

    class Explained(PostgresBackend):
        async def _configure(self, conn: Any) -> None:
            await super()._configure(conn)
            for setting in (
                b"LOAD 'auto_explain'",
                b"SET auto_explain.log_min_duration = 0",
                b"SET auto_explain.log_nested_statements = on",
                b"SET client_min_messages = log",
            ):
                await conn.execute(setting, prepare=False)
            conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))

    async def body() -> None:
        backend = Explained(pg_url, schema=schema_name("probes"), commit_lanes=1)
        await backend.open()
        try:
            ids = [f"p{i}" for i in range(6)]
            starts = [f"s{i}" for i in range(6)]
            held = await _claimed_runs(backend, [TENANTLESS] * len(ids), ids)
            now = await backend.now()
            commits = []
            for run_id in ids:
                owner, run, lease = held[run_id]
                nxt = successor(run, now, new_events=1)
                commits.append(
                    backend.transitions.commit_claimed(
                        owner, claimed(nxt, lease.claim_token), events_for(nxt, now, [2])
                    )
                )
            ref = graph_ref(graph_document("g"))
            fresh = [new_run(run_id, ref, now, event_seq=1) for run_id in starts]
            inits = [
                backend.transitions.initialize(
                    TENANTLESS, init_proposal(r, now), events_for(r, now, [1])
                )
                for r in fresh
            ]
            answers = await asyncio.gather(*commits, *inits)
            assert all(isinstance(answer, Run) for answer in answers), answers
            _grouped(backend)
            _grouped(backend, "_init_group")
        finally:
            await backend.close()

    asyncio.run(body())
    assert any("FOR UPDATE OF r, l" in p for p in plans), plans  # commit_runs' locking read
    assert any("INSERT INTO" in p and ".runs AS r" in p for p in plans), plans  # a group start
    assert any("SKIP LOCKED" in p for p in plans), plans  # the claim
    for plan in plans:
        assert "Hash Join" not in plan and "Merge Join" not in plan, plan
        for table in ("runs", "live", "transitions"):
            assert f"Seq Scan on {table}" not in plan, plan
