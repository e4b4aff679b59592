"""The facade's streams: :class:`StreamMethods`, mixed into :class:`~docket.Docket`.

``stream`` follows one run (its committed events, resumable with ``after_seq``, and the
emissions its nodes send); ``stream_scope`` follows every run of a tenant (or all of
them) that commits while it is open. Both hand back a :class:`DocketStream`: an async
iterator that also closes (``aclose``, ``async with``), so a reader that stops early
releases its feed subscription at once rather than when the garbage collector gets to
it. The work is in :mod:`docket.runtime.streams`; docs/streams.md has the rules.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Generic, TypeVar

from docket._facade_args import require_id
from docket._facade_time import require_feature
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.protocols import Backend, EventFeed
from docket.errors import InvalidOptions, InvalidTenant
from docket.records import (
    SYSTEM,
    TENANTLESS,
    Emission,
    Event,
    EventsPruned,
    OwnerScope,
    Scope,
    Tenant,
)
from docket.runtime.streams import StreamTimes, follow_run, follow_scope

__all__ = ["DocketStream", "StreamMethods"]

_I = TypeVar("_I")


class DocketStream(Generic[_I]):
    """What :meth:`Docket.stream` and :meth:`Docket.stream_scope` return: an async
    iterator of stream items. Close it when you stop early (``await stream.aclose()``,
    or ``async with docket.stream(run_id) as stream:``); iterating to the end closes
    it too."""

    def __init__(self, items: AsyncIterator[_I]) -> None:
        self._items = items
        self._closed = False

    def __aiter__(self) -> DocketStream[_I]:
        return self

    async def __anext__(self) -> _I:
        if self._closed:
            raise StopAsyncIteration
        try:
            return await anext(self._items)
        except BaseException:
            await self.aclose()  # ended, failed or cancelled: the subscription goes now
            raise

    async def aclose(self) -> None:
        """Stop the stream and release its feed subscription; idempotent."""
        if self._closed:
            return
        self._closed = True
        closer = getattr(self._items, "aclose", None)
        if closer is not None:
            await closer()

    async def __aenter__(self) -> DocketStream[_I]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _owner_of(tenant_id: str | None) -> OwnerScope:
    return TENANTLESS if tenant_id is None else Tenant(tenant_id)


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidOptions(f"{name} must be True or False, got {value!r}")
    return value


class StreamMethods:
    """The stream methods of :class:`~docket.Docket` (which provides what is declared
    under ``TYPE_CHECKING``)."""

    if TYPE_CHECKING:
        _store: Backend

        @property
        def capabilities(self) -> Capabilities: ...
        def _owner(self, tenant_id: object) -> OwnerScope: ...
        def _ready(self) -> None: ...

    #: The waits of the streams this Docket opens (tests shorten them).
    stream_times: StreamTimes = StreamTimes()

    def _feed(self) -> EventFeed | None:
        if Feature.STREAMS not in self.capabilities.features:
            return None
        feed: EventFeed = getattr(self._store, "feed")  # noqa: B009 (declared optional store)
        return feed

    def stream(
        self,
        run_id: str,
        *,
        after_seq: int = 0,
        emissions: bool = True,
        until_finished: bool = True,
        tenant_id: str | None = None,
    ) -> DocketStream[Event | Emission | EventsPruned]:
        """Follow a run: its committed events after ``after_seq``, in order and each once,
        and (with ``emissions``) what its nodes send with ``ctx.emit`` as it arrives.

        Events retention removed before they were read come as one
        :class:`~docket.records.EventsPruned`. With ``until_finished`` the stream ends
        once the run is terminal and every event was yielded; otherwise it follows the run
        until closed. Resume after a disconnect with ``after_seq`` = the last event's
        ``seq``: no gap, no duplicate. A backend that declares ``streams`` pushes; on one
        that does not, the stream polls (50 ms to 1 s). ``NotFound`` (on the first
        ``anext``) when there is no such run.
        """
        owner = self._owner(tenant_id)
        self._ready()
        require_id("run_id", run_id)
        if not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < 0:
            raise InvalidOptions(f"after_seq must be an integer >= 0, got {after_seq!r}")
        return DocketStream(
            follow_run(
                self._store,
                owner,
                run_id,
                feed=self._feed(),
                after_seq=after_seq,
                emissions=_bool("emissions", emissions),
                until_finished=_bool("until_finished", until_finished),
                times=self.stream_times,
            )
        )

    def stream_scope(
        self,
        *,
        graph_id: str | None = None,
        tenant_id: str | None = None,
        all_tenants: bool = False,
    ) -> DocketStream[Event | Emission]:
        """Follow every run of the tenant (of ``graph_id`` when given; every tenant's with
        ``all_tenants=True``): the events each commits after the stream started, and the
        emissions of its nodes. Runs until closed. Needs a backend that declares
        ``streams`` (``Unsupported`` otherwise)."""
        scope: Scope
        if _bool("all_tenants", all_tenants):
            if tenant_id is not None:
                raise InvalidTenant("all_tenants=True follows every tenant: drop tenant_id")
            scope = SYSTEM
        else:
            scope = self._owner(tenant_id)
        self._ready()
        if graph_id is not None:
            require_id("graph_id", graph_id)
        require_feature(self.capabilities, Feature.STREAMS, "stream_scope")
        feed = self._feed()
        assert feed is not None
        return DocketStream(
            follow_scope(
                self._store,
                scope,
                feed,
                graph_id=graph_id,
                owner_of=_owner_of,
                times=self.stream_times,
            )
        )
