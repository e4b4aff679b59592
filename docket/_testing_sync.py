"""Blocking twins of the inline testing helpers (layer 6): ``docket.testing`` writes each
helper once, as ``*_async``, and derives its blocking twin here, on a fresh event loop of
the calling thread."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

__all__ = ["sync_twin"]

_T = TypeVar("_T")
_P = ParamSpec("_P")


def _run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` on a fresh event loop of this thread (closed afterwards).

    Not ``asyncio.run``: it installs and removes a SIGINT handler on every call, which
    costs more than a whole small run.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise RuntimeError(
            "this helper cannot run inside a running event loop; await its *_async twin instead"
        )
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
    if not leftovers:
        return
    for task in leftovers:
        task.cancel()
    loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))


def sync_twin(fn: Callable[_P, Coroutine[Any, Any, _T]]) -> Callable[_P, _T]:
    """The blocking twin of an ``*_async`` helper, with the same signature."""

    @functools.wraps(fn)
    def blocking(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return _run_sync(fn(*args, **kwargs))

    blocking.__name__ = blocking.__qualname__ = fn.__name__.removesuffix("_async")
    blocking.__doc__ = f"Blocking twin of :func:`{fn.__name__}` (same arguments).\n\n{fn.__doc__}"
    return blocking
