"""``docket.contract.kv``: its key encodings keep the contract's orders, and what it does
around the store (conflict retries, the layout and key-size checks, claim ties).

The whole kit runs against the adapter through the LMDB example plugin
(``examples/backends/docket_lmdb/tests``); these cases use a small sorted-dict store, the
plainest reading of the ``KVStore`` protocol, to reach what LMDB never does (conflicts).
"""

from __future__ import annotations

import asyncio
import bisect
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import attrs
import pytest
from docket_contract_tests.fixtures import graph_document, graph_ref, init_proposal, new_run
from hypothesis import given, settings
from hypothesis import strategies as st

from docket.contract import AbandonPolicy, Backoff, ClaimBatch, ClaimPolicy, Retryable
from docket.contract.capabilities import Feature, negotiate
from docket.contract.errors import PermanentStoreError, RetryableStoreError
from docket.contract.kv import KVBackend, KVConflict, kv_options
from docket.contract.kv._keys import LAYOUT_KEY, run_handle, text, time8, untext
from docket.contract.queries import abandon_wake
from docket.records import TENANTLESS, GraphVersion, OwnerScope, Run, Tenant

T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)


class DictTransaction:
    def __init__(self, data: dict[bytes, bytes]) -> None:
        self.data = data

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self.data[key] = value

    def delete(self, key: bytes) -> None:
        self.data.pop(key, None)

    def scan(
        self, start: bytes, end: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        keys = sorted(self.data)
        chosen = keys[bisect.bisect_left(keys, start) : bisect.bisect_left(keys, end)]
        if reverse:
            chosen.reverse()
        for key in chosen[:limit]:
            yield key, self.data[key]


class DictStore:
    """Every transaction works on a copy, swapped in at commit, under one lock."""

    def __init__(self, max_key_bytes: int = 511) -> None:
        self.max_key_bytes = max_key_bytes
        self.data: dict[bytes, bytes] = {}
        self.lock = threading.Lock()
        self.conflicts = 0  # the next commits that raise KVConflict
        self.commits = 0
        self.closed = False

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[DictTransaction]:
        with self.lock:
            txn = DictTransaction(dict(self.data))
            yield txn
            if write:
                if self.conflicts:
                    self.conflicts -= 1
                    raise KVConflict()
                self.data = txn.data
                self.commits += 1

    def close(self) -> None:
        self.closed = True


def backend_on(store: DictStore) -> KVBackend:
    return KVBackend(lambda: store, name="dict", clock=lambda: T0)


# -- encodings ------------------------------------------------------------------------------

ids = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20)
moments = st.datetimes(timezones=st.just(UTC))


@settings(deadline=None)  # a loaded machine must not fail it on time
@given(ids, ids)
def test_text_components_sort_as_the_strings_do(a: str, b: str) -> None:
    assert (text(a) < text(b)) == (a < b)
    assert untext(text(a)) == a


@settings(deadline=None)
@given(moments, moments)
def test_times_sort_as_the_instants_do_before_and_after_1970(a: datetime, b: datetime) -> None:
    assert (time8(a) < time8(b)) == (a < b)


@settings(deadline=None)
@given(moments, ids, moments, ids)
def test_index_keys_sort_as_select_claims_orders(
    t1: datetime, r1: str, t2: datetime, r2: str
) -> None:
    k1 = time8(t1) + text(r1) + run_handle(TENANTLESS, r1)
    k2 = time8(t2) + text(r2) + run_handle(TENANTLESS, r2)
    if (t1, r1) != (t2, r2):
        assert (k1 < k2) == ((t1, r1) < (t2, r2))


# -- around the store -------------------------------------------------------------------------


async def _save_graph(backend: KVBackend) -> object:
    document = graph_document("g")
    return await backend.save_graph(TENANTLESS, graph_ref(document), document)


def test_a_conflicting_transaction_is_run_again() -> None:
    store = DictStore()

    async def main() -> object:
        backend = backend_on(store)
        await backend.open()
        store.conflicts = 3
        try:
            return await _save_graph(backend)
        finally:
            await backend.close()

    assert isinstance(asyncio.run(main()), GraphVersion)
    assert store.conflicts == 0 and store.commits == 2  # the layout, then the graph once


