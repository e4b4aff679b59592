"""The blocking twins of :class:`docket._facade_streams.StreamMethods`, mixed into
:class:`~docket.SyncDocket`: each returns a :class:`SyncDocketStream`, a plain iterator
whose every ``next`` waits on the SyncDocket's loop for the async stream's next item.
``close()`` (or leaving ``with``) releases the feed subscription at once; a stream
dropped without closing is closed when it is garbage collected, and any left open when
the SyncDocket closes end with its loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from docket._facade_streams import DocketStream
from docket.errors import RuntimeUnavailable
from docket.records import Emission, Event, EventsPruned

if TYPE_CHECKING:
    from docket._sync import _LoopThread
    from docket.facade import Docket

__all__ = ["SyncDocketStream", "SyncStreamMethods"]

_T = TypeVar("_T")
_I = TypeVar("_I")
_END: Any = object()


class SyncDocketStream(Generic[_I]):
    """The blocking twin of :class:`~docket._facade_streams.DocketStream`: iterate it,
    and ``close()`` it (or use ``with``) when you stop early."""

    def __init__(
        self,
        stream: DocketStream[_I],
        call: Callable[[Callable[[], Awaitable[Any]]], Any],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._stream = stream
        self._call = call
        self._loop = loop
        self._closed = False

    def __iter__(self) -> Iterator[_I]:
        return self

    def __next__(self) -> _I:
        if self._closed:
            raise StopIteration

        async def step() -> Any:
            # StopAsyncIteration cannot cross into the caller's thread as is
            try:
                return await anext(self._stream)
            except StopAsyncIteration:
                return _END

        item = self._call(step)
        if item is _END:
            self._closed = True
            raise StopIteration
        return item  # type: ignore[no-any-return]

    def close(self) -> None:
        """Stop the stream and release its feed subscription; idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(RuntimeUnavailable):  # the SyncDocket closed: gone already
            self._call(self._stream.aclose)

    def __enter__(self) -> SyncDocketStream[_I]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not self._closed and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile
                asyncio.run_coroutine_threadsafe(self._stream.aclose(), self._loop)


class SyncStreamMethods:
    if TYPE_CHECKING:
        docket: Docket

        _loop: _LoopThread | None

        def _call(self, make: Callable[[], Awaitable[_T]]) -> _T: ...

    def _sync_stream(self, make: Callable[[], DocketStream[_I]]) -> SyncDocketStream[_I]:
        async def opened() -> DocketStream[_I]:
            return make()  # on the loop: the arguments are checked here, at the call

        stream = self._call(opened)  # RuntimeUnavailable when the SyncDocket is not open
        assert self._loop is not None
        return SyncDocketStream(stream, self._call, self._loop.loop)

    def stream(
        self,
        run_id: str,
        *,
        after_seq: int = 0,
        emissions: bool = True,
        until_finished: bool = True,
        tenant_id: str | None = None,
    ) -> SyncDocketStream[Event | Emission | EventsPruned]:
        return self._sync_stream(
            lambda: self.docket.stream(
                run_id,
                after_seq=after_seq,
                emissions=emissions,
                until_finished=until_finished,
                tenant_id=tenant_id,
            )
        )

    def stream_scope(
        self,
        *,
        graph_id: str | None = None,
        tenant_id: str | None = None,
        all_tenants: bool = False,
    ) -> SyncDocketStream[Event | Emission]:
        return self._sync_stream(
            lambda: self.docket.stream_scope(
                graph_id=graph_id, tenant_id=tenant_id, all_tenants=all_tenants
            )
        )


def _copy_docstrings() -> None:
    from docket._facade_streams import StreamMethods

    for name, method in vars(SyncStreamMethods).items():
        original = getattr(StreamMethods, name, None)
        if callable(method) and not method.__doc__ and original is not None:
            method.__doc__ = original.__doc__


_copy_docstrings()
