"""Following runs as they commit: the streams behind ``Docket.stream`` and
``Docket.stream_scope``.

The store is the only source of committed events; the feed (``backend.feed``, declared
by ``Feature.STREAMS``) only says *when* to read. A stream subscribes first and reads
second, so a commit that lands between the two is either in the read or announced by a
notice: nothing falls between them. Each event is yielded once, in ``seq`` order, from
a cursor that only moves forward, so a repeated notice, a re-read after a timeout or a
re-subscription after a broken connection never yields an event twice, and a stream
resumed with ``after_seq`` continues exactly after what its reader saw.

- A notice for the run (or a scope-wide one, ``run_id=None``): read from the cursor.
- An emission of the run: yielded at once (ephemeral: never stored, never replayed).
- No item for ``FEED_REREAD`` seconds: read anyway (a lost notice costs at most that).
- A store or feed that cannot be reached (``StoreError``, ``OSError``): back off,
  subscribe again, re-read from the cursor (a cursor moves only once a page came
  back); ends with ``RuntimeUnavailable`` once the Docket that opened it is closed.
- Without a feed: poll, 50 ms doubling to 1 s while nothing new commits.
- Events retention removed after the cursor: one :class:`~docket.records.EventsPruned`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Final, TypeAlias, TypeVar

import attrs

from docket.contract import errors as contract
from docket.contract.proposals import EventListQuery
from docket.contract.protocols import Backend, EventFeed, FeedSubscription
from docket.errors import RuntimeUnavailable, from_contract
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
_Key: TypeAlias = tuple[str | None, str]  # (tenant, run)
_V = TypeVar("_V")

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
    """The waits of a stream, and the events it reads at a time (tests shorten them)."""

    reread: float = FEED_REREAD
    poll_min: float = POLL_MIN
    poll_max: float = POLL_MAX
    page: int = _PAGE


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


async def _close(subscription: FeedSubscription | None) -> None:
    if subscription is not None:
        with contextlib.suppress(*_BROKEN):
            await subscription.close()


async def _page(
    store: Backend, owner: OwnerScope, run_id: str, after: int, limit: int
) -> EventPage:
    page = await store.events.list_events(
        owner, run_id, EventListQuery(after_seq=after, limit=limit)
    )
    if isinstance(page, contract.NotFound | contract.CorruptEventRow):
        raise from_contract(page, subject=f"run {run_id!r}")
    return page


class _RunCursor:
    """The events of one run after a cursor that only moves forward."""

    def __init__(
        self, store: Backend, owner: OwnerScope, run_id: str, after: int, page: int = _PAGE
    ) -> None:
        self.store, self.owner, self.run_id, self.after = store, owner, run_id, after
        self.page = page
        self.latest = 0  # the run's event_seq at the last read
        self.more = False  # the last read stopped at a page boundary

    async def read(self) -> list[Event | EventsPruned]:
        """The next page committed after the cursor (``more`` says whether another
        follows); a stretch retention removed is one ``EventsPruned`` (the page is one
        snapshot: below ``latest_seq`` every seq was committed, so a seq that is not
        there was pruned). The cursor moves only once the page came back."""
        page = await _page(self.store, self.owner, self.run_id, self.after, self.page)
        self.latest = max(self.latest, page.latest_seq)
        found: list[Event | EventsPruned] = []
        after = self.after
        for event in page.events:
            if event.seq <= after:  # a page never repeats one, but be strict
                continue
            after = self._skip(after, event.seq - 1, found)
            found.append(event)
            after = event.seq
        self.more = page.has_more and bool(page.events)
        if not self.more:
            after = self._skip(after, page.latest_seq, found)
        self.after = after
        return found

    def _skip(self, after: int, seq: int, found: list[Event | EventsPruned]) -> int:
        if seq <= after:
            return after
        found.append(EventsPruned(run_id=self.run_id, first_seq=after + 1, last_seq=seq))
        return seq

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
    alive: Callable[[], bool] = lambda: True,
) -> AsyncIterator[RunItem]:
    """The run's committed events after ``after_seq`` and (with ``emissions``) its
    emissions as they arrive; ends when the run is terminal and all its events were
    yielded (with ``until_finished``). ``NotFound`` when the run does not exist.

    A store or feed that cannot be reached (``StoreError``, connection errors) is
    waited out: back off, subscribe again, re-read from the cursor. ``alive`` says
    whether the owner still wants that (``False``: ``RuntimeUnavailable`` instead)."""
    cursor = _RunCursor(store, owner, run_id, after_seq, times.page)
    polling = _Backoff(times.poll_min, times.poll_max)
    retry = _Backoff(times.poll_min, times.poll_max)
    subscription: FeedSubscription | None = None
    try:
        checked_at = -1  # the cursor at the last status check
        fresh = True  # read the store before waiting (start, reconnect, quiet feed)
        while True:
            try:
                if feed is not None and subscription is None:
                    subscription = await feed.subscribe(owner)  # first, then read
                    fresh = True
                before = cursor.after
                while fresh or subscription is None:  # page by page: history flows at once
                    for read in await cursor.read():
                        yield read
                    if not cursor.more:
                        break
                fresh = False
                if until_finished and cursor.after != checked_at:
                    # the status changes only with events: check once per cursor position
                    if await cursor.finished():
                        return
                    checked_at = cursor.after
                if subscription is None:
                    if cursor.after != before:
                        polling.reset()
                    await polling.sleep()
                    continue
                items = await subscription.get(times.reread)
                # the notices say what to read; nothing for a while: read anyway
                fresh = not items
                async for pushed in _from_feed(items, run_id, emissions, cursor):
                    yield pushed
            except _BROKEN as exc:
                if not alive():
                    raise RuntimeUnavailable("the Docket was closed") from exc
                log.warning("stream of %s: %s; reading again", run_id, exc)
                await _close(subscription)
                subscription = None
                await retry.sleep()
                continue
            retry.reset()
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
            while True:
                for event in await cursor.read():
                    yield event
                if not cursor.more:
                    break


async def follow_scope(
    store: Backend,
    scope: Scope,
    feed: EventFeed,
    *,
    graph_id: str | None = None,
    owner_of: Callable[[str | None], OwnerScope],
    times: StreamTimes = StreamTimes(),
    alive: Callable[[], bool] = lambda: True,
) -> AsyncIterator[Event | Emission]:
    """Every event and emission of the scope's runs (of ``graph_id`` when given) that
    commit after the subscription: notices drive per-run cursors (a run first seen
    starts before the notice's ``first_seq``). Runs forever; close it to stop.
    ``owner_of`` turns a notice's tenant into the owner its reads use; a broken feed is
    waited out as in :func:`follow_run`."""
    retry = _Backoff(times.poll_min, times.poll_max)
    cursors: dict[_Key, _RunCursor] = {}
    graphs: dict[_Key, str | None] = {}  # run -> graph id, for emissions
    unread: set[_Key] = set()  # runs whose last read failed: read again on the next round
    subscription: FeedSubscription | None = None
    try:
        while True:
            try:
                if subscription is None:
                    subscription = await feed.subscribe(scope)
                    items: Sequence[FeedItem] = [CommitNotice(tenant_id=None, run_id=None)]
                else:
                    items = await subscription.get(times.reread)
            except _BROKEN as exc:
                if not alive():
                    raise RuntimeUnavailable("the Docket was closed") from exc
                log.warning("scope stream: %s; subscribing again", exc)
                await _close(subscription)
                subscription = None
                await retry.sleep()
                continue
            retry.reset()
            targets: dict[_Key, _RunCursor] = {k: cursors[k] for k in unread if k in cursors}
            for item in items:
                if isinstance(item, Emission):
                    key = (item.tenant_id, item.run_id)
                    if graph_id is not None and key not in graphs:
                        found = await _graph_of(store, owner_of(item.tenant_id), item.run_id)
                        _remember(graphs, key, found)
                    if graph_id is None or graphs.get(key) == graph_id:
                        yield item
                    continue
                if item.run_id is None:  # items were lost: re-read every run followed
                    targets.update(cursors)
                    continue
                if graph_id is not None and item.graph_id != graph_id:
                    continue
                key = (item.tenant_id, item.run_id)
                _remember(graphs, key, item.graph_id)
                if key not in cursors:
                    first = max(item.first_seq - 1, 0)
                    owner = owner_of(item.tenant_id)
                    cursor = _RunCursor(store, owner, item.run_id, first, times.page)
                    _remember(cursors, key, cursor)
                targets[key] = cursors[key]
            for key, target in targets.items():
                while True:
                    try:
                        read = await target.read()
                    except Exception as exc:  # one unreadable run must not end the stream
                        log.warning("scope stream: cannot read run %s (%s)", target.run_id, exc)
                        unread.add(key)
                        break
                    unread.discard(key)
                    for event in read:
                        if isinstance(event, Event):
                            yield event
                    if not target.more:
                        break
    finally:
        await _close(subscription)


async def _graph_of(store: Backend, owner: OwnerScope, run_id: str) -> str | None:
    """The graph id of a run an emission came from before any notice named it."""
    try:
        run = await store.runs.fetch_run(owner, run_id)
    except _BROKEN:
        return None
    return None if isinstance(run, contract.NotFound) else run.graph_id


def _remember(known: dict[_Key, _V], key: _Key, value: _V) -> None:
    """``known[key] = value``, forgetting the oldest entry past ``_SCOPE_CURSORS``."""
    known.pop(key, None)  # re-inserted: now the newest
    if len(known) >= _SCOPE_CURSORS:
        known.pop(next(iter(known)))  # a dict keeps insertion order
    known[key] = value
