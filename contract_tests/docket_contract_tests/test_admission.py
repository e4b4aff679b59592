"""Admission limits (the optional ``admission`` feature): ADMIT-LIMIT, ADMIT-TENANT,
ADMIT-ORDER, ADMIT-FINISH, ADMIT-AGAIN, ADMIT-DROP, ADMIT-FIND, ADMIT-RAISE, ADMIT-STATUS,
ADMIT-BAD-INPUT, ADMIT-START-BYTES.

A backend that declares ``admission`` (and ``queues``, which it needs) has
``backend.admissions``, an :class:`~docket.contract.protocols.AdmissionStore`: each
admission-limited queue's ledger of admitted and held starts, kept by the rules of
:mod:`docket.contract.admission` and answering exactly as the memory backend does
(docs/contract.md#admission). Without the feature the cases check nothing.

What is compared: every answer (``Admission``, the promoted starts and their order, the
views, ``list_queues``' ``admitted``/``held``) and every field of a ``HeldStart`` except
the value of ``seq``, of which only the order is held to the rule (increasing in admit
order within a queue): a store may number from anywhere.

Times: ``admit``, ``finish_admitted`` and ``promote_held`` take the kit's ``now`` in most
steps, so a start's ``at`` is checked exactly; some steps give none, and then ``at`` must
be the backend's own time, between ``t0`` and a ``now()`` read after the call.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime

import attrs

from docket.contract import Feature, NotFound
from docket.contract.admission import MAX_START_BYTES
from docket.contract.protocols import AdmissionStore, QueueStore
from docket.records import (
    DEFAULT_QUEUE,
    MAX_PRIORITY,
    MIN_PRIORITY,
    Admission,
    AdmissionView,
    HeldStart,
    QueueConfig,
    QueueStatus,
)
from docket_contract_tests.fixtures import junk
from docket_contract_tests.kit import Kit, invariant

ADMITTED, HELD = Admission.ADMITTED, Admission.HELD
#: ADMIT-LIMIT: the queue's admission limit and the admitters racing for it each round.
LIMIT = 3
ADMITTERS = 8
#: The operations an ``AdmissionStore`` has (the protocol is not runtime-checkable).
OPERATIONS = ("admit", "finish_admitted", "promote_held", "drop_held", "held_start", "admissions")


def _store(k: Kit) -> AdmissionStore | None:
    if not k.declares(Feature.ADMISSION):
        return None
    store = getattr(k.b, "admissions", None)
    missing = [op for op in OPERATIONS if not callable(getattr(store, op, None))]
    k.check(
        not missing,
        f"the backend declares admission but backend.admissions ({store!r}) lacks {missing}",
    )
    queues = getattr(k.b, "queues", None)
    k.check(isinstance(queues, QueueStore), "admission needs queues: backend.queues is missing")
    return store  # its operations were checked above


def _payload(run_id: str) -> bytes:
    return f"start of {run_id}".encode()


class _Queue:
    """One admission-limited queue of the case, with checked calls."""

    def __init__(self, k: Kit, store: AdmissionStore, name: str) -> None:
        self.k = k
        self.store = store
        self.name = name

    @property
    def queues(self) -> QueueStore:
        store = getattr(self.k.b, "queues", None)
        assert isinstance(store, QueueStore)
        return store

    async def configure(self, limit: int | None, tenant_limit: int | None = None) -> None:
        config = QueueConfig(
            name=self.name, admission_limit=limit, tenant_admission_limit=tenant_limit
        )
        self.k.eq(await self.queues.set_queue(config), config, f"set_queue({config})")

    async def admit(
        self,
        run_id: str,
        tenant: str | None = None,
        priority: int = 0,
        start: bytes | None = None,
        now: datetime | None = None,
    ) -> Admission:
        body = _payload(run_id) if start is None else start
        got = await self.store.admit(self.name, run_id, tenant, priority, body, now=now)
        return self.k.isa(got, Admission, f"admit({run_id!r}) in {self.name!r}")

    async def expect(
        self,
        want: Admission,
        run_id: str,
        tenant: str | None = None,
        priority: int = 0,
        now: datetime | None = None,
        what: str = "",
        start: bytes | None = None,
    ) -> None:
        got = await self.admit(run_id, tenant, priority, start, now)
        self.k.eq(got, want, f"admit({run_id!r}, tenant={tenant!r}, priority={priority}) {what}")

    async def finish(self, run_ids: Sequence[str], now: datetime | None = None) -> list[HeldStart]:
        got = await self.store.finish_admitted(self.name, run_ids, now=now)
        return self._starts(got, f"finish_admitted({list(run_ids)!r})")

    async def promote(self, now: datetime | None = None) -> list[HeldStart]:
        return self._starts(await self.store.promote_held(self.name, now=now), "promote_held")

    def _starts(self, got: object, what: str) -> list[HeldStart]:
        self.k.check(isinstance(got, Sequence), f"{what}: expected a sequence, got {got!r}")
        assert isinstance(got, Sequence)
        starts = list(got)
        for start in starts:
            self.k.isa(start, HeldStart, f"{what}: an item")
        return starts

    async def view(self, limit: int = 1000) -> AdmissionView:
        got = await self.store.admissions(self.name, limit)
        return self.k.isa(got, AdmissionView, f"admissions({self.name!r})")

    async def ids(self) -> tuple[list[str], list[str]]:
        """The admitted run ids by ``seq`` and the held ones in promotion order."""
        view = await self.view()
        return _ids(view.admitted), _ids(view.held)

    async def status(self) -> QueueStatus:
        listed = [s for s in await self.queues.list_queues() if s.config.name == self.name]
        self.k.eq(len(listed), 1, f"list_queues rows for queue {self.name!r}")
        return self.k.isa(listed[0], QueueStatus, f"list_queues row of {self.name!r}")

    async def counts(self) -> tuple[int, int]:
        status = await self.status()
        return status.admitted, status.held


async def _queue(
    k: Kit, store: AdmissionStore, label: str, limit: int | None, tenant_limit: int | None = None
) -> _Queue:
    queue = _Queue(k, store, k.name(label))
    await queue.configure(limit, tenant_limit)
    return queue


def _ids(starts: Iterable[HeldStart]) -> list[str]:
    return [s.run_id for s in starts]


def _expect_start(
    k: Kit,
    got: HeldStart | None,
    want: HeldStart,
    what: str,
    between: tuple[datetime, datetime] | None = None,
) -> HeldStart:
    """``got`` is ``want`` but for ``seq``'s value (and ``at``, when ``between`` is given:
    then it must lie in that window of the backend's clock)."""
    start = k.isa(got, HeldStart, what)
    if between is not None:
        k.check(
            between[0] <= start.at <= between[1],
            f"{what}: at {start.at} is not the backend's time (between {between[0]} and "
            f"{between[1]})",
        )
        want = attrs.evolve(want, at=start.at)
    k.eq(start, attrs.evolve(want, seq=start.seq), what)
    return start


