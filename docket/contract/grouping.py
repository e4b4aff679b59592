"""Group commit for server backends: writes that queue up while the store is busy go together.

A busy worker sends one commit per superstep per run; on a server backend each is a
statement or script with its own round trip and its own client-side cost (encoding the
call, taking a pooled connection, waiting for the reply). :class:`GroupCommit` keeps at
most ``lanes`` sends in flight. A write that finds a lane free goes at once, so an idle
store adds no latency — with the writes submitted in the same turn of the event loop, as
a lane takes its batch only when its task first runs; writes that arrive while every lane
is busy queue, and the next free lane sends up to ``limit`` of them as one batch. The
busier the store, the larger the batches, the lower the cost per write.

What a batch means is the backend's business (one statement applying each write as it
would alone, say); this class only groups and answers. A batch is sent by its own task, so
a caller that is cancelled while waiting never cancels the other writes of its batch (its
own write may still be applied: the same ambiguity as a cancelled single write, which
transition ids resolve on resend).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from docket.contract.errors import Retryable, TransitionResult

if TYPE_CHECKING:
    from docket.contract.proposals import ClaimedProposal
    from docket.contract.protocols import TransitionStore
    from docket.records import Event, OwnerScope

A = TypeVar("A")
R = TypeVar("R")

__all__ = ["GroupCommit", "commit_claimed_in_order"]


class GroupCommit(Generic[A, R]):
    """``await group.submit(write)`` → that write's answer, sent alone or in a batch.

    ``send`` takes a non-empty list of writes and returns one answer per write, in order;
    if it raises, every write of that batch gets the exception. ``batches`` counts the
    batches sent by size (size 1: a write that went alone).
    """

    def __init__(
        self,
        send: Callable[[list[A]], Awaitable[Sequence[R]]],
        *,
        lanes: int = 2,
        limit: int = 32,
    ) -> None:
        for name, value in (("lanes", lanes), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self._send = send
        self._lanes = lanes
        self._limit = limit
        self._queue: list[tuple[A, asyncio.Future[R]]] = []
        self._busy = 0
        self._taking = 0  # lanes started that have not taken their batch yet
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches: Counter[int] = Counter()

    @property
    def lanes(self) -> int:
        return self._lanes

    async def submit(self, write: A) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((write, future))
        self._start()
        return await future

    async def drain(self) -> None:
        """Wait until every batch in flight has been answered (before closing the store)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _start(self) -> None:
        # A started lane takes its batch only when its task first runs: writes submitted
        # meanwhile (in the same turn of the event loop) join it instead of queueing
        # behind it, at no extra latency (the task would first run then anyway).
        while self._busy < self._lanes and len(self._queue) > self._taking * self._limit:
            self._busy += 1
            self._taking += 1
            task = asyncio.get_running_loop().create_task(self._flush())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _flush(self) -> None:
        self._taking -= 1
        batch, self._queue = self._queue[: self._limit], self._queue[self._limit :]
        if not batch:  # an earlier lane took them all
            self._busy -= 1
            return
        self.batches[len(batch)] += 1
        try:
            answers = await self._send([write for write, _ in batch])
            if len(answers) != len(batch):
                raise RuntimeError(f"a batch of {len(batch)} writes got {len(answers)} answers")
        except BaseException as exc:  # every waiter of the batch must hear of it
            for _, future in batch:
                if future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            for (_, future), answer in zip(batch, answers, strict=True):
                if not future.done():
                    future.set_result(answer)
        finally:
            self._busy -= 1
            self._start()


async def commit_claimed_in_order(
    store: TransitionStore,
    owner: OwnerScope,
    commits: Sequence[tuple[ClaimedProposal, Sequence[Event]]],
) -> list[TransitionResult]:
    """``ChainedCommits.commit_claimed_chain`` for a store that applies writes in the order
    they are submitted: each commit goes through ``store.commit_claimed`` (so a subclass's
    own checks still apply), all started in this turn of the event loop, in order — one
    batch of a :class:`GroupCommit` when they fit in it, answered together. A commit that
    raised is answered ``Retryable`` (its outcome is unknown; resending it resolves it)."""
    started = [asyncio.ensure_future(store.commit_claimed(owner, p, e)) for p, e in commits]
    answers = await asyncio.gather(*started, return_exceptions=True)
    out: list[TransitionResult] = []
    for answer in answers:
        if isinstance(answer, (TypeError, ValueError, AssertionError)):
            raise answer  # a programming error, as commit_claimed would raise it
        if isinstance(answer, BaseException):
            if not isinstance(answer, Exception):
                raise answer
            out.append(Retryable(f"outcome unknown: {type(answer).__name__}: {answer}"))
        else:
            out.append(answer)
    return out
