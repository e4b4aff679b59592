"""Following runs as they commit: the streams behind ``Docket.stream`` and
``Docket.stream_scope``.

The store is the only source of committed events; the feed (``backend.feed``, declared
by ``Feature.STREAMS``) only says *when* to read. A stream subscribes first and reads
second, so a commit that lands between the two is either in the read or announced by a
notice: nothing falls between them. Each event is yielded once, in ``seq`` order, from
a cursor that only moves forward, so a repeated notice, a re-read after a timeout or a
re-subscription after a broken connection never yields an event twice, and a stream
resumed with ``after_seq`` continues exactly after what its reader saw.

- A notice for the run (or a scope-wide one, ``run_id=None``) → read from the cursor.
- An emission of the run → yielded at once (ephemeral: never stored, never replayed).
- No item for ``FEED_REREAD`` seconds → read anyway (a lost notice costs at most that).
- A broken subscription (``StoreError``, ``OSError``) → back off, subscribe again, read.
- Without a feed: poll, 50 ms doubling to 1 s while nothing new commits.
- Events retention removed after the cursor → one :class:`~docket.records.EventsPruned`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Final, TypeAlias

import attrs

from docket.contract import errors as contract
from docket.contract.proposals import EventListQuery
from docket.contract.protocols import Backend, EventFeed, FeedSubscription
from docket.errors import from_contract
from docket.records import (
    CommitNotice,
    Emission,
    Event,
    EventPage,
    EventsPruned,
    FeedItem,
    OwnerScope,
    Scope,
)

__all__ = [
    "FEED_REREAD",
    "POLL_MAX",
    "POLL_MIN",
    "RunItem",
    "ScopeItem",
    "StreamTimes",
    "follow_run",
    "follow_scope",
]

log = logging.getLogger("docket.stream")

RunItem: TypeAlias = Event | Emission | EventsPruned
ScopeItem: TypeAlias = Event | Emission

#: Seconds a stream waits on its feed before reading the store anyway.
FEED_REREAD: Final = 5.0
#: The polling backoff of a stream without a feed (seconds).
POLL_MIN: Final = 0.05
POLL_MAX: Final = 1.0
_PAGE: Final = 500
#: A scope stream forgets the cursor of a run it has not heard from for this many runs.
_SCOPE_CURSORS: Final = 10_000


@attrs.frozen(kw_only=True)
class StreamTimes:
    """The waits of a stream (tests shorten them)."""

    reread: float = FEED_REREAD
    poll_min: float = POLL_MIN
    poll_max: float = POLL_MAX


class _Backoff:
    def __init__(self, low: float, high: float) -> None:
        self._low, self._high = low, high
        self.delay = low

    def reset(self) -> None:
        self.delay = self._low

    async def sleep(self) -> None:
        await asyncio.sleep(self.delay)
        self.delay = min(self.delay * 2, self._high)


_BROKEN: Final = (contract.StoreError, OSError, ConnectionError)


async def _subscribe(feed: EventFeed, scope: Scope, backoff: _Backoff) -> FeedSubscription:
    """A subscription, retried with backoff while the store is unreachable."""
    while True:
        try:
            subscription = await feed.subscribe(scope)
        except _BROKEN as exc:
            log.warning("stream: cannot subscribe to the feed (%s); retrying", exc)
            await backoff.sleep()
            continue
        backoff.reset()
        return subscription


async def _close(subscription: FeedSubscription | None) -> None:
    if subscription is not None:
        with contextlib.suppress(*_BROKEN):
            await subscription.close()


async def _page(store: Backend, owner: OwnerScope, run_id: str, after: int) -> EventPage:
    page = await store.events.list_events(
        owner, run_id, EventListQuery(after_seq=after, limit=_PAGE)
    )
    if isinstance(page, contract.NotFound | contract.CorruptEventRow):
        raise from_contract(page, subject=f"run {run_id!r}")
    return page


class _RunCursor:
    """The events of one run after a cursor that only moves forward."""

    def __init__(self, store: Backend, owner: OwnerScope, run_id: str, after: int) -> None:
        self.store, self.owner, self.run_id, self.after = store, owner, run_id, after
        self.latest = 0  # the run's event_seq at the last read

    async def read(self) -> list[Event | EventsPruned]:
        """Everything committed after the cursor; a stretch retention removed is one
        ``EventsPruned`` (the page is one snapshot: below ``latest_seq`` every seq was
        committed, so a seq that is not there was pruned)."""
        found: list[Event | EventsPruned] = []
        while True:
            page = await _page(self.store, self.owner, self.run_id, self.after)
            self.latest = max(self.latest, page.latest_seq)
            for event in page.events:
                if event.seq <= self.after:  # a page never repeats one, but be strict
                    continue
                self._skip_to(event.seq - 1, found)
                found.append(event)
                self.after = event.seq
            if not page.has_more or not page.events:
                self._skip_to(page.latest_seq, found)
                return found

    def _skip_to(self, seq: int, found: list[Event | EventsPruned]) -> None:
        if seq > self.after:
            found.append(EventsPruned(run_id=self.run_id, first_seq=self.after + 1, last_seq=seq))
            self.after = seq

    async def finished(self) -> bool:
        """The run is terminal and every event it will have was read."""
        run = await self.store.runs.fetch_run(self.owner, self.run_id)
        if isinstance(run, contract.NotFound):
            raise from_contract(run, subject=f"run {self.run_id!r}")
        return run.status.terminal and run.event_seq <= self.after


async def follow_run(
    store: Backend,
    owner: OwnerScope,
    run_id: str,
    *,
    feed: EventFeed | None,
    after_seq: int = 0,
    emissions: bool = True,
    until_finished: bool = True,
    times: StreamTimes = StreamTimes(),
) -> AsyncIterator[RunItem]:
    """The run's committed events after ``after_seq`` and (with ``emissions``) its
    emissions as they arrive; ends when the run is terminal and all its events were
    yielded (with ``until_finished``). ``NotFound`` when the run does not exist."""
    cursor = _RunCursor(store, owner, run_id, after_seq)
    backoff = _Backoff(times.poll_min, times.poll_max)
    subscription = await _subscribe(feed, owner, backoff) if feed is not None else None
    try:
        checked_at = -1  # the cursor at the last status check
        while True:
            before = cursor.after
            for read in await cursor.read():
                yield read
            if until_finished and cursor.after != checked_at:
                # the status changes only with events: check once per cursor position
                checked_at = cursor.after
                if await cursor.finished():
                    return
            if feed is None:
                if cursor.after != before:
                    backoff.reset()
                await backoff.sleep()
                continue
            assert subscription is not None
            try:
                items = await subscription.get(times.reread)
            except _BROKEN as exc:
                log.warning("stream of %s: the feed broke (%s); subscribing again", run_id, exc)
                await _close(subscription)
                subscription = None
                await backoff.sleep()
                subscription = await _subscribe(feed, owner, backoff)
                continue
            async for pushed in _from_feed(items, run_id, emissions, cursor):
                yield pushed
    finally:
        await _close(subscription)


async def _from_feed(
    items: Sequence[FeedItem], run_id: str, emissions: bool, cursor: _RunCursor
) -> AsyncIterator[Event | Emission | EventsPruned]:
    """The feed's items in arrival order: emissions of the run as they are, a notice
    for it as the events it announces (read from the store)."""
    for item in items:
        if isinstance(item, Emission):
            if emissions and item.run_id == run_id:
                yield item
        elif item.run_id is None or (
            item.run_id == run_id and (item.last_seq == 0 or item.last_seq > cursor.after)
        ):
            for event in await cursor.read():
                yield event


async def follow_scope(
    store: Backend,
    scope: Scope,
    feed: EventFeed,
    *,
    graph_id: str | None = None,
    owner_of: Callable[[str | None], OwnerScope],
    times: StreamTimes = StreamTimes(),
) -> AsyncIterator[Event | Emission]:
    """Every event and emission of the scope's runs (of ``graph_id`` when given) that
    commit after the subscription: notices drive per-run cursors (a run first seen
    starts before the notice's ``first_seq``). Runs forever; close it to stop.
    ``owner_of`` turns a notice's tenant into the owner its reads use."""
    backoff = _Backoff(times.poll_min, times.poll_max)
    cursors: dict[tuple[str | None, str], _RunCursor] = {}
    graphs: dict[tuple[str | None, str], str | None] = {}  # run -> graph id, for emissions
    subscription: FeedSubscription | None = await _subscribe(feed, scope, backoff)
    try:
        while True:
            assert subscription is not None
            try:
                items = await subscription.get(times.reread)
            except _BROKEN as exc:
                log.warning("scope stream: the feed broke (%s); subscribing again", exc)
                await _close(subscription)
                subscription = None
                await backoff.sleep()
                subscription = await _subscribe(feed, scope, backoff)
                items = [CommitNotice(tenant_id=None, run_id=None)]
            for item in items:
                if isinstance(item, Emission):
                    key = (item.tenant_id, item.run_id)
                    if graph_id is not None and key not in graphs:
                        graphs[key] = await _graph_of(store, owner_of(item.tenant_id), item.run_id)
                    if graph_id is None or graphs[key] == graph_id:
                        yield item
                    continue
                if item.run_id is None:  # lost items: re-read every run followed
                    targets = list(cursors.values())
                else:
                    if graph_id is not None and item.graph_id != graph_id:
                        continue
                    key = (item.tenant_id, item.run_id)
                    graphs[key] = item.graph_id
                    found = cursors.get(key)
                    if found is None:
                        found = _RunCursor(
                            store, owner_of(item.tenant_id), item.run_id, max(item.first_seq - 1, 0)
                        )
                        _remember(cursors, key, found)
                    targets = [found]
                for target in targets:
                    for event in await _scope_read(target):
                        yield event
    finally:
        await _close(subscription)


async def _graph_of(store: Backend, owner: OwnerScope, run_id: str) -> str | None:
    """The graph id of a run an emission came from before any notice named it."""
    try:
        run = await store.runs.fetch_run(owner, run_id)
    except _BROKEN:
        return None
    return None if isinstance(run, contract.NotFound) else run.graph_id


async def _scope_read(cursor: _RunCursor) -> list[Event]:
    try:
        read = await cursor.read()
    except Exception as exc:  # a run pruned or unreadable must not end the scope stream
        log.warning("scope stream: cannot read run %s (%s)", cursor.run_id, exc)
        return []
    return [item for item in read if isinstance(item, Event)]


def _remember(
    cursors: dict[tuple[str | None, str], _RunCursor],
    key: tuple[str | None, str],
    cursor: _RunCursor,
) -> None:
    if len(cursors) >= _SCOPE_CURSORS:
        cursors.pop(next(iter(cursors)))  # the oldest: a dict keeps insertion order
    cursors[key] = cursor
