"""What the four stores of one ``RedisBackend`` share: the transport, the clock,
wake-ups and the way scripts are sent.

* **Transport.** One :class:`~docket_redis.transport.Transport` (a single server or a
  cluster) carries every command and script; ``close()`` swaps in a fresh, unstarted
  one so the backend can be opened again.
* **One clock.** The Redis server's ``TIME``, read inside each script, stamps and
  compares every operational time — the clock of the primary holding the run's slot.
  An explicit ``now`` (the contract's testing seam) or a ``clock=`` given at creation
  (for test suites only) is sent in ``ARGV`` instead (:meth:`RedisEngine.now_arg`).
* **Wake-ups.** Scripts that make work due ``PUBLISH`` on ``<prefix>:wake``; every open
  backend keeps one subscription and wakes its ``wait_for_work`` callers. Polling stays
  the fallback (a lost subscription is re-established, and waiters are woken then).
* **Group commit.** Commits and run starts each go through a
  :class:`~docket.contract.grouping.GroupCommit` (when ``commit_lanes`` > 0): calls
  queued while the lanes are busy go out as one pipeline per node.
* **Scope registry.** ``claim_due`` and ``SYSTEM`` listings visit every owner scope
  recorded in ``<prefix>:scopes`` (:meth:`RedisEngine.register`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from docket.contract import Limits
from docket.contract.clock import SampledClock
from docket.contract.grouping import GroupCommit
from docket.values import from_micros, to_micros, utc
from docket_redis._codec import text
from docket_redis._documents import KnownDocuments
from docket_redis._listener import ChannelListener
from docket_redis.errors import StoreError
from docket_redis.keys import Namespace, ScopeKeys
from docket_redis.transport import (
    ClusterTransport,
    Script,
    SingleTransport,
    Transport,
    load_scripts,
)
from docket_redis.url import Target

logger = logging.getLogger("docket_redis")

Clock = Callable[[], datetime]
#: One script call: its keys and its arguments.
Call = tuple[list[str], list[str | bytes]]


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class RedisEngine:
    """The shared state of one backend: built by ``RedisBackend``, used by its stores.

    ``clock_resync`` and ``commit_lanes`` arrive checked (see ``RedisBackend``)."""

    def __init__(
        self,
        target: Target,
        *,
        clock: Clock | None,
        limits: Limits,
        driver_options: Mapping[str, Any],
        clock_resync: float,
        commit_lanes: int,
    ) -> None:
        self.target = target
        self.ns = Namespace(target.prefix)
        self.clock = clock
        self.limits = limits
        self._driver_options = dict(driver_options)
        self._scripts = load_scripts()
        self.transport = self._new_transport()
        #: Scope parts known to be in the registry (no need to register them again).
        self.registered: set[str] = set()
        #: Long documents last stored or read, for commits that send only changed pieces.
        self.documents = KnownDocuments()
        self.opened = False
        self._waiters: set[asyncio.Future[None]] = set()
        self._listener = ChannelListener(
            lambda: self.transport,
            lambda: self.ns.channel,
            name=f"docket-redis-wake:{self.ns.prefix}",
            on_message=lambda _data: self.wake_all(),
            on_resubscribed=self.wake_all,  # announcements may have been missed meanwhile
        )
        self._server_clock = SampledClock(self.read_clock, resync=clock_resync)
        # commits and run starts, each grouped apart (0 lanes: every call is sent alone)
        self.commits = self._grouping("commit", commit_lanes)
        self.starts = self._grouping("initialize", commit_lanes)

    def _new_transport(self) -> Transport:
        # RESP2: the replies this package parses have one shape across driver versions
        options = {"socket_connect_timeout": 10.0, "protocol": 2, **self._driver_options}
        if self.target.cluster:
            return ClusterTransport(self.target.url, options)
        return SingleTransport(self.target.url, options)

    def describe(self) -> str:
        """Where this backend's keys live, for error messages."""
        return f"{self.target.describe()} prefix {self.ns.prefix!r}"

    async def close(self) -> None:
        """Stop listening, let writes in flight finish, close every connection."""
        await self._listener.close()
        for group in (self.commits, self.starts):
            if group is not None:
                await group.drain()  # writes in flight get their answers first
        transport, self.transport = self.transport, self._new_transport()
        self.opened = False
        with contextlib.suppress(Exception):
            await transport.close()
        self.wake_all()  # nobody is left to announce work: let waiters go and poll

    # -- clock ------------------------------------------------------------------------------

    async def now(self) -> datetime:
        if self.clock is not None:
            return utc(self.clock())
        return await self.read_clock()

    async def sampled_now(self) -> datetime:
        if self.clock is not None:
            return utc(self.clock())
        return await self._server_clock.now()

    async def read_clock(self) -> datetime:
        return await self.server_time(self.ns.registry)

    async def server_time(self, routing_key: str) -> datetime:
        """``TIME`` of the primary holding ``routing_key``'s slot."""
        reply = await self.transport.command(routing_key, "TIME")
        seconds, micros = (int(text(part)) for part in reply)
        return from_micros(seconds * 1_000_000 + micros)

    def now_arg(self, given: datetime | None) -> str:
        """What a script gets as ``now``: explicit, the test clock, or '' for ``TIME``."""
        if given is not None:
            return str(to_micros(utc(given)))
        if self.clock is not None:
            return str(to_micros(utc(self.clock())))
        return ""

    # -- wake-ups ---------------------------------------------------------------------------

    async def wait_for_work(self, timeout: float) -> bool:
        await self.ensure_listener()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiters.add(future)
        try:
            async with asyncio.timeout(timeout):  # 3.11's wait_for can lose a cancel
                await future
            return True
        except TimeoutError:
            return False
        finally:
            self._waiters.discard(future)

    def wake_all(self) -> None:
        for future in list(self._waiters):
            _resolve(future)

    async def ensure_listener(self) -> None:
        """Start the wake-up subscription; polling covers a subscription not yet there."""
        await self._listener.ensure()

    # -- scripts ----------------------------------------------------------------------------

    async def eval(self, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Any:
        """Run script ``name`` (``lua/<name>.lua``) on the node of its first key."""
        script: Script = self._scripts[name]
        return await self.transport.eval(script, keys, args)

    def _grouping(self, name: str, lanes: int) -> GroupCommit[Call, Any] | None:
        """Group commit for script ``name``: calls of several runs, pipelined per node."""
        if not lanes:
            return None

        async def send(calls: list[Call]) -> list[Any]:
            if len(calls) == 1:
                try:
                    return [await self.eval(name, *calls[0])]
                except StoreError as exc:
                    return [exc]
            return await self.transport.eval_many(self._scripts[name], calls)

        return GroupCommit(send, lanes=lanes, limit=32)

    async def grouped(self, group: GroupCommit[Call, Any] | None, name: str, call: Call) -> Any:
        """Run script ``name`` for ``call``, through ``group`` when grouping is on."""
        if group is None:
            return await self.eval(name, *call)
        reply = await group.submit(call)
        if isinstance(reply, StoreError):
            raise reply
        return reply

    async def register(self, scope: ScopeKeys, *, order: bool) -> int:
        """Record the scope (claims and SYSTEM listings visit it); maybe take an order."""
        if not order and scope.part in self.registered:
            return 0
        reply = await self.eval(
            "register",
            [self.ns.registry, self.ns.order],
            [scope.part, "1" if order else "0"],
        )
        self.registered.add(scope.part)
        return int(reply)

    async def scopes(self) -> list[ScopeKeys]:
        """Every registered owner scope, in a stable order."""
        parts = await self.transport.command(self.ns.registry, "SMEMBERS", self.ns.registry)
        return [self.ns.scope_of_part(text(part)) for part in sorted(parts)]
