"""Long run documents in pieces (key layout 2): stored in 8 KB pieces, read whole by every
path (fetch, inspect, the claimed document, a replay), rewritten piece by piece, and a
layout-1 namespace refused until ``migrate``, then read as it is."""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta

import pytest
import redis
from docket_contract_tests.fixtures import claimed, init_proposal, new_run, successor
from docket_redis import (
    SCHEMA_VERSION,
    PermanentStoreError,
    RedisBackend,
    RetryableStoreError,
    SchemaTooOld,
)
from docket_redis.backend import PIECE_BYTES, KnownDocuments, long_document
from docket_redis.keys import Namespace
from docket_redis.testing import (
    T0,
    RedisServer,
    claim_one,
    dump,
    opened,
    publish_graph,
    redis_server,
    with_prefix,
)

from docket.clock import ManualClock
from docket.contract import Retryable
from docket.records import TENANTLESS, GraphRef, Run, run_to_json

PIECE = PIECE_BYTES


@pytest.fixture(scope="module")
def redis_aof() -> Iterator[RedisServer]:
    with redis_server(appendonly=True, appendfsync="everysec") as server:
        yield server


def _long_run(run_id: str, ref: GraphRef, items: int) -> Run:
    """A run whose document carries ``items`` 1 KB strings in its metadata."""
    return new_run(run_id, ref, T0, metadata={"log": ["m" * 1024] * items})


def _fields(client: redis.Redis, key: str) -> dict[str, bytes]:
    stored: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]  # untyped reply
    return {k.decode(): v for k, v in stored.items()}


async def _start(backend: RedisBackend, run: Run) -> Run:
    answer = await backend.transitions.initialize(TENANTLESS, init_proposal(run, T0), [])
    assert answer == run, answer
    return run


