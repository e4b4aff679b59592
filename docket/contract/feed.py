"""The live feed (``Feature.STREAMS``): an in-process fan-out every backend can build on.

A backend that declares ``streams`` has ``backend.feed``, an
:class:`~docket.contract.protocols.EventFeed`: subscribers get a
:class:`~docket.records.CommitNotice` after each transition commits and every
:class:`~docket.records.Emission` published for a run of their scope. Notices are hints
(the stream re-reads the store from its own cursor), so the feed may lose or repeat one
without breaking a stream; what it must never do is announce a commit before the commit
is readable, or deliver another scope's items.

:class:`FeedHub` is the in-process part: the memory backend is one, and the SQLite,
PostgreSQL and Redis feeds hand what their listener receives to one. It is thread-safe
(a sync facade's loop and a worker's may both subscribe) and never blocks a publisher: a
subscription keeps at most ``limit`` items and, past that, drops the oldest and adds a
scope-wide notice (``run_id=None``) so its reader re-reads everything it follows.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Sequence

import attrs

from docket.records import (
    CommitNotice,
    Emission,
    FeedItem,
    OwnerScope,
    Scope,
    bounded_emission,
    require_owner,
    require_scope,
    scope_admits,
    tenant_id_of,
)

__all__ = ["FeedHub", "LocalSubscription", "check_timeout"]


def check_timeout(timeout: object) -> float:
    """``timeout`` as seconds, or ``ValueError`` for a negative or non-number one."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    return float(timeout)


class LocalSubscription:
    """One subscriber's buffer of feed items (a :class:`FeedSubscription`)."""

    def __init__(self, hub: FeedHub, scope: Scope, limit: int) -> None:
        self.scope = scope
        self._hub = hub
        self._limit = limit
        self._items: collections.deque[FeedItem] = collections.deque()
        self._lock = threading.Lock()
        self._overflowed = False
        self._closed = False
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    def offer(self, item: FeedItem) -> None:
        """Queue ``item`` (any thread); never blocks."""
        with self._lock:
            if self._closed:
                return
            if len(self._items) >= self._limit:
                self._items.popleft()
                self._overflowed = True
            self._items.append(item)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            loop, future = waiter
            with contextlib.suppress(RuntimeError):  # that loop closed: nobody waits any more
                loop.call_soon_threadsafe(_wake, future)

    def _take(self) -> list[FeedItem]:
        items = list(self._items)
        self._items.clear()
        if self._overflowed:
            self._overflowed = False
            items.append(CommitNotice(tenant_id=None, run_id=None))
        return items

    async def get(self, timeout: float) -> Sequence[FeedItem]:
        timeout = check_timeout(timeout)
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._items or self._overflowed or self._closed:
                return self._take()
            future: asyncio.Future[None] = loop.create_future()
            self._waiter = (loop, future)
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for loses a cancellation that
            # lands as the future completes, leaving a cancelled stream running
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError:
            pass
        finally:
            with self._lock:
                if self._waiter is not None and self._waiter[1] is future:
                    self._waiter = None
        with self._lock:
            return self._take()

    async def close(self) -> None:
        with self._lock:
            self._closed = True
            self._items.clear()
            self._overflowed = False  # a closed subscription answers nothing, not a re-read
            waiter, self._waiter = self._waiter, None
        self._hub.forget(self)
        if waiter is not None:
            loop, future = waiter
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_wake, future)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FeedHub:
    """In-process fan-out of feed items to the subscriptions whose scope admits them."""

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._subscriptions: list[LocalSubscription] = []

    @property
    def subscribers(self) -> int:
        with self._lock:
            return len(self._subscriptions)

    async def subscribe(self, scope: Scope) -> LocalSubscription:
        require_scope(scope)
        return self.open(scope)

    def open(self, scope: Scope) -> LocalSubscription:
        subscription = LocalSubscription(self, scope, self._limit)
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription

    def forget(self, subscription: LocalSubscription) -> None:
        with self._lock:
            if subscription in self._subscriptions:
                self._subscriptions.remove(subscription)

    def deliver(self, item: FeedItem) -> None:
        """Hand ``item`` to every subscription of a scope that admits its tenant (an
        item without a tenant, ``tenant_id=None`` with ``run_id=None``, goes to all)."""
        with self._lock:
            targets = list(self._subscriptions)
        wide = isinstance(item, CommitNotice) and item.run_id is None
        for subscription in targets:
            if wide or scope_admits(subscription.scope, item.tenant_id):
                subscription.offer(item)

    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        require_owner(owner)
        if not isinstance(emission, Emission):
            raise TypeError(f"expected an Emission, got {type(emission).__name__}")
        self.deliver(bounded_emission(_owned(owner, emission)))

    def notice(self, owner: OwnerScope, run_id: str, graph_id: str, first: int, last: int) -> None:
        """Deliver the commit notice of one transition."""
        self.deliver(
            CommitNotice(
                tenant_id=tenant_id_of(owner),
                run_id=run_id,
                graph_id=graph_id,
                first_seq=first,
                last_seq=last,
            )
        )


def _owned(owner: OwnerScope, emission: Emission) -> Emission:
    tenant = tenant_id_of(owner)
    if emission.tenant_id == tenant:
        return emission
    return attrs.evolve(emission, tenant_id=tenant)
