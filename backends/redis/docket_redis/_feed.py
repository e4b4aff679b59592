"""``RedisFeed``: the live feed (``Feature.STREAMS``) of a ``RedisBackend``.

* **Commit notices** are published by the transition scripts themselves
  (``lua/feed.lua``, included by ``initialize.lua`` and ``commit.lua``), in the same
  atomic script as the write, so a notice can never arrive before its commit is
  readable; a refused transition returns before it and publishes nothing. The payload is
  :func:`docket.records.feed_item_to_json`'s canonical JSON: Python sends everything after
  its first field (:func:`notice_tail`) and the script puts ``first_seq`` — which only it
  knows — in front.
* **Emissions** are ``PUBLISH``\\ ed by the client on the same channel, routed by the
  owner scope's tag, so one publisher's emissions go through one node in order.
* **Channel and Cluster.** One channel per namespace, ``<prefix>:feed``, with classic
  ``PUBLISH``: a Cluster broadcasts it over the cluster bus to every node, so one
  subscription on any node hears every scope. Sharded pub/sub (``SPUBLISH``) would keep
  each message on its slot's shard but needs one subscription per shard, followed across
  resharding; notices are small and the bus carries them once per node, so the simpler
  classic form is the choice (docs/backends.md, Redis).
* **Subscribers.** A backend keeps one subscriber connection, opened by the first
  ``subscribe``, and hands what it receives to a :class:`~docket.contract.feed.FeedHub`
  that fans out to the subscriptions whose scope admits the item's tenant. A lost
  connection is re-established with backoff; once it is back every subscription gets a
  ``CommitNotice(None, None)`` (re-read everything you follow: notices were missed).
"""

from __future__ import annotations

import logging

import attrs

from docket.contract.feed import FeedHub, LocalSubscription
from docket.records import (
    CommitNotice,
    Emission,
    OwnerScope,
    RecordDecodeError,
    Scope,
    bounded_emission,
    feed_item_from_json,
    feed_item_to_json,
    require_owner,
    require_scope,
    tenant_id_of,
)
from docket.values import canonical_json_as
from docket_redis._engine import RedisEngine
from docket_redis._listener import SUBSCRIBE_TIMEOUT, ChannelListener
from docket_redis.errors import RetryableStoreError

logger = logging.getLogger("docket_redis")


def notice_tail(tenant_id: str | None, run_id: str, graph_id: str, last_seq: int) -> bytes:
    """The commit notice's bytes (``feed_item_to_json``) after ``{"first_seq":N``, from the
    comma on: the script puts ``first_seq`` in front (canonical JSON sorts the keys, so it
    is first). Built directly (once per commit): the same bytes, a fraction of the cost
    (``tests/test_redis_feed.py`` compares the two)."""
    doc = {
        "graph_id": graph_id,
        "k": "notice",
        "last_seq": last_seq,
        "run_id": run_id,
        "tenant_id": tenant_id,
    }
    return b"," + canonical_json_as(doc, True)[1:]


class RedisFeed:
    """``EventFeed`` over Redis pub/sub: one listener per backend, a hub fanning out."""

    def __init__(self, engine: RedisEngine, *, limit: int = 10_000) -> None:
        self._engine = engine
        self.hub = FeedHub(limit)
        self._listener = ChannelListener(
            lambda: engine.transport,
            lambda: engine.ns.feed,
            name=f"docket-redis-feed:{engine.ns.prefix}",
            on_message=self._receive,
            # notices may have been missed meanwhile: every subscription reads again
            on_resubscribed=lambda: self.hub.deliver(CommitNotice(tenant_id=None, run_id=None)),
        )

    @property
    def channel(self) -> str:
        return self._engine.ns.feed

    async def subscribe(self, scope: Scope) -> LocalSubscription:
        """A subscription receiving what is published once this returns.

        Raises :class:`~docket_redis.errors.StoreError` when the subscription cannot be
        confirmed in time (Redis unreachable)."""
        require_scope(scope)
        if not await self._listener.ensure():
            raise RetryableStoreError(
                f"redis: no feed subscription on {self._engine.describe()} within "
                f"{SUBSCRIBE_TIMEOUT:g}s"
            )
        return self.hub.open(scope)

    async def publish(self, owner: OwnerScope, emission: Emission) -> None:
        """``PUBLISH`` ``emission`` (its tenant taken from ``owner``, its data bounded)."""
        require_owner(owner)
        if not isinstance(emission, Emission):
            raise TypeError(f"expected an Emission, got {type(emission).__name__}")
        tenant = tenant_id_of(owner)
        if emission.tenant_id != tenant:
            emission = attrs.evolve(emission, tenant_id=tenant)
        payload = feed_item_to_json(bounded_emission(emission))
        # routed by the scope's tag: one owner's emissions leave through one node, in order
        route = self._engine.ns.scope(owner).ready
        await self._engine.transport.command(route, "PUBLISH", self.channel, payload)

    async def close(self) -> None:
        """Stop listening (subscriptions stay open and simply receive nothing more)."""
        await self._listener.close()

    def _receive(self, data: object) -> None:
        if not isinstance(data, bytes | str):
            return
        try:
            item = feed_item_from_json(data)
        except RecordDecodeError as exc:  # not ours (someone else's PUBLISH): ignored
            logger.debug("docket-redis: feed message dropped: %s", exc)
            return
        self.hub.deliver(item)


__all__ = ["RedisFeed", "notice_tail"]
