"""Admission limits on Redis (``Feature.ADMISSION``), on one server and on a Cluster,
against the memory reference: a scripted sequence answers as ``MemoryAdmissions`` does
step by step, racing clients never admit past a limit, and bad input stores nothing."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import attrs
import pytest
from docket_redis import RedisBackend
from docket_redis._admissions import PROMOTE_WALK
from docket_redis.testing import T0, dump, opened, with_prefix

from docket.clock import ManualClock
from docket.contract import Feature, NotFound
from docket.contract.memory import MemoryBackend
from docket.records import Admission, AdmissionView, HeldStart, QueueConfig, QueueStatus

SEC = timedelta(seconds=1)


@attrs.frozen
class Server:
    url: str
    ports: list[int]


@pytest.fixture(params=["single", "cluster"])
def server(request: pytest.FixtureRequest) -> Server:
    """The session's single server, or its Cluster."""
    if request.param == "single":
        single: Any = request.getfixturevalue("redis_single")
        return Server(url=str(single.url), ports=[single.port])
    cluster: Any = request.getfixturevalue("redis_cluster_nodes")
    return Server(url=str(cluster.url), ports=list(cluster.ports))


Backend = RedisBackend | MemoryBackend
Step = Callable[[Any, ManualClock], Awaitable[Any]]


def _config(name: str, limit: int | None, tenant_limit: int | None) -> QueueConfig:
    return QueueConfig(name=name, admission_limit=limit, tenant_admission_limit=tenant_limit)


def _script() -> list[Step]:
    """A scripted sequence of admission operations; each answers something to compare."""
    q, other = "onboard:eu", "b-other"
    odd = "a b}{%"  # a tenant id with a space and the hash tag's braces

    def tick(us: int) -> Step:
        async def advance(store: Any, clock: ManualClock) -> None:
            clock.advance(timedelta(microseconds=us))

        return advance

    def admit(run_id: str, tenant: str | None, priority: int = 0, queue: str = q) -> Step:
        start = f"start of {run_id}".encode() + b"\x00\xff"  # opaque bytes, not text
        return lambda s, c: s.admit(queue, run_id, tenant, priority, start)

    return [
        admit("a", "t1"),  # unknown queue
        lambda s, c: s.set_queue(_config(q, 3, 2)),
        admit("a", "t1"),
        tick(1),
        admit("b", "t1"),
        admit("c", "t1"),  # t1 at its cap: held
        admit("d", "t2", 5),
        tick(7),
        admit("e", "t2"),  # queue at its cap: held
        admit("f", None, 10),
        admit("g", "t1", -5),
        admit("a", "t1"),  # known: its state, nothing changes
        lambda s, c: s.admit(q, "c", "t9", 100, b"other"),
        lambda s, c: s.list_queues(),
        lambda s, c: s.admissions(q),
        lambda s, c: s.held_start("c", "t1"),
        lambda s, c: s.held_start("c", "t2"),  # another tenant's run
        lambda s, c: s.held_start("d", "t2"),  # admitted ones are found too
        lambda s, c: s.held_start("zz", None),
        tick(1_000_003),
        lambda s, c: s.finish_admitted(q, ["a", "unknown", "c"]),  # c is held: stays
        lambda s, c: s.promote_held(q),  # at the queue's cap
        lambda s, c: s.admissions(q),
        lambda s, c: s.set_queue(_config(q, 6, 2)),  # raise the limit, then promote
        tick(5),
        lambda s, c: s.promote_held(q),  # g skipped: t1 at its cap
        admit("h", "t1"),  # t1 has a held start: held though the queue has room
        admit("i", odd, -100),
        admit("j", odd, 100),
        lambda s, c: s.drop_held(q, "g"),
        lambda s, c: s.drop_held(q, "b"),  # admitted: not dropped
        lambda s, c: s.drop_held(q, "nope"),
        lambda s, c: s.drop_held(other, "h"),  # another queue's ledger
        lambda s, c: s.admissions(q, 2),
        lambda s, c: s.held_start("j", odd),
        lambda s, c: s.list_queues(),
        tick(42),
        lambda s, c: s.finish_admitted(q, ["b", "c", "b"], T0 + 9 * SEC),
        lambda s, c: s.set_queue(_config(other, None, 1)),
        admit("x", "t1", queue=other),
        admit("x", "t1"),  # one run id in two ledgers: held_start takes the first queue
        admit("y", "t1", queue=other),
        lambda s, c: s.held_start("x", "t1"),
        lambda s, c: s.finish_admitted(other, ["x"]),
        lambda s, c: s.held_start("x", "t1"),
        admit("z", None, queue="default"),  # default always exists, unlimited
        lambda s, c: s.set_queue(_config(q, None, None)),  # no limits: everything promotes
        lambda s, c: s.promote_held(q),
        lambda s, c: s.admissions(q),
        lambda s, c: s.finish_admitted(q, ["d", "e", "f", "h", "i", "j", "x"]),
        lambda s, c: s.finish_admitted("nowhere", ["a"]),
        lambda s, c: s.promote_held("nowhere"),
        lambda s, c: s.admissions("nowhere"),
        lambda s, c: s.drop_held("nowhere", "a"),
        lambda s, c: s.admissions(q),
        lambda s, c: s.list_queues(),
    ]