def test_a_long_document_is_kept_in_pieces_and_read_whole_everywhere(
    redis_single: RedisServer, prefix: str
) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_single.port)
    key = Namespace(prefix).scope(TENANTLESS).run("r1")

    async def body() -> None:
        async with opened(redis_single.url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            run = await _start(backend, _long_run("r1", ref, 30))
            size = len(run_to_json(run))
            pieces = math.ceil(size / PIECE)
            stored = _fields(client, key)
            assert pieces >= 4
            assert stored["pieces"] == str(pieces).encode()
            assert len(stored["doc"]) == PIECE
            assert [f"doc{i}" in stored for i in range(2, pieces + 2)] == [True] * (pieces - 1) + [
                False
            ]
            assert b"".join(
                stored["doc" if i == 1 else f"doc{i}"] for i in range(1, pieces + 1)
            ) == (run_to_json(run))
            assert await backend.runs.fetch_run(TENANTLESS, "r1") == run
            info = await backend.runs.inspect_run(TENANTLESS, "r1")
            assert not isinstance(info, type(None)) and getattr(info, "run", None) == run

            lease = await claim_one(backend, T0)
            assert await backend.runs.claimed_run(TENANTLESS, "r1", lease.claim_token) == run
            longer = successor(run, T0, metadata={"log": ["m" * 1024] * 31})
            proposal = claimed(longer, lease.claim_token)
            assert await backend.transitions.commit_claimed(TENANTLESS, proposal, []) == longer
            assert await backend.runs.fetch_run(TENANTLESS, "r1") == longer
            # a replay answers the stored document, whole
            assert await backend.transitions.commit_claimed(TENANTLESS, proposal, []) == longer

            shorter = successor(longer, T0, metadata={})
            answer = await backend.transitions.commit_claimed(
                TENANTLESS, claimed(shorter, lease.claim_token), []
            )
            assert answer == shorter
            left = _fields(client, key)
            assert "pieces" not in left
            assert not [f for f in left if f.startswith("doc") and f != "doc"]
            assert await backend.runs.fetch_run(TENANTLESS, "r1") == shorter

    try:
        asyncio.run(body())
    finally:
        client.close()


def test_an_append_rewrites_the_pieces_it_changed_not_the_document(
    redis_aof: RedisServer, prefix: str
) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_aof.port)

    def aof_bytes() -> int:
        return int(client.info("persistence")["aof_current_size"])

    async def body() -> None:
        async with opened(redis_aof.url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            run = await _start(backend, _long_run("r1", ref, 120))
            lease = await claim_one(backend, T0)
            document = len(run_to_json(run))
            for items in (121, 122, 123):
                before = aof_bytes()
                run = successor(run, T0, metadata={"log": ["m" * 1024] * items})
                answer = await backend.transitions.commit_claimed(
                    TENANTLESS, claimed(run, lease.claim_token), []
                )
                assert answer == run
                written = aof_bytes() - before
                # the last piece or two and the bookkeeping, not a 120 KB document
                assert 0 < written < 3 * PIECE < document / 4, (written, document)
                assert await backend.runs.fetch_run(TENANTLESS, "r1") == run

    try:
        asyncio.run(body())
    finally:
        client.close()


def test_a_layout_1_namespace_is_refused_until_migrated_then_read_as_it_is(
    redis_single: RedisServer, prefix: str
) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_single.port)
    namespace = Namespace(prefix)
    key = namespace.scope(TENANTLESS).run("r1")

    async def body() -> None:
        async with opened(redis_single.url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            run = await _start(backend, _long_run("r1", ref, 20))
        # What layout 1 stored: the whole document in 'doc', no pieces.
        extra = [f for f in _fields(client, key) if f == "pieces" or f[3:].isdigit()]
        client.hdel(key, *extra)
        client.hset(key, "doc", run_to_json(run))
        client.set(namespace.schema, "1")
        before = dump([redis_single.port], prefix)

        old = RedisBackend.from_url(with_prefix(redis_single.url, prefix))
        with pytest.raises(SchemaTooOld):
            await old.open()
        await old.close()
        assert dump([redis_single.port], prefix) == before
        assert client.get(namespace.schema) == b"1"

        assert await RedisBackend.from_url(with_prefix(redis_single.url, prefix)).migrate() == (
            1,
            SCHEMA_VERSION,
        )
        assert client.get(namespace.schema) == str(SCHEMA_VERSION).encode()
        async with opened(redis_single.url, prefix, clock=ManualClock(T0)) as backend:
            assert await backend.runs.fetch_run(TENANTLESS, "r1") == run
            lease = await claim_one(backend, T0 + timedelta(seconds=1))
            assert await backend.runs.claimed_run(TENANTLESS, "r1", lease.claim_token) == run
            later = successor(run, T0, metadata={"log": ["m" * 1024] * 21})
            answer = await backend.transitions.commit_claimed(
                TENANTLESS, claimed(later, lease.claim_token), []
            )
            assert answer == later
            assert "pieces" in _fields(client, key)  # written in pieces from now on
            assert await backend.runs.fetch_run(TENANTLESS, "r1") == later

    try:
        asyncio.run(body())
    finally:
        client.close()


def test_a_lost_piece_reads_as_corruption(redis_single: RedisServer, prefix: str) -> None:
    client = redis.Redis(host="127.0.0.1", port=redis_single.port)
    key = Namespace(prefix).scope(TENANTLESS).run("r1")

    async def body() -> None:
        async with opened(redis_single.url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            await _start(backend, _long_run("r1", ref, 20))
            client.hdel(key, "doc2")
            with pytest.raises(PermanentStoreError):
                await backend.runs.fetch_run(TENANTLESS, "r1")

    try:
        asyncio.run(body())
    finally:
        client.close()


async def _again(call: Callable[[], Awaitable[object]]) -> object:
    for _ in range(5):
        try:
            answer = await call()
        except RetryableStoreError:
            continue
        if not isinstance(answer, Retryable):
            return answer
    raise AssertionError("still unavailable after 5 tries")


def test_pieces_acknowledged_before_a_server_crash_are_read_whole_after_it(
    prefix: str,
) -> None:
    """AOF fsynced before every reply, the server SIGKILLed between commits: the restarted
    server holds the last acknowledged document whole, and the same backend instance (its
    remembered pieces included) goes on committing changed pieces against it."""

    async def body(server: RedisServer) -> None:
        async with opened(server.url, prefix, clock=ManualClock(T0)) as backend:
            ref = await publish_graph(backend, TENANTLESS)
            run = await _start(backend, _long_run("r1", ref, 40))
            lease = await claim_one(backend, T0)
            for items in range(41, 46):
                run = successor(run, T0, metadata={"log": ["m" * 1024] * items})
                proposal = claimed(run, lease.claim_token)
                assert await backend.transitions.commit_claimed(TENANTLESS, proposal, []) == run
            server.kill()
            server.start()
            # pooled connections died with the server: a caller tries again, as the
            # runtime does (the same proposal for a commit)
            assert await _again(lambda: backend.runs.fetch_run(TENANTLESS, "r1")) == run
            for items in range(46, 49):
                run = successor(run, T0, metadata={"log": ["m" * 1024] * items})
                proposal = claimed(run, lease.claim_token)
                answer = await _again(
                    functools.partial(backend.transitions.commit_claimed, TENANTLESS, proposal, [])
                )
                assert answer == run
        async with opened(server.url, prefix, clock=ManualClock(T0)) as fresh:
            assert await fresh.runs.fetch_run(TENANTLESS, "r1") == run

    with redis_server(appendonly=True, appendfsync="always") as server:
        asyncio.run(body(server))


def test_a_document_is_cut_only_when_it_needs_more_than_one_piece() -> None:
    assert long_document(b"x" * PIECE) is None
    assert long_document(b"x" * PIECE + b"y") == [b"x" * PIECE, b"y"]


def test_known_documents_send_only_changed_pieces_against_the_fenced_checkpoint() -> None:
    known = KnownDocuments()
    doc = b"a" * PIECE * 3 + b"tail"
    known.remember("-", "r1", 5, long_document(doc))
    appended = doc + b"more"
    assert known.patch("-", "r1", 5, long_document(appended)) == ["4", "4", "1", "4", b"tailmore"]
    assert (
        known.patch("-", "r1", 4, long_document(appended)) == []
    )  # another checkpoint: sent whole
    assert known.patch("-", "r2", 5, long_document(appended)) == []  # never seen
    assert known.patch("-", "r1", 5, long_document(b"short")) == []  # one piece: sent whole
    grown = doc[: PIECE * 3] + b"b" * PIECE * 2
    assert known.patch("-", "r1", 5, long_document(grown)) == [
        "4",
        "5",
        "2",
        "4",
        b"b" * PIECE,
        "5",
        b"b" * PIECE,
    ]
    known.forget("-", "r1")
    assert known.patch("-", "r1", 5, long_document(appended)) == []


def test_known_documents_are_bounded_by_count_and_bytes() -> None:
    doc = b"x" * (PIECE * 2)
    by_count = KnownDocuments(limit=2)
    for i in range(3):
        by_count.remember("-", f"r{i}", 1, long_document(doc))
    assert by_count.patch("-", "r0", 1, long_document(doc + b"!")) == []  # the oldest went
    assert by_count.patch("-", "r2", 1, long_document(doc + b"!")) != []
    by_bytes = KnownDocuments(budget=len(doc) * 2)
    for i in range(3):
        by_bytes.remember("-", f"r{i}", 1, long_document(doc))
    assert by_bytes.patch("-", "r0", 1, long_document(doc + b"!")) == []
    assert by_bytes.patch("-", "r1", 1, long_document(doc + b"!")) != []
