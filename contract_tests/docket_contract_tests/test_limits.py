"""Size limits: LIMITS-TOO-LARGE, LIMITS-TOO-LARGE-NO-TRACE.

Exactly at a limit is accepted, one over is ``TooLarge`` (decided before any lookup) and
nothing is stored — not even the events of a commit every fence would have admitted, nor
its transition id (a valid commit may then publish other content at the same seqs under
it). The kit builds a backend with small limits when the subject takes a
``limits=`` option; otherwise it tests the limits the backend declares.
"""

from __future__ import annotations

import attrs
import pytest

from docket.contract import (
    Backend,
    GraphListQuery,
    Limits,
    NotFound,
    StaleCheckpoint,
    TooLarge,
)
from docket.records import TENANTLESS, Event, GraphVersion, OwnerScope, Run, Tenant, run_to_json
from docket.values import JSONDict, canonical_json
from docket_contract_tests.fixtures import (
    claimed,
    event,
    events_for,
    graph_document,
    graph_ref,
    init_proposal,
    new_run,
    save_graph,
    successor,
    tid,
    unclaimed,
)
from docket_contract_tests.kit import Kit, invariant

SMALL = Limits(
    max_events_per_transition=4,
    max_event_bytes=300,
    max_run_bytes=4096,
    max_graph_bytes=2048,
    max_id_bytes=64,
)


async def _subject(k: Kit) -> tuple[Backend, Limits]:
    return await k.small_limits(SMALL)


async def _init(k: Kit, b: Backend, owner: OwnerScope, run: Run, events: list[Event]) -> object:
    return await b.transitions.initialize(owner, init_proposal(run, k.t0), events)


def _event_size(payload: JSONDict, metadata: JSONDict) -> int:
    return len(canonical_json(payload)) + len(canonical_json(metadata))


def _padded_payload(size: int) -> JSONDict:
    """A payload whose canonical bytes plus an empty metadata's are exactly ``size``."""
    base = _event_size({"pad": ""}, {})
    payload: JSONDict = {"pad": "x" * (size - base)}
    assert _event_size(payload, {}) == size
    return payload


def _padded_run(run: Run, size: int) -> Run:
    base = len(run_to_json(attrs.evolve(run, input={"pad": ""})))
    padded = attrs.evolve(run, input={"pad": "x" * (size - base)})
    assert len(run_to_json(padded)) == size
    return padded


@invariant("LIMITS-TOO-LARGE")
async def test_events_per_transition(docket_kit: Kit) -> None:
    k = docket_kit
    b, limits = await _subject(k)
    ref = await save_graph(k, TENANTLESS, backend=b)
    n = limits.max_events_per_transition
    at_limit = new_run(k.name("ok"), ref, k.t0, event_seq=n)
    got = await _init(k, b, TENANTLESS, at_limit, events_for(at_limit, k.t0, range(1, n + 1)))
    k.eq(got, at_limit, f"{n} events (the limit) are accepted")
    over = new_run(k.name("over"), ref, k.t0, event_seq=n + 1)
    got = await _init(k, b, TENANTLESS, over, events_for(over, k.t0, range(1, n + 2)))
    k.eq(
        got,
        TooLarge("max_events_per_transition", n + 1, n),
        f"{n + 1} events are too many",
    )
    await k.absent(TENANTLESS, over.id, "after too many events", backend=b)
    # the same for a commit, decided before the lookup and the fences
    lease = await k.claim_one(k.t0, at_limit.id, backend=b)
    nxt = successor(at_limit, k.at(1), new_events=n + 1)
    evs = events_for(nxt, k.at(1), range(n + 1, 2 * n + 2))
    before = await k.snapshot(TENANTLESS, at_limit.id, b)
    for token in (lease.claim_token, "not-the-token"):
        got = await b.transitions.commit_claimed(TENANTLESS, claimed(nxt, token), evs)
        k.isa(got, TooLarge, f"a commit of {n + 1} events (token {token!r})")
    ghost = attrs.evolve(nxt, id=k.name("ghost"))
    ghost_events = [attrs.evolve(e, run_id=ghost.id) for e in evs]
    got = await b.transitions.commit_claimed(
        TENANTLESS, claimed(ghost, lease.claim_token), ghost_events
    )
    k.isa(got, TooLarge, "too many events for a ghost run: TooLarge, not NotFound")
    await k.unchanged(TENANTLESS, at_limit.id, before, "after the oversized commits", b)
    fits = successor(at_limit, k.at(1), new_events=n)
    got = await b.transitions.commit_claimed(
        TENANTLESS,
        claimed(fits, lease.claim_token),
        events_for(fits, k.at(1), range(n + 1, 2 * n + 1)),
    )
    k.eq(got, fits, f"a commit of exactly {n} new events")