def _increasing(k: Kit, starts: Sequence[HeldStart], what: str) -> None:
    seqs = [s.seq for s in starts]
    k.check(
        all(isinstance(s, int) and not isinstance(s, bool) for s in seqs),
        f"{what}: seq is not an integer: {seqs}",
    )
    k.check(all(a < b for a, b in itertools.pairwise(seqs)), f"{what}: seqs {seqs}")


# -- ADMIT-LIMIT ------------------------------------------------------------------------------


@invariant("ADMIT-LIMIT")
async def test_racing_admitters_never_exceed_the_admission_limit(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    q = await _queue(k, store, "limited", LIMIT)
    tenants = [None, k.name("ta"), k.name("tb")]  # no tenant cap: tenants change nothing here
    for round_ in range(k.rounds):
        now = k.at(round_ + 1)
        ids = [k.name(f"r{round_}-a{i}") for i in range(ADMITTERS)]

        def admitter(
            i: int, ids: list[str] = ids, now: datetime = now
        ) -> Callable[[], Awaitable[Admission]]:
            return lambda: q.admit(ids[i], tenants[i % 3], now=now)

        answers = await k.gather_barrier(*(admitter(i) for i in range(ADMITTERS)))
        admitted = {run_id for run_id, a in zip(ids, answers, strict=True) if a is ADMITTED}
        k.eq(len(admitted), LIMIT, f"round {round_}: starts admitted of {ADMITTERS} racing")
        got_admitted, got_held = await q.ids()
        k.eq(set(got_admitted), admitted, f"round {round_}: admissions().admitted")
        k.eq(set(got_held), set(ids) - admitted, f"round {round_}: admissions().held")
        # every admitted run finishes, each by its own racing caller; the promoted take
        # the freed places and finish in turn, until the round's starts are all done
        done, live = set(admitted), set(admitted)
        while live:

            def finisher(
                run_id: str, now: datetime = now
            ) -> Callable[[], Awaitable[list[HeldStart]]]:
                return lambda: q.finish([run_id], now=now)

            results = await k.gather_barrier(*(finisher(r) for r in sorted(live)))
            promoted = [s.run_id for result in results for s in result]
            k.check(
                len(promoted) == len(set(promoted)) and not set(promoted) & done,
                f"round {round_}: a start promoted twice, or one already admitted: {promoted}",
            )
            waiting = len(ids) - len(done)
            k.eq(
                len(promoted),
                min(LIMIT, waiting),
                f"round {round_}: promoted after finishing {len(live)}",
            )
            got_admitted, _ = await q.ids()
            k.eq(set(got_admitted), set(promoted), f"round {round_}: admitted after the finishes")
            live = set(promoted)
            done |= live
        k.eq(done, set(ids), f"round {round_}: every start admitted once")
        k.eq(await q.ids(), ([], []), f"round {round_}: the ledger after the round")


# -- ADMIT-TENANT -----------------------------------------------------------------------------


@invariant("ADMIT-TENANT")
async def test_a_tenant_cap_holds_within_the_queue_cap(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    ta, tb, tc = k.name("ta"), k.name("tb"), k.name("tc")
    q = await _queue(k, store, "tenants", 4, 2)
    await q.expect(ADMITTED, "a1", ta, now=k.at(1))
    await q.expect(ADMITTED, "a2", ta, now=k.at(2))
    await q.expect(HELD, "a3", ta, now=k.at(3), what="(its tenant at its cap of 2)")
    await q.expect(ADMITTED, "b1", tb, now=k.at(4))
    await q.expect(ADMITTED, "n1", None, now=k.at(5), what="(tenantless: a tenant of its own)")
    await q.expect(HELD, "b2", tb, now=k.at(6), what="(the queue at its cap of 4)")
    await q.expect(HELD, "c1", tc, now=k.at(7), what="(the queue at its cap of 4)")
    k.eq(await q.ids(), (["a1", "a2", "b1", "n1"], ["a3", "b2", "c1"]), "the ledger")
    k.eq(await q.counts(), (4, 3), "list_queues' admitted and held")
    got = await q.finish(["b1"], now=k.at(10))
    k.eq(_ids(got), ["b2"], "finishing b1: a3's tenant is still at its cap, b2 next")
    got = await q.finish(["a1"], now=k.at(11))
    k.eq(_ids(got), ["a3"], "finishing a1: a3's tenant is under its cap again")
    got = await q.finish(["n1", "b2"], now=k.at(12))
    k.eq(_ids(got), ["c1"], "finishing n1 and b2: the one held start")
    await q.expect(HELD, "a4", ta, now=k.at(13), what="(its tenant at its cap, the queue not)")
    await q.expect(ADMITTED, "n2", None, now=k.at(14), what="(tenantless, under both caps)")
    k.eq(await q.ids(), (["a2", "a3", "c1", "n2"], ["a4"]), "the ledger at the end")
    # a tenant cap alone, no queue cap: tenantless runs are one tenant of their own
    only = await _queue(k, store, "tenants-only", None, 1)
    await only.expect(ADMITTED, "x1", ta, now=k.at(20))
    await only.expect(ADMITTED, "x2", tb, now=k.at(21))
    await only.expect(ADMITTED, "x3", None, now=k.at(22))
    await only.expect(HELD, "x4", ta, now=k.at(23), what="(a tenant cap of 1)")
    await only.expect(HELD, "x5", None, now=k.at(24), what="(the tenantless at their cap of 1)")
    await only.expect(ADMITTED, "x6", tc, now=k.at(25), what="(no queue cap)")
    got = await only.finish(["x1", "x3"], now=k.at(26))
    k.eq(_ids(got), ["x4", "x5"], "finishing x1 and x3 promotes both, in seq order")
    k.eq(await only.counts(), (4, 0), "list_queues' admitted and held at the end")


# -- ADMIT-ORDER ------------------------------------------------------------------------------


@invariant("ADMIT-ORDER")
async def test_held_starts_are_promoted_by_priority_then_fifo(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    ta, tb = k.name("ta"), k.name("tb")
    q = await _queue(k, store, "order", 1)
    await q.expect(ADMITTED, "gate", None, now=k.at(1))
    # held in this order, with ids that sort another way again
    held = [
        ("z-p0-first", 0, None),
        ("m-p7-first", 7, ta),
        ("a-p0-second", 0, tb),
        ("y-max", MAX_PRIORITY, None),
        ("b-p7-second", 7, None),
        ("c-min", MIN_PRIORITY, ta),
        ("x-minus-5", -5, tb),
    ]
    wants: dict[str, HeldStart] = {}
    for i, (run_id, priority, tenant) in enumerate(held):
        await q.expect(HELD, run_id, tenant, priority, now=k.at(2 + i), what="(the queue is full)")
        wants[run_id] = HeldStart(
            queue=q.name,
            run_id=run_id,
            tenant=tenant,
            priority=priority,
            seq=0,
            start=_payload(run_id),
            at=k.at(2 + i),
        )
    order = ["y-max", "m-p7-first", "b-p7-second", "z-p0-first", "a-p0-second", "x-minus-5"]
    order.append("c-min")
    view = await q.view()
    k.eq(_ids(view.held), order, "admissions().held: priority, highest first, then FIFO")
    for entry in view.held:
        _expect_start(k, entry, wants[entry.run_id], f"the held start {entry.run_id!r}")
    by_seq = sorted([*view.admitted, *view.held], key=lambda s: s.seq)
    k.eq(_ids(by_seq), ["gate", *(h[0] for h in held)], "the starts by seq: in admit order")
    _increasing(k, by_seq, "seq in admit order")
    current = "gate"
    for i, run_id in enumerate(order):
        now = k.at(100 + i)
        got = await q.finish([current], now=now)
        k.eq(_ids(got), [run_id], f"finishing {current!r} promotes the next in order")
        promoted = _expect_start(
            k, got[0], attrs.evolve(wants[run_id], at=now), f"promoted {run_id!r} (at: now)"
        )
        k.eq(
            await q.view(),
            AdmissionView(
                admitted=(promoted,), held=tuple(s for s in view.held if s.run_id in order[i + 1 :])
            ),
            f"the ledger after promoting {run_id!r}",
        )
        current = run_id
    # a tenant at its cap is skipped, not waited for; the queue's cap stops the walk
    skip = await _queue(k, store, "order-skip", 3, 1)
    td, te, tf = k.name("td"), k.name("te"), k.name("tf")
    await skip.expect(ADMITTED, "a1", ta, now=k.at(200))
    await skip.expect(ADMITTED, "b1", tb, now=k.at(201))
    await skip.expect(HELD, "a2", ta, 100, now=k.at(202), what="(its tenant at its cap of 1)")
    await skip.expect(ADMITTED, "c1", td, now=k.at(203))
    await skip.expect(HELD, "d1", te, -1, now=k.at(204), what="(the queue at its cap of 3)")
    await skip.expect(HELD, "e1", tf, 5, now=k.at(205), what="(the queue at its cap of 3)")
    k.eq((await skip.ids())[1], ["a2", "e1", "d1"], "held, in promotion order")
    got = await skip.finish(["b1"], now=k.at(210))
    k.eq(_ids(got), ["e1"], "finishing b1: a2 skipped (its tenant at its cap), e1 (5) next")
    got = await skip.finish(["c1"], now=k.at(211))
    k.eq(_ids(got), ["d1"], "finishing c1: a2 skipped again, d1")
    got = await skip.finish(["a1"], now=k.at(212))
    k.eq(_ids(got), ["a2"], "finishing a1: a2 at last")
    k.eq(await skip.ids(), (["a2", "d1", "e1"], []), "the ledger by seq at the end")


# -- ADMIT-FINISH -----------------------------------------------------------------------------


@invariant("ADMIT-FINISH")
async def test_finishing_frees_and_promotes_in_one_step(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    q = await _queue(k, store, "finish", 1)
    other = await _queue(k, store, "finish-other", 1)
    await q.expect(ADMITTED, "a", now=k.at(1))
    await q.expect(HELD, "b", now=k.at(2))
    await q.expect(HELD, "c", now=k.at(3))
    before = await q.view()
    k.eq(await q.finish(["b", "nobody"], now=k.at(4)), [], "finishing a held and an unknown id")
    k.eq(await q.finish([], now=k.at(4)), [], "finishing nothing")
    k.eq(await other.finish(["a"], now=k.at(4)), [], "finishing a in another queue")
    unknown = _Queue(k, store, k.name("never-configured"))
    k.eq(await unknown.finish(["a"], now=k.at(4)), [], "finishing in an unknown queue")
    k.eq(await q.view(), before, "the ledger after finishing nothing of it")
    # the backend's clock: a promoted start's at is the backend's time of the finish
    low = await k.b.now()
    got = await q.finish(["a", "a", "nobody"])
    high = await k.b.now()
    k.eq(_ids(got), ["b"], "finishing a (twice in the list) and an unknown id")
    _expect_start(k, got[0], before.held[0], "b promoted (at: the backend's)", (low, high))
    k.eq(await q.ids(), (["b"], ["c"]), "the ledger after finishing a")
    got = await q.finish(["b"], now=k.at(5))
    _expect_start(k, got[0] if got else None, attrs.evolve(before.held[1], at=k.at(5)), "c")
    k.eq(await q.finish(["c"], now=k.at(6)), [], "finishing the last")
    k.eq((await q.ids(), await q.counts()), (([], []), (0, 0)), "the ledger at the end")
    # a finish races a start of another tenant: the freed place goes to the held start
    # (promotion is part of the finish), whichever call the store takes first
    race = await _queue(k, store, "finish-race", 1)
    ta, tb = k.name("ta"), k.name("tb")
    for round_ in range(k.rounds):
        now = k.at(1000 + round_)
        a, h, n = (k.name(f"r{round_}-{x}") for x in "ahn")
        await race.expect(ADMITTED, a, ta, now=now)
        await race.expect(HELD, h, ta, now=now)
        finish = functools.partial(race.finish, [a], now)
        admit = functools.partial(race.admit, n, tb, 0, None, now)
        if round_ % 2:  # either call may reach the store first
            answer, promoted = await k.gather_barrier(admit, finish)
        else:
            promoted, answer = await k.gather_barrier(finish, admit)
        k.eq(
            (_ids(k.isa(promoted, list, "finish_admitted")), answer),
            ([h], HELD),
            f"round {round_}: finish_admitted([a]) racing admit(n) of another tenant "
            "(promoted, and n's answer)",
        )
        k.eq(_ids(await race.finish([h], now=now)), [n], f"round {round_}: then n")
        k.eq(await race.finish([n], now=now), [], f"round {round_}: and nothing")


# -- ADMIT-AGAIN ------------------------------------------------------------------------------


@invariant("ADMIT-AGAIN")
async def test_admitting_a_known_run_answers_its_state_and_changes_nothing(
    docket_kit: Kit,
) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    ta, tb = k.name("ta"), k.name("tb")
    q = await _queue(k, store, "again", 2)
    await q.expect(ADMITTED, "a", ta, 3, now=k.at(1))
    await q.expect(ADMITTED, "a", tb, -3, now=k.at(2), what="again, as another tenant")
    low = await k.b.now()
    await q.expect(ADMITTED, "b", None)  # the backend's clock
    high = await k.b.now()
    await q.expect(HELD, "c", tb, now=k.at(3))
    before = await q.view()
    want_b = HeldStart(
        queue=q.name, run_id="b", tenant=None, priority=0, seq=0, start=_payload("b"), at=low
    )
    _expect_start(k, before.admitted[1], want_b, "b (at: the backend's)", (low, high))
    await q.expect(HELD, "c", tb, MAX_PRIORITY, now=k.at(4), start=b"other", what="again")
    await q.expect(ADMITTED, "a", ta, 3, now=k.at(4), what="again, the queue full")
    await q.expect(ADMITTED, "b", ta, 3, now=k.at(4), start=b"other", what="again")
    k.eq(await q.view(), before, "the ledger after admitting known runs again")
    k.eq(await q.counts(), (2, 1), "list_queues after admitting known runs again")
    # the same start sent by many callers at once is one start
    many = await k.gather_barrier(*(functools.partial(q.admit, "d", ta, 0, None, k.at(5)),) * 8)
    k.eq(many, [HELD] * 8, "8 racing admits of one new start")
    k.eq(await q.ids(), (["a", "b"], ["c", "d"]), "the ledger after the racing admits")
    k.eq(await q.counts(), (2, 2), "list_queues after the racing admits")
    got = await q.finish(["a"], now=k.at(6))
    _expect_start(k, got[0] if got else None, attrs.evolve(before.held[0], at=k.at(6)), "c")
    # a finished run is forgotten: admitting its id again is a new start
    await q.expect(HELD, "a", ta, 3, now=k.at(7), what="after a finished")
    view = await q.view()
    k.eq(_ids(view.held), ["a", "d"], "held in promotion order: the new a (priority 3) first")
    _increasing(k, view.held[::-1], "d, then the new a")
    _expect_start(
        k,
        view.held[0],
        attrs.evolve(before.admitted[0], at=k.at(7)),
        "a, held anew (at: its new admit)",
    )


# -- ADMIT-DROP -------------------------------------------------------------------------------


@invariant("ADMIT-DROP")
async def test_dropping_removes_a_held_start_only(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    ta, tb, tc = k.name("ta"), k.name("tb"), k.name("tc")
    q = await _queue(k, store, "drop", 2)
    other = await _queue(k, store, "drop-other", 2)
    await q.expect(ADMITTED, "a", ta, now=k.at(1))
    await q.expect(ADMITTED, "b", tb, now=k.at(2))
    await q.expect(HELD, "c", ta, 4, now=k.at(3))
    await q.expect(HELD, "d", tc, now=k.at(4))
    await q.expect(HELD, "e", tc, now=k.at(5))
    before = await q.view()
    k.eq(await store.drop_held(q.name, "a"), None, "drop_held of an admitted start")
    k.eq(await store.drop_held(q.name, "nobody"), None, "drop_held of an unknown id")
    k.eq(await store.drop_held(other.name, "c"), None, "drop_held of c in another queue")
    k.eq(await q.view(), before, "the ledger after dropping nothing")
    dropped = await store.drop_held(q.name, "c")
    _expect_start(k, dropped, before.held[0], "drop_held of c answers its start")
    k.eq(await store.drop_held(q.name, "c"), None, "drop_held of c again")
    k.eq(await store.held_start("c", ta), None, "held_start of a dropped start")
    k.eq(await q.ids(), (["a", "b"], ["d", "e"]), "the ledger after dropping c")
    k.eq(await q.counts(), (2, 2), "list_queues after dropping c: nothing promoted")
    # a raised cap: ta has no held start left, so its new start is admitted; tc has
    await q.configure(3)
    await q.expect(ADMITTED, "f", ta, now=k.at(6), what="(ta holds nothing now)")
    await q.expect(HELD, "g", tc, now=k.at(7), what="(tc has held starts: no overtaking)")
    got = await q.finish(["a"], now=k.at(8))
    k.eq(_ids(got), ["d"], "finishing a promotes d")
    k.eq(await q.ids(), (["b", "d", "f"], ["e", "g"]), "the ledger at the end")


# -- ADMIT-FIND -------------------------------------------------------------------------------


@invariant("ADMIT-FIND")
async def test_a_start_is_found_by_run_id_within_its_tenant(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    ta, tb = k.name("ta"), k.name("tb")
    q1 = await _queue(k, store, "find-1", 1)
    q2 = await _queue(k, store, "find-2", 1)
    await q1.expect(ADMITTED, "a1", ta, 2, now=k.at(1))
    await q1.expect(HELD, "a2", ta, now=k.at(2))
    await q1.expect(HELD, "n1", None, -2, now=k.at(3))
    await q2.expect(ADMITTED, "b1", tb, now=k.at(4))
    v1, v2 = await q1.view(), await q2.view()
    starts = {s.run_id: s for s in (*v1.admitted, *v1.held, *v2.admitted)}
    for run_id, tenant in (("a1", ta), ("a2", ta), ("n1", None), ("b1", tb)):
        found = await store.held_start(run_id, tenant)
        k.eq(found, starts[run_id], f"held_start({run_id!r}, {tenant!r})")
    misses: list[tuple[str, str | None, str]] = [
        ("a1", tb, "another tenant's start"),
        ("a1", None, "a tenant's start, asked tenantless"),
        ("n1", ta, "a tenantless start, asked by a tenant"),
        ("b1", ta, "another tenant's start in another queue"),
        ("nobody", ta, "an unknown run"),
    ]
    for run_id, tenant, what in misses:
        k.eq(await store.held_start(run_id, tenant), None, f"held_start: {what}")
    got = await q1.finish(["a1"], now=k.at(5))
    k.eq(_ids(got), ["a2"], "finishing a1 promotes a2")
    k.eq(await store.held_start("a1", ta), None, "held_start of a finished run")
    found = await store.held_start("a2", ta)
    k.eq(found, attrs.evolve(starts["a2"], at=k.at(5)), "held_start of a promoted start")
    await store.drop_held(q1.name, "n1")
    k.eq(await store.held_start("n1", None), None, "held_start of a dropped start")


# -- ADMIT-RAISE ------------------------------------------------------------------------------


@invariant("ADMIT-RAISE")
async def test_a_new_config_keeps_the_ledger_and_promote_held_fills_it(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    ta, tb, tc = k.name("ta"), k.name("tb"), k.name("tc")
    q = await _queue(k, store, "raise", 2)
    await q.expect(ADMITTED, "a", ta, now=k.at(1))
    await q.expect(ADMITTED, "b", tb, now=k.at(2))
    await q.expect(HELD, "c", ta, now=k.at(3))
    k.eq(await q.promote(now=k.at(4)), [], "promote_held at the cap")
    await q.configure(4)
    k.eq(await q.ids(), (["a", "b"], ["c"]), "the ledger after raising the cap to 4")
    await q.expect(HELD, "d", ta, now=k.at(5), what="(ta's c is held: no overtaking)")
    await q.expect(ADMITTED, "e", tb, now=k.at(6), what="(under the raised cap)")
    low = await k.b.now()
    got = await q.promote()
    high = await k.b.now()
    k.eq(_ids(got), ["c"], "promote_held after the raise fills the one place left")
    held_c = HeldStart(
        queue=q.name, run_id="c", tenant=ta, priority=0, seq=0, start=_payload("c"), at=low
    )
    _expect_start(k, got[0], held_c, "c promoted (at: the backend's)", (low, high))
    k.eq(await q.promote(now=k.at(7)), [], "promote_held again")
    # a lower cap evicts nothing: the admitted finish, and no one is promoted until under it
    await q.configure(1)
    k.eq(await q.ids(), (["a", "b", "c", "e"], ["d"]), "the ledger after lowering the cap to 1")
    await q.expect(HELD, "f", tc, now=k.at(8))
    k.eq(await q.promote(now=k.at(9)), [], "promote_held over the lowered cap")
    k.eq(await q.finish(["a"], now=k.at(10)), [], "finishing a, still over the cap")
    # a paused queue still admits and promotes (pausing stops claims, not admission)
    await q.queues.set_queue(QueueConfig(name=q.name, admission_limit=1, paused=True))
    got = await q.finish(["b", "c", "e"], now=k.at(11))
    k.eq(_ids(got), ["d"], "finishing the rest in a paused queue promotes d")
    # no admission limit any more: every held start is promoted, every new one admitted
    await q.queues.set_queue(QueueConfig(name=q.name))
    got = await q.promote(now=k.at(12))
    k.eq(_ids(got), ["f"], "promote_held without limits")
    await q.expect(ADMITTED, "g", tc, now=k.at(13), what="(no limits)")
    k.eq(await q.ids(), (["d", "f", "g"], []), "the ledger at the end")
    k.eq(await _Queue(k, store, k.name("unknown")).promote(), [], "promote_held, unknown queue")


# -- ADMIT-STATUS -----------------------------------------------------------------------------


@invariant("ADMIT-STATUS")
async def test_list_queues_and_admissions_report_the_ledger(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    ta, tb, tc = k.name("ta"), k.name("tb"), k.name("tc")
    q = await _queue(k, store, "status", 2, 1)
    plain = QueueConfig(name=k.name("plain"), execution_limit=2)
    await q.queues.set_queue(plain)
    await q.expect(ADMITTED, "a", ta, now=k.at(1))
    await q.expect(ADMITTED, "b", tb, now=k.at(2))
    await q.expect(HELD, "c", ta, now=k.at(3))
    await q.expect(HELD, "d", None, 9, now=k.at(4))
    await q.expect(HELD, "e", tc, 9, now=k.at(5))
    config = QueueConfig(name=q.name, admission_limit=2, tenant_admission_limit=1)
    listed = {s.config.name: s for s in await q.queues.list_queues()}
    k.eq(sorted(listed), sorted([q.name, plain.name, DEFAULT_QUEUE]), "list_queues' queues")
    want = QueueStatus(config=config, running=0, depth=0, admitted=2, held=3)
    k.eq(listed[q.name], want, "the admission-limited queue's row")
    for name in (plain.name, DEFAULT_QUEUE):
        k.eq((listed[name].admitted, listed[name].held), (0, 0), f"{name!r}: no admissions")
    view = await q.view()
    k.eq((_ids(view.admitted), _ids(view.held)), (["a", "b"], ["d", "e", "c"]), "admissions()")
    for limit, admitted, held in ((1, ["a"], ["d"]), (2, ["a", "b"], ["d", "e"])):
        got = await q.view(limit)
        k.eq((_ids(got.admitted), _ids(got.held)), (admitted, held), f"admissions(limit={limit})")
        k.eq(got, AdmissionView(admitted=view.admitted[:limit], held=view.held[:limit]), "the same")
    empty = AdmissionView(admitted=(), held=())
    k.eq(await store.admissions(k.name("unknown")), empty, "admissions of an unknown queue")
    k.eq(await store.admissions(plain.name), empty, "admissions of a queue never admitted to")
    # "default" always exists; never configured, it limits nothing but still counts
    default = _Queue(k, store, DEFAULT_QUEUE)
    await default.expect(ADMITTED, "x", now=k.at(6), what="in 'default'")
    k.eq(await default.counts(), (1, 0), "'default' after an admit")
    k.eq(await default.finish(["x"], now=k.at(7)), [], "finishing x in 'default'")
    k.eq(await default.counts(), (0, 0), "'default' after the finish")
    await q.finish(["a", "b"], now=k.at(8))
    k.eq(await q.counts(), (2, 1), "the queue's counts after finishing a and b")


# -- ADMIT-BAD-INPUT --------------------------------------------------------------------------


@invariant("ADMIT-BAD-INPUT")
async def test_malformed_admission_calls_raise_and_change_nothing(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    ta = k.name("ta")
    q = await _queue(k, store, "strict", 1, 1)
    await q.expect(ADMITTED, "a", ta, now=k.at(1))
    await q.expect(HELD, "b", ta, now=k.at(2))
    before = await q.view()
    # an unknown queue: NotFound, and nothing stored
    unknown = k.name("unknown")
    got = await store.admit(unknown, "u", ta, 0, b"u", now=k.at(3))
    k.eq(got, NotFound("queue"), "admit in an unknown queue")
    k.eq(await store.held_start("u", ta), None, "held_start after admit in an unknown queue")
    k.isa(await q.queues.fetch_queue(unknown), NotFound, "admit created no queue")
    k.eq(await store.admissions(unknown), AdmissionView(admitted=(), held=()), "its ledger")

    async def refused(what: str, call: Callable[..., Awaitable[object]], *args: object) -> None:
        await k.raises_async(ValueError, functools.partial(call, *args), what)

    def admit(**bad: object) -> tuple[object, ...]:
        args: dict[str, object] = {
            "name": q.name,
            "run_id": "c",
            "tenant": ta,
            "priority": 0,
            "start": b"c",
        }
        args.update(bad)
        return tuple(args.values())

    bad_admits: list[tuple[str, dict[str, object]]] = [
        ("a bad queue name", {"name": "no spaces"}),
        ("a queue name that is not text", {"name": 7}),
        ("an empty run id", {"run_id": ""}),
        ("a run id of 256 bytes", {"run_id": "x" * 256}),
        ("a run id that is not text", {"run_id": 7}),
        ("an empty tenant", {"tenant": ""}),
        ("a tenant that is not text", {"tenant": 7}),
        ("priority above the range", {"priority": MAX_PRIORITY + 1}),
        ("priority below the range", {"priority": MIN_PRIORITY - 1}),
        ("a boolean priority", {"priority": True}),
        ("a fractional priority", {"priority": 1.5}),
        ("a start that is text", {"start": "c"}),
        ("a start that is a bytearray", {"start": bytearray(b"c")}),
        ("a start over MAX_START_BYTES", {"start": b"x" * (MAX_START_BYTES + 1)}),
    ]
    for what, bad in bad_admits:
        await refused(f"admit with {what}", store.admit, *map(junk, admit(**bad)))
    for name in map(junk, ["", "no spaces", "q" * 65, None, 7]):
        await refused(f"finish_admitted({name!r})", store.finish_admitted, name, ["a"])
        await refused(f"promote_held({name!r})", store.promote_held, name)
        await refused(f"drop_held({name!r})", store.drop_held, name, "b")
        await refused(f"admissions({name!r})", store.admissions, name)
    for ids in map(junk, ["a", ["a", ""], ["a", 7], ["x" * 256], None]):
        await refused(f"finish_admitted(run_ids={ids!r})", store.finish_admitted, q.name, ids)
    for run_id in map(junk, ["", 7, "x" * 256, None]):
        await refused(f"drop_held(run_id={run_id!r})", store.drop_held, q.name, run_id)
        await refused(f"held_start(run_id={run_id!r})", store.held_start, run_id, ta)
    for limit in map(junk, [0, -1, True, 1.5, None]):
        await refused(f"admissions(limit={limit!r})", store.admissions, q.name, limit)
    config = QueueConfig(name=q.name, admission_limit=1, tenant_admission_limit=1)
    for what, bad_config in (
        ("an admission limit of 0", attrs.evolve(config, admission_limit=0)),
        ("a negative admission limit", attrs.evolve(config, admission_limit=-1)),
        ("a boolean admission limit", attrs.evolve(config, admission_limit=junk(True))),
        ("a tenant admission limit of 0", attrs.evolve(config, tenant_admission_limit=0)),
        ("a fractional tenant limit", attrs.evolve(config, tenant_admission_limit=junk(1.5))),
    ):
        await refused(f"set_queue with {what}", q.queues.set_queue, bad_config)
    # nothing changed: the config, the ledger, the counts, the queues
    k.eq(await q.queues.fetch_queue(q.name), config, "the config after the refused calls")
    k.eq(await q.view(), before, "the ledger after the refused calls")
    k.eq(await q.counts(), (1, 1), "list_queues' counts after the refused calls")
    names = sorted(s.config.name for s in await q.queues.list_queues())
    k.eq(names, sorted([DEFAULT_QUEUE, q.name]), "list_queues after the refused calls")
    got_ = await q.finish(["a"], now=k.at(4))
    k.eq(_ids(got_), ["b"], "finishing a promotes b: the ledger works on")


# -- ADMIT-START-BYTES ------------------------------------------------------------------------


@invariant("ADMIT-START-BYTES")
async def test_a_start_reads_back_byte_for_byte(docket_kit: Kit) -> None:
    k = docket_kit
    store = _store(k)
    if store is None:
        return
    ta = k.name("ta")
    q = await _queue(k, store, "bytes", 1)
    mib = bytes(range(256)) * 4096  # 1 MiB of every byte value
    starts = {
        "big": mib,
        "odd": b"\xff\xfe\x00\x80\xc3(\x00",  # not UTF-8, with NULs
        "empty": b"",
        "big-held": mib[::-1],
        "text": "début ✓".encode(),
    }
    answers = {}
    for i, (run_id, start) in enumerate(starts.items()):
        answers[run_id] = await q.admit(run_id, ta if i % 2 else None, i, start, k.at(1 + i))
    k.eq(list(answers.values()), [ADMITTED] + [HELD] * 4, "admit of each start")
    view = await q.view()
    for entry in (*view.admitted, *view.held):
        k.check(entry.start == starts[entry.run_id], f"admissions(): {entry.run_id}'s start")
        found = await store.held_start(entry.run_id, entry.tenant)
        k.check(
            isinstance(found, HeldStart) and found.start == starts[entry.run_id],
            f"held_start({entry.run_id!r}): the start differs",
        )
    got = await q.finish(["big"], now=k.at(10))
    k.eq(_ids(got), ["text"], "the highest priority promoted")
    k.check(got[0].start == starts["text"], "the promoted start's bytes")
    got = await q.finish(["text"], now=k.at(11))
    k.eq(_ids(got), ["big-held"], "then the next")
    k.check(got[0].start == starts["big-held"], "the promoted 1 MiB start's bytes")
    for run_id in ("odd", "empty"):
        dropped = await store.drop_held(q.name, run_id)
        k.check(
            isinstance(dropped, HeldStart) and dropped.start == starts[run_id],
            f"drop_held({run_id!r}): the start differs",
        )
