"""A server's clock, read over the network now and then and carried forward locally.

A server backend's ``now()`` is its database's clock (the one ``claim_due`` compares wakes
with). Reading it costs a round trip, and the worker wants it at every superstep; on a
busy worker that read is a large share of all the statements it sends. :class:`SampledClock`
reads the server's clock at most once per ``resync`` seconds and, between reads, adds the
local *monotonic* time elapsed since the last read. It stays the server's clock: the local
wall clock is never consulted (a skewed or stepped host clock changes nothing). A reading
is anchored at the moment the server's answer arrived, so it lags the server's clock by
at most one round trip and never runs ahead of it (but for the drift of the local
monotonic clock over ``resync`` seconds: parts per million) — far below any timer or TTL
docket uses. Right after a read it *is* the server's answer, as a direct read would be.

Within one process the readings never go backwards by less than ``_STEP``: a re-read that
lands a little behind the carried-forward estimate (round-trip noise) is held at the last
reading instead. A larger step back is the server's clock really being set back, and is
followed, as a direct read would.

A re-read that fails with a retryable store error (a connection the server dropped, a
restart) is not the caller's problem while the last reading is younger than ``hold``
seconds: the anchor is carried forward a little longer, and the next call reads again.
A worker that has executed a node must not throw the work away because the clock could
not be re-read; its commit meets the outage, and retries, on its own.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from docket.contract.errors import StoreError
from docket.values import utc

#: A re-read this far behind the last reading is taken as the server's clock being set back.
_STEP = timedelta(seconds=1)

__all__ = ["SampledClock"]


class SampledClock:
    """``await clock.now()``: the server's time, read at most every ``resync`` seconds."""

    def __init__(
        self,
        read: Callable[[], Awaitable[datetime]],
        *,
        resync: float = 1.0,
        hold: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not resync >= 0:
            raise ValueError(f"resync must be a number of seconds >= 0, got {resync!r}")
        if not hold >= 0:
            raise ValueError(f"hold must be a number of seconds >= 0, got {hold!r}")
        self._hold = float(hold)
        self._read = read
        self._resync = float(resync)
        self._monotonic = monotonic
        self._anchor: tuple[datetime, float] | None = None  # (server time, local monotonic)
        self._last: datetime | None = None

    async def now(self) -> datetime:
        anchor, local = self._anchor, self._monotonic()
        if anchor is None or local - anchor[1] >= self._resync:
            try:
                server = utc(await self._read())
            except StoreError as exc:
                if anchor is None or not exc.retryable or local - anchor[1] >= self._hold:
                    raise
            else:
                local = self._monotonic()
                anchor = self._anchor = (server, local)
        reading = anchor[0] + timedelta(seconds=local - anchor[1])
        last = self._last
        if last is not None and last - _STEP < reading < last:
            reading = last
        self._last = reading
        return reading
