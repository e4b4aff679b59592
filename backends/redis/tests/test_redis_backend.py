"""What the contract kit cannot see from outside: discovery and URLs, the key layout,
zero-write refusals at the key level, script reload after SCRIPT FLUSH, claims from two
instances, wake-ups across instances, the server clock, and driver errors classified."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta

import attrs
import pytest
import redis
from docket_contract_tests.fixtures import (
    claimed,
    event,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    successor,
    unclaimed,
)
from docket_redis import (
    SCHEMA_VERSION,
    PermanentStoreError,
    RedisBackend,
    RetryableStoreError,
    SchemaTooNew,
    factory,
    parse_url,
)
from docket_redis.keys import Namespace, owner_of_part, owner_part
from docket_redis.testing import (
    T0,
    RedisServer,
    claim_one,
    dump,
    free_port,
    opened,
    publish_graph,
    redis_server,
    start_run,
    with_prefix,
)
from docket_redis.transport import SCRIPT_NAMES, load_scripts
from redis.crc import key_slot

from docket.clock import ManualClock
from docket.contract import (
    AbandonPolicy,
    At,
    ClaimBatch,
    ClaimLost,
    ClaimPolicy,
    ClaimRefreshed,
    Conflict,
    CorruptEventRow,
    EventConflict,
    Immediate,
    InvalidTransition,
    NotFound,
    Permanent,
    ReleaseClaim,
    Retryable,
    RunListQuery,
    StaleAbandon,
    StaleCheckpoint,
    negotiate,
)
from docket.contract.protocols import Migratable
from docket.contract.registry import available, from_url
from docket.records import (
    SYSTEM,
    TENANTLESS,
    OwnerScope,
    Run,
    RunInfo,
    RunStatus,
    Tenant,
    tenant_id_of,
)

# -- discovery, URLs, options -------------------------------------------------------------------


def test_registered_for_every_redis_scheme() -> None:
    assert available()["redis"] is factory
    for url in (
        "redis://127.0.0.1:6379/0",
        "rediss://user:secret@example.invalid:6380/2?prefix=app",
        "redis+cluster://127.0.0.1:7000",
        "rediss+cluster://127.0.0.1:7000?prefix=app",
    ):
        backend = from_url(url)
        assert isinstance(backend, RedisBackend)
        caps = negotiate(backend)
        assert caps.name == "redis"
        assert "notify" in caps.features
        assert "secret" not in repr(backend)


def test_url_forms_and_options() -> None:
    target = parse_url("redis://h:1/3?prefix=app&socket_timeout=2")
    assert (target.cluster, target.prefix) == (False, "app")
    assert target.url == "redis://h:1/3?socket_timeout=2"
    cluster = parse_url("redis+cluster://h:1")
    assert (cluster.cluster, cluster.prefix, cluster.url) == (True, "docket", "redis://h:1")
    assert RedisBackend.from_url("redis://h:1?prefix=a", prefix="b").prefix == "b"
    for bad in (
        "postgres://h:1",
        "redis://",
        "redis://h:1?prefix=a&prefix=b",
        "redis://h:1?prefix=",
        "redis://h:1?prefix=a{b}",
        "redis+cluster://h:1/2",
    ):
        with pytest.raises(ValueError):
            parse_url(bad)
    with pytest.raises(TypeError):
        from_url("redis://h:1", synchronous="FULL")
    with pytest.raises(TypeError):
        from_url("redis://h:1", limits={"max_run_bytes": 1})


def test_the_lua_scripts_ship_inside_the_package() -> None:
    scripts = load_scripts()
    assert set(scripts) == set(SCRIPT_NAMES)
    for script in scripts.values():
        assert script.body.strip() and len(script.sha) == 40


# -- key layout ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tenant", ["a", "a}b", "{x}", "a%7Db", "%", "t:-", "ünï", "a b:c"])
def test_a_tenant_id_keeps_its_scope_on_one_slot(tenant: str) -> None:
    ns = Namespace("app")
    part = owner_part(Tenant(tenant))
    assert owner_of_part(part) == tenant
    keys = ns.scope(Tenant(tenant))
    names = [
        keys.run("r}1"),
        keys.events("r"),
        keys.ready,
        keys.claimed,
        keys.index,
        keys.by_status(RunStatus.DONE),
        keys.graph("g{"),
        keys.versions("g"),
    ]
    assert len({key_slot(name.encode()) for name in names}) == 1
    others = [ns.scope(TENANTLESS), ns.scope(Tenant(tenant + "}")), ns.scope(Tenant("x" + tenant))]
    for other in others:
        assert other.run("r") != keys.run("r")


def test_tenant_ids_with_tag_characters_round_trip(redis_single: RedisServer, prefix: str) -> None:
    async def body() -> None:
        async with opened(redis_single.url, prefix) as backend:
            owners: list[OwnerScope] = [Tenant("a}b"), Tenant("{a"), Tenant("a%7Db"), TENANTLESS]
            for owner in owners:
                ref = await publish_graph(backend, owner)
                await start_run(backend, owner, "same-id", ref)
            listed = await backend.runs.list_runs(SYSTEM, RunListQuery(limit=10))
            assert sorted((s.tenant_id or "", s.id) for s in listed.runs) == sorted(
                (tenant_id_of(o) or "", "same-id") for o in owners
            )
            for owner in owners:
                info = await backend.runs.inspect_run(owner, "same-id")
                assert isinstance(info, RunInfo)
                assert info.tenant_id == tenant_id_of(owner)

    asyncio.run(body())


# -- refusals write nothing -----------------------------------------------------------------------


def test_a_refused_operation_writes_and_announces_nothing(
    redis_single: RedisServer, prefix: str
) -> None:
    async def body() -> None:
        clock = ManualClock(T0)
        async with (
            opened(redis_single.url, prefix, clock=clock) as backend,
            opened(redis_single.url, prefix, clock=clock) as watcher,
        ):
            owner = Tenant("acme")
            ref = await publish_graph(backend, owner)
            run = await start_run(backend, owner, "r1", ref, events=2)
            lease = await claim_one(backend, T0)
            nxt = successor(run, T0, new_events=1)
            ok = claimed(nxt, lease.claim_token)
            landed = await backend.transitions.commit_claimed(owner, ok, [event(run.id, 3, T0)])
            assert landed == nxt
            before = dump([redis_single.port], prefix)
            later = successor(nxt, T0, new_events=1)
            t = backend.transitions
            refused: dict[str, Callable[[], Awaitable[object]]] = {
                "stale token": lambda: t.commit_claimed(
                    owner, claimed(later, "not-the-token"), [event(run.id, 4, T0)]
                ),
                "stale checkpoint": lambda: t.commit_claimed(
                    owner,
                    claimed(successor(run, T0), lease.claim_token),
                    [],
                ),
                "identity": lambda: t.commit_claimed(
                    owner,
                    claimed(attrs.evolve(later, graph_id="other"), lease.claim_token),
                    [event(run.id, 4, T0)],
                ),
                "event conflict": lambda: t.commit_claimed(
                    owner,
                    claimed(later, lease.claim_token),
                    [event(run.id, 3, T0, payload={"other": 1}), event(run.id, 4, T0)],
                ),
                "sequence gap": lambda: t.commit_claimed(
                    owner, claimed(later, lease.claim_token), []
                ),
                "reused transition id": lambda: t.commit_claimed(
                    owner,
                    attrs.evolve(claimed(later, lease.claim_token), transition_id=ok.transition_id),
                    [event(run.id, 4, T0)],
                ),
                "unclaimed, stale": lambda: t.commit_unclaimed(
                    owner, 1, unclaimed(successor(run, T0)), []
                ),
                "initialize, taken": lambda: t.initialize(
                    owner, init_proposal(new_run("r1", ref, T0), T0), []
                ),
                "initialize, no graph": lambda: t.initialize(
                    Tenant("other"), init_proposal(new_run("r9", ref, T0), T0), []
                ),
                "wrong owner": lambda: t.commit_claimed(
                    Tenant("other"), claimed(later, lease.claim_token), [event(run.id, 4, T0)]
                ),
            }
            kinds = {
                "stale token": StaleCheckpoint,
                "stale checkpoint": StaleCheckpoint,
                "identity": InvalidTransition,
                "event conflict": EventConflict,
                "sequence gap": InvalidTransition,
                "reused transition id": Conflict,
                "unclaimed, stale": StaleCheckpoint,
                "initialize, taken": Conflict,
                "initialize, no graph": NotFound,
                "wrong owner": NotFound,
            }
            waiting = asyncio.create_task(watcher.wait_for_work(0.5))
            await asyncio.sleep(0.05)
            for name, call in refused.items():
                answer = await call()
                assert isinstance(answer, kinds[name]), (name, answer)
                assert dump([redis_single.port], prefix) == before, name
            other = await backend.runs.refresh_claim(owner, run.id, "nope")
            await backend.runs.release_claim(owner, run.id, "nope")
            stale = await backend.runs.abandon_claim(
                owner,
                run.id,
                lease.claim_token,
                AbandonPolicy(expected_checkpoint_seq=1, retry_at=T0, max_claim_abandons=1),
            )
            batch = await backend.runs.claim_due(
                ClaimPolicy(limit=5, orphan_ttl=timedelta(hours=1), max_claim_attempts=3, now=T0)
            )
            assert (other, stale, batch) == (ClaimLost(), StaleAbandon(), ClaimBatch())
            assert dump([redis_single.port], prefix) == before
            assert await waiting is False, "a refusal announced work"

    asyncio.run(body())


# -- scripts --------------------------------------------------------------------------------------


def test_scripts_are_reloaded_after_script_flush(redis_single: RedisServer, prefix: str) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_single.port)
    scripts = load_scripts()

    async def body() -> None:
        async with opened(redis_single.url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            client.script_flush()
            assert not any(client.script_exists(*(s.sha for s in scripts.values())))
            run = await start_run(backend, TENANTLESS, "r1", ref)
            client.script_flush()
            lease = await claim_one(backend, T0)
            client.script_flush()
            nxt = successor(run, T0)
            proposal = claimed(nxt, lease.claim_token, schedule=ReleaseClaim(Immediate()))
            assert await backend.transitions.commit_claimed(TENANTLESS, proposal, []) == nxt
            loaded = dict(zip(scripts, client.script_exists(*(s.sha for s in scripts.values()))))
            assert loaded["commit"] and not loaded["initialize"]  # flushed, not used since
            # the next call goes out as EVALSHA again and finds it
            again = await backend.transitions.commit_claimed(TENANTLESS, proposal, [])
            assert again == nxt

    try:
        asyncio.run(body())
    finally:
        client.close()


# -- two instances ------------------------------------------------------------------------------


def test_two_instances_never_lease_one_run_twice(redis_single: RedisServer, prefix: str) -> None:
    async def body() -> None:
        async with (
            opened(redis_single.url, prefix) as first,
            opened(redis_single.url, prefix) as second,
        ):
            owners: list[OwnerScope] = [TENANTLESS, Tenant("a"), Tenant("b")]
            refs = {str(o): await publish_graph(first, o) for o in owners}
            now = await first.now()
            for round_ in range(15):
                runs = [
                    (owner, f"r{round_}-{i}")
                    for i in range(7)
                    for owner in owners[i % 3 : i % 3 + 1]
                ]
                for owner, run_id in runs:
                    await start_run(first, owner, run_id, refs[str(owner)], at=now, wake_at=now)
                policy = ClaimPolicy(limit=2, orphan_ttl=timedelta(hours=1), max_claim_attempts=3)
                barrier = asyncio.Barrier(6)
                leased: list[tuple[str, str]] = []
                await asyncio.gather(
                    *(_claimer(b, barrier, policy, leased) for b in (first, second) * 3)
                )
                assert sorted(leased) == sorted((str(o), r) for o, r in runs), round_

    asyncio.run(body())


async def _claimer(
    backend: RedisBackend,
    barrier: asyncio.Barrier,
    policy: ClaimPolicy,
    leased: list[tuple[str, str]],
) -> None:
    await barrier.wait()
    for _ in range(6):
        batch = await backend.runs.claim_due(policy)
        assert isinstance(batch, ClaimBatch)
        leased.extend((str(lease.owner), lease.run_id) for lease in batch.leases)


# -- wake-ups ---------------------------------------------------------------------------------


def test_a_release_wakes_a_waiter_on_another_instance(
    redis_single: RedisServer, prefix: str
) -> None:
    async def body() -> None:
        async with (
            opened(redis_single.url, prefix) as worker,
            opened(redis_single.url, prefix) as other,
        ):
            ref = await publish_graph(other, TENANTLESS)
            now = await other.now()
            await start_run(other, TENANTLESS, "r1", ref, at=now, wake_at=now + timedelta(hours=1))
            assert await worker.wait_for_work(0.1) is False
            lease = await claim_one(other, now + timedelta(hours=1))
            latencies = []
            for _ in range(5):
                waiting = asyncio.create_task(worker.wait_for_work(5))
                await asyncio.sleep(0.05)
                started = time.monotonic()
                await other.runs.release_claim(TENANTLESS, "r1", lease.claim_token)
                assert await waiting is True
                latencies.append(time.monotonic() - started)
                lease = await claim_one(
                    other, await other.now() + timedelta(seconds=1), max_claim_attempts=100
                )
            assert max(latencies) < 0.5, latencies

    asyncio.run(body())


# -- the clock ----------------------------------------------------------------------------------


def test_without_a_clock_the_server_time_stamps_everything(
    redis_single: RedisServer, prefix: str
) -> None:
    async def body() -> None:
        async with opened(redis_single.url, prefix) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            before = await backend.now()
            run = await start_run(backend, TENANTLESS, "r1", ref, at=before, wake_at=before)
            batch = await backend.runs.claim_due(
                ClaimPolicy(limit=1, orphan_ttl=timedelta(minutes=1), max_claim_attempts=3)
            )
            assert isinstance(batch, ClaimBatch) and batch.leases
            lease = batch.leases[0]
            refreshed = await backend.runs.refresh_claim(TENANTLESS, run.id, lease.claim_token)
            after = await backend.now()
            assert before <= lease.claimed_at <= after
            assert isinstance(refreshed, ClaimRefreshed)
            assert lease.claimed_at <= refreshed.claimed_at <= after
            nxt = successor(run, after)
            proposal = claimed(nxt, lease.claim_token, schedule=ReleaseClaim(Immediate()))
            assert await backend.transitions.commit_claimed(TENANTLESS, proposal, []) == nxt
            info = await backend.runs.inspect_run(TENANTLESS, run.id)
            assert isinstance(info, RunInfo) and info.wake_at is not None
            assert after <= info.wake_at <= await backend.now()

    asyncio.run(body())


def test_the_sampled_clock_stays_on_the_server_time(redis_single: RedisServer, prefix: str) -> None:
    async def body() -> None:
        async with opened(redis_single.url, prefix) as backend:
            slack = timedelta(milliseconds=250)  # a loaded machine's round trips
            for _ in range(3):
                before = await backend.sampled_now()
                server = await backend.now()  # a direct TIME read
                assert before - slack <= server <= await backend.sampled_now() + slack
                await asyncio.sleep(0.2)
        with pytest.raises(ValueError):
            RedisBackend.from_url(redis_single.url, clock_resync=-1)

    asyncio.run(body())


# -- errors -----------------------------------------------------------------------------------


def test_an_unreachable_server_is_retryable(prefix: str) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"

    async def body() -> None:
        backend = RedisBackend.from_url(with_prefix(url, prefix))
        with pytest.raises(RetryableStoreError, match="not sent"):
            await backend.open()
        ref = graph_ref(graph_document("g"))
        run = new_run("r1", ref, T0)
        answer = await backend.transitions.initialize(TENANTLESS, init_proposal(run, T0), [])
        assert isinstance(answer, Retryable) and "not sent" in answer.reason
        claims = await backend.runs.claim_due(
            ClaimPolicy(limit=1, orphan_ttl=timedelta(0), max_claim_attempts=1)
        )
        assert isinstance(claims, Retryable)
        saved = await backend.graphs.save_graph(TENANTLESS, ref, graph_document("g"))
        assert isinstance(saved, Retryable)
        with pytest.raises(RetryableStoreError):
            await backend.runs.fetch_run(TENANTLESS, "r1")
        await backend.close()

    asyncio.run(body())


@contextlib.contextmanager
def _busy(port: int, seconds: float) -> Iterator[None]:
    """Keep the server busy in a read-only script (killed with SCRIPT KILL afterwards)."""
    spin = "local n = 0 for i = 1, 3000000000 do n = n + 1 end return n"

    def run() -> None:
        client = redis.Redis(host="127.0.0.1", port=port)
        with contextlib.suppress(redis.exceptions.ResponseError):
            client.eval(spin, 0)
        client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(seconds)
    try:
        yield
    finally:
        killer = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 10
        while thread.is_alive() and time.monotonic() < deadline:
            with contextlib.suppress(redis.exceptions.ResponseError):
                killer.script_kill()
            thread.join(0.1)
        killer.close()


def test_a_busy_server_is_retryable_and_nothing_changes(prefix: str) -> None:
    with redis_server(extra=("--busy-reply-threshold", "50")) as server:

        async def body() -> None:
            async with opened(server.url, prefix, clock=ManualClock(T0)) as backend:
                ref = await publish_graph(backend, TENANTLESS)
                run = await start_run(backend, TENANTLESS, "r1", ref)
                lease = await claim_one(backend, T0)
                nxt = successor(run, T0)
                proposal = claimed(nxt, lease.claim_token)
                with _busy(server.port, 0.3):
                    answer = await backend.transitions.commit_claimed(TENANTLESS, proposal, [])
                    assert isinstance(answer, Retryable), answer
                    assert "BUSY" in answer.reason and not answer.reason.startswith("ambiguous")
                assert await backend.runs.fetch_run(TENANTLESS, run.id) == run
                assert await backend.transitions.commit_claimed(TENANTLESS, proposal, []) == nxt

        asyncio.run(body())


def test_a_lost_answer_is_ambiguous_and_a_replay_settles_it(
    redis_single: RedisServer, prefix: str
) -> None:
    url = f"{redis_single.url}?socket_timeout=0.3"
    control = redis.Redis(host="127.0.0.1", port=redis_single.port)

    async def body() -> None:
        async with opened(url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            run = await start_run(backend, TENANTLESS, "r1", ref)
            lease = await claim_one(backend, T0)
            nxt = successor(run, T0, new_events=1)
            proposal = claimed(nxt, lease.claim_token)
            events = [event(run.id, 1, T0)]
            control.client_pause(1000, all=False)
            try:
                answer = await backend.transitions.commit_claimed(TENANTLESS, proposal, events)
            finally:
                await asyncio.sleep(1.0)
                control.client_unpause()
            assert isinstance(answer, Retryable), answer
            assert answer.reason.startswith("ambiguous: "), answer.reason
            # the caller does not know whether it landed: it sends the same proposal again
            again = await backend.transitions.commit_claimed(TENANTLESS, proposal, events)
            assert again == nxt
            stored = await backend.runs.fetch_run(TENANTLESS, run.id)
            assert isinstance(stored, Run) and stored.checkpoint_seq == nxt.checkpoint_seq

    try:
        asyncio.run(body())
    finally:
        control.close()


def test_corrupt_records_are_permanent(redis_single: RedisServer, prefix: str) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_single.port)

    async def body() -> None:
        async with opened(redis_single.url, prefix, clock=ManualClock(T0)) as backend:
            keys = Namespace(prefix).scope(TENANTLESS)
            ref = await publish_graph(backend, TENANTLESS)
            run = await start_run(backend, TENANTLESS, "r1", ref, events=1)
            client.hset(keys.events("r1"), "1", b"{not json")
            assert isinstance(
                await backend.events.fetch_event(TENANTLESS, "r1", 1), CorruptEventRow
            )
            client.hdel(keys.run("r1"), "ord")
            before = dump([redis_single.port], prefix)
            answer = await backend.transitions.commit_unclaimed(
                TENANTLESS, 1, unclaimed(successor(run, T0), wake=At(T0)), []
            )
            assert isinstance(answer, Permanent), answer
            assert dump([redis_single.port], prefix) == before
            client.hset(keys.run("r1"), "doc", b"garbage")
            with pytest.raises(PermanentStoreError):
                await backend.runs.fetch_run(TENANTLESS, "r1")

    try:
        asyncio.run(body())
    finally:
        client.close()


# -- layout version ----------------------------------------------------------------------------


def test_the_layout_version_is_recorded_and_a_newer_one_refused(
    redis_single: RedisServer, prefix: str
) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_single.port)
    key = Namespace(prefix).schema

    async def body() -> None:
        backend = RedisBackend.from_url(with_prefix(redis_single.url, prefix))
        assert isinstance(backend, Migratable)
        assert await backend.schema_versions() == (None, SCHEMA_VERSION)
        await backend.open()
        assert await backend.schema_versions() == (SCHEMA_VERSION, SCHEMA_VERSION)
        assert await backend.migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)
        await backend.close()
        client.set(key, str(SCHEMA_VERSION + 1))
        before = dump([redis_single.port], prefix)
        newer = RedisBackend.from_url(with_prefix(redis_single.url, prefix))
        with pytest.raises(SchemaTooNew):
            await newer.open()
        await newer.close()
        assert client.get(key) == str(SCHEMA_VERSION + 1).encode()
        assert dump([redis_single.port], prefix) == before

    try:
        asyncio.run(body())
    finally:
        client.close()


def test_namespaces_never_share_a_key() -> None:
    """A prefix ending where another one's owner part begins must not collide."""
    pairs = [
        (Namespace("a").scope(Tenant("t:b")), Namespace("a:t").scope(Tenant("b"))),
        (Namespace("a").scope(Tenant("-")), Namespace("a:t").scope(TENANTLESS)),
        (Namespace("a%3A").scope(TENANTLESS), Namespace("a:").scope(TENANTLESS)),
    ]
    for first, second in pairs:
        assert first.run("r") != second.run("r")
        assert first.ready != second.ready
    assert Namespace("a").registry != Namespace("a:t").registry


def test_a_wrong_password_is_permanent(prefix: str) -> None:
    with redis_server(extra=("--requirepass", "right")) as server:
        url = f"redis://:wrong@127.0.0.1:{server.port}/0"

        async def body() -> None:
            backend = RedisBackend.from_url(with_prefix(url, prefix))
            with pytest.raises(PermanentStoreError, match="authentication"):
                await backend.open()
            answer = await backend.graphs.save_graph(
                TENANTLESS, graph_ref(graph_document("g")), graph_document("g")
            )
            assert isinstance(answer, Permanent), answer
            await backend.close()
            good = RedisBackend.from_url(
                with_prefix(f"redis://:right@127.0.0.1:{server.port}/0", prefix)
            )
            await good.open()
            assert "right" not in repr(good)
            await good.close()

        asyncio.run(body())