def test_endless_conflicts_answer_retryable_and_change_nothing() -> None:
    store = DictStore()

    async def main() -> tuple[object, object]:
        backend = backend_on(store)
        await backend.open()
        store.conflicts = 1000
        try:
            saved = await _save_graph(backend)
            try:
                await backend.release_claim(TENANTLESS, "r", "token")
            except RetryableStoreError as exc:  # no slot for the outcome: raised
                return saved, exc
            return saved, None
        finally:
            await backend.close()

    saved, raised = asyncio.run(main())
    assert isinstance(saved, Retryable)
    assert isinstance(raised, RetryableStoreError)
    assert list(store.data) == [LAYOUT_KEY]


def test_a_store_with_short_keys_is_refused_at_open_and_closed() -> None:
    store = DictStore(max_key_bytes=200)
    with pytest.raises(PermanentStoreError, match="keys of up to 200 bytes"):
        asyncio.run(backend_on(store).open())
    assert store.closed and store.data == {}


def test_a_store_with_another_layout_is_refused_unchanged() -> None:
    store = DictStore()
    store.data = {LAYOUT_KEY: b"docket-kv 99", b"x": b"y"}
    with pytest.raises(PermanentStoreError, match="layout"):
        asyncio.run(backend_on(store).open())
    assert store.data == {LAYOUT_KEY: b"docket-kv 99", b"x": b"y"} and store.closed


def test_factory_options_are_checked() -> None:
    assert kv_options("x", {}) == (None, None)
    with pytest.raises(TypeError, match="does not take path"):
        kv_options("x", {"path": "/tmp"})
    with pytest.raises(TypeError, match="clock"):
        kv_options("x", {"clock": 3})
    with pytest.raises(TypeError, match="limits"):
        kv_options("x", {"limits": {}})


def test_same_run_id_in_several_owners_due_at_once_is_claimed_in_tenant_order() -> None:
    """The due index orders a (time, run id) tie by digest; select_claims by tenant, so
    claim_due must read the whole tie, whatever the digests say."""
    owners: list[OwnerScope] = [Tenant("b"), TENANTLESS, Tenant("a")]
    by_digest = sorted(owners, key=lambda o: run_handle(o, "shared"))
    assert by_digest != [TENANTLESS, Tenant("a"), Tenant("b")]  # the case means something

    async def main() -> list[str | None]:
        backend = backend_on(DictStore())
        await backend.open()
        document = graph_document("g")
        ref = graph_ref(document)
        for owner in owners:
            await backend.save_graph(owner, ref, document)
            started = await backend.initialize(
                owner, init_proposal(new_run("shared", ref, T0), T0), []
            )
            assert isinstance(started, Run)
        order = []
        for _ in owners:
            batch = await backend.claim_due(
                ClaimPolicy(limit=1, orphan_ttl=timedelta(minutes=1), max_claim_attempts=3)
            )
            assert isinstance(batch, ClaimBatch) and len(batch.leases) == 1
            owner = batch.leases[0].owner
            order.append(owner.id if isinstance(owner, Tenant) else None)
        await backend.close()
        return order

    assert asyncio.run(main()) == [None, "a", "b"]


def test_an_abandon_wakes_at_retry_at_or_on_the_doubling_backoff() -> None:
    """``abandon_wake`` is the one statement of the formula memory and the adapter use."""
    retry_at = T0 + timedelta(seconds=5)
    backoff = Backoff(base=timedelta(seconds=1), cap=timedelta(seconds=60))
    plain = AbandonPolicy(expected_checkpoint_seq=1, retry_at=retry_at, max_claim_abandons=3)
    assert abandon_wake(plain, 4, T0) == retry_at
    gentle = attrs.evolve(plain, non_poisoning=True, backoff=backoff)
    waits = [abandon_wake(gentle, n, T0) - T0 for n in (0, 1, 2, 5, 6, 10_000)]
    assert waits == [timedelta(seconds=s) for s in (1, 2, 4, 32, 60, 60)]
    assert abandon_wake(attrs.evolve(plain, non_poisoning=True), 3, T0) == retry_at


def test_the_adapter_declares_timers_and_messages_and_refuses_schedules() -> None:
    """The due index is status-blind, so a waiting run with a due wake is claimed (the kit's
    TIMER-* and MESSAGE-* cases run on it through LMDB); it keeps no schedules, so it may
    not declare them and negotiates without a ``.schedules`` store."""
    backend = backend_on(DictStore())
    features = backend.capabilities().features
    assert {Feature.TIMERS, Feature.MESSAGES} <= features
    assert Feature.SCHEDULES not in features
    assert getattr(backend, "schedules", None) is None
    assert negotiate(backend).features == features
    with pytest.raises(ValueError, match="keeps no cron schedules"):
        KVBackend(lambda: DictStore(), name="dict", features=(Feature.SCHEDULES,))