@invariant("LIMITS-TOO-LARGE")
async def test_event_bytes(docket_kit: Kit) -> None:
    k = docket_kit
    b, limits = await _subject(k)
    ref = await save_graph(k, TENANTLESS, backend=b)
    size = limits.max_event_bytes
    run = new_run(k.name("ok"), ref, k.t0, event_seq=1)
    fits = event(run.id, 1, k.t0, payload=_padded_payload(size))
    k.eq(await _init(k, b, TENANTLESS, run, [fits]), run, f"an event of {size} bytes")
    k.eq(await b.events.fetch_event(TENANTLESS, run.id, 1), fits, "stored as sent")
    over_run = new_run(k.name("over"), ref, k.t0, event_seq=1)
    over = event(over_run.id, 1, k.t0, payload=_padded_payload(size + 1))
    k.eq(
        await _init(k, b, TENANTLESS, over_run, [over]),
        TooLarge("max_event_bytes", size + 1, size),
        f"an event of {size + 1} bytes",
    )
    await k.absent(TENANTLESS, over_run.id, "after an oversized event", backend=b)
    # metadata counts too
    half = _padded_payload(size // 2)
    meta_size = size + 1 - len(canonical_json(half))
    metadata: JSONDict = {"m": "y" * (meta_size - len(canonical_json({"m": ""})))}
    split = event(over_run.id, 1, k.t0, payload=half, metadata=metadata)
    k.eq(_event_size(split.payload, split.metadata), size + 1, "payload + metadata")
    k.isa(await _init(k, b, TENANTLESS, over_run, [split]), TooLarge, "metadata counts")
    await k.absent(TENANTLESS, over_run.id, "after oversized metadata", backend=b)


@invariant("LIMITS-TOO-LARGE")
async def test_run_bytes(docket_kit: Kit) -> None:
    k = docket_kit
    b, limits = await _subject(k)
    ref = await save_graph(k, TENANTLESS, backend=b)
    size = limits.max_run_bytes
    fits = _padded_run(new_run(k.name("ok"), ref, k.t0), size)
    k.eq(await _init(k, b, TENANTLESS, fits, []), fits, f"a run document of {size} bytes")
    over = _padded_run(new_run(k.name("over"), ref, k.t0), size + 1)
    k.eq(
        await _init(k, b, TENANTLESS, over, []),
        TooLarge("max_run_bytes", size + 1, size),
        f"a run document of {size + 1} bytes",
    )
    await k.absent(TENANTLESS, over.id, "after an oversized run", backend=b)
    # a commit that would grow the run past the limit
    lease = await k.claim_one(k.t0, fits.id, backend=b)
    before = await k.snapshot(TENANTLESS, fits.id, b)
    grown = _padded_run(successor(fits, k.at(1)), size + 1)
    got = await b.transitions.commit_claimed(TENANTLESS, claimed(grown, lease.claim_token), [])
    k.isa(got, TooLarge, "a commit growing the run past the limit")
    await k.unchanged(TENANTLESS, fits.id, before, "after the oversized commit", b)


@invariant("LIMITS-TOO-LARGE")
async def test_graph_bytes(docket_kit: Kit) -> None:
    k = docket_kit
    b, limits = await _subject(k)
    size = limits.max_graph_bytes
    for extra, accepted in ((0, True), (1, False)):
        graph_id = k.name(f"g{extra}")
        base = len(canonical_json(graph_document(graph_id, pad="x"))) - 1
        document = graph_document(graph_id, pad="x" * (size + extra - base))
        k.eq(len(canonical_json(document)), size + extra, "document size")
        got = await b.graphs.save_graph(TENANTLESS, graph_ref(document), document)
        if accepted:
            k.isa(got, GraphVersion, f"a graph of {size} bytes")
            continue
        k.eq(got, TooLarge("max_graph_bytes", size + 1, size), f"a graph of {size + 1} bytes")
        page = await b.graphs.list_graph_versions(TENANTLESS, graph_id, GraphListQuery())
        k.eq(page.versions, (), "nothing stored")


@invariant("LIMITS-TOO-LARGE")
@pytest.mark.parametrize("which", ["run-id", "tenant-id", "transition-id", "multibyte-run-id"])
async def test_id_bytes(docket_kit: Kit, which: str) -> None:
    k = docket_kit
    b, limits = await _subject(k)
    size = limits.max_id_bytes

    def exactly(prefix: str, n: int, unit: str = "x") -> str:
        width = len(unit.encode())
        filler = (n - len(prefix.encode())) // width
        text = prefix + unit * filler
        text += "x" * (n - len(text.encode()))
        assert len(text.encode()) == n
        return text

    for extra in (0, 1):
        owner: OwnerScope = TENANTLESS
        run_id = k.name(f"r{extra}")
        transition = None
        if which == "run-id":
            run_id = exactly(k.name(f"r{extra}-"), size + extra)
        elif which == "multibyte-run-id":
            run_id = exactly(k.name(f"r{extra}-"), size + extra, "\u00e9")
        elif which == "tenant-id":
            owner = Tenant(exactly(k.name(f"t{extra}-"), size + extra))
        else:
            transition = exactly(f"tid{extra}-", size + extra)
        if extra == 0:
            # over the limit, the graph is never looked up: TooLarge comes first
            ref = await save_graph(k, owner, backend=b)
        run = new_run(run_id, ref, k.t0)
        got = await b.transitions.initialize(
            owner, init_proposal(run, k.t0, transition_id=transition), []
        )
        if extra == 0:
            k.eq(got, run, f"a {which} of exactly {size} bytes is accepted")
            continue
        # Every over-long id is a size limit, decided before any lookup.
        k.check(
            isinstance(got, TooLarge) and got.limit == "max_id_bytes",
            f"a {which} of {size + 1} bytes is TooLarge(max_id_bytes) before lookup, got {got!r}",
        )
        await k.absent(owner, run.id, f"after an over-long {which}", backend=b)


@invariant("LIMITS-TOO-LARGE")
async def test_too_large_is_decided_before_fences(docket_kit: Kit) -> None:
    k = docket_kit
    b, limits = await _subject(k)
    ref = await save_graph(k, TENANTLESS, backend=b)
    run = new_run(k.name("r"), ref, k.t0)
    k.eq(await _init(k, b, TENANTLESS, run, []), run, "initialize")
    await k.claim_one(k.t0, run.id, backend=b)
    before = await k.snapshot(TENANTLESS, run.id, b)
    big = _padded_run(successor(run, k.at(1)), limits.max_run_bytes + 1)
    for what, proposal in (
        ("a stale token", claimed(big, "stale-token")),
        ("a stale sequence", claimed(attrs.evolve(big, checkpoint_seq=1), "t", expected=0)),
    ):
        got = await b.transitions.commit_claimed(TENANTLESS, proposal, [])
        k.isa(got, TooLarge, f"an oversized run with {what}")
        k.check(not isinstance(got, StaleCheckpoint | NotFound), "size is decided first")
    await k.unchanged(TENANTLESS, run.id, before, "after oversized commits", b)


@invariant("LIMITS-TOO-LARGE-NO-TRACE")
@pytest.mark.parametrize("path", ["initialize", "claimed", "unclaimed"])
async def test_too_large_leaves_no_trace_when_every_fence_passes(
    docket_kit: Kit, path: str
) -> None:
    k = docket_kit
    b, limits = await _subject(k)
    owner = k.tenant("a")
    ref = await save_graph(k, owner, backend=b)
    over = limits.max_run_bytes + 1
    transition = tid()
    if path == "initialize":
        run = new_run(k.name("r"), ref, k.t0, event_seq=2)
        sent = events_for(run, k.t0, [1, 2], payload={"v": "oversized"})
        proposal = init_proposal(_padded_run(run, over), k.t0, transition)
        got = await b.transitions.initialize(owner, proposal, sent)
        k.isa(got, TooLarge, "an oversized initialize publishing events 1..2")
        await k.absent(owner, run.id, "after an oversized initialize", backend=b)
        other = events_for(run, k.t0, [1, 2], payload={"v": "fits"})
        got = await b.transitions.initialize(owner, init_proposal(run, k.t0, transition), other)
        k.eq(got, run, "the same transition id, different events at seqs 1..2: accepted")
        k.eq(list(await k.events(owner, run.id, b)), other, "only the accepted events")
        return
    run = new_run(k.name("r"), ref, k.t0)
    k.eq(await _init(k, b, owner, run, []), run, "initialize")
    lease = await k.claim_one(k.t0, run.id, backend=b) if path == "claimed" else None
    nxt = successor(run, k.at(1), new_events=2)
    sent = events_for(nxt, k.at(1), [1, 2], payload={"v": "oversized"})
    other = events_for(nxt, k.at(1), [1, 2], payload={"v": "fits"})
    before = await k.snapshot(owner, run.id, b)

    async def commit(candidate: Run, events: list[Event]) -> object:
        if lease is not None:
            proposal = claimed(candidate, lease.claim_token, transition_id=transition)
            return await b.transitions.commit_claimed(owner, proposal, events)
        plain = unclaimed(candidate, transition_id=transition)
        return await b.transitions.commit_unclaimed(owner, run.checkpoint_seq, plain, events)

    refused = await commit(_padded_run(nxt, over), sent)
    k.isa(refused, TooLarge, f"an oversized {path} commit by a writer every fence admits")
    await k.unchanged(owner, run.id, before, f"after an oversized {path} commit", b)
    for seq in (1, 2):
        k.isa(
            await b.events.fetch_event(owner, run.id, seq),
            NotFound,
            f"event {seq} of the refused commit",
        )
    accepted = await commit(nxt, other)
    k.eq(accepted, nxt, "the same transition id, different events at the same seqs: accepted")
    k.eq(list(await k.events(owner, run.id, b)), other, "only the accepted events")