class _Both:
    """``backend.queues`` and ``backend.admissions`` as one object the steps call."""

    def __init__(self, backend: Backend) -> None:
        self._queues: Any = backend.queues
        self._admissions: Any = backend.admissions

    def __getattr__(self, name: str) -> Any:
        if hasattr(self._admissions, name):
            return getattr(self._admissions, name)
        return getattr(self._queues, name)


def _comparable(answer: Any) -> Any:
    if isinstance(answer, NotFound):
        return "not found"
    if isinstance(answer, list | tuple) and answer and isinstance(answer[0], QueueStatus):
        return [(s.config, s.running, s.admitted, s.held) for s in answer]
    if isinstance(answer, list | tuple):
        return list(answer)
    return answer


def test_the_ledger_answers_as_the_reference_for_a_scripted_sequence(
    server: Server, prefix: str
) -> None:
    async def trace(backend: Backend, clock: ManualClock) -> list[Any]:
        both = _Both(backend)
        return [_comparable(await step(both, clock)) for step in _script()]

    async def body() -> None:
        redis_clock, memory_clock = ManualClock(T0), ManualClock(T0)
        expected = await trace(MemoryBackend(memory_clock), memory_clock)
        async with opened(server.url, prefix, clock=redis_clock) as backend:
            assert Feature.ADMISSION in backend.capabilities().features
            got = await trace(backend, redis_clock)
        for step, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
            assert mine == theirs, f"step {step}"
        # the script exercises what it claims to
        assert Admission.HELD in expected and "not found" in expected
        promoted = [
            a for a in expected if isinstance(a, list) and a and isinstance(a[0], HeldStart)
        ]
        assert len(promoted) >= 3

    asyncio.run(body())


def test_held_starts_order_exactly_by_priority_then_seq_near_float_precision(
    server: Server, prefix: str
) -> None:
    """Every priority, with seqs just under 2**53 (where a score mixing priority and seq
    in one double would round), keeps promotion_key's order exactly."""

    async def body() -> None:
        async with opened(server.url, prefix, clock=ManualClock(T0)) as backend:
            await backend.queues.set_queue(_config("q", 1, None))
            assert await backend.admissions.admit("q", "first", None, 0, b"") == Admission.ADMITTED
            base = 2**53 - 100
            seqs = backend._engine.ns.queues.admit_seqs
            await backend._engine.transport.command(seqs, "HSET", seqs, "q", str(base))
            rng = random.Random(7)
            priorities = [rng.randint(-100, 100) for _ in range(30)] + [-100, 100, 0, 0, 0]
            for n, priority in enumerate(priorities):
                answer = await backend.admissions.admit("q", f"r{n}", None, priority, b"s")
                assert answer == Admission.HELD
            view = await backend.admissions.admissions("q")
            expected = sorted(
                ((-p, base + 1 + n, f"r{n}") for n, p in enumerate(priorities)), key=lambda k: k[:2]
            )
            assert [(-s.priority, s.seq, s.run_id) for s in view.held] == expected
            await backend.queues.set_queue(_config("q", None, None))
            promoted = await backend.admissions.promote_held("q")
            assert [s.run_id for s in promoted] == [k[2] for k in expected]

    asyncio.run(body())


def test_a_promotion_examines_at_most_the_walk_bound(server: Server, prefix: str) -> None:
    """More held starts than PROMOTE_WALK of a tenant at its cap lead the queue: one
    promotion stops there (documented), and promotes the rest once they have gone."""

    async def body() -> None:
        async with opened(server.url, prefix, clock=ManualClock(T0)) as backend:
            admissions = backend.admissions
            await backend.queues.set_queue(_config("q", None, 1))
            assert await admissions.admit("q", "busy", "t1", 0, b"") == Admission.ADMITTED
            for n in range(PROMOTE_WALK):
                assert await admissions.admit("q", f"w{n}", "t1", 0, b"") == Admission.HELD
            assert await admissions.admit("q", "late", "t2", -1, b"") == Admission.ADMITTED
            assert await admissions.admit("q", "later", "t2", -1, b"") == Admission.HELD
            await admissions.finish_admitted("q", ["late"])  # "later" is past the walk
            view = await admissions.admissions("q", 5000)
            assert "later" in {s.run_id for s in view.held}
            for n in range(PROMOTE_WALK):
                assert await admissions.drop_held("q", f"w{n}") is not None
            assert [s.run_id for s in await admissions.promote_held("q")] == ["later"]

    asyncio.run(body())


