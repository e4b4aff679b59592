"""The run page's live feed: ``GET /runs/{run_id}/live``, a server-sent-events stream.

It relays :meth:`Docket.stream <docket.facade.Docket.stream>` (committed events read from
the store after a cursor, and the nodes' emissions) to the browser:

- a committed event is an SSE ``event: event`` with ``id:`` its seq, so the browser's
  ``EventSource`` resumes after the last one it saw (its ``Last-Event-ID`` header wins
  over the ``?after=`` the page first asked for): no gap, no duplicate;
- an emission is ``event: emission`` *without* an id (it is not stored, so it cannot be
  resumed from and must not move the cursor);
- events retention removed before they were read are one ``event: pruned`` whose id is
  the last removed seq;
- when the run is terminal and every event was sent, ``event: end`` (the page closes its
  ``EventSource``, which would otherwise reconnect) and the response ends.

The response also ends when the client goes away: Starlette cancels the response on
disconnect, and a comment line every :data:`HEARTBEAT` seconds makes a silent dead
connection fail a write (and keeps proxies from timing an idle stream out). Either way
the facade's stream is closed, which releases its feed subscription.

An event's payload can be a whole state (a checkpoint's base copy), so the browser gets
a one-line summary and, only when it is small, the pretty-printed payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from docket.records import Emission, Event, EventsPruned
from docket.values import JSONDict

if TYPE_CHECKING:
    from docket.ui.app import Console

__all__ = ["HEARTBEAT", "live", "open_streams"]

#: Seconds between keep-alive comments on an idle stream.
HEARTBEAT: Final = 15.0
_PRETTY_LIMIT: Final = 8 * 1024  # payloads larger than this are summarised only
_RETRY_MS: Final = 2000  # how soon the browser reconnects after a broken connection
_END: Final = object()
_open = 0  # streams being served now (tests wait on it reaching zero after a disconnect)


def open_streams() -> int:
    """How many live streams this process is serving now."""
    return _open


def _resume_point(request: Request) -> int:
    """Where the stream starts: ``Last-Event-ID`` (a reconnecting ``EventSource``), else
    ``?after=``, else the run's first event."""
    from docket.ui.app import _Refused

    for text, name in (
        (request.headers.get("last-event-id"), "Last-Event-ID"),
        (request.query_params.get("after"), "after"),
    ):
        if text is None or text == "":
            continue
        if not text.isdigit() or len(text) > 18:
            raise _Refused(400, f"bad {name} {text!r}: an event seq (a whole number) is needed")
        return int(text)
    return 0


def _event_doc(event: Event) -> JSONDict:
    from docket.ui.app import _pretty, _short

    doc: JSONDict = {
        "seq": event.seq,
        "type": str(event.type),
        "step": event.step,
        "time": event.timestamp.strftime("%H:%M:%S.%f")[:-3],
        "node_id": event.node_id,
        "channel_id": event.channel_id,
        "summary": _short(event.payload, 70) if event.payload else "",
    }
    if event.payload:
        pretty = _pretty(event.payload)
        doc["pretty"] = pretty if len(pretty) <= _PRETTY_LIMIT else None
    error = event.payload.get("error") if str(event.type) == "node_failed" else None
    if isinstance(error, dict):
        doc["error"] = {
            "type": str(error.get("type", "")),
            "message": str(error.get("message", "")),
        }
    return doc


def _frame(kind: str, doc: JSONDict, ident: int | None = None) -> bytes:
    data = json.dumps(doc, ensure_ascii=False, separators=(",", ":"), default=str)
    head = f"id: {ident}\n" if ident is not None else ""
    return f"{head}event: {kind}\ndata: {data}\n\n".encode()


def _encode(item: object) -> bytes:
    if isinstance(item, Event):
        return _frame("event", _event_doc(item), item.seq)
    if isinstance(item, Emission):
        doc: JSONDict = {
            "node_id": item.node_id,
            "task_id": item.task_id,
            "attempt": item.attempt,
            "seq": item.seq,
            "kind": item.kind,
            "data": item.data,
        }
        return _frame("emission", doc)
    if isinstance(item, EventsPruned):
        pruned: JSONDict = {"first_seq": item.first_seq, "last_seq": item.last_seq}
        return _frame("pruned", pruned, item.last_seq)
    return b""  # a kind this page does not know yet: skipped, the stream goes on


class _Failed:
    def __init__(self, error: Exception) -> None:
        self.error = error


async def _relay(
    stream: AsyncIterator[object], request: Request, heartbeat: float
) -> AsyncIterator[bytes]:
    """``stream`` as SSE frames, with keep-alives; closes ``stream`` however it ends."""
    global _open
    _open += 1
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=256)

    async def pump() -> None:
        try:
            async for item in stream:
                await queue.put(item)
        except Exception as exc:  # reported to the page; its EventSource reconnects
            await queue.put(_Failed(exc))
        else:
            await queue.put(_END)

    # the stream is read by its own task so a keep-alive can be written while it waits
    task = asyncio.create_task(pump(), name="docket-ui-live")
    try:
        yield f"retry: {_RETRY_MS}\n\n".encode()
        while True:
            try:
                async with asyncio.timeout(heartbeat):  # 3.11's wait_for can lose a cancel
                    item = await queue.get()
            except TimeoutError:
                if await request.is_disconnected():
                    break
                yield b": keep-alive\n\n"
                continue
            if item is _END:
                yield _frame("end", {})
                break
            if isinstance(item, _Failed):
                yield _frame("failed", {"message": str(item.error)})
                break
            yield _encode(item)
    finally:
        _open -= 1
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        closer = getattr(stream, "aclose", None)
        if closer is not None:
            with contextlib.suppress(Exception):
                await closer()


async def live(console: Console, request: Request) -> Response:
    """The SSE stream of one run (404 before streaming when the run is not the tenant's)."""
    from docket.ui.app import _SECURITY_HEADERS, _path_id

    run_id = _path_id(request, "run_id")
    tenant = console._tenant(request, needed=True)
    after = _resume_point(request)
    await console.docket.fetch_run(run_id, tenant_id=tenant)  # NotFound -> a 404 page
    stream = console.docket.stream(
        run_id, after_seq=after, emissions=True, until_finished=True, tenant_id=tenant
    )
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no", **_SECURITY_HEADERS}
    return StreamingResponse(
        _relay(stream, request, HEARTBEAT), media_type="text/event-stream", headers=headers
    )
