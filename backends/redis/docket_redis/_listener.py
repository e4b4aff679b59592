"""``ChannelListener``: one pub/sub subscription a backend keeps open while it runs.

A backend listens on two channels, ``<prefix>:wake`` (work became due: wake the
``wait_for_work`` callers) and ``<prefix>:feed`` (commit notices and emissions for
streams). Both need the same loop, kept here once:

* subscribe on a dedicated connection (``Transport.subscriber``: no socket timeout,
  since a quiet channel is not a dead one), and say when the subscription is confirmed;
* hand each message's data to ``on_message``;
* when the connection is lost, subscribe again with backoff and, once back, call
  ``on_resubscribed`` (messages may have been missed meanwhile);
* stop when cancelled, even if the driver swallowed the cancellation while it waited
  on its socket (:func:`~docket_redis.transport.keep_cancel`): ``close`` closes the
  connection under it as a last resort.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from redis.asyncio import Redis

from docket_redis.transport import Transport, cancel_requests

logger = logging.getLogger("docket_redis")

#: How long ``ensure`` waits for the subscription to be confirmed.
SUBSCRIBE_TIMEOUT = 10.0
#: How long ``close`` waits for the loop to stop before closing its connection.
CLOSE_WAIT = 2.0


class ChannelListener:
    """Keeps one subscription to ``channel``; see the module's docs."""

    def __init__(
        self,
        transport: Callable[[], Transport],
        channel: Callable[[], str],
        *,
        name: str,
        on_message: Callable[[object], None],
        on_resubscribed: Callable[[], None],
    ) -> None:
        self._transport = transport
        self._channel = channel
        self._name = name
        self._on_message = on_message
        self._on_resubscribed = on_resubscribed
        self._task: asyncio.Task[None] | None = None
        self._subscribed: asyncio.Event | None = None
        self._client: Redis | None = None

    async def ensure(self, timeout: float = SUBSCRIBE_TIMEOUT) -> bool:
        """Start listening if not yet; whether the subscription is confirmed within
        ``timeout`` seconds."""
        if self._task is None or self._task.done():
            self._subscribed = asyncio.Event()
            self._task = asyncio.create_task(self._listen(self._subscribed), name=self._name)
        subscribed = self._subscribed
        assert subscribed is not None
        if subscribed.is_set():
            return True
        try:
            async with asyncio.timeout(timeout):  # 3.11's wait_for can lose a cancel
                await subscribed.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Stop listening (idempotent)."""
        task, self._task = self._task, None
        self._subscribed = None
        if task is None or task.done():
            return
        task.cancel()
        _, pending = await asyncio.wait({task}, timeout=CLOSE_WAIT)
        if pending:  # the driver lost the cancel while blocked on its socket: cut it
            client = self._client
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.aclose()
            task.cancel()
            await asyncio.wait({task}, timeout=CLOSE_WAIT)

    async def _listen(self, subscribed: asyncio.Event) -> None:
        delay = 0.05
        first = True
        while True:
            client: Redis = self._transport().subscriber()
            self._client = client
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(self._channel())
                async for message in pubsub.listen():
                    if cancel_requests():  # a cancel the driver swallowed
                        raise asyncio.CancelledError
                    kind = message.get("type")
                    if kind in ("subscribe", b"subscribe"):
                        subscribed.set()
                        delay = 0.05
                        if not first:
                            self._on_resubscribed()
                        first = False
                    elif kind in ("message", b"message"):
                        self._on_message(message.get("data"))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.debug("docket-redis: %s: subscription lost: %r", self._name, exc)
            finally:
                subscribed.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
                with contextlib.suppress(Exception):
                    await client.aclose()
                self._client = None
            if cancel_requests():
                raise asyncio.CancelledError
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


__all__ = ["CLOSE_WAIT", "SUBSCRIBE_TIMEOUT", "ChannelListener"]