def test_eight_racing_clients_never_admit_past_the_limits(server: Server, prefix: str) -> None:
    """8 clients (own connections, the server's clock) race admit and finish_admitted
    over 50 rounds; after every step the ledger is within its limits, no start is
    admitted twice, and every start is admitted exactly once in the end."""
    limit, tenant_limit, clients, rounds = 3, 2, 8, 50
    tenants = ["t0", "t1", None]

    async def body() -> None:
        backends = [RedisBackend.from_url(with_prefix(server.url, prefix)) for _ in range(clients)]
        for backend in backends:
            await backend.open()
        try:
            first = backends[0].admissions
            await backends[0].queues.set_queue(_config("q", limit, tenant_limit))
            rng = random.Random(11)
            ever_admitted: set[str] = set()

            async def check() -> AdmissionView:
                view = await first.admissions("q")
                assert len(view.admitted) <= limit, view
                per_tenant = Counter(s.tenant for s in view.admitted)
                assert max(per_tenant.values(), default=0) <= tenant_limit, view
                status = {s.config.name: s for s in await backends[0].queues.list_queues()}
                assert (status["q"].admitted, status["q"].held) == (
                    len(view.admitted),
                    len(view.held),
                )
                return view

            def note(run_ids: list[str]) -> None:
                assert not ever_admitted & set(run_ids), run_ids
                assert len(set(run_ids)) == len(run_ids)
                ever_admitted.update(run_ids)

            for round_no in range(rounds):
                starts = [
                    [(f"{round_no}-{i}-{k}", rng.choice(tenants)) for k in range(1 + (i % 2))]
                    for i in range(clients)
                ]

                async def admit_all(
                    backend: RedisBackend, mine: list[tuple[str, str | None]]
                ) -> list[str]:
                    out = []
                    for run_id, tenant in mine:
                        answer = await backend.admissions.admit("q", run_id, tenant, 0, b"x")
                        if answer == Admission.ADMITTED:
                            out.append(run_id)
                    return out

                answers = await asyncio.gather(
                    *(admit_all(b, s) for b, s in zip(backends, starts, strict=True))
                )
                note([run_id for answer in answers for run_id in answer])
                view = await check()
                while view.admitted:
                    admitted = [s.run_id for s in view.admitted]
                    # several clients finish overlapping sets at once
                    finishing = [
                        rng.sample(admitted, k=rng.randint(1, len(admitted))) for _ in range(4)
                    ]
                    promoted = await asyncio.gather(
                        *(
                            b.admissions.finish_admitted("q", ids)
                            for b, ids in zip(backends, finishing, strict=False)
                        )
                    )
                    note([s.run_id for answer in promoted for s in answer])
                    view = await check()
                assert not view.held, (round_no, view)
            assert len(ever_admitted) == sum(1 + (i % 2) for i in range(clients)) * rounds
        finally:
            for backend in backends:
                await backend.close()

    asyncio.run(body())


def test_bad_calls_raise_or_refuse_and_change_nothing(server: Server, prefix: str) -> None:
    async def body() -> None:
        async with opened(server.url, prefix, clock=ManualClock(T0)) as backend:
            admissions = backend.admissions
            await backend.queues.set_queue(_config("q", 1, None))
            assert await admissions.admit("q", "a", None, 0, b"") == Admission.ADMITTED
            assert await admissions.admit("q", "b", "t", 3, b"b") == Admission.HELD
            before = dump(server.ports, prefix)
            view = await admissions.admissions("q")
            bad: list[Callable[[], Awaitable[Any]]] = [
                lambda: admissions.admit("bad name", "c", None, 0, b""),
                lambda: admissions.admit("q", "", None, 0, b""),
                lambda: admissions.admit("q", "x" * 256, None, 0, b""),
                lambda: admissions.admit("q", "c", "", 0, b""),
                lambda: admissions.admit("q", "c", 7, 0, b""),  # type: ignore[arg-type]
                lambda: admissions.admit("q", "c", None, 101, b""),
                lambda: admissions.admit("q", "c", None, True, b""),
                lambda: admissions.admit("q", "c", None, 0, "text"),  # type: ignore[arg-type]
                lambda: admissions.admit("q", "c", None, 0, b"x" * (4 * 1024 * 1024 + 1)),
                lambda: admissions.finish_admitted("q", "a"),
                lambda: admissions.finish_admitted("q", ["a", ""]),
                lambda: admissions.finish_admitted("{q}", ["a"]),
                lambda: admissions.promote_held("q q"),
                lambda: admissions.drop_held("q", ""),
                lambda: admissions.held_start("", None),
                lambda: admissions.admissions("q", 0),
                lambda: admissions.admissions("q", True),
            ]
            for n, call in enumerate(bad):
                with pytest.raises(ValueError):
                    await call()
                assert dump(server.ports, prefix) == before, n
            # an unknown queue is refused with NotFound, storing nothing
            assert await admissions.admit("nope", "c", None, 0, b"") == NotFound("queue")
            assert dump(server.ports, prefix) == before
            assert await admissions.admissions("q") == view

    asyncio.run(body())
