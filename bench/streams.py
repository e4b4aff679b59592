"""Commit-to-subscriber latency of ``Docket.stream``, per backend, with 1 and 100 followers.

``memory`` is the in-process backend (``memory://``), the others the servers the
benchmark starts (:mod:`bench.stores`). One run (the ``single_node`` shape, never
executed: no worker runs here) is followed by ``subscribers`` streams
(``Docket.stream(run_id, emissions=False, until_finished=False)``), all in the process
and event loop of the harness. The harness then commits ``commits``
times, one at a time: each commit is a ``Docket.send`` of a small message (a
``commit_unclaimed`` whose ``message_received`` event lands in the run's history; the run
keeps it in its mailbox). The clock starts **just before the send is called** and stops
when a follower's stream yields the commit's first event, so a sample includes the commit
itself (the ``commit ms`` column is the send's own duration, to subtract), the feed's
notice (or, on a backend without ``streams``, the stream's polling), and the follower's
re-read of the store after its cursor. The next commit waits until every follower yielded
this one: the figure is latency, not throughput under a backlog. With 100 followers every
commit wakes 100 streams, each re-reading the store: their p99 is the last of them.

The first ``WARMUP`` commits are left out. ``missed`` counts (follower, commit) pairs not
yielded within ``PATIENCE`` seconds (0 unless something is broken).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from typing import Any

import attrs

from bench.shapes import NODES, docket_graph
from bench.stores import Place
from docket import Docket
from docket.contract import Feature
from docket.records import Event

__all__ = ["WARMUP", "StreamLatency", "stream_latency", "stream_lines", "stream_table"]

WARMUP = 3
PATIENCE = 30.0  # seconds a commit may take to reach every follower
CELL_TIMEOUT = 180.0  # seconds a whole cell may take (a feed that hangs ends it)


@attrs.define
class StreamLatency:
    backend: str
    subscribers: int
    commits: int = 0
    feed: bool = False  # the backend declares ``streams`` (else the streams poll)
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    commit_p50_ms: float = 0.0
    missed: int = 0
    unavailable: str | None = None

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


class _Followers:
    """Where each follower stands: the time it yielded each event, and a wake-up for the
    harness when all of them reached the seq it waits for."""

    def __init__(self, count: int) -> None:
        self.seen: list[dict[int, float]] = [{} for _ in range(count)]
        self.reached = [0] * count
        self.target = 0
        self.arrived = asyncio.Event()

    def saw(self, index: int, seq: int) -> None:
        self.seen[index][seq] = time.perf_counter()
        self.reached[index] = max(self.reached[index], seq)
        if self.target and min(self.reached) >= self.target:
            self.arrived.set()

    def expect(self, seq: int) -> None:
        self.target = seq
        self.arrived.clear()
        if min(self.reached) >= seq:
            self.arrived.set()


async def _follow(docket: Docket, run_id: str, after: int, index: int, at: _Followers) -> None:
    async with docket.stream(
        run_id, after_seq=after, emissions=False, until_finished=False
    ) as stream:
        async for item in stream:
            if isinstance(item, Event):
                at.saw(index, item.seq)


async def stream_latency(place: Place, subscribers: int, commits: int) -> StreamLatency:
    """One cell; ``unavailable`` says why when it could not be measured (in time)."""
    try:
        return await asyncio.wait_for(_cell(place, subscribers, commits), CELL_TIMEOUT)
    except TimeoutError:
        return StreamLatency(
            place.backend, subscribers, unavailable=f"timed out after {CELL_TIMEOUT:.0f} s"
        )


async def _cell(place: Place, subscribers: int, commits: int) -> StreamLatency:
    found = StreamLatency(place.backend, subscribers)
    memory = place.backend == "memory"
    missing = None if memory else place.env.missing(place.backend)
    if missing is not None:
        found.unavailable = missing
        return found
    url = "memory://" if memory else place.docket_url()
    samples: list[float] = []
    sends: list[float] = []
    try:
        async with Docket(url, nodes=NODES, poll_interval=0.05) as docket:
            found.feed = Feature.STREAMS in docket.capabilities.features
            ref = await docket.save_graph(docket_graph("single_node"))
            run_id = f"stream-{subscribers}-{time.perf_counter_ns()}"
            run = await docket.start_run(ref, {"value": 0}, run_id=run_id)
            at = _Followers(subscribers)
            tasks = [
                asyncio.create_task(_follow(docket, run_id, run.event_seq, i, at))
                for i in range(subscribers)
            ]
            try:
                last = run.event_seq
                for k in range(WARMUP + commits):
                    began = time.perf_counter()
                    await docket.send(run_id, "bench", {"k": k})
                    sent = time.perf_counter()
                    first, last = last + 1, (await docket.fetch_run(run_id)).event_seq
                    at.expect(last)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(at.arrived.wait(), PATIENCE)
                    for task in tasks:
                        if task.done():  # a follower failed: say why
                            task.result()
                    if k < WARMUP:
                        continue
                    sends.append(sent - began)
                    for seen in at.seen:
                        if first in seen:
                            samples.append(seen[first] - began)
                        else:
                            found.missed += 1
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    except Exception as exc:
        found.unavailable = f"{type(exc).__name__}: {exc}"[:160]
        return found
    ordered = sorted(samples)
    found.commits = commits
    found.p50_ms = _pct(ordered, 0.5) * 1000
    found.p99_ms = _pct(ordered, 0.99) * 1000
    found.max_ms = (ordered[-1] if ordered else 0.0) * 1000
    found.commit_p50_ms = statistics.median(sends) * 1000 if sends else 0.0
    return found


def stream_table(found: list[StreamLatency]) -> str:
    rows = [
        "| backend | followers | feed | commits | p50 ms | p99 ms | max ms | commit ms | missed |",
        "|---|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    for s in found:
        head = f"| {s.backend} | {s.subscribers} |"
        if s.unavailable is not None:
            rows.append(f"{head} unavailable: {s.unavailable} |||||||")
            continue
        rows.append(
            f"{head} {'push' if s.feed else 'poll'} | {s.commits} | {s.p50_ms:.2f} "
            f"| {s.p99_ms:.2f} | {s.max_ms:.2f} | {s.commit_p50_ms:.2f} | {s.missed} |"
        )
    return "\n".join(rows)


def stream_lines(found: list[StreamLatency]) -> list[str]:
    return [
        f"stream {s.backend} {s.subscribers} p50_ms={s.p50_ms:.2f} p99_ms={s.p99_ms:.2f} "
        f"missed={s.missed}"
        for s in found
        if s.unavailable is None
    ]
